"""Paired stock-vs-patched benchmark of the ``cat_linear`` fusion on three models
that really compute ``linear(cat(parts, -1), W, b)`` (issue #27, part 2), on one GPU.

* ``gnn``: two EdgeConv layers (``nn(cat([x_i, x_j - x_i], -1))`` per edge, max over
  each node's in-edges), 100k nodes x 20 random in-edges = 2M edges, features 64, MLPs
  128->128->128 and 256->128->128: torch_geometric's ``EdgeConv`` if it imports, else
  ``EdgeConvRef`` (the same math: two gathers, the cat, the MLP, a scatter-max).
* ``dlrm``: bottom MLP 13->512->256->128, 26 embedding tables (10k rows, dim 128, dense
  gradients), the pairwise dots of the 27 vectors (351), top MLP on ``cat([dense,
  dots])`` 479->1024->512->1, batch 16k.  128 + 351 are not whole 64-wide K tiles: the
  default mode leaves that site to max_autotune (reported as it is, not padded).
* ``multimodal``: ``FusionHead`` of ``cat_linear_fused_model_gpu.py``, full widths and
  batch (8192), a 2-layer trunk (8 sites); its inputs need grad in training (each
  step's inputs are leaves of its own, so their gradients are compared too).

Each cell (workload x mode x tuning x variant) is a fresh process (this script with
``--worker``) with empty TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR: every compile
time is cold, max_autotune's too.  Modes: ``inference`` (forward under ``no_grad``) and
``training`` (forward+backward).  Variants, run as a pair in alternating order:
``stock`` (``pre_grad_fusion_options = {}``) and ``patched`` (``{"cat_linear": {}}``:
the post-grad ``cat_linear`` lowering deciding per site; ``--form`` forces a form),
the same torch.  A worker runs the step eagerly in fp32 (the reference) and in the
dtype (bf16 on CUDA, fp32 on CPU; ``--dtype``), computes Inductor's system key, times
the first compiled call (compile + first run), and records: the lowering's own time
(its per-site check ``cat_linear_lowering._check``, and apart the lowering of the
sites it took), the ``cat_linear*`` counters (``cat_linear``: sites rewritten,
``cat_linear_<reason>``: sites declined) and the lowering's logged reasons; per site
as the decision (``cat_linear_decision.decide``) saw it, the GEMM's arithmetic intensity
(FLOP/byte), the device's ridge point (below it: memory-bound) and the roofline's best
case; the max abs/rel error of each output and gradient against fp32 eager, and
eager's own in the dtype; peak memory (``max_memory_allocated`` growth over one step);
device time (``device_time.kernel_time_us``) and host time of a step, median of
``--rounds`` rounds and their spread; under max_autotune, the AUTOTUNE table of each
``cat_mm`` site.  The JSON at ``--out`` is rewritten after each cell; the closing table
gives patched/stock per cell against the targets (<= 1.02x device time and compile).

max_autotune's cold compiles benchmark every GEMM's choices, so they are a second run
with a budget of its own: ``--tunings max_autotune`` (inference; ``--autotune-modes``
adds training).  No cell starts that is estimated to end past ``--budget-s``, a worker
still running at the budget is killed, and every cell left out is printed.  ``--small``
(tiny sizes, one EdgeConv layer) runs one pair per workload, ``SMALL_PLAN``, which
covers both modes and tunings (``--all-cells``: all).  On CPU the decision takes no
site; ``--form view`` is the dry run of a rewrite.  In training, the weight gradient
of a site the lowering takes is split per piece by the joint-graph pattern of the
``inductor-cat-linear-weight-grad`` patch (``cat_linear_weight_grad`` counts them),
so the partitioner saves the pieces and not the cat; without that patch the cat is
saved and the forward site stays stock (``cat_linear_cat_users``).

    PYTHONUNBUFFERED=1 python benchmarks/cat_linear_workloads_gpu.py --out $OUT/wl.json
    PYTHONUNBUFFERED=1 python benchmarks/cat_linear_workloads_gpu.py --tunings max_autotune --out $OUT/wl_mat.json
    python benchmarks/cat_linear_workloads_gpu.py --device cpu --small --out /tmp/wl.json   # dry run
    python benchmarks/cat_linear_workloads_gpu.py --device cpu --small --form view --out /tmp/wl.json

Experiment knob: ``CAT_LINEAR_ONE_LOOP_FIRST=BM,BN,BK,warps,stages`` puts that config first in the
default mode's one-loop table of its BLOCK_K, in every worker.
"""

