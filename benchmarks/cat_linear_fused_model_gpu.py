"""Paired stock-vs-patched benchmark of the ``cat_linear`` fusion on a whole model:
what it costs at compile time, and what it gives per step.

``FusionHead`` is a multimodal late-fusion head.  Text, image and audio embeddings
(graph inputs; in training they need grad, as when the encoders are fine-tuned too)
are projected (``gelu``), fused pairwise (``relu(linear(cat([a, b])))``), fed through
a D2RL/DenseNet-style MLP trunk that concatenates the raw embeddings back in at every
layer (``linear(cat([h, text, image, audio]))``), and read by two task heads on
``cat([h, pairs...])``: 3 + 1 + depth + 2 = 12 ``F.linear(torch.cat(parts, -1), W, b)``
sites, pieces 96 to 1024 wide, made by ``gelu``/``relu`` or taken from graph inputs.
``--encoders L`` puts the head on a whole model: text and image transformer encoders
of ``L`` pre-norm layers each over ``--tokens`` tokens a sample, mean-pooled into the
head's text and image embeddings (the same 12 sites; the compile of the encoders is
what a real model's compile is mostly made of).

Each measurement is a fresh process (this script with ``--worker``) with empty
TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR.  It runs the step eagerly (fp32 and
the benchmark's dtype: the references; CUDA/cuBLAS start-up) and computes Inductor's
system key (a hash of Triton's sources, needed once per process for the FX graph
cache key: computed before either variant compiles), times the first call
of ``torch.compile(model)`` (compile + first run) with the fusion off (stock) or
on (patched: ``pre_grad_fusion_options={"cat_linear": {}}``: the post-grad
``cat_linear`` lowering, deciding per site), checks the outputs and every gradient against fp32
eager (no further from it than twice eager in the same dtype), then times the step:
``device_time.kernel_time_us`` and ``host_time_us`` (CPU: host time only), median of
``--rounds``.  Stock and patched alternate for ``--reps`` rounds per mode (forward
under ``no_grad``, forward+backward); round 1 adds a second stock process (A/A: the
noise of compile time itself).  No round is started that would end past ``--budget-s``.
The lowering's own wall time is recorded per process: its per-site check
(``cat_linear_lowering._check``, the decision included; its share of stock's compile:
with no site rewritten, the rest of the compile is stock's) and, apart, the lowering
of the sites it takes; ``--profile-pass`` adds a cProfile of the check.

    PYTHONUNBUFFERED=1 python benchmarks/cat_linear_fused_model_gpu.py --out $OUT/model.json
    python benchmarks/cat_linear_fused_model_gpu.py --device cpu --small --reps 1   # dry run
"""

import argparse
import copy
import gc
import json
import logging
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from device_time import host_time_us, kernel_time_us, spread  # noqa: E402


# name: (batch, text, image, audio, proj (text, image, audio), pair, trunk width, depth, heads)
SIZES = {
    "full": (8192, 768, 1024, 160, (256, 256, 96), 160, 512, 6, (256, 16)),
    "small": (64, 256, 128, 64, (64, 64, 64), 64, 64, 6, (32, 4)),
}
# Per output and gradient, max |x - fp32 eager| / max |fp32 eager| of the compiled
# step must be at most ERR_MULTIPLIER x eager's in the same dtype, + ERR_SLACK.
ERR_MULTIPLIER, ERR_SLACK = 2.0, 1e-3
PAIRS = [(0, 1), (0, 2), (1, 2)]  # which projected modalities are fused pairwise


