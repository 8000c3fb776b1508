"""Paired benchmark: our torchao::da8w4_linear_cpu kernel vs fp32 F.linear on CPU.

Each round times both sides back to back on the same shape (our op on a prepacked
int4 weight and a pre-quantised uint8 activation; F.linear on the fp32 weight), so
the two see the same machine state. Reports the medians over rounds and the median of
the per-round ratios. By default (`--cache cold`) each side cycles through enough copies
of its weights to exceed twice the last-level cache, as in a model whose other layers
evict them; `--cache warm` reuses one copy (an 8 MiB int4 weight then stays in a 32 MiB
L3 while the 64 MiB fp32 one cannot, which flatters the int4 kernel). `op+quant` adds torchao's eager per-token activation
quantisation to our side (what an eager caller pays; under torch.compile Inductor
fuses it into one C++ kernel).

    cmake -G Ninja -S . -B build && cmake --build build
    python benchmarks/da8w4_kernel_cpu.py            # markdown table to stdout
    DA8W4_ISA=avx2 python benchmarks/da8w4_kernel_cpu.py --shapes 1x4096x4096
"""

import argparse
import os
import pathlib
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from cpu_info import cpu_model


REPO = pathlib.Path(__file__).resolve().parents[1]


def _import_loader():
    sys.path.insert(0, str(REPO / "csrc"))
    import da8w4_linear_cpu

    return da8w4_linear_cpu


def machine() -> str:
    model = cpu_model()
    load = ", load average %.1f" % os.getloadavg()[0] if hasattr(os, "getloadavg") else ""
    return (f"{model}, {os.cpu_count()} logical CPUs, torch {torch.__version__}, "
            f"{torch.get_num_threads()} threads{load}")


def quantize_per_token(x):
    """torchao's asymmetric per-token uint8 activation quantisation (csrc's)."""
    return _import_loader().quantize_activation(x)


def llc_bytes() -> int:
    try:
        size = pathlib.Path("/sys/devices/system/cpu/cpu0/cache/index3/size").read_text().strip()
        return int(size.rstrip("K")) * 1024 if size.endswith("K") else int(size)
    except (OSError, ValueError):
        return 64 << 20


def copies_for(nbytes: int, cache: str) -> int:
    return 1 if cache == "warm" else max(1, -(-2 * llc_bytes() // nbytes) + 1)


def time_once(fn, iters):
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters


def bench_shape(m, k, n, group_size, rounds, min_time, cache):
    gen = torch.Generator().manual_seed(0)
    w = torch.randint(0, 16, (n, k), dtype=torch.uint8, generator=gen)
    g = k // group_size
    sw = torch.rand(n, g, generator=gen) * 0.01 + 1e-3
    zw = torch.randint(0, 16, (n, g), dtype=torch.int8, generator=gen)
    pw, ps, pz, pc = torch.ops.torchao.da8w4_linear_prepack_cpu(w, sw, zw)
    w_fp32 = (w.float() - zw.float().repeat_interleave(group_size, 1)) * sw.repeat_interleave(group_size, 1)
    bias = torch.randn(n, generator=gen)
    x = torch.randn(m, k, generator=gen)
    xq, sa, za = quantize_per_token(x)
    op = torch.ops.torchao.da8w4_linear_cpu.default
    packs = [(pw, ps, pz, pc)] + [
        tuple(t.clone() for t in (pw, ps, pz, pc))
        for _ in range(copies_for(pw.numel() + 4 * ps.numel(), cache) - 1)
    ]
    refs = [w_fp32] + [w_fp32.clone() for _ in range(copies_for(w_fp32.numel() * 4, cache) - 1)]
    step = {"ours": 0, "ref": 0}

    def next_copy(name, copies):
        step[name] = (step[name] + 1) % len(copies)
        return copies[step[name]]

    def ours():
        op(xq, sa, za, *next_copy("ours", packs), bias, torch.float32)

    def ours_quant():
        q, s, z = quantize_per_token(x)
        op(q, s, z, *next_copy("ours", packs), bias, torch.float32)

    def ref():
        F.linear(x, next_copy("ref", refs), bias)

    # Sanity: the two compute the same linear up to the activation quantisation.
    y, y_ref = op(xq, sa, za, pw, ps, pz, pc, bias, torch.float32), F.linear(x, w_fp32, bias)
    rel = ((y - y_ref).norm() / y_ref.norm()).item()
    assert rel < 2e-2, f"da8w4 output differs from F.linear by {rel:.3g} (relative)"

    fns = {"ours": ours, "ours_quant": ours_quant, "ref": ref}
    iters = {}
    for name, fn in fns.items():  # warm up, then pick iterations per timing
        for _ in range(3):
            fn()
        t = time_once(fn, 3)
        iters[name] = max(1, int(min_time / max(t, 1e-7)))
    times = {name: [] for name in fns}
    ratios = []
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(time_once(fn, iters[name]))
        ratios.append(times["ref"][-1] / times["ours"][-1])
    med = {name: statistics.median(v) for name, v in times.items()}
    return med, statistics.median(ratios), min(ratios), max(ratios)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="*", default=[
        "1x4096x4096", "1x4096x6144", "1x4096x28672", "1x14336x4096",
        "4x4096x4096", "32x4096x4096", "128x4096x4096",
    ], help="MxKxN")
    parser.add_argument("--group-size", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--cache", choices=("cold", "warm"), default="cold")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("--min-time", type=float, default=0.05, help="seconds per timing")
    args = parser.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    loader = _import_loader()
    if not loader.load():
        sys.exit(f"da8w4 kernel not built: {loader.default_path()}")
    print(f"Machine: {machine()}; da8w4 ISA: {os.environ.get('DA8W4_ISA') or loader.best_isa()}; "
          f"group_size {args.group_size}; {args.cache} cache; {args.rounds} paired rounds, medians")
    print()
    print("| M | K | N | fp32 F.linear (us) | da8w4 op (us) | da8w4 op+quant (us) | speedup (median [min, max]) |")
    print("|---:|---:|---:|---:|---:|---:|---|")
    for shape in args.shapes:
        m, k, n = (int(v) for v in shape.split("x"))
        med, ratio, lo, hi = bench_shape(m, k, n, args.group_size, args.rounds, args.min_time, args.cache)
        print(f"| {m} | {k} | {n} | {med['ref'] * 1e6:.0f} | {med['ours'] * 1e6:.0f} | "
              f"{med['ours_quant'] * 1e6:.0f} | **{ratio:.2f}x** [{lo:.2f}, {hi:.2f}] |", flush=True)


if __name__ == "__main__":
    main()
