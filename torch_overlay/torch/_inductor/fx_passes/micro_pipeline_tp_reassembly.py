"""Range proofs for micro-pipeline TP's slice/cat matchers.

Graph-level chunking can rebuild a collective's layout with ``slice`` and
``cat`` instead of the ``split``/``cat`` that funcol traces to::

    # all-gather along d (the all-gather itself stacks the shards on dim 0)
    y = wait_tensor(all_gather_into_tensor(shard, group_size, group_name))
    A = cat([slice(y, 0, i * c, (i + 1) * c) for i in range(group_size)], d)

    # reduce-scatter along d (the reduce-scatter itself splits dim 0)
    out = wait_tensor(
        reduce_scatter_tensor(
            cat([slice(y, d, i * c, (i + 1) * c) for i in range(group_size)], 0),
            reduce_op,
            group_size,
            group_name,
        )
    )

That is the collective only when the slices are exactly the ``group_size``
equal chunks of one source, in rank order, with step 1, covering the whole
dim (and a trim of the cat keeps all of it).  Anything else computes
something different, and fusing it into ``symm_mem.fused_all_gather_matmul``
or ``fused_matmul_reduce_scatter`` would miscompile.  The matchers in
``micro_pipeline_tp.py`` check the structure, then call
``prove_all_gather_reassembly`` / ``prove_reduce_scatter_reassembly`` where
they would return a match.  Nothing here adds guards: what cannot be proven
is declined.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, TYPE_CHECKING

import torch
import torch.fx
from torch._dynamo.utils import counters
from torch.fx.experimental.symbolic_shapes import statically_known_true, sym_eq

from ..pattern_matcher import get_arg_value, Match


if TYPE_CHECKING:
    from collections.abc import Sequence


log = logging.getLogger(__name__)
aten = torch.ops.aten

FEATURE = "micro_pipeline_tp_slice_cat"

IntLike = int | torch.SymInt

_INT64_MAX = 2**63 - 1


def _skip(reason: str, *args: object) -> None:
    log.debug("skipping %s: %s", FEATURE, reason % args)
    counters["inductor"][f"{FEATURE}_rejected"] += 1


def _get_tensor(node: torch.fx.Node) -> torch.Tensor:
    # micro_pipeline_tp imports this module, so its helper is imported here
    # when first called, once both modules exist.
    from .micro_pipeline_tp import _get_tensor

    return _get_tensor(node)


def _slice_args(node: torch.fx.Node) -> tuple[Any, Any, Any, Any]:
    """``aten.slice.Tensor``'s dim, start, end and step, with its defaults."""
    dim = get_arg_value(node, 1, "dim")
    step = get_arg_value(node, 4, "step")
    return (
        0 if dim is None else dim,
        get_arg_value(node, 2, "start"),
        get_arg_value(node, 3, "end"),
        1 if step is None else step,
    )


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
    if statically_known_true(value >= size):
        return size
    if statically_known_true(value >= 0):
        return value
    if statically_known_true(value < 0):
        if statically_known_true(value + size <= 0):
            return 0
        if statically_known_true(value + size >= 0):
            return value + size
    return None


@dataclass
class _Chunk:
    node: torch.fx.Node
    source: torch.fx.Node
    dim: int
    size: IntLike  # the source's size along dim
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
        source_val = _get_tensor(source)
        dim, start, end, step = _slice_args(node)
        dim = _normalize_dim(dim, source_val.ndim)
        if dim is None:
            return None
        return cls(
            node=node,
            source=source,
            dim=dim,
            size=source_val.shape[dim],
            start_arg=start,
            end_arg=end,
            step_arg=step,
        )


def _chunks_of(
    cat_node: torch.fx.Node, inputs: Sequence[torch.fx.Node]
) -> list[_Chunk] | None:
    """``inputs`` (the cat's) as slices of one source along one dim, else None
    (with a logged reason)."""
    if len(inputs) == 0:
        _skip("%s has no tensor-list input", cat_node)
        return None
    chunks = []
    for inp in inputs:
        chunk = _Chunk.from_node(inp)
        if chunk is None:
            _skip("%s input %s is not a slice with a constant dim", cat_node, inp)
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


