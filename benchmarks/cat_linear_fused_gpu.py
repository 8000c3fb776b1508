"""Paired stock-vs-patched sweep of the ``cat_linear`` fusion on one GPU.

Needs a torch with the inductor-cat-linear-fused patch installed; "stock" is the
same torch with the fusion off, so every variant shares one process, one GPU and
one set of inputs.  Per site (M, piece widths, N; producer ``input``, ``relu``
on the first piece, or a gather of the last: ``PRODUCERS``; forward under
``no_grad`` or forward+backward) it compiles

  stock      F.linear(torch.cat(parts, -1), W, b), fusion off
  stock_aa   the same, compiled again: identical code, the A/A pair
  patched    the same, pre_grad_fusion_options={"cat_linear": {}} (default mode:
             the post-grad cat_linear lowering, deciding per site)
  upstream   upstream 2.14.1's own cat_linear rewrite (its pre-grad CatLinearFusion)
             written out as a function: per-piece F.linear on contiguous column
             slices of W, summed, the bias on the first piece; compiled with the
             fusion off.  Timed at every site; the row's ``upstream_gates`` says
             whether upstream's gates would take the site (N <= 96, >= 512 MiB of
             cat traffic, 2 to 3 parts, pieces >= 8 wide): old against new, one machine
  native     stock with config.triton.native_matmul (a candidate, not ours)
  view / mm  the fusion forced into a form (with --forms)
  mm_unfolded  mm forced with prologue_fusion off: produced pieces written by
             kernels of their own, the rest read in place (with --forms)
  stock_mat / patched_mat   both under max_autotune (with --autotune)
  floor_mat  floor under max_autotune: Inductor's own mm choices on the ready input
             (with --autotune)
  patched_mat_x  patched_mat with EXTRA_AUTOTUNE_CONFIGS offered next to the mm
             heuristic's (with --autotune-extra; an experiment, not the library's)
  floor      F.linear(x, W, b) on an already materialized x (cuBLAS alone)

and times each by GPU device time (``device_time.kernel_time_us``), repeated
``--reps`` times with the variants interleaved; medians and the spread of the
repetitions.  Each patched compile records the fusion's counters (whether the
site was rewritten and why) and whether the generated code runs a template.
The summary gives patched/stock per site, the geomean of stock/patched over the
forward sites where stock is >= 1.2x the floor, patched/upstream (at every site
and at those inside upstream's gates), and max_autotune's patched_mat/floor at the
sites where the template was chosen.  ``--small`` caps the rows at 256 (a dry run
of the harness, on ``--device cpu`` too: host time there, not device time).

    PYTHONUNBUFFERED=1 python benchmarks/cat_linear_fused_gpu.py --out $OUT/sweep.json
    python benchmarks/cat_linear_fused_gpu.py --summarize benchmarks/results/<file>.json
    python benchmarks/cat_linear_fused_gpu.py --device cpu --small --dtype float32 --no-native --shapes 0,12 --reps 1   # dry run
"""

import argparse
import contextlib
import hashlib
import json
import math
import os
import re
import statistics
import sys
import time
import types
from unittest import mock

import torch
import torch.nn.functional as F


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from device_time import kernel_time_us, spread  # noqa: E402


SHAPES = [  # (M, piece widths, N): shared/bench/cat_linear_gpu_probe.py and beyond
    (8192, (64, 64), 256),
    (8192, (128, 128, 128), 1024),
    (8192, (1024, 1024), 1024),
    (8192, (2048, 2048), 4096),
    (16384, (4096, 4096), 4096),
    (512, (2048, 2048), 8192),
    (8192, (96, 160), 1024),
    (8192, (256, 512, 128), 4096),
    (8192, (2048, 2048), 1024),
    (4096, (64, 64, 64, 64), 512),
    (2048, (512, 512), 2048),
    (8192, (256, 256), 160),
    # upstream's own sites: inside its gates (issue #31's review)
    (1 << 20, (128, 128), 64),
    (2 << 20, (64, 64), 32),
    (512 << 10, (256, 256), 96),
    (1 << 20, (96, 96, 64), 48),
    # K tails in the last piece (the one loop's masked last tile)
    (1 << 20, (128, 100), 64),
    (8192, (64, 100), 256),
    (16384, (128, 351), 1024),  # DLRM's top MLP
    (8192, (256, 300), 2048),  # compute-bound, K unaligned for cuBLAS
]
CODE_DIR = None  # --code-dir
VARIANTS = ("stock", "stock_aa", "patched", "upstream", "native", "floor")
# --autotune-extra: configs (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages)
# offered next to the mm heuristic's under max_autotune, each in the layout its
# BLOCK_K allows (kernel/cat_linear.py's _layout); a benchmark-only experiment.
EXTRA_AUTOTUNE_CONFIGS = [
    (128, 128, 128, 8, 3), (128, 128, 128, 4, 3), (64, 128, 128, 4, 4), (128, 64, 128, 4, 4),
    (64, 64, 128, 4, 4), (128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 64, 4, 5),
    (64, 128, 64, 4, 5), (64, 256, 64, 8, 3), (128, 128, 32, 4, 5), (64, 64, 64, 4, 5),
]  # fmt: skip


