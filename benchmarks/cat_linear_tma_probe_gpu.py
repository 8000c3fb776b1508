"""Can a Hopper form of the in-place cat GEMM reach cuBLAS where the sites are compute-bound?

At compute-bound sites (in the held-out sweep: K 256-1024, N 512-2048) the template's one loop
(pointer loads, one program per tile) trails cuBLAS on a ready input, most over several waves of
tiles.  This
probe times, outside Inductor, standalone Triton kernels for ``F.linear(cat(parts, -1), W, b)``
(bf16, input pieces) against cuBLAS:

- ``stock``: eager ``torch.cat`` then ``F.linear`` (cuBLAS), what stock runs;
- ``floor``: ``F.linear`` on the cat made beforehand (cuBLAS alone), the ceiling;
- ``ptrsel``: the template's one loop as it is (pointer select per K tile, one program per tile);
- ``tma``: a tensor descriptor per piece (A's piece and W's columns for it; the copy engine
  zero-fills past a piece's end, so pieces need not be whole K tiles), a K loop per piece, one
  program per tile;
- ``tma_p``: the same on a persistent grid (one program per multiprocessor);
- ``tma_flat_p``: persistent, one K loop over every piece's tiles, the piece picked by a branch;
- ``tma_flat_pf``: that loop fused with the tile loop (``tl.range(..., flatten=True)``);
- ``tma_ready_p``: ``tma_p`` on the ready cat (one piece): Triton's own ceiling.

Each kernel's output is checked against fp32 (relative Frobenius error); device time per call is
``device_time.kernel_time_us`` (profiler, 20 calls), ``--reps`` interleaved rounds, median and
spread; ratio to ``floor`` (cuBLAS) and ``stock``.  A variant that fails to compile is reported as
such.  Findings go to ``benchmarks/README.md``.

    PYTHONUNBUFFERED=1 python benchmarks/cat_linear_tma_probe_gpu.py --reps 3 --out $OUT/tma.json
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


SHAPES = [  # (M, piece widths, N): the held-out sites first, compute-bound ones at the top
    (8192, (128, 128, 128), 1024),
    (8192, (96, 160), 1024),
    (4096, (64, 64, 64, 64), 512),
    (2048, (512, 512), 2048),
    (8192, (1024, 1024), 1024),
    (8192, (2048, 2048), 1024),
    (8192, (256, 512, 128), 4096),
    (8192, (2048, 2048), 4096),
    (8192, (64, 64), 256),
    (8192, (256, 256), 160),
    (1 << 20, (128, 128), 64),
]
# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages), every variant timed at each; the probe's own
# split (NARROW at N <= 256), not the template's tables (which switch at N <= 64)
WIDE = [(128, 128, 64, 8, 3), (128, 128, 64, 4, 4), (128, 256, 64, 8, 3)]
NARROW = [(128, 64, 64, 4, 4), (128, 128, 64, 4, 4), (64, 64, 64, 4, 4)]


@triton.jit
def _tile(tile_id, grid_m, grid_n, GROUP_M: tl.constexpr):
    width = GROUP_M * grid_n
    group_id = tile_id // width
    group_size = min(grid_m - group_id * GROUP_M, GROUP_M)
    pid_m = group_id * GROUP_M + (tile_id % group_size)
    pid_n = (tile_id % width) // group_size
    return pid_m, pid_n


@triton.jit
def ptrsel_kernel(
    A0,
    A1,
    A2,
    A3,
    W,
    bias,
    C,
    M,
    N,
    K,
    S1,
    S2,
    S3,
    sa0,
    sa1,
    sa2,
    sa3,
    stride_wn,
    NUM_PARTS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = _tile(pid, grid_m, grid_n, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = rm % M
    offs_n = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_idx in range(K // BLOCK_K):
        kk = k_idx * BLOCK_K
        a_base = A0 + kk
        stride_am = sa0
        if NUM_PARTS > 1:
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
        a = tl.load(a_base + (offs_m[:, None] * stride_am + offs_k[None, :]))
        b = tl.load(W + ((kk + offs_k)[:, None] + offs_n[None, :] * stride_wn))
        acc += tl.dot(a, b, out_dtype=tl.float32)
    acc += tl.load(bias + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(C + rm[:, None] * N + rn[None, :], acc.to(C.dtype.element_ty), mask=mask)


@triton.jit
def _piece_descs(
    A,
    W,
    M,
    N,
    Kp,
    S,
    sa,
    stride_wn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    a = tl.make_tensor_descriptor(
        A, shape=[M, Kp], strides=[sa, 1], block_shape=[BLOCK_M, BLOCK_K]
    )
    b = tl.make_tensor_descriptor(
        W + S, shape=[N, Kp], strides=[stride_wn, 1], block_shape=[BLOCK_N, BLOCK_K]
    )
    return a, b


@triton.jit
def _piece_loop(acc, a_desc, b_desc, Kp, m0, n0, BLOCK_K: tl.constexpr):
    for k in tl.range(0, tl.cdiv(Kp, BLOCK_K)):
        a = a_desc.load([m0, k * BLOCK_K])
        b = b_desc.load([n0, k * BLOCK_K])
        acc = tl.dot(a, b.T, acc)
    return acc


@triton.jit
def tma_kernel(
    A0,
    A1,
    A2,
    A3,
    W,
    bias,
    C,
    M,
    N,
    K0,
    K1,
    K2,
    K3,
    S1,
    S2,
    S3,
    sa0,
    sa1,
    sa2,
    sa3,
    stride_wn,
    NUM_PARTS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    NUM_PROGRAMS: tl.constexpr,
    FLAT: tl.constexpr,
    FLATTEN: tl.constexpr,
):
    a0, b0 = _piece_descs(A0, W, M, N, K0, 0, sa0, stride_wn, BLOCK_M, BLOCK_N, BLOCK_K)
    if NUM_PARTS > 1:
        a1, b1 = _piece_descs(
            A1, W, M, N, K1, S1, sa1, stride_wn, BLOCK_M, BLOCK_N, BLOCK_K
        )
    else:
        a1, b1 = a0, b0
    if NUM_PARTS > 2:
        a2, b2 = _piece_descs(
            A2, W, M, N, K2, S2, sa2, stride_wn, BLOCK_M, BLOCK_N, BLOCK_K
        )
    else:
        a2, b2 = a0, b0
    if NUM_PARTS > 3:
        a3, b3 = _piece_descs(
            A3, W, M, N, K3, S3, sa3, stride_wn, BLOCK_M, BLOCK_N, BLOCK_K
        )
    else:
        a3, b3 = a0, b0
    c_desc = tl.make_tensor_descriptor(
        C, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N]
    )
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = grid_m * grid_n
    # tiles per piece, and where each piece's tiles start in the flat loop
    T0 = tl.cdiv(K0, BLOCK_K)
    T1 = T0 + tl.cdiv(K1, BLOCK_K)
    T2 = T1 + tl.cdiv(K2, BLOCK_K)
    T3 = T2 + tl.cdiv(K3, BLOCK_K)
    for tile_id in tl.range(tl.program_id(0), num_tiles, NUM_PROGRAMS, flatten=FLATTEN):
        pid_m, pid_n = _tile(tile_id, grid_m, grid_n, GROUP_M)
        m0 = pid_m * BLOCK_M
        n0 = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if FLAT:
            for t in tl.range(0, T3):
                if t < T0:
                    a = a0.load([m0, t * BLOCK_K])
                    b = b0.load([n0, t * BLOCK_K])
                elif t < T1:
                    a = a1.load([m0, (t - T0) * BLOCK_K])
                    b = b1.load([n0, (t - T0) * BLOCK_K])
                elif t < T2:
                    a = a2.load([m0, (t - T1) * BLOCK_K])
                    b = b2.load([n0, (t - T1) * BLOCK_K])
                else:
                    a = a3.load([m0, (t - T2) * BLOCK_K])
                    b = b3.load([n0, (t - T2) * BLOCK_K])
                acc = tl.dot(a, b.T, acc)
        else:
            acc = _piece_loop(acc, a0, b0, K0, m0, n0, BLOCK_K)
            if NUM_PARTS > 1:
                acc = _piece_loop(acc, a1, b1, K1, m0, n0, BLOCK_K)
            if NUM_PARTS > 2:
                acc = _piece_loop(acc, a2, b2, K2, m0, n0, BLOCK_K)
            if NUM_PARTS > 3:
                acc = _piece_loop(acc, a3, b3, K3, m0, n0, BLOCK_K)
        rn = n0 + tl.arange(0, BLOCK_N)
        acc += tl.load(bias + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
        c_desc.store([m0, n0], acc.to(C.dtype.element_ty))


def _alloc(size: int, alignment: int, stream):
    return torch.empty(size, device="cuda", dtype=torch.int8)


NUM_SMS = None


def launcher(variant, parts, w, b, out, cfg):
    bm, bn, bk, warps, stages = cfg
    m, n = parts[0].shape[0], w.shape[0]
    if variant == "tma_ready_p":
        parts = [torch.cat(parts, -1)]
    widths = [p.shape[1] for p in parts]
    starts = [sum(widths[:i]) for i in range(len(widths))]
    pad = 4 - len(parts)
    ptrs = list(parts) + [parts[0]] * pad
    ks = widths + [0] * pad
    ss = (starts + [0] * pad)[1:]
    sas = [p.stride(0) for p in parts] + [parts[0].stride(0)] * pad
    tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
    common = dict(
        NUM_PARTS=len(parts),
        BLOCK_M=bm,
        BLOCK_N=bn,
        BLOCK_K=bk,
        GROUP_M=8,
        num_warps=warps,
        num_stages=stages,
    )
    if variant == "ptrsel":
        if any(k % bk for k in widths):
            return None
        k = sum(widths)

        def fn():
            ptrsel_kernel[(tiles,)](
                *ptrs, w, b, out, m, n, k, *ss, *sas, w.stride(0), **common
            )
            return out

        return fn
    persistent = variant != "tma"
    programs = min(NUM_SMS, tiles) if persistent else tiles
    flat = variant.startswith("tma_flat")
    flatten = variant == "tma_flat_pf"

    def fn():
        tma_kernel[(programs,)](
            *ptrs,
            w,
            b,
            out,
            m,
            n,
            *ks,
            *ss,
            *sas,
            w.stride(0),
            **common,
            NUM_PROGRAMS=programs,
            FLAT=flat,
            FLATTEN=flatten,
        )
        return out

    return fn


VARIANTS = ["ptrsel", "tma", "tma_p", "tma_flat_p", "tma_flat_pf", "tma_ready_p"]


def rel_err(out, ref):
    return ((out.float() - ref).norm() / ref.norm()).item()


def main():
    global NUM_SMS
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument(
        "--shapes", default=None, help="comma-separated indices into SHAPES"
    )
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--out", default="cat_linear_tma_probe.json")
    a = ap.parse_args()
    from device_time import kernel_time_us, spread

    triton.set_allocator(_alloc)
    NUM_SMS = torch.cuda.get_device_properties(0).multi_processor_count
    shapes = (
        SHAPES if a.shapes is None else [SHAPES[int(i)] for i in a.shapes.split(",")]
    )
    variants = a.variants.split(",")
    meta = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "sms": NUM_SMS,
        "reps": a.reps,
    }
    rows = []
    for m, widths, n in shapes:
        g = torch.Generator(device="cuda").manual_seed(0)
        parts = [
            torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
            for k in widths
        ]
        k = sum(widths)
        w = (
            torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g)
            * k**-0.5
        )
        b = torch.randn(n, device="cuda", dtype=torch.bfloat16, generator=g)
        ready = torch.cat(parts, -1)
        ref = F.linear(ready.float(), w.float(), b.float())
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        fns = {
            "stock": lambda: F.linear(torch.cat(parts, -1), w, b),
            "floor": lambda: F.linear(ready, w, b),
        }
        info = {
            "stock": {"err": rel_err(fns["stock"](), ref)},
            "floor": {"err": rel_err(fns["floor"](), ref)},
        }
        for variant in variants:
            for cfg in NARROW if n <= 256 else WIDE:
                name = f"{variant}:{'x'.join(map(str, cfg))}"
                try:
                    fn = launcher(variant, parts, w, b, out, cfg)
                    if fn is None:
                        continue
                    out.fill_(float("nan"))
                    fn()
                    torch.cuda.synchronize()
                    err = rel_err(out, ref)
                except Exception as e:
                    # a form Triton cannot compile here: say so, go on
                    info[name] = {
                        "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
                    }
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
        row = {
            "m": m,
            "widths": widths,
            "n": n,
            "median_us": med,
            "spread": {name: spread(v) for name, v in times.items()},
            "info": info,
            "best": best,
        }
        rows.append(row)
        cells = "  ".join(
            f"{v}={med[name]:.1f}({med[name] / med['floor']:.2f}f)"
            for v, name in best.items()
        )
        print(f"{m} {list(widths)} {n}: {cells}", flush=True)
        bad = {name: i for name, i in info.items() if "error" in i or "wrong" in i}
        if bad:
            print("   not timed:", json.dumps(bad)[:600], flush=True)
        with open(a.out, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
        fns.clear()  # the next shape rebinds the tensors they hold
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
