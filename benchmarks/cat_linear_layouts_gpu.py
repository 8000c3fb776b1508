"""Which loop layout lets the cat_mm template keep up with cuBLAS: bare Triton kernels, one GPU.

``mm(cat(parts, 1), B)`` for the sweep's sites (``cat_linear_fused_gpu.SHAPES``) plus the workloads'
(EdgeConv's 64 + 64 and 128 + 128 at 2M edges, DLRM's 128 + 351), in the layouts the template could
take, each at a few tile configs and pipeline depths:

  loops     one K loop per piece (the template as of this probe): 2 stages
  masked    one K loop over the whole cat; every piece loaded per tile, masked to the columns it
            holds, the loads summed (what ``load_input`` allows: a piece's prologue is fused into
            its load, and any piece width works, tiles straddling two pieces included)
  select    one K loop; the tile's piece picked by a pointer select (whole-tile pieces only; no
            prologue fusion possible): the bound on what masking costs
  dense     the same kernel on the materialized cat (one piece): Triton against cuBLAS alone

against ``stock`` (``torch.cat`` + ``torch.mm``, cuBLAS) and the ``floor`` (``torch.mm`` on a ready
cat).  With ``--relu`` the first piece is relu'd: stock writes it into the cat, the kernels apply
it to the loaded tile (as a fused prologue would).  Times are GPU time per call from CUDA events
around back-to-back calls (no L2 flush), median of ``--reps``; every kernel's output is checked
against ``torch.mm`` first.  Writes ``$OUT/cat_linear_layouts.json``.

    PYTHONUNBUFFERED=1 python benchmarks/cat_linear_layouts_gpu.py --reps 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch
import triton
import triton.language as tl


SHAPES = [  # (M, piece widths, N)
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
    (1 << 20, (128, 128), 64),
    (2 << 20, (64, 64), 32),
    (2_000_000, (64, 64), 128),  # EdgeConv layer 1
    (2_000_000, (128, 128), 128),  # EdgeConv layer 2
    (16384, (128, 351), 1024),  # DLRM's top MLP
]
# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages)
CONFIGS = [
    (128, 128, 64, 8, 2),
    (128, 128, 64, 8, 3),
    (128, 128, 64, 8, 4),
    (128, 256, 64, 8, 3),
    (64, 128, 64, 4, 4),
    (128, 64, 64, 4, 4),
]
MAX_PARTS = 4


@triton.jit
def _piece(ptr, stride, start, width, rm_a, rk, RELU: tl.constexpr):
    # the columns [start, start + width) of the cat that this K tile holds, zero elsewhere
    cols = rk - start
    mask = (cols[None, :] >= 0) & (cols[None, :] < width)
    a = tl.load(ptr + rm_a[:, None] * stride + cols[None, :], mask=mask, other=0.0)
    if RELU:
        a = tl.maximum(a, tl.zeros_like(a))
    return a


@triton.jit
def masked_kernel(A0, A1, A2, A3, B, C, M, N, K0, K1, K2, K3,
                  K, NUM: tl.constexpr, RELU: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr):  # fmt: skip
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
    rm_a = rm % M
    rn_b = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        a = _piece(A0, K0, 0, K0, rm_a, rk, RELU)
        if NUM > 1:
            a += _piece(A1, K1, K0, K1, rm_a, rk, False)
        if NUM > 2:
            a += _piece(A2, K2, K0 + K1, K2, rm_a, rk, False)
        if NUM > 3:
            a += _piece(A3, K3, K0 + K1 + K2, K3, rm_a, rk, False)
        b = tl.load(B + rk[:, None] * N + rn_b[None, :], mask=rk[:, None] < K, other=0.0)
        acc += tl.dot(a, b)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(C + rm[:, None] * N + rn[None, :], acc.to(C.dtype.element_ty), mask=mask)


@triton.jit
def select_kernel(A0, A1, A2, A3, B, C, M, N, K0, K1, K2, K3,
                  K, NUM: tl.constexpr, RELU: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr):  # fmt: skip
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
    rm_a = rm % M
    rn_b = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kk in range(0, K, BLOCK_K):
        base = A0 + kk
        stride = K0
        if NUM > 1:
            in1 = kk >= K0
            base = tl.where(in1, A1 + (kk - K0), base)
            stride = tl.where(in1, K1, stride)
        if NUM > 2:
            in2 = kk >= K0 + K1
            base = tl.where(in2, A2 + (kk - K0 - K1), base)
            stride = tl.where(in2, K2, stride)
        if NUM > 3:
            in3 = kk >= K0 + K1 + K2
            base = tl.where(in3, A3 + (kk - K0 - K1 - K2), base)
            stride = tl.where(in3, K3, stride)
        a = tl.load(base + rm_a[:, None] * stride + tl.arange(0, BLOCK_K)[None, :])
        if RELU:
            a = tl.where(kk < K0, tl.maximum(a, tl.zeros_like(a)), a)
        rk = kk + tl.arange(0, BLOCK_K)
        b = tl.load(B + rk[:, None] * N + rn_b[None, :])
        acc += tl.dot(a, b)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(C + rm[:, None] * N + rn[None, :], acc.to(C.dtype.element_ty), mask=mask)


@triton.jit
def loops_kernel(A0, A1, A2, A3, B, C, M, N,
                 K0: tl.constexpr, K1: tl.constexpr, K2: tl.constexpr, K3: tl.constexpr,
                 NUM: tl.constexpr, RELU: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 GROUP_M: tl.constexpr):  # fmt: skip
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
    rm_a = rm % M
    rn_b = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K0, BLOCK_K)):
        m = rk[None, :] < K0 - k * BLOCK_K
        a = tl.load(A0 + rm_a[:, None] * K0 + (k * BLOCK_K + rk)[None, :], mask=m, other=0.0)
        if RELU:
            a = tl.maximum(a, tl.zeros_like(a))
        b = tl.load(B + (k * BLOCK_K + rk)[:, None] * N + rn_b[None, :], mask=m.T, other=0.0)
        acc += tl.dot(a, b)
    for k in range(0, tl.cdiv(K1, BLOCK_K)):
        m = rk[None, :] < K1 - k * BLOCK_K
        a = tl.load(A1 + rm_a[:, None] * K1 + (k * BLOCK_K + rk)[None, :], mask=m, other=0.0)
        b = tl.load(B + (K0 + k * BLOCK_K + rk)[:, None] * N + rn_b[None, :], mask=m.T, other=0.0)
        acc += tl.dot(a, b)
    if NUM > 2:
        for k in range(0, tl.cdiv(K2, BLOCK_K)):
            m = rk[None, :] < K2 - k * BLOCK_K
            a = tl.load(A2 + rm_a[:, None] * K2 + (k * BLOCK_K + rk)[None, :], mask=m, other=0.0)
            b = tl.load(B + (K0 + K1 + k * BLOCK_K + rk)[:, None] * N + rn_b[None, :], mask=m.T, other=0.0)
            acc += tl.dot(a, b)
    if NUM > 3:
        for k in range(0, tl.cdiv(K3, BLOCK_K)):
            m = rk[None, :] < K3 - k * BLOCK_K
            a = tl.load(A3 + rm_a[:, None] * K3 + (k * BLOCK_K + rk)[None, :], mask=m, other=0.0)
            b = tl.load(B + (K0 + K1 + K2 + k * BLOCK_K + rk)[:, None] * N + rn_b[None, :], mask=m.T, other=0.0)
            acc += tl.dot(a, b)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(C + rm[:, None] * N + rn[None, :], acc.to(C.dtype.element_ty), mask=mask)


def launch(layout, parts, b, out, cfg, relu):
    bm, bn, bk, warps, stages = cfg
    m, n = out.shape
    widths = [p.shape[1] for p in parts]
    padded = list(parts) + [parts[0]] * (MAX_PARTS - len(parts))
    ks = widths + [0] * (MAX_PARTS - len(widths))
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
    common = dict(NUM=len(parts), RELU=relu, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8,
                  num_warps=warps, num_stages=stages)  # fmt: skip
    if layout == "loops":
        loops_kernel[grid](*padded, b, out, m, n, *ks, **common)
    elif layout in ("masked", "dense"):
        masked_kernel[grid](*padded, b, out, m, n, *ks, sum(widths), **common)
    else:
        select_kernel[grid](*padded, b, out, m, n, *ks, sum(widths), **common)


def graphed(fn, calls):
    """``calls`` back-to-back calls of ``fn`` captured as one CUDA graph, so that replaying it
    keeps the GPU busy whatever the host's launch rate (small sites launch faster than Python)."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return graph


