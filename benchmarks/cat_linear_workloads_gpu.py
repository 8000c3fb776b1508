"""Paired stock-vs-patched benchmark of the ``cat_linear`` fusion on three models
that really compute ``linear(cat(parts, -1), W, b)`` (issue #27, part 2), on one GPU.

Workloads (bf16 on CUDA, fp32 on CPU):

* ``gnn``: two EdgeConv layers, ``nn(cat([x_i, x_j - x_i], -1))`` per edge and a
  max over each node's in-edges, on a random graph of 100k nodes x 20 in-edges (2M
  edges), features 64, MLPs 128->128->128 and 256->128->128.  torch_geometric's
  ``EdgeConv`` if it imports (``--gnn auto``), else ``EdgeConvRef`` (the same math:
  two gathers, the cat, the MLP, a scatter-max); the JSON records which one ran.
* ``dlrm``: bottom MLP 13->512->256->128, 26 embedding tables (10k rows, dim 128,
  dense gradients), the pairwise dots of the 27 vectors (351 values), top MLP on
  ``cat([dense, dots])`` 479->1024->512->1, batch 16k.  128 + 351 are not whole 64-wide
  K tiles, so the default mode leaves that site to max_autotune (reported, not padded).
* ``multimodal``: ``FusionHead`` from ``cat_linear_fused_model_gpu.py`` at its full
  sizes (12 sites, batch 8192; inputs need grad in training).

Each cell (workload x mode x tuning x variant) is a fresh process (this script with
``--worker``) with empty TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR, so every compile
time, max_autotune's too, is cold.  Modes: ``inference`` (forward under ``no_grad``) and
``training`` (forward+backward, parameter gradients).  Tunings: ``default`` and
``max_autotune``.  Variants: ``stock`` (``pre_grad_fusion_options = {}``) and
``patched`` (``{"cat_linear": {}}``), same torch, run as a pair in alternating order.
A worker runs the step eagerly in fp32 (the reference) and in the benchmark dtype,
computes Inductor's system key, then times the first compiled call (compile + first
run), and records: the pass's own time; ``counters["inductor"]["cat_linear"]`` (sites
rewritten) and the other ``cat_linear*`` counters and logged reasons; per site, as the
pass's cost model saw it, rows, widths, N, the GEMM's arithmetic intensity (FLOP/byte),
the device's ridge point (memory-bound if below it) and the roofline's best case;
max abs/rel error of every output (and gradient) against fp32 eager, with eager's own
error in the dtype; peak memory (``max_memory_allocated`` growth over one step); device
time (``device_time.kernel_time_us``) and host time per step, median of ``--rounds``
rounds with their spread; and, under max_autotune, Inductor's AUTOTUNE lines of each
``cat_mm`` site (what the autotuner chose).  Default cells run first, then max_autotune
inference (``--autotune all`` adds training, ``none`` skips it).  No pair starts that
is estimated to end past ``--budget-s``, and a worker still running at the budget is
killed; every skipped cell is printed.  The JSON at ``--out`` is rewritten after each
cell; at the end a table gives patched/stock per cell against the targets (device time
<= 1.02, compile <= 1.02).

    PYTHONUNBUFFERED=1 python benchmarks/cat_linear_workloads_gpu.py --out $OUT/workloads.json
    python benchmarks/cat_linear_workloads_gpu.py --device cpu --small --out /tmp/wl.json   # dry run
"""

import argparse
import copy
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from cat_linear_fused_model_gpu import (  # noqa: E402
    ERR_MULTIPLIER, ERR_SLACK, FusionHead, SIZES as HEAD_SIZES, SiteDecisions, compile_phases,
    time_the_pass,
)
from device_time import host_time_us, kernel_time_us, spread  # noqa: E402

WORKLOADS = ("gnn", "dlrm", "multimodal")
# gnn: (nodes, in-edges per node, features, hidden); dlrm: (batch, dense features,
# bottom MLP, sparse features, rows per table, top MLP)
GNN_SIZES = {"full": (100_000, 20, 64, 128), "small": (1000, 8, 64, 64)}
DLRM_SIZES = {"full": (16384, 13, (512, 256, 128), 26, 10_000, (1024, 512)),
        "small": (256, 13, (16,), 26, 50, (32,))}  # fmt: skip
# --small's cells: one pair per workload, covering each mode, tuning and (training on CPU) a rewrite.
SMALL_PLAN = [("gnn", "training", "default"), ("dlrm", "inference", "max_autotune"),
              ("multimodal", "training", "default")]
