"""CPU measurement behind cat_linear_fused's CPU rule.

Same paired harness as ``cat_linear_fused_gpu.py`` (stock and patched in one
process, medians of ``--reps`` interleaved repetitions), on CPU-sized shapes,
always timing the forced per-piece forms too: the CPU rule in
``fx_passes/cat_linear_fused.py`` is read off the ``view/stock`` and
``addmm/stock`` ratios printed here.

    python benchmarks/cat_linear_fused_cpu.py --out benchmarks/results/cat_linear_fused_cpu.json
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cat_linear_fused_gpu as harness  # noqa: E402


CPU_SHAPES = [(512, (64, 64), 256), (2048, (256, 256), 256), (2048, (512, 512, 512), 512)]


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dtype", default="float32")
    args = ap.parse_args(argv)
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
