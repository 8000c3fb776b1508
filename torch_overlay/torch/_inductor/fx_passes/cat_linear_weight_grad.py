"""
The weight gradient of a ``cat_linear`` site, computed per piece.

Autograd computes the weight gradient of ``linear(cat(parts, -1), W)`` as
``mm(grad.T, cat)`` (of ``cat(parts, -1) @ W``: ``mm(cat.T, grad)``), so the
partitioner saves the cat for the backward, the forward keeps it, and the
post-grad lowering (``cat_linear_lowering.py``) leaves the training forward
site alone (``cat_linear_cat_users``).  The patterns registered here run on
the joint graph, before the partition, and compute that gradient as
``cat([mm(grad.T, part) for part in parts], 1)`` (``cat([mm(part.T, grad)
for part in parts], 0)``): the same blocks, each the same sum over the rows.  The backward then
reads the pieces, the partitioner saves those instead of the cat, and the
forward's cat is left to the GEMMs that read it in place.

A cat's gradients are split all or none: only where, once they all are,
every other reader of the cat is a forward site the lowering takes (the same
checks and decision, asked without counting; several heads may read one
cat, and equal cats count as one, since the partitioner's CSE merges them
after this pass); where the cat the forward then saves costs more than the
gradients' extra reads; and where no piece is a tensor the caller holds (a
graph input or output, or a view of one), which the caller may write before
the backward runs.  None is split where ``pad_mm`` (a pattern of the same
pass) may pad a forward GEMM or ``mm_plus_mm`` takes it.  Each split bumps
``counters["inductor"]["cat_linear_weight_grad"]``.
"""

from __future__ import annotations

import logging
import math
from typing import Any, TYPE_CHECKING

import torch
from torch._dynamo.utils import counters
from torch.utils._pytree import tree_leaves

from .. import config
from ..fx_utils import get_node_storage
from ..pattern_matcher import (
    CallFunction,
    is_match,
    KeywordArg,
    Match,
    MULTIPLE,
    register_graph_pattern,
)
from . import cat_linear_lowering as lowering


if TYPE_CHECKING:
    from .cat_linear_fused_cost import CatLinearSite


log = logging.getLogger(__name__)
aten = torch.ops.aten


def _not_taken(key: str, reason: str, node: torch.fx.Node) -> bool:
    log.debug(
        "keeping the weight gradient of %s: the forward site stays stock (%s)",
        node,
        reason,
    )
    return False


def _reader(match: Match) -> torch.fx.Node:
    """The gradient's node that reads the cat (or its view to 2-D): the GEMM
    itself (``mm(grad.T, cat)``), or its ``cat.T`` (``mm(cat.T, grad)``)."""
    weight_grad = match.output_node()
    reader = weight_grad.args[0] if "grad" in match.kwargs else weight_grad
    assert isinstance(reader, torch.fx.Node)
    return reader


def _read(reader: torch.fx.Node) -> torch.fx.Node:
    """What ``reader`` reads: the cat, or its view to 2-D."""
    read = reader.args[0 if reader.target is aten.permute.default else 1]
    assert isinstance(read, torch.fx.Node)
    return read


def _gradient_reader(user: torch.fx.Node, reads: set[torch.fx.Node]) -> bool:
    """Whether ``user`` of the cat or its view (``reads``) reads it as a
    weight gradient does, in either form."""
    if user.target is aten.mm.default:
        return user.args[1] in reads
    (gemm,) = user.users if len(user.users) == 1 else (None,)
    return (
        user.target is aten.permute.default
        and list(user.args[1]) == [1, 0]  # type: ignore[arg-type]
        and gemm is not None
        and gemm.target is aten.mm.default
        and gemm.args[0] is user
    )


def _caller_reachable(parts: list[torch.fx.Node], graph: torch.fx.Graph) -> bool:
    """Whether a part shares storage with a graph input or output.  The
    caller can write such a tensor between forward and backward; the backward
    would then read the new values where stock reads the cat it saved (an
    autograd version-counter error where stock runs)."""
    (output,) = graph.find_nodes(op="output")
    ends = [*graph.find_nodes(op="placeholder"), *tree_leaves(output.args)]
    reachable = {
        get_node_storage(node) for node in ends if isinstance(node, torch.fx.Node)
    } - {None}
    return any(
        get_node_storage(part) in reachable
        for part in parts
        if isinstance(part, torch.fx.Node)
    )


def _forward_site(user: torch.fx.Node, cat: torch.fx.Node) -> Match | None:
    """``user``'s GEMM site where it reads ``cat`` as ``mat1``, matched as the
    lowering does."""
    for pattern in lowering.patterns():
        match = pattern.match(user)
        if is_match(match) and lowering.cat_chain(user)[-1] is cat:
            return match
    return None


def _extra_bytes(reader: torch.fx.Node, site: CatLinearSite) -> float:
    """What computing ``reader``'s gradient per piece costs more: each piece
    after the first reads the ``M x N`` gradient again."""
    gemm = reader if reader.target is aten.mm.default else next(iter(reader.users))
    val = gemm.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return math.inf
    n = val.shape[0 if gemm is reader else 1]
    return (len(site.widths) - 1) * site.rows * lowering.hint(n) * site.itemsize