# Pairs whose estimate is unknown so far (seconds per worker, by tuning and mode).
PRIOR_S = {("default", "inference"): 20, ("default", "training"): 30, ("max_autotune", "inference"): 60,
           ("max_autotune", "training"): 90}  # fmt: skip


def mlp(dims, last_relu=True):
    layers = []
    for i, (k, n) in enumerate(zip(dims, dims[1:])):
        layers += [nn.Linear(k, n)] + ([nn.ReLU()] if last_relu or i < len(dims) - 2 else [])
    return nn.Sequential(*layers)


class EdgeConvRef(nn.Module):
    """torch_geometric's ``EdgeConv`` (aggr="max", flow source_to_target) without it:
    row 0 of ``edge_index`` is the source j, row 1 the target i."""

    def __init__(self, net):
        super().__init__()
        self.nn = net

    def forward(self, x, edge_index):
        src, dst = edge_index[0], edge_index[1]
        x_i, x_j = x.index_select(0, dst), x.index_select(0, src)
        msg = self.nn(torch.cat([x_i, x_j - x_i], -1))
        out = msg.new_zeros(x.shape[0], msg.shape[-1])
        return out.scatter_reduce(0, dst.unsqueeze(-1).expand_as(msg), msg, "amax", include_self=False)


def edge_conv_class(choice):
    if choice != "ref":
        try:
            import torch_geometric
            from torch_geometric.nn import EdgeConv

            return EdgeConv, f"torch_geometric.nn.EdgeConv (torch_geometric {torch_geometric.__version__})"
        except Exception as e:  # not installed, or broken against this torch
            if choice == "pyg":
                raise
            return EdgeConvRef, f"EdgeConvRef (torch_geometric not importable: {e!r})"
    return EdgeConvRef, "EdgeConvRef (--gnn ref)"


class GNN(nn.Module):
    def __init__(self, conv, f, h):
        super().__init__()
        self.conv1, self.conv2 = conv(mlp([2 * f, h, h])), conv(mlp([2 * h, h, h]))

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index), edge_index)


class DLRM(nn.Module):
    def __init__(self, n_dense, bottom, n_sparse, rows, top):
        super().__init__()
        dim = bottom[-1]
        self.bottom = mlp([n_dense, *bottom])
        self.emb = nn.ModuleList(nn.Embedding(rows, dim) for _ in range(n_sparse))
        li, lj = torch.tril_indices(n_sparse + 1, n_sparse + 1, -1)
        self.register_buffer("li", li)
        self.register_buffer("lj", lj)
        self.top = mlp([dim + len(li), *top, 1], last_relu=False)

    def forward(self, dense, sparse):
        d = self.bottom(dense)
        t = torch.stack([d] + [e(sparse[:, i]) for i, e in enumerate(self.emb)], 1)
        dots = torch.bmm(t, t.transpose(1, 2))[:, self.li, self.lj]
        return self.top(torch.cat([d, dots], 1))


def build(workload, small, device, gnn_choice):
    """(fp32 model, inputs, output shapes, whether float inputs need grad, description)."""
    size = "small" if small else "full"
    if workload == "gnn":
        n, k, f, h = GNN_SIZES[size]
        conv, impl = edge_conv_class(gnn_choice)
        dst = torch.arange(n).repeat_interleave(k)
        edge_index = torch.stack([torch.randint(0, n, (n * k,)), dst])
        ins = [torch.randn(n, f), edge_index]
        return GNN(conv, f, h), ins, [(n, h)], False, f"{n} nodes x {k} = {n * k} edges, F {f}, H {h}; {impl}"
    if workload == "dlrm":
        b, n_dense, bottom, n_sparse, rows, top = DLRM_SIZES[size]
        ins = [torch.randn(b, n_dense), torch.randint(0, rows, (b, n_sparse))]
        return DLRM(n_dense, bottom, n_sparse, rows, top), ins, [(b, 1)], False, f"batch {b}, {n_sparse} tables x {rows}"
    b, d_text, d_image, d_audio, *rest = HEAD_SIZES[size]
    if small:  # one trunk layer: 7 sites
        rest[-2] = 1
    ins = [torch.randn(b, d) for d in (d_text, d_image, d_audio)]
    model = FusionHead(d_text, d_image, d_audio, *rest)
    return model, ins, [(b, n) for n in rest[-1]], True, f"FusionHead {size}, batch {b}"


