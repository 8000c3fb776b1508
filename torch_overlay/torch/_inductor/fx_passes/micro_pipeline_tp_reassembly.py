"""Slice/cat reassembly of tensor-parallel collectives, for micro-pipeline TP.

Graph-level chunking can rebuild the layout of a collective with ``slice`` and
``cat`` instead of the ``split``/``getitem``/``cat`` that
``funcol.all_gather_single`` and ``funcol.reduce_scatter_single`` trace to::

    # all-gather along gather_dim d (the all-gather itself stacks shards on dim 0)
    y = wait_tensor(all_gather_into_tensor(shard, group_size, group_name))
    A = cat([slice(y, 0, i * c, (i + 1) * c) for i in range(group_size)], d)

    # reduce-scatter along scatter_dim d (the reduce-scatter itself splits dim 0)
    y = mm(...)
    out = wait_tensor(reduce_scatter_tensor(
        cat([slice(y, d, i * c, (i + 1) * c) for i in range(group_size)], 0),
        reduce_op, group_size, group_name))

Such a subgraph is the canonical collective only when the slices are exactly
the ``group_size`` equal chunks of one source, in rank order, with step 1,
covering the whole dimension.  Anything else (swapped, duplicated, partial,
strided, overlapping or unequal chunks, two sources, the wrong chunk count)
computes something different, and fusing it into
``symm_mem.fused_all_gather_matmul`` / ``fused_matmul_reduce_scatter`` would
silently miscompile.  This module proves the canonical form and rejects
everything else with a logged reason; ``micro_pipeline_tp.py`` consults it
where it looks for all-gather and reduce-scatter patterns.

Phases, as in the rest of ``fx_passes``:

* ``*Reassembly.from_node``: find the structure (which nodes, which dims);
* ``can_fuse_*_reassembly``: safety, i.e. the slice ranges provably give the
  canonical layout (static and symbolic shapes; nothing is guarded on);
* ``should_fuse_reassembly``: the collective and the chunks have no users
  outside the reassembly, as the ``split``/``getitem`` patterns require, so
  the fusion removes the unfused collective instead of running both.

``match_all_gather_reassembly`` and ``match_reduce_scatter_reassembly`` run
all three.  The match objects never rewrite anything themselves: the callers'
``_AllGatherMatch`` / ``_ReduceScatterMatch`` do, and erase only ``nodes``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, TypeVar, Union

import torch
import torch.fx
from torch._dynamo.utils import counters
from torch.fx.experimental.symbolic_shapes import statically_known_true, sym_eq


log = logging.getLogger(__name__)
aten = torch.ops.aten

FEATURE = "micro_pipeline_tp_slice_cat"

IntLike = Union[int, torch.SymInt]

_INT64_MAX = 2**63 - 1


def _c10d() -> Any:
    # Looked up lazily: the functional collectives are only registered on
    # builds with torch.distributed.
    return torch.ops._c10d_functional


def _skip(reason: str, *args: object) -> None:
    log.debug("skipping %s: " + reason, FEATURE, *args)
    counters["inductor"][f"{FEATURE}_rejected"] += 1


def _arg(node: torch.fx.Node, index: int, name: str, default: Any = None) -> Any:
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def _val(node: torch.fx.Node) -> torch.Tensor | None:
    val = node.meta.get("val")
    return val if isinstance(val, torch.Tensor) else None


def _int_like(value: Any) -> IntLike | None:
    """A slice bound or size as an int or SymInt; None when it is neither."""
    if isinstance(value, torch.fx.Node):
        value = value.meta.get("val")
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, torch.SymInt)):
        return value
    return None


def _known_eq(a: IntLike, b: IntLike) -> bool:
    return statically_known_true(sym_eq(a, b))


def _known(cond: Any) -> bool:
    return statically_known_true(cond)


def _normalize_dim(dim: Any, ndim: int) -> int | None:
    if isinstance(dim, bool) or not isinstance(dim, int):
        return None
    if -ndim <= dim < 0:
        return dim + ndim
    if 0 <= dim < ndim:
        return dim
    return None


def _normalize_bound(bound: Any, size: IntLike, default: IntLike) -> IntLike | None:
    """``bound`` as the index aten.slice actually uses (clamped to [0, size]),
    or None when that cannot be proven without guarding."""
    if bound is None:
        return default
    value = _int_like(bound)
    if value is None:
        return None
    # ``y[k:]`` traces to end=INT64_MAX, which a symbolic size can't be shown
    # to stay under; no tensor dim is larger, so it means "to the end".
    if isinstance(value, int) and value >= _INT64_MAX:
        return size
    if _known(value >= size):
        return size
    if _known(value >= 0):
        return value
    if _known(value < 0):
        if _known(value + size <= 0):
            return 0
        if _known(value + size >= 0):
            return value + size
    return None


@dataclass
class _Chunk:
    node: torch.fx.Node
    source: torch.fx.Node
    dim: int
    start_arg: Any
    end_arg: Any
    step_arg: Any

    @classmethod
    def from_node(cls, node: Any) -> _Chunk | None:
        if not (
            isinstance(node, torch.fx.Node)
            and node.op == "call_function"
            and node.target is aten.slice.Tensor
        ):
            return None
        source = node.args[0]
        if not isinstance(source, torch.fx.Node):
            return None
        source_val = _val(source)
        if source_val is None:
            return None
        dim = _normalize_dim(_arg(node, 1, "dim", 0), source_val.ndim)
        if dim is None:
            return None
        return cls(
            node=node,
            source=source,
            dim=dim,
            start_arg=_arg(node, 2, "start"),
            end_arg=_arg(node, 3, "end"),
            step_arg=_arg(node, 4, "step", 1),
        )


def _chunks_of(cat_node: torch.fx.Node) -> list[_Chunk] | None:
    """The cat's inputs as slices of one source along one dim, else None
    (with a logged reason)."""
    inputs = cat_node.args[0]
    if not isinstance(inputs, (list, tuple)) or len(inputs) == 0:
        _skip("%s has no tensor-list input", cat_node)
        return None
    chunks = []
    for inp in inputs:
        chunk = _Chunk.from_node(inp)
        if chunk is None:
            _skip("%s input %s is not a slice with known shapes", cat_node, inp)
            return None
        chunks.append(chunk)
    sources = {chunk.source for chunk in chunks}
    if len(sources) != 1:
        _skip(
            "%s reassembles slices of %d different tensors (%s)",
            cat_node,
            len(sources),
            ", ".join(sorted(str(s) for s in sources)),
        )
        return None
    dims = {chunk.dim for chunk in chunks}
    if len(dims) != 1:
        _skip("%s reassembles slices along different dims %s", cat_node, sorted(dims))
        return None
    return chunks


def can_reassemble_canonical_chunks(
    chunks: list[_Chunk], group_size: int, what: torch.fx.Node
) -> bool:
    """Whether ``chunks``, in order, are exactly the ``group_size`` equal
    contiguous chunks of their source along their dim: chunk ``i`` is
    ``[i * c, (i + 1) * c)`` with step 1 and ``c * group_size`` the dim size.

    Proven on static sizes and, for symbolic sizes, with
    ``statically_known_true`` (never by adding guards): whatever cannot be
    proven is rejected.
    """
    if not isinstance(group_size, int) or isinstance(group_size, bool):
        _skip("%s: group size %r is not a constant", what, group_size)
        return False
    if len(chunks) != group_size:
        _skip(
            "%s has %d chunks but the group has %d ranks",
            what,
            len(chunks),
            group_size,
        )
        return False
    source_val = _val(chunks[0].source)
    assert source_val is not None  # checked by _Chunk.from_node
    dim = chunks[0].dim
    size = source_val.shape[dim]
    chunk_size = size // group_size
    if not _known_eq(chunk_size * group_size, size):
        _skip(
            "%s: dim %d of %s (size %s) is not provably divisible by %d ranks",
            what,
            dim,
            chunks[0].source,
            size,
            group_size,
        )
        return False
    for i, chunk in enumerate(chunks):
        step = _int_like(chunk.step_arg)
        if step is None or not _known_eq(step, 1):
            _skip(
                "%s: chunk %d (%s) has step %s, not 1",
                what,
                i,
                chunk.node,
                chunk.step_arg,
            )
            return False
        start = _normalize_bound(chunk.start_arg, size, 0)
        end = _normalize_bound(chunk.end_arg, size, size)
        if start is None or end is None:
            _skip(
                "%s: bounds [%s, %s) of chunk %d (%s) are not provable",
                what,
                chunk.start_arg,
                chunk.end_arg,
                i,
                chunk.node,
            )
            return False
        if not (
            _known_eq(start, i * chunk_size) and _known_eq(end, (i + 1) * chunk_size)
        ):
            _skip(
                "%s: chunk %d (%s) covers [%s, %s) of dim %d, "
                "rank %d's chunk is [%s, %s)",
                what,
                i,
                chunk.node,
                start,
                end,
                dim,
                i,
                i * chunk_size,
                (i + 1) * chunk_size,
            )
            return False
    return True


def _is_noop_trim(trim: torch.fx.Node, dim: int) -> bool:
    """Whether ``trim`` (a slice of the reassembled cat) keeps all of it."""
    cat_node = trim.args[0]
    assert isinstance(cat_node, torch.fx.Node)
    cat_val = _val(cat_node)
    if cat_val is None:
        _skip("%s: no shape metadata on %s", trim, cat_node)
        return False
    trim_dim = _normalize_dim(_arg(trim, 1, "dim", 0), cat_val.ndim)
    if trim_dim != dim:
        _skip("%s trims dim %s, not the reassembled dim %d", trim, trim_dim, dim)
        return False
    size = cat_val.shape[dim]
    step = _int_like(_arg(trim, 4, "step", 1))
    start = _normalize_bound(_arg(trim, 2, "start"), size, 0)
    end = _normalize_bound(_arg(trim, 3, "end"), size, size)
    if (
        step is None
        or start is None
        or end is None
        or not (_known_eq(step, 1) and _known_eq(start, 0) and _known_eq(end, size))
    ):
        # A real trim (e.g. padding of uneven shards) changes the shape the
        # consumers see; the fused op returns the untrimmed all-gather.
        _skip(
            "%s keeps [%s, %s) step %s of dim %d (size %s), not all of it",
            trim,
            _arg(trim, 2, "start"),
            _arg(trim, 3, "end"),
            _arg(trim, 4, "step", 1),
            dim,
            size,
        )
        return False
    return True


@dataclass
class AllGatherReassembly:
    """``[trim](cat(slices of wait(all_gather_into_tensor(shard))))``, the
    slices being the per-rank chunks of the all-gather output.

    Field names follow ``micro_pipeline_tp._AllGatherMatch``; ``nodes`` lists
    the matched nodes in graph order, like ``pattern_matcher.Match.nodes``.
    """

    ag_node: torch.fx.Node
    wait_node: torch.fx.Node
    shard_node: torch.fx.Node
    chunks: list[_Chunk]
    cat_node: torch.fx.Node
    trim_node: torch.fx.Node | None
    gather_dim: int
    group_size: Any
    group_name: Any

    @property
    def slice_nodes(self) -> list[torch.fx.Node]:
        return [chunk.node for chunk in self.chunks]

    @property
    def res_node(self) -> torch.fx.Node:
        return self.trim_node if self.trim_node is not None else self.cat_node

    @property
    def nodes(self) -> list[torch.fx.Node]:
        trim = [self.trim_node] if self.trim_node is not None else []
        return [
            self.ag_node,
            self.wait_node,
            *dict.fromkeys(self.slice_nodes),
            self.cat_node,
            *trim,
        ]

    @classmethod
    def from_node(cls, node: torch.fx.Node) -> AllGatherReassembly | None:
        """The structure rooted at ``node`` (a cat, or a slice of one), or None.
        Nodes that do not look like a reassembled all-gather return None
        silently; look-alikes that differ are logged."""
        c10d = _c10d()
        trim_node = None
        cat_node = node
        if node.target is aten.slice.Tensor:
            inp = node.args[0]
            if not (isinstance(inp, torch.fx.Node) and inp.target is aten.cat.default):
                return None
            trim_node, cat_node = node, inp
        if cat_node.target is not aten.cat.default:
            return None

        inputs = cat_node.args[0]
        if not isinstance(inputs, (list, tuple)) or not any(
            isinstance(inp, torch.fx.Node)
            and inp.target is aten.slice.Tensor
            and isinstance(inp.args[0], torch.fx.Node)
            and inp.args[0].target is c10d.wait_tensor.default
            and isinstance(inp.args[0].args[0], torch.fx.Node)
            and inp.args[0].args[0].target is c10d.all_gather_into_tensor.default
            for inp in inputs
        ):
            return None  # not an all-gather reassembly at all

        chunks = _chunks_of(cat_node)
        if chunks is None:
            return None
        wait_node = chunks[0].source
        if wait_node.target is not c10d.wait_tensor.default:
            _skip("%s slices %s, not an all-gather result", cat_node, wait_node)
            return None
        ag_node = wait_node.args[0]
        assert isinstance(ag_node, torch.fx.Node)
        if chunks[0].dim != 0:
            _skip(
                "%s slices the all-gather result along dim %d; "
                "ranks are stacked on dim 0",
                cat_node,
                chunks[0].dim,
            )
            return None
        cat_val = _val(cat_node)
        if cat_val is None:
            _skip("%s has no shape metadata", cat_node)
            return None
        gather_dim = _normalize_dim(_arg(cat_node, 1, "dim", 0), cat_val.ndim)
        if gather_dim is None:
            _skip("%s has a non-constant dim", cat_node)
            return None
        shard_node = ag_node.args[0]
        group_name = _arg(ag_node, 2, "group_name")
        if not isinstance(shard_node, torch.fx.Node) or group_name is None:
            _skip("%s has no shard or group name", ag_node)
            return None
        return cls(
            ag_node=ag_node,
            wait_node=wait_node,
            shard_node=shard_node,
            chunks=chunks,
            cat_node=cat_node,
            trim_node=trim_node,
            gather_dim=gather_dim,
            group_size=_arg(ag_node, 1, "group_size"),
            group_name=group_name,
        )


@dataclass
class ReduceScatterReassembly:
    """``wait(reduce_scatter_tensor(cat(slices of input, dim=0)))``, the slices
    being the per-rank chunks of ``input`` along ``scatter_dim``.

    Field names follow ``micro_pipeline_tp._ReduceScatterMatch``; ``nodes``
    lists the matched nodes in graph order, like ``Match.nodes``.
    """

    input_node: torch.fx.Node
    chunks: list[_Chunk]
    cat_node: torch.fx.Node
    reduce_scatter_node: torch.fx.Node
    wait_tensor_node: torch.fx.Node
    reduce_op: Any
    scatter_dim: int
    group_size: Any
    group_name: Any

    @property
    def slice_nodes(self) -> list[torch.fx.Node]:
        return [chunk.node for chunk in self.chunks]

    @property
    def nodes(self) -> list[torch.fx.Node]:
        return [
            *dict.fromkeys(self.slice_nodes),
            self.cat_node,
            self.reduce_scatter_node,
            self.wait_tensor_node,
        ]

    @classmethod
    def from_node(cls, node: torch.fx.Node) -> ReduceScatterReassembly | None:
        """The structure ending in ``node`` (a wait_tensor), or None. Nodes
        that do not look like a reassembled reduce-scatter return None
        silently; look-alikes that differ are logged."""
        c10d = _c10d()
        if node.target is not c10d.wait_tensor.default:
            return None
        rs_node = node.args[0]
        if not (
            isinstance(rs_node, torch.fx.Node)
            and rs_node.target is c10d.reduce_scatter_tensor.default
        ):
            return None
        cat_node = rs_node.args[0]
        if not (
            isinstance(cat_node, torch.fx.Node) and cat_node.target is aten.cat.default
        ):
            return None
        inputs = cat_node.args[0]
        if not isinstance(inputs, (list, tuple)) or not any(
            isinstance(inp, torch.fx.Node) and inp.target is aten.slice.Tensor
            for inp in inputs
        ):
            return None  # e.g. the split/getitem form that upstream matches

        chunks = _chunks_of(cat_node)
        if chunks is None:
            return None
        cat_val = _val(cat_node)
        if cat_val is None:
            _skip("%s has no shape metadata", cat_node)
            return None
        if _normalize_dim(_arg(cat_node, 1, "dim", 0), cat_val.ndim) != 0:
            _skip(
                "%s concatenates along dim %s; reduce_scatter_tensor scatters dim 0",
                cat_node,
                _arg(cat_node, 1, "dim", 0),
            )
            return None
        reduce_op = _arg(rs_node, 1, "reduce_op")
        group_name = _arg(rs_node, 3, "group_name")
        if reduce_op is None or group_name is None:
            _skip("%s has no reduce op or group name", rs_node)
            return None
        return cls(
            input_node=chunks[0].source,
            chunks=chunks,
            cat_node=cat_node,
            reduce_scatter_node=rs_node,
            wait_tensor_node=node,
            reduce_op=reduce_op,
            scatter_dim=chunks[0].dim,
            group_size=_arg(rs_node, 2, "group_size"),
            group_name=group_name,
        )


def can_fuse_all_gather_reassembly(r: AllGatherReassembly) -> bool:
    """Safety: the reassembly equals ``all_gather_single(shard, gather_dim)``."""
    if not can_reassemble_canonical_chunks(r.chunks, r.group_size, r.cat_node):
        return False
    return r.trim_node is None or _is_noop_trim(r.trim_node, r.gather_dim)


def can_fuse_reduce_scatter_reassembly(r: ReduceScatterReassembly) -> bool:
    """Safety: the reassembly equals ``reduce_scatter_single(input, scatter_dim)``."""
    return can_reassemble_canonical_chunks(r.chunks, r.group_size, r.cat_node)


def should_fuse_reassembly(
    r: AllGatherReassembly | ReduceScatterReassembly,
) -> bool:
    """Profitability: nothing outside the reassembly uses the sliced tensor,
    the chunks or (before a trim or a reduce-scatter) the cat.  Otherwise the
    unfused collective (or matmul) stays alive next to the fused op, as the
    single-user ``split``/``getitem`` patterns upstream already exclude."""
    matched = set(r.nodes)
    source = r.wait_node if isinstance(r, AllGatherReassembly) else r.input_node
    outside = [user for user in source.users if user not in matched]
    if outside:
        _skip("%s is also used outside the reassembly by %s", source, outside)
        return False
    for node in r.slice_nodes:
        if set(node.users) != {r.cat_node}:
            _skip("chunk %s is also used outside the reassembly", node)
            return False
    inner_cat = isinstance(r, ReduceScatterReassembly) or r.trim_node is not None
    if inner_cat and len(r.cat_node.users) != 1:
        _skip("%s is also used outside the reassembly", r.cat_node)
        return False
    return True


_Reassembly = TypeVar("_Reassembly", AllGatherReassembly, ReduceScatterReassembly)


def _accept_reassembly(
    r: _Reassembly | None, can_fuse: Callable[[_Reassembly], bool]
) -> _Reassembly | None:
    """``r`` when it is found, ``can_fuse`` proves it and it should be fused
    (counted and logged), else None."""
    if r is None or not can_fuse(r) or not should_fuse_reassembly(r):
        return None
    counters["inductor"][FEATURE] += 1
    if isinstance(r, AllGatherReassembly):
        result, source, dim = r.res_node, r.ag_node, r.gather_dim
    else:
        result, source, dim = r.cat_node, r.input_node, r.scatter_dim
    log.debug("%s: %s reassembles %s along dim %d", FEATURE, result, source, dim)
    return r


def match_all_gather_reassembly(node: torch.fx.Node) -> AllGatherReassembly | None:
    """``node`` as a proven all-gather reassembly (find, can, should), or None."""
    return _accept_reassembly(
        AllGatherReassembly.from_node(node), can_fuse_all_gather_reassembly
    )


def match_reduce_scatter_reassembly(
    node: torch.fx.Node,
) -> ReduceScatterReassembly | None:
    """``node`` (a wait_tensor) as a proven reduce-scatter reassembly, or None."""
    return _accept_reassembly(
        ReduceScatterReassembly.from_node(node), can_fuse_reduce_scatter_reassembly
    )


def only_used_by_reassembly(node: torch.fx.Node, match: object) -> bool:
    """Whether ``match`` is a reduce-scatter reassembly whose chunks are all
    the users of ``node`` (its source): such a matmul output has several users,
    all of which the fusion removes."""
    return isinstance(match, ReduceScatterReassembly) and all(
        user in match.nodes for user in node.users
    )
