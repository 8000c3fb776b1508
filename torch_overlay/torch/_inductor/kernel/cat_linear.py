"""
``inductor::cat_linear``: ``linear(cat(parts, -1), weight, bias)`` as one op,
so its lowering can choose a GEMM that reads every piece where it lives.

The ``cat_linear`` pre-grad fusion (``fx_passes/cat_linear_fused.py``) rewrites
a site into this op only where it decided that the in-place GEMM pays.  The
lowering then offers Inductor's choice machinery a Triton template that walks
the pieces along K into one accumulator (no cat buffer):

* by default, one template choice with a heuristic config, compiled with the
  rest of the graph's kernels (no benchmark);
* under ``max_autotune``, the template's configs next to the extern
  ``cat`` + ``addmm``, benchmarked by ``autotune_select_algorithm`` with its
  cache and parallel precompile.

The bias is the template's epilogue, as in ``tuned_addmm``, so every choice
is timed with it.

Where no template applies (not CUDA, not fp16/bf16, the Triton backend turned
off) it lowers to ``cat`` + ``mm``, i.e. stock.  The backward is stock's math:
one GEMM for the input gradient, split per piece, and one on the re-formed cat
for the weight gradient.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from .. import config
from ..ir import FixedLayout
from ..lowering import expand, lowerings, register_lowering
from ..select_algorithm import (
    autotune_select_algorithm,
    ExternKernelChoice,
    realize_inputs,
    TritonTemplate,
)
from ..utils import get_gpu_shared_memory, sympy_product, use_aten_gemm_kernels
from ..fx_passes.cat_linear_fused_cost import BLOCK_K, MAX_PARTS, ONE_LOOP_MAX_WIDTH
from ..virtualized import V
from .mm import bias_addmm
from .mm_common import addmm_epilogue, mm_grid


aten = torch.ops.aten


@torch.library.custom_op("inductor::cat_linear", mutates_args=())
def cat_linear(
    parts: list[torch.Tensor], weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    return torch.nn.functional.linear(torch.cat(parts, -1), weight, bias)


@cat_linear.register_fake
def _(
    parts: list[torch.Tensor], weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    torch._check(sum(p.shape[-1] for p in parts) == weight.shape[1])
    return parts[0].new_empty((*parts[0].shape[:-1], weight.shape[0]))


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    parts, weight, *bias = inputs  # a default bias may be left out
    ctx.widths = [p.shape[-1] for p in parts]
    ctx.has_bias = bool(bias) and bias[0] is not None
    ctx.save_for_backward(*parts, weight)


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    *parts, weight = ctx.saved_tensors
    need_parts, need_weight, *need_bias = ctx.needs_input_grad
    grad_parts = None
    if any(need_parts):
        grad_parts = [
            g if need else None
            for g, need in zip(torch.split(grad @ weight, ctx.widths, -1), need_parts)
        ]
    grad_weight = None
    if need_weight:
        x = torch.cat(parts, -1)
        grad_weight = grad.flatten(0, -2).t() @ x.flatten(0, -2)
    if not need_bias:  # called without a bias
        return grad_parts, grad_weight
    grad_bias = grad.flatten(0, -2).sum(0) if ctx.has_bias and need_bias[0] else None
    return grad_parts, grad_weight, grad_bias


cat_linear.register_autograd(_backward, setup_context=_setup_context)


def _cat_mm(*args: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    *parts, mat2 = args
    return torch.mm(torch.cat(parts, 1), mat2, out=out)


def _cat_addmm(
    bias: torch.Tensor, *args: torch.Tensor, out: torch.Tensor
) -> torch.Tensor:
    *parts, mat2 = args
    return bias_addmm(bias, torch.cat(parts, 1), mat2, out=out)


aten_cat_mm = ExternKernelChoice(_cat_mm, None, name="cat_linear_cat_mm")
aten_cat_addmm = ExternKernelChoice(_cat_addmm, None, name="cat_linear_cat_addmm")

_GROUPED_PID = r"""
    pid = tl.program_id(0)
    grid_m = (M + BLOCK_M - 1) // BLOCK_M
    grid_n = (N + BLOCK_N - 1) // BLOCK_N
    width = GROUP_M * grid_n
    group_id = pid // width
    group_size = min(grid_m - group_id * GROUP_M, GROUP_M)
    pid_m = group_id * GROUP_M + (pid % group_size)
    pid_n = (pid % width) // group_size
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = rm % M
    offs_n = rn % N
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_TYPE)
"""

_STORE = r"""
    idx_m = rm[:, None]
    idx_n = rn[None, :]
    mask = (idx_m < M) & (idx_n < N)
    {{store_output(("idx_m", "idx_n"), "acc", "mask", val_shape=("BLOCK_M", "BLOCK_N"))}}
