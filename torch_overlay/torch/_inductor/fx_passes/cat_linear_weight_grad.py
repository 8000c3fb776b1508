"""
The weight gradient of a ``cat_linear`` site, computed per piece.

Autograd computes the weight gradient of ``linear(cat(parts, -1), W)`` as
``mm(grad.T, cat)`` (of ``cat(parts, -1) @ W``: ``mm(cat.T, grad)``), so the
partitioner saves the cat for the backward, the forward keeps it, and the
post-grad lowering (``cat_linear_lowering.py``) leaves the training forward
site alone (``cat_linear_cat_users``).  The patterns registered here run on
the joint graph, before the partition, and compute that gradient as
``cat([mm(grad.T, part) for part in parts], 1)`` (``cat([mm(part.T, grad)
for part in parts], 0)``): the same blocks, each the same sum over the
rows.  The backward then reads the pieces, the partitioner saves those
instead of the cat, and the forward's cat is left to the GEMMs that read it
in place.  (A forward GEMM that reads the cat as its second operand has the
same form, and is split alike.)

A cat's gradients are split all or none: only where, once they all are,
every other reader of the cat is a forward site the lowering takes (the same
checks and decision, asked without counting; several heads may read one cat,
and in training equal cats count as one, since the partitioner's CSE merges
them after this pass); where the cat the forward would save costs more than the
gradients' extra reads (counting the pieces not made by a fused producer,
and those made through a gather: see ``_saved_bytes``); and where no piece
is a tensor the caller holds (a graph input or output, or a view of one),
which the caller may write before the backward runs.  None is split where
``pad_mm`` (a pattern of the same pass) may pad a forward GEMM,
``mm_plus_mm`` takes it or, on CPU, freezing may pack it for oneDNN; nor
where a selective-checkpoint policy saves the cat or a checkpoint
recomputes a forward GEMM from the saved cat (a cat recomputed with its
GEMM is split); nor a GEMM of two cats of the forward (``cat_a.T @ cat_b``,
or ``cat_a @ cat_b``, whose split on ``cat_b`` changes ``cat_a``'s sites).
Each split bumps
``counters["inductor"]["cat_linear_weight_grad"]``, each gradient kept
``cat_linear_weight_grad_<reason>``, where the joint graph is built: an
AOTAutograd cache hit reuses the split backward without bumping it, as with
the joint graph's other patterns.
"""

from __future__ import annotations

import logging
import math
from typing import Any, TYPE_CHECKING

import torch
from torch._dynamo.utils import counters
from torch._functorch._aot_autograd.utils import _is_tangent
from torch.utils._pytree import tree_leaves
from torch.utils.checkpoint import CheckpointPolicy

from .. import config
from ..fx_utils import get_node_storage
from ..pattern_matcher import (
    CallFunction,
    KeywordArg,
    Match,
    MULTIPLE,
    register_graph_pattern,
)
from . import cat_linear_lowering as lowering


if TYPE_CHECKING:
    from .cat_linear_decision import CatLinearSite


log = logging.getLogger(__name__)
aten = torch.ops.aten


def _keep(key: str, reason: str, reader: torch.fx.Node) -> bool:
    log.debug("keeping %s: %s", reader, reason)
    counters["inductor"][f"cat_linear_weight_grad_{key}"] += 1
    return False


def _not_taken(key: str, reason: str, node: torch.fx.Node) -> bool:
    log.debug("keeping the weight gradient: %s stays stock (%s)", node, reason)
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


def _reads(cat: torch.fx.Node) -> set[torch.fx.Node]:
    """The cat and its views to ``(rows, K)``: what a gradient pattern reads."""
    val = cat.meta.get("val")
    k = val.shape[-1] if isinstance(val, torch.Tensor) else None
    return {
        cat,
        *(
            view
            for view in cat.users
            if view.target is aten.view.default
            and isinstance(k, int)
            and len(view.args[1]) == 2  # type: ignore[arg-type]
            and view.args[1][1] == k  # type: ignore[index]
        ),
    }


def _transposed(node: Any, reads: set[torch.fx.Node]) -> bool:
    return (
        isinstance(node, torch.fx.Node)
        and node.target is aten.permute.default
        and list(node.args[1]) == [1, 0]  # type: ignore[arg-type]
        and node.args[0] in reads
    )


