"""
``cat_linear``: ``mm(cat(parts, -1), W^T)`` lowered without the cat.

``linear(cat([x0, x1, ...], -1), W, b)`` reaches the post-grad graphs as
``addmm(b, cat(parts, 1), permute(W))`` (through a ``view`` to 2-D for 3-D
parts).  It is one GEMM whose input is split along K, so the pieces can be
read where they live instead of being copied into a cat buffer first.  The
lowering pattern registered here (in ``post_grad.py``, like ``mm_plus_mm``)
hands such a site to ``kernel/cat_linear.py``:

* ``can_fuse_cat_mm`` says whether the site is one: structure, shapes,
  dtypes.  Below autograd nothing else needs proving: the graph is
  functional, grad mode and aliasing are settled, and the partitioner has
  already decided what the backward saves (a cat it saves has another user
  and stays).  A cat read by several GEMMs (two heads on one cat, or two
  equal cats merged by CSE) is taken only where every one of them is.
* ``should_fuse_cat_mm`` says whether it pays, analytically
  (``cat_linear_fused_cost.decide``): nothing is compiled or timed at compile
  time; under ``max_autotune`` the sites that can gain go to autotuning.

``pre_grad_fusion_options["cat_linear"]`` turns it on (``{}``); its
``"form"`` forces ``"mm"`` (the in-place template), ``"view"`` (a chain of
per-piece GEMMs) or ``"off"``.  Every site taken bumps
``counters["inductor"]["cat_linear"]``; every site declined is logged with
its reason and counted under ``cat_linear_<reason>``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import Any

import torch
from torch._dynamo.utils import counters
from torch.fx.experimental.symbolic_shapes import statically_known_true

from .. import config
from ..pattern_matcher import (
    CallFunction,
    is_match,
    KeywordArg,
    Match,
    MULTIPLE,
    register_lowering_pattern,
)
from . import cat_linear_fused_cost as cost
from .pad_mm import get_alignment_size_dtype, get_padded_length


try:
    from torch.fx.experimental.symbolic_shapes import optimization_hint
except ImportError:  # the same helper under its earlier name
    from torch.fx.experimental.symbolic_shapes import (  # type: ignore[attr-defined,no-redef]
        size_hint as optimization_hint,
    )


log = logging.getLogger(__name__)
aten = torch.ops.aten

FORMS = ("mm", "view")


def options() -> dict[str, Any] | None:
    """The switch: ``pre_grad_fusion_options["cat_linear"]``, None when off."""
    opts = config.pre_grad_fusion_options.get("cat_linear")
    if opts is None:
        return None
    form = opts.get("form")
    if form not in (None, "off", *FORMS):
        raise ValueError(
            'pre_grad_fusion_options["cat_linear"]["form"] must be one of '
            f"{(None, 'off', *FORMS)}, got {form!r}"
        )
    return opts


Decline = Callable[[str, str, torch.fx.Node], bool]


def _decline(key: str, reason: str, node: torch.fx.Node) -> bool:
    log.debug("skipping cat_linear: %s at %s", reason, node)
    counters["inductor"][f"cat_linear_{key}"] += 1
    return False


def _quiet(key: str, reason: str, node: torch.fx.Node) -> bool:
    return False


def _val(node: Any) -> torch.Tensor | None:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return val if isinstance(val, torch.Tensor) else None


def hint(size: Any) -> int:
    """A size's value at trace time, without a guard (Inductor's fallback for
    an unbacked one)."""
    return optimization_hint(size, fallback=config.unbacked_symint_fallback)


# Gathers Inductor lowers to a pointwise loop (an indirect load).
_GATHERS = (aten.index.Tensor, aten.index_select.default, aten.embedding.default)


def _is_fused_producer(node: torch.fx.Node) -> bool:
    """A single-user pointwise op or gather: stock writes it straight into
    the cat, and the template can compute it in its loads (a prologue).  One
    with other readers (EdgeConv's ``x_i``, read by the cat and by
    ``x_j - x_i``) is not: the scheduler fuses it with those readers'
    kernels first, and then into no template."""
    target = node.target
    return (
        node.op == "call_function"
        and len(node.users) == 1
        and isinstance(target, torch._ops.OpOverload)
        and (torch.Tag.pointwise in target.tags or target in _GATHERS)
    )


def _parts(match: Match) -> list[torch.fx.Node] | None:
    """The cat's parts, None unless every one is a graph node."""
    parts = match.kwargs["parts"]
    if not isinstance(parts, (list, tuple)) or not all(
        isinstance(p, torch.fx.Node) for p in parts
    ):
        return None
    return list(parts)


