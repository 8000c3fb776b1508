"""Kernel-level benchmark of cat_linear_fused's ``gemm`` form (one Triton GEMM
reading the pieces in place) against what stock Inductor runs, per config.

Needs a torch with the inductor-cat-linear-fused patch installed (it imports
``torch._inductor.fx_passes.cat_linear_fused_gemm``).  For each case (the
shapes of ``shared/bench/cat_linear_gpu_probe.py`` x producer {input, relu},
forward only, bf16) it times, by the kernels' device time
(``do_bench_using_profiling``, L2 flushed before each call, the metric the
pass's own compile-time benchmark uses):

  floor    cuBLAS ``F.linear`` on an already materialized (and activated) input
  stock    stock ``torch.compile`` of ``F.linear(torch.cat(pre(parts)), W)``:
           one kernel writes the cat buffer, then cuBLAS
  gemm     the form's kernel launched directly, with every config below and
           both K-loop layouts: ``one_loop`` (a single pipelined loop over all
           K tiles) and ``per_piece`` (one loop per piece)

Rounds are interleaved; tables give medians.  Every kernel output is checked
against the floor's before it is timed.

    PYTHONUNBUFFERED=1 python benchmarks/cat_linear_fused_kernel_gpu.py --out $OUT/k.json
"""

import argparse
import json
import math
import os
import statistics
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cat_linear_fused_gpu import SHAPES  # noqa: E402  the probe's shapes, as end to end


# (BLOCK_M, BLOCK_N, num_stages, num_warps); BLOCK_K is the module's.
CONFIGS = [
    (128, 128, 3, 8),
    (128, 128, 4, 8),
    (128, 256, 3, 8),
    (128, 256, 4, 8),
    (256, 128, 3, 8),
    (64, 128, 4, 4),
    (128, 64, 4, 4),
    (64, 64, 4, 4),
]


def launch(mod, parts, W, one_loop, pro, cfg):
    import triton

    bm, bn, stages, warps = cfg
    M, N = parts[0].shape[0], W.shape[0]
    y = parts[0].new_empty(M, N)
    a, ks, pr = mod.kernel_slots(list(parts), [pro] * len(parts))
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)

    def run():
        mod.cat_linear_kernel.fn[grid](
            a[0], a[1], a[2], a[3],
            a[0].stride(0), a[0].stride(1), a[1].stride(0), a[1].stride(1),
            a[2].stride(0), a[2].stride(1), a[3].stride(0), a[3].stride(1),
            *ks, W, W.stride(0), W.stride(1), W, y, y.stride(0), y.stride(1),
            M, N, sum(ks),
            NUM_PARTS=len(parts), HAS_BIAS=False, ONE_LOOP_OK=True, ONE_LOOP=one_loop,
            PRO0=pr[0], PRO1=pr[1], PRO2=pr[2], PRO3=pr[3],
            BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=mod._BLOCK_K, GROUP_M=8,
            num_stages=stages, num_warps=warps,
        )  # fmt: skip
        return y

    return run


def rel_err(out, ref):
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


def run_case(M, Ks, N, pro, rounds, configs):
    from torch._inductor import config as ic
    from torch._inductor.fx_passes import cat_linear_fused_gemm as mod
    from torch._inductor.utils import do_bench_using_profiling

    dev, dt = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(0)
    W = torch.randn(N, sum(Ks), device=dev, dtype=dt, generator=g) / math.sqrt(sum(Ks))
    parts = [torch.randn(M, k, device=dev, dtype=dt, generator=g) for k in Ks]
    act = torch.relu if pro else (lambda t: t)
    x = torch.cat([act(p) for p in parts], -1)

    def stock_fn(W, *ps):
        return F.linear(torch.cat([act(p) for p in ps], -1), W)

    torch._dynamo.reset()
    with ic.patch(cat_linear_fused=False), torch.no_grad():
        cstock = torch.compile(stock_fn)
        ref = F.linear(x, W)
        variants = {"floor": lambda: F.linear(x, W), "stock": lambda: cstock(W, *parts)}
        for one_loop in (True, False):
            for cfg in configs:
                variants[("one_loop" if one_loop else "per_piece", cfg)] = launch(
                    mod, parts, W, one_loop, pro, cfg
                )
        errs, ok = {}, {}
        for name, fn in variants.items():
            try:
                errs[name] = rel_err(fn(), ref)
                ok[name] = errs[name] < 2e-2
            except Exception as e:  # e.g. out of shared memory for this config
                errs[name], ok[name] = repr(e)[:120], False
        times = {n: [] for n in variants if ok[n]}
        for _ in range(rounds):
            for name in times:
                times[name].append(1000.0 * do_bench_using_profiling(variants[name], warmup=5, rep=50))
    med = {n: statistics.median(t) for n, t in times.items()}
    row = {"M": M, "Ks": list(Ks), "N": N, "producer": "relu" if pro else "input",
           "floor": med.get("floor"), "stock": med.get("stock")}  # fmt: skip
    for layout in ("one_loop", "per_piece"):
        per = {c: med[(layout, c)] for c in configs if (layout, c) in med}
        best = min(per, key=per.get) if per else None
        row[layout] = per[best] if best else None
        row[f"{layout}_config"] = list(best) if best else None
        row[f"{layout}_all"] = {"x".join(map(str, c)): round(t, 2) for c, t in per.items()}
    row["failed"] = {str(n): e for n, e in errs.items() if not ok[n]}
    return row


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shapes", default=None, help="comma-separated indices into SHAPES")
    args = ap.parse_args(argv)
    shapes = SHAPES if args.shapes is None else [SHAPES[int(i)] for i in args.shapes.split(",")]
    rows = []
    for M, Ks, N in shapes:
        for pro in (0, 1):
            row = run_case(M, Ks, N, pro, args.rounds, CONFIGS)
            rows.append(row)
            print(json.dumps(row), flush=True)
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "rounds": args.rounds, "timer": "do_bench_using_profiling (kernel device time, us)"}  # fmt: skip
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    print(meta)
    print("| M | Ks | N | producer | floor | stock | one_loop (config) | per_piece (config) | stock/one_loop |")
    print("|---:|---|---:|---|---:|---:|---:|---:|---:|")
    for r in rows:
        ks = "+".join(map(str, r["Ks"]))
        ratio = r["stock"] / r["one_loop"] if r["one_loop"] else float("nan")
        print(f"| {r['M']} | {ks} | {r['N']} | {r['producer']} | {r['floor']:.1f} | {r['stock']:.1f} "
              f"| {r['one_loop']:.1f} {r['one_loop_config']} | {r['per_piece']:.1f} "
              f"{r['per_piece_config']} | {ratio:.2f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
