"""
``mm(cat(parts, 1), mat2)`` (and ``addmm`` with a bias) without the cat, in
the form the post-grad ``cat_linear`` lowering pattern
(``fx_passes/cat_linear_lowering.py``) chose:

* ``"mm"``: a Triton template (``templates/triton_cat_mm.py.jinja``, whose
  header describes its two loop layouts), the bias as its epilogue as in
  ``tuned_addmm``.  By default one config and no benchmark; under
  ``max_autotune`` the configs of Inductor's mm heuristic for the
  ``M x K x N`` problem, next to the extern ``cat`` + ``mm``.  Pieces made
  by a pointwise op or a gather (``prologues``) are computed in the
  template's loads: its per-piece loops read every piece through
  ``load_input``, and the producers are let past the scheduler's prologue
  heuristics.  Where no
  template applies the pattern declines the site first
  (``why_no_template``); should one get here anyway, it lowers to ``cat`` +
  ``mm`` as one extern kernel.
* ``"view"``: a chain of per-piece GEMMs on row slices of ``mat2``
  (``addmm(acc, part, mat2[k0:k1])``), for any device.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TYPE_CHECKING

import torch

from .. import config
from ..fx_passes.cat_linear_fused_cost import (
    has_template,
    ONE_LOOP_BLOCK_KS,
    one_loop_tiles,
    whole_tiles,
)
from ..ir import Buffer, ComputedBuffer, FixedLayout, Pointwise
from ..kernel_inputs import MMKernelInputs
from ..lowering import expand, lowerings
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

# Software pipelining depth of the per-piece loops layout, whose trip counts
# are compile-time constants (the piece widths are literals in the generated
# kernel).  At 3 stages these loops compile in about a second with pieces up
# to 2048 wide; deeper, Triton's pipeliner over such loops was measured to
# take compile time growing with the trip count.  The one-loop layout has no
# such limit (one loop, as mm's).
LOOPS_MAX_STAGES = 3
# The default mode's configs (no benchmark): (BLOCK_M, BLOCK_N, BLOCK_K,
# num_warps, num_stages), the first that fits the device's shared memory.
# Pieces that are whole tiles but the last take the one-loop layout at the
# BLOCK_K they divide; the rest the per-piece loops; a narrow output takes a
# narrower tile.
_ONE_LOOP_CONFIGS = {
    64: [(128, 128, 64, 8, 4), (128, 128, 64, 8, 3), (64, 128, 64, 4, 3)],
    32: [(128, 128, 32, 4, 4), (64, 128, 32, 4, 4)],
}
_ONE_LOOP_NARROW_CONFIGS = {
    64: [(128, 64, 64, 4, 4), (64, 64, 64, 4, 3)],
    32: [(128, 64, 32, 4, 4), (64, 64, 32, 4, 3)],
}
_LOOPS_CONFIGS = [(64, 128, 64, 4, 3), (64, 128, 64, 4, 2), (64, 64, 32, 4, 2)]
_LOOPS_NARROW_CONFIGS = [(128, 64, 64, 4, 2), (64, 64, 32, 4, 2)]


def can_use_template(layout: FixedLayout) -> bool:
    return has_template(layout.device, layout.dtype) and use_triton_template(
        layout, check_max_autotune=False
    )


def why_no_template(
    device: torch.device,
    dtype: torch.dtype,
    n: int,
    widths: Sequence[int],
    loops: bool = False,
) -> str | None:
    """Why the in-place template cannot compute an ``M x n`` site here (None:
    it can), asked before the site is taken: on a CPU, in another dtype, on a
    GPU too small for Triton templates, with the Triton GEMM backend off, or
    without the shared memory for every default config."""
    layout = FixedLayout(device, dtype, [1, n])
    if not can_use_template(layout):
        return f"no in-place template for {dtype} on {device} with these backends"
    autotune = config.max_autotune or config.max_autotune_gemm
    if not autotune and _default_config(n, widths, dtype.itemsize, loops) is None:
        return "no default config fits the shared memory"
    return None


def _layout(
    cfg: dict[str, Any], widths: Sequence[Any], itemsize: int, loops: bool = False
) -> dict[str, Any] | None:
    """``cfg`` with the template's layout flags (ONE_LOOP where every piece
    but the last is whole tiles of its BLOCK_K and ``loops`` does not ask for
    the per-piece loops, EVEN_K where the last is whole tiles too, else the
    per-piece loops at no more than ``LOOPS_MAX_STAGES``), or None
    where its buffers do not fit the shared memory (one tile of a piece and
    one of the weight per stage, and the pipeline's barriers, as Inductor's
    mm templates count them)."""
    one_loop = not loops and one_loop_tiles(widths, cfg["BLOCK_K"])
    stages = cfg["num_stages"] if one_loop else min(cfg["num_stages"], LOOPS_MAX_STAGES)
    need = stages * (cfg["BLOCK_M"] + cfg["BLOCK_N"]) * cfg["BLOCK_K"] * itemsize
    if need + 128 > get_gpu_shared_memory():
        return None
    even_k = one_loop and whole_tiles(widths, cfg["BLOCK_K"])
    return dict(cfg, num_stages=stages, ONE_LOOP=one_loop, EVEN_K=even_k)


def _default_config(
    n: Any, widths: Sequence[Any], itemsize: int, loops: bool = False
) -> dict[str, Any] | None:
    """The first of the default configs that fits: the one-loop layout's at
    each K tile that every piece but the last is whole tiles of (unless
    ``loops``), then the per-piece loops'."""
    narrow = (
        isinstance(n, int)
        and n <= 64
        or (not isinstance(n, int) and V.graph.sizevars.statically_known_leq(n, 64))
    )
    one_loop_table = _ONE_LOOP_NARROW_CONFIGS if narrow else _ONE_LOOP_CONFIGS
    candidates = [
        cfg
        for block_k in ONE_LOOP_BLOCK_KS
        if not loops and one_loop_tiles(widths, block_k)
        for cfg in one_loop_table[block_k]
    ]
    candidates += _LOOPS_NARROW_CONFIGS if narrow else _LOOPS_CONFIGS
    for block_m, block_n, block_k, warps, stages in candidates:
        cfg = _layout(
            dict(
                BLOCK_M=block_m,
                BLOCK_N=block_n,
                BLOCK_K=block_k,
                num_stages=stages,
                num_warps=warps,
                GROUP_M=8,
            ),
            widths,
            itemsize,
            loops,
        )
        if cfg is not None:
            return cfg
    return None