@contextlib.contextmanager
def extra_autotune_configs():
    """``kernel/cat_linear.py``'s max_autotune configs plus EXTRA_AUTOTUNE_CONFIGS."""
    from torch._inductor.kernel import cat_linear as kernel

    heuristic = kernel._heuristic_configs

    def configs(m, widths, mat2, layout, loops):
        out = heuristic(m, widths, mat2, layout, loops)
        seen = {tuple(sorted(c.items())) for c in out}
        for row in EXTRA_AUTOTUNE_CONFIGS:
            cfg = dict(zip(kernel._CONFIG_KEYS, row), GROUP_M=8)
            cfg = kernel._layout(cfg, widths, layout.dtype.itemsize, loops)
            if cfg is not None and tuple(sorted(cfg.items())) not in seen:
                seen.add(tuple(sorted(cfg.items())))
                out.append(cfg)
        return out

    with mock.patch.object(kernel, "_heuristic_configs", configs):
        yield
# Upstream 2.14.1's gates for its cat_linear rewrite (group_batch_fusion.py:
# CAT_LINEAR_MAX_OUTPUT_WIDTH, _CAT_TRAFFIC_FLOOR_BYTES, _MAX_PARTS, _MIN_PIECE_WIDTH).
UPSTREAM_MAX_N = 96
UPSTREAM_MIN_CAT_BYTES = 512 * 1024 * 1024
UPSTREAM_MAX_PARTS = 3
UPSTREAM_MIN_PIECE = 8
AUTOTUNE_VARIANTS = ("stock_mat", "patched_mat", "floor_mat")


# --producers: what makes the pieces. "relu": a relu'd first piece; the last
# piece gathered, "gather_rows" as an embedding lookup does (whole rows) or
# "gather_cols" as DLRM's interaction does (columns: loads that do not coalesce).
PRODUCERS = ("input", "relu", "gather_rows", "gather_cols")
GATHER_INDEX = {}  # producer -> its index tensor, set per site by run_site


def produce(producer, parts):
    """The pieces as ``producer`` makes them from the inputs ``parts``."""
    if producer == "relu":
        return (torch.relu(parts[0]), *parts[1:])
    if producer == "gather_rows":
        return (*parts[:-1], parts[-1][GATHER_INDEX[producer]])
    if producer == "gather_cols":
        return (*parts[:-1], parts[-1][:, GATHER_INDEX[producer]])
    return parts


def make_fn(producer):
    def fn(w, b, *parts):
        return F.linear(torch.cat(produce(producer, parts), -1), w, b)

    return fn


def make_upstream_fn(producer):
    """Upstream 2.14.1's ``CatLinearFusion`` rewrite of ``make_fn``'s site, as the
    function it leaves: a linear per piece on a contiguous column slice of the
    weight (sliced and copied every call: only freezing would fold it), summed in
    order, the bias on the first piece."""

    def fn(w, b, *parts):
        parts = produce(producer, parts)
        out, k0 = None, 0
        for i, part in enumerate(parts):
            k1 = k0 + part.shape[-1]
            y = F.linear(part, w[:, k0:k1].contiguous(), b if i == 0 else None)
            out = y if out is None else out + y
            k0 = k1
        return out

    return fn


