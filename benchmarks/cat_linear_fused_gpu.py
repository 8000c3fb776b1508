"""Paired stock-vs-patched benchmark for the cat_linear_fused pre-grad pass.

Needs a torch with the inductor-cat-linear-fused patch installed (the "stock"
column runs the same torch with ``config.cat_linear_fused = False``, so both
columns share one process, one GPU and one set of inputs).

For every case (shapes of ``shared/bench/cat_linear_gpu_probe.py`` x producer
{input, relu} x {forward, forward+backward}; ``--producers`` may add ``gelu`` (every part
made by gelu, as the model benchmark's projections) and ``mixed``: relu on
the first part only, the others graph inputs) it compiles

  stock    F.linear(torch.cat(parts, -1), W)          cat_linear_fused off
  stock_aa the same, compiled a second time           identical code: the A/A pair
  patched  the same function                          cat_linear_fused on (per-site decision)
  floor    F.linear(x, W) on an already materialized x (cuBLAS alone)
  floor_gemm  the "gemm" form's kernel on column views of a materialized x
           (forward only: the Triton kernel alone, at the config the site pins)
  view / addmm / gemm (with --forms): the pass forced into that form

and times each by GPU device time (``device_time.kernel_time_us``: the profiler's
kernel sum per step, host overhead excluded) and, as a second column, host-
inclusive time (``triton.testing.do_bench``, median per call).  The sweep is
repeated ``--reps`` times, interleaving variants; medians are reported with the
spread of the repetitions, and stock_aa/stock shows what identical code
measures as.  On the GPU each variant's step is also broken down by kernel
(``kernels_<variant>``: µs per call of every kernel, memset and memcpy), and the
A/A pair's difference kernel by kernel (``aa_kernel_diff``), which says whether
identical code that times differently moved in the cat's kernel or the GEMM.
It also records the form the pass chose, whether the roofline screen declined
the site, peak memory of one step, first-call compile time, and what upstream
2.15's ``pre_grad_fusion_options["cat_linear"]`` gate rule would pick for the
case.

    PYTHONUNBUFFERED=1 python benchmarks/cat_linear_fused_gpu.py --out $OUT/x.json

The summary also gives two ceilings for the geomean over the sites where stock is
>= 1.2x the floor: every site at the cuBLAS floor, and every site at the form's own
kernel (floor_gemm) where that beats stock, stock elsewhere. ``--summarize`` prints
the summary of saved results again (several files: their rows together).
"""

import argparse
import gc
import itertools
import json
import logging
import math
import os
import statistics
import sys
import tempfile
import time
import types

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from device_time import kernel_breakdown_us, kernel_time_us, spread  # noqa: E402


SHAPES = [  # (M, Ks, N), from shared/bench/cat_linear_gpu_probe.py
    (8192, (64, 64), 256),
    (8192, (128, 128, 128), 1024),
    (8192, (1024, 1024), 1024),
    (8192, (2048, 2048), 4096),
    (16384, (4096, 4096), 4096),
    (512, (2048, 2048), 8192),
    # Beyond the probe: the headroom cases (K tails, three unequal pieces into
    # a wide N, wide pieces), four narrow pieces, and a mid-size site.
    (8192, (96, 160), 1024),
    (8192, (256, 512, 128), 4096),
    (8192, (2048, 2048), 1024),
    (4096, (64, 64, 64, 64), 512),
    (2048, (512, 512), 2048),
    # The site the roofline rule rewrites in benchmarks/cat_linear_fused_model_gpu.py
    # (two gelu projections fused pairwise), where the model's step gained nothing.
    (8192, (256, 256), 160),
]


def make_fn(producer):
    def pre(ps):
        if producer == "mixed":  # relu on the first part, the others graph inputs
            return [torch.relu(ps[0]), *ps[1:]]
        if producer == "gelu":
            return [F.gelu(p) for p in ps]
        return [torch.relu(p) for p in ps] if producer == "relu" else list(ps)

    def f(W, *ps):
        return F.linear(torch.cat(pre(ps), -1), W)

    return f


