"""
``linear(cat(parts, -1), W, b)``, post-grad ``addmm(b, cat(parts, 1), W.t())``
(3-D parts through a ``view``), lowered without the cat, like ``mm_plus_mm``:
``can_fuse_cat_mm`` says a site is exact, ``should_fuse_cat_mm`` that it pays.
On with ``pre_grad_fusion_options["cat_linear"]``; ``{"form": ...}`` forces
``"mm"`` (the template), ``"view"`` (per-piece GEMMs) or ``"off"``.  Counters:
``cat_linear`` per site taken, ``cat_linear_<reason>`` per decline.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import torch
from torch._dynamo.utils import counters
from torch.fx.experimental.symbolic_shapes import (
    optimization_hint,
    statically_known_true,
)

from .. import config
from ..pattern_matcher import (
    CallFunction,
    is_match,
    KeywordArg,
    Match,
    MULTIPLE,
    register_lowering_pattern,
)
from . import cat_linear_decision as cost
from .pad_mm import get_alignment_size_dtype, get_padded_length


log = logging.getLogger(__name__)
aten = torch.ops.aten

FORMS = ("mm", "view")
# Pieces the forms take: they unroll a load (the view form a GEMM) per piece
MAX_PARTS = 4


def options() -> dict[str, Any] | None:
    """The switch: ``pre_grad_fusion_options["cat_linear"]``, None when off."""
    opts = config.pre_grad_fusion_options.get("cat_linear")
    if opts is not None and opts.get("form") not in (None, "off", *FORMS):
        raise ValueError(
            'pre_grad_fusion_options["cat_linear"]["form"] must be one of '
            f"{(None, 'off', *FORMS)}, got {opts['form']!r}"
        )
    return opts


Decline = Callable[[str, str, torch.fx.Node], bool]


def _decline(key: str, reason: str, node: torch.fx.Node) -> bool:
    log.debug("skipping cat_linear: %s at %s", reason, node)
    counters["inductor"][f"cat_linear_{key}"] += 1
    return False


def _val(node: Any) -> torch.Tensor | None:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return val if isinstance(val, torch.Tensor) else None


def hint(size: Any) -> int:
    """A size's value at trace time, without a guard."""
    return optimization_hint(size, fallback=config.unbacked_symint_fallback)


# lowered to a pointwise loop of indirect loads
_GATHERS = (aten.index.Tensor, aten.embedding.default, aten.gather.default)


def _lowers_to_pointwise(target: Any) -> bool:
    return isinstance(target, torch._ops.OpOverload) and (
        torch.Tag.pointwise in target.tags or target in _GATHERS
    )


def _is_fused_producer(node: torch.fx.Node) -> bool:
    """A single-user pointwise op or gather, which stock writes straight
    into the cat and the template can compute in its loads (a site this
    lowering took already reads it in the cat's stead)."""
    users = [user for user in node.users if not _is_taken_site(user)]
    return (
        node.op == "call_function"
        and len(users) == 1
        and _lowers_to_pointwise(node.target)
    )


def _reads_rows(gather: torch.fx.Node) -> bool:
    """Whether ``gather`` picks whole contiguous rows (``embedding``, or
    integer indices on leading dims of a source contiguous in its last)."""
    src = _val(gather.args[0])
    if src is None or src.dim() == 0 or src.stride(-1) != 1:
        return False
    if gather.target is aten.embedding.default:
        return True
    # index_select reaches here as aten.index; aten.gather is never rows
    index = gather.args[1] if gather.target is aten.index.Tensor else None
    if not isinstance(index, (list, tuple)) or len(index) >= src.dim():
        return False
    vals = [_val(i) for i in index if i is not None]
    return all(v is not None and v.dtype in (torch.int32, torch.int64) for v in vals)