class FusionHead(nn.Module):
    def __init__(self, d_text, d_image, d_audio, d_proj, d_pair, d, depth, heads):
        super().__init__()
        d_in = (d_text, d_image, d_audio)
        self.proj = nn.ModuleList(nn.Linear(k, n) for k, n in zip(d_in, d_proj))
        self.pair = nn.ModuleList(nn.Linear(d_proj[a] + d_proj[b], d_pair) for a, b in PAIRS)
        self.entry = nn.Linear(3 * d_pair, d)
        self.trunk = nn.ModuleList(nn.Linear(d + sum(d_in), d) for _ in range(depth))
        self.norm = nn.ModuleList(nn.LayerNorm(d) for _ in range(depth + 1))
        self.heads = nn.ModuleList(nn.Linear(d + 3 * d_pair, n) for n in heads)
        self.n_sites = len(PAIRS) + 1 + depth + len(heads)

    def forward(self, text, image, audio):
        x_in = [text, image, audio]
        z = [F.gelu(p(x)) for p, x in zip(self.proj, x_in)]
        fused = [torch.relu(lin(torch.cat([z[a], z[b]], -1))) for lin, (a, b) in zip(self.pair, PAIRS)]
        h = F.gelu(self.norm[0](self.entry(torch.cat(fused, -1))))
        for lin, norm in zip(self.trunk, self.norm[1:]):
            h = F.gelu(norm(lin(torch.cat([h, *x_in], -1))))
        return tuple(head(torch.cat([h, *fused], -1)) for head in self.heads)



class EncoderLayer(nn.Module):
    """A pre-norm transformer layer (attention, then a gelu MLP); no cat."""

    def __init__(self, d, heads=8):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, s, d)
        x = x + self.out(a)
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class EncodedFusionHead(nn.Module):
    """``FusionHead`` on text and image encoders of ``layers`` layers each."""

    def __init__(self, layers, d_text, d_image, *rest):
        super().__init__()
        self.text = nn.Sequential(*(EncoderLayer(d_text) for _ in range(layers)))
        self.image = nn.Sequential(*(EncoderLayer(d_image) for _ in range(layers)))
        self.head = FusionHead(d_text, d_image, *rest)
        self.n_sites = self.head.n_sites

    def forward(self, text_tokens, image_tokens, audio):
        return self.head(self.text(text_tokens).mean(1), self.image(image_tokens).mean(1), audio)