def cat_chain(gemm: torch.fx.Node) -> list[torch.fx.Node]:
    """The GEMM's input: the cat, or the view of it and the cat."""
    lhs = gemm.args[1 if gemm.target is aten.addmm.default else 0]
    assert isinstance(lhs, torch.fx.Node)
    if lhs.target is aten.cat.default:
        return [lhs]
    cat = lhs.args[0]
    assert isinstance(cat, torch.fx.Node)
    return [lhs, cat]


def cat_readers(cat: torch.fx.Node) -> list[torch.fx.Node]:
    """The nodes that read ``cat``, directly or through a view."""
    readers: list[torch.fx.Node] = []
    for user in cat.users:
        is_view = user.target in (aten.view.default, aten.reshape.default)
        readers.extend(user.users if is_view else [user])
    return readers


def _gemm_users(
    gemm: torch.fx.Node, weight_grads: Collection[torch.fx.Node]
) -> list[torch.fx.Node] | None:
    """The other GEMMs that read ``gemm``'s cat as their input (directly or
    through a view); None where anything else reads it."""
    cat = cat_chain(gemm)[-1]
    readers = cat_readers(cat)
    gemms = [u for u in readers if u is not gemm and u not in weight_grads]
    for user in gemms:
        if user.target not in (aten.mm.default, aten.addmm.default):
            return None
        lhs = user.args[1 if user.target is aten.addmm.default else 0]
        if lhs is not cat and not (
            isinstance(lhs, torch.fx.Node) and lhs.args and lhs.args[0] is cat
        ):
            return None  # it reads the cat as mat2 (a weight gradient)
    return gemms


def summed_by_mm_plus_mm(gemm: torch.fx.Node) -> bool:
    """Whether ``mm_plus_mm``'s pattern (a sum of two ``mm``, under
    ``max_autotune``), matched at the ``add`` before this one, takes it."""
    autotune = config.max_autotune or config.max_autotune_gemm
    return (
        autotune
        and gemm.target is aten.mm.default
        and any(
            user.target is aten.add.Tensor
            and all(
                isinstance(a, torch.fx.Node) and a.target is aten.mm.default
                for a in user.args
            )
            for user in gemm.users
        )
    )


def match_site(gemm: torch.fx.Node) -> Match | None:
    """``gemm``'s site as the lowering's patterns match it (None: not one)."""
    for pattern in patterns():
        match = pattern.match(gemm)
        if is_match(match):
            return match
    return None


def taken(
    match: Match,
    opts: dict[str, Any],
    *,
    weight_grads: Collection[torch.fx.Node] = (),
    decline: Decline = _quiet,
) -> bool:
    """Whether the lowering takes this site, the other GEMMs on its cat aside
    (asked without counting, unless ``decline`` counts); ``weight_grads`` as
    in ``can_fuse_cat_mm``."""
    gemm = match.output_node()
    if summed_by_mm_plus_mm(gemm):
        return decline("mm_plus_mm", "mm_plus_mm takes it", gemm)
    return (
        can_fuse_cat_mm(
            match, weight_grads=weight_grads, decline=decline, siblings=False
        )
        and should_fuse_cat_mm(match, opts, decline=decline) is not None
    )