def _check(match: Match) -> bool:
    """Split where, once every weight gradient reading the cat is split, only
    forward sites the lowering takes read it.  Equal cats count as one: the
    partitioner's CSE merges them after this pass."""
    opts = lowering.options()
    if opts is None:
        return False
    reader = _reader(match)
    if _caller_reachable(match.kwargs["parts"], reader.graph):
        log.debug("keeping %s: a piece is a graph input or output", reader)
        return False
    cat = _read(reader)
    cat = cat if cat.target is aten.cat.default else cat.args[0]
    assert isinstance(cat, torch.fx.Node)
    grads: list[torch.fx.Node] = []
    forward: list[tuple[torch.fx.Node, torch.fx.Node]] = []
    for other in (cat, *_equal_cats(cat)):
        reads = {other, *(u for u in other.users if u.target is aten.view.default)}
        for user in lowering.cat_readers(other):
            if _gradient_reader(user, reads):
                grads.append(user)
            else:
                forward.append((user, other))
    if not forward:
        log.debug("keeping %s: the cat feeds no cat_linear site", reader)
        return False
    sites = []
    for user, other in forward:
        site = _forward_site(user, other)
        if site is None or not _taken(site, grads, opts):
            log.debug("keeping %s: %s reads the cat and stays", reader, user)
            return False
        sites.append(lowering.site(site))
    # the cat saved once, against every gradient's extra reads
    if sum(_extra_bytes(g, sites[0]) for g in grads) >= sites[0].saved_bytes():
        log.debug("keeping %s: the gradients' extra reads cost more", reader)
        return False
    return True


def _taken(match: Match, grads: list[torch.fx.Node], opts: dict[str, Any]) -> bool:
    """Whether the lowering takes this forward site once ``grads`` are split."""
    gemm = match.output_node()
    if not lowering.can_fuse_cat_mm(
        match, weight_grads=grads, decline=_not_taken, siblings=False
    ):
        return False
    if lowering.should_fuse_cat_mm(match, opts, decline=_not_taken) is None:
        return False
    if lowering.summed_by_mm_plus_mm(gemm):
        log.debug("keeping the weight gradient: mm_plus_mm takes %s", gemm)
        return False
    site = lowering.site(match)
    if site.device.type == "cuda" and config.shape_padding and not site.gemm_aligned:
        # pad_mm, a pattern of the same pass, may pad the forward GEMM after
        # this split: the post-grad lowering would then not see its cat
        log.debug("keeping the weight gradient: pad_mm may pad %s", gemm)
        return False
    return True


def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple((k, _hashable(v)) for k, v in sorted(value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    return value


def _equal_cats(cat: torch.fx.Node) -> list[torch.fx.Node]:
    """The other cats the partitioner's CSE will merge with ``cat``: the same
    op over the same values, each node standing for the first equal one."""
    first: dict[torch.fx.Node, torch.fx.Node] = {}
    seen: dict[Any, torch.fx.Node] = {}
    for node in cat.graph.nodes:
        args = torch.fx.node.map_arg((node.args, node.kwargs), first.__getitem__)
        target = node.target
        first[node] = node
        if (
            node.op == "call_function"
            and not node.is_impure()
            and not (
                isinstance(target, torch._ops.OpOverload)
                and torch.Tag.nondeterministic_seeded in target.tags
            )
        ):
            try:
                first[node] = seen.setdefault((target, _hashable(args)), node)
            except TypeError:  # an unhashable argument: never merged
                pass
    return [
        node
        for node in cat.graph.find_nodes(op="call_function", target=aten.cat.default)
        if node is not cat and first[node] is first[cat]
    ]


def _split(match: Match, grad_t: Any, parts: Any, dim: Any, size: Any = None) -> None:
    def repl(grad_t: torch.Tensor, *parts: torch.Tensor) -> torch.Tensor:
        if size is not None:
            parts = tuple(p.reshape(-1, p.shape[-1]) for p in parts)
        return torch.cat([torch.mm(grad_t, p) for p in parts], 1)

    match.replace_by_example(repl, [grad_t, *parts])
    counters["inductor"]["cat_linear_weight_grad"] += 1


def _split_transposed(
    match: Match, grad: Any, parts: Any, dim: Any, size: Any = None
) -> None:
    def repl(grad: torch.Tensor, *parts: torch.Tensor) -> torch.Tensor:
        if size is not None:
            parts = tuple(p.reshape(-1, p.shape[-1]) for p in parts)
        return torch.cat([torch.mm(p.t(), grad) for p in parts], 0)

    match.replace_by_example(repl, [grad, *parts])
    counters["inductor"]["cat_linear_weight_grad"] += 1


def register_cat_linear_weight_grad(pass_dict: Any) -> None:
    """Register the patterns into ``pass_dict`` (``joint_graph.patterns``)."""
    cat = CallFunction(
        aten.cat.default, KeywordArg("parts"), KeywordArg("dim"), _users=MULTIPLE
    )
    viewed = CallFunction(aten.view.default, cat, KeywordArg("size"), _users=MULTIPLE)
    for rhs in (cat, viewed):
        register_graph_pattern(
            CallFunction(aten.mm.default, KeywordArg("grad_t"), rhs),
            extra_check=_check,
            pass_dict=pass_dict,
        )(_split)
        register_graph_pattern(
            CallFunction(
                aten.mm.default,
                CallFunction(aten.permute.default, rhs, [1, 0]),
                KeywordArg("grad"),
            ),
            extra_check=_check,
            pass_dict=pass_dict,
        )(_split_transposed)
