"""
Whether ``linear(cat(parts, -1), W, b)`` pays computed without the cat.

The most it saves is a write and a read of each piece through the cat (of a
pointwise-made piece, only where the template computes it in its loads: stock
writes it straight into the cat), so the best case is ``(gemm + cat) / gemm``
at roofline cost from the device's figures; nothing is timed.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Any, TYPE_CHECKING

import sympy

import torch


if TYPE_CHECKING:
    from collections.abc import Sequence


log = logging.getLogger(__name__)


# Sustained fractions of the peak GEMM rate and of the peak DRAM bandwidth.
GEMM_EFFICIENCY = 0.65
COPY_EFFICIENCY = 0.87
# Below this best case kernel efficiency decides, which a roofline cannot see.
MARGIN = 1.1
# A memory-bound site in the per-piece loops needs this best case: they
# trail cuBLAS on a ready cat by this much.
LOOPS_MIN_BOUND = 1.3
# The one loop trails cuBLAS at a compute-bound GEMM, most at short K: such
# a site needs this best case and K, unless stock's GEMM is unaligned.
COMPUTE_BOUND_MIN_BOUND = 1.25
COMPUTE_BOUND_MIN_K = 1024
# ... but within this many waves of output tiles (of the default one-loop
# config's size) both run at a tile's latency, and over 64-wide K tiles the
# one loop comes close to cuBLAS (over 32-wide ones it lost at two sites).
LATENCY_BOUND_MAX_WAVES = 2
WAVE_TILE = 128
# The one-loop layout's K tiles, in the order the default mode tries them.
ONE_LOOP_BLOCK_KS = (64, 32)
# A gather in the loads runs once per column tile (and along K does not
# coalesce): only a gather of rows, where one default tile covers N.
GATHER_MAX_N = 128


def whole_tiles(widths: Sequence[Any], block_k: int) -> bool:
    """Whether every width is a static multiple of ``block_k``."""
    return all(
        isinstance(w, (int, sympy.Integer)) and int(w) % block_k == 0 for w in widths
    )


def one_loop_tiles(widths: Sequence[Any], block_k: int) -> bool:
    """Whether each tile of the one K loop lies in one piece (the last
    piece's tail is masked, as in mm's)."""
    return whole_tiles(widths[:-1], block_k)


def has_template(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether the template computes such a site (16-bit, fp32 accumulation)."""
    return device.type == "cuda" and dtype in (torch.float16, torch.bfloat16)


@functools.cache
def ridge_point(device: torch.device, dtype: torch.dtype) -> float | None:
    """Sustained GEMM FLOPs per DRAM byte, from the figures ``pad_mm`` uses;
    None where they are unknown."""
    from ..utils import get_device_tflops, get_gpu_dram_gbps

    cuda = torch.cuda.is_available() and torch.version.hip is None
    if not (cuda and has_template(device, dtype)):
        return None
    try:
        with torch.cuda.device(device):
            flops = get_device_tflops(dtype) * 1e12
            dram = get_gpu_dram_gbps() * 1e9
    except Exception:
        # as pad_mm: no figures, never a failed compile
        log.debug("no device figures for %s on %s", dtype, device, exc_info=True)
        return None
    if not (flops >= 1e12 and dram > 0):
        return None  # off by orders of magnitude: would screen out every site
    return flops * GEMM_EFFICIENCY / (dram * COPY_EFFICIENCY)


def multiprocessors(device: torch.device) -> int | None:
    """Inductor's multiprocessor count (less any carveout), or None."""
    from ..utils import get_num_sms

    try:
        with torch.cuda.device(device):
            return get_num_sms()
    except Exception:
        log.debug("no multiprocessor count for %s", device, exc_info=True)
        return None


def gemm_flops_bytes(rows: int, k: int, n: int, itemsize: int) -> tuple[float, float]:
    """A ``rows x k x n`` GEMM's FLOPs and its DRAM bytes (operands, output)."""
    return 2.0 * rows * n * k, ((rows + n) * k + rows * n) * itemsize


def compute_bound(rows: int, k: int, n: int, itemsize: int, ridge: float) -> bool:
    """Whether a ``rows x k x n`` GEMM's roofline is its FLOPs, not its bytes."""
    flops, nbytes = gemm_flops_bytes(rows, k, n, itemsize)
    return flops / ridge >= nbytes


