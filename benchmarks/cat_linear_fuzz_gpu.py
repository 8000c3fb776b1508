#!/usr/bin/env python3
"""
Differential GPU fuzzer for Inductor's ``cat_linear`` post-grad lowering
(``mm(cat(parts, 1), W)`` / ``addmm(b, cat(parts, 1), W)`` computed by the
in-place Triton template ``triton_cat_mm``).

Every generated case is a small program of the kind real models contain (2-4
pieces concatenated on the last dim and fed to a linear / addmm / matmul),
compiled with ``pre_grad_fusion_options={"cat_linear": {"form": "mm"}}`` (the
template forced wherever it can run) or ``{"cat_linear": {}}`` (the per-site
decision), forward-only under ``no_grad`` or forward+backward.  Each compiled
output and gradient is compared with an fp32 eager reference computed from the
same (16-bit rounded) inputs upcast:

    max|compiled - ref| <= 2 * max|eager_in_dtype - ref| + 1e-2 * max|ref| + 1e-3

A compile/run crash is a finding only when stock (the option off) runs the
same program; a mismatch is re-checked against stock too (both are reported,
separately).  Per case it also records whether the site was taken (counter
``cat_linear``), the decline counters, and whether the generated code holds a
template kernel (``triton_tem_``).

Usage (one H200, torch 2.11 + patch set):

    python benchmarks/cat_linear_fuzz_gpu.py --seconds 240 --seed 0 --out /tmp/cat_linear_fuzz.json

    # rerun one case of a run (same seed), or a case dict from the JSON:
    python benchmarks/cat_linear_fuzz_gpu.py --seed 0 --only 17 --out /tmp/one.json
    python benchmarks/cat_linear_fuzz_gpu.py --replay '{"dtype": "bf16", ...}' --out /tmp/one.json
    # print the first cases of a seed without running them:
    python benchmarks/cat_linear_fuzz_gpu.py --seed 0 --print-cases 20

    # harness check on CPU (everything declines there):
    python benchmarks/cat_linear_fuzz_gpu.py --device cpu --seconds 60 --out /tmp/cpu.json

Cases run in a worker subprocess (restarted after a CUDA-context-killing error,
a hard crash or a per-case timeout, ``--case-timeout``); the parent writes the
JSON summary after every case (so a kill still leaves results), next to it
``<out>.jsonl`` (raw events), ``<out>.worker.log`` (the worker's stdout and
stderr) and ``<out>.code/`` (the generated code of each finding).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
import traceback

# --------------------------------------------------------------------------
# case generation (no torch needed: the parent does not import it)
# --------------------------------------------------------------------------

WIDTHS = [1, 8, 16, 24, 40, 64, 96, 100, 128, 160, 200, 256, 300]
ROWS = [1, 7, 64, 129, 1000, 4096]
NS = [1, 8, 48, 64, 96, 128, 200, 256, 1024]
# small sizes for the CPU harness check
CPU_ROWS = [1, 7, 64, 129]
CPU_NS = [1, 8, 48, 64]

# piece producers: (kind, weight)
KINDS = [
    ("in", 20),  # a graph input, read in place
    ("relu", 8),  # pointwise producers: the template computes them in its loads
    ("gelu", 6),
    ("mul", 6),  # x * s (s a learned [w] scale)
    ("sub", 6),  # x - y
    ("gather", 8),  # table[idx]
    ("gather_diff", 6),  # table[j] - table[i] (x_j - x_i of two gathers)
    ("gather_cols", 4),  # x[..., idx] (a gather along K)
    ("t", 6),  # transposed storage
    ("slice", 6),  # a column slice of a wider tensor (offset, row stride > w)
    ("colstride", 4),  # every second column (column stride 2)
    ("rowstride", 3),  # every second row
    ("expand", 4),  # a [w] vector broadcast over the rows (row stride 0)
    ("dup", 2),  # the same piece twice in the cat
]
VIEW_KINDS = ("t", "slice", "colstride", "rowstride", "expand")
# opt-in producers (--extra-kinds): appended to KINDS, so they change every
# seed's cases; the recorded seeds ran without them
EXTRA_KINDS = {
    "take": ("take", 6),  # torch.gather(x, -1, idx): aten.gather along K
}
HEADS = [
    ("linear", 18),  # F.linear(x, W)
    ("linear_bias", 20),  # F.linear(x, W, b)
    ("matmul_t", 10),  # x @ W.t()
    ("matmul_kn", 8),  # x @ W   (W stored [K, N])
    ("addmm", 16),  # torch.addmm(b, x2d, W.t(), beta=, alpha=)
    ("two_heads", 10),  # F.linear(x, W, b), F.linear(x, W2): two sites on one cat
    ("mlp", 8),  # F.linear(gelu(F.linear(x, W, b)), W2)
]
EXTRAS = [
    ("none", 45),
    ("cat_out", 12),  # the cat is returned too
    ("epilogue", 14),  # tanh(y)
    ("residual", 14),  # y + R
    ("piece_reuse", 10),  # y + parts[0].sum(-1): piece 0's producer has another reader
    ("head2_relu", 5),  # a second head on the same cat: relu(F.linear(x, W3))
]
# addmm's (beta, alpha): anything but (1, 1) must be declined
SCALES = [(1.0, 1.0)] * 6 + [(0.5, 1.0), (1.0, 2.0), (0.0, 1.0), (1.0, 0.5)]


def wchoice(rng: random.Random, table):
    items, weights = zip(*table)
    return rng.choices(items, weights=weights)[0]


def gen_case(seed: int, idx: int, device: str) -> dict:
    rng = random.Random(f"cat_linear:{seed}:{idx}")
    small = device == "cpu"
    rows_set, ns = (CPU_ROWS, CPU_NS) if small else (ROWS, NS)
    c: dict = {"idx": idx, "seed": seed}
    c["dtype"] = rng.choices(["bf16", "fp16", "fp32"], weights=[45, 45, 10])[0]
    c["form"] = rng.choices(["mm", "default"], weights=[60, 40])[0]
    c["mode"] = rng.choices(["nograd", "train"], weights=[55, 45])[0]
    c["grads"] = rng.choices(["all", "inputs", "weights"], weights=[50, 25, 25])[0]
    # one row is rare in real GEMMs (and Inductor turns such an mm into a reduction)
    m = rng.choices(rows_set, weights=[1] + [3] * (len(rows_set) - 1))[0]
    if rng.random() < 0.4:
        c["lead"] = [rng.choice([2, 3, 4]), m]  # 3-D: [B, T, K], viewed to 2-D
    else:
        c["lead"] = [m]
    nparts = rng.choice([2, 2, 3, 3, 4])
    pieces = []
    for i in range(nparts):
        kind = wchoice(rng, KINDS)
        if kind == "dup" and i == 0:
            kind = "in"
        p = {"kind": kind, "w": rng.choice(WIDTHS)}
        if kind == "dup":
            p["w"] = pieces[0]["w"]
        if kind in VIEW_KINDS:
            # the view made inside the compiled function, or by the caller
            # (a non-contiguous / offset / stride-0 graph input)
            p["where"] = rng.choice(["fn", "arg"])
        if kind == "slice":
            p["o"] = rng.choice([1, 3, 8, 64])
            p["e"] = rng.choice([0, 5, 32])
        pieces.append(p)
    if all(p["kind"] in ("expand", "dup") for p in pieces):
        pieces[0] = {"kind": "in", "w": pieces[0]["w"]}
    c["pieces"] = pieces
    c["vocab"] = rng.choice([17, 1000, 5000])
    c["N"] = rng.choice(ns)
    c["head"] = wchoice(rng, HEADS)
    c["beta"], c["alpha"] = rng.choice(SCALES) if c["head"] == "addmm" else (1.0, 1.0)
    c["N2"] = rng.choice(ns)
    c["extra"] = wchoice(rng, EXTRAS)
    t = c["lead"][-1]
    c["dyn"] = rng.choices(["static", "mark", "dyn_true"], weights=[50, 35, 15])[0]
    if t < 2:
        c["dyn"] = "static"
    if c["dyn"] != "static":
        # a second call at another size, through the same (dynamic) graph
        c["T2"] = rng.choice([r for r in rows_set if r not in (1, t)])
    c["data_seed"] = rng.getrandbits(40)
    return c


def describe(c: dict) -> str:
    code = {
        "in": "i", "relu": "r", "gelu": "g", "mul": "m", "sub": "s", "gather": "G",
        "gather_diff": "D", "gather_cols": "C", "t": "t", "slice": "S", "colstride": "c",
        "rowstride": "R", "expand": "e", "dup": "d", "take": "X",
    }
    parts = ",".join(
        f"{p['w']}{code[p['kind']]}{'^' if p.get('where') == 'arg' else ''}"
        for p in c["pieces"]
    )
    head = c["head"]
    if head == "addmm" and (c["beta"], c["alpha"]) != (1.0, 1.0):
        head += f"(b={c['beta']},a={c['alpha']})"
    dyn = c["dyn"] + (f"->{c['T2']}" if "T2" in c else "")
    mode = c["mode"] + (f"/{c['grads']}" if c["mode"] == "train" else "")
    return (
        f"{c['dtype']:4} {c['form']:7} {mode:14} lead={tuple(c['lead'])} "
        f"K=[{parts}] N={c['N']} {head} x={c['extra']} {dyn}"
    )


# --------------------------------------------------------------------------
# worker: builds, runs and compares one case at a time (imports torch)
# --------------------------------------------------------------------------


def worker_main(args) -> int:
    args_ = args
    os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "0")
    os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "0")
    import contextlib

    import torch
    import torch.nn.functional as F
    from torch._dynamo.utils import counters
    from torch._inductor import config as ic
    from torch._inductor.utils import run_and_get_code

    ic.fx_graph_cache = False
    try:
        import torch._functorch.config as fconfig

        fconfig.enable_autograd_cache = False
    except Exception:
        pass
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    device = args.device
    DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    events = open(args.events, "a", buffering=1)

    def emit(ev: dict) -> None:
        events.write(json.dumps(ev, default=str) + "\n")
        events.flush()

    # ---- programs ---------------------------------------------------------

    def piece_specs(p: dict, lead: list, vocab: int) -> list:
        """The graph inputs piece ``p`` reads at leading shape ``lead``: shape,
        role (input / param / index), the caller-side view, dynamic marks
        ((dim, exact) on the tensor passed in)."""
        L = list(lead)
        r = len(L) - 1  # the rows dim (T for 3-D)
        w, kind, where = p["w"], p["kind"], p.get("where", "fn")

        def A(shape, role="input", view=None, marks=(), scale=1.0, high=None):
            return dict(shape=list(shape), role=role, view=view, marks=list(marks),
                        scale=scale, high=high)

        outside = p if where == "arg" else None
        if kind in ("in", "relu", "gelu"):
            return [A(L + [w], marks=[(r, True)])]
        if kind == "mul":
            return [A(L + [w], marks=[(r, True)]), A([w], role="param")]
        if kind == "sub":
            return [A(L + [w], marks=[(r, True)]), A(L + [w], marks=[(r, True)])]
        if kind == "gather":
            return [A([vocab, w]), A(L, role="index", high=vocab, marks=[(r, True)])]
        if kind == "gather_cols":
            return [A(L + [vocab], marks=[(r, True)]), A([w], role="index", high=vocab)]
        if kind == "take":
            return [A(L + [vocab], marks=[(r, True)]),
                    A(L + [w], role="index", high=vocab, marks=[(r, True)])]
        if kind == "gather_diff":
            return [
                A([vocab, w]),
                A(L, role="index", high=vocab, marks=[(r, True)]),
                A(L, role="index", high=vocab, marks=[(r, True)]),
            ]
        if kind == "t":
            stored = L[:-1] + [w, L[-1]]
            return [A(stored, view=outside, marks=[(r if outside else r + 1, True)])]
        if kind == "slice":
            return [A(L + [w + p["o"] + p["e"]], view=outside, marks=[(r, True)])]
        if kind == "colstride":
            return [A(L + [2 * w], view=outside, marks=[(r, True)])]
        if kind == "rowstride":
            return [A(L[:r] + [2 * L[r]] + [w], view=outside,
                      marks=[(r, bool(outside))])]
        if kind == "expand":
            if outside:
                return [A([1] * len(L) + [w], view=outside, marks=[(r, False)])]
            return [A([w])]
        if kind == "dup":
            return []
        raise AssertionError(kind)

    def apply_view(p: dict, t, lead=None):
        kind = p["kind"]
        if kind == "t":
            return t.transpose(-1, -2)
        if kind == "slice":
            return t[..., p["o"] : p["o"] + p["w"]]
        if kind == "colstride":
            return t[..., ::2]
        if kind == "rowstride":
            r = t.dim() - 2
            return t[(slice(None),) * r + (slice(None, None, 2),)]
        if kind == "expand":
            return t.expand(*lead, p["w"])
        raise AssertionError(kind)

    def out_width(c: dict) -> int:
        return c["N2"] if c["head"] == "mlp" else c["N"]

    def head_specs(c: dict, lead: list) -> list:
        K, N, N2 = sum(p["w"] for p in c["pieces"]), c["N"], c["N2"]
        r = len(lead) - 1
        P = lambda shape, scale: dict(shape=list(shape), role="param", view=None,
                                      marks=[], scale=scale, high=None)
        h = c["head"]
        specs = {
            "linear": [P([N, K], K ** -0.5)],
            "linear_bias": [P([N, K], K ** -0.5), P([N], 0.5)],
            "matmul_t": [P([N, K], K ** -0.5)],
            "matmul_kn": [P([K, N], K ** -0.5)],
            "addmm": [P([N, K], K ** -0.5), P([N], 0.5)],
            "two_heads": [P([N, K], K ** -0.5), P([N], 0.5), P([N2, K], K ** -0.5)],
            "mlp": [P([N, K], K ** -0.5), P([N], 0.5), P([N2, N], N ** -0.5)],
        }[h]
        if c["extra"] == "residual":
            specs.append(dict(shape=list(lead) + [out_width(c)], role="input",
                              view=None, marks=[(r, True)], scale=1.0, high=None))
        if c["extra"] == "head2_relu":
            specs.append(P([N, K], K ** -0.5))
        return specs

    def all_specs(c: dict, lead: list) -> list:
        specs = []
        for p in c["pieces"]:
            specs += piece_specs(p, lead, c["vocab"])
        return specs + head_specs(c, lead)

    def make_fn(c: dict):
        pieces = c["pieces"]
        counts = [len(piece_specs(p, [2], c["vocab"])) for p in pieces]
        h, extra, beta, alpha = c["head"], c["extra"], c["beta"], c["alpha"]

        def fn(*args):
            slots, i = [], 0
            for n in counts:
                slots.append(args[i : i + n])
                i += n
            rest = list(args[i:])
            parts = [None] * len(pieces)
            for j, (p, s) in enumerate(zip(pieces, slots)):
                k, inside = p["kind"], p.get("where", "fn") == "fn"
                if k == "in":
                    parts[j] = s[0]
                elif k == "relu":
                    parts[j] = torch.relu(s[0])
                elif k == "gelu":
                    parts[j] = F.gelu(s[0])
                elif k == "mul":
                    parts[j] = s[0] * s[1]
                elif k == "sub":
                    parts[j] = s[0] - s[1]
                elif k == "gather":
                    parts[j] = s[0][s[1]]
                elif k == "gather_cols":
                    parts[j] = s[0][..., s[1]]
                elif k == "gather_diff":
                    parts[j] = s[0][s[2]] - s[0][s[1]]
                elif k == "take":
                    parts[j] = torch.gather(s[0], -1, s[1])
                elif k in ("t", "slice", "colstride", "rowstride"):
                    parts[j] = apply_view(p, s[0]) if inside else s[0]
            lead = next(x.shape[:-1] for x in parts if x is not None)
            for j, (p, s) in enumerate(zip(pieces, slots)):
                if p["kind"] == "expand":
                    inside = p.get("where", "fn") == "fn"
                    parts[j] = apply_view(p, s[0], lead) if inside else s[0]
            for j, p in enumerate(pieces):
                if p["kind"] == "dup":
                    parts[j] = parts[0]
            x = torch.cat(parts, -1)
            W = rest.pop(0)
            outs = []
            if h == "linear":
                y = F.linear(x, W)
            elif h == "linear_bias":
                y = F.linear(x, W, rest.pop(0))
            elif h == "matmul_t":
                y = x @ W.t()
            elif h == "matmul_kn":
                y = x @ W
            elif h == "addmm":
                b = rest.pop(0)
                x2 = x.reshape(-1, x.shape[-1])
                y = torch.addmm(b, x2, W.t(), beta=beta, alpha=alpha)
                y = y.reshape(*x.shape[:-1], y.shape[-1])
            elif h == "two_heads":
                b, W2 = rest.pop(0), rest.pop(0)
                y = F.linear(x, W, b)
                outs.append(F.linear(x, W2))
            elif h == "mlp":
                b, W2 = rest.pop(0), rest.pop(0)
                y = F.linear(F.gelu(F.linear(x, W, b)), W2)
            if extra == "epilogue":
                y = torch.tanh(y)
            elif extra == "residual":
                y = y + rest.pop(0)
            elif extra == "piece_reuse":
                y = y + parts[0].sum(-1, keepdim=True)
            elif extra == "cat_out":
                outs.append(x)
            elif extra == "head2_relu":
                W3 = rest.pop(0)
                outs.append(torch.relu(F.linear(x, W3)))
            return (y, *outs)

        return fn

    # ---- inputs -----------------------------------------------------------

    base_cache: dict = {}

    def base_values(c: dict, lead: list, call: int) -> list:
        key = (tuple(lead), call)
        if key not in base_cache:
            g = torch.Generator().manual_seed(c["data_seed"] + 7919 * call)
            vals = []
            for s in all_specs(c, lead):
                if s["role"] == "index":
                    vals.append(torch.randint(0, s["high"], s["shape"], generator=g))
                else:
                    vals.append(torch.randn(s["shape"], generator=g) * s["scale"])
            base_cache[key] = vals
        return base_cache[key]

    def needs_grad(c: dict, role: str) -> bool:
        if c["mode"] != "train" or role == "index":
            return False
        return {"all": True, "inputs": role == "input", "weights": role == "param"}[c["grads"]]

    def materialize(c: dict, lead: list, call: int, dtype, upcast: bool):
        """(leaves, args): leaves hold the gradients, args (leaves or the
        caller's views of them) go to the function."""
        specs, vals = all_specs(c, lead), base_values(c, lead, call)
        leaves, args = [], []
        views = [p for p in c["pieces"] for _ in piece_specs(p, lead, c["vocab"])]
        views += [None] * (len(specs) - len(views))
        for s, v, p in zip(specs, vals, views):
            if s["role"] == "index":
                t = v.to(device)
            else:
                t = v.to(DT[c["dtype"]])
                t = (t.float() if upcast else t.to(dtype)).to(device)
                t.requires_grad_(needs_grad(c, s["role"]))
            leaves.append(t)
            a = apply_view(p, t, lead) if s["view"] is not None else t
            args.append(a)
        return leaves, args, specs

    def out_grads(c: dict, outs, call: int, upcast: bool) -> list:
        g = torch.Generator().manual_seed(c["data_seed"] + 104729 + call)
        res = []
        for o in outs:
            v = torch.randn(tuple(o.shape), generator=g).to(DT[c["dtype"]])
            res.append((v.float() if upcast else v).to(device))
        return res

    def calls_of(c: dict) -> list:
        leads = [list(c["lead"])]
        if "T2" in c:
            leads.append(list(c["lead"][:-1]) + [c["T2"]])
        return leads

    def step_fn(c: dict, f, args, call: int, upcast: bool):
        def step():
            with torch.no_grad() if c["mode"] == "nograd" else contextlib.nullcontext():
                outs = f(*args)
                if c["mode"] == "train":
                    gs = out_grads(c, outs, call, upcast)
                    pairs = [(o, g) for o, g in zip(outs, gs) if o.requires_grad]
                    if pairs:
                        torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
            return outs

        return step

    def run_eager(c: dict, upcast: bool) -> list:
        fn, res = make_fn(c), []
        for call, lead in enumerate(calls_of(c)):
            leaves, args, _ = materialize(c, lead, call, torch.float32 if upcast else DT[c["dtype"]], upcast)
            outs = step_fn(c, fn, args, call, upcast)()
            res.append(([o.detach() for o in outs], [getattr(l, "grad", None) for l in leaves]))
        return res

    def option_ctx(form: str | None):
        if form is None:  # stock
            return ic.patch(pre_grad_fusion_options={})
        opts = {} if form == "default" else {"form": form}
        return ic.patch(pre_grad_fusion_options={"cat_linear": opts})

    def run_compiled(c: dict, form: str | None):
        torch._dynamo.reset()
        counters.clear()
        fn = make_fn(c)
        cfn = torch.compile(fn, dynamic=True if c["dyn"] == "dyn_true" else None)
        res, codes = [], []
        for call, lead in enumerate(calls_of(c)):
            leaves, args, specs = materialize(c, lead, call, DT[c["dtype"]], False)
            if call == 0 and c["dyn"] == "mark":
                for a, s in zip(args, specs):
                    for dim, exact in s["marks"]:
                        if a.shape[dim] > 1:
                            if exact:
                                torch._dynamo.mark_dynamic(a, dim)
                            else:
                                torch._dynamo.maybe_mark_dynamic(a, dim)
            step = step_fn(c, cfn, args, call, False)
            if form is not None and args_.inject in ("crash", "die", "hang"):
                if args_.inject == "crash":
                    raise RuntimeError("injected crash (--inject crash)")
                if args_.inject == "die":
                    os._exit(9)
                time.sleep(1e6)
            with option_ctx(form):
                # every call's code: a later call may recompile (dynamic rows),
                # and the counters count every compile
                outs, call_codes = run_and_get_code(step)
                codes += call_codes
            if device == "cuda":
                torch.cuda.synchronize()
            outs = [o.detach() for o in outs]
            if form is not None and args_.inject == "mismatch":
                outs[0] = outs[0] + 0.5 * outs[0].abs().max()
            res.append((outs, [getattr(l, "grad", None) for l in leaves]))
        cnt = {k: v for k, v in counters["inductor"].items() if k.startswith("cat_linear")}
        return res, codes, cnt

    # ---- comparison ------------------------------------------------------

    def cmp_tensor(cv, ev, rv):
        """(ratio err/bound, detail); ratio > 1 is a mismatch."""
        if rv is None and cv is None:
            return 0.0, None
        if rv is None or cv is None or ev is None:
            return float("inf"), f"grad presence: compiled {cv is not None}, ref {rv is not None}"
        if tuple(cv.shape) != tuple(rv.shape):
            return float("inf"), f"shape {tuple(cv.shape)} vs {tuple(rv.shape)}"
        if cv.dtype != ev.dtype:
            return float("inf"), f"dtype {cv.dtype} vs eager {ev.dtype}"
        if rv.numel() == 0:
            return 0.0, None
        cf, ef, rf = cv.float(), ev.float(), rv.float()
        fin_r = torch.isfinite(rf)
        bad_c = (torch.isfinite(cf) != fin_r).sum().item()
        bad_e = (torch.isfinite(ef) != fin_r).sum().item()
        if bad_c and not bad_e:
            return float("inf"), f"{bad_c} non-finite where the reference is not (or the reverse)"
        mask = fin_r & torch.isfinite(cf) & torch.isfinite(ef)
        if not mask.any():
            return 0.0, None
        err = (cf - rf).abs()[mask].max().item()
        eerr = (ef - rf).abs()[mask].max().item()
        rmax = rf.abs()[mask].max().item()
        bound = 2 * eerr + 1e-2 * rmax + 1e-3
        ratio = err / bound
        detail = f"err {err:.4g} bound {bound:.4g} (eager err {eerr:.4g}, max|ref| {rmax:.4g})"
        return ratio, detail

    def compare(comp, eager, ref) -> tuple[float, list]:
        worst, bad = 0.0, []
        for call, ((co, cg), (eo, eg), (ro, rg)) in enumerate(zip(comp, eager, ref)):
            if len(co) != len(ro):
                return float("inf"), [f"call {call}: {len(co)} outputs vs {len(ro)}"]
            items = [(f"call{call}.out{i}", a, b, d) for i, (a, b, d) in enumerate(zip(co, eo, ro))]
            items += [(f"call{call}.grad{i}", a, b, d) for i, (a, b, d) in enumerate(zip(cg, eg, rg))]
            for name, a, b, d in items:
                ratio, detail = cmp_tensor(a, b, d)
                worst = max(worst, ratio)
                if ratio > 1:
                    bad.append(f"{name}: {detail}")
        return worst, bad

    def alive() -> bool:
        if device != "cuda":
            return True
        try:
            torch.cuda.synchronize()
            return (torch.ones(2, device="cuda") + 1).sum().item() == 4.0
        except Exception:
            return False

    def fmt_exc(e: BaseException) -> dict:
        tb = traceback.format_exception(type(e), e, e.__traceback__)
        msg = str(e)
        return {
            "type": type(e).__name__,
            "msg": msg[:3000],
            "tb_tail": "".join(tb)[-6000:],
        }

    def expectations(c: dict, cnt: dict, tem: bool) -> tuple[list, list]:
        """(anomalies: requirements broken, notes: informational)."""
        anomalies, notes = [], []
        taken = cnt.get("cat_linear", 0)
        scaled = c["head"] == "addmm" and (c["beta"], c["alpha"]) != (1.0, 1.0)
        # (the "view" form, reachable only through --replay, runs fp32 and CPU)
        template_form = c["form"] in ("mm", "default")
        if taken and template_form and c["dtype"] == "fp32":
            anomalies.append("fp32_site_taken")
        if taken and template_form and device != "cuda":
            anomalies.append("taken_off_cuda")
        if scaled and taken and c["head"] == "addmm" and c["extra"] != "head2_relu":
            anomalies.append("scaled_addmm_taken")
        if taken and c["dtype"] != "fp32" and device == "cuda" and not tem:
            notes.append("taken_without_triton_tem")
        rows = 1
        for d in c["lead"]:
            rows *= d
        if (
            device == "cuda"
            and c["form"] == "mm"
            and c["dtype"] != "fp32"
            and not taken
            and not scaled
            and rows > 1
            and c["dyn"] != "dyn_true"
            and c["mode"] == "nograd"
            and c["extra"] not in ("cat_out",)
        ):
            notes.append("forced_but_not_taken")
        return anomalies, notes

    def dump_code(c: dict, codes: list, tag: str) -> str | None:
        if not codes or not args.code_dir:
            return None
        os.makedirs(args.code_dir, exist_ok=True)
        path = os.path.join(args.code_dir, f"case{c['idx']}_{tag}.py")
        with open(path, "w") as f:
            f.write(f"# {json.dumps(c)}\n")
            for i, code in enumerate(codes):
                f.write(f"\n# ======== graph {i} ========\n{code}\n")
        return path

    def run_case(c: dict) -> dict:
        t0 = time.time()
        r: dict = {"idx": c["idx"], "case": c, "desc": describe(c)}
        base_cache.clear()
        try:
            ref = run_eager(c, upcast=True)
            eag = run_eager(c, upcast=False)
        except Exception as e:
            r.update(status="invalid", error=fmt_exc(e))
            r["time"] = time.time() - t0
            return r
        form = c["form"]
        try:
            comp, codes, cnt = run_compiled(c, form)
        except Exception as e:
            cnt = {k: v for k, v in counters["inductor"].items() if k.startswith("cat_linear")}
            r.update(error=fmt_exc(e), counters=cnt, taken=cnt.get("cat_linear", 0) > 0,
                     template=None)
            if not alive():
                r.update(status="fatal")  # the parent checks stock in a fresh worker
                r["time"] = time.time() - t0
                return r
            try:
                scomp, scodes, _ = run_compiled(c, None)
                sratio, sbad = compare(scomp, eag, ref)
                r.update(status="crash", stock="ok", stock_ratio=sratio, stock_bad=sbad)
            except Exception as se:
                r.update(status="stock_also_fails", stock_error=fmt_exc(se))
            r["time"] = time.time() - t0
            return r
        tem = any("triton_tem_" in code for code in codes)
        r.update(counters=cnt, taken=cnt.get("cat_linear", 0) > 0, template=tem,
                 cat_kernel=any("fused_cat" in code for code in codes))
        ratio, bad = compare(comp, eag, ref)
        r["ratio"] = ratio
        anomalies, notes = expectations(c, cnt, tem)
        r["anomalies"], r["notes"] = anomalies, notes
        if bad:
            r["bad"] = bad
            r["code_file"] = dump_code(c, codes, "option")
            try:
                scomp, scodes, scnt = run_compiled(c, None)
                sratio, sbad = compare(scomp, eag, ref)
                r.update(stock_ratio=sratio, stock_bad=sbad)
                r["status"] = "mismatch_stock_too" if sbad else "mismatch"
            except Exception as se:
                r.update(status="mismatch", stock_error=fmt_exc(se))
        else:
            r["status"] = "anomaly" if anomalies else "ok"
            if anomalies:
                r["code_file"] = dump_code(c, codes, "option")
        if not alive():
            r["fatal_after"] = True
        r["time"] = time.time() - t0
        return r

    def run_stock_only(c: dict) -> dict:
        base_cache.clear()
        try:
            ref = run_eager(c, upcast=True)
            eag = run_eager(c, upcast=False)
            scomp, _, _ = run_compiled(c, None)
            sratio, sbad = compare(scomp, eag, ref)
            return {"stock": "ok", "stock_ratio": sratio, "stock_bad": sbad}
        except Exception as e:
            return {"stock": "fails", "stock_error": fmt_exc(e)}

    # ---- the worker's loop -------------------------------------------------

    if args.replay:
        cases = iter([json.loads(args.replay)])
    elif args.only:
        cases = (gen_case(args.seed, i, device) for i in args.only)
    else:
        cases = (gen_case(args.seed, i, device) for i in range(args.start, 1 << 40))

    if args.stock_check is not None:
        c = json.loads(args.stock_check)
        emit({"ev": "stock", "idx": c["idx"], **run_stock_only(c)})
        return 0

    times: list = []
    for c in cases:
        est = sum(times) / len(times) if times else 0.0
        if args.deadline and time.time() + 0.5 * est > args.deadline:
            break
        emit({"ev": "start", "idx": c["idx"], "t": time.time()})
        r = run_case(c)
        times.append(r.get("time", 0.0))
        emit({"ev": "result", **r})
        torch._dynamo.reset()
        if r["status"] == "fatal" or r.get("fatal_after"):
            return 3
    emit({"ev": "done"})
    return 0


# --------------------------------------------------------------------------
# parent: runs workers, keeps the summary
# --------------------------------------------------------------------------

FINDING_STATUSES = ("mismatch", "crash", "fatal_stock_ok", "timeout_stock_ok",
                    "worker_died_stock_ok", "anomaly")


class Summary:
    def __init__(self, args, cmd_base):
        self.args = args
        self.cmd_base = cmd_base
        self.results: dict = {}
        self.t0 = time.time()

    def add(self, r: dict) -> None:
        self.results[r["idx"]] = r
        self.write()

    def repro(self, r: dict) -> str:
        c = r["case"]
        if self.args.replay:
            return f"{self.cmd_base} --replay '{json.dumps(c)}'"
        return f"{self.cmd_base} --seed {c['seed']} --only {c['idx']}"

    def data(self) -> dict:
        rs = [self.results[k] for k in sorted(self.results)]
        by: dict = {}
        for r in rs:
            by[r["status"]] = by.get(r["status"], 0) + 1
        ran = [r for r in rs if r["status"] not in ("cut",)]

        def entries(statuses):
            out = []
            for r in rs:
                if r["status"] in statuses:
                    e = {k: v for k, v in r.items() if k not in ("ev",)}
                    e["repro"] = self.repro(r)
                    out.append(e)
            return out

        return {
            "args": {k: v for k, v in vars(self.args).items()},
            "elapsed_s": round(time.time() - self.t0, 1),
            "cases_run": len(ran),
            "taken": sum(1 for r in ran if r.get("taken")),
            "template_present": sum(1 for r in ran if r.get("template")),
            "by_status": by,
            "by_dtype_form_mode": self._breakdown(ran),
            "mismatches": entries(("mismatch",)),
            "crashes_stock_ok": entries(("crash", "fatal_stock_ok", "timeout_stock_ok",
                                         "worker_died_stock_ok")),
            "anomalies": entries(("anomaly",)),
            "mismatch_stock_too": entries(("mismatch_stock_too",)),
            "stock_also_fails": [
                {"idx": r["idx"], "desc": r["desc"],
                 "error": (r.get("error") or {}).get("msg", "")[:300]}
                for r in rs if r["status"] in ("stock_also_fails", "fatal_stock_fails",
                                                "timeout_stock_fails", "worker_died_stock_fails")
            ],
            "invalid": entries(("invalid",)),
            "notes": {
                n: [r["idx"] for r in ran if n in r.get("notes", [])]
                for n in ("forced_but_not_taken", "taken_without_triton_tem")
            },
            "cases": [
                {k: r.get(k) for k in ("idx", "status", "desc", "taken", "template",
                                       "counters", "ratio", "time", "notes")}
                for r in rs
            ],
        }

    @staticmethod
    def _breakdown(rs):
        out: dict = {}
        for r in rs:
            c = r["case"]
            key = f"{c['dtype']}/{c['form']}/{c['mode']}"
            d = out.setdefault(key, {"run": 0, "taken": 0, "template": 0})
            d["run"] += 1
            d["taken"] += bool(r.get("taken"))
            d["template"] += bool(r.get("template"))
        return out

    def write(self) -> None:
        if not self.args.out:
            return
        tmp = self.args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.data(), f, indent=1, default=str)
        os.replace(tmp, self.args.out)


