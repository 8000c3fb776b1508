"""
Whether ``linear(cat(parts, -1), W, b)`` is worth computing without the cat.

Every form computes the same GEMM as stock; all it can save is the cat: one
write and one read of the ``M x K`` activation, for the pieces whose trip
through the cat buffer is not free: stock writes a pointwise (or gather)
producer's output straight into the buffer, so such a piece saves only where
the template computes it in its loads (a prologue).  So at best the step gets ``(gemm + cat) / gemm``
faster, with both at their roofline cost.  Only the device's ridge point (the
FLOPs it sustains per byte of DRAM traffic) enters that ratio, and it comes
from device properties torch already knows; nothing is timed at compile time.
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

# A form must be at least this much faster than stock on the roofline: below
# it, kernel efficiency decides, which the roofline cannot see.
MARGIN = 1.1
# Best case from which the per-piece loops layout (pieces not of whole K
# tiles, or prologues) is taken at a memory-bound site without a benchmark:
# at 2 pipeline stages its kernel trailed cuBLAS on a ready input by up to
# this much.
LOOPS_MIN_BOUND = 1.3
# At a compute-bound GEMM the template's one loop trails cuBLAS least where
# the K loop is long, more where it is short (its pipeline fill and
# epilogue are amortized over fewer tiles): such a site is taken only from
# this best case and this K, unless stock's GEMM is off its aligned paths.
COMPUTE_BOUND_MIN_BOUND = 1.25
COMPUTE_BOUND_MIN_K = 1024
# Pieces the in-place forms take; more never pay.
MAX_PARTS = 4
# The K tiles of the template's one-loop layout, in the order the default
# mode tries them: where every piece but the last is whole tiles of one of
# them, the pieces are read tile by tile from one pipelined loop.
ONE_LOOP_BLOCK_KS = (64, 32)


def whole_tiles(widths: Sequence[Any], block_k: int) -> bool:
    """Whether every piece is whole K tiles of ``block_k`` (static widths:
    ints, or sympy integers at lowering)."""
    return all(
        isinstance(w, (int, sympy.Integer)) and int(w) % block_k == 0 for w in widths
    )


def one_loop_tiles(widths: Sequence[Any], block_k: int) -> bool:
    """Whether the template's one K loop reads these pieces at ``block_k``:
    every K tile lies in one piece where every piece but the last is whole
    tiles; the last one's tail is the masked end of K, as in mm's template."""
    return whole_tiles(widths[:-1], block_k)


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
    # Per part: written by a pointwise or gather op that stock fuses into
    # the cat.
    produced: tuple[bool, ...]
    max_autotune: bool = False
    # Whether stock's GEMM reads rows that start aligned (the cat's of K
    # elements, the weight's of its leading stride, as pad_mm counts
    # alignment); else cuBLAS takes its unaligned kernels.
    gemm_aligned: bool = True
    # Whether Inductor fuses prologues into templates (config.prologue_fusion).
    prologue_fusion: bool = True

    @property
    def k(self) -> int:
        return sum(self.widths)

    @property
    def prologues(self) -> bool:
        """Whether the template computes the produced pieces in its loads: its
        per-piece loops read every piece through ``load_input``, where the
        scheduler fuses the producer in (``kernel/cat_linear.py``).  The
        ``"view"`` form's GEMMs read every piece from memory."""
        return (
            self.prologue_fusion
            and any(self.produced)
            and has_template(self.device, self.dtype)
        )

    @property
    def folded(self) -> tuple[bool, ...]:
        """Per piece, whether the template computes it in its loads."""
        return self.produced if self.prologues else ()

    @property
    def one_loop(self) -> bool:
        """Whether the template reads the pieces in its one-loop layout (no
        prologues, and every piece but the last whole K tiles); else in
        per-piece loops, each with a masked tail."""
        return not self.prologues and any(
            one_loop_tiles(self.widths, block_k) for block_k in ONE_LOOP_BLOCK_KS
        )

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
        """The cat traffic a form saves: a write and a read of each piece read
        in place or computed in the template's loads.  A produced piece that
        the template reads from a buffer of its own saves nothing: stock
        writes it straight into the cat."""
        saved = sum(
            w for w, p in zip(self.widths, self.produced) if self.prologues or not p
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
    """The form a site takes (None: stock), why, the counter it bumps, and
    per piece whether the template computes it in its loads (empty: none)."""

    form: str | None
    reason: str
    counter: str | None = None
    prologues: tuple[bool, ...] = ()


def decide(site: CatLinearSite) -> Decision:
    """Per-site policy for one GEMM of a forward or backward graph: the site
    alone decides (its shapes, dtype and producers, and the device's
    figures).  ``Decision.counter`` names the reason
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
        return Decision(
            "mm", "max_autotune benchmarks it", "autotune", prologues=site.folded
        )
    if site.compute_bound(ridge):
        if site.prologues:
            # the per-piece loops trail cuBLAS most where compute-bound: the
            # produced pieces are read from their own buffers instead
            return decide(dataclasses.replace(site, prologue_fusion=False))
        if not site.one_loop:
            return Decision(
                None,
                "a piece before the last is not whole K tiles at a "
                "compute-bound GEMM: only max_autotune can tell",
                "k_tail",
            )
        if not site.gemm_aligned:
            return Decision(
                "mm", f"best case {bound:.2f}x, unaligned for stock's GEMM", "roofline"
            )
        if bound < COMPUTE_BOUND_MIN_BOUND or site.k < COMPUTE_BOUND_MIN_K:
            return Decision(
                None,
                f"best case {bound:.2f}x at K {site.k} of a compute-bound GEMM: "
                "only max_autotune can tell",
                "compute_bound",
            )
    elif not site.one_loop and bound < LOOPS_MIN_BOUND:
        return Decision(
            None,
            f"best case {bound:.2f}x in the per-piece loops: "
            "only max_autotune can tell",
            "below_bound",
        )
    return Decision("mm", f"best case {bound:.2f}x", "roofline", prologues=site.folded)
