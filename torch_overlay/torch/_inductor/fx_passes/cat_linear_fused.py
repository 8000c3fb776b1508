"""
Pre-grad rewrite of ``linear(cat([x0, x1, ...], dim=-1), W, b)``.

``cat`` on the contraction dim followed by a linear is the same GEMM as a sum of
per-piece GEMMs on column slices of the weight::

    linear(cat([x0, x1], -1), W, b) == linear(x0, W[:, :k0], b) + linear(x1, W[:, k0:])

The per-piece form never materializes the concatenated activation, so it is not
saved for backward and its gradient is never formed as one buffer.  Whether that
is faster depends on the site: narrow pieces make inefficient GEMMs, and when the
pieces come from pointwise producers Inductor already writes them straight into
the cat buffer, so the cat is free in forward.  Measured on a GPU, the
unconditional rewrite is slower than stock in most cases (benchmarks/README.md),
so this pass decides per site:

* ``can_cat_linear_fused`` (safety): the shapes, dtypes and graph structure for
  which the rewrite is exact.  Cheap, no benchmarking.
* ``should_cat_linear_fused`` (profitability): on CUDA a roofline bound first
  (``cat_linear_fused_cost``: the step without the cat's traffic).  Below the
  margin the site is declined; at ``GEMM_WITHOUT_BENCHMARK_BOUND`` and above, a
  forward site of whole K tiles takes the ``"gemm"`` form, where it saves at
  least ``MIN_STEP_SHARE`` of its graph's step (``step_share``: each rewritten
  site adds a kernel compile); neither costs a benchmark.  What lies between
  is left to a compile-time benchmark, only under ``max_autotune`` (it
  compiles a kernel per site): the candidate forms for the mode the site runs
  in (forward only, or forward and backward), the ``"gemm"`` kernel config
  pinned to the one the compiled code will run, cached in a ``LocalCache``
  keyed on shapes, strides, dtype and ``requires_grad``.  Under
  ``config.deterministic`` nothing measured decides, so CUDA sites keep
  stock.  On CPU a rule measured with ``benchmarks/cat_linear_fused_cpu.py``
  (``_should_on_cpu``).  ``config.cat_linear_fused_force`` overrides the
  decision (tests, investigations).

Candidate forms (see ``CatLinearMatch.rewrite``):

* ``"view"``:  ``sum_i linear(x_i, narrow(W, 1, k_i, n_i))`` -- weight slices are
  views (no per-call weight copy as in ROCm/pytorch#3233), bias on the first piece.
* ``"addmm"``: ``addmm(addmm(mm(x_0, W_0^T), x_1, W_1^T), ...)`` -- the running sum
  is the GEMM's ``C`` input, so accumulation happens in the GEMM epilogue instead
  of in separate add kernels.
* ``"gemm"``: one Triton GEMM that reads each piece in place and accumulates all
  of them in registers (``cat_linear_fused_gemm.py``); CUDA, fp16/bf16, at most
  ``MAX_PARTS`` pieces.  Its backward is per-piece ATen GEMMs.

Upstream (2.14+) ships an opt-in ``pre_grad_fusion_options["cat_linear"]`` with
fixed gates.  The two coexist: that fusion runs inside ``group_batch_fusion_passes``
before this pass, and whatever it rewrote no longer matches here.
"""

from __future__ import annotations

import bisect
import contextlib
import inspect
import logging
import math
import operator
import os
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch._dispatch.python import enable_python_dispatcher
from torch._dynamo.utils import counters
from torch._subclasses.fake_tensor import FakeTensor
from torch.fx.experimental.symbolic_shapes import statically_known_true
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils import _pytree as pytree

from .. import config
from ..custom_graph_pass import CustomGraphPass, get_hash_for_files


log = logging.getLogger(__name__)

_FEATURE = "cat_linear_fused"

LINEAR_TARGETS = (F.linear, torch._C._nn.linear)
CAT_TARGETS = (torch.cat, torch.concat, torch.concatenate)

# Candidate forms, in the order they are benchmarked.
FORMS = ("view", "addmm", "gemm")

# A per-piece form must beat stock by config.cat_linear_fused_bench_margin before
# it is taken: compile-time eager timings are noisy and do not see every
# Inductor fusion.


def _skip(reason: str, *args: Any) -> None:
    log.debug("skipping " + _FEATURE + ": " + reason, *args)


def _val(node: Any) -> Any:
    if not isinstance(node, torch.fx.Node):
        return None
    val = node.meta.get("example_value", node.meta.get("val"))
    return val if isinstance(val, torch.Tensor) else None


def _fake_eval(fn: Any, *args: Any) -> Any:
    """``fn(*args)`` on the graph's fake values, as the graph's fake mode (and
    the Python dispatcher, for composite ops on symbolic shapes) computes it."""
    fake_mode = next(
        (a.fake_mode for a in pytree.tree_leaves(args) if isinstance(a, FakeTensor)),
        None,
    )
    with contextlib.ExitStack() as stack:
        if fake_mode is not None:
            stack.enter_context(fake_mode)
        stack.enter_context(enable_python_dispatcher())
        return fn(*args)


def _same(a: Any, b: Any) -> bool:
    """``a == b`` provable without adding a guard (sizes may be SymInts)."""
    return statically_known_true(a == b)


def _arg(node: torch.fx.Node, idx: int, name: str, default: Any = None) -> Any:
    if len(node.args) > idx:
        return node.args[idx]
    return node.kwargs.get(name, default)


