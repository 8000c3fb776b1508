"""Inductor's device figures on this GPU, stock against patched, and what
``pad_mm`` decides with each (inductor-device-figures), in one process.

Needs a torch with the inductor-device-figures patch installed.  "stock" is
what upstream's code gives on the same machine: the datasheet entry found
under the exact upper-cased device name, else Triton's estimate fed the clock
in MHz (``max_clock_rate()``), where Triton wants kHz.  "patched" is
``get_device_tflops`` as installed.  For a list of GEMMs with unaligned
sizes (the ones ``pad_mm`` may pad), it prints ``is_mm_compute_bound`` under
each set of figures and compiles ``torch.mm`` with each (``get_device_tflops``
mocked to the stock figure for the stock side, Inductor's caches off), records
``pad_mm``'s counters (``pad_mm_bench``: it benchmarked padding) and whether
the generated code pads, and times both by GPU device time, ``--reps`` times,
interleaved.

    PYTHONUNBUFFERED=1 python benchmarks/device_figures_gpu.py --out $OUT/figures.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
from pathlib import Path
from unittest import mock

import torch


sys.path.insert(0, str(Path(__file__).resolve().parent))
from device_time import kernel_time_us  # noqa: E402


SHAPES = [  # (M, K, N), bf16: unaligned sizes pad_mm may pad
    (8191, 8191, 8191),
    (4097, 4095, 4097),
    (8192, 4095, 8192),
    (16383, 1023, 4097),
    (2047, 12287, 2047),
    (1025, 1025, 1025),
]


def stock_tflops(dtype: torch.dtype) -> float:
    """Upstream's ``get_device_tflops``: exact-name datasheet lookup, else
    Triton's estimate with the clock in MHz."""
    from torch._inductor.analysis import device_info

    name = torch.cuda.get_device_name()
    info = device_info._device_mapping.get(name.upper())
    if info is not None and dtype in info.tops:
        return info.tops[dtype] / info.tops_sparsity_factor
    from torch._utils_internal import max_clock_rate
    from triton.testing import get_max_simd_tflops, get_max_tensorcore_tflops

    if dtype in (torch.float16, torch.bfloat16):
        return get_max_tensorcore_tflops(dtype, max_clock_rate())
    return get_max_simd_tflops(torch.float32, max_clock_rate())


def compile_mm(m: int, k: int, n: int, tflops: float | None) -> dict:
    from torch._dynamo.utils import counters
    from torch._inductor import config
    from torch._inductor.utils import run_and_get_code

    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    counters.clear()
    torch._dynamo.reset()
    patch = (
        mock.patch("torch._inductor.utils.get_device_tflops", return_value=tflops)
        if tflops is not None
        else contextlib.nullcontext()
    )
    # pad_mm caches its benchmarked decisions by shape: each side decides anew
    no_cache = mock.patch(
        "torch._inductor.fx_passes.pad_mm.get_cached_should_pad", return_value=None
    )
    with patch, no_cache, config.patch(fx_graph_cache=False, shape_padding=True):
        fn = torch.compile(torch.mm)
        _, code = run_and_get_code(fn, a, b)
    src = "\n".join(code)
    return {
        "fn": lambda: fn(a, b),
        "pad_mm_bench": counters["inductor"]["pad_mm_bench"],
        "padded": "constant_pad_nd" in src or "triton_poi_fused_constant_pad" in src,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="device_figures_gpu.json")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    from torch._inductor.fx_passes.pad_mm import is_mm_compute_bound
    from torch._inductor.utils import get_device_tflops, get_gpu_dram_gbps

    name = torch.cuda.get_device_name()
    figures = {
        "device": name,
        "torch": torch.__version__,
        "dram_gbps": get_gpu_dram_gbps(),
        "stock": {str(d): stock_tflops(d) for d in (torch.bfloat16, torch.float32)},
        "patched": {
            str(d): get_device_tflops(d) for d in (torch.bfloat16, torch.float32)
        },
    }
    print(json.dumps(figures, indent=1), flush=True)
    rows = []
    for m, k, n in SHAPES:
        row = {"shape": [m, k, n]}
        sides = {"stock": figures["stock"]["torch.bfloat16"], "patched": None}
        compiled = {}
        for side, tflops in sides.items():
            patch = (
                mock.patch("torch._inductor.utils.get_device_tflops", return_value=tflops)
                if tflops is not None
                else contextlib.nullcontext()
            )
            with patch:
                row[f"{side}_compute_bound"] = is_mm_compute_bound(
                    m, k, n, torch.bfloat16
                )
            compiled[side] = compile_mm(m, k, n, tflops)
            row[f"{side}_pad_mm_bench"] = compiled[side]["pad_mm_bench"]
            row[f"{side}_padded"] = compiled[side]["padded"]
        times = {side: [] for side in compiled}
        for _ in range(args.reps):
            for side, c in compiled.items():
                times[side].append(kernel_time_us(c["fn"]))
        for side, ts in times.items():
            row[f"{side}_us"] = statistics.median(ts)
            row[f"{side}_us_spread"] = [min(ts), max(ts)]
        row["patched_over_stock"] = row["patched_us"] / row["stock_us"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    Path(args.out).write_text(json.dumps({"figures": figures, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