def make_step(module, fn, dtype, inputs, gouts, train, input_grad):
    ins = [x.to(dtype).requires_grad_(train and input_grad) if x.is_floating_point() else x for x in inputs]
    gs = [g.to(dtype) for g in gouts]
    leaves = [*module.parameters()] + [x for x in ins if x.requires_grad]

    def step():
        if not train:
            with torch.no_grad():
                out = fn(*ins)
            return [o.detach() for o in (out if isinstance(out, tuple) else (out,))]
        for t in leaves:
            t.grad = None
        out = fn(*ins)
        outs = list(out) if isinstance(out, tuple) else [out]
        torch.autograd.backward(outs, gs)
        return [o.detach() for o in outs] + [t.grad for t in leaves]

    step.leaves = leaves
    return step


def record_sites(cost, sites):
    """Wrap the pass's cost model (``cost.decide``) to record every site it weighs."""
    decide = cost.decide

    def recording(site, step_cost=None):
        d = decide(site, step_cost)
        flops = 2.0 * site.rows * site.k * site.n
        nbytes = ((site.rows + site.n) * site.k + site.rows * site.n) * site.itemsize
        ridge = cost.ridge_point(site.device, site.dtype)
        sites.append({
            "rows": site.rows, "widths": list(site.widths), "n": site.n, "needs_grad": site.needs_grad,
            "produced": list(site.produced), "intensity": round(flops / nbytes, 1),
            "ridge": None if ridge is None else round(ridge, 1),
            "memory_bound": None if ridge is None else flops / nbytes < ridge,
            "best_case": None if ridge is None else round(site.speedup_bound(ridge), 3),
            "form": d.form, "reason": d.reason,
        })  # fmt: skip
        return d

    cost.decide = recording


def worker(a):
    import logging

    from torch._dynamo.utils import counters
    from torch._inductor import config as ic
    from torch._inductor.codecache import CacheBase
    from torch._inductor.fx_passes import cat_linear_fused_cost as cost
    from torch._inductor.fx_passes.group_batch_fusion import PRE_GRAD_FUSIONS

    assert "cat_linear" in PRE_GRAD_FUSIONS, "install the inductor-cat-linear-fused patch first"
    cuda, train = a.device == "cuda", a.mode == "training"
    dtype = getattr(torch, a.dtype or ("bfloat16" if cuda else "float32"))
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    torch.manual_seed(0)
    model, inputs, out_shapes, input_grad, desc = build(a.workload, a.small, "cpu", a.gnn)
    inputs = [x.to(a.device) for x in inputs]
    gouts = [torch.randn(s, device=a.device) for s in out_shapes]
    model = model.to(a.device)
    m32 = copy.deepcopy(model).float()
    ref = [t.float() for t in make_step(m32, m32, torch.float32, inputs, gouts, train, input_grad)()]
    del m32
    model = model.to(dtype)
    eager = make_step(model, model, dtype, inputs, gouts, train, input_grad)()
    res = {"workload": a.workload, "mode": a.mode, "tuning": a.tuning, "variant": a.variant,
           "desc": desc, "dtype": str(dtype).replace("torch.", ""), "torch": torch.__version__,
           "machine": torch.cuda.get_device_name() if cuda else f"cpu x{os.cpu_count()}"}  # fmt: skip

    def dump():
        with open(a.result, "w") as f:
            json.dump(res, f)

    ic.pre_grad_fusion_options = {"cat_linear": {}} if a.variant == "patched" else {}
    ic.max_autotune = a.tuning == "max_autotune"
    decisions, sites = SiteDecisions(), []
    pass_log = logging.getLogger("torch._inductor.fx_passes.cat_linear_fused")
    pass_log.addHandler(decisions)
    pass_log.setLevel(logging.DEBUG)
    pass_log.propagate = False  # recorded, not printed
    record_sites(cost, sites)
    CacheBase.get_system()  # both variants need it once per process: not in the compile
    pass_s, _ = time_the_pass(False)
    counters.clear()
    step = make_step(model, torch.compile(model), dtype, inputs, gouts, train, input_grad)
    sync()
    t0 = time.perf_counter()
    got = step()
    sync()
    res["compile_s"] = time.perf_counter() - t0
    c = counters["inductor"]
    res.update(pass_s=pass_s[0], rewritten=c["cat_linear"], decisions=decisions.lines, sites=sites,
               counters={k: v for k, v in c.items() if k.startswith("cat_linear")},
               phases_s=compile_phases())  # fmt: skip
    errs = []
    for g, e, r in zip(got, eager, ref):
        scale = r.abs().max().clamp_min(1e-12)
        errs.append(((g.float() - r).abs().max().item(), ((g.float() - r).abs().max() / scale).item(),
                     ((e.float() - r).abs().max() / scale).item()))  # fmt: skip
    res.update(err_abs=max(e[0] for e in errs), err_rel=max(e[1] for e in errs),
               err_rel_eager=max(e[2] for e in errs),
               ok=all(ec <= ERR_MULTIPLIER * ee + ERR_SLACK for _, ec, ee in errs))  # fmt: skip
    del got, eager, ref
    dump()

    step()  # warm
    if cuda:
        for t in step.leaves:
            t.grad = None
        sync()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        out = step()
        sync()
        res["peak_mib"] = (torch.cuda.max_memory_allocated() - base) / 2**20
        del out
    dev, host = [], []
    for _ in range(a.rounds):
        if cuda:
            dev.append(kernel_time_us(step))
            host.append(host_time_us(step, calls=20))
        else:
            t0 = time.perf_counter()
            step()
            host.append((time.perf_counter() - t0) * 1e6)
    res.update(device_us=statistics.median(dev) if dev else None, device_us_rounds=dev,
               device_spread=spread(dev) if dev else None, host_us=statistics.median(host),
               host_us_rounds=host, host_spread=spread(host))  # fmt: skip
    dump()


