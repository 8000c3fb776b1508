"""
``addmm(bias, cat(parts, 1), mat2)`` without the cat: ``"mm"``, a Triton
template reading the pieces in place, or ``"view"``, per-piece GEMMs.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, TYPE_CHECKING

import sympy

import torch
from torch._dynamo.utils import counters

from .. import config, ir
from ..fx_passes import cat_linear_decision as cost
from ..kernel_inputs import MMKernelInputs
from ..lowering import expand, lowerings, pointwise_cat
from ..select_algorithm import (
    autotune_select_algorithm,
    ExternKernelChoice,
    realize_inputs,
    TritonTemplate,
)
from ..utils import (
    get_gpu_shared_memory,
    load_template,
    use_aten_gemm_kernels,
    use_triton_template,
)
from ..virtualized import V
from .mm import bias_addmm, mm_template
from .mm_common import addmm_epilogue, mm_grid


if TYPE_CHECKING:
    from collections.abc import Sequence


log = logging.getLogger(__name__)
aten = torch.ops.aten

cat_mm_template = TritonTemplate(
    name="cat_mm",
    grid=mm_grid,
    source=load_template("triton_cat_mm", Path(__file__).parent / "templates"),
)


def _cat_mm(*args: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    *parts, mat2 = args
    return torch.mm(torch.cat(parts, 1), mat2, out=out)


def _cat_addmm(
    bias: torch.Tensor, *args: torch.Tensor, out: torch.Tensor
) -> torch.Tensor:
    *parts, mat2 = args
    return bias_addmm(bias, torch.cat(parts, 1), mat2, out=out)


aten_cat_mm = ExternKernelChoice(_cat_mm, None, name="cat_linear_cat_mm")
aten_cat_addmm = ExternKernelChoice(_cat_addmm, None, name="cat_linear_cat_addmm")

# the per-piece loops' depth: deeper, Triton's compile time grew with trip counts
LOOPS_MAX_STAGES = 3
# default mode: the first that fits (one loop at each BLOCK_K the pieces
# allow, then per-piece loops; narrow tables for N <= 64)
_CONFIG_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages")
_ONE_LOOP_CONFIGS = {
    64: [(128, 128, 64, 8, 3), (64, 128, 64, 4, 3)],
    32: [(128, 128, 32, 4, 4), (64, 128, 32, 4, 4)],
}
_ONE_LOOP_NARROW_CONFIGS = {
    64: [(128, 64, 64, 4, 2), (64, 64, 64, 4, 3)],
    32: [(128, 64, 32, 4, 4), (64, 64, 32, 4, 3)],
}
_LOOPS_CONFIGS = [(64, 128, 64, 4, 3), (64, 128, 64, 4, 2), (64, 64, 32, 4, 2)]
_LOOPS_NARROW_CONFIGS = [(128, 64, 64, 4, 2), (64, 64, 32, 4, 2)]


def can_use_template(layout: ir.FixedLayout) -> bool:
    return cost.has_template(layout.device, layout.dtype) and use_triton_template(
        layout, check_max_autotune=False
    )


def why_no_template(site: cost.CatLinearSite, loops: bool = False) -> str | None:
    if not can_use_template(ir.FixedLayout(site.device, site.dtype, [1, site.n])):
        return f"no in-place template for {site.dtype} on {site.device} here"
    autotune = config.max_autotune or config.max_autotune_gemm
    if not autotune and not _default_config(site.n, site.widths, site.itemsize, loops):
        return "no default config fits the shared memory"
    return None


def _layout(
    cfg: dict[str, Any], widths: Sequence[Any], itemsize: int, loops: bool = False
) -> dict[str, Any] | None:
    """``cfg`` with the template's layout flags; None where it does not fit
    the shared memory."""
    block_k = cfg["BLOCK_K"]
    one_loop = not loops and cost.one_loop_tiles(widths, block_k)
    stages = cfg["num_stages"] if one_loop else min(cfg["num_stages"], LOOPS_MAX_STAGES)
    need = stages * (cfg["BLOCK_M"] + cfg["BLOCK_N"]) * block_k * itemsize
    if need + 128 > get_gpu_shared_memory():
        return None
    whole = [cost.whole_tiles([w], block_k) for w in widths]
    even_k = one_loop and all(whole)
    even_pieces = 0 if one_loop else sum(1 << i for i, w in enumerate(whole) if w)
    return dict(
        cfg,
        num_stages=stages,
        ONE_LOOP=one_loop,
        EVEN_K=even_k,
        EVEN_PIECES=even_pieces,
    )


def _default_config(
    n: int, widths: Sequence[Any], itemsize: int, loops: bool = False
) -> dict[str, Any] | None:
    """The first row that fits (``n``: N's hint, as the decision saw it)."""
    narrow = n <= 64
    one_loop_table = _ONE_LOOP_NARROW_CONFIGS if narrow else _ONE_LOOP_CONFIGS
    candidates = [
        cfg
        for block_k in cost.ONE_LOOP_BLOCK_KS
        if not loops and cost.one_loop_tiles(widths, block_k)
        for cfg in one_loop_table[block_k]
    ]
    candidates += _LOOPS_NARROW_CONFIGS if narrow else _LOOPS_CONFIGS
    for row in candidates:
        cfg = _layout(dict(zip(_CONFIG_KEYS, row), GROUP_M=8), widths, itemsize, loops)
        if cfg is not None:
            return cfg
    return None


def _heuristic_configs(
    m: Any, widths: Sequence[Any], mat2: Any, layout: ir.FixedLayout, loops: bool
) -> list[dict[str, Any]]:
    """The mm heuristic's configs for the site's GEMM (its cat described,
    never made), each laid out for its BLOCK_K."""
    cat = ir.Buffer(
        name="cat_linear_virtual_cat",
        layout=ir.FixedLayout(layout.device, layout.dtype, [m, sum(widths)]),
    )
    kernel_inputs = MMKernelInputs([cat, mat2])
    configs = {}
    for ktc in V.choices.get_ktc(kernel_inputs, mm_template, "mm"):
        kwargs = ktc.params.to_kwargs()
        cfg = {key: kwargs[key] for key in (*_CONFIG_KEYS, "GROUP_M")}
        laid_out = _layout(cfg, widths, layout.dtype.itemsize, loops)
        if laid_out is not None:
            configs[tuple(sorted(laid_out.items()))] = laid_out
    return list(configs.values())


def _fold_producers(parts: list[Any], prologues: Sequence[bool]) -> None:
    """Let the flagged pieces' producers past the prologue heuristics (which
    decline fp32 math in a 16-bit template), as ``invoke_quant`` does."""
    for part, fold in zip(parts, prologues):
        buf = V.graph.name_to_buffer.get(part.get_name()) if fold else None
        if isinstance(buf, ir.ComputedBuffer) and isinstance(buf.data, ir.Pointwise):
            V.graph.invoke_quant_ops.add(buf.get_operation_name())


def _aligned_rows(x: Any) -> Any:
    """2-D ``x`` with a 16-byte aligned leading stride, so that row loads
    vectorize (a copy where its layout is fixed)."""
    from ..fx_passes.pad_mm import get_alignment_size_dtype, get_padded_length

    size, stride = x.get_size(), x.get_stride()
    if not all(isinstance(v, (int, sympy.Integer)) for v in stride):
        return x
    stride = [int(v) for v in stride]
    lead, align = int(stride[0] < stride[1]), get_alignment_size_dtype(x.get_dtype())
    pad = get_padded_length(stride[lead], align)
    short = V.graph.sizevars.statically_known_lt(size[1 - lead], align)
    if stride[1 - lead] != 1 or not pad or short:
        return x
    exact = [1, 1]
    exact[lead] = stride[lead] + pad
    return ir.ExternKernel.require_exact_strides(x, exact)


def _is_flexible(x: Any) -> bool:
    return ir.is_storage_and_layout(x) and isinstance(x.get_layout(), ir.FlexibleLayout)


def tuned_cat_mm(
    parts: list[Any],
    mat2: Any,
    bias: Any = None,
    prologues: Sequence[bool] | None = None,
    laid_out: Sequence[bool] | None = None,
) -> Any:
    """``addmm(bias, cat(parts, 1), mat2)`` for 2-D ``parts``, read in place
    (``prologues``: computed in its loads; ``laid_out``: at aligned rows)."""
    given = (parts, mat2, bias)
    m, n = parts[0].get_size()[0], mat2.get_size()[1]
    layout = ir.FixedLayout(parts[0].get_device(), parts[0].get_dtype(), [m, n])
    parts = list(realize_inputs(*parts))
    mat2 = realize_inputs(mat2)
    inp = None if bias is None else realize_inputs(expand(bias, [m, n]))
    widths = [p.get_size()[1] for p in parts]
    for i, free in enumerate(laid_out or ()):
        if free and _is_flexible(parts[i]):
            parts[i] = _aligned_rows(parts[i])
    # compute-bound, each weight tile is read once per row block: an aligned
    # copy pays (a weight made in the graph keeps its layout for other readers)
    ridge = cost.ridge_point(layout.device, layout.dtype)
    rows, k, cols = V.graph.sizevars.optimization_hints([m, sum(widths), n])
    itemsize = layout.dtype.itemsize
    if ridge is not None and cost.compute_bound(rows, k, cols, itemsize, ridge):
        mat2 = mat2 if _is_flexible(mat2) else _aligned_rows(mat2)
    prologues = prologues or ()
    loops = any(prologues)
    autotune = config.max_autotune or config.max_autotune_gemm
    if autotune:
        configs = _heuristic_configs(m, widths, mat2, layout, loops)
    else:
        configs = [_default_config(cols, widths, itemsize, loops)]
    nodes, extern, epilogue = [*parts, mat2], aten_cat_mm, {}
    if inp is not None:
        nodes, extern = [inp, *nodes], aten_cat_addmm
        epilogue = dict(prefix_args=1, epilogue_fn=addmm_epilogue(layout.dtype, 1, 1))
    choices: list[Any] = []
    if autotune and use_aten_gemm_kernels() and not V.graph.cpp_wrapper:
        # the cat + mm choice, as bias_addmm, has only a Python implementation
        choices.append(extern.bind(nodes, layout))
    for cfg in filter(None, configs):
        cat_mm_template.maybe_append_choice(
            choices,
            input_nodes=nodes,
            layout=layout,
            **epilogue,
            **cfg,
            NUM_PARTS=len(parts),
            FOLDED=sum(1 << i for i, fold in enumerate(prologues) if fold),
            ACC_TYPE="tl.float32",
        )
    if not choices:
        # max_autotune: no config fits and no ATen choice runs here
        log.debug("cat_linear: no choice for %s, the cat is made", layout)
        counters["inductor"]["cat_linear_no_choice"] += 1
        return stock_mm(*given)
    counters["inductor"]["cat_linear"] += 1
    if loops:
        _fold_producers(parts, prologues)
    result = autotune_select_algorithm("cat_mm", choices, nodes, layout)
    # (node, choice) where autotune_select_algorithm returns the choice too
    return result[0] if isinstance(result, tuple) else result


def stock_mm(parts: list[Any], mat2: Any, bias: Any = None) -> Any:
    """Stock's cat and GEMM, where the template turns out not to apply."""
    cat = pointwise_cat(list(parts), 1)
    if bias is None:
        return lowerings[aten.mm.default](cat, mat2)
    return lowerings[aten.addmm.default](bias, cat, mat2)


def split_k_mm(parts: list[Any], mat2: Any, bias: Any = None) -> Any:
    """Per-piece GEMMs on row slices of ``mat2``, chained; the bias added
    after the sum, as cuBLAS adds it."""
    acc, start = None, 0
    for part in parts:
        width = part.get_size()[1]
        rows = lowerings[aten.slice.Tensor](mat2, 0, start, start + width)
        if acc is None:
            acc = lowerings[aten.mm.default](part, rows)
        else:
            acc = lowerings[aten.addmm.default](acc, part, rows)
        start = start + width
    return acc if bias is None else lowerings[aten.add.Tensor](acc, bias)
