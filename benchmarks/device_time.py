"""GPU device time of a step, for the paired benchmarks.

``kernel_time_us(fn)`` runs ``fn`` back to back under the profiler and returns
the summed duration of every kernel, memset and memcpy it put on the GPU, per
call.  Host overhead (Python, dispatch, launch latency, gaps between kernels)
is not in it, so identical code gives the same figure however busy the host
is; ``host_time_us`` is the host-inclusive time of the same loop, as a second
column.

Why not Inductor's ``do_bench_using_profiling``: it drops every event whose name
contains ``fill_`` (its own L2-flush kernel), and a backward step launches
fills of its own (zeroed gradients), so it would under-count them; it also
flushes L2 between calls, which a training loop does not.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.autograd import DeviceType


def kernel_time_us(fn: Callable[[], Any], *, calls: int = 20, warmup: int = 3) -> float:
    """Mean GPU busy time per call of ``fn`` (µs): the kernel, memset and memcpy
    durations the profiler records, summed, over ``calls`` back-to-back calls."""
    return sum(kernel_breakdown_us(fn, calls=calls, warmup=warmup).values())


def kernel_breakdown_us(
    fn: Callable[[], Any], *, calls: int = 20, warmup: int = 3
) -> dict[str, float]:
    """``kernel_time_us`` per kernel name: mean GPU time per call of each kernel,
    memset and memcpy (µs), to say which kernel two timings of a step differ in."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    per: dict[str, float] = {}
    for e in prof.events():
        if e.device_type == DeviceType.CUDA:
            t = e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
            per[e.name] = per.get(e.name, 0.0) + t / calls
    return dict(sorted(per.items(), key=lambda kv: -kv[1]))


def host_time_us(fn: Callable[[], Any], *, calls: int = 50, warmup: int = 3) -> float:
    """Wall-clock time per call of ``fn`` (µs), synchronized at both ends of the
    loop: what a caller waits for, host overhead included."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def spread(values: list[float]) -> float:
    """(max - min) / median: how far repetitions of one measurement wander."""
    med = statistics.median(values)
    return (max(values) - min(values)) / med if med else float("nan")


def interleaved_us(
    steps: dict[str, Callable[[], Any]],
    reps: int,
    time_us: Callable[[Callable[[], Any]], float] = kernel_time_us,
) -> tuple[dict[str, float], dict[str, float]]:
    """``reps`` rounds, each timing every step once in turn (so that drift hits
    every variant alike): per step the median (µs) and the ``spread``."""
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(reps):
        for name, step in steps.items():
            times[name].append(time_us(step))
    return (
        {k: statistics.median(v) for k, v in times.items()},
        {k: spread(v) for k, v in times.items()},
    )
