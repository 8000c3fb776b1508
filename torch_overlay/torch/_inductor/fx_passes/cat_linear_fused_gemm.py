"""
The ``"gemm"`` form of ``cat_linear_fused``: one Triton GEMM that reads every
piece of the concatenated activation where it already lives.

``linear(cat([x0, x1, ...], -1), W, b)`` is one GEMM whose A operand is split
along K.  This kernel loads A tiles from each piece's own pointer and strides
and the matching W columns, and accumulates all of them in one fp32 register
tile, so there is no cat buffer, no partial output per piece and one epilogue
(bias, cast, store).  The K loop has two layouts, an autotuning choice: one
loop over every K tile, pipelined across piece boundaries (short pieces; only
where every piece is whole unmasked K tiles, see ``ONE_LOOP_OK``), or one loop
per piece (long pieces, and any site).


A piece may carry a unary pointwise prologue (``PROLOGUES``: relu, sigmoid,
silu, gelu), applied to each A tile as it is loaded, in fp32 and rounded back to
the piece's dtype as the eager op would.  Stock Inductor fuses such producers
into the kernel that writes the cat buffer; without a cat they would otherwise
each need a kernel of their own, which costs more than the cat saved.  Only the
forward is folded: the op's backward refuses prologues, and the pass folds
producers at forward-only sites alone.

It is a ``torch.library.triton_op``, so Inductor traces into it and emits the
kernel in its own generated code.  Its backward is ordinary ATen (per-piece
GEMMs against weight-column views for the input gradients, one GEMM per piece
for the weight gradient), which Inductor compiles like any other backward; the
cat is not saved for backward either.

Only CUDA with Triton, 16-bit floating dtypes (fp32 would raise the TF32
question per call) and at most ``MAX_PARTS`` pieces: ``gemm_form_available``
says whether a site qualifies.  Whether it is worth it is decided by the pass's
benchmark, like every other form.
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Any

import torch
from torch.utils._triton import has_triton


MAX_PARTS = 4
OP_NAME = "cat_linear_fused::linear"
_DTYPES = (torch.float16, torch.bfloat16)

# Prologue codes (the op's ``prologues`` argument, one per piece); 0 is none.
PROLOGUES = {"relu": 1, "sigmoid": 2, "silu": 3, "gelu": 4}

# Every config's K tile: a piece whose width is a multiple of it needs no K mask.
_BLOCK_K = 64


def gemm_form_available(device: torch.device, dtype: torch.dtype, num_parts: int) -> bool:
    return (
        device.type == "cuda"
        and dtype in _DTYPES
        and 2 <= num_parts <= MAX_PARTS
        and has_triton()
    )


# The kernels are defined whenever the triton package imports (cheap: nothing is
# compiled until a launch); ``gemm_form_available`` decides whether they are used.
if importlib.util.find_spec("triton") is not None:
    import triton
    import triton.language as tl

    # ONE_LOOP picks the K-loop layout: one pipelined loop over every K tile
    # with 128x128 tiles, or one loop per piece with 128x256 tiles.  Measured
    # (benchmarks/cat_linear_fused_kernel_gpu.py, eight tile configs per layout)
    # pieces of 64-128 were fastest with the first and pieces of 1024-4096 with
    # the second.  Only configs that won somewhere are kept.  The pass pins one
    # of them per site (``pick_config``): what it benchmarked is what the
    # compiled code runs, and nothing is autotuned at compile time.  Unpinned
    # calls (``config=-1``) autotune over all three.
    _CONFIGS = [
        triton.Config({"BLOCK_M": 128, "BLOCK_N": bn, "BLOCK_K": _BLOCK_K, "GROUP_M": 8,
                       "ONE_LOOP": one},
                      num_stages=s, num_warps=8)
        for one, bn, s in ((True, 128, 3), (False, 256, 3), (False, 256, 4))
    ]  # fmt: skip

    @triton.jit
    def _prologue(a, PROLOGUE: tl.constexpr):
        # In fp32, rounded back to the piece's dtype: what the eager op returns.
        if PROLOGUE == 0:
            return a
        if PROLOGUE == 1:
            # Exact in any dtype; NaN stays NaN, as in torch.relu.
            return tl.maximum(a, tl.zeros_like(a), propagate_nan=tl.PropagateNan.ALL).to(a.dtype)
        x = a.to(tl.float32)
        if PROLOGUE == 2:
            x = tl.sigmoid(x)
        elif PROLOGUE == 3:
            x = x * tl.sigmoid(x)
        else:
            x = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))
        return x.to(a.dtype)

    @triton.jit
    def _accumulate_piece(acc, a_ptr, stride_am, stride_ak, k_size, k_start, w_ptr, stride_wn,
               stride_wk, rm, rn, BLOCK_K: tl.constexpr, PROLOGUE: tl.constexpr):  # fmt: skip
        rk = tl.arange(0, BLOCK_K)
        a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
        w_ptrs = w_ptr + rn[None, :] * stride_wn + (k_start + rk)[:, None] * stride_wk
        for k in range(0, tl.cdiv(k_size, BLOCK_K)):
            k_left = k_size - k * BLOCK_K
            # Masked K columns may become nonzero in the prologue (sigmoid(0));
            # the W rows they meet are masked to zero.
            a = _prologue(tl.load(a_ptrs, mask=rk[None, :] < k_left, other=0.0), PROLOGUE)
            w = tl.load(w_ptrs, mask=rk[:, None] < k_left, other=0.0)
            acc = tl.dot(a, w, acc)
            a_ptrs += BLOCK_K * stride_ak
            w_ptrs += BLOCK_K * stride_wk
        return acc

    @triton.jit
    def _accumulate_tiles(acc, a0, a1, a2, a3, stride_a0m, stride_a1m, stride_a2m,
                          stride_a3m, k0, k1, k2, K, w_ptr, stride_wn, rm, rn,
                          BLOCK_K: tl.constexpr, NUM_PARTS: tl.constexpr,
                          PROLOGUE: tl.constexpr):  # fmt: skip
        # Every piece is a whole number of unmasked K tiles with unit K stride and
        # they share one prologue (``ONE_LOOP_OK``): a single loop over all tiles, so
        # the software pipeline runs across piece boundaries.  With one loop per
        # piece each loop fills and drains its own pipeline, which short pieces
        # never amortize.  The tile's piece is picked by scalar selects of its
        # base pointer and row stride, which keep the alignment Triton knows of
        # the arguments, so the loads stay 16-byte asynchronous copies.
        rk = tl.arange(0, BLOCK_K)
        k01 = k0 + k1
        k012 = k01 + k2
        w_ptrs = w_ptr + rn[None, :] * stride_wn + rk[:, None]
        for kk in range(0, K, BLOCK_K):
            in1 = kk >= k0
            base = tl.where(in1, a1 + (kk - k0), a0 + kk)
            stride_am = tl.where(in1, stride_a1m, stride_a0m)
            if NUM_PARTS > 2:
                in2 = kk >= k01
                base = tl.where(in2, a2 + (kk - k01), base)
                stride_am = tl.where(in2, stride_a2m, stride_am)
            if NUM_PARTS > 3:
                in3 = kk >= k012
                base = tl.where(in3, a3 + (kk - k012), base)
                stride_am = tl.where(in3, stride_a3m, stride_am)
            a = _prologue(tl.load(base + rm[:, None] * stride_am + rk[None, :]), PROLOGUE)
            acc = tl.dot(a, tl.load(w_ptrs), acc)
            w_ptrs += BLOCK_K
        return acc

    @triton.jit
    def _cat_linear_kernel(
        a0, a1, a2, a3,
        stride_a0m, stride_a0k, stride_a1m, stride_a1k,
        stride_a2m, stride_a2k, stride_a3m, stride_a3k,
        k0, k1, k2, k3,
        w_ptr, stride_wn, stride_wk, b_ptr, y_ptr, stride_ym, stride_yn,
        M, N, K,
        NUM_PARTS: tl.constexpr, HAS_BIAS: tl.constexpr, ONE_LOOP_OK: tl.constexpr,
        PRO0: tl.constexpr, PRO1: tl.constexpr, PRO2: tl.constexpr, PRO3: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
        GROUP_M: tl.constexpr, ONE_LOOP: tl.constexpr,
    ):  # fmt: skip
        # Grouped launch order: consecutive programs share W tiles in L2.
        pid = tl.program_id(0)
        grid_m = tl.cdiv(M, BLOCK_M)
        grid_n = tl.cdiv(N, BLOCK_N)
        width = GROUP_M * grid_n
        group_id = pid // width
        first_m = group_id * GROUP_M
        group_size = min(grid_m - first_m, GROUP_M)
        pid_m = first_m + (pid % width) % group_size
        pid_n = (pid % width) // group_size

        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        # Out-of-range rows/columns read a valid row/column; the store masks them.
        rm = offs_m % M
        rn = offs_n % N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if ONE_LOOP and ONE_LOOP_OK:
            acc = _accumulate_tiles(acc, a0, a1, a2, a3, stride_a0m, stride_a1m, stride_a2m,
                                    stride_a3m, k0, k1, k2, K, w_ptr, stride_wn, rm, rn,
                                    BLOCK_K, NUM_PARTS, PRO0)  # fmt: skip
        else:
            acc = _accumulate_piece(acc, a0, stride_a0m, stride_a0k, k0, 0, w_ptr, stride_wn,
                                    stride_wk, rm, rn, BLOCK_K, PRO0)  # fmt: skip
            acc = _accumulate_piece(acc, a1, stride_a1m, stride_a1k, k1, k0, w_ptr, stride_wn,
                                    stride_wk, rm, rn, BLOCK_K, PRO1)  # fmt: skip
            if NUM_PARTS > 2:
                acc = _accumulate_piece(acc, a2, stride_a2m, stride_a2k, k2, k0 + k1, w_ptr,
                                        stride_wn, stride_wk, rm, rn, BLOCK_K, PRO2)  # fmt: skip
            if NUM_PARTS > 3:
                acc = _accumulate_piece(acc, a3, stride_a3m, stride_a3k, k3, k0 + k1 + k2,
                                        w_ptr, stride_wn, stride_wk, rm, rn, BLOCK_K,
                                        PRO3)  # fmt: skip
        if HAS_BIAS:
            bias = tl.load(b_ptr + offs_n, mask=offs_n < N, other=0.0)
            acc += bias.to(tl.float32)[None, :]
        y_ptrs = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=mask)

    _KEY = ["M", "N", "K", "NUM_PARTS", "ONE_LOOP_OK"]
    cat_linear_kernel = triton.autotune(configs=_CONFIGS, key=_KEY)(_cat_linear_kernel)
    # One single-config kernel per config: a launch with one config runs it
    # without autotuning, in eager and in Inductor's generated code alike.
    _PINNED_KERNELS = [
        triton.autotune(configs=[c], key=_KEY)(_cat_linear_kernel) for c in _CONFIGS
    ]



def _static_eq(value: Any, expected: int) -> bool:
    return isinstance(value, int) and value == expected


def whole_k_tiles(widths: list[Any]) -> bool:
    """Every piece is a whole number of the kernel's K tiles (no masked tail)."""
    return all(_static_eq(w % _BLOCK_K, 0) for w in widths)