def upstream_gates(m, widths, n, itemsize):
    """Would upstream 2.14.1's gates take the site (rows ``m``, 2-D)?"""
    return (
        n <= UPSTREAM_MAX_N
        and m * sum(widths) * itemsize >= UPSTREAM_MIN_CAT_BYTES
        and 2 <= len(widths) <= UPSTREAM_MAX_PARTS
        and min(widths) >= UPSTREAM_MIN_PIECE
    )


def floor_fn(w, b, x):
    return F.linear(x, w, b)


def host_time_us(fn, calls=5):
    """Median host time of ``calls`` calls after one warm-up (``--device cpu``)."""
    fn()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def run_and_keep_code(fn, *args):
    """``fn(*args)`` and the output code Inductor generated for it; unlike
    ``run_and_get_code`` it does not reset dynamo, so the variants compiled
    before keep their code."""
    from torch._inductor.graph import GraphLowering

    codes = []
    with mock.patch.object(GraphLowering, "save_output_code", codes.append):
        out = fn(*args)
    return out, codes


def fresh_code(fn, variant):
    """``fn`` with a code object of its own: dynamo caches compiled code per
    code object, so each variant keeps the code it was compiled with."""
    code = fn.__code__.replace(co_name=f"{fn.__name__}_{variant}")
    return types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)


# --forms: variant -> the form forced (mm_unfolded: with prologue fusion off)
FORCED = {"view": "view", "mm": "mm", "mm_unfolded": "mm"}


def inductor_patches(variant):
    """Inductor config of a variant: the fusion off (stock*, floor, native), on
    (patched*), or forced into a form (``FORCED``)."""
    options = {}
    if variant.startswith("patched"):
        options = {"cat_linear": {}}
    elif variant in FORCED:
        options = {"cat_linear": {"form": FORCED[variant]}}
    patches = {"pre_grad_fusion_options": options, "force_disable_caches": True}
    if variant == "mm_unfolded":
        patches["prologue_fusion"] = False
    if variant.endswith(("_mat", "_mat_x")):
        patches["max_autotune"] = True
    if variant == "native":
        patches["triton.native_matmul"] = True
    return patches


def run_site(m, widths, n, producer, bwd, variants, reps, dtype, dev="cuda", timer=None):
    """One site: compile every variant (each keeps its code), then time them
    ``reps`` times interleaved with ``timer`` (default: GPU device time)."""
    from torch._dynamo.utils import counters
    from torch._inductor import config as inductor_config

    timer = timer or kernel_time_us
    torch.manual_seed(0)
    parts = [torch.randn(m, k, device=dev, dtype=dtype, requires_grad=bwd) for k in widths]
    w = (torch.randn(n, sum(widths), device=dev, dtype=dtype) / sum(widths) ** 0.5).requires_grad_(bwd)
    b = torch.randn(n, device=dev, dtype=dtype, requires_grad=bwd)
    x = torch.cat(parts, -1).detach().requires_grad_(bwd)
    gout = torch.randn(m, n, device=dev, dtype=dtype)
    GATHER_INDEX["gather_rows"] = torch.randperm(m, device=dev)
    GATHER_INDEX["gather_cols"] = torch.randperm(widths[-1], device=dev)
    ref = make_fn(producer)(w, b, *parts).detach().float()

    compiled, row = {}, {"M": m, "Ks": list(widths), "N": n, "producer": producer,
                         "mode": "fwd+bwd" if bwd else "fwd", "compile_s": {},
                         "upstream_gates": upstream_gates(m, widths, n, dtype.itemsize)}  # fmt: skip
    torch._dynamo.reset()
    for v in variants:
        counters.clear()
        base = {"floor": floor_fn, "floor_mat": floor_fn, "upstream": make_upstream_fn(producer)}.get(v)
        fn = fresh_code(base or make_fn(producer), v)
        args = (w, b, x) if v.startswith("floor") else (w, b, *parts)
        extra = extra_autotune_configs() if v == "patched_mat_x" else contextlib.nullcontext()
        with inductor_config.patch(inductor_patches(v)), extra:
            cfn = torch.compile(fn)
            t0 = time.perf_counter()
            with torch.no_grad() if not bwd else contextlib.nullcontext():
                out, code = run_and_keep_code(cfn, *args)
            if dev == "cuda":
                torch.cuda.synchronize()
        # whether two variants compiled to the same program (a declined site
        # should compile to stock's), and the program itself under --code-dir
        source = "\n".join(code)
        # a per-compile count and the cache dir's random name aside
        program = re.sub(r"^# (AOT ID|kernel path): .*$", "", source, flags=re.MULTILINE)
        row.setdefault("code_sha1", {})[v] = hashlib.sha1(program.encode()).hexdigest()[:12]
        if CODE_DIR:
            name = f"{m}x{'+'.join(map(str, widths))}x{n}_{producer}_{row['mode']}_{v}.py"
            with open(os.path.join(CODE_DIR, name), "w") as f:
                f.write(source)
        row["compile_s"][v] = round(time.perf_counter() - t0, 3)
        if v.startswith("patched") or v in FORCED:
            c = counters["inductor"]
            row[f"{v}_counters"] = {k: c[k] for k in c if k.startswith("cat_linear")}
            row[f"{v}_template"] = any("triton_tem_" in s for s in code)
            if v.endswith(("_mat", "_mat_x")):  # the template's config autotuning chose
                row[f"{v}_config"] = sorted({" ".join(c) for s in code for c in re.findall(
                    r"(BLOCK_[MNK]) : tl.constexpr = (\d+)", s)})  # fmt: skip
        if not v.startswith("floor"):
            err = (out.detach().float() - ref).abs().max().item()
            row.setdefault("max_abs_err", {})[v] = err

        def step(cfn=cfn, args=args):
            if bwd:
                cfn(*args).backward(gout)
            else:
                with torch.no_grad():
                    cfn(*args)

        compiled[v] = step

    times = {v: [] for v in variants}
    for _ in range(reps):
        for v in variants:
            times[v].append(timer(compiled[v]))
    row["device_us"] = {v: statistics.median(t) for v, t in times.items()}
    row["spread"] = {v: round(spread(t), 4) for v, t in times.items()}
    return row