def line_for(r: dict) -> str:
    st = r["status"]
    taken = r.get("taken")
    tem = r.get("template")
    ratio = r.get("ratio")
    rs = "  -  " if ratio is None else f"{ratio:5.2f}"
    cnt = r.get("counters") or {}
    declines = ",".join(k[len("cat_linear_"):] for k in cnt if k != "cat_linear")
    s = (f"[{r['idx']:4}] {st:18} {r['desc']}  taken={int(bool(taken))} "
         f"tem={'-' if tem is None else int(tem)} err/bound={rs} "
         f"{('declined:' + declines) if declines else ''} {r.get('time', 0):.1f}s")
    if st not in ("ok",):
        if r.get("bad"):
            s += "\n        " + "\n        ".join(r["bad"][:6])
        if r.get("error"):
            s += f"\n        error: {r['error']['type']}: {r['error']['msg'][:300]}"
        if r.get("stock_error"):
            s += f"\n        stock error: {r['stock_error']['type']}: {r['stock_error']['msg'][:200]}"
        if r.get("anomalies"):
            s += f"\n        anomalies: {r['anomalies']}"
    return s


def parent_main(args) -> int:
    here = os.path.abspath(__file__)
    out = args.out or f"/tmp/cat_linear_gpu_fuzz_{args.seed}.json"
    args.out = out
    events = out + ".jsonl"
    log = out + ".worker.log"
    code_dir = out + ".code"
    open(events, "w").close()
    open(log, "w").close()
    cmd_base = f"{sys.executable} {here} --device {args.device}"
    if args.extra_kinds:  # a seed's cases depend on them
        cmd_base += " --extra-kinds " + " ".join(args.extra_kinds)
    summ = Summary(args, cmd_base)
    summ.write()
    deadline = time.time() + args.seconds
    hard_deadline = deadline + args.grace
    print(f"cat_linear GPU fuzz: device={args.device} seed={args.seed} "
          f"budget={args.seconds}s out={out}", flush=True)

    pos = [0]  # read offset in the events file

    def read_events():
        with open(events) as f:
            f.seek(pos[0])
            data = f.read()
        lines = data.split("\n")
        complete, rest = lines[:-1], lines[-1]
        pos[0] += len(data) - len(rest)
        return [json.loads(x) for x in complete if x.strip()]

    def spawn(extra):
        cmd = [sys.executable, here, "--worker", "--device", args.device,
               "--seed", str(args.seed), "--events", events, "--code-dir", code_dir,
               "--deadline", str(deadline)] + extra
        if args.inject:
            cmd += ["--inject", args.inject]
        if args.extra_kinds:
            cmd += ["--extra-kinds", *args.extra_kinds]
        logf = open(log, "a")
        return subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)

    def kill(proc):
        try:
            os.killpg(proc.pid, 9)
        except Exception:
            try:
                proc.kill()
            except Exception:
                pass
        proc.wait()

    def stock_check(case: dict) -> dict:
        """Stock on ``case`` in a fresh worker (after a fatal error / timeout)."""
        if time.time() > hard_deadline:
            return {"stock": "unchecked"}
        proc = spawn(["--stock-check", json.dumps(case)])
        t_start = time.time()
        while proc.poll() is None:
            if time.time() - t_start > args.case_timeout or time.time() > hard_deadline:
                kill(proc)
                return {"stock": "fails", "stock_error": {"type": "Timeout", "msg": "stock timed out"}}
            time.sleep(0.5)
        for ev in read_events():
            if ev.get("ev") == "stock":
                return ev
        return {"stock": "fails", "stock_error": {"type": "WorkerDied", "msg": f"rc {proc.returncode}"}}

    # the plan: explicit indices, one replayed case, or 0, 1, 2, ...
    if args.replay:
        plan = None
        replay_case = json.loads(args.replay)
        replay_case.setdefault("idx", -1)
        args.replay = json.dumps(replay_case)
    else:
        plan = list(args.only) if args.only else None
    next_idx = args.start
    done_all = False
    try:
        while not done_all and time.time() < deadline:
            if args.replay:
                extra = ["--replay", args.replay]
            elif plan is not None:
                remaining = [i for i in plan if i not in summ.results]
                if not remaining:
                    break
                extra = ["--only", ",".join(map(str, remaining))]
            else:
                extra = ["--start", str(next_idx)]
            proc = spawn(extra)
            current, started = None, None
            while True:
                for ev in read_events():
                    if ev["ev"] == "start":
                        current, started = ev["idx"], time.time()
                    elif ev["ev"] == "result":
                        ev.pop("ev")
                        r = ev
                        if r["status"] == "fatal":
                            print(line_for(r), flush=True)
                            print("        CUDA context lost: checking stock in a fresh worker", flush=True)
                            sc = stock_check(r["case"])
                            sc.pop("ev", None)
                            r.update(sc)
                            r["status"] = "fatal_stock_ok" if sc.get("stock") == "ok" else "fatal_stock_fails"
                        summ.add(r)
                        print(line_for(r), flush=True)
                        next_idx = r["idx"] + 1
                        current = None
                    elif ev["ev"] == "done":
                        done_all = True
                rc = proc.poll()
                now = time.time()
                if rc is not None:
                    for ev in read_events():  # anything written at exit
                        if ev["ev"] == "result":
                            ev.pop("ev")
                            summ.add(ev)
                            print(line_for(ev), flush=True)
                            next_idx = ev["idx"] + 1
                            current = None
                        elif ev["ev"] == "done":
                            done_all = True
                    if current is not None:
                        # died inside a case without a result: a hard crash
                        case = (json.loads(args.replay) if args.replay
                                else gen_case(args.seed, current, args.device))
                        r = {"idx": current, "case": case, "desc": describe(case),
                             "status": "worker_died",
                             "error": {"type": "WorkerDied", "msg": f"worker exit code {rc}"},
                             "time": now - (started or now)}
                        sc = stock_check(case)
                        sc.pop("ev", None)
                        r.update(sc)
                        r["status"] = "worker_died_stock_ok" if sc.get("stock") == "ok" else "worker_died_stock_fails"
                        summ.add(r)
                        print(line_for(r), flush=True)
                        next_idx = current + 1
                    if args.replay:
                        done_all = True
                    break
                if current is not None and now - started > args.case_timeout:
                    kill(proc)
                    case = (json.loads(args.replay) if args.replay
                            else gen_case(args.seed, current, args.device))
                    r = {"idx": current, "case": case, "desc": describe(case),
                         "status": "timeout",
                         "error": {"type": "Timeout", "msg": f"case ran over {args.case_timeout}s"},
                         "time": now - started}
                    sc = stock_check(case)
                    sc.pop("ev", None)
                    r.update(sc)
                    r["status"] = "timeout_stock_ok" if sc.get("stock") == "ok" else "timeout_stock_fails"
                    summ.add(r)
                    print(line_for(r), flush=True)
                    next_idx = current + 1
                    if args.replay:
                        done_all = True
                    break
                if now > hard_deadline:
                    kill(proc)
                    if current is not None:
                        case = (json.loads(args.replay) if args.replay
                                else gen_case(args.seed, current, args.device))
                        r = {"idx": current, "case": case, "desc": describe(case),
                             "status": "cut", "time": now - started}
                        summ.add(r)
                        print(line_for(r), flush=True)
                    done_all = True
                    break
                time.sleep(0.3)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        try:
            kill(proc)
        except Exception:
            pass
    summ.write()
    print_summary(summ.data(), out)
    return 0