def kernel_slots(
    flat: list[torch.Tensor], prologues: list[int]
) -> tuple[list[torch.Tensor], list[Any], list[int]]:
    """The kernel's ``MAX_PARTS`` piece slots: tensors, widths and prologue codes,
    unused slots padded (a width of 0 is never read)."""
    pad = MAX_PARTS - len(flat)
    return (
        flat + [flat[0]] * pad,
        [p.shape[1] for p in flat] + [0] * pad,
        list(prologues) + [0] * (MAX_PARTS - len(prologues)),
    )


def one_loop_ok(parts: list[torch.Tensor], weight: torch.Tensor, prologues: list[int]) -> bool:
    """Whether the single K loop may run: every piece (its last dim is K) is
    whole unmasked K tiles with unit K stride, W has unit K stride, and the
    pieces share one prologue.  Static facts only: a symbolic width or stride
    takes the general loops rather than adding a guard."""
    return (
        len(set(prologues[: len(parts)])) == 1
        and whole_k_tiles([p.shape[-1] for p in parts])
        and all(_static_eq(p.stride(-1), 1) for p in parts)
        and _static_eq(weight.stride(1), 1)
    )


# Indices into _CONFIGS, for pick_config.
ONE_LOOP_CONFIG = 0
PER_PIECE_CONFIG = 2
# Widest piece for which the one-loop layout is picked: it won at 64-128, per
# piece won at 1024 and above (kernel table in benchmarks/README.md).
ONE_LOOP_MAX_WIDTH = 256


