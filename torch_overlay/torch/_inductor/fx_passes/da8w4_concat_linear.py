"""
Concat-linear for ``torchao::da8w4_linear_cpu`` (dynamic int8 activation, int4
weight) on CPU.

With ``Int8DynamicActivationInt4WeightConfig`` a transformer layer quantizes
its activation once (after freezing's CSE) and then calls
``torchao::da8w4_linear_cpu`` several times on it: Q, K and V; gate and up.
Every call re-reads the quantized activation and starts and joins its threads,
so one call on weights concatenated along N followed by a split saves that
per-call cost.  Fused and separate calls read the same packed bytes and do the
same work, so that fixed cost is all it saves: small against a decode step,
which streams the weights from memory, and less at larger M.  The pass's value
is that it composes with other passes (one named, removable registration, the
FX graph cache kept) and emits correct, bit-identical graphs, not speed.

This pass rewrites::

    y_i = da8w4_linear_cpu(x, xs, xz, w_i, ws_i, wz_i, comp_i, b_i, dtype)

for two or more calls sharing ``x``, ``xs`` and ``xz`` into::

    y = da8w4_linear_cpu(x, xs, xz, cat(w_i), cat(ws_i), cat(wz_i),
                         cat(comp_i), cat(b_i), dtype)
    y_0, y_1, ... = split_with_sizes(y, [N_0, N_1, ...], -1)

The packed operands are blocked along N in tiles of ``BN`` output channels
(weight ``[N/BN, K/BK, BK, BN/2]``, scales and zero points ``[N/BN, G, BN]``,
compensation ``[N/BN, K/BK, BN]``) and every output channel is computed
independently of the others, so concatenating along dim 0 gives exactly the
same numbers as the separate calls.  This holds for every packed layout the
op uses (the AMX VNNI layout, the plain nibble layout, an int8-marked one),
because they only permute bytes inside one N tile.

It runs in post-grad, only with freezing (the packed weights must be constants,
i.e. ``get_attr`` nodes) and ``config.cpp.enable_concat_linear``.

Decisions:

* Calls are grouped by (activation, scales, zero points, output dtype, weight
  dtype, BK, K/BK, G, BN), so weights of different layouts never meet.
  Compatible subsets are fused even if the activation has other users (other
  linears, residual adds ...).
* Bias on some calls and not on others: the group is still fused, with zeros
  for the calls without bias.  The kernel starts its fp32 accumulator at
  ``bias[n]`` or at ``+0.0``, and ``+0.0 + x == x`` exactly, so this is
  bit-for-bit equal to the separate calls.
* The split outputs are strided views of the fused output.  A view is handed
  to a consumer only when that consumer (and, through view ops, everything
  reading the same storage) is an ATen op whose meaning does not depend on the
  layout of its input; graph outputs, custom ops and ``as_strided``-like ops
  get one contiguous ``clone`` instead.
* A compatible group is declined when the contiguous copies its split outputs
  would need cost more than the calls it saves (``SAVED_BYTES_PER_CALL`` per
  saved call, on the size hint of M, scaled by threads / 2 from 2 threads
  up): QKV returned as graph outputs fuses at small M only; gate/up read in
  place fuses.
* A group with ``MAX_FUSED_ROWS`` rows or more is declined whatever its
  copies: the saved calls are a fixed cost against much more work there.
* The old constants are removed from the graph module once nothing uses them,
  so the frozen module does not keep the unfused copies alive next to the
  concatenated ones.
"""

from __future__ import annotations

import logging
import operator
import os
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import torch
from torch._dynamo.utils import counters
from torch._guards import detect_fake_mode
from torch.fx.operator_schemas import normalize_function
from torch.utils._ordered_set import OrderedSet

from .. import config
from ..custom_graph_pass import CustomGraphPass, get_hash_for_files


try:
    from torch.fx.experimental.symbolic_shapes import optimization_hint
except ImportError:  # the same helper under its earlier name
    from torch.fx.experimental.symbolic_shapes import (  # type: ignore[attr-defined,no-redef]
        size_hint as optimization_hint,
    )


log = logging.getLogger(__name__)
aten = torch.ops.aten