def _gather_kind(node: torch.fx.Node) -> str | None:
    """How a fused producer's loop, inlined inputs included, loads through
    an index: None, ``"rows"`` (whole rows, through no view) or ``"other"``."""
    kind, todo, seen = None, [(node, False)], {node}
    while todo:
        cur, viewed = todo.pop()
        if cur.target in _GATHERS:
            if viewed or not _reads_rows(cur):
                return "other"
            kind = "rows"
        for arg in cur.all_input_nodes:
            view = isinstance(arg.target, torch._ops.OpOverload) and arg.target.is_view
            if arg not in seen and (view or _lowers_to_pointwise(arg.target)):
                seen.add(arg)
                todo.append((arg, viewed or view))
    return kind


_VIEWS = (aten.view.default, aten.reshape.default)


def _unviewed(arg: Any) -> Any:
    is_view = isinstance(arg, torch.fx.Node) and arg.target in _VIEWS
    return arg.args[0] if is_view else arg  # type: ignore[union-attr]


def gemm_cat(gemm: torch.fx.Node) -> Any:
    """What an ``mm``/``addmm`` reads as its input, through a view."""
    return _unviewed(gemm.args[1 if gemm.target is aten.addmm.default else 0])


def _reads_cat_twice(gemm: torch.fx.Node) -> bool:
    """Whether ``gemm`` reads its cat as its bias or ``mat2`` too."""
    lhs = 1 if gemm.target is aten.addmm.default else 0
    cat = gemm_cat(gemm)
    return any(_unviewed(a) is cat for i, a in enumerate(gemm.args) if i != lhs)


def cat_readers(cat: torch.fx.Node) -> list[torch.fx.Node]:
    """The nodes that read ``cat``'s data, directly or through a view."""
    readers: list[torch.fx.Node] = []
    for user in cat.users:
        readers.extend(user.users if user.target in _VIEWS else [user])
    return [r for r in readers if r.target is not aten.sym_size.int]


_SUMMED_MMS = CallFunction(
    aten.add,
    CallFunction(aten.mm.default, KeywordArg("mat1"), KeywordArg("mat2")),
    CallFunction(aten.mm.default, KeywordArg("mat3"), KeywordArg("mat4")),
)


def summed_by_mm_plus_mm(gemm: torch.fx.Node) -> bool:
    """Whether ``mm_plus_mm``, found first in the same pass, takes
    ``gemm``'s sum."""
    from .post_grad import is_valid_mm_plus_mm

    return gemm.target is aten.mm.default and any(
        is_match(match := _SUMMED_MMS.match(user)) and is_valid_mm_plus_mm(match)
        for user in gemm.users
    )


def site_reading(gemm: torch.fx.Node, cat: torch.fx.Node) -> Match | None:
    """``gemm``'s site, where it reads ``cat`` as its input."""
    matches = (pattern.match(gemm) for pattern in patterns())
    match = next((match for match in matches if is_match(match)), None)
    return match if match is not None and gemm_cat(gemm) is cat else None


def taken(
    match: Match, opts: dict[str, Any], decline: Decline = lambda *_: False
) -> bool:
    """Whether the lowering takes this site, its cat's other readers aside."""
    gemm = match.output_node()
    if summed_by_mm_plus_mm(gemm):
        return decline("mm_plus_mm", "mm_plus_mm takes it", gemm)
    return (
        can_fuse_cat_mm(match, decline=decline, readers=False)
        and should_fuse_cat_mm(match, opts, decline=decline) is not None
    )


def _readers_taken(gemm: torch.fx.Node) -> bool:
    """Whether every other reader of ``gemm``'s cat is a site taken too."""
    cat, opts = gemm_cat(gemm), options() or {}
    others = (user for user in cat_readers(cat) if user is not gemm)
    return all(
        (site := site_reading(user, cat)) is not None and taken(site, opts)
        for user in others
    )