class SiteDecisions(logging.Handler):
    """The fusion's per-site verdicts (its DEBUG log: "cat_linear: ... as FORM" and
    every "skipping cat_linear: ..." reason), so a run says which of the model's
    sites fired and why the others did not."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []

    def emit(self, record):
        try:
            self.lines.append(record.getMessage())
        except Exception:
            self.lines.append(str(record.msg))


def worker(args):
    from torch._dynamo.utils import counters
    from torch._inductor import config as ic

    from torch._inductor.fx_passes import post_grad

    assert hasattr(post_grad, "register_cat_linear_lowerings"), "install the inductor-cat-linear-fused patch first"
    cuda, train = args.device == "cuda", args.mode == "fwd+bwd"
    dtype = getattr(torch, args.dtype)
    B, d_text, d_image, d_audio, *rest = SIZES["small" if args.small else "full"]
    B = args.batch or B
    torch.manual_seed(0)
    if args.encoders:
        model = EncodedFusionHead(args.encoders, d_text, d_image, d_audio, *rest).to(args.device, dtype)
        shapes = [(B, args.tokens, d_text), (B, args.tokens, d_image), (B, d_audio)]
    else:
        model = FusionHead(d_text, d_image, d_audio, *rest).to(args.device, dtype)
        shapes = [(B, k) for k in (d_text, d_image, d_audio)]
    xs = [torch.randn(*shape, device=args.device) for shape in shapes]
    gouts = [torch.randn(B, n, device=args.device) for n in rest[-1]]
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def make_step(module, fn, dt):
        ins = [x.detach().to(dt).requires_grad_(train) for x in xs]
        gs = [g.to(dt) for g in gouts]
        leaves = [*module.parameters(), *ins]

        def step():
            if not train:
                with torch.no_grad():
                    return [o.detach() for o in fn(*ins)]
            for t in leaves:
                t.grad = None
            outs = fn(*ins)
            torch.autograd.backward(outs, gs)
            return [o.detach() for o in outs] + [t.grad for t in leaves]

        return step

    # References: fp32 eager, and eager in the benchmark's dtype (this also warms
    # up CUDA and cuBLAS, so neither is in the compile time).
    m32 = copy.deepcopy(model).float()
    ref = [t.float() for t in make_step(m32, m32, torch.float32)()]
    eager = make_step(model, model, dtype)()
    ic.pre_grad_fusion_options = {"cat_linear": {}} if args.variant == "patched" else {}
    if os.environ.get("CAT_LINEAR_LOOPS_MAX_STAGES"):
        # experiment: the per-piece loops' pipeline depth (compile time against step time)
        from torch._inductor.kernel import cat_linear

        cat_linear.LOOPS_MAX_STAGES = int(os.environ["CAT_LINEAR_LOOPS_MAX_STAGES"])
    if args.max_autotune:
        ic.max_autotune = True
    decisions = SiteDecisions()
    pass_log = logging.getLogger("torch._inductor.fx_passes.cat_linear_lowering")
    pass_log.addHandler(decisions)
    pass_log.setLevel(logging.DEBUG)
    # Inductor's system key (CacheBase.get_system: a hash of Triton's sources, once
    # per process) is computed for the FX-graph-cache key by whichever compile runs
    # first.  Computed here in both variants, so that neither compile carries it.
    from torch._inductor.codecache import CacheBase

    t0 = time.perf_counter()
    CacheBase.get_system()
    system_key_s = time.perf_counter() - t0
    pass_s, profile, lower_profile = time_the_pass(args.profile_pass and args.variant == "patched")
    if args.ready_pool:
        # Inductor compiles a kernel in its own process until the compile workers
        # answer (AsyncCompile.use_process_pool); a long model compile has them
        # ready by its first kernel, a short one compiles many kernels serially.
        from torch._inductor.async_compile import AsyncCompile

        AsyncCompile.wait_pool_ready()
    triton_calls = record_triton_compiles()
    counters.clear()
    torch._dynamo.utils.reset_frame_count()
    step = make_step(model, torch.compile(model), dtype)
    sync()
    t0 = time.perf_counter()
    got = step()
    sync()
    compile_s = time.perf_counter() - t0
    phases = compile_phases()

    def rel_err(a, b):
        return ((a.float() - b).abs().max() / b.abs().max().clamp_min(1e-12)).item()

    # As dynamo's accuracy check (``same(..., fp64_ref)``): the compiled result may be
    # at most ERR_MULTIPLIER times as far from fp32 as eager in the same dtype is.
    errs = [(rel_err(g, r), rel_err(e, r)) for g, e, r in zip(got, eager, ref)]
    ok = all(ec <= ERR_MULTIPLIER * ee + ERR_SLACK for ec, ee in errs)

    def cpu_host_us(fn, calls=10):
        fn()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - t0) / calls * 1e6

    kernel, host = [], []
    gc.collect()
    gc.disable()
    for _ in range(args.rounds):
        if cuda:
            kernel.append(kernel_time_us(step))
        host.append(host_time_us(step) if cuda else cpu_host_us(step))
    gc.enable()
    res = {
        "mode": args.mode, "variant": args.variant, "compile_s": compile_s,
        "sites": model.n_sites, "rewritten": counters["inductor"]["cat_linear"],
        "counters": {k: v for k, v in counters["inductor"].items() if k.startswith("cat_linear")},
        "async_compile_cache_hit": counters["inductor"]["async_compile_cache_hit"],
        "ready_pool": args.ready_pool, "triton_compiles": summarize_compiles(triton_calls),
        "decisions": decisions.lines,
        "max_err": max(e for e, _ in errs), "max_err_eager": max(e for _, e in errs), "ok": ok,
        "phases_s": phases, "pass_s": pass_s[0], "lower_s": pass_s[1], "system_key_s": system_key_s, "pass_profile": profile_top(profile), "lower_profile": profile_top(lower_profile),
        "kernel_us": statistics.median(kernel) if kernel else None, "kernel_us_rounds": kernel,
        "host_us": statistics.median(host), "host_us_rounds": host, "batch": B,
        "torch": torch.__version__,
        "machine": torch.cuda.get_device_name() if cuda else f"cpu x{os.cpu_count()}",
    }  # fmt: skip
    with open(args.result, "w") as f:
        json.dump(res, f)



def time_the_pass(profile):
    """Wrap the lowering's per-site check (``cat_linear_lowering._check``: whether a
    matched ``mm``/``addmm`` of a cat is a site, and the decision) where post-grad's
    pattern passes hold it, to record its wall time, and with ``profile`` a cProfile
    of it: the lowering's own share of the compile.  Returns ([check seconds,
    lowering seconds], check profile, lowering profile); the lowering (``_lower``: the
    site's IR, with the template's choices where it takes the "mm" form) is timed and
    profiled apart: under max_autotune it includes the choices' benchmarks."""
    import cProfile
    import functools

    from torch._inductor.fx_passes import cat_linear_lowering, post_grad

    times = [0.0, 0.0]
    prof = cProfile.Profile() if profile else None
    lower_prof = cProfile.Profile() if profile else None

    def timed(inner, slot, prof=None):
        @functools.wraps(inner)  # keeps _inductor_lowering_function on the lowering
        def wrapper(*a, **kw):
            t0 = time.perf_counter()
            try:
                return inner(*a, **kw) if prof is None else prof.runcall(inner, *a, **kw)
            finally:
                times[slot] += time.perf_counter() - t0

        return wrapper

    post_grad.lazy_init()
    seen = set()
    for pass_dict in post_grad.pass_patterns:
        for entries in pass_dict.patterns.values():
            for e in entries:
                if e.extra_check is cat_linear_lowering._check and id(e) not in seen:
                    seen.add(id(e))
                    e.extra_check = timed(e.extra_check, 0, prof)
                    e.handler = timed(e.handler, 1, lower_prof)
    assert seen, "no cat_linear pattern in post_grad.pass_patterns: install the inductor-cat-linear-fused patch"
    return times, prof, lower_prof


