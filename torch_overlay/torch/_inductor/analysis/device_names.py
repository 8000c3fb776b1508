"""Datasheet figures under the names GPUs report.

``device_info._device_mapping`` is keyed by family ("NVIDIA H100",
"NVIDIA A100"), but ``torch.cuda.get_device_name()`` reports the part with
its form factor and memory: "NVIDIA H100 80GB HBM3" (SXM), "NVIDIA H100
PCIe", "NVIDIA A100-SXM4-40GB".  Such a name misses the table, and
``get_device_tflops`` falls back to Triton's estimate.  The parts of one
family differ in SM count, clocks and memory (an H100 PCIe has about three
quarters of the SXM part's Tensor Core throughput), so a family's figures
are not those of each of its parts.

``lookup_reported_device`` is what ``lookup_device_info`` asks when the name
is not a key of its own table (its exact lookup stays first, so every name
that matched before gets the same figures).  It knows the names below,
exactly (upper-cased, runs of spaces collapsed), and nothing by prefix: a
prefix rule would give "NVIDIA H100 PCIe" the SXM part's figures, and a
name it does not know (a new part, a MIG slice) the whole card's.  An
unknown name gets None, as before, and the caller's fallback.

Figures are dense: NVIDIA's datasheets since Hopper give Tensor Core rows
with 2:4 structured sparsity only (marked "with sparsity"), halved here, as
the table's own Blackwell entries do; float64 is the Tensor Core figure.
"""

from __future__ import annotations

import torch
from torch._inductor.analysis.device_info import DeviceInfo


def _part(
    *,
    fp64: float,
    fp32: float,
    tf32: float,
    fp16: float,
    int8: float,
    dram_bw_gbs: float,
    dram_gb: float,
    fp8: float | None = None,
) -> DeviceInfo:
    """One part's dense figures: fp16 is also bf16's, fp8 each float8 format's the part multiplies."""
    tops: dict[torch.dtype | str, float] = {
        torch.float64: fp64,
        torch.float32: fp32,
        "torch.tf32": tf32,
        torch.bfloat16: fp16,
        torch.float16: fp16,
        torch.int8: int8,
    }
    if fp8 is not None:
        tops.update(dict.fromkeys((torch.float8_e4m3fn, torch.float8_e5m2), fp8))
    return DeviceInfo(tops=tops, dram_bw_gbs=dram_bw_gbs, dram_gb=dram_gb)


# Source: NVIDIA H100 Tensor Core GPU datasheet, "H100 SXM" and "H100 PCIe" columns
# @lint-ignore https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet
# and H100 product page, "H100 NVL" column
# @lint-ignore https://www.nvidia.com/en-us/data-center/h100/
# Tensor Core rows are with sparsity: halved.
_H100_SXM = _part(
    fp64=67,
    fp32=67,
    tf32=989 / 2,
    fp16=1979 / 2,
    fp8=3958 / 2,
    int8=3958 / 2,
    dram_bw_gbs=3350,
    dram_gb=80,
)
_H100_PCIE = _part(
    fp64=51,
    fp32=51,
    tf32=756 / 2,
    fp16=1513 / 2,
    fp8=3026 / 2,
    int8=3026 / 2,
    dram_bw_gbs=2000,
    dram_gb=80,
)
_H100_NVL = _part(
    fp64=60,
    fp32=60,
    tf32=835 / 2,
    fp16=1671 / 2,
    fp8=3341 / 2,
    int8=3341 / 2,
    dram_bw_gbs=3900,
    dram_gb=94,
)

# Source: H200 product page, "H200 SXM" and "H200 NVL" columns
# @lint-ignore https://www.nvidia.com/en-us/data-center/h200/
# Tensor Core rows are with sparsity: halved.
_H200_SXM = _part(
    fp64=67,
    fp32=67,
    tf32=989 / 2,
    fp16=1979 / 2,
    fp8=3958 / 2,
    int8=3958 / 2,
    dram_bw_gbs=4800,
    dram_gb=141,
)
_H200_NVL = _part(
    fp64=60,
    fp32=60,
    tf32=835 / 2,
    fp16=1671 / 2,
    fp8=3341 / 2,
    int8=3341 / 2,
    dram_bw_gbs=4800,
    dram_gb=141,
)


# Source: NVIDIA A100 datasheet; the four parts share the compute rows (dense
# figures, no float8) and differ in memory bandwidth and size
# @lint-ignore https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/
# nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf
def _a100(dram_bw_gbs: float, dram_gb: float) -> DeviceInfo:
    return _part(
        fp64=19.5,
        fp32=19.5,
        tf32=156,
        fp16=312,
        int8=624,
        dram_bw_gbs=dram_bw_gbs,
        dram_gb=dram_gb,
    )


# Source: NVIDIA HGX page, "HGX B200" column, per GPU
# @lint-ignore https://www.nvidia.com/en-us/data-center/hgx/
# Tensor Core rows are with sparsity: halved.  Where the table has its own
# "NVIDIA B200" entry, that entry is found first.
_B200 = _part(
    fp64=37,
    fp32=75,
    tf32=2250 / 2,
    fp16=4500 / 2,
    fp8=9000 / 2,
    int8=9000 / 2,
    dram_bw_gbs=7700,
    dram_gb=180,
)


# Names as torch.cuda.get_device_name() reports them, upper-cased.
_REPORTED_NAMES: dict[str, DeviceInfo] = {
    "NVIDIA H100 80GB HBM3": _H100_SXM,
    "NVIDIA H100 PCIE": _H100_PCIE,
    "NVIDIA H100 NVL": _H100_NVL,
    "NVIDIA H200": _H200_SXM,
    "NVIDIA H200 NVL": _H200_NVL,
    "NVIDIA A100-SXM4-80GB": _a100(2039, 80),
    "NVIDIA A100-SXM4-40GB": _a100(1555, 40),
    "NVIDIA A100 80GB PCIE": _a100(1935, 80),
    "NVIDIA A100-PCIE-40GB": _a100(1555, 40),
    "NVIDIA B200": _B200,
}


def lookup_reported_device(name: str) -> DeviceInfo | None:
    """The datasheet figures of the part that reports ``name``, or None if no
    known part reports it (see the module docstring: no prefix matching)."""
    return _REPORTED_NAMES.get(" ".join(name.upper().split()))