def _heuristic_configs(
    m: Any, widths: Sequence[Any], mat2: Any, layout: FixedLayout, loops: bool
) -> list[dict[str, Any]]:
    """Inductor's mm heuristic's configs for the ``M x K x N`` problem the
    site computes (its cat is described, never made), each in the layout its
    BLOCK_K allows."""
    cat = Buffer(
        name="cat_linear_virtual_cat",
        layout=FixedLayout(layout.device, layout.dtype, [m, sum(widths)]),
    )
    kernel_inputs = MMKernelInputs([cat, mat2])
    configs = {}
    for ktc in V.choices.get_ktc(kernel_inputs, mm_template, "mm"):
        kwargs = ktc.params.to_kwargs()
        cfg = {
            key: kwargs[key]
            for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps")
        }
        cfg["num_stages"] = kwargs["num_stages"]
        laid_out = _layout(cfg, widths, layout.dtype.itemsize, loops)
        if laid_out is not None:
            configs[tuple(sorted(laid_out.items()))] = laid_out
    return list(configs.values())


def _template_choices(
    parts: list[Any], mat2: Any, inp: Any, layout: FixedLayout, loops: bool
) -> list[Any]:
    m, n = layout.size
    widths = [p.get_size()[1] for p in parts]
    autotune = config.max_autotune or config.max_autotune_gemm
    if autotune:
        configs = _heuristic_configs(m, widths, mat2, layout, loops)
    else:
        default = _default_config(n, widths, layout.dtype.itemsize, loops)
        configs = [] if default is None else [default]
    nodes = [*parts, mat2] if inp is None else [inp, *parts, mat2]
    epilogue: dict[str, Any] = {}
    if inp is not None:
        epilogue = dict(prefix_args=1, epilogue_fn=addmm_epilogue(layout.dtype, 1, 1))
    choices: list[Any] = []
    if autotune and use_aten_gemm_kernels():
        extern = aten_cat_mm if inp is None else aten_cat_addmm
        choices.append(extern.bind(nodes, layout))
    for cfg in configs:
        cat_mm_template.maybe_append_choice(
            choices,
            input_nodes=nodes,
            layout=layout,
            **epilogue,
            **cfg,
            NUM_PARTS=len(parts),
            ACC_TYPE="tl.float32",
        )
    return choices