def geomean(xs):
    xs = list(xs)
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def summarize(rows):
    fwd = [r for r in rows if r["mode"] == "fwd" and "floor" in r["device_us"]]
    headroom = [r for r in fwd if r["device_us"]["stock"] >= 1.2 * r["device_us"]["floor"]]
    t = [r["device_us"] for r in rows]
    out = {
        "sites": len(rows),
        "fired": sum(bool(r.get("patched_counters", {}).get("cat_linear")) for r in rows),
        "max_patched_over_stock": max(d["patched"] / d["stock"] for d in t),
        "max_aa": max(max(d["stock_aa"] / d["stock"], d["stock"] / d["stock_aa"]) for d in t),
        "geomean_headroom_sites": len(headroom),
        "geomean_stock_over_patched": geomean(
            r["device_us"]["stock"] / r["device_us"]["patched"] for r in headroom
        ),
        "geomean_ceiling_at_floor": geomean(
            r["device_us"]["stock"] / r["device_us"]["floor"] for r in headroom
        ),
    }
    if "upstream" in (t[0] if t else {}):
        out["max_patched_over_upstream"] = max(d["patched"] / d["upstream"] for d in t)
        gated = [r for r in rows if r.get("upstream_gates")]
        out["upstream_gate_sites"] = len(gated)
        out["patched_over_upstream_at_gates"] = [
            round(r["device_us"]["patched"] / r["device_us"]["upstream"], 3) for r in gated
        ]
        out["upstream_over_stock_at_gates"] = [
            round(r["device_us"]["upstream"] / r["device_us"]["stock"], 3) for r in gated
        ]
    if "native" in (t[0] if t else {}):
        out["geomean_stock_over_native"] = geomean(
            r["device_us"]["stock"] / r["device_us"]["native"] for r in headroom
        )
    chosen = [r for r in rows if r.get("patched_mat_template")]
    if chosen:
        out["autotune_template_sites"] = len(chosen)
        out["autotune_patched_over_floor"] = [
            round(r["device_us"]["patched_mat"] / r["device_us"]["floor"], 3) for r in chosen
        ]
    extra = [r for r in rows if r.get("patched_mat_x_template")]
    if extra:
        out["autotune_extra_over_floor"] = [
            round(r["device_us"]["patched_mat_x"] / r["device_us"]["floor"], 3) for r in extra
        ]
        out["autotune_extra_over_patched_mat"] = [
            round(r["device_us"]["patched_mat_x"] / r["device_us"]["patched_mat"], 3) for r in extra
        ]
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="cat_linear_fused_gpu.json")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--shapes", default=None, help="comma-separated indices into SHAPES")
    p.add_argument("--producers", default="input,relu", help=f"comma-separated, of {PRODUCERS}")
    p.add_argument("--modes", default="fwd", help="fwd, fwd+bwd or both (comma-separated)")
    p.add_argument("--autotune", action="store_true", help="add the max_autotune pair")
    p.add_argument("--autotune-extra", action="store_true",
                   help="with --autotune: add patched_mat_x (EXTRA_AUTOTUNE_CONFIGS)")
    p.add_argument("--no-native", action="store_true")
    p.add_argument("--no-upstream", action="store_true", help="leave out upstream's rewrite")
    p.add_argument("--device", default="cuda", help="cuda, or cpu for a dry run (host time)")
    p.add_argument("--small", action="store_true", help="rows capped at 256 (a dry run)")
    p.add_argument("--forms", default="", help=f"also force these forms (comma-separated, of {', '.join(FORCED)})")
    p.add_argument("--pin-figures", default=None, metavar="TFLOPS,GBPS",
                   help="the device's dense 16-bit TFLOP/s and DRAM GB/s for the decision, where Inductor's "
                        "get_device_tflops / get_gpu_dram_gbps report implausible figures on this torch")
    p.add_argument("--code-dir", default=None, help="write each variant's output code here")
    p.add_argument("--summarize", nargs="+", default=None, metavar="JSON")
    args = p.parse_args(argv)
    global CODE_DIR
    CODE_DIR = args.code_dir
    if CODE_DIR:
        os.makedirs(CODE_DIR, exist_ok=True)
    if args.summarize:
        rows = [r for f in args.summarize for r in json.load(open(f))["rows"]]
        print(json.dumps(summarize(rows), indent=1))
        return
    variants = [v for v in VARIANTS if not (args.no_native and v == "native")
                and not (args.no_upstream and v == "upstream")]  # fmt: skip
    forms = [f for f in args.forms.split(",") if f]
    if unknown := set(forms) - set(FORCED):
        p.error(f"--forms: unknown {sorted(unknown)}; known: {', '.join(FORCED)}")
    variants += forms
    if args.pin_figures:
        tflops, gbps = (float(x) for x in args.pin_figures.split(","))
        mock.patch("torch._inductor.utils.get_device_tflops", return_value=tflops).start()
        mock.patch("torch._inductor.utils.get_gpu_dram_gbps", return_value=gbps).start()
    if args.autotune:
        variants += list(AUTOTUNE_VARIANTS)
        if args.autotune_extra:
            variants += ["patched_mat_x"]
    dtype = getattr(torch, args.dtype)
    idx = range(len(SHAPES)) if args.shapes is None else map(int, args.shapes.split(","))
    cuda = args.device == "cuda"
    result = {
        "machine": torch.cuda.get_device_name() if cuda else f"cpu x{os.cpu_count()}",
        "torch": torch.__version__,
        "dtype": args.dtype,
        "reps": args.reps,
        "command": " ".join(sys.argv),
        "rows": [],
    }
    for i in idx:
        m, widths, n = SHAPES[i]
        m = min(m, 256) if args.small else m
        for mode in args.modes.split(","):
            for producer in args.producers.split(","):
                row = run_site(m, widths, n, producer, mode == "fwd+bwd", variants, args.reps, dtype,
                               dev=args.device, timer=None if cuda else host_time_us)  # fmt: skip
                d = row["device_us"]
                up = (f"  upstream/stock={d['upstream'] / d['stock']:.3f}"
                      f" (gates {'in' if row['upstream_gates'] else 'out'})") if "upstream" in d else ""
                print(f"{m} {'+'.join(map(str, widths))} -> {n} {producer} {mode}: "
                      + " ".join(f"{v}={d[v]:.1f}" for v in variants)
                      + f"  patched/stock={d['patched'] / d['stock']:.3f}" + up
                      + f"  {row.get('patched_counters')}", flush=True)  # fmt: skip
                result["rows"].append(row)
                result["summary"] = summarize(result["rows"])
                with open(args.out, "w") as f:
                    json.dump(result, f, indent=1)
    print(json.dumps(result["summary"], indent=1))


if __name__ == "__main__":
    main()
