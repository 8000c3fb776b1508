"""
``linear(cat([x0, x1, ...], dim=-1), W, b)`` without materializing the cat.

A cat on the contraction dim followed by a linear is one GEMM whose input is
split along K, so the pieces can be read where they live::

    linear(cat([x0, x1], -1), W, b) == linear(x0, W[:, :k0], b) + linear(x1, W[:, k0:])

The ``cat_linear`` pre-grad fusion (``pre_grad_fusion_options["cat_linear"]``
in group_batch_fusion.py) drives this module through ``CatLinearRule``:
``match_cat_linear`` says whether a rewrite is exact (structure, shapes,
dtypes, mutations), ``cat_linear_fused_cost.decide`` whether it pays and in
which form, and ``CatLinearMatch.rewrite`` makes it:

* ``"view"``: per-piece linears on column views of W, summed.  On CPU
  forward+backward this drops the saved cat and its gradient.
* ``"mm"``: the ``inductor::cat_linear`` op, whose lowering
  (kernel/cat_linear.py) reads the pieces in place in one GEMM.

The fusion's options may force a form (``{"form": "view" | "mm" | "off"}``).
``fuse_cat_linear_in_graph`` is the explicit mechanism: every safe site
within ``MAX_PARTS``, ``MIN_PIECE_WIDTH`` and ``MAX_TOTAL_CAT_WIDTH``, in the
``"view"`` form, with no profitability check.
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
from torch._subclasses.fake_tensor import FakeTensor
from torch.fx.experimental.symbolic_shapes import statically_known_true
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils import _pytree as pytree

from .. import config
from ..custom_graph_pass import CustomGraphPass, get_hash_for_files
from ..pattern_matcher import get_arg_value
from . import cat_linear_fused_cost as cost


log = logging.getLogger(__name__)

# Gates of the explicit call (fuse_cat_linear_in_graph); the fusion keeps
# within MAX_PARTS and MIN_PIECE_WIDTH too (more pieces or slivers never pay).
MAX_PARTS = cost.MAX_PARTS
MIN_PIECE_WIDTH = 16
MAX_TOTAL_CAT_WIDTH = 16384

FORMS = ("view", "mm")
LINEAR_TARGETS = (F.linear, torch._C._nn.linear)
CAT_TARGETS = (torch.cat, torch.concat, torch.concatenate)

# Producers that Inductor fuses into the write of the cat buffer, by name
# (torch.relu, F.relu, "relu" as a method, operator.add ...).
_POINTWISE_PRODUCERS = frozenset(
    ("relu", "sigmoid", "tanh", "gelu", "silu", "exp", "neg", "abs")
    + ("add", "mul", "sub", "div", "truediv")
)
# GEMMs by name, and the position of their input, for the graph's step cost.
_GEMM_INPUT = {"linear": 0, "matmul": 0, "mm": 0, "bmm": 0, "addmm": 1, "baddbmm": 1}


def _name(target: Any) -> str:
    return target if isinstance(target, str) else getattr(target, "__name__", "")


def _skip(reason: str, node: torch.fx.Node) -> None:
    log.debug("skipping cat_linear: %s at %s", reason, node)


def _val(node: Any) -> torch.Tensor | None:
    if not isinstance(node, torch.fx.Node):
        return None
    val = node.meta.get("example_value", node.meta.get("val"))
    return val if isinstance(val, torch.Tensor) else None


def _hint(size: Any) -> int | None:
    """A size's value at trace time (a SymInt's hint), without a guard."""
    if isinstance(size, torch.SymInt):
        hint = size.node.hint
        return None if hint is None else int(hint)
    return int(size)


def _numel_hint(val: torch.Tensor) -> int | None:
    numel = 1
    for size in val.shape:
        hint = _hint(size)
        if hint is None:
            return None
        numel *= hint
    return numel


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


def is_possible_mutation(node: torch.fx.Node) -> bool:
    """Could ``node`` write to an existing tensor?  Conservative: an op schema
    that writes, an output that is one of its inputs, or a spelling of an
    in-place call that dynamo leaves in pre-grad graphs."""
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
    if callable(target) and _passes_inplace(target, node.args):
        return True
    name = _name(target)
    if target in (operator.setitem, operator.delitem):
        return True
    return name.endswith("_") and not name.endswith("__") or name.startswith("__i")


def _storage(node: torch.fx.Node) -> Any:
    val = _val(node)
    if val is None or val.is_sparse:
        return None
    try:
        return StorageWeakRef(val.untyped_storage())
    except (NotImplementedError, RuntimeError):
        return None


class GraphIndex:
    """What every site asks of the whole graph, computed once: node order, the
    possible mutations (``is_possible_mutation``) and the storages the caller
    can reach (inputs, attributes, outputs).  A node inserted after it was
    built makes a query walk the graph instead; rewrites insert only nodes
    that cannot write and whose outputs are fresh, so what it knows stays
    true."""

    def __init__(self, graph: torch.fx.Graph) -> None:
        self.graph = graph
        self._pos: dict[torch.fx.Node, int] = {}
        self._mutation_pos: list[int] = []
        self._mutations: list[torch.fx.Node] = []
        self.escaping: set[Any] = set()
        for i, node in enumerate(graph.nodes):
            self._pos[node] = i
            if is_possible_mutation(node):
                self._mutation_pos.append(i)
                self._mutations.append(node)
            if node.op in ("placeholder", "get_attr"):
                self.escaping.add(_storage(node))
            elif node.op == "output":
                for out in pytree.tree_leaves(node.args):
                    if isinstance(out, torch.fx.Node):
                        self.escaping.add(_storage(out))
        self._step_cost: dict[float, float] = {}

    def mutations(
        self, start: torch.fx.Node, end: torch.fx.Node | None = None
    ) -> list[torch.fx.Node]:
        """Possible mutations from ``start`` up to, not including, ``end``
        (the graph's end if None), in graph order."""
        lo = self._pos.get(start)
        hi = len(self._pos) if end is None else self._pos.get(end)
        if lo is None or hi is None:
            found = []
            node = start
            while node is not end and node.op != "root":
                if is_possible_mutation(node):
                    found.append(node)
                node = node.next
            return found
        i = bisect.bisect_left(self._mutation_pos, lo)
        j = bisect.bisect_left(self._mutation_pos, hi)
        return self._mutations[i:j]

    def step_cost(self, ridge: float) -> float:
        """Roofline cost of the graph's GEMMs and cats (``cost.roofline``
        units): the rest is left out, so a site's share of it is high."""
        if ridge in self._step_cost:
            return self._step_cost[ridge]
        total = 0.0
        for node in self.graph.nodes:
            out = _val(node) if node.op in ("call_function", "call_method") else None
            numel = None if out is None else _numel_hint(out)
            if out is None or numel is None:
                continue
            idx = _GEMM_INPUT.get(_name(node.target))
            grad = out.requires_grad
            if _name(node.target) in ("cat", "concat", "concatenate"):
                total += cost.cat_step_cost(numel, out.element_size(), grad)
                continue
            a = _val(get_arg_value(node, idx)) if idx is not None else None
            k = None if a is None or a.dim() == 0 else _hint(a.shape[-1])
            if a is None or k is None or _numel_hint(a) is None:
                continue
            n = _hint(out.shape[-1]) if out.dim() else 1
            if not n:
                continue
            total += cost.gemm_step_cost(
                numel // n, k, n, out.element_size(), grad, ridge
            )
        self._step_cost[ridge] = total
        return total


def _is_fused_producer(node: torch.fx.Node) -> bool:
    """A single-user pointwise op: Inductor writes it straight into the cat."""
    if node.op not in ("call_function", "call_method") or len(node.users) != 1:
        return False
    target = node.target
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return torch.Tag.pointwise in getattr(target, "tags", ())
    return _name(target) in _POINTWISE_PRODUCERS


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

    def site(self) -> cost.CatLinearSite | None:
        """The site as the decision sees it; None without size hints."""
        out = _val(self.linear)
        rows = _numel_hint(_val(self.cat))  # type: ignore[arg-type]
        assert out is not None
        n = _hint(out.shape[-1])
        if rows is None or n is None:
            return None
        return cost.CatLinearSite(
            rows=rows // sum(self.widths),
            widths=tuple(self.widths),
            n=n,
            dtype=out.dtype,
            device=out.device,
            needs_grad=out.requires_grad,
            produced=tuple(_is_fused_producer(p) for p in self.parts),
            max_autotune=config.max_autotune or config.max_autotune_gemm,
        )

    def rewrite(self, form: str) -> torch.fx.Node:
        graph = self.linear.graph
        with graph.inserting_before(self.linear):
            if form == "view":
                out = self._rewrite_view(graph)
            elif form == "mm":
                from ..kernel.cat_linear import cat_linear

                out = self._call(
                    graph, cat_linear._opoverload, self.parts, self.weight, self.bias
                )
            else:
                raise AssertionError(f"unknown cat_linear form {form!r}")
        out.meta.update(
            {k: v for k, v in self.linear.meta.items() if k != "example_value"}
        )
        self.linear.replace_all_uses_with(out)
        graph.erase_node(self.linear)
        if not self.cat.users:
            graph.erase_node(self.cat)
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
        for i, (part, width) in enumerate(zip(self.parts, self.widths)):
            w = self._call(graph, torch.narrow, self.weight, 1, start, width)
            y = self._call(graph, F.linear, part, w, self.bias if i == 0 else None)
            acc = y if acc is None else self._call(graph, operator.add, acc, y)
            start += width
        assert acc is not None
        return acc


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

    # Pre-grad IR is not functional: the rewrite reads the parts where the
    # linear was, so nothing in between may write to them.
    index = index or GraphIndex(linear.graph)
    between = index.mutations(cat.next, linear)
    if between:
        _skip(f"possible mutation {between[0]} between cat and linear", linear)
        return None
    # Autograd then saves the parts where stock saved the cat, so a later
    # in-place write to a part or a view of one would corrupt the backward:
    # in this graph, or by the caller between forward and backward.
    storages = {_storage(p) for p in parts}
    if out_val.requires_grad and (  # type: ignore[union-attr]
        None in storages or storages & index.escaping
    ):
        _skip("a part the caller can write to before the backward", linear)
        return None
    for node in index.mutations(linear.next):
        if None in storages or any(
            _storage(i) in storages or _storage(i) is None for i in node.all_input_nodes
        ):
            _skip(f"possible mutation {node} of a part after the linear", linear)
            return None
    return CatLinearMatch(linear, cat, widths)


def fuse_cat_linear_in_graph(graph: torch.fx.Graph) -> int:
    """Rewrite every safe ``linear(cat)`` site within ``MAX_PARTS``,
    ``MIN_PIECE_WIDTH`` and ``MAX_TOTAL_CAT_WIDTH`` of a pre-grad ``graph``
    into the ``"view"`` form, in place; returns the number rewritten.
    Calling it is the decision: nothing is weighed."""
    index = GraphIndex(graph)
    matches = []
    for node in graph.nodes:
        match = match_cat_linear(node, index)
        if match is None:
            continue
        if not (
            len(match.parts) <= MAX_PARTS
            and min(match.widths) >= MIN_PIECE_WIDTH
            and sum(match.widths) <= MAX_TOTAL_CAT_WIDTH
        ):
            _skip("outside the explicit call's gates", node)
            continue
        matches.append(match)
    for match in matches:
        match.rewrite("view")
        counters["inductor"]["cat_linear"] += 1
    return len(matches)


class CatLinearFusedPreGradPass(CustomGraphPass):
    """``fuse_cat_linear_in_graph`` as a ``CustomGraphPass``: assign it to
    ``config.pre_grad_custom_pass`` or register it for that stage."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        fuse_cat_linear_in_graph(graph)

    def uuid(self) -> Any:
        return get_hash_for_files((os.path.abspath(__file__),))


cat_linear_fused_pre_grad_pass = CatLinearFusedPreGradPass()
