"""
``linear(cat([x0, x1, ...], dim=-1), W, b)`` without materializing the cat.

A cat on the contraction dim followed by a linear is one GEMM whose input is
split along K, so the pieces can be read where they live::

    linear(cat([x0, x1], -1), W, b) == linear(x0, W[:, :k0], b) + linear(x1, W[:, k0:])

These are the explicit entry points, which rewrite above autograd (a pre-grad
graph) into the ``"view"`` form, per-piece linears on column views of W,
summed: ``fuse_cat_linear_in_graph`` rewrites every site that
``match_cat_linear`` proves exact (structure, shapes, dtypes, grad mode,
aliasing, mutations) within ``MAX_PARTS``, ``MIN_PIECE_WIDTH`` and
``MAX_TOTAL_CAT_WIDTH``, with no profitability check, and
``cat_linear_fused_pre_grad_pass`` wraps it as a ``CustomGraphPass``.
Calling them is the decision; each rewrite counts under
``counters["inductor"]["cat_linear_fused"]``.

The ``cat_linear`` switch (``pre_grad_fusion_options["cat_linear"]``) does not
use them: it turns on the post-grad lowering of cat_linear_lowering.py, where
none of those proofs is needed.
"""

from __future__ import annotations

import bisect
import contextlib
import inspect
import logging
import operator
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch._dispatch.python import enable_python_dispatcher
from torch._dynamo.utils import counters
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.experimental.symbolic_shapes import statically_known_true
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from ..custom_graph_pass import CustomGraphPass, get_hash_for_files
from ..pattern_matcher import get_arg_value, is_mutation_op
from .cat_linear_lowering import MAX_PARTS


log = logging.getLogger(__name__)

# Gates of the explicit call (fuse_cat_linear_in_graph), with the lowering's
# MAX_PARTS; it keeps within MIN_PIECE_WIDTH too (slivers never pay).
MIN_PIECE_WIDTH = 16
MAX_TOTAL_CAT_WIDTH = 16384

LINEAR_TARGETS = (F.linear, torch._C._nn.linear)
CAT_TARGETS = (torch.cat, torch.concat, torch.concatenate)


def _name(target: Any) -> str:
    return target if isinstance(target, str) else getattr(target, "__name__", "")


def _skip(reason: str, node: torch.fx.Node) -> None:
    log.debug("skipping cat_linear: %s at %s", reason, node)


def _val(node: Any) -> torch.Tensor | None:
    if not isinstance(node, torch.fx.Node):
        return None
    val = node.meta.get("example_value", node.meta.get("val"))
    return val if isinstance(val, torch.Tensor) else None


def _fake_eval(fn: Any, *args: Any) -> Any:
    """``fn(*args)`` on the graph's values, under its fake mode (and the
    Python dispatcher, for composite ops on symbolic shapes) if it has one.
    The mode comes from the values, not ``detect_fake_mode``: during compile
    the tracing context may hold another mode than dynamo's values."""
    fake_mode = next(
        (a.fake_mode for a in pytree.tree_leaves(args) if isinstance(a, FakeTensor)),
        None,
    )
    with contextlib.ExitStack() as stack:
        if fake_mode is not None:
            stack.enter_context(fake_mode)
            stack.enter_context(enable_python_dispatcher())
        return fn(*args)


def _passes_inplace(target: Any, args: tuple[Any, ...]) -> bool:
    """``F.relu(x, True)``, ``F.dropout(x, 0.1, True, True)``, ..."""
    try:
        params = list(inspect.signature(target).parameters)
    except (TypeError, ValueError):
        return False
    if "inplace" not in params:
        return False
    idx = params.index("inplace")
    return len(args) > idx and args[idx] is not False


def _has_meta(node: torch.fx.Node) -> bool:
    return "example_value" in node.meta or "val" in node.meta


def _meta(node: torch.fx.Node) -> Any:
    return node.meta.get("example_value", node.meta.get("val"))


