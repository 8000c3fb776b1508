"""
Paired benchmark: da8w4 concat-linear pass off (stock) vs on, one run, CPU.

Llama-3.1-8B shapes: QKV (K=4096 -> 4096 + 1024 + 1024) and gate/up
(K=4096 -> 14336 x 2), int8 dynamic per-token activation (asymmetric, as
torchao's default), int4 weights with group_size 32, compiled with freezing.
For every M each variant is compiled once; timing rounds are interleaved
(stock, fused, fused+clone, stock, ...) and the median of the per-round means
is reported, with ratio = stock / variant (> 1 is faster).

Variants:
  stock        config.cpp.enable_concat_linear=False (separate calls)
  fused        the pass on (split outputs are views where consumers allow)
  fused+clone  the pass on, every split output cloned contiguous (what
               torchao's pass emits), to measure the cost of those copies

Consumers: the QKV outputs are returned (graph outputs: the pass must give them
a contiguous copy, so this is its worst case), gate/up feed silu(gate) * up
(one pointwise consumer, reads the strided views).

Needs our kernel (``cmake -G Ninja -S . -B build && cmake --build build``, or
``DA8W4_LINEAR_CPU_LIB=<path to libda8w4_linear_cpu.so>``) or torchao with a
CPU kernel; the pure-PyTorch reference would be far too slow.

    python benchmarks/da8w4_concat_linear_cpu.py [--m 1 4 32 128 512] [--rounds 7]
"""

import argparse
import copy
import importlib.util
import os
import platform
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_kernel():
    try:
        if torch._C._dispatch_has_kernel_for_dispatch_key(
            "torchao::da8w4_linear_cpu", "CPU"
        ):
            return "already registered"
    except RuntimeError:
        pass
    spec = importlib.util.spec_from_file_location(
        "da8w4_linear_cpu_loader", os.path.join(REPO, "csrc", "da8w4_linear_cpu.py")
    )
    loader = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loader)
    if not loader.load():
        sys.exit(
            "da8w4 kernel not built: run `cmake -G Ninja -S . -B build && "
            "cmake --build build` or set DA8W4_LINEAR_CPU_LIB"
        )
    isa = getattr(loader, "best_isa", lambda: "?")()
    return f"csrc kernel ({isa})"


def quantize_act(x):
    eps = torch.finfo(torch.float32).eps
    minv = x.amin(-1, keepdim=True).clamp(max=0)
    maxv = x.amax(-1, keepdim=True).clamp(min=0)
    scale = ((maxv - minv) / 255).clamp(min=eps).float()
    zp = (-torch.round(minv / scale)).clamp(0, 255).to(torch.int32)
    q = (torch.round(x / scale) + zp).clamp(0, 255).to(torch.uint8)
    return q.contiguous(), scale.reshape(-1), zp.reshape(-1)