def record_triton_compiles():
    """Record each ``AsyncCompile.triton`` call of the compile: the kernel's name,
    whether the compile workers took it (else Inductor compiles it in this process,
    synchronously) and the call's wall time.  Where a short compile's time goes:
    template kernels against the rest, in the workers or serially here."""
    from torch._inductor.async_compile import AsyncCompile

    calls = []
    inner = AsyncCompile.triton

    def triton(self, kernel_name, source_code, *a, **kw):
        pooled = AsyncCompile.use_process_pool()
        t0 = time.perf_counter()
        try:
            return inner(self, kernel_name, source_code, *a, **kw)
        finally:
            calls.append((kernel_name, pooled, time.perf_counter() - t0))

    AsyncCompile.triton = triton
    return calls


def summarize_compiles(calls):
    """Per kind (``triton_tem_``: templates; the rest): calls, how many the workers
    took, and the seconds spent in this process on the others."""
    out = {}
    for name, pooled, secs in calls:
        kind = "template" if "_tem_" in name else "other"
        row = out.setdefault(kind, {"calls": 0, "pooled": 0, "in_process_s": 0.0, "max_s": 0.0})
        row["calls"] += 1
        row["pooled"] += int(pooled)
        if not pooled:
            row["in_process_s"] += secs
        row["max_s"] = max(row["max_s"], secs)
    for row in out.values():  # rounded once, after the sum
        row["in_process_s"], row["max_s"] = round(row["in_process_s"], 4), round(row["max_s"], 4)
    return out


def profile_top(prof, top=25):
    """The ``top`` functions by cumulative time in the pass: [seconds, calls, name]."""
    import pstats

    try:
        stats = pstats.Stats(prof).stats
    except TypeError:  # no profile, or the pass never ran
        return None
    rows = sorted(stats.items(), key=lambda kv: kv[1][3], reverse=True)[:top]
    return [[round(ct, 4), nc, f"{os.path.basename(fn)}:{line}({name})"]
            for (fn, line, name), (cc, nc, tt, ct, callers) in rows]  # fmt: skip


def compile_phases():
    """Seconds per compile phase, as dynamo's own timers aggregate them
    (``torch._dynamo.utils.compile_times``): where a compile-time difference lies."""
    try:
        names, values = torch._dynamo.utils.compile_times(repr="csv", aggregate=True)
        return {n: float(v) for n, v in zip(names, values)}
    except Exception as e:  # the timers' API differs between releases
        return {"error": repr(e)}


def phase_deltas(stock_runs, patched_runs, top=8):
    """The phases whose median time grew most from stock to patched."""
    names = set().union(*(r.get("phases_s", {}) for r in stock_runs + patched_runs)) - {"error"}
    rows = []
    for n in names:
        s = med([{"v": r["phases_s"].get(n, 0.0)} for r in stock_runs if "phases_s" in r], "v")
        p = med([{"v": r["phases_s"].get(n, 0.0)} for r in patched_runs if "phases_s" in r], "v")
        if s is not None and p is not None:
            rows.append((p - s, n, s, p))
    return [{"phase": n, "stock_s": round(s, 3), "patched_s": round(p, 3), "delta_s": round(d, 3)}
            for d, n, s, p in sorted(rows, reverse=True)[:top]]