# aten ops whose schema leaves out a write: the batch norms update their
# running statistics (arguments 3 and 4) when argument 5 (training,
# use_input_stats) is true, but ``native_batch_norm`` and its callers have no
# ``(a!)`` on them (``_native_batch_norm_legit`` has).
_UNDECLARED_WRITES = frozenset(
    (
        "aten::native_batch_norm",
        "aten::_batch_norm_impl_index",
        "aten::cudnn_batch_norm",
        "aten::miopen_batch_norm",
        "aten::batch_norm",
        "aten::instance_norm",
    )
)


def _written_args(
    schema: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> list[Any]:
    def arg(i: int, a: Any) -> Any:
        return args[i] if i < len(args) else kwargs.get(a.name)

    written = [
        arg(i, a)
        for i, a in enumerate(schema.arguments)
        if a.alias_info is not None and a.alias_info.is_write
    ]
    if schema.name in _UNDECLARED_WRITES and len(schema.arguments) > 5:
        if arg(5, schema.arguments[5]) is not False:
            written += [arg(3, schema.arguments[3]), arg(4, schema.arguments[4])]
    return written


class _RecordWrites(TorchDispatchMode):
    """Storages that the aten ops dispatched under it write to, by their
    schemas' ``(a!)`` annotations (and ``_UNDECLARED_WRITES``)."""

    def __init__(self) -> None:
        super().__init__()
        self.written: set[Any] = set()

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        for t in pytree.tree_leaves(_written_args(func._schema, args, kwargs)):
            if isinstance(t, torch.Tensor):
                self.written.add(StorageWeakRef(t.untyped_storage()))
        return func(*args, **kwargs)


def _runs_as_torch_op(node: torch.fx.Node) -> bool:
    """Targets that are safe to run on fake values: torch's own functions,
    tensor methods and Python's operators (no user code)."""
    if node.op == "call_method":
        return isinstance(node.target, str)
    target = node.target
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return True
    module = getattr(target, "__module__", None) or ""
    return module.split(".")[0] in ("torch", "_operator", "operator")


def _writes_inputs_by_schema(node: torch.fx.Node) -> bool | None:
    """Run ``node`` on fake copies of its inputs and read, from the schemas
    of the aten ops it dispatches, whether it writes to one of them.  None
    when that cannot be told (no metadata, not a torch op, fails to run)."""
    if not _runs_as_torch_op(node):
        return None
    if not all(_has_meta(i) for i in node.all_input_nodes):
        return None
    args, kwargs = pytree.tree_map_only(torch.fx.Node, _meta, (node.args, node.kwargs))
    leaves = [
        t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)
    ]
    if not leaves:
        return False
    fake_mode = next((t.fake_mode for t in leaves if isinstance(t, FakeTensor)), None)
    try:
        with contextlib.ExitStack() as stack:
            if fake_mode is None:
                fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
                args, kwargs = pytree.tree_map_only(
                    torch.Tensor, fake_mode.from_tensor, (args, kwargs)
                )
            stack.enter_context(fake_mode)
            stack.enter_context(enable_python_dispatcher())
            # copies, so that the graph's values keep their versions and
            # metadata whatever the op does to its inputs
            copies: dict[int, torch.Tensor] = {}

            def copy(t: torch.Tensor) -> torch.Tensor:
                if id(t) not in copies:
                    copies[id(t)] = t.detach().clone().requires_grad_(t.requires_grad)
                return copies[id(t)]

            args, kwargs = pytree.tree_map_only(torch.Tensor, copy, (args, kwargs))
            inputs = {StorageWeakRef(t.untyped_storage()) for t in copies.values()}
            with _RecordWrites() as rec:
                if node.op == "call_method":
                    getattr(args[0], node.target)(*args[1:], **kwargs)  # type: ignore[arg-type]
                else:
                    node.target(*args, **kwargs)  # type: ignore[operator]
    except Exception:  # cannot tell; the caller stays careful
        log.debug("cat_linear: could not run %s on fake values", node, exc_info=True)
        return None
    return bool(rec.written & inputs)