def _is_possible_mutation(node: torch.fx.Node) -> bool:
    """Conservative: could ``node`` write to an existing tensor?

    Asks the graph first: an op schema that writes, or an output that is one
    of the node's input tensors (what an in-place op returns, whatever its
    name or spelling); then the spellings dynamo leaves in pre-grad graphs."""
    if node.op == "call_module":
        return True
    if node.op not in ("call_function", "call_method"):
        return False
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return target._schema.is_mutable
    out = _val(node)
    if out is not None and any(_val(inp) is out for inp in node.all_input_nodes):
        return True
    if node.kwargs.get("inplace", False) or node.kwargs.get("out") is not None:
        return True
    if _passes_inplace_positionally(target, node.args):
        return True
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    if target in (operator.setitem, operator.delitem) or (
        name.startswith("__i") and name.endswith("__")
    ):
        return True
    return name.endswith("_") and not name.endswith("__")


class GraphIndex:
    """What every site's checks ask of the whole graph, computed once per pass
    instead of once per site: the order of the nodes and which of them could
    write to a tensor (``_is_possible_mutation``), and the graph's roofline
    step (``graph_roofline_us``, per device limits).  Built before any
    rewrite; a node it does not know (inserted since) makes a query fall back
    to walking the graph.  Rewrites only add and erase nodes that cannot write,
    so what it knows stays true."""

    def __init__(self, graph: torch.fx.Graph) -> None:
        self.graph = graph
        self._pos: dict[torch.fx.Node, int] | None = None  # built on first use
        self._mutations: list[torch.fx.Node] = []
        self._mutation_pos: list[int] = []
        self._step_us: dict[Any, float] = {}

    def _build(self) -> dict[torch.fx.Node, int]:
        if self._pos is None:
            self._pos = {}
            for i, node in enumerate(self.graph.nodes):
                self._pos[node] = i
                if _is_possible_mutation(node):
                    self._mutations.append(node)
                    self._mutation_pos.append(i)
        return self._pos

    def mutations_from(
        self, start: torch.fx.Node | None, end: torch.fx.Node | None = None
    ) -> list[torch.fx.Node] | None:
        """The possible mutations from ``start`` up to (not including) ``end``
        (the graph's end if None), in graph order; None if the index does not
        know ``start`` or ``end``."""
        if start is None:
            return []
        pos = self._build()
        lo = pos.get(start)
        hi = len(pos) if end is None else pos.get(end)
        if lo is None or hi is None:
            return None
        i = bisect.bisect_left(self._mutation_pos, lo)
        j = bisect.bisect_left(self._mutation_pos, hi)
        return self._mutations[i:j]

    def step_us(self, limits: Any) -> float:
        if limits not in self._step_us:
            self._step_us[limits] = graph_roofline_us(self.graph, limits)
        return self._step_us[limits]


def _first_possible_mutation(
    start: torch.fx.Node, end: torch.fx.Node, index: GraphIndex | None = None
) -> torch.fx.Node | None:
    """The first node from ``start`` up to (not including) ``end`` that could
    write to an existing tensor, or None."""
    found = None if index is None else index.mutations_from(start, end)
    if found is not None:
        return found[0] if found else None
    node = start
    while node is not end:
        if _is_possible_mutation(node):
            return node
        node = node.next
    return None


def _storage(node: torch.fx.Node) -> Any:
    val = _val(node)
    if val is None or val.is_sparse:
        return None
    try:
        return StorageWeakRef(val.untyped_storage())
    except (NotImplementedError, RuntimeError):
        return None


def _first_possible_mutation_of(
    nodes: list[torch.fx.Node], start: torch.fx.Node | None, index: GraphIndex | None = None
) -> torch.fx.Node | None:
    """The first node from ``start`` to the end of the graph that could write
    to one of ``nodes`` or to a tensor sharing its storage (a view of it), or
    None.  An input whose storage is unknown counts as shared."""
    storages = {_storage(n) for n in nodes}
    if None in storages:
        storages = None  # unknown: every possible mutation counts

    def writes_to_nodes(node: torch.fx.Node) -> bool:
        return storages is None or any(
            _storage(inp) in storages or _storage(inp) is None
            for inp in node.all_input_nodes
        )

    found = None if index is None else index.mutations_from(start)
    if found is not None:
        return next((n for n in found if writes_to_nodes(n)), None)
    node = start
    while node is not None and node.op != "output":
        if _is_possible_mutation(node) and writes_to_nodes(node):
            return node
        node = node.next
    return None


def _concrete(sizes: Any) -> tuple[int, ...] | None:
    out = []
    for s in sizes:
        if isinstance(s, torch.SymInt):
            # ShapeEnv.size_hint has this signature on every base (2.11 .. 2.15).
            hint = s.node.shape_env.size_hint(s.node.expr, allow_none=True)
            if hint is None or not getattr(hint, "is_number", False):
                return None
            s = int(hint)
        out.append(int(s))
    return tuple(out)


def _passes_inplace_positionally(target: Any, args: tuple[Any, ...]) -> bool:
    """``F.relu(x, True)``, ``F.dropout(x, 0.1, True, True)``, ..."""
    if not callable(target):
        return False
    try:
        params = list(inspect.signature(target).parameters)
    except (TypeError, ValueError):
        return False
    if "inplace" not in params:
        return False
    idx = params.index("inplace")
    return len(args) > idx and args[idx] is not False


# Producers that Inductor fuses into the write of the cat buffer: with these the
# cat is free in forward and stock only pays the GEMM.
_POINTWISE_PRODUCERS = {
    torch.relu, F.relu, torch.sigmoid, torch.tanh, F.gelu, F.silu, torch.exp,
    torch.neg, torch.abs, torch.add, torch.mul, torch.sub, torch.div,
    operator.add, operator.mul, operator.sub, operator.truediv, operator.neg,
    "relu", "sigmoid", "tanh", "exp", "neg", "abs", "add", "mul", "sub", "div",
}  # fmt: skip


