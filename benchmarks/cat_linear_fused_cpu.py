"""CPU measurement behind cat_linear_fused's CPU rule.

Same paired harness as ``cat_linear_fused_gpu.py`` (stock and patched in one
process, medians of ``--reps`` interleaved repetitions), on CPU-sized shapes,
always timing the forced per-piece forms too: the CPU rule in
``fx_passes/cat_linear_fused.py`` is read off the ``view/stock`` and
``addmm/stock`` ratios printed here.

    python benchmarks/cat_linear_fused_cpu.py --out benchmarks/results/cat_linear_fused_cpu.json

``--grid`` sweeps rows x piece layouts x N instead of the three shapes above
(fp32, fwd and fwd+bwd, relu producer and graph-input parts; forward only at
``--fwd-ns``), timing stock, a second compile of stock (A/A: what identical
code measures as) and the forced ``view`` form, the form the CPU rule takes;
add ``patched`` to ``--variants`` to time the rule's own pick.  It defaults to
one thread (``--threads``) and records the load average before and after:

    python benchmarks/cat_linear_fused_cpu.py --grid --reps 5 \\
        --out benchmarks/results/cat_linear_fused_cpu_grid.json
"""

import argparse
import itertools
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cat_linear_fused_gpu as harness  # noqa: E402
from cpu_info import cpu_model  # noqa: E402


CPU_SHAPES = [(512, (64, 64), 256), (2048, (256, 256), 256), (2048, (512, 512, 512), 512)]

GRID_ROWS = (64, 256, 512, 2048, 4096)
GRID_LAYOUTS = ((64, 64), (64, 64, 64, 64), (256, 256), (512, 512, 512), (96, 160, 1024))
GRID_NS = (256, 512)


def _ints(s):
    return [int(v) for v in s.split(",")]


def grid_cases(args):
    rows, ns, fwd_ns = _ints(args.rows), _ints(args.ns), _ints(args.fwd_ns)
    layouts = [GRID_LAYOUTS[i] for i in _ints(args.layouts)]
    producers = args.producers.split(",")
    modes = [m == "bwd" for m in args.modes.split(",")]
    for M, Ks, producer, bwd in itertools.product(rows, layouts, producers, modes):
        for N in ns if bwd else [n for n in ns if n in fwd_ns]:
            yield M, Ks, N, producer, bwd


def run_grid(args):
    import torch
    from torch._inductor import config as ic

    assert hasattr(ic, "cat_linear_fused"), "install the inductor-cat-linear-fused patch first"
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="cat_linear_bench_"))
    ic.force_disable_caches = True  # the pass must run on every compile
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    variants = args.variants.split(",")
    assert variants[0] == "stock", "stock comes first: ratios are to it"
    info = {"torch": torch.__version__, "machine": cpu_model(), "logical_cpus": os.cpu_count(),
            "threads": torch.get_num_threads(), "dtype": args.dtype, "reps": args.reps,
            "variants": variants, "loadavg_start": list(os.getloadavg())}  # fmt: skip
    print(json.dumps(info), flush=True)
    t0 = time.time()
    rows = []
    for M, Ks, N, producer, bwd in grid_cases(args):
        r = harness.run_case(M, Ks, N, producer, bwd, variants, args.reps, dtype, "cpu")
        r["loadavg"] = list(os.getloadavg())
        for v in variants[1:]:
            r[f"{v}/stock"] = round(r[v] / r["stock"], 3)
        rows.append(r)
        print("%5d %-16s %4d %-5s %-7s stock %9.1f (spread %.2f) " % (
            M, "+".join(map(str, Ks)), N, producer, "fwd+bwd" if bwd else "fwd",
            r["stock"], r["stock_spread"]) + " ".join(
            "%s/stock %.3f (spread %.2f)" % (v, r[f"{v}/stock"], r[f"{v}_spread"])
            for v in variants[1:]), flush=True)  # fmt: skip
        if args.out:  # keep partial results if the run is cut short
            with open(args.out + ".partial", "w") as f:
                json.dump(rows, f)
    info["loadavg_end"] = list(os.getloadavg())
    info["wall_s"] = round(time.time() - t0, 1)
    aa = [abs(r["stock_aa/stock"] - 1) for r in rows if "stock_aa/stock" in r]
    if aa:
        info["aa_noise_max"] = round(max(aa), 3)
        info["aa_noise_median"] = round(statistics.median(aa), 3)
    print(json.dumps({k: info[k] for k in ("loadavg_end", "wall_s") if k in info}), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({**info, "rows": rows}, f, indent=1)
        os.remove(args.out + ".partial")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dtype", default="float32")
    g = ap.add_argument_group("--grid: rows x piece layouts x N")
    g.add_argument("--grid", action="store_true")
    g.add_argument("--rows", default=",".join(map(str, GRID_ROWS)))
    g.add_argument("--layouts", default=",".join(map(str, range(len(GRID_LAYOUTS)))),
                   help="indices into GRID_LAYOUTS %s" % (GRID_LAYOUTS,))  # fmt: skip
    g.add_argument("--ns", default=",".join(map(str, GRID_NS)))
    g.add_argument("--fwd-ns", default="256", help="the Ns also timed forward only")
    g.add_argument("--producers", default="input,relu")
    g.add_argument("--modes", default="fwd,bwd")
    g.add_argument("--variants", default="stock,stock_aa,view")
    g.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    if args.grid:
        return run_grid(args)
    harness.SHAPES[:] = CPU_SHAPES
    out = args.out
    harness.main(["--device", "cpu", "--forms", "--reps", str(args.reps),
                  "--dtype", args.dtype] + (["--out", out] if out else []))  # fmt: skip
    if out:
        rows = json.load(open(out))["rows"]
        for r in rows:
            print(r["M"], r["Ks"], r["N"], r["producer"], "fwd+bwd" if r["bwd"] else "fwd",
                  "view/stock=%.2f addmm/stock=%.2f" % (r["view"] / r["stock"], r["addmm"] / r["stock"]))  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