# Calls that change grad mode, inference mode or autocast in a dynamo graph
# (``with torch.no_grad():`` becomes ``torch._C._set_grad_enabled(False)``;
# export wraps such regions in higher-order ops).
_MODE_FUNCTIONS = {
    torch._C._set_grad_enabled,
    torch.set_grad_enabled,
    torch.autograd.grad_mode._enter_inference_mode,
    torch.autograd.grad_mode._exit_inference_mode,
    torch.amp._enter_autocast,
    torch.amp._exit_autocast,
}


def changes_grad_mode(node: torch.fx.Node) -> bool:
    """Does ``node`` switch grad mode, inference mode or autocast?"""
    if node.op != "call_function":
        return False
    if node.target in _MODE_FUNCTIONS:
        return True
    # also export's wrap_with_set_grad_enabled / wrap_with_autocast
    name = _name(node.target)
    return any(w in name for w in ("grad_enabled", "inference_mode", "autocast"))


def is_possible_mutation(node: torch.fx.Node) -> bool:
    """Could ``node`` write to an existing tensor?  Conservative: what
    upstream calls impure or a mutation (a mutable schema, a side effect,
    ``out=``, an in-place name), an op whose dispatched aten schemas write
    to one of its inputs, an output that is one of its inputs, an in-place
    spelling dynamo leaves in pre-grad graphs, and any module call."""
    if node.op == "call_module":
        return True
    if node.op not in ("call_function", "call_method"):
        return False
    target = node.target
    if node.op == "call_function" and node.is_impure(impure_random=False):
        return True
    if is_mutation_op(node):
        return True
    if isinstance(target, torch._ops.OpOverload):
        return target._schema.is_mutable
    out = _val(node)
    if out is not None and any(_val(inp) is out for inp in node.all_input_nodes):
        return True
    if node.kwargs.get("inplace", False) or node.kwargs.get("out") is not None:
        return True
    if callable(target) and _passes_inplace(target, node.args):
        return True
    name = _name(target)
    if target in (operator.setitem, operator.delitem):
        return True
    if name.endswith("_") and not name.endswith("__") or name.startswith("__i"):
        return True
    if target in _INPLACE_OPERATORS:
        return True
    if _is_known_fresh(node) or (_runs_as_torch_op(node) and _name(target) in _VIEWS):
        return False  # no need to run it
    writes = _writes_inputs_by_schema(node)
    # Not a torch op, or it could not be run: taken as writing.
    return True if writes is None else writes


# Views and metadata queries by name, which write nothing (the in-place
# spellings, ``t_`` ..., end with ``_`` and are caught above).
_VIEWS = frozenset(
    ("view", "reshape", "narrow", "getitem", "transpose", "permute", "expand")
    + ("expand_as", "unsqueeze", "squeeze", "flatten", "unflatten", "split")
    + ("chunk", "unbind", "select", "t", "size", "dim", "stride", "detach")
    + ("contiguous", "view_as", "reshape_as", "movedim", "swapaxes", "unfold")
)


_INPLACE_OPERATORS = {
    getattr(operator, n)
    for n in dir(operator)
    if n.startswith("i")
    and n[1:] in dir(operator)
    and n not in ("index", "is_", "is_not")
}


def _storage(node: torch.fx.Node) -> Any:
    val = _val(node)
    if val is None or val.is_sparse:
        return None
    try:
        return StorageWeakRef(val.untyped_storage())
    except (NotImplementedError, RuntimeError):
        return None


