"""Load our CPU kernel for ``torchao::da8w4_linear_cpu`` and its prepack op.

``load()`` makes the two torchao ops runnable on CPU, with or without torchao:

1. If torchao is importable it is imported first, so that torchao/ops.py defines the
   schemas (defining them here first would make torchao's own ``lib.define`` fail).
2. Each schema is defined here, exactly as torchao spells it, only if it is not
   defined yet.
3. The shared library (built by csrc/CMakeLists.txt) is loaded with
   ``torch.ops.load_library``; its C++ registers only ``TORCH_LIBRARY_IMPL(torchao, CPU)``.
4. Fake (meta) kernels are registered for both ops. torchao's prepack fake returns the
   input shapes (wrong), so ours replaces it; the linear fake is re-registered too so
   that both ops validate their arguments the same way.

``load()`` is idempotent. It returns False (and changes nothing) when the library file
does not exist, or when another CPU kernel is already registered for the op (for
example a torchao build with its own kernel: its prepacked layout differs from ours, so
the two must never be mixed).
"""

from __future__ import annotations

import ctypes
import importlib.util
import inspect
import logging
import os
import pathlib
from typing import Optional

import torch


log = logging.getLogger(__name__)

LIB_ENV = "DA8W4_LINEAR_CPU_LIB"
LIB_NAME = "libda8w4_linear_cpu.so"
BLOCK_N = 32

PREPACK_SCHEMA = (
    "da8w4_linear_prepack_cpu(Tensor weight, Tensor scales, Tensor qzeros) "
    "-> (Tensor, Tensor, Tensor, Tensor)"
)
LINEAR_SCHEMA = (
    "da8w4_linear_cpu(Tensor input, Tensor input_scales, Tensor input_qzeros, "
    "Tensor weight, Tensor weight_scales, Tensor weight_qzeros, Tensor compensation, "
    "Tensor? bias, ScalarType output_dtype) -> Tensor"
)

_lib: Optional[torch.library.Library] = None
_loaded_path: Optional[str] = None
_cdll: Optional[ctypes.CDLL] = None


def default_path() -> str:
    env = os.environ.get(LIB_ENV)
    if env:
        return env
    repo = pathlib.Path(__file__).resolve().parents[1]
    return str(repo / "build" / "csrc" / LIB_NAME)


def _schema_defined(name: str) -> bool:
    try:
        torch._C._dispatch_find_schema_or_throw(f"torchao::{name}", "")
    except RuntimeError:
        return False
    return True


def has_cpu_kernel() -> bool:
    """True when some CPU kernel (ours or another) is registered for the linear op."""
    return _schema_defined("da8w4_linear_cpu") and "CPU" in torch._C._dispatch_dump(
        "torchao::da8w4_linear_cpu"
    )


def _import_torchao_if_present() -> None:
    if importlib.util.find_spec("torchao") is None:
        return
    try:
        import torchao  # noqa: F401
    except Exception as e:  # a broken torchao must not break the kernel
        log.warning("da8w4: importing torchao failed (%s); defining the schemas here", e)


def _register_fake(lib: torch.library.Library, name: str, fn) -> None:
    kwargs = {"lib": lib}
    # 2.13+ default to allow_override=True; 2.11 needs it spelled out.
    if "allow_override" in inspect.signature(torch.library.register_fake).parameters:
        kwargs["allow_override"] = True
    torch.library.register_fake(f"torchao::{name}", fn, **kwargs)


