"""
Whether ``linear(cat(parts, -1), W, b)`` is worth computing without the cat.

All a form can save over stock's GEMM is a write and a read of each piece
through the cat buffer; for a piece made by a pointwise op or a gather, only
where the template computes it in its loads (stock writes such a producer
straight into the cat).  So the best case is ``(gemm + cat) / gemm``, both at
their roofline cost from the device's figures; nothing is timed.
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
# A form must beat stock's roofline by this much: below it, kernel
# efficiency decides, which the roofline cannot see.
MARGIN = 1.1
# The best case from which a memory-bound site is taken in the per-piece
# loops layout (at 2 stages it trailed cuBLAS on a ready input by this much).
LOOPS_MIN_BOUND = 1.3
# The template's one loop trails cuBLAS at a compute-bound GEMM, most where
# K is short: such a site needs this best case and this K, unless stock's
# GEMM is off its aligned paths.
COMPUTE_BOUND_MIN_BOUND = 1.25
COMPUTE_BOUND_MIN_K = 1024
# ... but a GEMM of at most this many waves of its output tiles (one tile per
# multiprocessor a wave) runs at its tiles' latency, in cuBLAS as in the one
# loop over 64-wide K tiles, which comes close to cuBLAS there: such a site is
# decided as a memory-bound one.  Measured so only in that layout; over 32-wide
# K tiles two such sites lost to stock.
LATENCY_BOUND_MAX_WAVES = 2
# The output tile of the wide one-loop table's first entry.
WAVE_TILE = 128
# Pieces the in-place forms take; more never pay.
MAX_PARTS = 4
# The one-loop layout's K tiles, in the order the default mode tries them.
ONE_LOOP_BLOCK_KS = (64, 32)
# A gather in the template's loads runs once per column tile, and one along K
# reads uncoalesced: only one along rows is, where one tile covers N (as the
# per-piece loops' default configs do), and not under max_autotune.
GATHER_MAX_N = 128


def whole_tiles(widths: Sequence[Any], block_k: int) -> bool:
    """Whether every width is a static multiple of ``block_k``."""
    return all(
        isinstance(w, (int, sympy.Integer)) and int(w) % block_k == 0 for w in widths
    )


def one_loop_tiles(widths: Sequence[Any], block_k: int) -> bool:
    """Whether each of the one K loop's tiles lies in one piece: every piece
    but the last is whole tiles (the last one's tail is masked, as in mm's)."""
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
        # as pad_mm: a failing lookup means no figures, never a failed compile
        log.debug("no device figures for %s on %s", dtype, device, exc_info=True)
        return None
    if not (flops >= 1e12 and dram > 0):
        # a figure off by orders of magnitude would screen out every site
        return None
    return flops * GEMM_EFFICIENCY / (dram * COPY_EFFICIENCY)


def multiprocessors(device: torch.device) -> int | None:
    """The multiprocessors a kernel's programs run on (Inductor's count, less
    any carveout); None where it is unknown."""
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
    # Per part: made by a pointwise or gather op that stock fuses into the cat.
    produced: tuple[bool, ...]
    # Per part: None, or how its producer loads through an index: "rows"
    # (each index picks whole rows) or "other".
    gathers: tuple[str | None, ...] = ()
    max_autotune: bool = False
    # Whether stock's GEMM reads aligned rows (the cat's K, the weight's
    # leading stride, as pad_mm counts alignment); else cuBLAS is slower.
    gemm_aligned: bool = True
    prologue_fusion: bool = True  # config.prologue_fusion
    # Whether the GEMM's rows and N are static (else the decision sees hints).
    static_shape: bool = True

    @property
    def k(self) -> int:
        return sum(self.widths)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def folded(self) -> tuple[bool, ...]:
        """Per piece, whether the template computes it in its loads (its
        per-piece loops read it through ``load_input``): a produced piece whose
        producer is cheap there (a gather only along rows, into one column
        tile).  Empty where it computes none."""
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
        """Whether the template's one loop over 64-wide K tiles reads every
        piece in place and the GEMM's output tiles fill at most
        ``LATENCY_BOUND_MAX_WAVES`` waves of the device's multiprocessors (at
        static sizes only: a bound on the rows a hint cannot give)."""
        one_loop = self.one_loop and one_loop_tiles(self.widths, ONE_LOOP_BLOCK_KS[0])
        if not (multiprocessors and one_loop and self.static_shape):
            return False
        tiles = -(-self.rows // WAVE_TILE) * -(-self.n // WAVE_TILE)
        return tiles <= LATENCY_BOUND_MAX_WAVES * multiprocessors


@dataclasses.dataclass(frozen=True)
class Decision:
    """The form a site takes (None: stock), why, the counter it bumps
    (``cat_linear_<counter>``), and the pieces computed in the loads."""

    form: str | None
    reason: str
    counter: str | None = None
    prologues: tuple[bool, ...] = ()


def decide(site: CatLinearSite) -> Decision:
    """The policy for one GEMM of a forward or backward graph, from the site
    alone (shapes, dtype, producers) and the device's figures."""
    if site.device.type != "cuda":
        # the C++ backend writes pointwise pieces into the cat buffer, and one
        # GEMM on it wins
        return Decision(None, f"no in-place GEMM on {site.device.type}", "device")
    if not has_template(site.device, site.dtype):
        return Decision(None, f"no in-place template for {site.dtype}", "no_template")
    ridge = ridge_point(site.device, site.dtype)
    if ridge is None:
        return Decision(None, f"no roofline figures for {site.dtype}", "no_figures")
    bound = site.speedup_bound(ridge)
    best = f"best case {bound:.2f}x"
    # cuBLAS's kernels for unaligned rows take several times its aligned
    # ones at a compute-bound GEMM; the template trails it much less there,
    # even on pieces at unaligned rows (it copies an input weight to aligned
    # rows)
    if bound < MARGIN and (site.gemm_aligned or not site.compute_bound(ridge)):
        return Decision(None, f"{best} is below {MARGIN}x", "screened")
    compute_bound = site.compute_bound(ridge)
    if compute_bound and site.folded:
        # the per-piece loops trail cuBLAS most here (and max_autotune times
        # them without the producers, which the scheduler fuses in later):
        # read the produced pieces from their own buffers instead
        return decide(dataclasses.replace(site, prologue_fusion=False))
    if site.max_autotune:
        return Decision("mm", "max_autotune benchmarks it", "autotune", site.folded)
    # a site declined below is one that only max_autotune's timing can settle
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