def run_worker(args, mode, variant):
    """One cold-cache measurement in a fresh process with empty cache directories."""
    with tempfile.TemporaryDirectory(prefix="cat_linear_model_") as tmp:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"),
                   TRITON_CACHE_DIR=os.path.join(tmp, "triton"))  # fmt: skip
        result = os.path.join(tmp, "result.json")
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--mode", mode,
               "--variant", "patched" if variant == "patched" else "stock", "--result", result,
               "--device", args.device, "--dtype", args.dtype, "--rounds", str(args.rounds),
               "--batch", str(args.batch), "--encoders", str(args.encoders), "--tokens", str(args.tokens),
               ] + (["--small"] if args.small else [])  # fmt: skip
        if args.max_autotune:
            cmd.append("--max-autotune")
        if args.profile_pass:
            cmd.append("--profile-pass")
        if args.ready_pool:
            cmd.append("--ready-pool")
        # Own process group, so that a timeout also ends its compile workers.
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, start_new_session=True)  # fmt: skip
        try:
            log = p.communicate(timeout=args.worker_timeout_s)[0]
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            return {"error": f"timed out after {args.worker_timeout_s} s"}
        if p.returncode != 0 or not os.path.exists(result):
            return {"error": f"exit {p.returncode}: " + log[-2000:]}
        with open(result) as f:
            return json.load(f)


def med(runs, key):
    vals = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def ratio(a, b):
    return round(a / b, 3) if a is not None and b else None


def summarize(mode, runs):
    s, p, aa = runs["stock"], runs["patched"], runs["stock_aa"]
    cs, cp = med(s, "compile_s"), med(p, "compile_s")
    sites = p[0]["sites"]
    row = {
        "mode": mode, "sites": sites, "reps": [len(s), len(p), len(aa)],
        "rewritten": sorted({r["rewritten"] for r in p}),
        "counters": p[0].get("counters"),
        "compile_s_stock": cs, "compile_s_patched": cp,
        "spread_stock": spread([r["compile_s"] for r in s]) if len(s) > 1 else None,
        "spread_patched": spread([r["compile_s"] for r in p]) if len(p) > 1 else None,
        "compile_patched_over_stock": ratio(cp, cs),
        "compile_overhead_s": cp - cs, "compile_overhead_s_per_site": (cp - cs) / sites,
        "compile_s_stock_aa": med(aa, "compile_s"), "aa_ratio": ratio(med(aa, "compile_s"), cs),
        "max_err_eager": max(r["max_err_eager"] for r in s + p),
        "max_err_stock": max(r["max_err"] for r in s),
        "max_err_patched": max(r["max_err"] for r in p),
        "ok": all(r["ok"] for r in s + p + aa),
    }  # fmt: skip
    row["phase_deltas"] = phase_deltas(s, p)
    # kernels whose source an earlier site already compiled (identical sites share one)
    row["async_compile_cache_hits"] = [med(s, "async_compile_cache_hit"), med(p, "async_compile_cache_hit")]
    # The check's own wall time (all graphs of one process), and its share of
    # stock's compile: with no site rewritten, the code generated is stock's
    # and this is the whole of what the lowering adds.  Then the lowering of the
    # sites it took (their IR; under max_autotune, the choices' benchmarks too).
    row["pass_s_patched"] = med(p, "pass_s")
    row["lower_s_patched"] = med(p, "lower_s")
    row["pass_share_of_compile"] = ratio(row["pass_s_patched"], cs)
    row["triton_compiles"] = [[r.get("triton_compiles") for r in s], [r.get("triton_compiles") for r in p]]
    row["pass_profile"] = next((r["pass_profile"] for r in p if r.get("pass_profile")), None)
    row["lower_profile"] = next((r["lower_profile"] for r in p if r.get("lower_profile")), None)
    for k in ("kernel_us", "host_us"):
        row[f"{k}_stock"], row[f"{k}_patched"] = med(s, k), med(p, k)
        row[f"{k}_patched_over_stock"] = ratio(med(p, k), med(s, k))
    return row