# da8w4_linear_cpu(Tensor input, Tensor input_scales, Tensor input_qzeros,
#     Tensor weight, Tensor weight_scales, Tensor weight_qzeros,
#     Tensor compensation, Tensor? bias, ScalarType output_dtype) -> Tensor
_ARG_NAMES = (
    "input",
    "input_scales",
    "input_qzeros",
    "weight",
    "weight_scales",
    "weight_qzeros",
    "compensation",
    "bias",
    "output_dtype",
)
# The operands that are concatenated: they must be frozen constants.
_PACKED_ARGS = ("weight", "weight_scales", "weight_qzeros", "compensation")
# The weight holds two int4 values per byte: uint8 in torchao 0.18's layouts, int8
# where a kernel marks another byte order by the dtype (the shape is the same).
_PACKED_DTYPES = {
    "weight": (torch.uint8, torch.int8),
    "weight_scales": (torch.float32,),
    "weight_qzeros": (torch.int8,),
    "compensation": (torch.int32,),
}
_OUTPUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

# Consumers whose result depends on the storage layout of their input: they
# never get a strided view of the fused output.
_LAYOUT_SENSITIVE_OPS = OrderedSet(
    [
        aten.as_strided.default,
        aten.as_strided_.default,
        aten.as_strided_scatter.default,
        aten.resize.default,
        aten.resize_.default,
        aten.resize_as.default,
        aten.resize_as_.default,
        aten.set_.source_Tensor,
    ]
)
_MAX_VIEW_CHAIN = 8


def _da8w4_linear_op() -> torch._ops.OpOverload | None:
    try:
        return torch.ops.torchao.da8w4_linear_cpu.default
    except (AttributeError, RuntimeError):
        return None


def _normalize_args(node: torch.fx.Node) -> dict[str, Any] | None:
    """The call's arguments by schema name (``normalize_function``), or None
    if they do not bind to the schema this pass knows."""
    bound = normalize_function(
        node.target,  # type: ignore[arg-type]
        node.args,
        node.kwargs,
        normalize_to_only_use_kwargs=True,
    )
    if bound is None or tuple(bound.kwargs) != _ARG_NAMES:
        return None
    return dict(bound.kwargs)


def _get_attr_tensor(gm: torch.fx.GraphModule, node: Any) -> torch.Tensor | None:
    """The frozen constant behind ``node``, or None if it is not a constant."""
    if not isinstance(node, torch.fx.Node) or node.op != "get_attr":
        return None
    obj: Any = gm
    for atom in str(node.target).split("."):
        obj = getattr(obj, atom, None)
        if obj is None:
            return None
    return obj if isinstance(obj, torch.Tensor) else None


@dataclass
class _Da8w4Linear:
    """One ``da8w4_linear_cpu`` call whose packed operands are frozen constants."""

    node: torch.fx.Node
    args: dict[str, Any]
    out_features: int
    weight_dtype: torch.dtype
    block_k: int
    k_blocks: int
    groups: int
    block_n: int

    @property
    def activation_key(self) -> tuple[Any, ...]:
        return (
            self.args["input"],
            self.args["input_scales"],
            self.args["input_qzeros"],
            self.args["output_dtype"],
            self.weight_dtype,
            self.block_k,
            self.k_blocks,
            self.groups,
            self.block_n,
        )

    @classmethod
    def from_node(
        cls, gm: torch.fx.GraphModule, node: torch.fx.Node
    ) -> _Da8w4Linear | None:
        if not can_concat_da8w4_linear(gm, node):
            return None
        args = _normalize_args(node)
        assert args is not None  # checked by can_concat_da8w4_linear
        wq = _get_attr_tensor(gm, args["weight"])
        ws = _get_attr_tensor(gm, args["weight_scales"])
        assert wq is not None and ws is not None
        n_blocks, k_blocks, block_k, half_bn = wq.shape
        return cls(
            node=node,
            args=args,
            out_features=n_blocks * half_bn * 2,
            weight_dtype=wq.dtype,
            block_k=block_k,
            k_blocks=k_blocks,
            groups=ws.shape[1],
            block_n=half_bn * 2,
        )

    def constant(self, gm: torch.fx.GraphModule, name: str) -> torch.Tensor | None:
        return _get_attr_tensor(gm, self.args[name])