def run_worker(a, cell, timeout):
    """One cell in a fresh process with empty cache directories; killed after ``timeout``."""
    with tempfile.TemporaryDirectory(prefix="cat_linear_wl_") as tmp:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"),
                   TRITON_CACHE_DIR=os.path.join(tmp, "triton"))  # fmt: skip
        result = os.path.join(tmp, "result.json")
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--result", result,
               "--device", a.device, "--rounds", str(a.rounds), "--gnn", a.gnn,
               *[f"--{k}={cell[k]}" for k in ("workload", "mode", "tuning", "variant")]]  # fmt: skip
        cmd += (["--small"] if a.small else []) + ([f"--dtype={a.dtype}"] if a.dtype else [])
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, start_new_session=True)  # fmt: skip
        try:
            log, error = p.communicate(timeout=max(timeout, 1))[0], None
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            log, error = p.communicate()[0], f"killed after {timeout:.0f} s (budget or --worker-timeout-s)"
        r = json.load(open(result)) if os.path.exists(result) else {}
    if error is None and p.returncode != 0:
        error = f"exit {p.returncode}: {log[-3000:]}"
    elif error is None and "device_us_rounds" not in r:
        error = "no result"
    if error:
        r["error"] = error
    lines = log.splitlines()
    picks = [i for i, line in enumerate(lines) if line.startswith("AUTOTUNE cat_mm")]
    r["autotune_cat_mm"] = [lines[i:i + 6] for i in picks]
    return r


def med(runs, key):
    vals = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def ratio(a, b):
    return round(a / b, 3) if a is not None and b else None


def summarize(cells):
    rows = []
    for key in dict.fromkeys((c["workload"], c["mode"], c["tuning"]) for c in cells):
        runs = [c for c in cells if (c["workload"], c["mode"], c["tuning"]) == key and "compile_s" in c]
        s = [c for c in runs if c["variant"] == "stock"]
        p = [c for c in runs if c["variant"] == "patched"]
        if not s or not p:
            continue
        sites = p[0].get("sites", [])
        row = {"workload": key[0], "mode": key[1], "tuning": key[2], "processes": [len(s), len(p)],
               "sites": len(sites), "rewritten": sorted({c.get("rewritten") for c in p}),
               "counters": p[0].get("counters"),
               "intensity": [x["intensity"] for x in sites], "ridge": sites[0]["ridge"] if sites else None,
               "memory_bound": [x["memory_bound"] for x in sites],
               "best_case": [x["best_case"] for x in sites],
               "pass_s": med(p, "pass_s"), "err_rel_eager": max(c["err_rel_eager"] for c in s + p),
               "err_rel_stock": max(c["err_rel"] for c in s), "err_rel_patched": max(c["err_rel"] for c in p),
               "err_abs_patched": max(c["err_abs"] for c in p), "ok": all(c["ok"] for c in s + p)}  # fmt: skip
        for k in ("device_us", "host_us", "peak_mib", "compile_s"):
            row[f"{k}_stock"], row[f"{k}_patched"] = med(s, k), med(p, k)
            row[f"{k}_ratio"] = ratio(row[f"{k}_patched"], row[f"{k}_stock"])
        for k in ("device_spread", "host_spread"):
            row[k] = max((c[k] for c in s + p if c.get(k) is not None), default=None)
        row["pass_share_of_compile"] = ratio(row["pass_s"], row["compile_s_stock"])
        r, cr = row["device_us_ratio"], row["compile_s_ratio"]  # the targets are on device time
        row["never_slower"] = None if r is None else r <= 1.02
        row["compile_within_2pct"] = None if cr is None else cr <= 1.02
        rows.append(row)
    return rows


