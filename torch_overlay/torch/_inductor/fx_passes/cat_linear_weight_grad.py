"""
The weight gradient of a ``cat_linear`` site, computed per piece.

Autograd computes the weight gradient of ``linear(cat(parts, -1), W)`` as
``mm(grad.T, cat)``, so the partitioner saves the cat for the backward, the
forward keeps it, and the post-grad lowering (``cat_linear_lowering.py``)
leaves the training forward site alone (``cat_linear_cat_users``).  The
pattern registered here runs on the joint graph, before the partition, and
computes that gradient as ``cat([mm(grad.T, part) for part in parts], 1)``:
the same column blocks, each the same sum over the rows.  The backward then
reads the pieces, the partitioner saves those instead of the cat, and the
forward's cat has one user left: the GEMM the lowering reads in place.

It is done only where the lowering will take that forward site (the same
checks and decision, asked without counting), where the forward saves more
traffic than the backward's extra reads of the gradient cost, and where no
piece is a tensor the caller holds (a graph input or output, or a view of
one), which the caller may write before the backward runs.  Equal cats,
which the partitioner's CSE merges after this pass, are split all or none,
and none where ``pad_mm`` (a pattern of the same pass) may pad the forward
GEMM or ``mm_plus_mm`` takes it.  Each split bumps
``counters["inductor"]["cat_linear_weight_grad"]``.
"""

from __future__ import annotations

import logging
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


def _forward_site(weight_grad: torch.fx.Node) -> Match | None:
    """The forward GEMM that reads the same cat as ``mat1``: the only other
    user of the cat (or of its view to 2-D), matched as the lowering does."""
    lhs = weight_grad.args[1]
    assert isinstance(lhs, torch.fx.Node)
    others = [user for user in lhs.users if user is not weight_grad]
    if len(others) != 1:
        return None
    for pattern in lowering.patterns():
        match = pattern.match(others[0])
        if is_match(match) and lowering.cat_chain(others[0])[0] is lhs:
            return match
    return None


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


def _pays(site: CatLinearSite) -> bool:
    """Whether the cat the forward then saves costs more than the gradient's
    extra reads: each piece after the first reads the ``M x N`` gradient."""
    extra = (len(site.widths) - 1) * site.rows * site.n * site.itemsize
    return site.saved_bytes() > extra


def _check(match: Match) -> bool:
    opts = lowering.options()
    if opts is None:
        return False
    weight_grad = match.output_node()
    if not _splits(weight_grad, match.kwargs["parts"], opts):
        return False
    # The partitioner's CSE merges equal cats (of the same parts) after this
    # pass: split only where every one of them is split too, else the merged
    # cat is saved for the other gradient and no forward site is taken.
    rhs = weight_grad.args[1]
    assert isinstance(rhs, torch.fx.Node)
    cat = rhs if rhs.target is aten.cat.default else rhs.args[0]
    assert isinstance(cat, torch.fx.Node)
    for other in _equal_cats(cat):
        readers = lowering.cat_readers(other)
        grads = [
            user
            for user in readers
            if user.target is aten.mm.default and user.args[1] in (other, *other.users)
        ]
        if grads:
            split = len(grads) == 1 and _splits(grads[0], match.kwargs["parts"], opts)
        else:  # split already: only forward sites read it
            split = all(lowering.taken(user, opts) for user in readers)
        if not split:
            log.debug("keeping %s: an equal cat stays for %s", weight_grad, other)
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


def _splits(weight_grad: torch.fx.Node, parts: Any, opts: dict[str, Any]) -> bool:
    """Whether this weight gradient alone is worth computing per piece."""
    if _caller_reachable(parts, weight_grad.graph):
        log.debug("keeping %s: a piece is a graph input or output", weight_grad)
        return False
    forward = _forward_site(weight_grad)
    if forward is None:
        log.debug("keeping %s: the cat feeds no other cat_linear site", weight_grad)
        return False
    if not lowering.can_fuse_cat_mm(
        forward, weight_grad=weight_grad, decline=_not_taken
    ):
        return False
    if lowering.should_fuse_cat_mm(forward, opts, decline=_not_taken) is None:
        return False
    if lowering.summed_by_mm_plus_mm(forward.output_node()):
        log.debug("keeping %s: mm_plus_mm takes the forward GEMM", weight_grad)
        return False
    site = lowering.site(forward)
    if site.device.type == "cuda" and config.shape_padding and not site.gemm_aligned:
        # pad_mm, a pattern of the same pass, may pad the forward GEMM after
        # this split: the post-grad lowering would then not see its cat
        log.debug("keeping %s: pad_mm may pad the forward GEMM", weight_grad)
        return False
    if not _pays(site):
        log.debug(
            "keeping %s: the gradient's extra reads cost more than the cat",
            weight_grad,
        )
        return False
    return True


def _split(match: Match, grad_t: Any, parts: Any, dim: Any, size: Any = None) -> None:
    def repl(grad_t: torch.Tensor, *parts: torch.Tensor) -> torch.Tensor:
        if size is not None:
            parts = tuple(p.reshape(-1, p.shape[-1]) for p in parts)
        return torch.cat([torch.mm(grad_t, p) for p in parts], 1)

    match.replace_by_example(repl, [grad_t, *parts])
    counters["inductor"]["cat_linear_weight_grad"] += 1


def register_cat_linear_weight_grad(pass_dict: Any) -> None:
    """Register the pattern into ``pass_dict`` (``joint_graph.patterns``)."""
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