import argparse
import copy
import json
import logging
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
from device_time import host_time_us, kernel_breakdown_us, kernel_time_us, spread  # noqa: E402

WORKLOADS = ("gnn", "dlrm", "multimodal")
# gnn: (nodes, in-edges per node, features, hidden, EdgeConv layers); dlrm: (batch, dense features,
# bottom MLP, sparse features, rows per table, top MLP)
GNN_SIZES = {"full": (100_000, 20, 64, 128, 2), "small": (1000, 8, 64, 64, 1)}
DLRM_SIZES = {"full": (16384, 13, (512, 256, 128), 26, 10_000, (1024, 512)),
        "small": (256, 13, (16,), 26, 50, (32,))}  # fmt: skip
# --small's cells: one pair per workload, covering each mode and tuning.
SMALL_PLAN = [("gnn", "training", "default"), ("dlrm", "inference", "default"),
              ("multimodal", "inference", "max_autotune")]
# Guessed seconds per worker until one of the same tuning and mode has run.
PRIOR_S = {("default", "inference"): 15, ("default", "training"): 22, ("max_autotune", "inference"): 45,
           ("max_autotune", "training"): 70}  # fmt: skip


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
    """torch_geometric's EdgeConv (``auto``: if it imports; ``pyg``: or fail) or EdgeConvRef, and which."""
    if choice == "ref":
        return EdgeConvRef, "EdgeConvRef (--gnn ref)"
    try:
        import torch_geometric
        from torch_geometric.nn import EdgeConv

        return EdgeConv, f"torch_geometric.nn.EdgeConv (torch_geometric {torch_geometric.__version__})"
    except Exception as e:  # not installed, or broken against this torch
        if choice == "pyg":
            raise
        return EdgeConvRef, f"EdgeConvRef (torch_geometric not importable: {e!r})"


class GNN(nn.Module):
    def __init__(self, conv, f, h, layers):
        super().__init__()
        self.convs = nn.ModuleList(conv(mlp([2 * (f if i == 0 else h), h, h])) for i in range(layers))

    def forward(self, x, edge_index):
        for conv in self.convs:
            x = conv(x, edge_index)
        return x


class DLRM(nn.Module):
    def __init__(self, n_dense, bottom, n_sparse, rows, top):
        super().__init__()
        dim = bottom[-1]
        self.bottom = mlp([n_dense, *bottom])
        self.emb = nn.ModuleList(nn.Embedding(rows, dim) for _ in range(n_sparse))
        self.register_buffer("tril", torch.tril_indices(n_sparse + 1, n_sparse + 1, -1))  # 351 pairs for 26
        self.top = mlp([dim + self.tril.shape[1], *top, 1], last_relu=False)

    def forward(self, dense, sparse):
        d = self.bottom(dense)
        t = torch.stack([d] + [e(sparse[:, i]) for i, e in enumerate(self.emb)], 1)
        dots = torch.bmm(t, t.transpose(1, 2))[:, self.tril[0], self.tril[1]]
        return self.top(torch.cat([d, dots], 1))


def build(workload, small, gnn_choice):
    """(fp32 model, inputs, output shapes, whether float inputs need grad, description)."""
    size = "small" if small else "full"
    if workload == "gnn":
        n, k, f, h, layers = GNN_SIZES[size]
        conv, impl = edge_conv_class(gnn_choice)
        dst = torch.arange(n).repeat_interleave(k)
        edge_index = torch.stack([torch.randint(0, n, (n * k,)), dst])
        ins = [torch.randn(n, f), edge_index]
        desc = f"{layers} EdgeConv, {n} nodes x {k} = {n * k} edges, F {f}, H {h}; {impl}"
        return GNN(conv, f, h, layers), ins, [(n, h)], False, desc
    if workload == "dlrm":
        b, n_dense, bottom, n_sparse, rows, top = DLRM_SIZES[size]
        ins = [torch.randn(b, n_dense), torch.randint(0, rows, (b, n_sparse))]
        return DLRM(n_dense, bottom, n_sparse, rows, top), ins, [(b, 1)], False, f"batch {b}, {n_sparse} tables x {rows}"
    b, d_text, d_image, d_audio, *rest = HEAD_SIZES[size]
    rest[-2] = 1 if small else 2  # trunk depth: 7 or 8 sites
    ins = [torch.randn(b, d) for d in (d_text, d_image, d_audio)]
    model = FusionHead(d_text, d_image, d_audio, *rest)
    return model, ins, [(b, n) for n in rest[-1]], True, f"FusionHead {size}, batch {b}"