def _is_fused_producer(node: torch.fx.Node) -> bool:
    if node.op not in ("call_function", "call_method") or len(node.users) != 1:
        return False
    target = node.target
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return torch.Tag.pointwise in getattr(target, "tags", ())
    try:
        return target in _POINTWISE_PRODUCERS
    except TypeError:  # unhashable target
        return False


def _foldable_prologue(node: torch.fx.Node) -> tuple[str, torch.fx.Node] | None:
    """``(name, input)`` if ``node`` is a unary pointwise op the ``"gemm"`` form
    can apply while loading its piece (``cat_linear_fused_gemm.PROLOGUES``):
    out-of-place, one tensor input of the same shape, dtype and device, no
    other user than the cat."""
    if node.op not in ("call_function", "call_method") or len(node.users) != 1:
        return None
    target, args, kwargs = node.target, node.args, dict(node.kwargs)
    if target in (torch.relu, F.relu, "relu"):
        name = "relu"
    elif target in (torch.sigmoid, "sigmoid"):
        name = "sigmoid"
    elif target is F.silu:
        name = "silu"
    elif target is F.gelu and kwargs.pop("approximate", "none") == "none":
        name = "gelu"
    else:
        return None
    if target in (F.relu, F.silu) and (kwargs.pop("inplace", False) or len(args) > 1):
        return None
    if len(args) != 1 or kwargs or not isinstance(args[0], torch.fx.Node):
        return None
    inp, out = _val(args[0]), _val(node)
    if inp is None or out is None:
        return None
    if (inp.shape, inp.dtype, inp.device) != (out.shape, out.dtype, out.device):
        return None
    return name, args[0]


