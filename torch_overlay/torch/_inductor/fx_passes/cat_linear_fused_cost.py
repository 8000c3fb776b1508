"""
Roofline screen in front of ``cat_linear_fused``'s compile-time benchmark.

Every per-piece form computes the same GEMM as stock; all it can save is the
cat: one write and one read of the ``M x K`` activation.  So however good a
form is, the step cannot get faster than

    (cat + GEMMs) / GEMMs

with the GEMMs at their roofline time (the larger of FLOPs at the rate a large
GEMM sustains and bytes at the bandwidth a large copy sustains) and the cat at
that bandwidth.  Forward only
there is one GEMM; forward+backward three (the input and weight gradients).
Where that best case is below ``config.cat_linear_fused_bench_margin``, the site
is declined without benchmarking: the large GEMMs, where the cat is a few
percent of the step.  The two limits are measured on the device once (and
cached), not read from a datasheet table: Inductor's tables and Triton's
clock-based estimate differ from release to release, and on torch 2.11 the
estimate put an H100 at under 1 TFLOPS, which declined every site.  A form's
GEMM runs no faster than the library GEMM the limit was measured with, so the
bound is optimistic for every form.  Measured on an H100: benchmarks/README.md,
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
    tflops: float  # sustained GEMM rate for the dtype
    dram_gbps: float  # sustained copy bandwidth (bytes read + written)

    def flops_us(self, flops: float) -> float:
        return flops / (self.tflops * 1e6)

    def bytes_us(self, nbytes: float) -> float:
        return nbytes / (self.dram_gbps * 1e3)

    def roofline_us(self, flops: float, nbytes: float) -> float:
        """Time of a kernel doing ``flops`` and moving ``nbytes`` at the limits (µs)."""
        return max(self.flops_us(flops), self.bytes_us(nbytes))


# Sizes of the one-off measurement: a GEMM large enough to run at the tensor
# cores' sustained rate and a copy large enough to stream from DRAM.
_PROBE_MNK = 4096
_PROBE_COPY_BYTES = 256 * 2**20


def _cache_key(name: str, dtype: torch.dtype) -> str:
    return f"cat_linear_fused_roofline|v1|{name}|{dtype}"


@functools.cache
def _cuda_limits(device: torch.device, name: str, dtype: torch.dtype) -> DeviceLimits | None:
    from torch._inductor.runtime.benchmarking import benchmarker
    from torch.utils._mode_utils import no_dispatch

    from .cat_linear_fused_bench import get_cat_linear_cache

    key = _cache_key(name, dtype)
    cached = get_cat_linear_cache().lookup(key)
    if cached is not None:
        return DeviceLimits(*cached)  # type: ignore[misc]
    try:
        with no_dispatch(), torch.no_grad():
            n = _PROBE_MNK
            a = torch.randn(n, n, dtype=dtype, device=device)
            b = torch.randn(n, n, dtype=dtype, device=device)
            mm_ms = benchmarker.benchmark_gpu(lambda: a @ b, warmup=5, rep=20)
            src = torch.empty(_PROBE_COPY_BYTES, dtype=torch.uint8, device=device)
            dst = torch.empty_like(src)
            copy_ms = benchmarker.benchmark_gpu(lambda: dst.copy_(src), warmup=5, rep=20)
            del a, b, src, dst
    except Exception:
        log.debug("could not measure roofline limits of %s %s", name, dtype, exc_info=True)
        return None
    limits = DeviceLimits(
        tflops=2.0 * n**3 / (mm_ms * 1e-3) / 1e12,
        dram_gbps=2.0 * _PROBE_COPY_BYTES / (copy_ms * 1e-3) / 1e9,
    )
    log.debug("measured roofline limits of %s %s: %s", name, dtype, limits)
    get_cat_linear_cache().set_value(key, value=[limits.tflops, limits.dram_gbps])
    return limits


def device_limits(device: torch.device, dtype: torch.dtype) -> DeviceLimits | None:
    """The GEMM rate and copy bandwidth the device sustains, measured once per
    device and dtype (a 4096^3 GEMM and a 256 MiB copy, about 0.1 s) and kept
    in Inductor's ``LocalCache``; None off CUDA (nothing is screened there)."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return _cuda_limits(device, torch.cuda.get_device_name(device), dtype)


@dataclass(frozen=True)
class SiteShape:
    """A ``linear(cat)`` site as the roofline sees it."""

    m: int  # rows (all leading dims)
    k: int  # summed piece widths
    n: int  # output features
    itemsize: int
    backward: bool
    # Summed width of the pieces whose trip through a cat buffer a form saves:
    # all of them, less pieces whose pointwise producer would need a kernel of
    # its own without the cat (stock fuses it into the cat's kernel).
    saved_k: int | None = None

    def _gemm_flops_bytes_us(self, limits: DeviceLimits) -> tuple[float, float]:
        """The GEMM's time at the FLOP rate and at the bandwidth (µs)."""
        flops = 2.0 * self.m * self.n * self.k
        nbytes = (self.m * self.k + self.n * self.k + self.m * self.n) * self.itemsize
        return limits.flops_us(flops), limits.bytes_us(nbytes)

    def gemm_us(self, limits: DeviceLimits) -> float:
        return max(self._gemm_flops_bytes_us(limits))

    def compute_bound(self, limits: DeviceLimits) -> bool:
        """Whether the GEMM's roofline time is set by its FLOPs, not its bytes."""
        flops_us, bytes_us = self._gemm_flops_bytes_us(limits)
        return flops_us >= bytes_us

    def cat_us(self, limits: DeviceLimits) -> float:
        k = self.k if self.saved_k is None else self.saved_k
        return limits.bytes_us(2.0 * self.m * k * self.itemsize)

    def speedup_bound(self, limits: DeviceLimits) -> float:
        """Best case of any per-piece form: the step without the cat's traffic."""
        gemms = self.gemm_us(limits) * (3 if self.backward else 1)
        return (gemms + self.cat_us(limits)) / gemms


def site_shape(
    part_shapes: list[tuple[int, ...]],
    n: int,
    dtype: torch.dtype,
    backward: bool,
    saved: list[bool] | None = None,
) -> SiteShape:
    lead = part_shapes[0][:-1]
    widths = [s[-1] for s in part_shapes]
    return SiteShape(
        m=math.prod(lead),
        k=sum(widths),
        n=n,
        itemsize=torch.empty((), dtype=dtype).element_size(),
        backward=backward,
        saved_k=None if saved is None else sum(w for w, keep in zip(widths, saved) if keep),
    )