def _can_reassemble_canonical_chunks(
    chunks: list[_Chunk], group_size: int, node: torch.fx.Node
) -> bool:
    """Whether ``chunks``, in order, are exactly the ``group_size`` equal
    contiguous chunks of their source along their dim: chunk ``i`` is
    ``[i * c, (i + 1) * c)`` with step 1 and ``c * group_size`` the dim size.

    Proven on static sizes and, for symbolic sizes, with
    ``statically_known_true`` (never by adding guards): whatever cannot be
    proven is rejected.
    """
    if not isinstance(group_size, int) or isinstance(group_size, bool):
        _skip("%s: group size %r is not a constant", node, group_size)
        return False
    if len(chunks) != group_size:
        _skip(
            "%s has %d chunks but the group has %d ranks",
            node,
            len(chunks),
            group_size,
        )
        return False
    dim = chunks[0].dim
    size = chunks[0].size
    chunk_size = size // group_size
    if not _known_eq(chunk_size * group_size, size):
        _skip(
            "%s: dim %d of %s (size %s) is not provably divisible by %d ranks",
            node,
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
                node,
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
                node,
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
                node,
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
    if not isinstance(cat_node, torch.fx.Node):
        raise AssertionError(f"expected a cat node under {trim}, got {cat_node!r}")
    cat_val = _get_tensor(cat_node)
    trim_dim, start_arg, end_arg, step_arg = _slice_args(trim)
    trim_dim = _normalize_dim(trim_dim, cat_val.ndim)
    if trim_dim != dim:
        _skip("%s trims dim %s, not the reassembled dim %d", trim, trim_dim, dim)
        return False
    size = cat_val.shape[dim]
    step = _int_like(step_arg)
    start = _normalize_bound(start_arg, size, 0)
    end = _normalize_bound(end_arg, size, size)
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
            start_arg,
            end_arg,
            step_arg,
            dim,
            size,
        )
        return False
    return True


def prove_all_gather_reassembly(
    ag_node: torch.fx.Node,
    slice_nodes: Sequence[torch.fx.Node],
    cat_node: torch.fx.Node,
    trim_node: torch.fx.Node | None = None,
) -> int | None:
    """Safety of an all-gather slice/cat match: ``[trim](cat(slice_nodes))``,
    the slices taken along dim 0 of ``wait(ag_node)``, equals
    ``all_gather_single(shard, gather_dim)``.  Returns ``gather_dim`` (the
    cat's dim, normalized) when proven, else None with a logged reason."""
    cat_dim = get_arg_value(cat_node, 1, "dim")
    gather_dim = _normalize_dim(
        0 if cat_dim is None else cat_dim, _get_tensor(cat_node).ndim
    )
    if gather_dim is None:
        _skip("%s has a non-constant dim", cat_node)
        return None
    chunks = _chunks_of(cat_node, slice_nodes)
    if chunks is None:
        return None
    if chunks[0].dim != 0:
        _skip(
            "%s slices the all-gather result along dim %d; ranks are stacked on dim 0",
            cat_node,
            chunks[0].dim,
        )
        return None
    group_size = get_arg_value(ag_node, 1, "group_size")
    if not _can_reassemble_canonical_chunks(chunks, group_size, cat_node):
        return None
    if trim_node is not None and not _is_noop_trim(trim_node, gather_dim):
        return None
    log.debug(
        "%s: %s reassembles %s along dim %d",
        FEATURE,
        trim_node if trim_node is not None else cat_node,
        ag_node,
        gather_dim,
    )
    return gather_dim


def prove_reduce_scatter_reassembly(
    reduce_scatter_node: torch.fx.Node,
    slice_nodes: Sequence[torch.fx.Node],
    cat_node: torch.fx.Node,
) -> int | None:
    """Safety of a reduce-scatter slice/cat match: ``cat(slice_nodes, 0)`` (the
    matcher checks the dim), the slices taken from one tensor along one dim,
    equals that tensor laid out as ``reduce_scatter_single(input, scatter_dim)``
    expects.  Returns ``scatter_dim`` (normalized) when proven, else None with
    a logged reason."""
    chunks = _chunks_of(cat_node, slice_nodes)
    if chunks is None:
        return None
    group_size = get_arg_value(reduce_scatter_node, 2, "group_size")
    if not _can_reassemble_canonical_chunks(chunks, group_size, cat_node):
        return None
    log.debug(
        "%s: %s reassembles %s along dim %d",
        FEATURE,
        cat_node,
        chunks[0].source,
        chunks[0].dim,
    )
    return chunks[0].dim


def count_fused_reassembly(match: Match | list[torch.fx.Node]) -> None:
    """Called by the ``fuse_*`` steps after a rewrite with the match's
    ``match``: count it when it came through a slice/cat reassembly (the
    split/getitem patterns have no slice node)."""
    nodes = match.nodes if isinstance(match, Match) else match
    if any(n.target is aten.slice.Tensor for n in nodes):
        counters["inductor"][FEATURE] += 1