"""


def _per_piece_source(num_parts: int) -> str:
    """One K loop per piece; each piece loads through ``load_input`` so a
    prologue can fuse into it."""
    names = ", ".join(f'"A{i}"' for i in range(num_parts))
    src = f'{{{{def_kernel({names}, "B")}}}}\n'
    src += '    M = {{size("A0", 0)}}\n    N = {{size("B", 1)}}\n'
    src += "    if M * N == 0:\n        return\n"
    src += '    stride_bk = {{stride("B", 0)}}\n    stride_bn = {{stride("B", 1)}}\n'
    src += _GROUPED_PID
    k_start = "0"
    for i in range(num_parts):
        src += f"""
    K{i} = {{{{size("A{i}", 1)}}}}
    for k_idx in range(0, tl.cdiv(K{i}, BLOCK_K)):
        k_in = k_idx * BLOCK_K + offs_k
        idx_m = offs_m[:, None]
        idx_n = k_in[None, :]
        a_mask = idx_n < K{i}
        {{{{load_input("A{i}", "a", ("idx_m", "idx_n"), mask=None if EVEN_K else "a_mask",
                     indent_width=8, index_shape=("BLOCK_M", "BLOCK_K"))}}}}
        b_ptrs = B + ({k_start} + k_in)[:, None] * stride_bk + offs_n[None, :] * stride_bn
        {{% if EVEN_K %}}
        b = tl.load(b_ptrs)
        {{% else %}}
        b = tl.load(b_ptrs, mask=k_in[:, None] < K{i}, other=0.0)
        {{% endif %}}
        acc += tl.dot(a, b, out_dtype=ACC_TYPE)
"""
        k_start += f" + K{i}"
    return src + _STORE


def _one_loop_source(num_parts: int) -> str:
    """One K loop over every tile of every piece, the piece picked per tile by
    selects of its base pointer and row stride, so the software pipeline runs
    across piece boundaries (short pieces).  Needs whole K tiles and unit K
    strides (checked by ``_one_loop_ok``)."""
    names = ", ".join(f'"A{i}"' for i in range(num_parts))
    src = f'{{{{def_kernel({names}, "B")}}}}\n'
    src += '    M = {{size("A0", 0)}}\n    N = {{size("B", 1)}}\n'
    src += "    if M * N == 0:\n        return\n"
    src += '    stride_bk = {{stride("B", 0)}}\n    stride_bn = {{stride("B", 1)}}\n'
    src += "    K = 0\n"
    for i in range(num_parts):
        src += f'    stride_a{i} = {{{{stride("A{i}", 0)}}}}\n'
        src += f'    K{i} = K\n    K = K + {{{{size("A{i}", 1)}}}}\n'
    src += _GROUPED_PID
    src += """
    for kk in range(0, K, BLOCK_K):
        base = A0 + kk
        stride_am = stride_a0
"""
    for i in range(1, num_parts):
        src += f"""        in{i} = kk >= K{i}
        base = tl.where(in{i}, A{i} + (kk - K{i}), base)
        stride_am = tl.where(in{i}, stride_a{i}, stride_am)
"""
    src += """        a = tl.load(base + offs_m[:, None] * stride_am + offs_k[None, :])
        b_ptrs = B + (kk + offs_k)[:, None] * stride_bk + offs_n[None, :] * stride_bn
        acc += tl.dot(a, tl.load(b_ptrs), out_dtype=ACC_TYPE)