@dataclass
class CatLinearMatch:
    """``linear(cat(parts, -1), weight, bias)``; owns its rewrite."""

    linear: torch.fx.Node
    cat: torch.fx.Node
    parts: list[torch.fx.Node]
    weight: torch.fx.Node
    bias: torch.fx.Node | None
    widths: list[int] = field(default_factory=list)
    # Producers the "gemm" rewrite folded into its loads (erased once unused).
    _folded: list[torch.fx.Node] = field(default_factory=list, repr=False)
    # The graph's index, when the match was found by a whole-graph scan.
    _index: GraphIndex | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        assert len(self.parts) >= 2 and len(self.parts) == len(self.widths)
        assert _same(sum(self.widths), _val(self.weight).shape[1])

    @property
    def rank(self) -> int:
        return _val(self.cat).dim()

    @property
    def device(self) -> torch.device:
        return _val(self.linear).device

    @property
    def needs_grad(self) -> bool:
        # The fake value of the linear is computed under the graph's grad mode.
        return bool(_val(self.linear).requires_grad)

    @property
    def dtype(self) -> torch.dtype:
        return _val(self.linear).dtype

    @property
    def fused_producers(self) -> list[bool]:
        return [_is_fused_producer(p) for p in self.parts]

    def gemm_prologues(self) -> list[tuple[str, torch.fx.Node] | None]:
        """Per part, the producer the ``"gemm"`` form folds into its loads.

        Forward-only sites only (the folded op has no backward), and only when
        nothing between the producer and the linear may write to its input:
        the kernel reads that input where the linear was.
        """
        if self.needs_grad:
            return [None] * len(self.parts)
        folds = []
        for part in self.parts:
            fold = _foldable_prologue(part)
            if fold is not None and _first_possible_mutation(part.next, self.linear, self._index):
                fold = None
            folds.append(fold)
        return folds

    def gemm_config(self, folds: list[tuple[str, torch.fx.Node] | None]) -> int:
        """The ``"gemm"`` kernel config this site is pinned to (the one it is
        benchmarked with and compiled with), given its ``gemm_prologues()``."""
        from .cat_linear_fused_gemm import pick_config, PROLOGUES

        codes = [0 if f is None else PROLOGUES[f[0]] for f in folds]
        pieces = [_val(part if f is None else f[1]) for part, f in zip(self.parts, folds)]
        return pick_config(pieces, _val(self.weight), codes)

    def bench_spec(self, forms: tuple[str, ...]) -> Any:
        """What the compile-time benchmark needs to know of this site, with
        concrete (hinted) sizes, as a ``cat_linear_fused_bench.BenchSpec``; None
        without size hints."""
        from .cat_linear_fused_bench import BenchSpec

        def desc(node: torch.fx.Node) -> tuple[Any, ...] | None:
            v = _val(node)
            shape, stride = _concrete(v.shape), _concrete(v.stride())
            if shape is None or stride is None:
                return None
            return shape, stride, bool(v.requires_grad)

        parts = tuple(desc(p) for p in self.parts)
        weight = desc(self.weight)
        if any(p is None for p in parts) or weight is None:
            return None
        bias = None
        if self.bias is not None:
            b_val = _val(self.bias)
            bias = (int(b_val.shape[0]), bool(b_val.requires_grad))
        prologues = (0,) * len(self.parts)
        gemm_config = -1
        if "gemm" in forms:
            from .cat_linear_fused_gemm import PROLOGUES

            folds = self.gemm_prologues()
            prologues = tuple(0 if fold is None else PROLOGUES[fold[0]] for fold in folds)
            gemm_config = self.gemm_config(folds)
        w_val = _val(self.weight)
        return BenchSpec(
            parts=parts,  # type: ignore[arg-type]
            weight=weight,  # type: ignore[arg-type]
            bias=bias,
            fused_producers=tuple(self.fused_producers),
            prologues=prologues,
            dtype=w_val.dtype,
            device=str(w_val.device),
            backward=self.needs_grad,
            forms=forms,
            gemm_config=gemm_config,
        )

    def available_forms(self) -> tuple[str, ...]:
        """The forms this site can take (``"gemm"`` needs CUDA, Triton, fp16/bf16)."""
        from .cat_linear_fused_gemm import gemm_form_available

        return tuple(
            f
            for f in FORMS
            if f != "gemm"
            or gemm_form_available(self.device, self.dtype, len(self.parts))
        )

    def rewrite(self, form: str) -> torch.fx.Node:
        graph = self.linear.graph
        with graph.inserting_before(self.linear):
            if form == "view":
                out = self._rewrite_view(graph)
            elif form == "addmm":
                out = self._rewrite_addmm(graph)
            elif form == "gemm":
                out = self._rewrite_gemm(graph)
            else:
                raise AssertionError(f"unknown {_FEATURE} form {form!r}")
        out.meta.update(
            {k: v for k, v in self.linear.meta.items() if k != "example_value"}
        )
        self.linear.replace_all_uses_with(out)
        graph.erase_node(self.linear)
        if not self.cat.users:
            graph.erase_node(self.cat)
        for part in self._folded:
            if not part.users:
                graph.erase_node(part)
        return out

    def _call(self, graph: torch.fx.Graph, target: Any, *args: Any) -> torch.fx.Node:
        node = graph.call_function(target, args)
        vals = [_val(a) if isinstance(a, torch.fx.Node) else a for a in args]
        node.meta["example_value"] = _fake_eval(target, *vals)
        if "stack_trace" in self.linear.meta:
            node.meta["stack_trace"] = self.linear.meta["stack_trace"]
        return node

    def _weight_slices(self, graph: torch.fx.Graph) -> list[torch.fx.Node]:
        slices, start = [], 0
        for width in self.widths:
            slices.append(self._call(graph, torch.narrow, self.weight, 1, start, width))
            start += width
        return slices

    def _rewrite_view(self, graph: torch.fx.Graph) -> torch.fx.Node:
        acc = None
        for i, (part, w) in enumerate(zip(self.parts, self._weight_slices(graph))):
            y = self._call(graph, F.linear, part, w, self.bias if i == 0 else None)
            acc = y if acc is None else self._call(graph, torch.add, acc, y)
        assert acc is not None
        return acc

    def _rewrite_gemm(self, graph: torch.fx.Graph) -> torch.fx.Node:
        from .cat_linear_fused_gemm import get_op, PROLOGUES

        op = get_op()
        pieces, codes = [], []
        folds = self.gemm_prologues()
        for part, fold in zip(self.parts, folds):
            if fold is None:
                pieces.append(part)
                codes.append(0)
            else:
                pieces.append(fold[1])
                codes.append(PROLOGUES[fold[0]])
                self._folded.append(part)
        cfg = self.gemm_config(folds)
        node = graph.call_function(op, (pieces, self.weight, self.bias, codes, cfg))
        node.meta["example_value"] = _fake_eval(
            op, [_val(p) for p in pieces], _val(self.weight), _val(self.bias), codes, cfg
        )
        if "stack_trace" in self.linear.meta:
            node.meta["stack_trace"] = self.linear.meta["stack_trace"]
        return node

    def _rewrite_addmm(self, graph: torch.fx.Graph) -> torch.fx.Node:
        acc = None
        for i, (part, w) in enumerate(zip(self.parts, self._weight_slices(graph))):
            x = part if self.rank == 2 else self._call(graph, torch.flatten, part, 0, -2)
            wt = self._call(graph, torch.t, w)
            if acc is not None:
                acc = self._call(graph, torch.addmm, acc, x, wt)
            elif self.bias is not None:
                acc = self._call(graph, torch.addmm, self.bias, x, wt)
            else:
                acc = self._call(graph, torch.mm, x, wt)
        assert acc is not None
        if self.rank == 2:
            return acc
        lead = []
        for d, size in enumerate(_val(self.parts[0]).shape[:-1]):
            if isinstance(size, torch.SymInt):
                size_node = graph.call_method("size", (self.parts[0], d))
                size_node.meta["example_value"] = size
                size = size_node
            lead.append(size)
        out = graph.call_function(torch.unflatten, (acc, 0, tuple(lead)))
        out.meta["example_value"] = _fake_eval(
            torch.unflatten, _val(acc), 0, tuple(_val(self.parts[0]).shape[:-1])
        )
        return out