def _prepack_fake(weight, scales, qzeros):
    torch._check(weight.dim() == 2, lambda: "da8w4_linear_prepack_cpu: weight must be 2-D")
    n, k = weight.shape
    if scales.dim() == 1:
        scales = scales.unsqueeze(-1)
    g = scales.size(1)
    torch._check(
        n % BLOCK_N == 0,
        lambda: f"da8w4_linear_prepack_cpu: N={n} must be a multiple of {BLOCK_N}",
    )
    torch._check(
        k % g == 0, lambda: f"da8w4_linear_prepack_cpu: K={k} must be a multiple of G={g}"
    )
    group_size = k // g
    bk = torch.sym_min(group_size, 128)
    torch._check(
        group_size % bk == 0 and bk % 4 == 0,
        lambda: f"da8w4_linear_prepack_cpu: unsupported group_size={group_size}",
    )
    nc, kc = n // BLOCK_N, k // bk
    return (
        weight.new_empty((nc, kc, bk, BLOCK_N // 2), dtype=torch.int8),
        scales.new_empty((nc, g, BLOCK_N), dtype=torch.float32),
        scales.new_empty((nc, g, BLOCK_N), dtype=torch.int8),
        weight.new_empty((nc, kc, BLOCK_N), dtype=torch.int32),
    )


def _linear_fake(
    input,
    input_scales,
    input_qzeros,
    weight,
    weight_scales,
    weight_qzeros,
    compensation,
    bias,
    output_dtype,
):
    torch._check(
        weight.dim() == 4 and weight.size(3) * 2 == BLOCK_N,
        lambda: f"da8w4_linear_cpu: expected a prepacked weight [Nc, Kc, BK, 16], got {tuple(weight.shape)}",
    )
    torch._check(
        input.dtype in (torch.uint8, torch.int8),
        lambda: f"da8w4_linear_cpu: input must be uint8 or int8, got {input.dtype}",
    )
    torch._check(
        output_dtype in (torch.float32, torch.bfloat16, torch.float16),
        lambda: f"da8w4_linear_cpu: unsupported output_dtype {output_dtype}",
    )
    torch._check(
        input.size(-1) == weight.size(1) * weight.size(2),
        lambda: "da8w4_linear_cpu: input.size(-1) does not match the weight's K",
    )
    n = weight.size(0) * BLOCK_N
    return input.new_empty((*input.shape[:-1], n), dtype=output_dtype)


def load(path: Optional[str] = None) -> bool:
    """Load the kernel; True when our CPU kernel is (now) registered."""
    global _lib, _loaded_path
    path = os.path.abspath(path or default_path())
    if _loaded_path is not None:
        if os.path.realpath(path) != os.path.realpath(_loaded_path):
            raise RuntimeError(
                f"da8w4: kernel already loaded from {_loaded_path}, refusing to load {path}"
            )
        return True
    if not os.path.isfile(path):
        log.info("da8w4: %s not built; not loading the CPU kernel", path)
        return False
    built_for = _built_for(path)
    running = torch.__version__.split("+")[0]
    if built_for is not None and built_for != running:
        log.warning(
            "da8w4: %s was built against torch %s, this is torch %s; not loading it",
            path,
            built_for,
            running,
        )
        return False
    already = [p for p in torch.ops.loaded_libraries if os.path.basename(p) == LIB_NAME]
    if already:  # loaded through another copy of this module
        if os.path.realpath(already[0]) != os.path.realpath(path):
            raise RuntimeError(
                f"da8w4: kernel already loaded from {already[0]}, refusing to load {path}"
            )
        _loaded_path = already[0]
        _open_cdll(path)
        return True

    _import_torchao_if_present()
    if has_cpu_kernel():
        log.warning(
            "da8w4: torchao::da8w4_linear_cpu already has a CPU kernel; not loading %s",
            path,
        )
        return False

    lib = _lib or torch.library.Library("torchao", "FRAGMENT")
    if not _schema_defined("da8w4_linear_prepack_cpu"):
        lib.define(PREPACK_SCHEMA)
    if not _schema_defined("da8w4_linear_cpu"):
        lib.define(LINEAR_SCHEMA)
    _lib = lib  # keep the definitions and fakes alive

    torch.ops.load_library(path)
    _register_fake(lib, "da8w4_linear_prepack_cpu", _prepack_fake)
    _register_fake(lib, "da8w4_linear_cpu", _linear_fake)
    _loaded_path = path
    _open_cdll(path)
    return True


def quantize_activation(x: torch.Tensor, symmetric: bool = False):
    """torchao's dynamic per-token activation quantization, in eager ops: the
    activation as da8w4_linear_cpu takes it, ``(q, scales, zero_points)``, one
    scale and zero point per row of the last dim.  Asymmetric: uint8 with
    zero points in [0, 255]; symmetric: int8 in [-127, 127], zero points 0."""
    eps = torch.finfo(torch.float32).eps
    if symmetric:
        amax = x.abs().amax(-1, keepdim=True)
        scale = (amax / 127).clamp(min=eps).float()
        q = torch.round(x / scale).clamp(-127, 127).to(torch.int8)
        zp = torch.zeros_like(scale, dtype=torch.int32)
    else:
        minv = x.amin(-1, keepdim=True).clamp(max=0)
        maxv = x.amax(-1, keepdim=True).clamp(min=0)
        scale = ((maxv - minv) / 255).clamp(min=eps).float()
        zp = (-torch.round(minv / scale)).clamp(0, 255).to(torch.int32)
        q = (torch.round(x / scale) + zp).clamp(0, 255).to(torch.uint8)
    return q.contiguous(), scale.reshape(-1), zp.reshape(-1)


def _built_for(path: str) -> Optional[str]:
    """The torch release recorded by the build next to the library, if any."""
    try:
        with open(path + ".torch") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _open_cdll(path: str) -> None:
    global _cdll
    _cdll = ctypes.CDLL(path)
    for fn in ("da8w4_linear_cpu_last_isa", "da8w4_linear_cpu_best_isa"):
        getattr(_cdll, fn).restype = ctypes.c_char_p


def is_loaded() -> bool:
    return _loaded_path is not None


def best_isa() -> str:
    """The tile kernel chosen at run time on this CPU: avx512vnni, avx2 or scalar."""
    assert _cdll is not None, "load() first"
    return _cdll.da8w4_linear_cpu_best_isa().decode()


def last_isa() -> str:
    """The tile kernel the last da8w4_linear_cpu call used (DA8W4_ISA forces one)."""
    assert _cdll is not None, "load() first"
    return _cdll.da8w4_linear_cpu_last_isa().decode()