def markdown(meta, rows):
    def f(v, fmt="%.2f"):
        return "-" if v is None else fmt % v

    def pct(v):
        return "" if v is None else f" ({100 * v:.0f}%)"

    out = [
        f"{meta['machine']}, torch {meta['torch']}, {meta['dtype']}, batch {meta['batch']}, "
        f"{rows[0]['sites']} cat+linear sites"
        + (f" on text and image encoders of {meta['encoders']} layers, {meta['tokens']} tokens a sample"
           if meta.get("encoders") else " (the head alone)")
        + ". Compile: cold caches, one process each, median "
        f"(spread){', compile workers ready first' if meta.get('ready_pool') else ''}. "
        "Step: median over processes. Error: max |x - fp32| / max |fp32|.",
        "",
        "| mode | processes stock/patched/A-A | sites rewritten | compile s stock "
        "| compile s patched | patched/stock | overhead s (per site) | A/A | device µs stock "
        "| device µs patched | ratio | host µs stock | host µs patched | ratio "
        "| error eager / stock / patched |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        cells = [
            r["mode"], "/".join(map(str, r["reps"])),
            ",".join(map(str, r["rewritten"])),
            f(r["compile_s_stock"]) + pct(r["spread_stock"]),
            f(r["compile_s_patched"]) + pct(r["spread_patched"]),
            f(r["compile_patched_over_stock"], "%.3f"),
            f"{r['compile_overhead_s']:+.2f} ({r['compile_overhead_s_per_site']:+.2f})",
            f(r["aa_ratio"], "%.3f"),
            f(r["kernel_us_stock"], "%.1f"), f(r["kernel_us_patched"], "%.1f"),
            f(r["kernel_us_patched_over_stock"], "%.3f"),
            f(r["host_us_stock"], "%.1f"), f(r["host_us_patched"], "%.1f"),
            f(r["host_us_patched_over_stock"], "%.3f"),
            " / ".join(f(r[k], "%.1e") for k in ("max_err_eager", "max_err_stock", "max_err_patched"))
            + ("" if r["ok"] else " FAIL"),
        ]  # fmt: skip
        out.append("| " + " | ".join(cells) + " |")
    for r in rows:
        if r.get("phase_deltas"):
            out += ["", f"{r['mode']}: compile phases that grew most, median s stock -> patched (dynamo's timers):"]
            out += [f"- {d['phase']}: {d['stock_s']:.3f} -> {d['patched_s']:.3f} ({d['delta_s']:+.3f})"
                    for d in r["phase_deltas"]]
        hits = r.get("async_compile_cache_hits")
        if hits and None not in hits:
            out += ["", f"{r['mode']}: kernels shared by source (async_compile cache hits), stock / patched: "
                    f"{hits[0]:.0f} / {hits[1]:.0f}"]
        for variant, per in zip(("stock", "patched"), r.get("triton_compiles") or ()):
            if not any(per):
                continue
            out += ["", f"{r['mode']}: Triton compiles per {variant} process (calls, taken by workers, "
                    "s in this process, slowest call s):"]
            out += ["- " + "; ".join(f"{k} {v['calls']}, {v['pooled']}, {v['in_process_s']:.2f}, {v['max_s']:.2f}"
                                     for k, v in sorted(c.items())) for c in per if c]
        if r.get("pass_s_patched") is not None:
            out += ["", f"{r['mode']}: the per-site check's own time (median per process): "
                    f"{r['pass_s_patched']:.3f} s, {f(r['pass_share_of_compile'], '%.3f')} "
                    f"of stock's compile; lowering the sites taken: {f(r.get('lower_s_patched'), '%.3f')} s"]
        if r.get("pass_profile"):
            out += ["", f"{r['mode']}: in the check (cProfile, cumulative s, calls):"]
            out += [f"- {t:.3f} s {n}x {name}" for t, n, name in r["pass_profile"][:12]]
        if r.get("lower_profile"):
            out += ["", f"{r['mode']}: in the lowering (cProfile, cumulative s, calls):"]
            out += [f"- {t:.3f} s {n}x {name}" for t, n, name in r["lower_profile"][:25]]
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--reps", type=int, default=3, help="stock/patched processes per mode (at most)")
    ap.add_argument("--modes", nargs="+", default=["fwd", "fwd+bwd"], choices=["fwd", "fwd+bwd"])
    ap.add_argument("--no-aa", dest="aa", action="store_false", help="skip the A/A stock process")
    ap.add_argument("--rounds", type=int, default=3, help="device-time rounds per worker")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--small", action="store_true", help="small sizes (CPU dry run)")
    ap.add_argument("--batch", type=int, default=0, help="rows (0: the size's default)")
    ap.add_argument("--encoders", type=int, default=0,
                    help="layers of the text and image encoders under the head (0: the head alone)")
    ap.add_argument("--tokens", type=int, default=16, help="tokens a sample, with --encoders")
    ap.add_argument("--budget-s", type=float, default=240.0, help="start no round that would end later")
    ap.add_argument("--worker-timeout-s", type=float, default=180.0)
    ap.add_argument("--max-autotune", action="store_true", help="both variants under max_autotune")
    ap.add_argument("--ready-pool", action="store_true",
                    help="wait for Inductor's compile workers before the compile (as a long model compile finds them)")
    ap.add_argument("--profile-pass", action="store_true",
                    help="cProfile the pass in patched processes (its top functions in the JSON)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mode", help=argparse.SUPPRESS)
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)

    start = time.perf_counter()
    runs = {m: {"stock": [], "patched": [], "stock_aa": []} for m in args.modes}
    took = {}  # (mode, variant) -> wall seconds of its last worker
    meta, failed = {}, []
    for rep in range(args.reps):
        plan = []
        for mode in args.modes:
            pair = ["stock", "patched"] if rep % 2 == 0 else ["patched", "stock"]
            plan += [(mode, v) for v in pair + (["stock_aa"] if rep == 0 and args.aa else [])]
        elapsed = time.perf_counter() - start
        estimate = sum(took.get((m, v), 0.0) for m, v in plan)
        if rep > 0 and elapsed + estimate > args.budget_s:
            print(f"[{elapsed:6.1f}s] stopping before round {rep + 1}: it would take ~{estimate:.0f} s "
                  f"more, past --budget-s {args.budget_s:.0f}", flush=True)  # fmt: skip
            break
        for mode, variant in plan:
            t0 = time.perf_counter()
            r = run_worker(args, mode, variant)
            took[(mode, variant)] = time.perf_counter() - t0
            tag = f"[{time.perf_counter() - start:6.1f}s] round {rep + 1} {mode:7s} {variant:8s}"
            if "error" in r:
                failed.append({"mode": mode, "variant": variant, "rep": rep, **r})
                print(f"{tag} FAILED: {r['error']}", flush=True)
                continue
            meta = {k: r[k] for k in ("torch", "machine", "batch")}
            runs[mode][variant].append(r)
            kern = "-" if r["kernel_us"] is None else f"{r['kernel_us']:.1f}"
            print(f"{tag} compile {r['compile_s']:6.2f} s  rewritten {r['rewritten']}/{r['sites']}  "
                  f"device {kern} µs  host {r['host_us']:.1f} µs  "
                  f"error {r['max_err']:.1e}{'' if r['ok'] else ' FAIL'}", flush=True)  # fmt: skip
            if variant == "patched" and rep == 0:
                for line in r["decisions"]:
                    print(f"    {line}", flush=True)
    rows = [summarize(m, runs[m]) for m in args.modes if runs[m]["stock"] and runs[m]["patched"]]
    meta.update(dtype=args.dtype, small=args.small, ready_pool=args.ready_pool, encoders=args.encoders,
                tokens=args.tokens if args.encoders else None,
                wall_s=round(time.perf_counter() - start, 1))
    print("\n" + (markdown(meta, rows) if rows else "no mode has both a stock and a patched run"),
          flush=True)  # fmt: skip
    if args.out:
        with open(args.out, "w") as f:
            json.dump({**meta, "rows": rows, "runs": runs, "failed": failed}, f, indent=1)
    return 1 if failed or not rows or not all(r["ok"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