def can_cat_linear_fused(
    linear: torch.fx.Node, index: GraphIndex | None = None
) -> CatLinearMatch | None:
    """Is rewriting this node exact?  Structure, shapes and dtypes only.
    ``index``: the graph's ``GraphIndex`` when many sites are checked."""
    if linear.op != "call_function" or linear.target not in LINEAR_TARGETS:
        return None
    cat = _arg(linear, 0, "input")
    if not (
        isinstance(cat, torch.fx.Node)
        and cat.op == "call_function"
        and cat.target in CAT_TARGETS
    ):
        return None
    weight = _arg(linear, 1, "weight")
    bias = _arg(linear, 2, "bias")
    parts = _arg(cat, 0, "tensors")
    dim = _arg(cat, 1, "dim", 0)

    if not isinstance(parts, (list, tuple)) or len(parts) < 2:
        _skip("cat of fewer than two parts at %s", linear)
        return None
    if not all(isinstance(p, torch.fx.Node) for p in parts):
        _skip("a cat part is not a graph node at %s", linear)
        return None
    if not isinstance(weight, torch.fx.Node) or not (
        bias is None or isinstance(bias, torch.fx.Node)
    ):
        _skip("weight or bias is not a graph node at %s", linear)
        return None
    if len(cat.users) != 1:
        # The cat stays materialized for its other users: nothing to save, and a
        # user could mutate it in place.
        _skip("cat has other users at %s", linear)
        return None

    cat_val, w_val, out_val = _val(cat), _val(weight), _val(linear)
    part_vals = [_val(p) for p in parts]
    b_val = _val(bias) if bias is not None else None
    if (
        cat_val is None
        or w_val is None
        or out_val is None
        or any(v is None for v in part_vals)
        or (bias is not None and b_val is None)
    ):
        _skip("missing tensor metadata at %s", linear)
        return None
    if cat_val.dim() not in (2, 3):
        _skip("input rank %d not in (2, 3) at %s", cat_val.dim(), linear)
        return None
    if not isinstance(dim, int) or dim % cat_val.dim() != cat_val.dim() - 1:
        _skip("cat is not on the last dim at %s", linear)
        return None
    if any(v.dim() != cat_val.dim() for v in part_vals):
        _skip("parts differ in rank at %s", linear)
        return None
    if w_val.dim() != 2 or (b_val is not None and b_val.dim() != 1):
        _skip("weight is not 2-D or bias not 1-D at %s", linear)
        return None

    widths = [v.shape[-1] for v in part_vals]
    if any(isinstance(k, torch.SymInt) for k in (*widths, w_val.shape[1])):
        # Static feature widths are the common case (dynamic batch/sequence);
        # symbolic ones would need guards on each width.
        _skip("symbolic part width at %s", linear)
        return None
    if any(k == 0 for k in widths):
        _skip("empty part at %s", linear)
        return None
    if not _same(sum(widths), w_val.shape[1]):
        _skip("weight width does not match the cat at %s", linear)
        return None
    lead = cat_val.shape[:-1]
    if not all(_same(a, b) for v in part_vals for a, b in zip(v.shape[:-1], lead)):
        _skip("parts differ in leading shape at %s", linear)
        return None

    dtypes = {v.dtype for v in (*part_vals, w_val, out_val)}
    if b_val is not None:
        dtypes.add(b_val.dtype)
    if len(dtypes) != 1 or not next(iter(dtypes)).is_floating_point:
        _skip("mixed or non-floating dtypes %s at %s", dtypes, linear)
        return None
    devices = {v.device for v in (*part_vals, w_val, out_val)}
    if b_val is not None:
        devices.add(b_val.device)
    if len(devices) != 1:
        _skip("parts, weight and output are on different devices at %s", linear)
        return None
    if any(v.is_sparse or v.is_quantized for v in (*part_vals, w_val)):
        _skip("sparse or quantized tensors at %s", linear)
        return None

    # Pre-grad IR is not functional: the per-piece GEMMs read the parts (and
    # weight) where the linear was, so nothing in between may write to them.
    mutation = _first_possible_mutation(cat.next, linear, index)
    if mutation is not None:
        _skip("possible mutation %s between cat and linear at %s", mutation, linear)
        return None
    # After the rewrite the per-piece GEMMs read the parts themselves, and
    # autograd saves them (where stock saved the cat's own buffer): a later
    # in-place write to a part, wherever the graph orders it, would corrupt
    # the backward.
    mutation = _first_possible_mutation_of(list(parts), linear.next, index)
    if mutation is not None:
        _skip("possible mutation %s of a part after the linear at %s", mutation, linear)
        return None

    return CatLinearMatch(linear, cat, list(parts), weight, bias, widths, _index=index)


def _forced_form() -> str | None:
    force = config.cat_linear_fused_force
    if force is None or force == "bench":
        return None
    if force == "off" or force in FORMS:
        return force
    raise ValueError(
        f"config.cat_linear_fused_force must be None, 'bench', 'off' or one of {FORMS}; "
        f"got {force!r}"
    )


def should_cat_linear_fused(match: CatLinearMatch) -> str | None:
    """Is the rewrite worth it, and in which form?  Returns a form or None."""
    forced = _forced_form()
    if forced is not None:
        if forced == "off":
            _skip("forced off at %s", match.linear)
            return None
        if forced not in match.available_forms():
            _skip("forced form %s is not available at %s", forced, match.linear)
            return None
        return forced

    device = match.device
    if device.type == "cuda" or config.cat_linear_fused_force == "bench":
        return _should_by_benchmark(match)
    if device.type == "cpu":
        return _should_on_cpu(match)
    _skip("no profitability rule for device %s at %s", device, match.linear)
    return None


# The CPU rule's gates (benchmarks/README.md, "CPU rule: rows and widths"): the
# fewest rows (the product of the leading dims), the narrowest piece, and the
# least share of K made by in-graph pointwise producers at which the "view"
# form was measured to beat stock forward+backward.
CPU_MIN_ROWS = 256
CPU_MIN_PIECE_WIDTH = 64
CPU_MIN_PRODUCED_SHARE = 1 / 3