def _extern(parts: list[Any], mat2: Any, inp: Any, layout: FixedLayout) -> Any:
    """``cat`` + ``mm`` as one extern kernel: what the site computes when no
    template choice is left (the pattern decided before any was listed)."""
    extern = aten_cat_mm if inp is None else aten_cat_addmm
    nodes = [*parts, mat2] if inp is None else [inp, *parts, mat2]
    return extern.bind(nodes, layout).output_node()


def _fold_producers(parts: list[Any], prologues: Sequence[bool]) -> None:
    """Let the scheduler fuse each flagged piece's producer into the
    template's loads past its prologue heuristics, as ``invoke_quant``'s
    lowering does for its operands.  The heuristics decline a producer that
    computes in fp32 for a 16-bit template, or reads more than it writes;
    here each such piece saves a write and a read of the piece, which the
    decision weighed.  The scheduler still fuses only a single-use,
    functional pointwise producer."""
    for part, fold in zip(parts, prologues):
        buf = V.graph.name_to_buffer.get(part.get_name()) if fold else None
        if isinstance(buf, ComputedBuffer) and isinstance(buf.data, Pointwise):
            V.graph.invoke_quant_ops.add(buf.get_operation_name())


def tuned_cat_mm(
    parts: list[Any],
    mat2: Any,
    bias: Any = None,
    prologues: Sequence[bool] | None = None,
) -> Any:
    """``addmm(bias, cat(parts, 1), mat2)`` for 2-D ``parts`` (``bias``
    broadcastable to the output, or None), reading the parts in place where a
    template applies, else as ``cat`` + ``mm`` in one extern kernel.
    ``prologues``: per part, whether the template computes its producer in
    its loads (then in the per-piece loops layout)."""
    m = parts[0].get_size()[0]
    n = mat2.get_size()[1]
    layout = FixedLayout(parts[0].get_device(), parts[0].get_dtype(), [m, n])
    parts = list(realize_inputs(*parts))
    mat2 = realize_inputs(mat2)
    inp = None if bias is None else realize_inputs(expand(bias, [m, n]))
    prologues = prologues or ()
    loops = any(prologues)
    choices = (
        _template_choices(parts, mat2, inp, layout, loops)
        if can_use_template(layout)
        else []
    )
    if choices and loops:
        _fold_producers(parts, prologues)
    if not choices:
        return _extern(parts, mat2, inp, layout)
    nodes = [*parts, mat2] if inp is None else [inp, *parts, mat2]
    result = autotune_select_algorithm("cat_mm", choices, nodes, layout)
    # (node, choice) where autotune_select_algorithm returns the choice too
    return result[0] if isinstance(result, tuple) else result


def split_k_mm(parts: list[Any], mat2: Any, bias: Any = None) -> Any:
    """The same product as a chain of GEMMs over row slices of ``mat2``, one
    per piece, each adding into the last one's output."""
    acc, start = bias, 0
    for part in parts:
        width = part.get_size()[1]
        rows = lowerings[aten.slice.Tensor](mat2, 0, start, start + width)
        if acc is None:
            acc = lowerings[aten.mm.default](part, rows)
        else:
            acc = lowerings[aten.addmm.default](acc, part, rows)
        start = start + width
    return acc


def lower_cat_mm(
    form: str,
    parts: list[Any],
    mat2: Any,
    bias: Any = None,
    rows: Any = None,
    prologues: Sequence[bool] | None = None,
) -> Any:
    """Lower a matched site in ``form``.  ``parts`` are 2-D, or 3-D with
    ``rows`` the product of their leading sizes (the site's view to 2-D);
    ``prologues`` as in ``tuned_cat_mm``."""
    if rows is not None:
        parts = [
            lowerings[aten.view.default](p, [rows, p.get_size()[-1]]) for p in parts
        ]
    if form == "mm":
        return tuned_cat_mm(parts, mat2, bias, prologues)
    return split_k_mm(parts, mat2, bias)