# Producers known to return a tensor of their own (never an input or a view
# of one), by name: torch.relu, F.relu, "relu" as a method, operator.mul ...
# Anything else (dropout, which returns its input in eval mode or with p=0
# while the fake value looks fresh; contiguous, to, type_as, views, modules,
# user functions) may alias its inputs at run time.
_FRESH_PRODUCERS = frozenset(
    ("relu", "sigmoid", "tanh", "gelu", "silu", "exp", "log", "neg", "abs")
    + ("add", "mul", "sub", "div", "truediv", "floordiv", "pow", "matmul")
    + ("linear", "mm", "bmm", "addmm", "baddbmm", "cat", "concat", "concatenate")
    + ("clone", "softmax", "log_softmax", "layer_norm", "group_norm", "rms_norm")
    + ("leaky_relu", "elu", "hardtanh", "mish", "softplus", "hardswish")
    + ("sqrt", "rsqrt", "sin", "cos", "square", "erf", "reciprocal", "clamp")
    + ("sum", "mean", "amax", "amin", "prod", "var", "std", "norm", "logsumexp")
    + ("maximum", "minimum", "where", "masked_fill", "einsum", "embedding")
    + ("conv1d", "conv2d", "conv3d", "scaled_dot_product_attention")
)
_DROPOUTS = ("dropout", "alpha_dropout", "feature_alpha_dropout")


def _fresh_dropout(node: torch.fx.Node) -> bool:
    """Dropout in training with a constant 0 < p < 1 scales into a new
    tensor; in eval mode, with p=0, or with either left out (the defaults
    differ between the dropouts) it may return its input."""
    p = get_arg_value(node, 1, "p")
    train = get_arg_value(node, 2, "training")
    if train is None:
        train = node.kwargs.get("train")
    return isinstance(p, float) and 0.0 < p < 1.0 and train is True


def _is_known_fresh(node: torch.fx.Node) -> bool:
    """Does ``node`` return a tensor of its own, whatever the values?"""
    if node.op not in ("call_function", "call_method"):
        return False
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        schema = target._schema
        return not schema.is_mutable and all(
            r.alias_info is None for r in schema.returns
        )
    if node.kwargs.get("out") is not None or node.kwargs.get("inplace", False):
        return False
    if callable(target) and _passes_inplace(target, node.args):
        return False
    if node.op == "call_function" and not _runs_as_torch_op(node):
        return False
    if _name(target) in _DROPOUTS:
        return _fresh_dropout(node)
    return _name(target) in _FRESH_PRODUCERS