def event_time_us(graph, calls):
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


def applies(layout, widths, cfg):
    bm, bn, bk, warps, stages = cfg
    if layout == "select" and any(w % bk for w in widths):
        return False
    pieces = 1 if layout in ("dense", "select") else len(widths)
    smem = stages * (pieces * bm * bk + bk * bn) * 2
    if layout == "loops" and stages > 2:
        return False  # its compile time grows with the trip counts from 3 stages
    return smem <= torch.cuda.get_device_properties(0).shared_memory_per_block_optin


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--shapes", default=None, help="comma-separated indices into SHAPES")
    p.add_argument("--budget-s", type=float, default=400.0, help="stop starting shapes after this")
    p.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "cat_linear_layouts.json"))
    args = p.parse_args()
    t0 = time.time()
    torch.manual_seed(0)
    dev = torch.cuda.get_device_name()
    meta = dict(device=dev, torch=torch.__version__, triton=triton.__version__, configs=CONFIGS)
    print(meta, flush=True)
    rows = []
    picked = [SHAPES[int(i)] for i in args.shapes.split(",")] if args.shapes else SHAPES
    for m, widths, n in picked:
        for relu in (False, True):
            if time.time() - t0 > args.budget_s:
                print("budget spent", flush=True)
                break
            parts = [torch.randn(m, w, device="cuda", dtype=torch.bfloat16) for w in widths]
            b = torch.randn(sum(widths), n, device="cuda", dtype=torch.bfloat16) / sum(widths) ** 0.5
            out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            feed = [torch.relu(parts[0]), *parts[1:]] if relu else parts
            cat = torch.cat(feed, 1)
            ref = torch.mm(cat, b)
            calls = max(5, min(100, int(2e11 / (2 * m * n * sum(widths) + 1))))
            buf = torch.empty_like(cat)

            def stock():
                # as Inductor's cat: each piece (the relu'd one from its source) written into one buffer
                k0 = 0
                for i, part in enumerate(parts):
                    dst = buf[:, k0 : k0 + part.shape[1]]
                    torch.clamp_min(part, 0, out=dst) if relu and i == 0 else dst.copy_(part)
                    k0 += part.shape[1]
                return torch.mm(buf, b)

            variants = {"stock": stock, "floor": lambda: torch.mm(cat, b)}
            errors = {}
            for layout in ("loops", "masked", "select", "dense"):
                for cfg in CONFIGS:
                    if not applies(layout, widths if layout != "dense" else [sum(widths)], cfg):
                        continue
                    src = [cat] if layout == "dense" else parts
                    rl = relu and layout != "dense"
                    name = f"{layout}:{'x'.join(map(str, cfg))}"
                    try:
                        launch(layout, src, b, out, cfg, rl)
                        torch.cuda.synchronize()
                    except Exception as e:  # out of resources at this config
                        errors[name] = type(e).__name__
                        continue
                    err = (out.float() - ref.float()).abs().max().item()
                    errors[name] = err
                    if err > 0.05 * ref.float().abs().max().item():
                        print(f"WRONG {name} at {m} {widths} {n}: {err}", flush=True)
                        continue
                    variants[name] = (lambda s=src, c=cfg, lay=layout, r=rl: launch(lay, s, b, out, c, r))
            if (stock().float() - ref.float()).abs().max().item() > 0.05 * ref.float().abs().max().item():
                print(f"WRONG stock at {m} {widths} {n}", flush=True)
            graphs = {k: graphed(fn, calls) for k, fn in variants.items()}
            times = {k: [] for k in variants}
            for _ in range(args.reps):
                for k, graph in graphs.items():
                    times[k].append(event_time_us(graph, calls))
            med = {k: statistics.median(v) for k, v in times.items()}
            best = {}
            for layout in ("loops", "masked", "select", "dense"):
                cands = {k: v for k, v in med.items() if k.startswith(layout + ":")}
                if cands:
                    k = min(cands, key=cands.get)
                    best[layout] = (k, cands[k])
            row = dict(m=m, widths=widths, n=n, relu=relu, median_us=med,
                       spread={k: (max(v) - min(v)) / statistics.median(v) for k, v in times.items()},
                       best=best, errors=errors)  # fmt: skip
            rows.append(row)
            line = " ".join(f"{lay}={v[1]:.1f}({v[1] / med['stock']:.2f})" for lay, v in best.items())
            print(f"{m} {widths} {n} relu={relu}: stock={med['stock']:.1f} floor={med['floor']:.1f} {line}",
                  flush=True)  # fmt: skip
            for lay, v in best.items():
                print(f"    best {lay}: {v[0]}", flush=True)
            with open(args.out, "w") as f:
                json.dump(dict(meta=meta, rows=rows), f, indent=1)
            del parts, b, out, cat, ref, feed, buf, graphs
            torch.cuda.empty_cache()
    print(f"done in {time.time() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