def make_step(module, fn, dtype, inputs, gouts, train, input_grad):
    # Leaves of their own (detach first): ``x.to(dtype)`` of an input that an earlier
    # step made require grad would be a non-leaf, whose ``.grad`` stays None.
    ins = [x.detach().to(dtype).requires_grad_(train and input_grad) if x.is_floating_point() else x
           for x in inputs]  # fmt: skip
    gs = [g.to(dtype) for g in gouts]
    leaves = [*module.parameters()] + [x for x in ins if x.requires_grad]

    def step():
        for t in leaves if train else ():
            t.grad = None
        with torch.set_grad_enabled(train):
            out = fn(*ins)
        outs = list(out) if isinstance(out, tuple) else [out]
        if train:
            torch.autograd.backward(outs, gs)
        return [o.detach() for o in outs] + [t.grad for t in leaves if train]

    step.leaves = leaves
    return step


def record_sites(cost, sites):
    """Wrap the pass's cost model (``cost.decide``) to record every site it weighs."""
    decide = cost.decide

    def recording(site):
        d = decide(site)
        flops = 2.0 * site.rows * site.k * site.n
        nbytes = ((site.rows + site.n) * site.k + site.rows * site.n) * site.itemsize
        ridge = cost.ridge_point(site.device, site.dtype)
        sites.append({"rows": site.rows, "widths": list(site.widths), "n": site.n, "produced": list(site.produced), "intensity": round(flops / nbytes, 1),
                      "ridge": ridge and round(ridge, 1), "memory_bound": ridge and flops / nbytes < ridge,
                      "best_case": ridge and round(site.speedup_bound(ridge), 3), "form": d.form,
                      "reason": d.reason})  # fmt: skip
        return d

    cost.decide = recording