class GraphIndex:
    """What every site asks of the whole graph, computed once: node order, the
    possible mutations (``is_possible_mutation``), the grad-mode changes
    (``changes_grad_mode``), what each node may alias at run time and the
    storages the caller can reach (inputs, attributes, outputs and what they
    may alias).  ``rewritten`` keeps it true across a rewrite: the new node
    answers as the node it replaced (same value, same users), so a later
    site, or a later index, sees what it returned, what it aliased and what
    the caller can reach.  A node inserted otherwise makes a query walk the
    graph instead."""

    def __init__(self, graph: torch.fx.Graph) -> None:
        self.graph = graph
        self._pos: dict[torch.fx.Node, float] = {}
        self._mutation_pos: list[float] = []
        self._mutations: list[torch.fx.Node] = []
        self._mode_pos: list[float] = []
        self._same: dict[torch.fx.Node, torch.fx.Node] = {}
        self._aliases: dict[torch.fx.Node, frozenset[Any] | None] = {}
        self.escaping: set[Any] = set()
        nodes = list(graph.nodes)
        self._end = float(len(nodes))
        for i, node in enumerate(nodes):
            self._pos[node] = float(i)
            if is_possible_mutation(node):
                self._mutation_pos.append(float(i))
                self._mutations.append(node)
            if changes_grad_mode(node):
                self._mode_pos.append(float(i))
        for node in nodes:
            reached: list[Any] = []
            if node.op in ("placeholder", "get_attr"):
                reached = [node]
            elif node.op == "output":
                reached = [
                    o
                    for o in pytree.tree_leaves(node.args)
                    if isinstance(o, torch.fx.Node)
                ]
            for out in reached:
                # None (unknown) makes every part count as the caller's
                storages = self.alias_storages(out)
                self.escaping.update({None} if storages is None else storages)

    def alias_storages(self, node: torch.fx.Node) -> frozenset[Any] | None:
        """The storages ``node``'s value may share at run time: its own, and,
        unless its producer is known to return a fresh tensor, those of its
        tensor inputs (transitively).  None if one of them is unknown."""
        node = self._same.get(node, node)
        if node in self._aliases:
            return self._aliases[node]
        # the producers this depends on, computed in graph order (iteratively:
        # chains of views can be long)
        seen, stack = {node}, [node]
        while stack:
            n = stack.pop()
            if _is_known_fresh(n) or n.op in ("placeholder", "get_attr"):
                continue
            for inp in n.all_input_nodes:
                inp = self._same.get(inp, inp)
                if inp not in seen and inp not in self._aliases:
                    seen.add(inp)
                    stack.append(inp)
        for n in sorted(seen, key=lambda n: self._pos.get(n, self._end)):
            if n not in self._aliases:
                self._aliases[n] = self._own_aliases(n)
        return self._aliases[node]

    def _own_aliases(self, n: torch.fx.Node) -> frozenset[Any] | None:
        own: set[Any] = set()
        val = _meta(n)
        tensors = [t for t in pytree.tree_leaves(val) if isinstance(t, torch.Tensor)]
        if not _has_meta(n) or any(t.is_sparse for t in tensors):
            return None
        for t in tensors:
            try:
                own.add(StorageWeakRef(t.untyped_storage()))
            except (NotImplementedError, RuntimeError):
                return None
        if _is_known_fresh(n) or n.op in ("placeholder", "get_attr"):
            return frozenset(own)
        for inp in n.all_input_nodes:
            inner = self.alias_storages(inp)  # computed already, unless unindexed
            if inner is None:
                return None
            own |= inner
        return frozenset(own)

    def rewritten(self, old: torch.fx.Node, new: torch.fx.Node) -> None:
        """``new`` replaced ``old`` (erased), and the nodes computing it were
        inserted just before where ``old`` was: they write nothing and
        change no mode."""
        self._same[new] = self._same.get(old, old)
        pos = self._pos.pop(old, None)
        if pos is None:
            return
        inserted = []
        node = new
        while node.op != "root" and node not in self._pos:
            inserted.append(node)
            node = node.prev
        for k, node in enumerate(reversed(inserted)):
            self._pos[node] = pos - 1 + (k + 1) / (len(inserted) + 1)

    def forget(self, node: torch.fx.Node) -> None:
        """``node`` was erased."""
        self._pos.pop(node, None)

    def _between(
        self,
        positions: list[float],
        found: list[torch.fx.Node] | None,
        test: Any,
        start: torch.fx.Node,
        end: torch.fx.Node | None,
    ) -> list[torch.fx.Node] | int:
        lo = self._pos.get(start)
        hi = self._end if end is None else self._pos.get(end)
        if lo is None or hi is None:
            walk = []
            node = start
            while node is not end and node.op != "root":
                if test(node):
                    walk.append(node)
                node = node.next
            return walk if found is not None else len(walk)
        i = bisect.bisect_left(positions, lo)
        j = bisect.bisect_left(positions, hi)
        return found[i:j] if found is not None else j - i

    def mutations(
        self, start: torch.fx.Node, end: torch.fx.Node | None = None
    ) -> list[torch.fx.Node]:
        """Possible mutations from ``start`` up to, not including, ``end``
        (the graph's end if None), in graph order."""
        found = self._between(
            self._mutation_pos, self._mutations, is_possible_mutation, start, end
        )
        assert isinstance(found, list)
        return found

    def grad_mode_changes(self, start: torch.fx.Node, end: torch.fx.Node) -> int:
        """How many grad-mode (or inference-mode, autocast) changes lie from
        ``start`` up to, not including, ``end``."""
        found = self._between(self._mode_pos, None, changes_grad_mode, start, end)
        assert isinstance(found, int)
        return found


