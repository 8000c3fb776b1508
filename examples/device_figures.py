"""Demo of the device figures lookup (run by `python -m tools demo` in a venv with the patch
set installed).

Inductor asks ``torch._inductor.analysis.device_info`` for a GPU's datasheet figures under
the name the GPU reports (``torch.cuda.get_device_name()``), and ``get_device_tflops`` (which
``pad_mm``'s compute-bound check and the ``cat_linear`` decision read) falls back to Triton's
estimate where the table has no entry.  Upstream's table is keyed by short names ("NVIDIA
H100"), while the GPUs report "NVIDIA H100 80GB HBM3", "NVIDIA H200", ...; with the patch
(``analysis/device_names.py``) those names find the part's own dense figures, and a name the
table does not know gets none (never another part's).

On a CPU machine the demo asks the lookup directly for the names real GPUs report and prints
what each finds; on a GPU it also prints what Inductor reports for the GPU it runs on.  What
the figures change on a GPU (``pad_mm``'s decisions, ``cat_linear``'s) is measured in
benchmarks/README.md, section "Device figures: pad_mm and cat_linear decisions".
"""

import torch
from torch._inductor.analysis import device_info


REPORTED = [
    "NVIDIA H100 80GB HBM3",
    "NVIDIA H100 PCIe",
    "NVIDIA H100 NVL",
    "NVIDIA H200",
    "NVIDIA A100-SXM4-80GB",
    "NVIDIA B200",
    "NVIDIA H100 XYZ",  # not a real part: no figures rather than another part's
]


def dense_bf16(info):
    if info is None or torch.bfloat16 not in info.tops:
        return None
    return info.tops[torch.bfloat16] / getattr(info, "tops_sparsity_factor", 1)


def main():
    try:
        from torch._inductor.analysis import device_names  # noqa: F401
    except ImportError:
        raise SystemExit("the inductor-device-figures patch is not installed in this torch") from None
    print(f"{'reported name':<26} {'dense bf16 TFLOP/s':>20} {'DRAM GB/s':>10}")
    found = 0
    for name in REPORTED:
        info = device_info.lookup_device_info(name)
        tflops = dense_bf16(info)
        found += tflops is not None
        bw = "-" if info is None else f"{info.dram_bw_gbs:g}"
        print(f"{name:<26} {'-' if tflops is None else f'{tflops:g}':>20} {bw:>10}")
    assert found == len(REPORTED) - 1, "every real part's name finds its figures, the made-up one none"
    if torch.cuda.is_available():
        from torch._inductor.utils import get_device_tflops, get_gpu_dram_gbps

        print(f"\nthis GPU: {torch.cuda.get_device_name()}: get_device_tflops(bfloat16) = "
              f"{get_device_tflops(torch.bfloat16):g}, get_gpu_dram_gbps() = {get_gpu_dram_gbps():g}")
    print("\nwhat the figures change (pad_mm, cat_linear): benchmarks/README.md, "
          "section Device figures: pad_mm and cat_linear decisions")


if __name__ == "__main__":
    main()