def pick_config(parts: list[torch.Tensor], weight: torch.Tensor, prologues: list[int]) -> int:
    """The config a site is pinned to (an index into the kernel's configs): one
    loop for narrow pieces where it may run, else per-piece loops with 128x256
    tiles.  ``parts`` may have leading dims; static facts only, as in
    ``one_loop_ok``."""
    narrow = all(
        isinstance(p.shape[-1], int) and p.shape[-1] <= ONE_LOOP_MAX_WIDTH for p in parts
    )
    if narrow and one_loop_ok(parts, weight, prologues):
        return ONE_LOOP_CONFIG
    return PER_PIECE_CONFIG


@functools.cache
def get_op() -> Any:
    """Define the op on first use."""
    from torch.library import triton_op, wrap_triton

    @triton_op(OP_NAME, mutates_args=())
    def cat_linear(
        parts: list[torch.Tensor],
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        prologues: list[int],
        config: int = -1,
    ) -> torch.Tensor:
        lead = parts[0].shape[:-1]
        flat = [p.reshape(-1, p.shape[-1]) for p in parts]
        M, N, K = flat[0].shape[0], weight.shape[0], weight.shape[1]
        y = flat[0].new_empty((M, N))
        a, ks, pro = kernel_slots(flat, prologues)

        def grid(meta: dict[str, Any]) -> tuple[int]:
            return (
                triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),
            )

        kernel = cat_linear_kernel if config < 0 else _PINNED_KERNELS[config]
        wrap_triton(kernel)[grid](
            a[0], a[1], a[2], a[3],
            a[0].stride(0), a[0].stride(1), a[1].stride(0), a[1].stride(1),
            a[2].stride(0), a[2].stride(1), a[3].stride(0), a[3].stride(1),
            ks[0], ks[1], ks[2], ks[3],
            weight, weight.stride(0), weight.stride(1),
            bias if bias is not None else weight, y, y.stride(0), y.stride(1),
            M, N, K,
            NUM_PARTS=len(flat), HAS_BIAS=bias is not None,
            ONE_LOOP_OK=one_loop_ok(flat, weight, pro),
            PRO0=pro[0], PRO1=pro[1], PRO2=pro[2], PRO3=pro[3],
        )  # fmt: skip
        return y.reshape(*lead, N)

    cat_linear.register_autograd(_backward, setup_context=_setup_context)
    return torch.ops.cat_linear_fused.linear.default


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    parts, weight, bias, prologues, *_ = inputs
    ctx.prologues = list(prologues)
    ctx.has_bias = bias is not None
    ctx.save_for_backward(*parts, weight)


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    if any(ctx.prologues):
        raise RuntimeError(
            f"{OP_NAME} has no backward with fused prologues {ctx.prologues}: "
            "cat_linear_fused folds producers only at forward-only sites"
        )
    *parts, weight = ctx.saved_tensors
    n = weight.shape[0]
    g = grad.reshape(-1, n)
    grad_parts: list[torch.Tensor | None] = []
    grad_w_pieces = []
    start = 0
    # needs_input_grad follows the inputs' structure: a list of flags for the parts.
    parts_need_grad = ctx.needs_input_grad[0]
    for p, need in zip(parts, parts_need_grad):
        k = p.shape[-1]
        w_k = weight.narrow(1, start, k)
        grad_parts.append((g @ w_k).reshape(p.shape) if need else None)
        grad_w_pieces.append(g.t() @ p.reshape(-1, k))
        start += k
    grad_w = torch.cat(grad_w_pieces, 1) if ctx.needs_input_grad[1] else None
    grad_b = g.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
    return grad_parts, grad_w, grad_b, None, None
