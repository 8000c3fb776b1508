"""The template's one-loop configs against each other, in default mode, one GPU.

``F.linear(cat(parts, -1), W, b)`` (bf16, input pieces, no grad) compiled with the template
(``pre_grad_fusion_options={"cat_linear": {"form": "mm"}}``) once per candidate config: the
default mode's one-loop table (``kernel/cat_linear.py``'s ``_ONE_LOOP_CONFIGS``, or
``_ONE_LOOP_NARROW_CONFIGS`` for N <= 64) patched to that one config for the process's compile,
and stock (no ``cat_linear``) beside them.  Each compile's code is checked to hold the template in
the one-loop layout (``ONE_LOOP``; a config that does not fit falls back to the table's next entry
or the per-piece loops, and is reported so).  Device time per call (``device_time.kernel_time_us``,
20 calls), ``--reps`` interleaved rounds, median and spread; the ratio to stock and to the first
config of ``WIDE``/``NARROW`` (4 stages: the table's first entry until 08b95d8, which this probe moved
to 3 stages for the wide table).  Sizes are the sweep's whole-tile sites and
EdgeConv's two layers at 2M edges (in training the template reads both pieces from memory there).

    PYTHONUNBUFFERED=1 python benchmarks/cat_linear_stages_probe_gpu.py --reps 3 --out $OUT/stages.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from cat_linear_fused_gpu import fresh_code, run_and_keep_code  # noqa: E402
from device_time import interleaved_us  # noqa: E402


SHAPES = [  # (M, piece widths, N)
    (2_000_000, (64, 64), 128),  # EdgeConv layer 1
    (2_000_000, (128, 128), 128),  # EdgeConv layer 2
    (8192, (64, 64), 256),
    (8192, (128, 128, 128), 1024),
    (8192, (1024, 1024), 1024),
    (8192, (2048, 2048), 1024),
    (8192, (2048, 2048), 4096),
    (2048, (512, 512), 2048),
    (4096, (64, 64, 64, 64), 512),
    (8192, (256, 256), 160),
    (16384, (128, 351), 1024),
    (1 << 20, (128, 128), 64),
    (2 << 20, (64, 64), 32),
    (512 << 10, (256, 256), 96),
    (1 << 20, (128, 100), 64),
]
# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages); the first of each is the ratio's base (the
# table's first entry when the probe was written)
WIDE = [(128, 128, 64, 8, 4), (128, 128, 64, 8, 3), (128, 128, 64, 8, 2), (64, 128, 64, 4, 3)]
NARROW = [(128, 64, 64, 4, 4), (128, 64, 64, 4, 3), (128, 64, 64, 4, 2), (64, 64, 64, 4, 3)]


def site_tensors(m, widths, n, device="cuda"):
    """A site's pieces, weight and bias (bf16, seeded), the weight scaled to keep outputs near 1."""
    g = torch.Generator(device=device).manual_seed(0)
    parts = [torch.randn(m, k, device=device, dtype=torch.bfloat16, generator=g) for k in widths]
    w = torch.randn(n, sum(widths), device=device, dtype=torch.bfloat16, generator=g) * sum(widths) ** -0.5
    b = torch.randn(n, device=device, dtype=torch.bfloat16, generator=g)
    return parts, w, b


def site_fn(parts, w, b):
    def fn(*parts):
        return F.linear(torch.cat(parts, -1), w, b)

    return fn


def compile_site(name, parts, w, b, cfg):
    """The compiled site (a code object of its own, so that it keeps its code while the next
    variants compile) and what it holds, with the one-loop tables holding ``cfg`` alone (None:
    stock)."""
    from torch._dynamo.utils import counters
    from torch._inductor import config
    from torch._inductor.kernel import cat_linear as kc

    counters.clear()
    n, widths = w.shape[0], [p.shape[1] for p in parts]
    fn = fresh_code(site_fn(parts, w, b), name.replace("x", "_"))

    saved = (kc._ONE_LOOP_CONFIGS, kc._ONE_LOOP_NARROW_CONFIGS)
    opts = {} if cfg is None else {"cat_linear": {"form": "mm"}}
    try:
        if cfg is not None:
            table = {cfg[2]: [cfg], 96 - cfg[2]: []}  # the other BLOCK_K (64 <-> 32): none
            kc._ONE_LOOP_CONFIGS = kc._ONE_LOOP_NARROW_CONFIGS = table
        with config.patch(pre_grad_fusion_options=opts, fx_graph_cache=False), torch.no_grad():
            compiled = torch.compile(fn)
            out, code = run_and_keep_code(compiled, *parts)
            chosen = None if cfg is None else kc._default_config(n, list(widths), 2)
    finally:
        kc._ONE_LOOP_CONFIGS, kc._ONE_LOOP_NARROW_CONFIGS = saved
    src = "\n".join(code)
    ref = fn(*parts)
    err = ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
    info = {
        "taken": counters["inductor"]["cat_linear"],
        "template": "triton_tem" in src,
        "one_loop": "tl.where(in_a1" in src,
        "config": None if chosen is None else {k: chosen[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages", "ONE_LOOP")},
        "rel_err": err,
    }

    def step():
        with torch.no_grad():
            return compiled(*parts)

    return step, info


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--shapes", default=None, help="comma-separated indices into SHAPES")
    ap.add_argument("--out", default="cat_linear_stages_probe.json")
    a = ap.parse_args()
    shapes = SHAPES if a.shapes is None else [SHAPES[int(i)] for i in a.shapes.split(",")]
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    rows = []
    for m, widths, n in shapes:
        cfgs = NARROW if n <= 64 else WIDE
        variants = {"stock": None, **{"x".join(map(str, c)): c for c in cfgs}}
        torch._dynamo.reset()
        parts, w, b = site_tensors(m, widths, n)
        steps, infos = {}, {}
        for name, cfg in variants.items():
            steps[name], infos[name] = compile_site(f"v{len(rows)}_{name}", parts, w, b, cfg)
        med, spreads = interleaved_us(steps, a.reps)
        first = "x".join(map(str, cfgs[0]))
        row = {"m": m, "widths": widths, "n": n, "median_us": med, "spread": spreads, "info": infos}
        rows.append(row)
        cells = "  ".join(
            f"{k}={v:.1f}" + ("" if k == "stock" else f"({v / med['stock']:.2f}s,{v / med[first]:.2f}d"
                               f"{'' if infos[k]['one_loop'] else ',LOOPS'}{'' if infos[k]['template'] else ',NOTEM'})")
            for k, v in med.items()
        )
        print(f"{m} {widths} {n}: {cells}", flush=True)
        del steps, parts, w, b
        torch.cuda.empty_cache()
        with open(a.out, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