def can_fuse_cat_mm(
    match: Match, *, decline: Decline = _decline, readers: bool = True
) -> bool:
    """Whether the lowering computes this site exactly (``readers=False``:
    the cat's other readers aside)."""
    gemm = match.output_node()
    if gemm.kwargs.get("beta", 1) != 1 or gemm.kwargs.get("alpha", 1) != 1:
        # the template adds the bias unscaled (beta=0 must ignore a NaN bias)
        return decline("scaled", "addmm with beta or alpha other than 1", gemm)
    if _reads_cat_twice(gemm):
        return decline("cat_users", "the GEMM reads the cat twice", gemm)
    if readers and not _readers_taken(gemm):
        # e.g. the weight gradient: the cat stays, reading in place saves nothing
        return decline("cat_users", "the cat has other users", gemm)
    parts = match.kwargs["parts"]
    if not 2 <= len(parts) <= MAX_PARTS:
        return decline("num_parts", f"{len(parts)} parts", gemm)
    vals = [_val(p) for p in parts]
    mat2, out = _val(match.kwargs["mat2"]), _val(gemm)
    if mat2 is None or out is None or any(v is None for v in vals):
        return decline("no_meta", "missing tensor metadata", gemm)
    rank, dim = 3 if "size" in match.kwargs else 2, match.kwargs["dim"]
    if any(v.dim() != rank for v in vals):  # type: ignore[union-attr]
        return decline("rank", "not 2-D parts, or 3-D ones viewed to 2-D", gemm)
    if not isinstance(dim, int) or dim % rank != rank - 1:
        return decline("cat_dim", f"a cat on dim {dim}, not the last", gemm)
    widths = [v.shape[-1] for v in vals]  # type: ignore[union-attr]
    if any(not isinstance(w, int) or w <= 0 for w in widths):
        # a guard per symbolic width would specialize it
        return decline("width", "a symbolic or empty part width", gemm)
    size = match.kwargs.get("size")
    if size is not None and (len(size) != 2 or size[1] != sum(widths)):
        return decline("view", f"a view of the cat to {size}", gemm)
    if not statically_known_true(sum(widths) == mat2.shape[0]):
        return decline("k", "mat2 does not match the cat's width", gemm)
    dtypes = {v.dtype for v in (*vals, mat2, out)}  # type: ignore[union-attr]
    if len(dtypes) != 1 or not out.dtype.is_floating_point:
        return decline("dtype", f"mixed or non-floating dtypes {dtypes}", gemm)
    if len({v.device for v in (*vals, mat2)}) != 1:  # type: ignore[union-attr]
        return decline("devices", "operands on several devices", gemm)
    if (options() or {}).get("form") == "view" and out.dtype.itemsize < 4:
        # each piece's product would be rounded before the sum
        return decline("view_dtype", f"the view form in {out.dtype}", gemm)
    return True


def laid_out(match: Match) -> tuple[bool, ...]:
    """Per piece, whether to lay it out at aligned rows: a fused producer's
    output of a 2-D site, at least a vector wide."""
    align = get_alignment_size_dtype(match.output_node().meta["val"].dtype)
    return tuple(
        "size" not in match.kwargs
        and _is_fused_producer(p)
        and p.meta["val"].shape[-1] >= align
        for p in match.kwargs["parts"]
    )


def _read_by_several_sites(match: Match) -> bool:
    """Whether another GEMM reads this site's cat in place, or took its
    pieces already: a producer then has several readers, and is written."""
    cat, parts = gemm_cat(match.output_node()), match.kwargs["parts"]
    sites = [user for user in cat_readers(cat) if site_reading(user, cat)]
    return len(sites) > 1 or any(_is_taken_site(u) for p in parts for u in p.users)


def _is_taken_site(node: torch.fx.Node) -> bool:
    """Whether ``node`` is a site this lowering took (its handler wraps ``_lower``)."""
    return getattr(node.target, "__wrapped__", None) is _lower