def _should_on_cpu(match: CatLinearMatch) -> str | None:
    """Measured rule (benchmarks/cat_linear_fused_cpu.py; the figures are in
    benchmarks/README.md, "cat_linear_fused", "CPU rule: rows and widths").

    Rewrite to ``"view"`` only a forward+backward site with at least
    ``CPU_MIN_ROWS`` rows, pieces at least ``CPU_MIN_PIECE_WIDTH`` wide, and
    parts made by in-graph pointwise producers for at least
    ``CPU_MIN_PRODUCED_SHARE`` of K; keep stock everywhere else:

    * Forward only, Inductor's C++ backend writes the parts (and pointwise
      producers) straight into the cat buffer and one GEMM beats several
      (0.90-0.95x for wide graph-input pieces from 512 rows: under the 1.1x
      margin the CUDA benchmark asks for, so stock).
    * Forward+backward, the saved cat and the cat's gradient as one buffer go
      away.  That pays for what a producer would have written into the cat:
      from 256 to 4096 rows on one thread 0.37-0.64x of stock with every part
      produced, 0.57-0.83x with a third or half of K produced; with a quarter
      or less 0.77-1.02x on one thread and 0.93-1.06x on two, no clear win.
    * With graph-input parts only there is nothing to save: 1.02-1.44x at
      64-512 rows, 0.88-1.05x at 2048-4096 rows for pieces 96 wide or more.
    * At 64 rows, one produced part next to graph-input parts ran up to 1.10x
      slower on one thread and 1.24x on two (every part produced: 0.52-0.95x,
      a win the gate gives up).  Rows not known at compile time count as too
      few.
    """
    if not match.needs_grad:
        _skip("forward only: stock is faster on CPU at %s", match.linear)
        return None
    produced = sum(w for w, f in zip(match.widths, match.fused_producers) if f)
    if produced < CPU_MIN_PRODUCED_SHARE * sum(match.widths):
        _skip(
            "in-graph producers make %d of %d columns, less than %.2f, on CPU at %s",
            produced,
            sum(match.widths),
            CPU_MIN_PRODUCED_SHARE,
            match.linear,
        )
        return None
    if min(match.widths) < CPU_MIN_PIECE_WIDTH:
        _skip("a piece is narrower than %d on CPU at %s", CPU_MIN_PIECE_WIDTH, match.linear)
        return None
    rows = 1
    for d in _val(match.cat).shape[:-1]:
        rows = rows * d
    if not statically_known_true(rows >= CPU_MIN_ROWS):
        _skip("fewer than %d rows (%s) on CPU at %s", CPU_MIN_ROWS, rows, match.linear)
        return None
    return "view"


# Roofline best case from which a forward site whose pieces are whole K tiles
# is taken in the "gemm" form without a benchmark.  The form's Triton GEMM ran
# 1.10-1.28x slower than cuBLAS on a ready input at such sites on an H100
# (floor_gemm against floor, benchmarks/README.md), so a best case of 1.3x
# leaves it ahead of stock; below it the call is the benchmark's, which costs
# a kernel compile per site and runs only under max_autotune.  Except where
# the one-loop kernel (128x128 tiles) would run a compute-bound GEMM: there it
# was 1.28x cuBLAS and no faster than stock (128+128+128 -> 1024 at 8192 rows:
# 1.004 and 1.149 bf16, 0.902 and 1.060 fp16), while at memory-bound one-loop
# sites (64+64 -> 256, 4 x 64 -> 512) it was 1.11-1.14x cuBLAS and 0.68-0.88x
# stock; the per-piece kernel (128x256 tiles) paid at compute-bound sites too.
GEMM_WITHOUT_BENCHMARK_BOUND = 1.3

# Producers the kernel folds that the roofline may count as free: relu (a max).
# A transcendental fold (sigmoid, silu, gelu) runs in the kernel's K loop once
# per N tile and the roofline does not count it: with gelu pieces at
# 256+256 -> 160 the fold took 11.7 of the kernel's 18.1 us on an H100, and
# the site was 0.97x of stock where the bound promised far more
# (benchmarks/README.md, "On a model": the site alone, gelu folded).  Such sites
# are the benchmark's call.
CHEAP_PROLOGUES = ("relu",)  # names in cat_linear_fused_gemm.PROLOGUES


def roofline_decision(spec: Any, bound: float | None) -> str:
    """What the roofline alone says of a site: ``"screen"`` (no form can beat
    stock by the margin), ``"gemm"`` (take the gemm form, no benchmark needed;
    not where the one-loop kernel would run a compute-bound GEMM, see
    ``GEMM_WITHOUT_BENCHMARK_BOUND``, nor where it would fold a transcendental
    producer, see ``CHEAP_PROLOGUES``) or ``"bench"`` (only a benchmark can
    tell)."""
    from .cat_linear_fused_gemm import ONE_LOOP_CONFIG, PROLOGUES, whole_k_tiles

    if bound is None:
        return "bench"
    if bound < config.cat_linear_fused_bench_margin:
        return "screen"
    if (
        "gemm" in spec.forms
        and not spec.backward
        and bound >= GEMM_WITHOUT_BENCHMARK_BOUND
        and whole_k_tiles([s[-1] for s, _, _ in spec.parts])
    ):
        if spec.gemm_config == ONE_LOOP_CONFIG and _compute_bound(spec):
            log.debug(
                "%s: the one-loop kernel at a compute-bound GEMM is not clear of stock "
                "(%s); only a benchmark can tell",
                _FEATURE,
                spec.key(),
            )
            return "bench"
        cheap = {0, *(PROLOGUES[name] for name in CHEAP_PROLOGUES)}
        if any(p not in cheap for p in spec.prologues):
            log.debug(
                "%s: a folded transcendental producer costs kernel time the roofline "
                "does not count (%s); only a benchmark can tell",
                _FEATURE,
                spec.key(),
            )
            return "bench"
        return "gemm"
    return "bench"