@dataclasses.dataclass(frozen=True)
class CatLinearSite:
    """A ``linear(cat)`` site as the decision sees it (sizes on their hints)."""

    rows: int
    widths: tuple[int, ...]
    n: int
    dtype: torch.dtype
    device: torch.device
    produced: tuple[bool, ...]  # made by an op that stock fuses into the cat
    # how each producer loads through an index: None, "rows" or "other"
    gathers: tuple[str | None, ...] = ()
    max_autotune: bool = False
    # stock's K and weight stride aligned, as pad_mm counts it (cuBLAS's fast path)
    gemm_aligned: bool = True
    prologue_fusion: bool = True  # config.prologue_fusion
    static_shape: bool = True

    @property
    def k(self) -> int:
        return sum(self.widths)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def folded(self) -> tuple[bool, ...]:
        """Per piece, whether the template computes it in its loads (through
        ``load_input``): a produced piece, a gather only of rows into one
        column tile.  Empty where it computes none."""
        gathers = self.gathers or (None,) * len(self.produced)
        one_tile = self.n <= GATHER_MAX_N and not self.max_autotune
        folded = tuple(
            p and (g is None or (g == "rows" and one_tile))
            for p, g in zip(self.produced, gathers)
        )
        fuses = self.prologue_fusion and has_template(self.device, self.dtype)
        return folded if fuses and any(folded) else ()

    @property
    def one_loop(self) -> bool:
        """Whether the template takes its one-loop layout here."""
        return not self.folded and any(
            one_loop_tiles(self.widths, block_k) for block_k in ONE_LOOP_BLOCK_KS
        )

    def saved_bytes(self) -> float:
        """A write and a read of each piece read in place or in the loads."""
        folded = self.folded or (False,) * len(self.widths)
        saved = sum(
            w for w, p, f in zip(self.widths, self.produced, folded) if f or not p
        )
        return 2.0 * self.rows * saved * self.itemsize

    def speedup_bound(self, ridge: float) -> float:
        flops, nbytes = gemm_flops_bytes(self.rows, self.k, self.n, self.itemsize)
        gemm = max(flops / ridge, nbytes)
        return (gemm + self.saved_bytes()) / gemm

    def compute_bound(self, ridge: float) -> bool:
        return compute_bound(self.rows, self.k, self.n, self.itemsize, ridge)

    def latency_bound(self, multiprocessors: int | None) -> bool:
        """Whether the one loop over 64-wide K tiles reads every piece and the
        output tiles fill at most ``LATENCY_BOUND_MAX_WAVES`` waves (static
        sizes only: a hint bounds no rows)."""
        one_loop = self.one_loop and one_loop_tiles(self.widths, ONE_LOOP_BLOCK_KS[0])
        if not (multiprocessors and one_loop and self.static_shape):
            return False
        tiles = -(-self.rows // WAVE_TILE) * -(-self.n // WAVE_TILE)
        return tiles <= LATENCY_BOUND_MAX_WAVES * multiprocessors


@dataclasses.dataclass(frozen=True)
class Decision:
    """A site's form (None: stock), why, its ``cat_linear_<counter>``, and
    the pieces computed in the loads."""

    form: str | None
    reason: str
    counter: str | None = None
    prologues: tuple[bool, ...] = ()


def decide(site: CatLinearSite) -> Decision:
    """The policy for one GEMM, from the site alone and the device's figures."""
    if site.device.type != "cuda":
        # the C++ backend writes pieces into the cat, and one GEMM on it wins
        return Decision(None, f"no in-place GEMM on {site.device.type}", "device")
    if torch.version.hip is not None:
        return Decision(None, "the in-place template is not measured on ROCm", "device")
    if not has_template(site.device, site.dtype):
        return Decision(None, f"no in-place template for {site.dtype}", "no_template")
    ridge = ridge_point(site.device, site.dtype)
    if ridge is None:
        return Decision(None, f"no roofline figures for {site.dtype}", "no_figures")
    bound, compute_bound = site.speedup_bound(ridge), site.compute_bound(ridge)
    best = f"best case {bound:.2f}x"
    # cuBLAS's unaligned kernels take several times its aligned ones when
    # compute-bound; the template (a weight copied to aligned rows) much less
    if bound < MARGIN and (site.gemm_aligned or not compute_bound):
        return Decision(None, f"{best} is below {MARGIN}x", "screened")
    if compute_bound and site.folded:
        # the per-piece loops trail cuBLAS most here (and max_autotune times
        # them without the producers): read the pieces from their own buffers
        return decide(dataclasses.replace(site, prologue_fusion=False))
    if site.max_autotune:
        return Decision("mm", "max_autotune benchmarks it", "autotune", site.folded)
    # what is declined below only max_autotune's timing can settle
    if compute_bound and site.latency_bound(multiprocessors(site.device)):
        return Decision("mm", f"{best}, compute-bound over few waves", "roofline")
    if compute_bound:
        if not site.one_loop:
            return Decision(None, f"{best}: a K tail before the last piece", "k_tail")
        if not site.gemm_aligned:
            return Decision("mm", f"{best}, unaligned for stock's GEMM", "roofline")
        if bound < COMPUTE_BOUND_MIN_BOUND or site.k < COMPUTE_BOUND_MIN_K:
            reason = f"{best} at K {site.k}, compute-bound"
            return Decision(None, reason, "compute_bound")
    elif not site.one_loop and bound < LOOPS_MIN_BOUND:
        return Decision(None, f"{best} in the per-piece loops", "below_bound")
    return Decision("mm", best, "roofline", site.folded)