def can_fuse_cat_mm(
    match: Match,
    *,
    weight_grads: Collection[torch.fx.Node] = (),
    decline: Decline = _decline,
    siblings: bool = True,
) -> bool:
    """Is ``mm(cat(parts, -1), mat2)`` (or ``addmm``, or through a view of a
    3-D cat to 2-D) a site the lowering computes exactly?  ``weight_grads``:
    readers of the cat to disregard (weight gradients that a joint-graph pass
    is about to compute per piece); ``decline``: what a decline does;
    ``siblings``: whether other GEMMs reading the same cat must be taken too
    (False while asking about one of them)."""
    gemm = match.output_node()
    if gemm.kwargs.get("beta", 1) != 1 or gemm.kwargs.get("alpha", 1) != 1:
        # the pattern does not see addmm's keywords; the template's epilogue
        # adds the bias unscaled (and beta=0 must ignore a NaN bias)
        return decline("scaled", "addmm with beta or alpha other than 1", gemm)
    others = _gemm_users(gemm, weight_grads)
    opts = options()
    if others is None or (
        siblings
        and others
        and not all(
            (site := match_site(u)) is not None and taken(site, opts or {})
            for u in others
        )
    ):
        # another user needs the cat in memory, so reading the pieces in place
        # saves nothing (a training forward whose weight gradient reads it)
        return decline("cat_users", "the cat has other users", gemm)
    parts = _parts(match)
    if parts is None:
        return decline("not_nodes", "a part is not a graph node", gemm)
    vals = [_val(p) for p in parts]
    mat2, out = _val(match.kwargs["mat2"]), _val(gemm)
    if mat2 is None or out is None or any(v is None for v in vals):
        return decline("no_meta", "missing tensor metadata", gemm)
    rank = vals[0].dim()  # type: ignore[union-attr]
    dim = match.kwargs["dim"]
    if not 2 <= len(parts) <= cost.MAX_PARTS:
        return decline(
            "num_parts", f"{len(parts)} parts, not 2 to {cost.MAX_PARTS}", gemm
        )
    if any(v.dim() != rank for v in vals) or rank != (  # type: ignore[union-attr]
        3 if "size" in match.kwargs else 2
    ):
        return decline("rank", "not 2-D parts, or 3-D ones viewed to 2-D", gemm)
    if not isinstance(dim, int) or dim % rank != rank - 1:
        return decline("cat_dim", f"a cat on dim {dim}, not the last", gemm)
    widths = [v.shape[-1] for v in vals]  # type: ignore[union-attr]
    size = match.kwargs.get("size")
    if size is not None and (len(size) != 2 or size[1] != sum(widths)):
        return decline("view", f"a view of the cat to {size}", gemm)
    if any(not isinstance(w, int) or w <= 0 for w in widths):
        # a guard per symbolic width would specialize it
        return decline("width", "a symbolic or empty part width", gemm)
    if not statically_known_true(sum(widths) == mat2.shape[0]):
        return decline("k", "mat2 does not match the cat's width", gemm)
    dtypes = {v.dtype for v in (*vals, mat2, out)}  # type: ignore[union-attr]
    if len(dtypes) != 1 or not out.dtype.is_floating_point:
        return decline("dtype", f"mixed or non-floating dtypes {dtypes}", gemm)
    if len({v.device for v in (*vals, mat2)}) != 1:  # type: ignore[union-attr]
        return decline("devices", "operands on several devices", gemm)
    return True


def site(match: Match) -> cost.CatLinearSite:
    """The site as the decision sees it (sizes on their hints)."""
    parts = _parts(match)
    assert parts is not None
    vals = [_val(p) for p in parts]
    out = _val(match.output_node())
    assert out is not None and all(v is not None for v in vals)
    widths = tuple(v.shape[-1] for v in vals)  # type: ignore[union-attr]
    mat2 = _val(match.kwargs["mat2"])
    assert mat2 is not None
    align = get_alignment_size_dtype(out.dtype)
    leading = hint(max(mat2.stride()))
    return cost.CatLinearSite(
        rows=hint(out.shape[0]),
        widths=widths,
        n=hint(out.shape[1]),
        dtype=out.dtype,
        device=out.device,
        produced=tuple(_is_fused_producer(p) for p in parts),
        max_autotune=config.max_autotune or config.max_autotune_gemm,
        gemm_aligned=not any(
            get_padded_length(x, align) for x in (sum(widths), leading)
        ),
        prologue_fusion=config.prologue_fusion,
    )