@dataclass
class CatLinearMatch:
    """``linear(cat(parts, -1), weight, bias)``; owns its rewrite.  The
    operands are read from the nodes when asked: rewriting another site
    replaces its linear, which may be a part of this one."""

    linear: torch.fx.Node
    cat: torch.fx.Node
    widths: list[int]

    @property
    def parts(self) -> list[torch.fx.Node]:
        return list(get_arg_value(self.cat, 0, "tensors"))

    @property
    def weight(self) -> torch.fx.Node:
        return get_arg_value(self.linear, 1, "weight")

    @property
    def bias(self) -> torch.fx.Node | None:
        return get_arg_value(self.linear, 2, "bias")

    def rewrite(self, form: str, index: GraphIndex | None = None) -> torch.fx.Node:
        """Replace the linear (and the cat, if it has no other user) by
        ``form``; ``index``, if given, learns of the change."""
        graph = self.linear.graph
        with graph.inserting_before(self.linear):
            if form != "view":
                raise AssertionError(f"unknown cat_linear form {form!r}")
            out = self._rewrite_view(graph)
        new_val = out.meta.get("example_value")
        out.meta.update(
            {k: v for k, v in self.linear.meta.items() if k != "example_value"}
        )
        old_val = _val(self.linear)
        if (
            form == "view"
            and isinstance(new_val, torch.Tensor)
            and old_val is not None
            and _same_metadata(old_val, new_val)
        ):
            # The users' values were computed from the linear's: a view of
            # it shares that storage.  Keeping it keeps every later question
            # of aliasing (this pass's, or another's index) true.
            out.meta["example_value"] = old_val
        self.linear.replace_all_uses_with(out)
        graph.erase_node(self.linear)
        if index is not None:
            index.rewritten(self.linear, out)
        if not self.cat.users:
            graph.erase_node(self.cat)
            if index is not None:
                index.forget(self.cat)
        return out

    def _call(self, graph: torch.fx.Graph, target: Any, *args: Any) -> torch.fx.Node:
        node = graph.call_function(target, args)
        vals = pytree.tree_map_only(torch.fx.Node, _val, args)
        node.meta["example_value"] = _fake_eval(target, *vals)
        if "stack_trace" in self.linear.meta:
            node.meta["stack_trace"] = self.linear.meta["stack_trace"]
        return node

    def _rewrite_view(self, graph: torch.fx.Graph) -> torch.fx.Node:
        acc, start = None, 0
        for part, width in zip(self.parts, self.widths):
            w = self._call(graph, torch.narrow, self.weight, 1, start, width)
            y = self._call(graph, F.linear, part, w)
            acc = y if acc is None else self._call(graph, operator.add, acc, y)
            start += width
        assert acc is not None
        if self.bias is None:
            return acc
        # after the sum, as the linear adds it: pieces that cancel keep it
        return self._call(graph, operator.add, acc, self.bias)


