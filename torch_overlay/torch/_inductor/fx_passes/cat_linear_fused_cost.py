"""
Whether ``linear(cat(parts, -1), W, b)`` is worth computing without the cat.

Every form computes the same GEMM as stock; all it can save is the cat: one
write and one read of the ``M x K`` activation, for the pieces whose trip
through the cat buffer is not free (stock writes a pointwise producer's output
straight into the buffer).  So at best the step gets ``(gemm + cat) / gemm``
faster, with both at their roofline cost.  Only the device's ridge point (the
FLOPs it sustains per byte of DRAM traffic) enters that ratio, and it comes
from device properties torch already knows; nothing is timed at compile time.
"""

from __future__ import annotations

import dataclasses
import functools
import logging

import torch


log = logging.getLogger(__name__)


# Sustained fractions of the peak GEMM rate and of the peak DRAM bandwidth.
GEMM_EFFICIENCY = 0.65
COPY_EFFICIENCY = 0.87

# A form must be at least this much faster than stock on the roofline: below
# it, kernel efficiency decides, which the roofline cannot see.
MARGIN = 1.1
# Best case from which the in-place GEMM is taken without a benchmark: its
# Triton kernel trails cuBLAS on a ready input by up to this much at whole-K
# -tile sites.
MM_MIN_BOUND_WITHOUT_BENCHMARK = 1.3
# Least share of its graph's step a site must save to be worth a kernel
# compile of its own.
MIN_STEP_SHARE = 0.05
# Pieces the in-place forms take; more never pay.
MAX_PARTS = 4
# The in-place GEMM's K tile: pieces of whole tiles run unmasked.
BLOCK_K = 64
# Widest piece counted as narrow: at a compute-bound GEMM, narrow pieces keep
# the template too far behind cuBLAS to be taken without a benchmark.
NARROW_PIECE_WIDTH = 256


def has_template(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether the in-place template computes this site (16-bit inputs with
    fp32 accumulation, on a GPU); elsewhere the ``"mm"`` form is stock."""
    return device.type == "cuda" and dtype in (torch.float16, torch.bfloat16)


@functools.cache
def ridge_point(device: torch.device, dtype: torch.dtype) -> float | None:
    """Sustained GEMM FLOPs per byte of DRAM traffic on a CUDA device, from
    Inductor's device figures (``get_device_tflops``, ``get_gpu_dram_gbps``,
    as ``pad_mm`` uses them); None where they are unknown."""
    from ..utils import get_device_tflops, get_gpu_dram_gbps

    if device.type != "cuda" or dtype not in (torch.float16, torch.bfloat16):
        return None
    if not torch.cuda.is_available() or torch.version.hip is not None:
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
        # a figure off by orders of magnitude (e.g. a clock rate read in the
        # wrong unit) would screen out every site
        return None
    return flops * GEMM_EFFICIENCY / (dram * COPY_EFFICIENCY)


def roofline(flops: float, nbytes: float, ridge: float) -> float:
    """A kernel's roofline cost, in bytes moved at the sustained bandwidth."""
    return max(flops / ridge, nbytes)


@dataclasses.dataclass(frozen=True)
class CatLinearSite:
    """A ``linear(cat)`` site as the decision sees it (sizes on their hints)."""

    rows: int
    widths: tuple[int, ...]
    n: int
    dtype: torch.dtype
    device: torch.device
    # Per part: written by a pointwise op that stock fuses into the cat.
    produced: tuple[bool, ...]
    max_autotune: bool = False
    # Inductor may fuse a piece's pointwise producer into the template's loads
    prologue_fusion: bool = False

    @property
    def k(self) -> int:
        return sum(self.widths)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    def _gemm_flops_bytes(self) -> tuple[float, float]:
        flops = 2.0 * self.rows * self.n * self.k
        nbytes = ((self.rows + self.n) * self.k + self.rows * self.n) * self.itemsize
        return flops, nbytes

    def gemm_cost(self, ridge: float) -> float:
        return roofline(*self._gemm_flops_bytes(), ridge)

    def saved_bytes(self) -> float:
        """The cat traffic a form saves: a write and a read of each piece.
        Stock writes a pointwise producer's output straight into the cat, so
        such a piece saves as much only where the template reads it from
        the producer's sources (a prologue fusion, ``prologue_fusion``); else
        the producer writes a buffer of its own and the piece saves
        nothing."""
        saved = sum(
            w
            for w, p in zip(self.widths, self.produced)
            if not p or self.prologue_fusion
        )
        return 2.0 * self.rows * saved * self.itemsize

    def speedup_bound(self, ridge: float) -> float:
        gemms = self.gemm_cost(ridge)
        return (gemms + self.saved_bytes()) / gemms

    def compute_bound(self, ridge: float) -> bool:
        flops, nbytes = self._gemm_flops_bytes()
        return flops / ridge >= nbytes


@dataclasses.dataclass(frozen=True)
class Decision:
    """The form a site takes (None: stock), why, and the counter it bumps."""

    form: str | None
    reason: str
    counter: str | None = None


def decide(site: CatLinearSite, step_cost: float | None = None) -> Decision:
    """Per-site policy for one GEMM of a forward or backward graph.
    ``step_cost``: the graph's roofline cost in the units of ``roofline``, for
    the share gate (None: not applied).  ``Decision.counter`` names the reason
    (``counters["inductor"]["cat_linear_<counter>"]``)."""
    if site.device.type != "cuda":
        # The C++ backend writes pointwise pieces straight into the cat
        # buffer and one GEMM on it wins.
        return Decision(None, f"no in-place GEMM on {site.device.type}", "device")
    ridge = ridge_point(site.device, site.dtype)
    if ridge is None:
        return Decision(
            None, f"no roofline figures for {site.dtype} on this device", "no_figures"
        )
    bound = site.speedup_bound(ridge)
    if bound < MARGIN:
        return Decision(None, f"best case {bound:.2f}x is below {MARGIN}x", "screened")
    if site.max_autotune:
        return Decision("mm", "max_autotune benchmarks it", "autotune")
    if bound < MM_MIN_BOUND_WITHOUT_BENCHMARK:
        return Decision(
            None, f"best case {bound:.2f}x: only max_autotune can tell", "below_bound"
        )
    if any(w % BLOCK_K for w in site.widths):
        return Decision(
            None, "a piece is not whole K tiles: only max_autotune can tell", "k_tail"
        )
    narrow = max(site.widths) <= NARROW_PIECE_WIDTH
    if narrow and site.compute_bound(ridge):
        return Decision(None, "narrow pieces at a compute-bound GEMM", "compute_bound")
    if step_cost is not None:
        share = site.saved_bytes() / step_cost if step_cost > 0 else 1.0
        if share < MIN_STEP_SHARE:
            return Decision(
                None,
                f"saves {share:.1%} of its graph's step, less than {MIN_STEP_SHARE:.0%}",
                "small_share",
            )
    return Decision("mm", f"best case {bound:.2f}x", "roofline")


def gemm_step_cost(rows: int, k: int, n: int, itemsize: int, ridge: float) -> float:
    """One GEMM of a graph's step, for the share gate."""
    flops = 2.0 * rows * n * k
    nbytes = ((rows + n) * k + rows * n) * itemsize
    return roofline(flops, nbytes, ridge)


def cat_step_cost(numel: int, itemsize: int) -> float:
    """One cat of a graph's step (a write and a read), for the share gate."""
    return 2.0 * numel * itemsize