# Least share of its graph's step a site taken in the "gemm" form without a
# benchmark must save (roofline estimates of both, ``step_share``).  Each such
# site compiles a Triton kernel of its own on a cold cache: on an H100 that
# added about 1 s (AOTAutograd tracing through the op, then the kernel's compile
# when the generated module loads) to a 6.5 s compile of a 12-site model, for a
# site that saved about 1.7 of 594 us per step (benchmarks/README.md, "On a
# model").  A site under this share is left to the benchmark (max_autotune).
MIN_STEP_SHARE = 0.05

# Ops whose time ``graph_roofline_us`` counts: the GEMMs (input tensor at this
# argument position) and the cats of a pre-grad graph.
_GEMM_INPUT_ARG = {
    F.linear: 0, torch._C._nn.linear: 0, torch.matmul: 0, torch.mm: 0,
    torch.bmm: 0, operator.matmul: 0, "matmul": 0, "mm": 0, "bmm": 0,
    torch.addmm: 1, torch.baddbmm: 1, "addmm": 1, "baddbmm": 1,
}  # fmt: skip


def _numel_hint(val: torch.Tensor) -> int | None:
    sizes = _concrete(val.shape)
    return None if sizes is None else math.prod(sizes)


def graph_roofline_us(graph: torch.fx.Graph, limits: Any) -> float:
    """Roofline estimate of a pre-grad graph's step (µs): its GEMMs (three of
    them where the output needs grad) and its cats (a copy, and the gradient's
    split where it needs grad) at the device's limits.  Everything else is
    left out, so the estimate is low and a site's share of it high."""
    total = 0.0
    for node in graph.nodes:
        if node.op not in ("call_function", "call_method"):
            continue
        try:
            idx = _GEMM_INPUT_ARG.get(node.target)
        except TypeError:  # unhashable target
            continue
        is_cat = node.target in CAT_TARGETS or node.target == "cat"
        if idx is None and not is_cat:
            continue
        out = _val(node)
        out_numel = None if out is None else _numel_hint(out)
        if out_numel is None:
            continue
        passes = 3 if out.requires_grad else 1
        if is_cat:
            total += limits.bytes_us(2.0 * out_numel * out.element_size()) * min(passes, 2)
            continue
        inputs = [_val(a) for a in node.args if isinstance(a, torch.fx.Node)]
        a = _val(node.args[idx]) if len(node.args) > idx else None
        numels = [_numel_hint(v) for v in inputs if v is not None]
        if a is None or a.dim() == 0 or any(n is None for n in numels):
            continue
        k = _concrete(a.shape[-1:])
        if k is None:
            continue
        flops = 2.0 * out_numel * k[0]
        nbytes = (sum(numels) + out_numel) * out.element_size()  # type: ignore[arg-type]
        total += limits.roofline_us(flops, nbytes) * passes
    return total


def step_share(match: CatLinearMatch, spec: Any) -> float | None:
    """The roofline share of its graph's step that rewriting this site saves
    (the cat's traffic, as in ``speedup_bound``); None without figures."""
    roofline = _roofline(spec)
    if roofline is None:
        return None
    shape, limits = roofline
    index = match._index or GraphIndex(match.linear.graph)
    step = index.step_us(limits)
    return None if step <= 0 else shape.cat_us(limits) / step


def _should_by_benchmark(match: CatLinearMatch) -> str | None:
    from . import cat_linear_fused_bench as bench

    if config.deterministic:
        # The roofline's limits are measured too: nothing timed decides here.
        _skip("no measurement under config.deterministic at %s", match.linear)
        return None
    spec = match.bench_spec(benchmark_candidates(match))
    if spec is None:
        _skip("no size hints for a decision at %s", match.linear)
        return None
    bound = speedup_bound(spec)
    verdict = roofline_decision(spec, bound)
    if verdict == "screen":
        counters["inductor"]["cat_linear_fused_screened"] += 1
        _skip(
            "without the cat the step is at best %.3fx faster (roofline), "
            "below the %.2fx margin at %s",
            bound,
            config.cat_linear_fused_bench_margin,
            match.linear,
        )
        return None
    benchmark = config.cat_linear_fused_force == "bench" or config.max_autotune
    if verdict == "gemm" and not benchmark:
        share = step_share(match, spec)
        if share is not None and share < MIN_STEP_SHARE:
            counters["inductor"]["cat_linear_fused_small_share"] += 1
            _skip(
                "saves about %.1f%% of its graph's step (roofline), less than the "
                "%.0f%% a kernel compile is worth; only a benchmark (max_autotune) "
                "could take it at %s",
                100 * share,
                100 * MIN_STEP_SHARE,
                match.linear,
            )
            return None
        counters["inductor"]["cat_linear_fused_roofline"] += 1
        return "gemm"
    if not benchmark:
        _skip(
            "roofline best case %s is not clear of stock; only a benchmark "
            "(max_autotune) could take it at %s",
            "unknown" if bound is None else f"{bound:.3f}x",
            match.linear,
        )
        return None
    form = bench.get_cached_form(spec)
    if form is None:
        times = bench.benchmark_forms(spec)
        form = choose_form(times)
        bench.set_cached_form(spec, form)
        log.debug("%s benchmark at %s: %s -> %s", _FEATURE, match.linear, times, form)
    if form == "stock":
        _skip(
            "stock is within %.2fx of every form at %s",
            config.cat_linear_fused_bench_margin,
            match.linear,
        )
        return None
    return form


