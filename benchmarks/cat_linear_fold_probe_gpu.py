"""Can the template's one K loop compute a pointwise-made piece in its loads?

Today a piece made by a pointwise op (``relu(x0)``) is computed in the template's loads only
in its per-piece loops (``load_input``), which trail cuBLAS at compute-bound sites; there the
decision writes the piece by its own kernel instead (``mm_unfolded``) or keeps stock.  This
probe times, outside Inductor, ``F.linear(cat([relu(x0), x1, ...], -1), W, b)`` (bf16, piece 0
relu'd, every piece whole 64-wide K tiles) as:

- ``stock``: stock Inductor's code for the site (``torch.compile``, run before the patch set is
  installed: the relu written into the cat by one kernel, then cuBLAS);
- ``floor``: ``F.linear`` on the relu'd cat made beforehand (cuBLAS alone);
- ``unfolded``: ``relu(x0)`` by its own kernel, then the one loop on the pieces (``mm_unfolded``);
- ``ready``: the one loop on pieces made beforehand (the one loop's own ceiling here);
- ``sel``: the one loop reading ``x0`` through the same pointer select, relu applied where a
  tile lies in piece 0 (``tl.where`` on the loaded tile): a single-input producer only;
- ``dual``: the form a template's ``load_input`` would take, branch-free: piece 0's tile by its
  own load (its own indices), masked by "this tile lies in piece 0" (a uniform mask: no
  memory traffic where false), the other pieces' by the pointer select masked by the
  opposite, and ``tl.where`` between them.

Device time per call (``device_time.kernel_time_us``), ``--reps`` interleaved rounds, medians,
best of the configs; each output checked against fp32.  Findings go to ``benchmarks/README.md``.

    PYTHONUNBUFFERED=1 python benchmarks/cat_linear_fold_probe_gpu.py --reps 3 --out $OUT/fold.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


SHAPES = [  # (M, piece widths, N): the sweep's relu'd rows where mm_unfolded trailed or stock was kept
    (8192, (1024, 1024), 1024),
    (8192, (2048, 2048), 1024),
    (2048, (512, 512), 2048),
    (8192, (128, 128, 128), 1024),
    (8192, (256, 256), 160),
    (4096, (64, 64, 64, 64), 512),
    (8192, (64, 64), 256),
    (8192, (2048, 2048), 4096),
    (1 << 20, (128, 128), 64),
]
# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages): the template's wide and narrow one-loop
# tables' 64-wide entries, and one deeper
WIDE = [(128, 128, 64, 8, 3), (64, 128, 64, 4, 3), (128, 128, 64, 4, 4)]
NARROW = [(128, 64, 64, 4, 2), (64, 64, 64, 4, 3), (128, 64, 64, 4, 4)]
MODES = {"ready": 0, "sel": 1, "dual": 2}


@triton.jit
def one_loop_kernel(
    A0, A1, A2, A3, W, bias, C, M, N, K, S1, S2, S3, sa0, sa1, sa2, sa3, stride_wn,
    NUM_PARTS: tl.constexpr, MODE: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    width = GROUP_M * grid_n
    group_id = pid // width
    group_size = min(grid_m - group_id * GROUP_M, GROUP_M)
    pid_m = group_id * GROUP_M + (pid % group_size)
    pid_n = (pid % width) // group_size
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = rm % M
    offs_n = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_idx in range(K // BLOCK_K):
        kk = k_idx * BLOCK_K
        # the pointer select over the pieces (MODE 2: over pieces 1.. only)
        a_base = A0 + kk
        stride_am = sa0
        if MODE == 2:
            a_base = A1 + (kk - S1)
            stride_am = sa1
        if NUM_PARTS > 1 and MODE != 2:
            in1 = kk >= S1
            a_base = tl.where(in1, A1 + (kk - S1), a_base)
            stride_am = tl.where(in1, sa1, stride_am)
        if NUM_PARTS > 2:
            in2 = kk >= S2
            a_base = tl.where(in2, A2 + (kk - S2), a_base)
            stride_am = tl.where(in2, sa2, stride_am)
        if NUM_PARTS > 3:
            in3 = kk >= S3
            a_base = tl.where(in3, A3 + (kk - S3), a_base)
            stride_am = tl.where(in3, sa3, stride_am)
        a_ptrs = a_base + (offs_m[:, None] * stride_am + offs_k[None, :])
        in0 = kk < S1
        if MODE == 0:
            a = tl.load(a_ptrs)
        elif MODE == 1:
            a = tl.load(a_ptrs)
            relu = tl.maximum(a.to(tl.float32), 0.0).to(a.dtype)
            a = tl.where(in0, relu, a)
        else:
            # piece 0 as load_input would load it: its own indices, masked to its tiles
            idx_m = offs_m[:, None]
            idx_n = offs_k[None, :] + kk
            x0 = tl.load(A0 + (idx_m * sa0 + idx_n), mask=in0, other=0.0)
            relu = tl.maximum(x0.to(tl.float32), 0.0).to(x0.dtype)
            rest = tl.load(a_ptrs, mask=kk >= S1, other=0.0)
            a = tl.where(in0, relu, rest)
        b = tl.load(W + ((kk + offs_k)[:, None] + offs_n[None, :] * stride_wn))
        acc += tl.dot(a, b, out_dtype=tl.float32)
    acc += tl.load(bias + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(C + rm[:, None] * N + rn[None, :], acc.to(C.dtype.element_ty), mask=mask)


def launcher(mode, parts, w, b, out, cfg):
    bm, bn, bk, warps, stages = cfg
    m, n = parts[0].shape[0], w.shape[0]
    widths = [p.shape[1] for p in parts]
    if any(k % bk for k in widths):
        return None
    starts = [sum(widths[:i]) for i in range(len(widths))]
    pad = 4 - len(parts)
    ptrs = list(parts) + [parts[0]] * pad
    ss = (starts + [sum(widths)] * pad)[1:]
    sas = [p.stride(0) for p in parts] + [parts[0].stride(0)] * pad
    tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
    k = sum(widths)

    def fn():
        one_loop_kernel[(tiles,)](
            *ptrs, w, b, out, m, n, k, *ss, *sas, w.stride(0),
            NUM_PARTS=len(parts), MODE=MODES[mode], BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
            GROUP_M=8, num_warps=warps, num_stages=stages,
        )  # fmt: skip
        return out

    return fn


def rel_err(out, ref):
    return ((out.float() - ref).norm() / ref.norm()).item()


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--shapes", default=None, help="comma-separated indices into SHAPES")
    ap.add_argument("--out", default="cat_linear_fold_probe.json")
    a = ap.parse_args()
    from device_time import kernel_time_us, spread

    shapes = SHAPES if a.shapes is None else [SHAPES[int(i)] for i in a.shapes.split(",")]
    meta = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "reps": a.reps,
        "cat_linear": torch._inductor.config.pre_grad_fusion_options.get("cat_linear"),
    }
    print(json.dumps(meta), flush=True)

    def site(x0, *rest, w, b):
        return F.linear(torch.cat([torch.relu(x0), *rest], -1), w, b)

    rows = []
    for m, widths, n in shapes:
        torch._dynamo.reset()
        g = torch.Generator(device="cuda").manual_seed(0)
        src = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g) for k in widths]
        k = sum(widths)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g) * k**-0.5
        b = torch.randn(n, device="cuda", dtype=torch.bfloat16, generator=g)
        made = [torch.relu(src[0]), *src[1:]]
        ready = torch.cat(made, -1)
        ref = F.linear(ready.float(), w.float(), b.float())
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        compiled = torch.compile(site)
        fns = {
            "stock": lambda: compiled(*src, w=w, b=b),
            "floor": lambda: F.linear(ready, w, b),
        }
        info = {name: {"err": rel_err(fn(), ref)} for name, fn in fns.items()}
        for mode in ("unfolded", "ready", "sel", "dual"):
            for cfg in NARROW if n <= 256 else WIDE:
                name = f"{mode}:{'x'.join(map(str, cfg))}"
                try:
                    if mode == "unfolded":
                        # the relu written into the buffer the one loop then reads
                        inner = launcher("ready", made, w, b, out, cfg)

                        def fn(inner=inner):
                            torch.clamp_min(src[0], 0.0, out=made[0])  # relu, into made[0]
                            return inner()
                    else:
                        fn = launcher(mode, made if mode == "ready" else src, w, b, out, cfg)
                    if fn is None:
                        continue
                    out.fill_(float("nan"))
                    fn()
                    torch.cuda.synchronize()
                    err = rel_err(out, ref)
                except Exception as e:
                    info[name] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
                    traceback.print_exc(limit=1)
                    continue
                info[name] = {"err": err}
                if not err < 2e-2:
                    info[name]["wrong"] = True
                    continue
                fns[name] = fn
        times = {name: [] for name in fns}
        for _ in range(a.reps):
            for name, fn in fns.items():
                times[name].append(kernel_time_us(fn))
        med = {name: statistics.median(v) for name, v in times.items()}
        best = {}
        for name, t in med.items():
            v = name.split(":")[0]
            if v not in best or t < med[best[v]]:
                best[v] = name
        rows.append({
            "m": m, "widths": widths, "n": n, "median_us": med, "info": info, "best": best,
            "spread": {name: spread(v) for name, v in times.items()},
        })  # fmt: skip
        cells = "  ".join(
            f"{v}={med[name]:.1f}({med[name] / med['stock']:.3f}s)" for v, name in best.items()
        )
        print(f"{m} relu({widths[0]})+{list(widths[1:])} -> {n}: {cells}", flush=True)
        print("   best configs:", {v: name.split(":")[-1] for v, name in best.items() if ":" in name})
        bad = {name: i for name, i in info.items() if "error" in i or "wrong" in i}
        if bad:
            print("   not timed:", json.dumps(bad)[:600], flush=True)
        with open(a.out, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
        fns.clear()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
