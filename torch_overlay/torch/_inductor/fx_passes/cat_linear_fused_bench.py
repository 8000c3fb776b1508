"""
Compile-time benchmark behind ``cat_linear_fused``'s profitability check.

Times stock ``linear(cat(...))`` against each per-piece form on real random
tensors with the site's shapes, strides, dtype and ``requires_grad`` flags, in
the mode the site runs in: forward only, or forward plus backward.  Results are
cached in Inductor's ``LocalCache`` keyed by ``BenchSpec.key()``, so each distinct
site is measured once per machine.

What each side costs is modelled on what Inductor generates.  Forward only: a
part produced by a pointwise op is written straight into the cat buffer by one
kernel, so stock is timed as cat + GEMM, and a form, whose pieces must then be
written by one producer kernel each, is charged one copy per such piece.  On
CUDA forward sites are timed by the kernels' device time
(``do_bench_using_profiling``): compiled code launches them back to back, and
the host cost of calling the forms eagerly (the Triton launcher above all)
would otherwise decide small sites.  Forward+backward: a pointwise producer's
output is the cat buffer, so stock is timed as the GEMM on a ready buffer, and
with wall-clock events, since such steps are bounded by host work as much as by
the GPU.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._inductor.codecache import LocalCache
from torch.utils._mode_utils import no_dispatch


log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BenchSpec:
    parts: tuple[tuple[tuple[int, ...], tuple[int, ...], bool], ...]
    weight: tuple[tuple[int, ...], tuple[int, ...], bool]
    bias: tuple[int, bool] | None
    fused_producers: tuple[bool, ...]
    # Per part, the prologue code the "gemm" form would fold (0: none).
    prologues: tuple[int, ...]
    dtype: torch.dtype
    device: str
    backward: bool
    # The forms to time besides stock, in order (cat_linear_fused.FORMS or a subset).
    forms: tuple[str, ...]
    # The "gemm" kernel config the site is pinned to (-1: autotune).
    gemm_config: int = -1

    def key(self) -> str:
        dev = torch.device(self.device)
        name = (
            torch.cuda.get_device_name(dev)
            if dev.type == "cuda" and torch.cuda.is_available()
            else dev.type
        )
        tf32 = torch.backends.cuda.matmul.allow_tf32
        return f"cat_linear_fused|v6|{name}|tf32={tf32}|{self!r}"


@functools.cache
def get_cat_linear_cache() -> LocalCache:
    return LocalCache()


def get_cached_form(spec: BenchSpec) -> str | None:
    # One flat key: LocalCache.lookup only walks nested keys correctly at depth 1.
    return get_cat_linear_cache().lookup(spec.key())  # type: ignore[return-value]


def set_cached_form(spec: BenchSpec, form: str) -> None:
    get_cat_linear_cache().set_value(spec.key(), value=form)


# Timing budgets (ms of GPU time per form and round) are small on purpose: the
# decision is paid on every cold compile, and the margin absorbs the noise.
def get_do_bench(device: str, backward: bool) -> Callable[[Callable[[], Any]], float]:
    from torch._inductor.runtime.benchmarking import benchmarker

    if torch.device(device).type == "cpu":
        return functools.partial(benchmarker.benchmark_cpu, warmup=3, rep=10)
    if not backward and torch.device(device).type == "cuda":
        from torch._inductor.utils import do_bench_using_profiling

        return functools.partial(do_bench_using_profiling, warmup=2, rep=10)
    return functools.partial(benchmarker.benchmark_gpu, warmup=2, rep=20)


def _rand(shape: tuple[int, ...], stride: tuple[int, ...], spec: BenchSpec, rg: bool):
    t = torch.empty_strided(shape, stride, dtype=spec.dtype, device=spec.device)
    t.uniform_(-1, 1)
    return t.requires_grad_(rg and spec.backward)


def make_form_fns(spec: BenchSpec) -> dict[str, Callable[[], Any]]:
    """One zero-arg callable per form: ``"stock"`` plus ``spec.forms``."""
    forms = spec.forms
    parts = [_rand(s, st, spec, rg) for s, st, rg in spec.parts]
    w = _rand(*spec.weight[:2], spec, spec.weight[2])
    b = None
    if spec.bias is not None:
        b = _rand((spec.bias[0],), (1,), spec, spec.bias[1])
    widths = [s[-1] for s, _, _ in spec.parts]
    lead = spec.parts[0][0][:-1]
    x_ready = _rand((*lead, sum(widths)), _contiguous_stride((*lead, sum(widths))), spec,
                    any(p.requires_grad for p in parts))  # fmt: skip

    def stock():
        if spec.backward and all(spec.fused_producers):
            # The producers' output is the cat buffer, saved for backward.
            return F.linear(x_ready, w, b)
        # Forward: one kernel writes the cat (producers fused in), then the GEMM.
        return F.linear(torch.cat(parts, -1), w, b)

    def pieces(folded: tuple[int, ...] = (0,) * len(parts)):
        if spec.backward:
            return parts
        # Without a cat to fuse into, each pointwise producer is its own kernel,
        # unless the form applies it while loading (``folded``).
        return [
            p.clone() if fused and not fold else p
            for p, fused, fold in zip(parts, spec.fused_producers, folded)
        ]

    def w_slices():
        out, start = [], 0
        for k in widths:
            out.append(w.narrow(1, start, k))
            start += k
        return out

    def view():
        out = None
        for i, (p, wi) in enumerate(zip(pieces(), w_slices())):
            y = F.linear(p, wi, b if i == 0 else None)
            out = y if out is None else out + y
        return out

    def addmm():
        acc = None
        for i, (p, wi) in enumerate(zip(pieces(), w_slices())):
            x = p.flatten(0, -2)
            if acc is not None:
                acc = torch.addmm(acc, x, wi.t())
            else:
                acc = torch.addmm(b, x, wi.t()) if b is not None else x @ wi.t()
        return acc.unflatten(0, lead)

    def gemm():
        from .cat_linear_fused_gemm import get_op

        # A folded producer runs inside the kernel: its piece is the producer's
        # input, read as is; other pointwise producers still need their kernel.
        return get_op()(pieces(spec.prologues), w, b, list(spec.prologues), spec.gemm_config)

    fns = {"stock": stock, "view": view, "addmm": addmm, "gemm": gemm}
    unknown = set(forms) - set(fns)
    if unknown:
        raise ValueError(f"cat_linear_fused: no benchmark for forms {sorted(unknown)}")
    if not spec.backward:
        return {name: fns[name] for name in ("stock", *forms)}

    grad_out = torch.randn((*lead, spec.weight[0][0]), dtype=spec.dtype, device=spec.device)

    def with_backward(fn: Callable[[], torch.Tensor], ready: bool) -> Callable[[], Any]:
        leaves = [t for t in ([x_ready] if ready else parts) + [w, b] if t is not None and t.requires_grad]  # fmt: skip

        def run():
            out = fn()
            return torch.autograd.grad(out, leaves, grad_out)

        return run

    return {
        name: with_backward(fns[name], name == "stock" and all(spec.fused_producers))
        for name in ("stock", *forms)
    }


def _contiguous_stride(shape: tuple[int, ...]) -> tuple[int, ...]:
    stride, acc = [], 1
    for s in reversed(shape):
        stride.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(stride))


def benchmark_forms(spec: BenchSpec, rounds: int = 2) -> dict[str, float]:
    """Time stock and ``spec.forms`` (ms); best of ``rounds`` interleaved rounds.

    Every form runs once before any timing: the first GEMM of a process pays
    for library initialization, and timing it cold once made a losing form look
    3x faster than stock.
    """
    do_bench = get_do_bench(spec.device, spec.backward)
    with no_dispatch(), torch.enable_grad() if spec.backward else torch.no_grad():
        fns = make_form_fns(spec)
        counters["inductor"]["cat_linear_fused_bench"] += 1
        for name, fn in list(fns.items()):
            if name == "stock":
                fn()
                continue
            try:
                fn()
            except Exception:
                # A form that cannot run here (e.g. its kernel fails to compile)
                # is simply not a candidate, as in Inductor's autotuning.
                log.warning("cat_linear_fused: form %s failed to run", name, exc_info=True)
                del fns[name]
        times: dict[str, float] = {}
        for _ in range(rounds):
            for name, fn in fns.items():
                t = do_bench(fn)
                times[name] = min(t, times.get(name, t))
        return times