def _gradient_reader(user: torch.fx.Node, reads: set[torch.fx.Node]) -> bool:
    """Whether ``user`` of the cat (``reads``: it and its views) reads it as a
    weight gradient does, in either form, and only there: ``mm(X, cat)``
    where X is not the cat, or ``cat.T`` read only by ``mm(cat.T, X)``."""
    if user.target is aten.mm.default:
        lhs = user.args[0]
        return (
            user.args[1] in reads and lhs not in reads and not _transposed(lhs, reads)
        )
    (gemm,) = user.users if len(user.users) == 1 else (None,)
    return (
        _transposed(user, reads)
        and gemm is not None
        and gemm.target is aten.mm.default
        and gemm.args[0] is user
        and gemm.args[1] not in reads
        and not _transposed(gemm.args[1], reads)
    )


def _other_operand(reader: torch.fx.Node) -> Any:
    """What a gradient reader's GEMM multiplies the cat by."""
    if reader.target is aten.mm.default:
        return reader.args[0]
    return next(iter(reader.users)).args[1]


def _reads_forward_cat(node: Any, backward: set[torch.fx.Node]) -> bool:
    """Whether ``node`` is, or transposes or views, a cat outside the
    backward.  A GEMM of two such cats is no weight gradient: split on one,
    it adds readers to the other, whose own check has counted them."""
    views = (aten.permute.default, aten.view.default)
    while isinstance(node, torch.fx.Node) and node.target in views:
        node = node.args[0]
    return (
        isinstance(node, torch.fx.Node)
        and node.target is aten.cat.default
        and node not in backward
    )


def _caller_reachable(parts: list[torch.fx.Node], graph: torch.fx.Graph) -> bool:
    """Whether a part shares storage with a graph input or output, or is a
    value written back into an input (``a[0] = x`` before the cat: the copy_
    of that input mutation, which Inductor performs in the input's own
    storage).  The caller can write such a tensor between forward and
    backward; the backward would then read the new values where stock reads
    the cat it saved (an autograd version-counter error where stock runs, or
    a wrong gradient)."""
    (output,) = graph.find_nodes(op="output")
    placeholders = graph.find_nodes(op="placeholder")
    inputs = {get_node_storage(node) for node in placeholders} - {None}
    written_back = [
        node.args[1]
        for node in graph.find_nodes(op="call_function", target=aten.copy_.default)
        if isinstance(node.args[0], torch.fx.Node)
        and get_node_storage(node.args[0]) in inputs
    ]
    ends = [*placeholders, *tree_leaves(output.args), *written_back]
    reachable = {
        get_node_storage(node) for node in ends if isinstance(node, torch.fx.Node)
    } - {None}
    return any(
        get_node_storage(part) in reachable
        for part in parts
        if isinstance(part, torch.fx.Node)
    )


def _backward(graph: torch.fx.Graph) -> set[torch.fx.Node]:
    """The nodes that depend on a tangent: the partitioner puts them in the
    backward."""
    seen: set[torch.fx.Node] = set()
    stack = [node for node in graph.find_nodes(op="placeholder") if _is_tangent(node)]
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(node.users)
    return seen


def _forward_site(
    user: torch.fx.Node, cat: torch.fx.Node, backward: set[torch.fx.Node]
) -> Match | None:
    """``user``'s GEMM site where it reads ``cat`` as ``mat1``, matched as the
    lowering does, and in the forward: a GEMM that depends on a tangent (the
    backward of a ``torch.func.grad`` in the step) runs in the backward, which
    then reads the cat the forward saves."""
    if user in backward:
        return None
    return lowering.site_reading(user, cat)


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
    """Split where no piece is the caller's, where once every weight gradient
    reading the cat is split only forward sites the lowering takes read it
    (equal cats count as one: the partitioner's CSE merges them after this
    pass), and where the cat saves more than the gradients' extra reads."""
    opts = lowering.options()
    if opts is None:
        return False
    reader = _reader(match)
    cat = _read(reader)
    cat = cat if cat.target is aten.cat.default else cat.args[0]
    assert isinstance(cat, torch.fx.Node)
    if not _gradient_reader(reader, _reads(cat)):
        return _keep("reads", "it reads the cat twice, or through a view", reader)
    backward = _backward(reader.graph)
    if _reads_forward_cat(_other_operand(reader), backward):
        return _keep("cats", "the GEMM reads another cat of the forward", reader)
    # The class of equal cats, in graph order, decides as one: the first
    # gradient's check sees the graph before any split, and a split only adds
    # readers to the pieces, so the later checks (which then count every piece
    # as saved, against fewer gradients) follow it.  Only the partitioner
    # merges them: an inference graph (no tangent) keeps each cat apart.
    cats = _equal_cats(cat) if backward else [cat]
    parts = [part for other in cats for part in other.all_input_nodes]
    if _caller_reachable(parts, reader.graph):
        return _keep("caller", "a piece is a graph input or output", reader)
    if any(other.meta.get("recompute") in _SAVED for other in cats):
        # selective activation checkpointing saves the cat as its policy says
        return _keep("checkpoint", "the checkpoint policy saves the cat", reader)
    grads: list[torch.fx.Node] = []
    forward: list[tuple[torch.fx.Node, torch.fx.Node]] = []
    for other in cats:
        reads = _reads(other)
        for user in lowering.cat_readers(other):
            if _gradient_reader(user, reads) and not _reads_forward_cat(
                _other_operand(user), backward
            ):
                grads.append(user)
            else:
                forward.append((user, other))
    if any(
        user.meta.get("recompute") in _RECOMPUTED
        and other.meta.get("recompute") not in _RECOMPUTED
        for user, other in forward
    ):
        # the backward recomputes that GEMM from the saved cat, where a split
        # would only save the pieces too (recomputed with the GEMM, the cat
        # is split as in the forward)
        return _keep("checkpoint", "a checkpoint recomputes a GEMM on the cat", reader)
    site = None
    for user, other in forward:
        forward_site = _forward_site(user, other, backward)
        taken = None if forward_site is None else _site_taken(forward_site, opts)
        if taken is None:
            return _keep("cat_users", f"{user} reads the cat and stays", reader)
        site = site or taken
    if site is None:
        return _keep("no_site", "the cat feeds no cat_linear site", reader)
    if sum(_extra_bytes(g, site) for g in grads) >= _saved_bytes(site):
        return _keep("extra_reads", "the gradients' extra reads cost more", reader)
    return True


