"""
Roofline screen in front of ``cat_linear_fused``'s compile-time benchmark.

Every per-piece form computes the same GEMM as stock; all it can save is the
cat: one write and one read of the ``M x K`` activation.  So however good a
form is, the step cannot get faster than

    (cat + GEMMs) / GEMMs

with the GEMMs at their roofline time (the larger of FLOPs at the tensor-core
peak and bytes at DRAM bandwidth) and the cat at DRAM bandwidth.  Forward only
there is one GEMM; forward+backward three (the input and weight gradients).
Where that best case is below ``config.cat_linear_fused_bench_margin``, the site
is declined without benchmarking: the large GEMMs, where the cat is a few
percent of the step.  Both limits come from Inductor's device table
(``get_device_tflops``, ``get_gpu_dram_gbps``); an overstated peak only makes
the screen let more sites through to the benchmark, never decline one the
benchmark would take.  Measured on an H100: benchmarks/README.md,
"cat_linear_fused".
"""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass

import torch


log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeviceLimits:
    tflops: float  # dense tensor-core (or SIMD) peak for the dtype
    dram_gbps: float


@functools.cache
def _cuda_limits(name: str, dtype: torch.dtype) -> DeviceLimits | None:
    from torch._inductor.utils import get_device_tflops, get_gpu_dram_gbps

    try:
        limits = DeviceLimits(float(get_device_tflops(dtype)), float(get_gpu_dram_gbps()))
    except Exception:
        log.debug("no roofline limits for %s %s", name, dtype, exc_info=True)
        return None
    if not (limits.tflops > 0 and limits.dram_gbps > 0):
        return None
    return limits


def device_limits(device: torch.device, dtype: torch.dtype) -> DeviceLimits | None:
    """The device's peak and bandwidth, or None where Inductor has no figures
    (then nothing is screened)."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    with torch.cuda.device(device):
        return _cuda_limits(torch.cuda.get_device_name(device), dtype)


@dataclass(frozen=True)
class SiteShape:
    """A ``linear(cat)`` site as the roofline sees it."""

    m: int  # rows (all leading dims)
    k: int  # summed piece widths
    n: int  # output features
    itemsize: int
    backward: bool

    def gemm_us(self, limits: DeviceLimits) -> float:
        flops = 2.0 * self.m * self.n * self.k
        nbytes = (self.m * self.k + self.n * self.k + self.m * self.n) * self.itemsize
        return max(flops / (limits.tflops * 1e6), nbytes / (limits.dram_gbps * 1e3))

    def cat_us(self, limits: DeviceLimits) -> float:
        return 2.0 * self.m * self.k * self.itemsize / (limits.dram_gbps * 1e3)

    def speedup_bound(self, limits: DeviceLimits) -> float:
        """Best case of any per-piece form: the step without the cat's traffic."""
        gemms = self.gemm_us(limits) * (3 if self.backward else 1)
        return (gemms + self.cat_us(limits)) / gemms


def site_shape(
    part_shapes: list[tuple[int, ...]], n: int, dtype: torch.dtype, backward: bool
) -> SiteShape:
    lead = part_shapes[0][:-1]
    return SiteShape(
        m=math.prod(lead),
        k=sum(s[-1] for s in part_shapes),
        n=n,
        itemsize=torch.empty((), dtype=dtype).element_size(),
        backward=backward,
    )