class Da8w4Group(nn.Module):
    def __init__(self, k, out_features, group_size=32, mlp=False):
        super().__init__()
        self.k, self.out_features, self.mlp = k, list(out_features), mlp
        g = torch.Generator().manual_seed(0)
        for i, n in enumerate(self.out_features):
            q = torch.randint(0, 16, (n, k), dtype=torch.uint8, generator=g)
            scales = torch.rand(n, k // group_size, generator=g) * 0.02 + 1e-3
            zeros = torch.randint(0, 16, (n, k // group_size), generator=g)
            packed = torch.ops.torchao.da8w4_linear_prepack_cpu(
                q, scales, zeros.to(torch.int8)
            )
            for name, t in zip(("w", "ws", "wz", "comp"), packed):
                self.register_buffer(f"{name}{i}", t)

    def forward(self, x):
        outs = []
        for i, n in enumerate(self.out_features):
            xq, xs, xz = quantize_act(x)  # per linear, merged by freezing's CSE
            outs.append(
                torch.ops.torchao.da8w4_linear_cpu(
                    xq, xs, xz, getattr(self, f"w{i}"), getattr(self, f"ws{i}"),
                    getattr(self, f"wz{i}"), getattr(self, f"comp{i}"), None, x.dtype,
                )
            )
        if self.mlp:
            gate, up = outs
            return F.silu(gate) * up
        return tuple(outs)


VARIANTS = {
    "stock": dict(concat=False, clone=False),
    "fused": dict(concat=True, clone=False),
    "fused+clone": dict(concat=True, clone=True),
}


def compile_variant(mod, x, concat, clone):
    from torch._inductor.fx_passes import da8w4_concat_linear as pass_mod

    counters.clear()
    pass_mod._always_clone_outputs = clone
    try:
        with inductor_config.patch(
            {
                "freezing": True,
                "cpp.enable_concat_linear": concat,
                "fx_graph_cache": False,
            }
        ):
            fn = torch.compile(copy.deepcopy(mod), dynamic=False)
            fn(x)
    finally:
        pass_mod._always_clone_outputs = False
    fusions = counters["inductor"]["da8w4_concat_linear"]
    assert fusions == (1 if concat else 0), f"expected fusion={concat}, got {fusions}"
    return fn


def bench(fns, x, rounds, target_s=0.05):
    for fn in fns.values():  # warm up
        fn(x)
    t0 = time.perf_counter()
    next(iter(fns.values()))(x)
    iters = max(1, int(target_s / max(time.perf_counter() - t0, 1e-6)))
    samples = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(iters):
                fn(x)
            samples[name].append((time.perf_counter() - t0) / iters)
    return (
        {name: statistics.median(s) for name, s in samples.items()},
        {name: min(s) for name, s in samples.items()},
    )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--m", type=int, nargs="+", default=[1, 4, 32, 128, 512])
    p.add_argument("--rounds", type=int, default=21)
    p.add_argument("--groups", nargs="+", default=["qkv", "gate_up"])
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    torch._dynamo.config.recompile_limit = 64
    torch._dynamo.config.cache_size_limit = 64
    backend = load_kernel()
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print(f"# {cpu}, {torch.get_num_threads()} threads, torch {torch.__version__}, {backend}")
    print(f"# median of {args.rounds} interleaved rounds; ratio = stock / variant")
    print("# load average at start: %.2f %.2f %.2f" % os.getloadavg())
    print(
        "| group | M | stock ms | fused ms | fused+clone ms | stock/fused "
        "| stock/fused+clone | stock/fused (min) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    shapes = {"qkv": ([4096, 1024, 1024], False), "gate_up": ([14336, 14336], True)}
    with torch.no_grad():
        for group in args.groups:
            ns, mlp = shapes[group]
            mod = Da8w4Group(4096, ns, mlp=mlp).eval()
            for m in args.m:
                x = torch.randn(m, 4096)
                fns = {
                    name: compile_variant(mod, x, **cfg) for name, cfg in VARIANTS.items()
                }
                ref = fns["stock"](x)
                for name in ("fused", "fused+clone"):
                    out = fns[name](x)
                    out = out if isinstance(out, tuple) else (out,)
                    r = ref if isinstance(ref, tuple) else (ref,)
                    assert all(torch.equal(a, b) for a, b in zip(r, out)), name
                t, tmin = bench(fns, x, args.rounds)
                print(
                    f"| {group} | {m} | {t['stock'] * 1e3:.3f} | {t['fused'] * 1e3:.3f} "
                    f"| {t['fused+clone'] * 1e3:.3f} | {t['stock'] / t['fused']:.3f} "
                    f"| {t['stock'] / t['fused+clone']:.3f} "
                    f"| {tmin['stock'] / tmin['fused']:.3f} |",
                    flush=True,
                )
                del fns
    print("# load average at end: %.2f %.2f %.2f" % os.getloadavg())


if __name__ == "__main__":
    main()
