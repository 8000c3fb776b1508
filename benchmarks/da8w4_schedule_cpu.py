"""Paired benchmark: how our da8w4 kernel hands work items to threads.

The kernel (csrc/da8w4/da8w4_linear_cpu.cpp, ``parallel_items``) takes items one
at a time from a shared counter on the AMX path; on the register-tile paths thread t
takes the t-th equal range, then what the others left. ``DA8W4_SCHED=static`` gives
at::parallel_for's equal contiguous ranges (the previous kernel's schedule) and
``DA8W4_SCHED=dynamic:N`` changes the AMX items per thread. The setting is read once
per process, so each variant runs in its own process;
the processes alternate over ``--rounds`` rounds on the same seeded data, and the table
gives the median over rounds of each process's median, the spread ((max-min)/median)
and the ratio variant / baseline (> 1: the variant is slower).

    cmake -G Ninja -S . -B build && cmake --build build
    python benchmarks/da8w4_schedule_cpu.py --threads 2 --rounds 3
    python benchmarks/da8w4_schedule_cpu.py --variant default: --variant static:static
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

import torch
from cpu_info import cpu_model


REPO = pathlib.Path(__file__).resolve().parents[1]
SHAPES = ["1x4096x4096", "4x4096x4096", "16x4096x4096", "64x4096x4096", "256x4096x1024"]


def worker(args):
    sys.path.insert(0, str(REPO / "csrc"))
    import da8w4_linear_cpu

    if not da8w4_linear_cpu.load():
        sys.exit("error: the da8w4 kernel library is not built (cmake --build build)")
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    out = {}
    for shape in args.shapes:
        m, k, n = map(int, shape.split("x"))
        w = torch.randint(0, 16, (n, k), dtype=torch.uint8, generator=gen)
        sw = torch.rand(n, k // args.group_size, generator=gen) * 0.02 + 1e-3
        zw = torch.randint(0, 16, (n, k // args.group_size), dtype=torch.int8, generator=gen)
        packed = torch.ops.torchao.da8w4_linear_prepack_cpu(w, sw, zw)
        x = torch.randint(0, 256, (m, k), dtype=torch.uint8, generator=gen)
        sa = torch.rand(m, generator=gen) * 0.05 + 1e-3
        za = torch.randint(0, 256, (m,), dtype=torch.int32, generator=gen)

        def fn():
            return torch.ops.torchao.da8w4_linear_cpu(x, sa, za, *packed, None, torch.bfloat16)

        for _ in range(3):
            fn()
        times = []
        for _ in range(args.reps):
            calls, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < args.min_time:
                fn()
                calls += 1
            times.append((time.perf_counter() - t0) / calls)
        out[shape] = statistics.median(times)
    out["_isa"] = da8w4_linear_cpu.last_isa()
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--min-time", type=float, default=0.1)
    ap.add_argument("--group-size", type=int, default=128)
    ap.add_argument("--shapes", nargs="*", default=SHAPES)
    ap.add_argument("--variant", action="append", default=None,
                    help="NAME:DA8W4_SCHED value (empty: unset); the first is the baseline")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    variants = [v.split(":", 1) for v in (args.variant or ["static:static", "current:"])]
    runs = {name: [] for name, _ in variants}
    for r in range(args.rounds):
        for name, sched in variants if r % 2 == 0 else variants[::-1]:
            env = dict(os.environ)
            env.pop("DA8W4_SCHED", None)
            if sched:
                env["DA8W4_SCHED"] = sched
            cmd = [sys.executable, __file__, "--worker", "--threads", str(args.threads), "--reps", str(args.reps),
                   "--min-time", str(args.min_time), "--group-size", str(args.group_size), "--shapes", *args.shapes]
            res = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
            runs[name].append(json.loads(res.stdout.strip().splitlines()[-1]))
    base = variants[0][0]
    load = os.getloadavg()[0]
    print(f"Machine: {cpu_model()}, {os.cpu_count()} logical CPUs, torch "
          f"{torch.__version__}, {args.threads} threads, isa {runs[base][0]['_isa']}; group_size "
          f"{args.group_size}, bf16 output; {args.rounds} rounds of alternating processes; load 1m {load:.2f}")
    print()
    head = " | ".join(f"{n} µs (spread)" for n, _ in variants)
    ratios = " | ".join(f"{n} / {base}" for n, _ in variants[1:])
    print(f"| M x K -> N | {head} | {ratios} |")
    print("|---|" + "---:|" * (2 * len(variants) - 1))
    for shape in args.shapes:
        meds = {}
        cells = []
        for name, _ in variants:
            vals = [run[shape] * 1e6 for run in runs[name]]
            meds[name] = statistics.median(vals)
            cells.append(f"{meds[name]:.1f} ({(max(vals) - min(vals)) / meds[name]:.0%})")
        m, k, n = shape.split("x")
        rat = [f"{meds[name] / meds[base]:.3f}" for name, _ in variants[1:]]
        print(f"| {m} x {k} -> {n} | " + " | ".join(cells + rat) + " |")


if __name__ == "__main__":
    main()