def worker(a):
    from torch._dynamo.utils import counters
    from torch._inductor import config as ic
    from torch._inductor.codecache import CacheBase
    from torch._inductor.fx_passes import cat_linear_decision as cost, post_grad

    assert hasattr(post_grad, "register_cat_linear_lowerings"), "install the inductor-cat-linear-fused patch first"
    cuda, train = a.device == "cuda", a.mode == "training"
    # the template is fp16/bf16-only (on CUDA); the "view" form fp32-only
    dtype = getattr(torch, a.dtype) if a.dtype else torch.bfloat16 if cuda else torch.float32
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    torch.manual_seed(0)
    model, inputs, out_shapes, input_grad, desc = build(a.workload, a.small, a.gnn)
    inputs = [x.to(a.device) for x in inputs]
    gouts = [torch.randn(s, device=a.device) for s in out_shapes]
    model = model.to(a.device)
    m32 = copy.deepcopy(model).float()
    ref = [t.float() for t in make_step(m32, m32, torch.float32, inputs, gouts, train, input_grad)()]
    del m32
    model = model.to(dtype)
    eager = make_step(model, model, dtype, inputs, gouts, train, input_grad)()
    if os.environ.get("CAT_LINEAR_ONE_LOOP_FIRST"):
        # experiment: this one-loop config (BLOCK_M,BLOCK_N,BLOCK_K,warps,stages) first in
        # the default mode's table of its BLOCK_K (cat_linear_stages_probe_gpu.py)
        from torch._inductor.kernel import cat_linear as kc

        first = tuple(int(v) for v in os.environ["CAT_LINEAR_ONE_LOOP_FIRST"].split(","))
        table = kc._ONE_LOOP_CONFIGS[first[2]]
        kc._ONE_LOOP_CONFIGS[first[2]] = [first, *(c for c in table if c != first)]
    res = {"workload": a.workload, "mode": a.mode, "tuning": a.tuning, "variant": a.variant,
           "desc": desc, "dtype": str(dtype).replace("torch.", ""), "torch": torch.__version__, "form": a.form,
           "machine": torch.cuda.get_device_name() if cuda else f"cpu x{os.cpu_count()}"}  # fmt: skip

    def dump():
        with open(a.result, "w") as f:
            json.dump(res, f)

    forced = {} if a.form is None else {"form": a.form}
    ic.pre_grad_fusion_options = {"cat_linear": forced} if a.variant == "patched" else {}
    ic.max_autotune = a.tuning == "max_autotune"
    decisions, sites = SiteDecisions(), []
    pass_log = logging.getLogger("torch._inductor.fx_passes.cat_linear_lowering")
    pass_log.addHandler(decisions)
    pass_log.setLevel(logging.DEBUG)
    pass_log.propagate = False  # recorded, not printed
    record_sites(cost, sites)
    CacheBase.get_system()  # both variants need it once per process: not in the compile
    pass_s, *_ = time_the_pass(False)
    counters.clear()
    step = make_step(model, torch.compile(model), dtype, inputs, gouts, train, input_grad)
    sync()
    t0 = time.perf_counter()
    got = step()
    sync()
    res["compile_s"] = time.perf_counter() - t0
    c = counters["inductor"]
    res.update(pass_s=pass_s[0], lower_s=pass_s[1], rewritten=c["cat_linear"], decisions=decisions.lines, sites=sites,
               counters={k: v for k, v in c.items() if k.startswith("cat_linear")},
               phases_s=compile_phases())  # fmt: skip
    # per tensor: max |x - fp32| (abs), / max |fp32| (rel); the rule of cat_linear_fused_model_gpu.py
    errs = [((g.float() - r).abs().max().item(), (e.float() - r).abs().max().item(), r.abs().max().item() or 1e-12)
            for g, e, r in zip(got, eager, ref)]  # fmt: skip
    res.update(err_abs=max(g for g, _, _ in errs), err_rel=max(g / m for g, _, m in errs),
               err_rel_eager=max(e / m for _, e, m in errs),
               ok=all(g / m <= ERR_MULTIPLIER * e / m + ERR_SLACK for g, e, m in errs))  # fmt: skip
    del got, eager, ref
    dump()

    step()  # warm
    if cuda:  # growth over one step, from its inputs and parameters alone (no outputs or gradients)
        for t in step.leaves:
            t.grad = None
        sync(), torch.cuda.reset_peak_memory_stats()
        base, out = torch.cuda.memory_allocated(), step()
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
    for k, v in (("device", dev), ("host", host)):
        res.update({f"{k}_us": statistics.median(v) if v else None, f"{k}_us_rounds": v,
                    f"{k}_spread": spread(v) if v else None})  # fmt: skip
    if cuda and a.kernels:
        res["kernels_us"] = kernel_breakdown_us(step, calls=5)
    dump()


def run_worker(a, cell, timeout):
    """One cell in a fresh process with empty cache directories; killed after ``timeout``."""
    with tempfile.TemporaryDirectory(prefix="cat_linear_wl_") as tmp:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"),
                   TRITON_CACHE_DIR=os.path.join(tmp, "triton"))  # fmt: skip
        result = os.path.join(tmp, "result.json")
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--result", result,
               "--device", a.device, "--rounds", str(a.rounds), "--gnn", a.gnn,
               *(["--dtype", a.dtype] if a.dtype else []), *(["--form", a.form] if a.form else []),
               *[f"--{k}={cell[k]}" for k in ("workload", "mode", "tuning", "variant")]]  # fmt: skip
        cmd += ["--kernels", str(a.kernels)]
        cmd += ["--small"] if a.small else []
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, start_new_session=True)  # fmt: skip
        try:
            log, error = p.communicate(timeout=max(timeout, 1))[0], None
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            log, error = p.communicate()[0], f"killed after {timeout:.0f} s (budget or --worker-timeout-s)"
        r = json.load(open(result)) if os.path.exists(result) else {}
    if error is None and (p.returncode != 0 or "device_us_rounds" not in r):
        error = f"exit {p.returncode}: {log[-3000:]}"
    lines = log.splitlines()  # Inductor's AUTOTUNE table of each cat_mm site: its best 4 choices
    r["autotune_cat_mm"] = [lines[i:i + 7] for i, x in enumerate(lines) if x.startswith("AUTOTUNE cat_mm")]
    return {**r, "error": error} if error else r


