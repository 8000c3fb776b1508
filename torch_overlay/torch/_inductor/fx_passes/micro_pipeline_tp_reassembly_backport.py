"""Slice/cat finders for a ``micro_pipeline_tp`` without a slice/cat path.

The structure checks of upstream's ``_match_slice_cat_all_gather`` and
``_match_slice_cat_reduce_scatter`` (one source, slices on the dims the
collective uses, the collective's arguments), in front of the range proofs of
``micro_pipeline_tp_reassembly``.  A graph that fails a structure check is not
a reassembly and is not counted; one that fails a proof is declined and
counted there.  The dataclasses stand in for ``pattern_matcher.Match``:
``nodes`` lists the matched nodes, which is all ``erase()`` reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from .micro_pipeline_tp_reassembly import (
    prove_all_gather_reassembly,
    prove_reduce_scatter_reassembly,
)


aten = torch.ops.aten


@dataclass
class AllGatherReassembly:
    """``[trim](cat(slices of wait(all_gather_into_tensor(shard))))``."""

    ag_node: torch.fx.Node
    wait_node: torch.fx.Node
    shard_node: torch.fx.Node
    slice_nodes: list[torch.fx.Node]
    cat_node: torch.fx.Node
    trim_node: torch.fx.Node | None
    gather_dim: int
    group_name: Any

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


@dataclass
class ReduceScatterReassembly:
    """``wait(reduce_scatter_tensor(cat(slices of input, dim=0)))``."""

    input_node: torch.fx.Node
    slice_nodes: list[torch.fx.Node]
    cat_node: torch.fx.Node
    reduce_scatter_node: torch.fx.Node
    wait_tensor_node: torch.fx.Node
    reduce_op: Any
    scatter_dim: int
    group_name: Any

    @property
    def nodes(self) -> list[torch.fx.Node]:
        return [
            *dict.fromkeys(self.slice_nodes),
            self.cat_node,
            self.reduce_scatter_node,
            self.wait_tensor_node,
        ]


def _is_call(node: Any, target: Any) -> bool:
    return isinstance(node, torch.fx.Node) and node.target is target


def _arg(node: torch.fx.Node, index: int, name: str, default: Any = None) -> Any:
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def find_all_gather_reassembly(node: torch.fx.Node) -> AllGatherReassembly | None:
    """``node`` (a cat, or a slice of one) as a proven all-gather reassembly.
    Other users do not hide it: the fuse step decides what it can take."""
    c10d = torch.ops._c10d_functional
    trim_node = None
    cat_node = node
    if _is_call(node, aten.slice.Tensor):
        if len(node.args) < 4 or not isinstance(node.args[0], torch.fx.Node):
            return None
        trim_node, cat_node = node, node.args[0]
    if not _is_call(cat_node, aten.cat.default):
        return None
    slice_nodes = cat_node.args[0]
    if not isinstance(slice_nodes, (list, tuple)) or len(slice_nodes) == 0:
        return None
    gather_dim = _arg(cat_node, 1, "dim", 0)
    if not isinstance(gather_dim, int):
        return None
    if trim_node is not None and (
        trim_node.args[1] != gather_dim or trim_node.args[2] != 0
    ):
        return None
    wait_node = (
        slice_nodes[0].args[0] if _is_call(slice_nodes[0], aten.slice.Tensor) else None
    )
    if not _is_call(wait_node, c10d.wait_tensor.default) or not all(
        _is_call(s, aten.slice.Tensor)
        and len(s.args) >= 2
        and s.args[1] == 0
        and s.args[0] is wait_node
        for s in slice_nodes
    ):
        return None
    if not isinstance(wait_node, torch.fx.Node):
        raise AssertionError(f"expected a node, got {wait_node!r}")
    ag_node = wait_node.args[0]
    if not _is_call(ag_node, c10d.all_gather_into_tensor.default):
        return None
    if not isinstance(ag_node, torch.fx.Node):
        raise AssertionError(f"expected a node, got {ag_node!r}")
    shard_node = ag_node.args[0]
    group_name = _arg(ag_node, 2, "group_name")
    if not isinstance(shard_node, torch.fx.Node) or group_name is None:
        return None
    proven_dim = prove_all_gather_reassembly(ag_node, slice_nodes, cat_node, trim_node)
    if proven_dim is None:
        return None
    return AllGatherReassembly(
        ag_node=ag_node,
        wait_node=wait_node,
        shard_node=shard_node,
        slice_nodes=list(slice_nodes),
        cat_node=cat_node,
        trim_node=trim_node,
        gather_dim=proven_dim,
        group_name=group_name,
    )


def find_reduce_scatter_reassembly(
    node: torch.fx.Node,
) -> ReduceScatterReassembly | None:
    """``node`` (a wait_tensor) as a proven reduce-scatter reassembly."""
    c10d = torch.ops._c10d_functional
    if not _is_call(node, c10d.wait_tensor.default):
        return None
    rs_node = node.args[0]
    if not _is_call(rs_node, c10d.reduce_scatter_tensor.default):
        return None
    if not isinstance(rs_node, torch.fx.Node):
        raise AssertionError(f"expected a node, got {rs_node!r}")
    cat_node = rs_node.args[0]
    if not _is_call(cat_node, aten.cat.default) or _arg(cat_node, 1, "dim", 0) != 0:
        return None
    if not isinstance(cat_node, torch.fx.Node):
        raise AssertionError(f"expected a node, got {cat_node!r}")
    slice_nodes = cat_node.args[0]
    if not isinstance(slice_nodes, (list, tuple)) or len(slice_nodes) == 0:
        return None
    first = slice_nodes[0]
    if not all(
        _is_call(s, aten.slice.Tensor)
        and len(s.args) >= 2
        and isinstance(s.args[0], torch.fx.Node)
        and isinstance(s.args[1], int)
        and s.args[0] is first.args[0]
        and s.args[1] == first.args[1]
        for s in slice_nodes
    ):
        return None  # e.g. the split/getitem form that the patterns match
    reduce_op = _arg(rs_node, 1, "reduce_op")
    group_name = _arg(rs_node, 3, "group_name")
    if reduce_op is None or group_name is None:
        return None
    scatter_dim = prove_reduce_scatter_reassembly(rs_node, slice_nodes, cat_node)
    if scatter_dim is None:
        return None
    return ReduceScatterReassembly(
        input_node=first.args[0],
        slice_nodes=list(slice_nodes),
        cat_node=cat_node,
        reduce_scatter_node=rs_node,
        wait_tensor_node=node,
        reduce_op=reduce_op,
        scatter_dim=scatter_dim,
        group_name=group_name,
    )


def only_used_by_reassembly(node: torch.fx.Node, match: object) -> bool:
    """Whether every user of ``node`` (a matmul output) is a node of the
    reduce-scatter reassembly ``match``, which the fusion removes."""
    return isinstance(match, ReduceScatterReassembly) and all(
        user in match.nodes for user in node.users
    )