def floor_fn(W, x):
    return F.linear(x, W)


def make_floor_gemm(Ks):
    from torch._inductor.fx_passes.cat_linear_fused_gemm import get_op, pick_config

    def f(W, x):
        pieces, start = [], 0
        for k in Ks:
            pieces.append(x[..., start:start + k])
            start += k
        cfg = pick_config(pieces, W, [0] * len(Ks))
        return get_op()(pieces, W, None, [0] * len(Ks), cfg)

    return f


def upstream_215_gate(M, Ks, N, dtype):
    """What torch 2.15's opt-in cat_linear fusion would do (its documented gates)."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    fires = (
        N <= 96
        and M * sum(Ks) * itemsize >= 512 * 1024 * 1024
        and 2 <= len(Ks) <= 3
        and min(Ks) >= 8
    )
    return "clone" if fires else "stock"


class _FormLog(logging.Handler):
    """Collects the pass's 'rewrote ... as <form>' / skip lines."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.msgs = []

    def emit(self, record):
        self.msgs.append(record.getMessage())


def setup_case(M, Ks, N, producer, bwd, dtype, device, rank=2):
    g = torch.Generator(device=device).manual_seed(0)
    lead = (M,) if rank == 2 else (M // 128, 128)
    W = torch.randn(N, sum(Ks), device=device, dtype=dtype, generator=g) / math.sqrt(sum(Ks))
    parts = [torch.randn(*lead, k, device=device, dtype=dtype, generator=g) for k in Ks]
    x = torch.randn(*lead, sum(Ks), device=device, dtype=dtype, generator=g)
    for t in (W, *parts, x):
        t.requires_grad_(bwd)
    gout = torch.randn(*lead, N, device=device, dtype=dtype, generator=g)
    return W, parts, x, gout


FLOORS = ("floor", "floor_gemm")


def compile_variant(variant, producer, device, Ks=None):
    fn = {"floor": floor_fn, "floor_gemm": make_floor_gemm(Ks) if Ks else None}.get(variant)
    fn = fn or make_fn(producer)
    if variant == "stock_aa":
        # A code object of its own: Dynamo compiles it anew instead of reusing
        # stock's entry, so the pair also covers compile-time choices.
        fn = types.FunctionType(fn.__code__.replace(co_name="f_aa"), fn.__globals__,
                                "f_aa", fn.__defaults__, fn.__closure__)  # fmt: skip
    patches = {"cat_linear_fused": variant not in ("stock", "stock_aa", *FLOORS)}
    if variant in ("view", "addmm", "gemm"):
        patches["cat_linear_fused_force"] = variant
    return torch.compile(fn, options=patches), patches


def step_fn(cfn, variant, W, parts, x, gout, bwd):
    args = (W, x) if variant in FLOORS else (W, *parts)
    if bwd:
        def run():
            cfn(*args).backward(gout)
    else:
        def run():
            with torch.no_grad():
                cfn(*args)
    return run


def do_bench(fn, device):
    if device == "cuda":
        from triton.testing import do_bench as tdb

        return tdb(fn, warmup=25, rep=100, return_mode="median") * 1000.0  # us
    from torch._inductor.runtime.benchmarking import benchmarker

    return benchmarker.benchmark_cpu(fn, warmup=3, rep=15) * 1000.0


def run_case(M, Ks, N, producer, bwd, variants, reps, dtype, device, rank=2):
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    W, parts, x, gout = setup_case(M, Ks, N, producer, bwd, dtype, device, rank)
    if bwd or device != "cuda" or dtype not in (torch.float16, torch.bfloat16):
        variants = [v for v in variants if v != "floor_gemm"]
    row = {"M": M, "Ks": list(Ks), "N": N, "producer": producer, "bwd": bwd, "rank": rank,
           "dtype": str(dtype).replace("torch.", ""),
           "upstream_2_15_rule": upstream_215_gate(M, Ks, N, dtype)}  # fmt: skip
    handler = _FormLog()
    lg = logging.getLogger("torch._inductor.fx_passes.cat_linear_fused")
    lg.addHandler(handler)
    lg.setLevel(logging.DEBUG)
    runs = {}
    try:
        for v in variants:
            handler.msgs.clear()
            counters.clear()
            cfn, _ = compile_variant(v, producer, device, Ks)
            run = step_fn(cfn, v, W, parts, x, gout, bwd)
            if device == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            run()  # compiles
            if device == "cuda":
                torch.cuda.synchronize()
            row[f"compile_s_{v}"] = round(time.perf_counter() - t0, 2)
            run()
            if device == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
                run()
                torch.cuda.synchronize()
                row[f"peak_mib_{v}"] = round((torch.cuda.max_memory_allocated() - base) / 2**20, 1)
            if v == "patched":
                rewrote = [m for m in handler.msgs if "rewrote" in m]
                row["decision"] = rewrote[0].rsplit(" ", 1)[-1] if rewrote else "stock"
                row["bench_runs"] = counters["inductor"]["cat_linear_fused_bench"]
                row["screened"] = counters["inductor"]["cat_linear_fused_screened"]
                row["pass_log"] = handler.msgs[-3:]
            runs[v] = run
        times = {v: [] for v in variants}
        host = {v: [] for v in variants}
        # Forward+backward steps are host-bound: keep the garbage collector's
        # pauses out of the timed loops.
        gc.collect()
        gc.disable()
        try:
            for v in variants:  # untimed pass: the first case of a process ran cold
                do_bench(runs[v], device)
            for _ in range(reps):
                for v in variants:
                    if device == "cuda":
                        times[v].append(kernel_time_us(runs[v]))
                    host[v].append(do_bench(runs[v], device))
        finally:
            gc.enable()
        if device == "cuda":
            # Which kernels a step spends its time in (after the timed reps):
            # where stock and stock_aa differ, this names the kernel that moved.
            for v in variants:
                row[f"kernels_{v}"] = {
                    k: round(t, 2) for k, t in kernel_breakdown_us(runs[v]).items()
                }
        if device != "cuda":  # no device clock: the host time is all there is
            times = host
        for v in variants:
            row[v] = round(statistics.median(times[v]), 2)
            row[f"{v}_host"] = round(statistics.median(host[v]), 1)
            row[f"{v}_spread"] = round(spread(times[v]), 3)
            row[f"{v}_reps"] = [round(t, 2) for t in times[v]]
            row[f"{v}_host_reps"] = [round(t, 1) for t in host[v]]
    finally:
        lg.removeHandler(handler)
    if "patched" in row:
        row["ratio"] = round(row["patched"] / row["stock"], 3)
        row["ratio_host"] = round(row["patched_host"] / row["stock_host"], 3)
    if "stock_aa" in row:
        row["aa"] = round(row["stock_aa"] / row["stock"], 3)
        row["aa_host"] = round(row["stock_aa_host"] / row["stock_host"], 3)
        ka, kb = row.get("kernels_stock", {}), row.get("kernels_stock_aa", {})
        if ka and kb:
            # The A/A pair's difference, kernel by kernel (µs, stock_aa - stock);
            # kernels of one compile only appear with their whole time.
            diff = {k: round(kb.get(k, 0.0) - ka.get(k, 0.0), 2) for k in {*ka, *kb}}
            row["aa_kernel_diff"] = dict(sorted(diff.items(), key=lambda kv: -abs(kv[1])))
    row["stock_over_floor"] = round(row["stock"] / row["floor"], 3) if "floor" in row else None
    return row


def geomean(xs):
    """Geometric mean rounded to 3 places, None for no values."""
    return round(math.exp(sum(math.log(x) for x in xs) / len(xs)), 3) if xs else None


def summarize(rows):
    worst = max(r["ratio"] for r in rows)
    fired = [r for r in rows if r.get("decision", "stock") != "stock"]
    kept = [r for r in rows if r.get("decision", "stock") == "stock"]
    aa = [abs(r["aa"] - 1) for r in rows if "aa" in r]
    aa_host = [abs(r["aa_host"] - 1) for r in rows if "aa_host" in r]
    slow = [r for r in rows if r.get("stock_over_floor") and r["stock_over_floor"] >= 1.2]
    # What the geomean over `slow` could reach at best: every site at the cuBLAS floor,
    # or every site at the form's own kernel on a ready input (floor_gemm) where that
    # beats stock and stock elsewhere (the decision at its best, the kernel as it is).
    with_gemm = [r for r in slow if r.get("floor_gemm")]
    ceiling_kernel = (
        geomean([max(1.0, r["stock"] / r["floor_gemm"]) for r in with_gemm])
        if len(with_gemm) == len(slow) else None
    )  # fmt: skip
    return {"worst_patched_over_stock": worst,
            "worst_patched_over_stock_where_fired": max((r["ratio"] for r in fired), default=None),
            "worst_patched_over_stock_where_kept": max((r["ratio"] for r in kept), default=None),
            "aa_noise_device_max": round(max(aa), 3) if aa else None,
            "aa_noise_device_median": round(statistics.median(aa), 3) if aa else None,
            "aa_noise_host_max": round(max(aa_host), 3) if aa_host else None,
            "n_fired": len(fired),
            "geomean_speedup_where_stock_ge_1.2x_floor": geomean([r["stock"] / r["patched"] for r in slow]),
            "n_cases_stock_ge_1.2x_floor": len(slow),
            "geomean_ceiling_at_floor": geomean([r["stock"] / r["floor"] for r in slow]),
            "geomean_ceiling_at_floor_gemm": ceiling_kernel,
            "geomean_speedup_all": geomean([r["stock"] / r["patched"] for r in rows])}  # fmt: skip


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--forms", nargs="*", default=None,
                    help="also time these forced forms (all of view/addmm/gemm if none named)")
    ap.add_argument("--shapes", default=None, help="comma-separated indices into SHAPES")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--rank", type=int, default=2, choices=(2, 3),
                    help="3: parts of shape (M/128, 128, k)")
    ap.add_argument("--modes", default="fwd,bwd", help="fwd, bwd or both")
    ap.add_argument("--producers", default="input,relu")
    ap.add_argument("--summarize", nargs="+", metavar="JSON",
                    help="only print the summary of the rows of these saved results (no GPU)")
    args = ap.parse_args(argv)
    if args.summarize:
        rows = []
        for path in args.summarize:
            with open(path) as f:
                saved = json.load(f)
            rows += saved["rows"] if isinstance(saved, dict) else saved
        print(json.dumps(summarize(rows), indent=1))
        return

    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="cat_linear_bench_"))
    torch.backends.cuda.matmul.allow_tf32 = True
    from torch._inductor import config as ic

    assert hasattr(ic, "cat_linear_fused"), "install the inductor-cat-linear-fused patch first"
    ic.force_disable_caches = True  # the pass must run on every compile
    dtype = getattr(torch, args.dtype)
    shapes = SHAPES if args.shapes is None else [SHAPES[int(i)] for i in args.shapes.split(",")]
    forms = [] if args.forms is None else (args.forms or ["view", "addmm", "gemm"])
    variants = ["stock", "stock_aa", "patched", "floor", "floor_gemm"] + forms
    modes = [m == "bwd" for m in args.modes.split(",")]
    machine = (torch.cuda.get_device_name() if args.device == "cuda" else
               f"cpu x{os.cpu_count()}")  # fmt: skip
    print(torch.__version__, machine, flush=True)
    rows = []
    cases = itertools.product(shapes, args.producers.split(","), modes)
    for (M, Ks, N), producer, bwd in cases:
        row = run_case(M, Ks, N, producer, bwd, variants, args.reps, dtype, args.device, args.rank)
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if not k.endswith("_reps")}), flush=True)
        if args.out:  # keep partial results if the run is cut short
            with open(args.out + ".partial", "w") as f:
                json.dump(rows, f)
    summary = summarize(rows)
    print(json.dumps(summary), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"torch": torch.__version__, "machine": machine, "dtype": args.dtype,
                       "summary": summary, "rows": rows}, f, indent=1)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