def med(runs, key):
    vals = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def summarize(cells):
    rows = []
    for key in dict.fromkeys((c["workload"], c["mode"], c["tuning"]) for c in cells):
        runs = [c for c in cells if (c["workload"], c["mode"], c["tuning"]) == key and "err_rel" in c]
        s, p = [c for c in runs if c["variant"] == "stock"], [c for c in runs if c["variant"] == "patched"]
        if not s or not p:
            continue
        sites = p[0]["sites"]
        row = {"workload": key[0], "mode": key[1], "tuning": key[2], "processes": [len(s), len(p)],
               "form": p[0].get("form"),
               "sites": sites, "rewritten": sorted({c["rewritten"] for c in p}), "counters": p[0]["counters"],
               "pass_s": med(p, "pass_s"), "lower_s": med(p, "lower_s"), "ok": all(c["ok"] for c in s + p)}  # fmt: skip
        for k in ("err_rel_eager", "err_rel", "err_abs"):
            row[f"{k}_stock"], row[f"{k}_patched"] = max(c[k] for c in s), max(c[k] for c in p)
        for k in ("device_us", "host_us", "peak_mib", "compile_s"):
            row[f"{k}_stock"], row[f"{k}_patched"] = st, pt = med(s, k), med(p, k)
            row[f"{k}_ratio"] = round(pt / st, 3) if st and pt is not None else None
        for k in ("device_spread", "host_spread"):
            row[k] = max((c[k] for c in s + p if c.get(k) is not None), default=None)
        row["pass_share_of_compile"] = row["pass_s"] / row["compile_s_stock"] if row["pass_s"] else None
        r, cr = row["device_us_ratio"], row["compile_s_ratio"]  # the targets are on the GPU's figures
        row["never_slower"] = None if r is None else r <= 1.02
        row["compile_within_2pct"] = None if cr is None else cr <= 1.02
        rows.append(row)
    return rows