"""
    return src + _STORE


@functools.cache
def _template(num_parts: int, one_loop: bool) -> TritonTemplate:
    source = _one_loop_source if one_loop else _per_piece_source
    name = f"cat_mm_{'one_loop' if one_loop else 'per_piece'}_{num_parts}"
    return TritonTemplate(name=name, grid=mm_grid, source=source(num_parts))


def _static_int(expr: Any) -> int | None:
    try:
        return int(expr)
    except TypeError:
        return None


def _one_loop_ok(parts: list[Any], widths: list[int | None]) -> bool:
    sizevars = V.graph.sizevars
    return all(w is not None and w % BLOCK_K == 0 for w in widths) and all(
        sizevars.statically_known_equals(p.get_stride()[1], 1) for p in parts
    )


# (BLOCK_M, BLOCK_N, num_stages, num_warps), all with a K tile of BLOCK_K (the
# decision's whole-tile test); the first that fits is the default of each
# layout, the rest join under max_autotune.  ONE_LOOP_MAX_WIDTH is the widest
# piece for which the one-loop layout is the default.
_ONE_LOOP_CONFIGS = [(128, 128, 3, 8), (64, 128, 4, 4), (128, 64, 4, 4)]
_PER_PIECE_CONFIGS = [
    (128, 256, 4, 8),
    (128, 256, 3, 8),
    (128, 128, 3, 8),
    (64, 128, 4, 4),
]


def _fits(cfg: tuple[int, ...], itemsize: int) -> bool:
    block_m, block_n, stages, _ = cfg
    return stages * (block_m + block_n) * BLOCK_K * itemsize <= get_gpu_shared_memory()


def _choices(
    parts: list[Any],
    mat2: Any,
    bias: Any,
    layout: FixedLayout,
    widths: list[int | None],
) -> list[Any]:
    autotune = config.max_autotune or config.max_autotune_gemm
    itemsize = layout.dtype.itemsize
    n = _static_int(mat2.get_size()[1])
    even_k = all(w is not None and w % BLOCK_K == 0 for w in widths)
    one_loop = _one_loop_ok(parts, widths)
    narrow = all(w is not None and w <= ONE_LOOP_MAX_WIDTH for w in widths)
    layouts = []
    if one_loop and (narrow or autotune):
        layouts.append((True, _ONE_LOOP_CONFIGS))
    if not (one_loop and narrow) or autotune:
        per_piece = _PER_PIECE_CONFIGS
        if n is not None and n <= 128:
            per_piece = [c for c in per_piece if c[1] <= 128]
        layouts.append((False, per_piece))

    choices: list[Any] = []
    nodes = (*parts, mat2) if bias is None else (bias, *parts, mat2)
    if autotune and use_aten_gemm_kernels():
        extern = aten_cat_mm if bias is None else aten_cat_addmm
        choices.append(extern.bind(nodes, layout))
    epilogue = {}
    if bias is not None:
        epilogue = dict(prefix_args=1, epilogue_fn=addmm_epilogue(layout.dtype, 1, 1))
    for is_one_loop, configs in layouts:
        fitting = [c for c in configs if _fits(c, itemsize)]
        for block_m, block_n, stages, warps in fitting[: None if autotune else 1]:
            _template(len(parts), is_one_loop).maybe_append_choice(
                choices,
                input_nodes=nodes,
                layout=layout,
                **epilogue,
                num_stages=stages,
                num_warps=warps,
                BLOCK_M=block_m,
                BLOCK_N=block_n,
                BLOCK_K=BLOCK_K,
                GROUP_M=8,
                EVEN_K=even_k,
                ACC_TYPE="tl.float32",
            )
        if not autotune and choices:
            break
    return choices


def tuned_cat_addmm(parts: list[Any], mat2: Any, bias: Any = None) -> Any:
    """``addmm(bias, cat(parts, 1), mat2)`` for 2-D ``parts`` (``bias`` 1-D or
    None), reading the parts in place."""
    m = parts[0].get_size()[0]
    n = mat2.get_size()[1]
    widths = [_static_int(p.get_size()[1]) for p in parts]
    layout = FixedLayout(parts[0].get_device(), parts[0].get_dtype(), [m, n])
    choices: list[Any] = []
    nodes: list[Any] = []
    if (
        layout.device.type == "cuda"
        and layout.dtype in (torch.float16, torch.bfloat16)
        and 2 <= len(parts) <= MAX_PARTS
        and "TRITON" in config.max_autotune_gemm_backends.upper()
    ):
        parts = realize_inputs(*parts)
        mat2 = realize_inputs(mat2)
        inp = None if bias is None else realize_inputs(expand(bias, [m, n]))
        choices = _choices(parts, mat2, inp, layout, widths)
        nodes = [*parts, mat2] if inp is None else [inp, *parts, mat2]
    if not choices:
        cat = lowerings[aten.cat.default](parts, 1)
        if bias is None:
            return lowerings[aten.mm.default](cat, mat2)
        return lowerings[aten.addmm.default](bias, cat, mat2)
    result = autotune_select_algorithm("cat_mm", choices, nodes, layout)
    # (node, choice) where autotune_select_algorithm returns the choice too
    return result[0] if isinstance(result, tuple) else result


@register_lowering(torch.ops.inductor.cat_linear.default, type_promotion_kind=None)
def lower_cat_linear(parts: list[Any], weight: Any, bias: Any = None) -> Any:
    lead = list(parts[0].get_size()[:-1])
    m = sympy_product(lead)
    flat = [lowerings[aten.view.default](p, [m, p.get_size()[-1]]) for p in parts]
    mat2 = lowerings[aten.permute.default](weight, [1, 0])
    out = tuned_cat_addmm(flat, mat2, bias)
    return lowerings[aten.view.default](out, [*lead, weight.get_size()[0]])