def site(match: Match) -> cost.CatLinearSite:
    """The site as the decision sees it (sizes on their hints)."""
    parts = match.kwargs["parts"]
    out, mat2 = match.output_node().meta["val"], match.kwargs["mat2"].meta["val"]
    widths = tuple(p.meta["val"].shape[-1] for p in parts)
    produced = tuple(_is_fused_producer(p) for p in parts)
    gathers = tuple(_gather_kind(p) if f else None for p, f in zip(parts, produced))
    align = get_alignment_size_dtype(out.dtype)

    def aligned(*sizes: Any) -> bool:
        return not any(get_padded_length(hint(x), align) for x in sizes)

    return cost.CatLinearSite(
        rows=hint(out.shape[0]),
        widths=widths,
        n=hint(out.shape[1]),
        dtype=out.dtype,
        device=out.device,
        produced=produced,
        gathers=gathers,
        max_autotune=config.max_autotune or config.max_autotune_gemm,
        gemm_aligned=aligned(sum(widths), max(mat2.stride())),
        prologue_fusion=config.prologue_fusion and not _read_by_several_sites(match),
        static_shape=not any(isinstance(x, torch.SymInt) for x in out.shape),
    )


def should_fuse_cat_mm(
    match: Match, opts: dict[str, Any], decline: Decline = _decline
) -> cost.Decision | None:
    """The form the site takes, or None for stock."""
    gemm, form, the_site = match.output_node(), opts.get("form"), site(match)
    if form == "off":
        decision = cost.Decision(None, "turned off", "off")
    elif form is None:
        decision = cost.decide(the_site)
    else:
        folded = the_site.folded if form == "mm" else ()
        decision = cost.Decision(form, "forced", prologues=folded)
    if decision.form == "mm":
        from ..kernel.cat_linear import why_no_template

        why = why_no_template(the_site, loops=any(decision.prologues))
        if why is not None:
            decision = cost.Decision(None, why, "no_template")
    if decision.form is None:
        decline(decision.counter or "declined", decision.reason, gemm)
        return None
    log.debug("cat_linear: %s as %s (%s)", gemm, decision.form, decision.reason)
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
    match.kwargs["laid_out"] = laid_out(match)
    return True


def _meaning(
    *, parts: Any, dim: int, mat2: Any, bias: Any = None, size: Any = None, **_: Any
) -> torch.Tensor:
    """A taken site on fake tensors (FakeTensorUpdater, cond/while_loop)."""
    lhs = torch.cat(parts, dim)
    lhs = lhs if size is None else lhs.view(size)
    return torch.mm(lhs, mat2) if bias is None else torch.addmm(bias, lhs, mat2)


def _lower(match: Match, *, parts: Any, mat2: Any, size: Any = None, **kw: Any) -> Any:
    if isinstance(mat2, torch.Tensor):
        return _meaning(parts=parts, mat2=mat2, size=size, **kw)
    from ..kernel.cat_linear import split_k_mm, tuned_cat_mm
    from ..lowering import lowerings

    if size is not None:  # 3-D parts, viewed to the GEMM's rows
        view = lowerings[aten.view.default]
        parts = [view(p, [size[0], p.get_size()[-1]]) for p in parts]
    bias = kw.get("bias")
    if kw["form"] == "view":
        counters["inductor"]["cat_linear"] += 1
        return split_k_mm(parts, mat2, bias)
    return tuned_cat_mm(parts, mat2, bias, kw["prologues"], kw["laid_out"])


@functools.cache
def patterns() -> tuple[Any, ...]:
    cat = CallFunction(
        aten.cat.default, KeywordArg("parts"), KeywordArg("dim"), _users=MULTIPLE
    )
    viewed = CallFunction(list(_VIEWS), cat, KeywordArg("size"), _users=MULTIPLE)
    mat2, bias = KeywordArg("mat2"), KeywordArg("bias")
    return tuple(
        pattern
        for lhs in (cat, viewed)
        for pattern in (
            CallFunction(aten.mm.default, lhs, mat2),
            CallFunction(aten.addmm.default, bias, lhs, mat2),
        )
    )


def register_cat_linear_lowerings(pass_dict: Any) -> None:
    """Register the lowering patterns into one of ``post_grad.pass_patterns``."""
    for pattern in patterns():
        register_lowering_pattern(pattern, extra_check=_check, pass_dict=pass_dict)(
            _lower
        )
    _lower._inductor_lowering_output_metadata_fn = _meaning  # type: ignore[attr-defined]