def _saved_bytes(site: CatLinearSite) -> float:
    """The write and read of the cat that the split saves.  Split, the
    forward writes a produced piece to a buffer of its own: the bytes stock's
    cat kernel writes, and as fast where its producer is pointwise, so such a
    piece saves nothing; but stock's cat kernel writes a piece made through a
    gather far slower, so that one counts."""
    gathers = site.gathers or (None,) * len(site.widths)
    widths = zip(site.widths, site.produced, gathers)
    return 2.0 * site.rows * site.itemsize * sum(w for w, p, g in widths if not p or g)


def _site_taken(match: Match, opts: dict[str, Any]) -> CatLinearSite | None:
    """The forward site, where the lowering takes it once the weight gradients
    are split (its cat's readers are checked by the caller); else None."""
    if not lowering.taken(match, opts, decline=_not_taken):
        return None
    site = lowering.site(match)
    if site.device.type == "cuda" and config.shape_padding and not site.gemm_aligned:
        # pad_mm, a pattern of the same pass, may pad the forward GEMM after
        # this split: the post-grad lowering would then not see its cat
        log.debug("keeping the weight gradient: pad_mm may pad %s", match.output_node())
        return None
    if site.device.type == "cpu" and config.freezing:
        # freezing may pack the GEMM for oneDNN or MKL before the lowering
        log.debug(
            "keeping the weight gradient: freezing may pack %s", match.output_node()
        )
        return None
    return site


def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple((k, _hashable(v)) for k, v in sorted(value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    return value


# Checkpoint policies that ask the partitioner to save a node: it always
# saves a MUST_SAVE one; a PREFER_SAVE one is left to its min-cut, and is
# kept here too (conservatively: a split there may save nothing).
_SAVED = (CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_SAVE)
_RECOMPUTED = (CheckpointPolicy.MUST_RECOMPUTE, CheckpointPolicy.PREFER_RECOMPUTE)


def _equal_cats(cat: torch.fx.Node) -> list[torch.fx.Node]:
    """``cat`` and the cats the partitioner's CSE will merge with it (the
    same op over the same values, each node standing for the first equal
    one), in graph order."""
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
        for node in cat.graph.nodes
        if node.target is aten.cat.default and first[node] is first[cat]
    ]


def _split(
    match: Match,
    *,
    parts: Any,
    dim: Any,
    size: Any = None,
    grad_t: Any = None,
    grad: Any = None,
) -> None:
    """The gradient as blocks of per-piece GEMMs: the columns
    ``mm(grad_t, part)``, or the rows ``mm(part.T, grad)``."""

    def repl(g: torch.Tensor, *parts: torch.Tensor) -> torch.Tensor:
        if size is not None:
            parts = tuple(p.reshape(-1, p.shape[-1]) for p in parts)
        if grad is None:
            return torch.cat([torch.mm(g, p) for p in parts], 1)
        return torch.cat([torch.mm(p.t(), g) for p in parts], 0)

    match.replace_by_example(repl, [grad_t if grad is None else grad, *parts])
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
        )(_split)
