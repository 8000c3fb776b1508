"""Why a wide-piece cat_mm template compiled slowly: Triton compile time of loop variants, on one GPU.

Bare Triton kernels for mm(cat([A0, A1], 1), B) (8192 rows, N 1024, pieces of K = 64 / 1024 / 2048, 128x128x64
tiles) in five forms: two loops with constexpr trip counts at 3, 2 and 1 pipeline stages, two loops with the
widths as run-time arguments, and one loop over both pieces (the piece picked per tile). Each is compiled once
in a fresh Triton cache; the wall time of the first call and the max error against torch are recorded, with
Inductor's own device figures (get_device_tflops, get_gpu_dram_gbps).

    PYTHONUNBUFFERED=1 python benchmarks/cat_linear_triton_loop_compile_gpu.py   # writes $OUT/ct_probe.json
"""
import json, os, sys, time, tempfile
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
import torch, triton, triton.language as tl
from torch._inductor import utils as iu
res = {}
try:
    res["tflops_bf16"] = iu.get_device_tflops(torch.bfloat16); res["dram_gbps"] = iu.get_gpu_dram_gbps()
except Exception as e:
    res["figures_error"] = repr(e)
print(res, flush=True)

@triton.jit
def two_loops_const(A0, A1, B, C, M, N, K0: tl.constexpr, K1: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0); pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M); rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N); rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    a_ptrs = A0 + rm[:, None] * K0 + rk[None, :]; b_ptrs = B + rk[:, None] * N + rn[None, :]
    for k in range(K0, 0, -BLOCK_K):
        acc += tl.dot(tl.load(a_ptrs), tl.load(b_ptrs)); a_ptrs += BLOCK_K; b_ptrs += BLOCK_K * N
    a_ptrs = A1 + rm[:, None] * K1 + rk[None, :]
    for k in range(K1, 0, -BLOCK_K):
        acc += tl.dot(tl.load(a_ptrs), tl.load(b_ptrs)); a_ptrs += BLOCK_K; b_ptrs += BLOCK_K * N
    tl.store(C + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16))

@triton.jit
def two_loops_rt(A0, A1, B, C, M, N, K0, K1, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0); pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M); rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N); rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    a_ptrs = A0 + rm[:, None] * K0 + rk[None, :]; b_ptrs = B + rk[:, None] * N + rn[None, :]
    for k in range(K0, 0, -BLOCK_K):
        acc += tl.dot(tl.load(a_ptrs), tl.load(b_ptrs)); a_ptrs += BLOCK_K; b_ptrs += BLOCK_K * N
    a_ptrs = A1 + rm[:, None] * K1 + rk[None, :]
    for k in range(K1, 0, -BLOCK_K):
        acc += tl.dot(tl.load(a_ptrs), tl.load(b_ptrs)); a_ptrs += BLOCK_K; b_ptrs += BLOCK_K * N
    tl.store(C + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16))

@triton.jit
def one_loop_const(A0, A1, B, C, M, N, K0: tl.constexpr, K1: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0); pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M); rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N); rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    b_ptrs = B + rk[:, None] * N + rn[None, :]
    for kk in range(0, K0 + K1, BLOCK_K):
        in1 = kk >= K0
        base = tl.where(in1, A1 + (kk - K0), A0 + kk); stride = tl.where(in1, K1, K0)
        a = tl.load(base + rm[:, None] * stride + rk[None, :])
        acc += tl.dot(a, tl.load(b_ptrs)); b_ptrs += BLOCK_K * N
    tl.store(C + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16))

M, N = 8192, 1024
for k in (64, 1024, 2048):
    a0 = torch.randn(M, k, device="cuda", dtype=torch.bfloat16); a1 = torch.randn(M, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(2 * k, N, device="cuda", dtype=torch.bfloat16); c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    ref = torch.cat([a0, a1], 1) @ b
    for name, fn, stages, warps in [("two_const_s3w8", two_loops_const, 3, 8), ("two_rt_s3w8", two_loops_rt, 3, 8), ("one_const_s3w8", one_loop_const, 3, 8), ("two_const_s2w4", two_loops_const, 2, 4), ("two_const_s1w8", two_loops_const, 1, 8)]:
        t0 = time.perf_counter()
        try:
            fn[(M // 128, N // 128)](a0, a1, b, c, M, N, k, k, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_stages=stages, num_warps=warps)
            torch.cuda.synchronize(); dt = time.perf_counter() - t0
            err = (c.float() - ref.float()).abs().max().item()
        except Exception as e:
            dt, err = None, repr(e)[:300]
        res[f"{name}_k{k}"] = {"compile_s": dt, "err": err}
        print(name, k, dt, err, flush=True)
json.dump(res, open(os.path.join(os.environ.get("OUT", "/tmp"), "ct_probe.json"), "w"), indent=1)