def report(meta, rows):
    def f(v, fmt="%.1f"):
        return "-" if v is None else fmt % v

    out = [f"{meta.get('machine')}, torch {meta.get('torch')}, {meta.get('dtype')}; one cold process per cell "
           "(max_autotune's too); step: median of rounds (largest spread of rounds). AI: each site's GEMM "
           "FLOP/byte, (ridge): the device's, below it memory-bound.", "",
           "| workload | mode | tuning | rewritten/sites decided | AI (ridge) | device µs stock / patched (spread) | ratio "
           "| host ratio | peak MiB stock / patched | compile s stock / patched | ratio | check s (of stock's compile) "
           "| rel err eager / stock / patched | targets |",
           "|---|---|---|---|---|---|---:|---:|---|---|---:|---:|---|---|"]  # fmt: skip
    for r in rows:
        ridge = r["sites"][0]["ridge"] if r["sites"] else None
        ai = ",".join(f"{x['intensity']:g}" for x in r["sites"]) + (f" ({ridge:g})" if ridge else "")
        t = [{True: "speed ok", False: "SLOWER"}.get(r["never_slower"], ""),
             {True: "compile ok", False: "COMPILE +"}.get(r["compile_within_2pct"], "")]  # fmt: skip
        out.append("| " + " | ".join([
            r["workload"], r["mode"], r["tuning"], f"{','.join(map(str, r['rewritten']))}" + (f" ({r['form']} forced)" if r.get("form") else f"/{len(r['sites'])}"), ai,
            f"{f(r['device_us_stock'])} / {f(r['device_us_patched'])} ({f(r['device_spread'], '%.3f')})",
            f(r["device_us_ratio"], "%.3f"), f(r["host_us_ratio"], "%.3f"),
            f"{f(r['peak_mib_stock'])} / {f(r['peak_mib_patched'])}",
            f"{f(r['compile_s_stock'], '%.2f')} / {f(r['compile_s_patched'], '%.2f')}",
            f(r["compile_s_ratio"], "%.3f"),
            f"{f(r['pass_s'], '%.3f')} ({f(r['pass_share_of_compile'] and 100 * r['pass_share_of_compile'])}%)",
            f"{f(r['err_rel_eager_stock'], '%.1e')} / {f(r['err_rel_stock'], '%.1e')} / "
            f"{f(r['err_rel_patched'], '%.1e')}" + ("" if r["ok"] else " FAIL"), ", ".join(x for x in t if x)]) + " |")
    out.append("\nCompile ratios of single cold processes carry their process-to-process noise (--reps N gives "
               "medians); the per-site check's own time and share of stock's compile are its cost.  On CPU the host times are "
               "one call per round: a dry run's, not figures.")
    out.append("\nWhere the rewritten sites are memory-bound (AI below the ridge), and what the step got:")
    for r in rows:
        fired = [x for x in r["sites"] if x["form"]]
        if fired:
            mb = [x for x in fired if x["memory_bound"]] if fired[0]["ridge"] else "unknown (no ridge here)"
            out.append(f"- {r['workload']} {r['mode']} {r['tuning']}: of {len(fired)} rewritten sites, memory-bound "
                       f"{len(mb) if isinstance(mb, list) else mb} (AI {', '.join(str(x['intensity']) for x in fired)}); device time "
                       f"patched/stock {f(r['device_us_ratio'], '%.3f')}, peak memory {f(r['peak_mib_ratio'], '%.3f')}")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="JSON, rewritten after every cell")
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    ap.add_argument("--modes", nargs="+", default=["inference", "training"], choices=["inference", "training"])
    ap.add_argument("--tunings", nargs="+", choices=["default", "max_autotune"],
                    help="default: 'default' alone (both with --small)")
    ap.add_argument("--autotune-modes", nargs="+", default=["inference"], choices=["inference", "training"],
                    help="the modes run under max_autotune (after every default cell)")
    ap.add_argument("--reps", type=int, default=1, help="processes per cell")
    ap.add_argument("--rounds", type=int, default=3, help="timing rounds per process")
    ap.add_argument("--budget-s", type=float, default=200.0, help="start no cell estimated to end later; kill a worker still running then")
    ap.add_argument("--worker-timeout-s", type=float, default=180.0)
    ap.add_argument("--gnn", default="auto", choices=["auto", "pyg", "ref"],
                    help="EdgeConv: torch_geometric's if importable (auto), or EdgeConvRef")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default=None, choices=["bfloat16", "float16", "float32"],
                    help="default: bfloat16 on CUDA, float32 elsewhere")
    ap.add_argument("--form", default=None, choices=["view", "mm"],
                    help="patched forced into this form (dry runs: on CPU the decision takes no site)")
    ap.add_argument("--kernels", type=int, default=0, help="print each cell's N costliest GPU kernels (µs per step)")
    ap.add_argument("--small", action="store_true", help="tiny sizes and SMALL_PLAN's cells (CPU dry run)")
    ap.add_argument("--all-cells", action="store_true", help="with --small: every cell, not SMALL_PLAN")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    for hidden in ("--workload", "--mode", "--tuning", "--variant", "--result"):
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        return worker(a)

    start, plan, skipped = time.perf_counter(), [], []
    a.tunings = a.tunings or (["default", "max_autotune"] if a.small else ["default"])
    for tuning in a.tunings:
        modes = a.modes if tuning == "default" else [m for m in a.modes if m in a.autotune_modes]
        if len(modes) < len(a.modes):
            skipped.append(f"max_autotune {sorted(set(a.modes) - set(modes))}: not in --autotune-modes")
        keys = [(w, m) for w in a.workloads for m in modes]
        if a.small and not a.all_cells:
            keys = [(w, m) for w, m in keys if (w, m, tuning) in SMALL_PLAN]
        for rep in range(a.reps):
            for i, (w, m) in enumerate(keys):
                order = ["stock", "patched"] if (i + rep) % 2 == 0 else ["patched", "stock"]
                plan.append([{"workload": w, "mode": m, "tuning": tuning, "variant": v, "rep": rep} for v in order])
    skipped += ["max_autotune: not run (--tunings max_autotune runs it)"] if "max_autotune" not in a.tunings else []
    if a.small and not a.all_cells:
        skipped.append(f"--small runs only {SMALL_PLAN} (--all-cells: every cell)")
    meta = {"command": " ".join([sys.executable, *sys.argv]), "host": platform.node(), "cpus": os.cpu_count(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"), "budget_s": a.budget_s, "small": a.small,
            "form": a.form}  # fmt: skip
    cells, took = [], {}  # seconds per worker: by (workload, mode, tuning), and the most by (tuning, mode)

    def write():
        if a.out:
            with open(a.out, "w") as f:
                json.dump({"meta": meta, "rows": summarize(cells), "cells": cells, "skipped": skipped}, f, indent=1)

    for pair in plan:
        w, m, tuning, rep = (pair[0][k] for k in ("workload", "mode", "tuning", "rep"))
        name = f"{w} {m} {tuning}" + (f" rep {rep + 1}" if a.reps > 1 else "")
        for j, cell in enumerate(pair):
            per = took.get((w, m, tuning)) or took.get((tuning, m)) or (0 if a.small else PRIOR_S[(tuning, m)])
            t0 = time.perf_counter()
            if t0 - start + per * (2 - j) > a.budget_s:  # the rest of the pair would end past the budget
                skipped.append(f"{name} {'+'.join(c['variant'] for c in pair[j:])}: not started at {t0 - start:.0f} s"
                               f" of the {a.budget_s:.0f} s budget (estimate ~{per * (2 - j):.0f} s)")
                print(f"[{t0 - start:6.1f}s] skipped {skipped[-1]}", flush=True)
                break
            r = {**run_worker(a, cell, min(a.worker_timeout_s, a.budget_s - (t0 - start))), **cell}
            r["worker_s"] = dt = time.perf_counter() - t0
            took[(w, m, tuning)], took[(tuning, m)] = dt, max(dt, took.get((tuning, m), 0))
            cells.append(r)
            if "machine" in r:
                meta.update({k: r[k] for k in ("machine", "torch", "dtype")})
                meta.setdefault("workloads", {})[w] = r["desc"]
            tag = f"[{time.perf_counter() - start:6.1f}s] {name} {cell['variant']:7s}"
            if "err_rel" in r:
                g = {k: "-" if r.get(k) is None else f"{r[k]:.1f}" for k in ("device_us", "host_us", "peak_mib")}
                print(f"{tag} compile {r['compile_s']:6.2f} s  rewritten {r['rewritten']}"
                      f" (weight grad {r.get('counters', {}).get('cat_linear_weight_grad', 0)})  device {g['device_us']} µs"
                      f"  host {g['host_us']} µs  peak {g['peak_mib']} MiB  rel err {r['err_rel']:.1e} (eager "
                      f"{r['err_rel_eager']:.1e}){'' if r['ok'] else ' FAIL'}  worker {dt:.0f} s", flush=True)
            for kernel, us in list(r.get("kernels_us", {}).items())[:a.kernels]:
                print(f"    {us:9.1f} µs  {kernel[:110]}")
            if "error" in r:
                print(f"{tag} FAILED: {r['error'][-1500:]}", flush=True)
            if cell["variant"] == "patched" and rep == 0:
                for x in r.get("sites", []):
                    print(f"    site {x['rows']} x {'+'.join(map(str, x['widths']))} -> {x['n']}: AI {x['intensity']}"
                          f" (ridge {x['ridge']}), best case {x['best_case']}: {x['form'] or 'stock'} ({x['reason']})")
                lines = [x for x in r.get("decisions", []) if not any(y["reason"] in x for y in r.get("sites", []))]
                for line in lines + [s for b in r["autotune_cat_mm"] for s in b]:  # the rest: the pass's log
                    print(f"    {line}", flush=True)
            write()
    meta["wall_s"] = round(time.perf_counter() - start, 1)
    rows = summarize(cells)
    print("\n" + (report(meta, rows) if rows else "no cell has both a stock and a patched run"))
    for s in skipped:
        print(f"skipped: {s}")
    write()
    return 1 if any("error" in c for c in cells) or not rows or not all(r["ok"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
