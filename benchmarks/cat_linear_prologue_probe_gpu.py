"""Probe: can Inductor's prologue fusion fold a pointwise-made piece into the cat_mm template, and what
does it buy?  One GPU, the patched torch (the series installed), bf16, forward.

Today a piece made by a pointwise op (relu, EdgeConv's ``x_j - x_i``, a gather) is written by its own
kernel and read back by the template, so only the other pieces save (``cat_linear_decision``'s
``produced``).  Two things keep the producer out of the template: the one-loop layout reads the pieces
with plain loads (no ``load_input``), and the scheduler's prologue heuristics refuse a prologue that
computes in fp32 for a 16-bit template (``check_prologue_fusion_heuristics_fusable``).  Per site and
variant this prints the device time, the number of GPU kernels, the max difference from eager, or the
error:

  stock          cat_linear off
  default        cat_linear on, the decision (``{}``)
  mm             the template forced (``{"form": "mm"}``): the layout the template picks
  loops          forced, the per-piece loops layout (``load_input``) wherever it fits, heuristics as
                 upstream has them
  loops+prolog   as ``loops``, with the prologue heuristics accepting every prologue: the best case of
                 folding the producer in (what a template-aware heuristic could allow)
  apart[+V]      variant V (default: ``default``) with producers opted into prologue fusion never fused
                 horizontally (else EdgeConv's ``x_i`` and ``x_j - x_i`` share one pointwise kernel and
                 neither folds into the template)
  stagesN, cfg:BM,BN,BK,warps,stages   default mode, the per-piece loops deeper, or in one config

    PYTHONUNBUFFERED=1 python benchmarks/cat_linear_prologue_probe_gpu.py --reps 3 --out $OUT/prologue.json

Its figures: ``benchmarks/README.md``, "Producers folded in: a probe".
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
import traceback

import torch
import torch.nn.functional as F


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from device_time import kernel_breakdown_us


def edge_site(x, src, dst, w, b):
    x_i, x_j = x.index_select(0, dst), x.index_select(0, src)
    return F.linear(torch.cat([x_i, x_j - x_i], -1), w, b)


def relu_site(a, c, w, b):
    return F.linear(torch.cat([torch.relu(a), c], -1), w, b)


def sites(scale: float, relu_sites: str = "", edge_feats=(64,)):
    """(name, fn, args): EdgeConv's layers (features 64: the first, 128: the second), and relu'd
    first pieces of the sweep."""
    dev, dt = "cuda", torch.bfloat16
    out = []
    nodes, deg, hidden = int(100_000 * scale), 20, 128
    src = torch.randint(0, nodes, (nodes * deg,), device=dev)
    dst = torch.arange(nodes, device=dev).repeat_interleave(deg)
    for feat in edge_feats:
        x = torch.randn(nodes, feat, device=dev, dtype=dt)
        w = torch.randn(hidden, 2 * feat, device=dev, dtype=dt) / (2 * feat) ** 0.5
        out.append((f"edgeconv {nodes * deg} x {feat}+{feat} -> 128", edge_site,
                    (x, src, dst, w, torch.randn(hidden, device=dev, dtype=dt))))  # fmt: skip
    plan = [(int(8192 * max(scale, 0.125)), (256, 256), 160), (int((1 << 20) * scale), (128, 128), 64),
            (int((1 << 19) * scale), (256, 256), 96)]
    if relu_sites:  # only these: rows:w0+w1:n,... ("none": no relu site)
        plan = [(int(int(r) * scale), tuple(map(int, w.split("+"))), int(n))
                for r, w, n in (site.split(":") for site in relu_sites.split(",") if site != "none")]  # fmt: skip
    for rows, widths, n in plan:
        a, c = (torch.randn(rows, k, device=dev, dtype=dt) for k in widths)
        w = torch.randn(n, sum(widths), device=dev, dtype=dt) / sum(widths) ** 0.5
        out.append((f"relu {rows} x {'+'.join(map(str, widths))} -> {n}", relu_site, (a, c, w, torch.randn(n, device=dev, dtype=dt))))
    return out


@contextlib.contextmanager
def variant(name: str):
    from torch._inductor import config
    from torch._inductor.choices import InductorChoices
    from torch._inductor.kernel import cat_linear as kernel
    from torch._inductor.scheduler import Scheduler
    from torch._inductor.virtualized import V

    saved_horizontal = InductorChoices.__dict__["can_fuse_horizontal"]  # the staticmethod itself
    if name.startswith("apart"):  # producers opted into prologue fusion never fused horizontally
        name = name[len("apart"):].lstrip("+") or "default"

        def can_fuse_horizontal(scheduler, node1, node2, shared_data_score):
            if any(n.get_operation_names() and n.get_operation_names() <= V.graph.invoke_quant_ops for n in (node1, node2)):
                return False
            return saved_horizontal.__func__(scheduler, node1, node2, shared_data_score)

        InductorChoices.can_fuse_horizontal = staticmethod(can_fuse_horizontal)

    options = {"stock": None, "default": {}}.get(name, {} if name.startswith(("stages", "cfg:")) else {"form": "mm"})
    fusion = {} if options is None else {"cat_linear": options}
    saved_tiles = kernel.one_loop_tiles
    saved_check = Scheduler.check_prologue_fusion_heuristics_fusable
    saved_stages = kernel.LOOPS_MAX_STAGES
    saved_loops = kernel._LOOPS_CONFIGS, kernel._LOOPS_NARROW_CONFIGS
    if name.startswith("cfg:"):  # default mode, the per-piece loops in one config: BM,BN,BK,warps,stages
        cfg = tuple(int(v) for v in name[4:].split(","))
        kernel._LOOPS_CONFIGS = kernel._LOOPS_NARROW_CONFIGS = [cfg]
        kernel.LOOPS_MAX_STAGES = cfg[-1]
    if name.startswith("stages"):  # default mode, the per-piece loops pipelined deeper
        kernel.LOOPS_MAX_STAGES = int(name[len("stages"):])
    if name.startswith("loops"):
        kernel.one_loop_tiles = lambda widths, block_k: False
    if name == "loops+prolog":
        Scheduler.check_prologue_fusion_heuristics_fusable = lambda self, prologue, template, why: True
    try:
        # no cache: the variants differ in what no cache key holds
        with config.patch(pre_grad_fusion_options=fusion, force_disable_caches=True):
            yield
    finally:
        kernel.one_loop_tiles = saved_tiles
        kernel.LOOPS_MAX_STAGES = saved_stages
        kernel._LOOPS_CONFIGS, kernel._LOOPS_NARROW_CONFIGS = saved_loops
        Scheduler.check_prologue_fusion_heuristics_fusable = saved_check
        InductorChoices.can_fuse_horizontal = saved_horizontal


def measure(fn, args, name: str, reps: int) -> dict:
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    row: dict = {"variant": name}
    try:
        with variant(name):
            compiled = torch.compile(fn)
            start = time.perf_counter()
            out = compiled(*args)
            row["compile_s"] = time.perf_counter() - start
        row["taken"] = counters["inductor"]["cat_linear"]
        row["max_diff"] = (out.float() - fn(*args).float()).abs().max().item()
        times, kernels = [], 0
        for _ in range(reps):
            per = kernel_breakdown_us(lambda: compiled(*args))
            times.append(sum(per.values()))
            kernels = len(per)
        row.update(us=statistics.median(times), us_all=times, kernels=kernels, names=list(per)[:6])
    except Exception as e:  # a variant that does not compile is a finding, not a crash of the probe
        row["error"] = f"{type(e).__name__}: {e}"[:400]
        traceback.print_exc()
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--scale", type=float, default=1.0, help="row counts x this (0.01: a dry run)")
    p.add_argument("--variants", nargs="+", default=["stock", "default", "mm", "loops", "loops+prolog"])
    p.add_argument("--out", default="cat_linear_prologue_probe.json")
    p.add_argument("--relu-sites", default="", help="only these relu sites rows:w0+w1:n,... (comma-separated; none: no relu site)")
    p.add_argument("--edge-feats", type=int, nargs="*", default=[64], help="EdgeConv sites' feature widths (none: no EdgeConv site)")
    args = p.parse_args()
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}")
    results = []
    for site, fn, inputs in sites(args.scale, args.relu_sites, args.edge_feats):
        for name in args.variants:
            row = dict(site=site, **measure(fn, inputs, name, args.reps))
            results.append(row)
            shown = row.get("error") or (f"{row['us']:.1f} us, {row['kernels']} kernels, taken {row['taken']}, "
                                         f"max diff {row['max_diff']:.3g}, compile {row['compile_s']:.1f} s")
            print(f"{site:40s} {name:14s} {shown}", flush=True)
            with open(args.out, "w") as f:
                json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