def match_cat_linear(
    linear: torch.fx.Node, index: GraphIndex | None = None
) -> CatLinearMatch | None:
    """Is rewriting ``linear`` exact?  Structure, shapes, dtypes and
    mutations only; no profitability."""
    if linear.op != "call_function" or linear.target not in LINEAR_TARGETS:
        return None
    cat = get_arg_value(linear, 0, "input")
    if not isinstance(cat, torch.fx.Node) or cat.target not in CAT_TARGETS:
        return None
    weight = get_arg_value(linear, 1, "weight")
    bias = get_arg_value(linear, 2, "bias")
    parts = get_arg_value(cat, 0, "tensors")
    dim = get_arg_value(cat, 1, "dim")
    if not isinstance(parts, (list, tuple)) or len(parts) < 2:
        _skip("a cat of fewer than two parts", linear)
        return None
    nodes = [*parts, weight] + ([] if bias is None else [bias])
    if not all(isinstance(p, torch.fx.Node) for p in nodes):
        _skip("an operand is not a graph node", linear)
        return None
    if len(cat.users) != 1:
        # The cat stays for its other users: nothing to save.
        _skip("the cat has other users", linear)
        return None
    vals = [_val(n) for n in (cat, linear, *nodes)]
    if any(v is None for v in vals):
        _skip("missing tensor metadata", linear)
        return None
    cat_val, out_val, *part_vals = vals
    w_val = part_vals[len(parts)]
    rank = cat_val.dim()  # type: ignore[union-attr]
    if rank not in (2, 3) or not isinstance(dim, int) or dim % rank != rank - 1:
        _skip("not a last-dim cat of 2-D or 3-D parts", linear)
        return None
    if any(v.dim() != rank for v in part_vals[: len(parts)]):  # type: ignore[union-attr]
        _skip("parts differ in rank", linear)
        return None
    if w_val.dim() != 2 or (bias is not None and part_vals[-1].dim() != 1):  # type: ignore[union-attr]
        _skip("weight is not 2-D or bias not 1-D", linear)
        return None
    widths = [v.shape[-1] for v in part_vals[: len(parts)]]  # type: ignore[union-attr]
    if any(not isinstance(k, int) or k == 0 for k in widths):
        # Static feature widths are the common case; symbolic ones would
        # need a guard per width.
        _skip("a symbolic or empty part width", linear)
        return None
    if not statically_known_true(sum(widths) == w_val.shape[1]):  # type: ignore[union-attr]
        _skip("weight width does not match the cat", linear)
        return None
    dtypes = {v.dtype for v in vals}  # type: ignore[union-attr]
    devices = {v.device for v in vals}  # type: ignore[union-attr]
    if len(dtypes) != 1 or not next(iter(dtypes)).is_floating_point:
        _skip(f"mixed or non-floating dtypes {dtypes}", linear)
        return None
    if len(devices) != 1:
        _skip("operands on several devices", linear)
        return None
    if any(v.is_sparse or v.is_quantized for v in vals):  # type: ignore[union-attr]
        _skip("sparse or quantized operands", linear)
        return None

    if cat.kwargs.get("out") is not None or len(cat.args) > 2:
        # torch.cat(parts, -1, out=buf): erasing the cat would leave buf
        # unwritten.
        _skip("a cat with out=", linear)
        return None

    # Grad mode.  The new nodes run where the linear runs, on the parts as
    # they were made: a part made with grad mode on but concatenated under
    # no_grad (or inference mode, or autocast) would get the gradients the
    # cat cut off, a frozen producer would train.  So no mode change between
    # the first part's producer and the linear, and the metadata must agree
    # with one grad mode throughout.
    index = index or GraphIndex(linear.graph)
    start = (
        min(parts, key=lambda p: index._pos[p])
        if all(p in index._pos for p in parts)
        else next(iter(linear.graph.nodes))
    )
    if index.grad_mode_changes(start, linear):
        _skip("grad mode changes between a part and the linear", linear)
        return None
    pieces = [v for v in part_vals[: len(parts)] if v is not None]
    operands = [v for v in part_vals[len(parts) :] if v is not None]
    assert cat_val is not None and out_val is not None
    cat_grad = any(v.requires_grad for v in pieces)
    out_grad = cat_grad or any(v.requires_grad for v in operands)
    if cat_val.requires_grad != cat_grad or out_val.requires_grad != out_grad:
        _skip("the cat or the linear ran under another grad mode", linear)
        return None
    if out_val.requires_grad and any(v.is_inference() for v in pieces):
        _skip("an inference tensor would be saved for backward", linear)
        return None

    # Pre-grad IR is not functional: the rewrite reads the parts where the
    # linear was, so nothing in between may write to them.
    between = index.mutations(cat, linear)
    if between:
        _skip(f"possible mutation {between[0]} between cat and linear", linear)
        return None
    # Autograd then saves the parts where stock saved the cat, so a later
    # in-place write to a part or to what it may alias (a view, dropout's
    # input in eval mode) would corrupt the backward: in this graph, or by
    # the caller between forward and backward.
    storages: set[Any] = set()
    for p in parts:
        aliases = index.alias_storages(p)
        storages |= {None} if aliases is None else aliases
    if out_val.requires_grad and (
        None in storages or None in index.escaping or storages & index.escaping
    ):
        _skip("a part the caller can write to before the backward", linear)
        return None
    for node in index.mutations(linear.next):
        written: set[Any] = set()
        for i in node.all_input_nodes:
            aliases = index.alias_storages(i)
            written |= {None} if aliases is None else aliases
        if None in storages or None in written or written & storages:
            _skip(f"possible mutation {node} of a part after the linear", linear)
            return None
    return CatLinearMatch(linear, cat, widths)


