"""
Where the per-call cost that da8w4 concat-linear saves goes, op by op (CPU, eager calls of the op, as
Inductor's Python wrapper makes them).

For Llama-3.1-8B shapes (QKV: K=4096 -> 4096 + 1024 + 1024; gate/up: K=4096 -> 14336 x 2), int4 weights
(group 32), a dynamically quantized activation of M rows, it times, in interleaved rounds:

  fixed      one call with almost no work (N=32, K=128): what any call costs beyond its work
  separate   the group's calls one after another, on one quantized activation
  fused      one call on the concatenated weights
  fused+copy the fused call plus a contiguous copy of every split output (what a graph output needs)
  quantize   the activation's quantization (done once in both graphs: freezing's CSE shares it)

Reported per M: medians over rounds (us) and separate / fused per round as median [min, max]; saved =
separate - fused against (calls - 1) x fixed.

Needs our kernel (``cmake -G Ninja -S . -B build && cmake --build build``, or
``DA8W4_LINEAR_CPU_LIB=<path>``) or torchao with a CPU kernel.

    python benchmarks/da8w4_concat_linear_overhead_cpu.py [--threads N] [--m 1 4 16] [--rounds 21]
"""

import argparse
import os
import statistics
import sys
import time

import torch


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "csrc"))
import da8w4_linear_cpu as loader  # noqa: E402


GROUPS = {"qkv": (4096, [4096, 1024, 1024]), "gate_up": (4096, [14336, 14336])}
op = None


def packed(n, k, g):
    q = torch.randint(0, 16, (n, k), dtype=torch.uint8, generator=g)
    scales = torch.rand(n, k // 32, generator=g) * 0.02 + 1e-3
    zeros = torch.randint(0, 16, (n, k // 32), generator=g).to(torch.int8)
    return torch.ops.torchao.da8w4_linear_prepack_cpu(q, scales, zeros)


def call(act, w):
    return op(*act, *w, None, torch.float)


def timed(fn, iters):
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters * 1e6


def main():
    global op
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--m", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument("--rounds", type=int, default=21)
    p.add_argument("--round-s", type=float, default=0.05)
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if not loader.has_cpu_kernel() and not loader.load():
        sys.exit("da8w4 kernel not built (see the docstring)")
    op = torch.ops.torchao.da8w4_linear_cpu.default
    g = torch.Generator().manual_seed(0)
    tiny = packed(32, 128, g)
    print(f"# {torch.get_num_threads()} threads, torch {torch.__version__}, {args.rounds} interleaved rounds")
    print("| group | M | fixed us | quantize us | separate us | fused us | fused+copy us | separate / fused "
          "| saved us | (calls-1) x fixed us |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, (k, ns) in GROUPS.items():
        parts = [packed(n, k, g) for n in ns]
        fused_w = [torch.cat([pt[i] for pt in parts]) for i in range(4)]
        for m in args.m:
            x = torch.randn(m, k)
            act = loader.quantize_activation(x)
            tiny_act = loader.quantize_activation(torch.randn(m, 128))
            variants = {
                "fixed": lambda: call(tiny_act, tiny),
                "quantize": lambda: loader.quantize_activation(x),
                "separate": lambda: [call(act, w) for w in parts],
                "fused": lambda: call(act, fused_w),
                "fused+copy": lambda: [y.contiguous() for y in call(act, fused_w).split(ns, -1)],
            }
            assert torch.equal(torch.cat(variants["separate"](), -1), variants["fused"]())
            for fn in variants.values():  # warm-up
                timed(fn, 20)
            iters = {n: max(5, int(args.round_s / (timed(fn, 5) * 1e-6))) for n, fn in variants.items()}
            res = {n: [] for n in variants}
            names = list(variants)
            for r in range(args.rounds):
                for n in names if r % 2 == 0 else names[::-1]:
                    res[n].append(timed(variants[n], iters[n]))
            med = {n: statistics.median(v) for n, v in res.items()}
            ratios = [a / b for a, b in zip(res["separate"], res["fused"])]
            print(f"| {name} | {m} | {med['fixed']:.1f} | {med['quantize']:.1f} | {med['separate']:.1f} | "
                  f"{med['fused']:.1f} | {med['fused+copy']:.1f} | {statistics.median(ratios):.3f} "
                  f"[{min(ratios):.3f}, {max(ratios):.3f}] | {med['separate'] - med['fused']:.1f} | "
                  f"{(len(ns) - 1) * med['fixed']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
