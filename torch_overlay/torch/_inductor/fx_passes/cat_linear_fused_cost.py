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

import torch


# Sustained fractions of the peak GEMM rate and of the peak DRAM bandwidth.
GEMM_EFFICIENCY = 0.65
COPY_EFFICIENCY = 0.87

# Dense fp16/bf16 tensor-core FLOPs per SM per clock, by compute capability.
_FLOPS_PER_SM_CLOCK = {(8, 0): 2048, (9, 0): 4096, (10, 0): 8192}

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
# Widest piece for which the one-loop kernel runs; at a compute-bound GEMM it
# trails cuBLAS too far to be taken without a benchmark.
ONE_LOOP_MAX_WIDTH = 256
# The CPU rule: the "view" form pays forward+backward from this many rows,
# pieces this wide, and this share of K written by in-graph pointwise
# producers.
CPU_MIN_ROWS = 256
CPU_MIN_PIECE_WIDTH = 64
CPU_MIN_PRODUCED_SHARE = 1 / 3


@functools.cache
def ridge_point(device: torch.device, dtype: torch.dtype) -> float | None:
    """Sustained GEMM FLOPs per byte of DRAM traffic on a CUDA device, from
    its properties; None where they are unknown."""
    if device.type != "cuda" or dtype not in (torch.float16, torch.bfloat16):
        return None
    if not torch.cuda.is_available() or torch.version.hip is not None:
        return None
    props = torch.cuda.get_device_properties(device)
    per_clock = _FLOPS_PER_SM_CLOCK.get((props.major, props.minor))
    sm_khz = getattr(props, "clock_rate", 0)
    mem_khz = getattr(props, "memory_clock_rate", 0)
    bus_bits = getattr(props, "memory_bus_width", 0)
    if not (per_clock and sm_khz and mem_khz and bus_bits):
        return None
    flops = props.multi_processor_count * sm_khz * 1e3 * per_clock
    dram = mem_khz * 1e3 * 2 * bus_bits / 8  # double data rate
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
    needs_grad: bool
    # Per part: written by a pointwise op that stock fuses into the cat.
    produced: tuple[bool, ...]
    max_autotune: bool = False

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
        """The cat traffic a form saves: every piece forward+backward (the
        saved cat and its gradient go away), else the pieces without a fused
        producer."""
        saved = sum(
            w for w, p in zip(self.widths, self.produced) if self.needs_grad or not p
        )
        return 2.0 * self.rows * saved * self.itemsize

    def speedup_bound(self, ridge: float) -> float:
        gemms = self.gemm_cost(ridge) * (3 if self.needs_grad else 1)
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
    """Per-site policy.  ``step_cost``: the graph's roofline cost in the
    units of ``roofline``, for the share gate (None: not applied)."""
    if site.device.type == "cpu":
        return _decide_cpu(site)
    if site.device.type == "cuda":
        return _decide_cuda(site, step_cost)
    return Decision(None, f"no rule for device {site.device}")


def _decide_cpu(site: CatLinearSite) -> Decision:
    """The "view" form, only where it removes the saved cat and its gradient
    and the pieces are wide enough for separate GEMMs; forward only, the C++
    backend writes the pieces into the cat buffer and one GEMM wins.  fp32
    only: in a 16-bit dtype each piece's product would be rounded before the
    sum, where stock rounds once."""
    if site.dtype != torch.float32:
        return Decision(None, f"the CPU rule is for float32, not {site.dtype}")
    if not site.needs_grad:
        return Decision(None, "forward only on CPU: stock's single GEMM wins")
    produced = sum(w for w, p in zip(site.widths, site.produced) if p)
    if produced < CPU_MIN_PRODUCED_SHARE * site.k:
        return Decision(None, f"producers write {produced} of {site.k} columns")
    if min(site.widths) < CPU_MIN_PIECE_WIDTH:
        return Decision(None, f"a piece is narrower than {CPU_MIN_PIECE_WIDTH}")
    if site.rows < CPU_MIN_ROWS:
        return Decision(None, f"{site.rows} rows, fewer than {CPU_MIN_ROWS}")
    return Decision("view", "CPU rule", "cat_linear_cpu_rule")


def _decide_cuda(site: CatLinearSite, step_cost: float | None) -> Decision:
    """The in-place GEMM, forward only: forward+backward its per-piece
    gradients cost what the cat saved."""
    if site.needs_grad:
        return Decision(None, "forward+backward on CUDA: stock")
    ridge = ridge_point(site.device, site.dtype)
    if ridge is None:
        return Decision(None, f"no roofline figures for {site.dtype} on this device")
    bound = site.speedup_bound(ridge)
    if bound < MARGIN:
        return Decision(
            None, f"best case {bound:.2f}x is below {MARGIN}x", "cat_linear_screened"
        )
    if site.max_autotune:
        return Decision("mm", "max_autotune benchmarks it", "cat_linear_autotune")
    if bound < MM_MIN_BOUND_WITHOUT_BENCHMARK:
        return Decision(None, f"best case {bound:.2f}x: only max_autotune can tell")
    if any(w % BLOCK_K for w in site.widths):
        return Decision(
            None, "a piece is not whole K tiles: only max_autotune can tell"
        )
    narrow = max(site.widths) <= ONE_LOOP_MAX_WIDTH
    if narrow and site.compute_bound(ridge):
        return Decision(None, "narrow pieces at a compute-bound GEMM")
    if step_cost is not None:
        share = site.saved_bytes() / step_cost if step_cost > 0 else 1.0
        if share < MIN_STEP_SHARE:
            return Decision(
                None,
                f"saves {share:.1%} of its graph's step, less than {MIN_STEP_SHARE:.0%}",
                "cat_linear_small_share",
            )
    return Decision("mm", f"best case {bound:.2f}x", "cat_linear_roofline")


def gemm_step_cost(
    rows: int, k: int, n: int, itemsize: int, needs_grad: bool, ridge: float
) -> float:
    """One GEMM of a graph's step (three forward+backward), for the share gate."""
    flops = 2.0 * rows * n * k
    nbytes = ((rows + n) * k + rows * n) * itemsize
    return roofline(flops, nbytes, ridge) * (3 if needs_grad else 1)


def cat_step_cost(numel: int, itemsize: int, needs_grad: bool) -> float:
    """One cat of a graph's step (and its gradient's split), for the share gate."""
    return 2.0 * numel * itemsize * (2 if needs_grad else 1)