def print_summary(d: dict, out: str) -> None:
    print("=" * 100)
    print(f"cases run: {d['cases_run']}   site taken: {d['taken']}   "
          f"template present: {d['template_present']}   elapsed: {d['elapsed_s']}s")
    print(f"by status: {d['by_status']}")
    print("by dtype/form/mode (run, taken, template):")
    for k, v in sorted(d["by_dtype_form_mode"].items()):
        print(f"    {k:24} {v['run']:4} {v['taken']:4} {v['template']:4}")
    print(f"mismatches (stock passes): {len(d['mismatches'])}")
    for e in d["mismatches"]:
        print(f"  [{e['idx']}] {e['desc']}")
        for b in e.get("bad", [])[:6]:
            print(f"      {b}")
        print(f"      counters={e.get('counters')} template={e.get('template')}")
        print(f"      case={json.dumps(e['case'])}")
        print(f"      repro: {e['repro']}")
    print(f"crashes where stock works: {len(d['crashes_stock_ok'])}")
    for e in d["crashes_stock_ok"]:
        err = e.get("error") or {}
        print(f"  [{e['idx']}] {e['status']} {e['desc']}")
        print(f"      {err.get('type')}: {str(err.get('msg'))[:400]}")
        print(f"      case={json.dumps(e['case'])}")
        print(f"      repro: {e['repro']}")
    print(f"anomalies (a site that must be declined was taken): {len(d['anomalies'])}")
    for e in d["anomalies"]:
        print(f"  [{e['idx']}] {e['desc']} {e.get('anomalies')} counters={e.get('counters')}")
        print(f"      repro: {e['repro']}")
    print(f"mismatches where stock mismatches too (likely tolerance/program, not the feature): "
          f"{len(d['mismatch_stock_too'])}")
    for e in d["mismatch_stock_too"]:
        print(f"  [{e['idx']}] {e['desc']} ratio={e.get('ratio')} stock_ratio={e.get('stock_ratio')}")
    print(f"crashes where stock fails too (not findings): {len(d['stock_also_fails'])}")
    for e in d["stock_also_fails"]:
        print(f"  [{e['idx']}] {e['desc']}: {e['error'][:160]}")
    if d["invalid"]:
        print(f"invalid cases (eager failed: harness bug): {len(d['invalid'])}")
        for e in d["invalid"]:
            print(f"  [{e['idx']}] {e['desc']}: {e['error']['type']}: {e['error']['msg'][:200]}")
    for n, idxs in d["notes"].items():
        print(f"note {n}: {len(idxs)} {idxs[:30]}")
    print(f"summary JSON: {out}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=240, help="total budget (default 240)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="JSON summary path")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--start", type=int, default=0, help="first case index")
    ap.add_argument("--only", type=lambda s: [int(x) for x in s.split(",") if x],
                    default=None, help="comma-separated case indices to run")
    ap.add_argument("--replay", default=None, help="a case dict (JSON) to run")
    ap.add_argument("--case-timeout", type=float, default=480,
                    help="kill a case running longer (seconds)")
    ap.add_argument("--grace", type=float, default=45,
                    help="how long past --seconds a started case may run")
    ap.add_argument("--print-cases", type=int, default=0,
                    help="print the first N generated cases and exit")
    # internal
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--events", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--code-dir", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, default=0.0, help=argparse.SUPPRESS)
    ap.add_argument("--stock-check", default=None, help=argparse.SUPPRESS)
    # harness self-test: perturb / break the option-on run only
    ap.add_argument("--inject", default=None, choices=["mismatch", "crash", "die", "hang"],
                    help="harness self-test: fake a mismatch / crash / worker death / hang "
                         "in the option-on run (stock untouched)")
    ap.add_argument("--extra-kinds", nargs="+", default=[], choices=sorted(EXTRA_KINDS),
                    help="opt-in piece producers (they change every seed's cases)")
    args = ap.parse_args()
    args.extra_kinds = list(dict.fromkeys(args.extra_kinds))
    KINDS.extend(EXTRA_KINDS[k] for k in args.extra_kinds)
    if args.print_cases:
        for i in range(args.start, args.start + args.print_cases):
            c = gen_case(args.seed, i, args.device)
            print(f"[{i:4}] {describe(c)}")
        return 0
    if args.worker:
        return worker_main(args)
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(main())