def _roofline(spec: Any) -> tuple[Any, Any] | None:
    """The site ``spec`` describes as the roofline sees it, and the device's
    limits (``cat_linear_fused_cost``); None where the device has no figures."""
    from . import cat_linear_fused_cost as cost

    limits = cost.device_limits(torch.device(spec.device), spec.dtype)
    if limits is None:
        return None
    # Forward only, a piece made by a pointwise op saves nothing unless the
    # form folds the op (stock writes it straight into the cat buffer).
    saved = [
        spec.backward or not fused or bool(pro)
        for fused, pro in zip(spec.fused_producers, spec.prologues)
    ]
    shape = cost.site_shape(
        [s for s, _, _ in spec.parts], spec.weight[0][0], spec.dtype, spec.backward, saved
    )
    return shape, limits


def _compute_bound(spec: Any) -> bool:
    """Whether the site's GEMM is bound by its FLOPs (True without figures)."""
    roofline = _roofline(spec)
    return roofline is None or roofline[0].compute_bound(roofline[1])


def speedup_bound(spec: Any) -> float | None:
    """Roofline best case of any form at the site ``spec`` describes; None
    where the device has no figures."""
    roofline = _roofline(spec)
    return None if roofline is None else roofline[0].speedup_bound(roofline[1])


def benchmark_candidates(match: CatLinearMatch) -> tuple[str, ...]:
    """The forms worth timing at this site.

    ``"gemm"`` only for forward-only sites: its per-piece backward adds GEMM
    launches to steps that are bound by host work, and forward+backward its
    measured ratio to stock spread too widely for a compile-time benchmark to
    call it (benchmarks/README.md).
    """
    forms = match.available_forms()
    if match.needs_grad:
        forms = tuple(f for f in forms if f != "gemm")
    return forms


def choose_form(times: dict[str, float], margin: float | None = None) -> str:
    """Fastest form if it beats ``times["stock"]`` by ``margin`` (default
    ``config.cat_linear_fused_bench_margin``), else ``"stock"``."""
    if margin is None:
        margin = config.cat_linear_fused_bench_margin
    best = min((f for f in FORMS if f in times), key=times.__getitem__, default=None)
    if best is not None and times["stock"] > times[best] * margin:
        return best
    return "stock"


def describe_site(linear: torch.fx.Node) -> str:
    """``linear_3 [256+256 -> 160]``: a ``linear(cat)`` site as the debug log
    names it (piece widths and N from the fake values; ``?`` where unknown)."""

    def width(node: Any) -> Any:
        val = _val(node)
        return "?" if val is None else val.shape[-1]

    cat = _arg(linear, 0, "input")
    parts: Any = []
    if isinstance(cat, torch.fx.Node) and cat.target in CAT_TARGETS:
        parts = _arg(cat, 0, "tensors", [])
    return f"{linear} [{'+'.join(str(width(p)) for p in parts)} -> {width(linear)}]"


def find_cat_linear_matches(graph: torch.fx.Graph) -> list[CatLinearMatch]:
    matches = []
    index = GraphIndex(graph)
    for node in graph.nodes:
        if node.op == "call_function" and node.target in LINEAR_TARGETS:
            match = can_cat_linear_fused(node, index)
            if match is not None:
                matches.append(match)
    return matches


def cat_linear_fused_pass(graph: torch.fx.Graph) -> int:
    """Find every ``linear(cat)`` site, decide per site, then rewrite.
    Returns the number of sites rewritten."""
    decided = []
    for match in find_cat_linear_matches(graph):
        form = should_cat_linear_fused(match)
        if form is not None:
            decided.append((match, form))
    for match, form in decided:
        # Named before the rewrite erases its nodes; only when it will be logged.
        site = describe_site(match.linear) if log.isEnabledFor(logging.DEBUG) else None
        match.rewrite(form)
        counters["inductor"][_FEATURE] += 1
        log.debug("%s: rewrote %s as %s", _FEATURE, site, form)
    return len(decided)


# Entry points of the seed PR (ROCm/pytorch#3233), kept at the same module path
# and with the same meaning, so code written against it keeps working.  What
# differs is when a site is rewritten: that PR rewrites every site its fixed
# gates admit (MAX_PARTS, MIN_PIECE_WIDTH, MAX_TOTAL_CAT_WIDTH), always with
# contiguous weight copies; here can_/should_cat_linear_fused decide per site,
# because the unconditional rewrite measured slower than stock at most sites
# (benchmarks/README.md, "cat_linear_fused").


def fuse_cat_linear_in_graph(graph: torch.fx.Graph) -> int:
    """Run the pass on a pre-grad ``graph`` in place; returns the number of
    ``linear(cat)`` sites rewritten.  Does not read ``config.cat_linear_fused``
    (calling it is the opt-in); ``config.cat_linear_fused_force`` applies."""
    return cat_linear_fused_pass(graph)


class CatLinearFusedPreGradPass(CustomGraphPass):
    """The pass as a ``CustomGraphPass``: assign it to
    ``config.pre_grad_custom_pass`` or register it for the
    ``pre_grad_custom_pass`` stage.  ``uuid()`` covers this pass's sources and
    the config that changes its decisions, so FX graph cache entries stay
    valid."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        fuse_cat_linear_in_graph(graph)

    def uuid(self) -> Any:
        here = os.path.dirname(os.path.abspath(__file__))
        files = tuple(
            os.path.join(here, name)
            for name in (
                "cat_linear_fused.py",
                "cat_linear_fused_bench.py",
                "cat_linear_fused_cost.py",
                "cat_linear_fused_gemm.py",
            )
        )
        return (get_hash_for_files(files), str(config.cat_linear_fused_force))


cat_linear_fused_pre_grad_pass = CatLinearFusedPreGradPass()