# The view form adds per-piece products in the output dtype: in 16 bits each
# piece rounds (fp16 overflows where the whole sum would not).
_VIEW_DTYPES = (torch.float32, torch.float64)


def _same_metadata(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (
        a.dtype == b.dtype
        and a.device == b.device
        and a.requires_grad == b.requires_grad
        and len(a.shape) == len(b.shape)
        and all(statically_known_true(x == y) for x, y in zip(a.shape, b.shape))
        and all(statically_known_true(x == y) for x, y in zip(a.stride(), b.stride()))
    )


def _explicit_match(node: torch.fx.Node, index: GraphIndex) -> CatLinearMatch | None:
    match = match_cat_linear(node, index)
    if match is None:
        return None
    if not (
        len(match.parts) <= MAX_PARTS
        and min(match.widths) >= MIN_PIECE_WIDTH
        and sum(match.widths) <= MAX_TOTAL_CAT_WIDTH
    ):
        _skip("outside the explicit call's gates", node)
        return None
    dtype = _val(node).dtype  # type: ignore[union-attr]
    if dtype not in _VIEW_DTYPES:
        _skip(f"the view form in {dtype}", node)
        return None
    return match


def fuse_cat_linear_in_graph(graph: torch.fx.Graph) -> int:
    """Rewrite every safe ``linear(cat)`` site within ``MAX_PARTS``,
    ``MIN_PIECE_WIDTH`` and ``MAX_TOTAL_CAT_WIDTH`` of a pre-grad ``graph``
    into the ``"view"`` form, in place; returns the number rewritten.
    Calling it is the decision: nothing is weighed, but what is not exact
    is declined (see ``match_cat_linear``), and so are 16-bit dtypes.

    Every site is matched on the graph as it came; each is checked again
    just before its rewrite, against an index that the earlier rewrites kept
    up to date."""
    index = GraphIndex(graph)
    linears = [
        node
        for node in graph.nodes
        if node.op == "call_function" and node.target in LINEAR_TARGETS
    ]
    candidates = [m for m in (_explicit_match(n, index) for n in linears) if m]
    rewritten = 0
    for match in candidates:
        if _explicit_match(match.linear, index) is None:
            continue
        match.rewrite("view", index)
        counters["inductor"]["cat_linear_fused"] += 1
        rewritten += 1
    return rewritten


class CatLinearFusedPreGradPass(CustomGraphPass):
    """``fuse_cat_linear_in_graph`` as a ``CustomGraphPass``: assign it to
    ``config.pre_grad_custom_pass`` or register it for that stage."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        fuse_cat_linear_in_graph(graph)

    def uuid(self) -> Any:
        return get_hash_for_files((os.path.abspath(__file__),))


cat_linear_fused_pre_grad_pass = CatLinearFusedPreGradPass()
