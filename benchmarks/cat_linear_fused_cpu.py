"""Paired stock-vs-patched sweep of the ``cat_linear`` fusion on CPU: the
measurement behind its decision there (``cat_linear_decision.decide`` takes no
CPU site: the C++ backend writes pointwise pieces straight into the cat buffer).

The same harness as ``cat_linear_fused_gpu.py`` (every variant compiled once in
one process and keeping its code, timed ``--reps`` times interleaved, medians
and spread), on CPU shapes, fp32, forward and forward+backward, with the host
time of a step (median of ``--calls`` calls): stock, stock_aa (the A/A pair),
patched (the fusion deciding per site), upstream (upstream 2.14.1's own rewrite
as a function, fusion off), view (forced into the "view" form: the post-grad
split-K chain, taken where the partitioner saves no cat) and floor (the GEMM on
a ready input).  ``--threads``
sets torch's threads; the load average is recorded before and after.

    python benchmarks/cat_linear_fused_cpu.py --threads 2 --out benchmarks/results/cat_linear_cpu.json
"""

import argparse
import json
import os
import sys

import torch


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cat_linear_fused_gpu import host_time_us, run_site, summarize  # noqa: E402
from cpu_info import cpu_model  # noqa: E402


SHAPES = [  # (rows, piece widths, N)
    (512, (64, 64), 256),
    (2048, (256, 256), 256),
    (2048, (512, 512, 512), 512),
    (256, (64, 64), 256),
    (4096, (96, 160), 512),
]
VARIANTS = ("stock", "stock_aa", "patched", "upstream", "view", "floor")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="cat_linear_fused_cpu.json")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--shapes", default=None, help="comma-separated indices into SHAPES")
    p.add_argument("--producers", default="input,relu")
    p.add_argument("--modes", default="fwd,fwd+bwd")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    idx = range(len(SHAPES)) if args.shapes is None else map(int, args.shapes.split(","))
    result = {
        "machine": cpu_model(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "command": " ".join(sys.argv),
        "loadavg_start": list(os.getloadavg()),
        "rows": [],
    }
    for i in idx:
        m, widths, n = SHAPES[i]
        for mode in args.modes.split(","):
            for producer in args.producers.split(","):
                row = run_site(
                    m, widths, n, producer, mode == "fwd+bwd", VARIANTS, args.reps,
                    torch.float32, dev="cpu",
                    timer=lambda fn: host_time_us(fn, args.calls),
                )
                d = row["device_us"]
                print(
                    f"{m} {'+'.join(map(str, widths))} -> {n} {producer} {mode}: "
                    + " ".join(f"{v}={d[v]:.0f}" for v in VARIANTS)
                    + f"  patched/stock={d['patched'] / d['stock']:.3f}"
                    + f"  view/stock={d['view'] / d['stock']:.3f}"
                    + f"  upstream/stock={d['upstream'] / d['stock']:.3f}",
                    flush=True,
                )
                result["rows"].append(row)
                with open(args.out, "w") as f:
                    json.dump(result, f, indent=1)
    result["loadavg_end"] = list(os.getloadavg())
    result["summary"] = summarize([r for r in result["rows"] if "native" not in r])
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result["summary"], indent=1))


if __name__ == "__main__":
    main()