def markdown(meta, rows):
    def f(v, fmt="%.1f"):
        return "-" if v is None else fmt % v

    out = [f"{meta.get('machine')}, torch {meta.get('torch')}, {meta.get('dtype')}; one cold process per "
           "cell; step time: median of rounds (largest spread of rounds); compile: first call, cold caches. "
           "AI: the GEMM's FLOP/byte at each site (ridge: the device's; below it, memory-bound).", "",
           "| workload | mode | tuning | sites rewritten | AI (ridge) | device µs stock / patched | ratio | "
           "host µs ratio | peak MiB stock / patched | compile s stock / patched | ratio | pass s | "
           "rel err eager / stock / patched | targets |",
           "|---|---|---|---|---|---|---:|---:|---|---|---:|---:|---|---|"]  # fmt: skip
    for r in rows:
        ai = ",".join(f"{x:g}" for x in r["intensity"]) + (f" ({r['ridge']:g})" if r["ridge"] else "")
        targets = ["speed ok" if r["never_slower"] else "SLOWER" if r["never_slower"] is False else "",
                   "compile ok" if r["compile_within_2pct"] else "compile +" if r["compile_within_2pct"] is False
                   else ""]  # fmt: skip
        out.append("| " + " | ".join([
            r["workload"], r["mode"], r["tuning"], f"{','.join(map(str, r['rewritten']))}/{r['sites']}", ai,
            f"{f(r['device_us_stock'])} / {f(r['device_us_patched'])} ({f(r['device_spread'], '%.2f')})",
            f(r["device_us_ratio"], "%.3f"), f(r["host_us_ratio"], "%.3f"),
            f"{f(r['peak_mib_stock'])} / {f(r['peak_mib_patched'])}",
            f"{f(r['compile_s_stock'], '%.2f')} / {f(r['compile_s_patched'], '%.2f')}",
            f(r["compile_s_ratio"], "%.3f"), f(r["pass_s"], "%.3f"),
            " / ".join(f(r[k], "%.1e") for k in ("err_rel_eager", "err_rel_stock", "err_rel_patched"))
            + ("" if r["ok"] else " FAIL"), ", ".join(t for t in targets if t)]) + " |")  # fmt: skip
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="JSON, rewritten after every cell")
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    ap.add_argument("--modes", nargs="+", default=["inference", "training"], choices=["inference", "training"])
    ap.add_argument("--autotune", default="inference", choices=["none", "inference", "all"],
                    help="which modes also run under max_autotune (after every default cell)")
    ap.add_argument("--reps", type=int, default=1, help="processes per cell")
    ap.add_argument("--rounds", type=int, default=3, help="timing rounds per process")
    ap.add_argument("--budget-s", type=float, default=200.0, help="start no pair that would end later")
    ap.add_argument("--worker-timeout-s", type=float, default=180.0)
    ap.add_argument("--gnn", default="auto", choices=["auto", "pyg", "ref"],
                    help="EdgeConv: torch_geometric's if importable (auto), or EdgeConvRef")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default=None, help="default: bfloat16 on CUDA, float32 on CPU")
    ap.add_argument("--small", action="store_true", help="tiny sizes and SMALL_PLAN's cells (CPU dry run)")
    ap.add_argument("--all-cells", action="store_true", help="with --small: every cell, not SMALL_PLAN")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    for hidden in ("--workload", "--mode", "--tuning", "--variant", "--result"):
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        return worker(a)

    start = time.perf_counter()
    plan, skipped = [], []
    tuned = {"none": [], "inference": ["inference"], "all": ["inference", "training"]}[a.autotune]
    for tuning in ("default", "max_autotune"):
        keys = [(w, m) for w in a.workloads for m in a.modes if tuning == "default" or m in tuned]
        if a.small and not a.all_cells:
            keys = [(w, m) for w, m in keys if (w, m, tuning) in SMALL_PLAN]
        elif tuning == "max_autotune" and len(keys) < len(a.workloads) * len(a.modes):
            skipped.append(f"max_autotune for {sorted(set(a.modes) - set(tuned))}: not run (--autotune {a.autotune})")
        for rep in range(a.reps):
            for i, (w, m) in enumerate(keys):
                order = ["stock", "patched"] if (i + rep) % 2 == 0 else ["patched", "stock"]
                plan.append([{"workload": w, "mode": m, "tuning": tuning, "variant": v, "rep": rep} for v in order])
    if a.small and not a.all_cells:
        skipped.append(f"--small runs one pair per workload, {SMALL_PLAN} (--all-cells: every cell)")
    meta = {"command": " ".join([sys.executable, *sys.argv]), "argv": sys.argv[1:], "host": platform.node(),
            "cpus": os.cpu_count(), "budget_s": a.budget_s, "small": a.small,
            "started": time.strftime("%Y-%m-%d %H:%M:%S")}  # fmt: skip
    cells, took = [], {}  # (tuning, mode) -> seconds per worker seen so far

    def write():
        if a.out:
            rows = summarize(cells)
            with open(a.out, "w") as f:
                json.dump({"meta": meta, "rows": rows, "cells": cells, "skipped": skipped}, f, indent=1)

    for pair in plan:
        c0 = pair[0]
        name = f"{c0['workload']} {c0['mode']} {c0['tuning']}" + (f" rep {c0['rep'] + 1}" if a.reps > 1 else "")
        seen = took.get((c0["workload"], c0["mode"], c0["tuning"])) or took.get((c0["tuning"], c0["mode"]))
        estimate = 2 * (seen or (0 if a.small else PRIOR_S[(c0["tuning"], c0["mode"])]))
        elapsed = time.perf_counter() - start
        if elapsed + estimate > a.budget_s:
            skipped.append(f"{name}: not started at {elapsed:.0f} s, the pair would take ~{estimate:.0f} s "
                           f"of the {a.budget_s:.0f} s budget")  # fmt: skip
            print(f"[{elapsed:6.1f}s] skip {skipped[-1]}", flush=True)
            continue
        for cell in pair:
            t0 = time.perf_counter()
            left = a.budget_s - (t0 - start)
            r = {**cell, **run_worker(a, cell, min(a.worker_timeout_s, left)), **cell}
            dt = time.perf_counter() - t0
            r["worker_s"] = dt
            took[(cell["workload"], cell["mode"], cell["tuning"])] = dt
            took[(cell["tuning"], cell["mode"])] = max(dt, took.get((cell["tuning"], cell["mode"]), 0))
            cells.append(r)
            if "machine" in r:
                meta.update({k: r[k] for k in ("machine", "torch", "dtype")})
                meta.setdefault("workloads", {})[cell["workload"]] = r["desc"]
            tag = f"[{time.perf_counter() - start:6.1f}s] {name} {cell['variant']:7s}"
            if "compile_s" in r:
                dev, peak = r.get("device_us"), r.get("peak_mib")
                print(f"{tag} compile {r['compile_s']:6.2f} s  rewritten {r['rewritten']}  device "
                      + ("-" if dev is None else f"{dev:.1f} µs") + f"  host {r.get('host_us') or 0:.1f} µs  peak "
                      + ("-" if peak is None else f"{peak:.0f} MiB") + f"  rel err {r['err_rel']:.1e} (eager "
                      f"{r['err_rel_eager']:.1e}){'' if r['ok'] else ' FAIL'}  worker {dt:.0f} s", flush=True)
            if "error" in r:
                print(f"{tag} FAILED: {r['error'][-1500:]}", flush=True)
            if cell["variant"] == "patched" and cell["rep"] == 0:
                for x in r.get("sites", []):
                    print(f"    site {x['rows']} x {'+'.join(map(str, x['widths']))} -> {x['n']}: AI "
                          f"{x['intensity']} (ridge {x['ridge']}), best case {x['best_case']}: "
                          f"{x['form'] or 'stock'} ({x['reason']})", flush=True)  # fmt: skip
                for line in r.get("decisions", []) + [s for b in r["autotune_cat_mm"] for s in b]:
                    print(f"    {line}", flush=True)
            write()
    meta["wall_s"] = round(time.perf_counter() - start, 1)
    rows = summarize(cells)
    print("\n" + (markdown(meta, rows) if rows else "no cell has both a stock and a patched run"))
    print("\nmax_autotune compile times are cold (fresh process, empty caches), as default's.")
    for s in skipped:
        print(f"skipped: {s}")
    write()
    failed = [c for c in cells if "error" in c]
    return 1 if failed or not rows or not all(r["ok"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