def should_fuse_cat_mm(
    match: Match, opts: dict[str, Any], decline: Decline = _decline
) -> cost.Decision | None:
    """The form the site takes (and whether with prologues), or None for
    stock."""
    gemm = match.output_node()
    form = opts.get("form")
    the_site = site(match)
    if form == "off":
        decline("off", "turned off", gemm)
        return None
    if form == "view" and the_site.dtype.itemsize < 4:
        # each piece's product would be rounded before the sum
        decline("view_dtype", f"the view form in {the_site.dtype}", gemm)
        return None
    if form is None:
        decision = cost.decide(the_site)
        if decision.form is None:
            decline(decision.counter or "declined", decision.reason, gemm)
            return None
        form = decision.form
        log.debug(
            "cat_linear: %s %s -> %s as %s (%s)",
            gemm,
            the_site.widths,
            the_site.n,
            form,
            decision.reason,
        )
    else:
        decision = cost.Decision(
            form, "forced", prologues=the_site.folded if form == "mm" else ()
        )
    if form == "mm":
        from ..kernel.cat_linear import why_no_template

        why = why_no_template(
            the_site.device,
            the_site.dtype,
            the_site.n,
            the_site.widths,
            loops=any(decision.prologues),
        )
        if why is not None:
            decline("no_template", why, gemm)
            return None
    return decision


def _check(match: Match) -> bool:
    opts = options()
    if opts is None or not can_fuse_cat_mm(match):
        return False
    decision = should_fuse_cat_mm(match, opts)
    if decision is None:
        return False
    match.kwargs["form"] = decision.form
    match.kwargs["prologues"] = decision.prologues
    counters["inductor"]["cat_linear"] += 1
    return True


def _meaning(
    *,
    parts: list[torch.Tensor],
    dim: int,
    mat2: torch.Tensor,
    form: str | None = None,
    bias: torch.Tensor | None = None,
    size: Any = None,
    prologues: Any = None,
) -> torch.Tensor:
    """What a rewritten site computes, on tensors: the FakeTensorUpdater's
    view of the lowering's node, when a later pass changes its inputs or a
    parent graph re-runs the cond/while_loop body it sits in."""
    lhs = torch.cat(parts, dim)
    if size is not None:
        lhs = lhs.view(size)
    return torch.mm(lhs, mat2) if bias is None else torch.addmm(bias, lhs, mat2)


def _lower(match: Match, *, mat2: Any, form: str, **kwargs: Any) -> Any:
    if isinstance(mat2, torch.Tensor):
        return _meaning(mat2=mat2, form=form, **kwargs)
    from ..kernel.cat_linear import lower_cat_mm

    size = kwargs.get("size")
    return lower_cat_mm(
        form,
        kwargs["parts"],
        mat2,
        kwargs.get("bias"),
        None if size is None else size[0],
        kwargs.get("prologues"),
    )


def patterns() -> list[Any]:
    cat = CallFunction(
        aten.cat.default, KeywordArg("parts"), KeywordArg("dim"), _users=MULTIPLE
    )
    viewed = CallFunction(
        [aten.view.default, aten.reshape.default],
        cat,
        KeywordArg("size"),
        _users=MULTIPLE,
    )
    patterns = []
    for lhs in (cat, viewed):
        patterns.append(CallFunction(aten.mm.default, lhs, KeywordArg("mat2")))
        patterns.append(
            CallFunction(
                aten.addmm.default, KeywordArg("bias"), lhs, KeywordArg("mat2")
            )
        )
    return patterns


def register_cat_linear_lowerings(pass_dict: Any) -> None:
    """Register the ``cat_linear`` lowering patterns into ``pass_dict`` (one
    of ``post_grad.pass_patterns``)."""
    for pattern in patterns():
        register_lowering_pattern(pattern, extra_check=_check, pass_dict=pass_dict)(
            _lower
        )
    # The handler's meaning on fake tensors (register_lowering_pattern's
    # output_metadata_fn, where the FakeTensorUpdater asks for one).
    _lower._inductor_lowering_output_metadata_fn = _meaning  # type: ignore[attr-defined]
