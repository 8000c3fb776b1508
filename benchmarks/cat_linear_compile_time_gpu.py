"""Where a ``cat_linear`` site's compile time goes, on one GPU.

Each worker is a fresh process with empty Inductor and Triton cache
directories that compiles a list of sites in order, each forced into the
in-place GEMM (``pre_grad_fusion_options={"cat_linear": {"form": "mm"}}``,
bf16, no grad: the post-grad lowering's Triton template), and records per site
the wall time of the first call, the compile phases that grew (dynamo's
``compile_times``) and the ``cat_linear*`` counters (``cat_linear`` 1: the
template was taken; ``cat_linear_no_template``: it was not, and the site
compiled as stock).  Running the same sites
in two orders, and once with ``TORCHINDUCTOR_COMPILE_THREADS=1``, says whether
a slow compile belongs to the site's kernel or to the first kernel of its kind
in a process.

    PYTHONUNBUFFERED=1 python benchmarks/cat_linear_compile_time_gpu.py --out $OUT/ct.json
    python benchmarks/cat_linear_compile_time_gpu.py --device cpu --rows 64 --out /tmp/ct.json   # dry run
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


SITES = {  # name: (M, piece widths, N)
    "a_1024x2_1024": (8192, (1024, 1024), 1024),
    "b_2048x2_1024": (8192, (2048, 2048), 1024),
    "c_64x2_256": (8192, (64, 64), 256),
    "d_1024x2_2048": (8192, (1024, 1024), 2048),
}
ORDERS = [
    ("a_1024x2_1024", "b_2048x2_1024", "d_1024x2_2048"),
    ("b_2048x2_1024", "a_1024x2_1024", "c_64x2_256"),
]


def phases():
    import torch

    names, values = torch._dynamo.utils.compile_times(repr="csv", aggregate=True)
    return {n: float(v) for n, v in zip(names, values)}


def worker(order, result, device, rows):
    import torch
    import torch.nn.functional as F
    from torch._dynamo.utils import counters
    from torch._inductor import config

    def fn(w, *parts):
        return F.linear(torch.cat(parts, -1), w)

    out = []
    before = phases()
    for name in order:
        m, widths, n = SITES[name]
        m = rows or m
        parts = [torch.randn(m, k, device=device, dtype=torch.bfloat16) for k in widths]
        w = torch.randn(n, sum(widths), device=device, dtype=torch.bfloat16)
        torch._dynamo.reset()
        counters.clear()
        with config.patch(pre_grad_fusion_options={"cat_linear": {"form": "mm"}}), torch.no_grad():
            t0 = time.perf_counter()
            torch.compile(fn)(w, *parts)
            if device == "cuda":
                torch.cuda.synchronize()
            took = time.perf_counter() - t0
        after = phases()
        grew = sorted(((after.get(k, 0) - before.get(k, 0), k) for k in after), reverse=True)
        out.append({"site": name, "compile_s": round(took, 3),
                    "counters": {k: v for k, v in counters["inductor"].items() if k.startswith("cat_linear")},
                    "top_phases": [[k, round(d, 3)] for d, k in grew[:6]]})  # fmt: skip
        before = after
        print(json.dumps(out[-1]), flush=True)
    with open(result, "w") as f:
        json.dump(out, f)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="cat_linear_compile_time_gpu.json")
    p.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    p.add_argument("--device", default="cuda", help="cuda, or cpu for a dry run (no template there)")
    p.add_argument("--rows", type=int, default=0, help="rows per site (0: the site's own)")
    args = p.parse_args()
    if args.worker:
        return worker(args.worker, args.result, args.device, args.rows)
    runs = []
    for order, threads in [(ORDERS[0], None), (ORDERS[1], None), (ORDERS[0], "1")]:
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=f"{tmp}/i", TRITON_CACHE_DIR=f"{tmp}/t")
            if threads:
                env["TORCHINDUCTOR_COMPILE_THREADS"] = threads
            result = f"{tmp}/r.json"
            cmd = [sys.executable, __file__, "--result", result, "--device", args.device,
                   "--rows", str(args.rows), "--worker", *order]  # fmt: skip
            subprocess.run(cmd, env=env, check=False, timeout=300)
            data = json.load(open(result)) if os.path.exists(result) else None
        runs.append({"order": order, "compile_threads": threads, "sites": data})
        with open(args.out, "w") as f:
            json.dump(runs, f, indent=1)
    for r in runs:
        cells = [f"{s['site']} {s['compile_s']}s {'template' if s['counters'].get('cat_linear') else 'stock'}"
                 for s in r["sites"] or []]  # fmt: skip
        print(f"threads={r['compile_threads'] or 'default'}: " + ", ".join(cells))


if __name__ == "__main__":
    main()