def can_concat_da8w4_linear(gm: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """Is it safe to make ``node`` part of a concatenated call?

    Checks that every operand we concatenate is a frozen constant with the
    packed shapes and dtypes the op defines, and that the shapes agree with
    each other and with the activation.  Cheap; no profitability here.
    """
    args = _normalize_args(node)
    if args is None:
        log.debug("skipping da8w4_concat_linear: cannot bind arguments of %s", node)
        return False
    val = node.meta.get("val")
    act = args["input"]
    act_val = act.meta.get("val") if isinstance(act, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor) or not isinstance(act_val, torch.Tensor):
        log.debug("skipping da8w4_concat_linear: %s has no fake tensor metadata", node)
        return False
    if val.device.type != "cpu" or act_val.device.type != "cpu":
        log.debug("skipping da8w4_concat_linear: %s is not on CPU", node)
        return False
    if args["output_dtype"] not in _OUTPUT_DTYPES or val.dtype != args["output_dtype"]:
        log.debug("skipping da8w4_concat_linear: %s has unsupported output dtype", node)
        return False
    for name in ("input_scales", "input_qzeros"):
        if not isinstance(args[name], torch.fx.Node):
            log.debug(
                "skipping da8w4_concat_linear: %s of %s is not a node", name, node
            )
            return False

    consts: dict[str, torch.Tensor] = {}
    for name in (*_PACKED_ARGS, "bias"):
        if name == "bias" and args["bias"] is None:
            continue
        t = _get_attr_tensor(gm, args[name])
        if t is None:
            log.debug(
                "skipping da8w4_concat_linear: %s of %s is not a frozen constant",
                name,
                node,
            )
            return False
        if t.device.type != "cpu":
            log.debug(
                "skipping da8w4_concat_linear: %s of %s is not on CPU", name, node
            )
            return False
        if name in _PACKED_DTYPES and t.dtype not in _PACKED_DTYPES[name]:
            log.debug(
                "skipping da8w4_concat_linear: %s of %s has dtype %s",
                name,
                node,
                t.dtype,
            )
            return False
        consts[name] = t

    wq = consts["weight"]
    if wq.dim() != 4:
        log.debug("skipping da8w4_concat_linear: weight of %s is not 4-D", node)
        return False
    n_blocks, k_blocks, block_k, half_bn = wq.shape
    block_n = half_bn * 2
    scales = consts["weight_scales"]
    if scales.dim() != 3 or scales.shape[0] != n_blocks or scales.shape[2] != block_n:
        log.debug("skipping da8w4_concat_linear: weight_scales of %s mismatch", node)
        return False
    groups = scales.shape[1]
    if (
        consts["weight_qzeros"].shape != scales.shape
        or tuple(consts["compensation"].shape) != (n_blocks, k_blocks, block_n)
        or groups == 0
        or k_blocks % groups != 0
    ):
        log.debug("skipping da8w4_concat_linear: packed operands of %s mismatch", node)
        return False
    bias = consts.get("bias")
    if bias is not None and (
        bias.dtype != torch.float32 or tuple(bias.shape) != (n_blocks * block_n,)
    ):
        log.debug("skipping da8w4_concat_linear: bias of %s is not fp32 [N]", node)
        return False

    # Leading (M) dims may be dynamic; K must be static.
    if act_val.dim() < 2 or not isinstance(act_val.shape[-1], int):
        log.debug(
            "skipping da8w4_concat_linear: activation of %s is not [..., K]", node
        )
        return False
    if act_val.shape[-1] != k_blocks * block_k:
        log.debug("skipping da8w4_concat_linear: K of %s does not match weight", node)
        return False
    if val.shape[-1] != n_blocks * block_n:
        log.debug("skipping da8w4_concat_linear: N of %s does not match weight", node)
        return False
    return True


# What one avoided call is worth, in bytes of output copy, at 1-2 threads: the
# time a call costs beyond its work, at the speed a split-output clone runs.
# With more threads a saved call is worth more copy bytes, so the figure grows
# with threads / 2 (``saved_bytes_per_call``), conservatively.
SAVED_BYTES_PER_CALL = 128 * 1024


# Rows (the product of M's dims, on its size hint) from which a group is left
# alone even when its split outputs are read in place.  What fusing saves is a
# fixed per-call cost, nothing of the op's work, and from here the fused
# gate/up was slower with many threads (no mechanism was found).
MAX_FUSED_ROWS = 256


def saved_bytes_per_call() -> int:
    """``SAVED_BYTES_PER_CALL`` for the threads the compiled code will use
    (``config.cpp.threads``, else torch's): scaled by threads / 2, never below
    the 1-2 thread figure."""
    from torch._inductor.utils import parallel_num_threads

    return int(SAVED_BYTES_PER_CALL * max(1.0, parallel_num_threads() / 2))


def _rows_hint(linears: list[_Da8w4Linear]) -> int:
    """The group's rows (all leading dims of the activation) on their size
    hints; a dim without one (unbacked) counts as ``MAX_FUSED_ROWS``, so
    such a group is declined."""
    rows = 1
    for d in linears[0].args["input"].meta["val"].shape[:-1]:
        rows *= optimization_hint(d, fallback=MAX_FUSED_ROWS)
    return rows


def _split_copy_bytes(linears: list[_Da8w4Linear], rows: int) -> int:
    """Bytes the fused group would copy: split outputs with a consumer that
    cannot read a view of the fused output (graph outputs, say) get one
    contiguous clone each, of ``rows`` (``_rows_hint``) rows."""
    act_val = linears[0].args["input"].meta["val"]
    fake_mode = detect_fake_mode([act_val])
    assert fake_mode is not None
    dtype = linears[0].args["output_dtype"]
    sizes = [lin.out_features for lin in linears]
    with fake_mode:
        fused = torch.empty(*act_val.shape[:-1], sum(sizes), dtype=dtype)
        items = aten.split_with_sizes.default(fused, sizes, -1)
    copied_features = sum(
        lin.out_features
        for lin, item in zip(linears, items)
        if not all(
            _reads_split_in_place(u, lin.node, item, fake_mode) for u in lin.node.users
        )
    )
    return rows * copied_features * dtype.itemsize


def should_concat_da8w4_linear(linears: list[_Da8w4Linear]) -> bool:
    """Is it worth fusing this compatible group?

    One call instead of several reads the quantized activation once and
    synchronizes the threads once.  Fused and separate calls read the same
    packed weight and do the same work, so that is all fusion saves.  What it
    can cost is the copy of split outputs that a consumer needs contiguous
    (graph outputs, say), which makes large-M groups slower.  So a group is
    fused unless those copies are worth more than the calls it saves
    (``saved_bytes_per_call()``, which grows with the thread count), judged on
    the size hint of M; a split whose outputs are read in place pays, below
    ``MAX_FUSED_ROWS`` rows.
    """
    if len(linears) < 2:
        log.debug(
            "skipping da8w4_concat_linear: %s has no compatible partner",
            linears[0].node,
        )
        return False
    rows = _rows_hint(linears)
    if rows >= MAX_FUSED_ROWS:
        log.debug(
            "skipping da8w4_concat_linear: %s has %d rows, at least the %d from "
            "which the saved calls are noise against the work",
            linears[0].node,
            rows,
            MAX_FUSED_ROWS,
        )
        return False
    copy_bytes = _split_copy_bytes(linears, rows)
    budget = (len(linears) - 1) * saved_bytes_per_call()
    if copy_bytes > budget:
        log.debug(
            "skipping da8w4_concat_linear: split outputs of %s need %d bytes of "
            "copies, more than the %d bytes the saved calls are worth",
            linears[0].node,
            copy_bytes,
            budget,
        )
        return False
    return True


def _reads_split_in_place(
    user: torch.fx.Node, old: torch.fx.Node, item: Any, fake_mode: Any
) -> bool:
    """Can ``user`` of the unfused output ``old`` read the split output ``item``
    as is, or does it need a contiguous copy?  Asked of the consumer, not of
    ``item``'s strides: at one row a split is contiguous, yet a graph output
    must still not share the fused output's storage (eager's do not)."""
    return _view_accepts_strided(user, old, item, fake_mode, 0)


def _view_accepts_strided(
    user: torch.fx.Node, old: torch.fx.Node, new_val: Any, fake_mode: Any, depth: int
) -> bool:
    """Can ``user`` read ``new_val`` (a strided view) in place of ``old``?

    Pointwise, reduction and matmul ATen ops are layout-agnostic.  For view
    ops the check recurses into their users with the new (strided) result,
    rejecting views that would no longer be valid.
    """
    if user.op != "call_function":
        return False
    if user.target is operator.getitem:
        if not isinstance(new_val, (list, tuple)):
            return False
        item = new_val[user.args[1]]  # type: ignore[index]
        return all(
            _view_accepts_strided(u, user, item, fake_mode, depth + 1)
            for u in user.users
        )
    target = user.target
    if not isinstance(target, torch._ops.OpOverload):
        return False
    if target.namespace not in ("aten", "prims") or target in _LAYOUT_SENSITIVE_OPS:
        return False
    if not target.is_view:
        return True
    if depth >= _MAX_VIEW_CHAIN:
        return False

    def fake(a: Any) -> Any:
        if a is old:
            return new_val
        return a.meta.get("val") if isinstance(a, torch.fx.Node) else a

    args, kwargs = torch.utils._pytree.tree_map(fake, (user.args, user.kwargs))
    try:
        with fake_mode:
            out = target(*args, **kwargs)
    except Exception:  # e.g. aten.view on incompatible strides
        return False
    return all(
        _view_accepts_strided(u, user, out, fake_mode, depth + 1) for u in user.users
    )


@dataclass
class Da8w4ConcatLinearMatch:
    """Two or more compatible calls on one activation; owns its rewrite."""

    gm: torch.fx.GraphModule
    linears: list[_Da8w4Linear]

    def __post_init__(self) -> None:
        assert len(self.linears) >= 2
        assert len(OrderedSet(lin.activation_key for lin in self.linears)) == 1

    @property
    def split_sizes(self) -> list[int]:
        return [lin.out_features for lin in self.linears]

    def _concat_constants(self) -> dict[str, torch.Tensor | None]:
        gm = self.gm
        out: dict[str, torch.Tensor | None] = {}
        for name in _PACKED_ARGS:
            parts = [lin.constant(gm, name) for lin in self.linears]
            out[name] = torch.cat(parts, dim=0)  # type: ignore[arg-type]
        biases = [lin.constant(gm, "bias") for lin in self.linears]
        if all(b is None for b in biases):
            out["bias"] = None
        else:
            # Mixed bias: zeros are exact (the accumulator starts at +0.0).
            out["bias"] = torch.cat(
                [
                    b
                    if b is not None
                    else torch.zeros(lin.out_features, dtype=torch.float32)
                    for b, lin in zip(biases, self.linears)
                ]
            )
        return out

    def _new_constant(
        self, name: str, tensor: torch.Tensor, fake_mode: Any
    ) -> torch.fx.Node:
        gm = self.gm
        base = str(self.linears[0].args["weight"].target).replace(".", "_")
        attr = f"{base}_da8w4_concat_{name}"
        i = 0
        while hasattr(gm, attr):
            i += 1
            attr = f"{base}_da8w4_concat_{name}_{i}"
        gm.register_buffer(attr, tensor)
        node = gm.graph.get_attr(attr)
        node.meta["val"] = fake_mode.from_tensor(tensor, static_shapes=True)
        return node

    def replace(self) -> None:
        graph = self.gm.graph
        op = self.linears[0].node.target
        assert callable(op)
        first = self.linears[0].node
        args0 = self.linears[0].args
        act = args0["input"]
        fake_mode = detect_fake_mode([act.meta["val"]])
        assert fake_mode is not None
        consts = self._concat_constants()

        with graph.inserting_before(first):
            new_nodes: dict[str, Any] = {
                name: None
                if tensor is None
                else self._new_constant(name, tensor, fake_mode)
                for name, tensor in consts.items()
            }
            fused_args = tuple(
                new_nodes[name] if name in new_nodes else args0[name]
                for name in _ARG_NAMES
            )
            fused = graph.call_function(op, fused_args)
            fake_args = torch.utils._pytree.tree_map_only(
                torch.fx.Node, lambda n: n.meta["val"], fused_args
            )
            with fake_mode:
                fused.meta["val"] = op(*fake_args)
                split_val = aten.split_with_sizes.default(
                    fused.meta["val"], self.split_sizes, -1
                )
            for key in ("stack_trace", "nn_module_stack"):
                if key in first.meta:
                    fused.meta[key] = first.meta[key]
            split = graph.call_function(
                aten.split_with_sizes.default, (fused, self.split_sizes, -1)
            )
            split.meta["val"] = split_val

            for i, lin in enumerate(self.linears):
                item = graph.call_function(operator.getitem, (split, i))
                item.meta["val"] = split_val[i]
                contiguous: torch.fx.Node | None = None
                for user in list(lin.node.users):
                    if _reads_split_in_place(user, lin.node, split_val[i], fake_mode):
                        user.replace_input_with(lin.node, item)
                        continue
                    if contiguous is None:
                        contiguous = graph.call_function(
                            aten.clone.default,
                            (item,),
                            {"memory_format": torch.contiguous_format},
                        )
                        with fake_mode:
                            contiguous.meta["val"] = aten.clone.default(
                                split_val[i], memory_format=torch.contiguous_format
                            )
                    user.replace_input_with(lin.node, contiguous)

        for lin in self.linears:
            assert not lin.node.users
            graph.erase_node(lin.node)
        counters["inductor"]["da8w4_concat_linear"] += 1
        counters["inductor"]["da8w4_concat_linear_nodes"] += len(self.linears)


def find_da8w4_concat_linear_matches(
    gm: torch.fx.GraphModule,
) -> list[Da8w4ConcatLinearMatch]:
    op = _da8w4_linear_op()
    if op is None:
        return []
    groups: dict[tuple[Any, ...], list[_Da8w4Linear]] = defaultdict(list)
    for node in gm.graph.find_nodes(op="call_function", target=op):
        lin = _Da8w4Linear.from_node(gm, node)
        if lin is not None:
            groups[lin.activation_key].append(lin)
    return [
        Da8w4ConcatLinearMatch(gm, linears)
        for linears in groups.values()
        if should_concat_da8w4_linear(linears)
    ]


def _erase_dead_constants(gm: torch.fx.GraphModule, targets: OrderedSet[str]) -> None:
    """Drop get_attr nodes and module attributes nothing uses any more."""
    graph = gm.graph
    for node in list(graph.find_nodes(op="get_attr")):
        if node.target in targets and not node.users:
            graph.erase_node(node)
    still_used = OrderedSet(n.target for n in graph.find_nodes(op="get_attr"))
    for target in targets:
        if target in still_used:
            continue
        owner_path, _, attr = str(target).rpartition(".")
        owner = gm.get_submodule(owner_path) if owner_path else gm
        if hasattr(owner, attr):
            delattr(owner, attr)


def da8w4_concat_linear_pass(gm: torch.fx.GraphModule) -> None:
    """Fuse ``torchao::da8w4_linear_cpu`` calls sharing an activation (CPU,
    frozen, ``config.cpp.enable_concat_linear``)."""
    if not (config.freezing and config.cpp.enable_concat_linear):
        log.debug(
            "skipping da8w4_concat_linear: needs freezing and enable_concat_linear"
        )
        return
    if _da8w4_linear_op() is None:
        log.debug(
            "skipping da8w4_concat_linear: torchao::da8w4_linear_cpu is not defined"
        )
        return
    matches = find_da8w4_concat_linear_matches(gm)
    old_targets: OrderedSet[str] = OrderedSet()
    for match in matches:
        for lin in match.linears:
            for name in (*_PACKED_ARGS, "bias"):
                if isinstance(lin.args[name], torch.fx.Node):
                    old_targets.add(lin.args[name].target)  # type: ignore[arg-type]
        match.replace()
    if old_targets:
        _erase_dead_constants(gm, old_targets)


class Da8w4ConcatLinearPass(CustomGraphPass):
    """The pass for the ``post_grad_custom_post_pass`` stage.  ``uuid()`` is
    the hash of this file, so FX graph cache entries made with another
    version of the pass are not reused; where the file cannot be read it is
    None, which makes the cache bypass that compile instead of failing it."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        gm = graph.owning_module
        assert isinstance(gm, torch.fx.GraphModule)
        da8w4_concat_linear_pass(gm)

    def uuid(self) -> Any:
        try:
            return get_hash_for_files((os.path.abspath(__file__),))
        except OSError:
            return None


PASS_NAME = "torchao.da8w4_concat_linear_cpu"
_handle: Any = None


def register_da8w4_concat_linear_cpu_pass() -> Any:
    """Register the pass for ``post_grad_custom_post_pass`` under
    ``PASS_NAME``, next to any other registered or assigned pass, and return
    its handle (once; later calls return the same handle while it is
    active).  It acts only with freezing and ``config.cpp.enable_concat_linear``.

    The registry is ``torch._inductor.custom_pass_registry`` (pytorch/pytorch,
    "[inductor] Add composable, named and scoped custom pass registration").
    On a torch without it the pass is assigned to
    ``config.post_grad_custom_post_pass`` as before, which replaces any pass
    assigned there, and None is returned.
    """
    global _handle
    try:
        from torch._inductor.custom_pass_registry import (
            CustomPassStage,
            register_custom_pass,
        )
    except ImportError:
        config.post_grad_custom_post_pass = Da8w4ConcatLinearPass()
        return None
    if _handle is None or not _handle.active:
        _handle = register_custom_pass(
            CustomPassStage.POST_GRAD_POST, Da8w4ConcatLinearPass(), name=PASS_NAME
        )
    return _handle
