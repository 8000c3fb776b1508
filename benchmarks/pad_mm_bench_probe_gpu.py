"""Probe: what ``pad_mm``'s benchmark measures at DLRM's top MLP (16384 x 479 -> 1024,
bf16), where it pads K in some compiles and not in others.

``pad_mm._should_pad`` times the GEMM as given (``ori``) against the padded one
(``pad``: the pad of the weight, which is not excluded, a fill of the pre-padded
input's tail columns, and the GEMM on the padded operands), each with Inductor's
``benchmarker.benchmark_gpu`` (CUDA events around one call, L2 flushed before each),
and pads where ``ori > 1.1 * pad``.  This calls ``pad_mm``'s own functions on the
same operands as its benchmark builds and times each side three ways, ``--reps``
times: ``benchmark_gpu`` as ``pad_mm`` calls it, the device time of its kernels
(``device_time.kernel_time_us``) and host time per call.  If ``pad`` under
``benchmark_gpu`` tracks the host time, not its kernels, the decision depends on
how busy the host is (a compile's worker pool starting up, for one).

    python benchmarks/pad_mm_bench_probe_gpu.py --out $OUT/pad_mm_bench.json
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from device_time import host_time_us, kernel_time_us  # noqa: E402
from torch._inductor.fx_passes import pad_mm  # noqa: E402


def busy_host():
    """A spinning process per CPU, as a compile's worker pool loads the host."""
    spin = [sys.executable, "-c", "while True: pass"]
    return [subprocess.Popen(spin) for _ in range(os.cpu_count() or 1)]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--shape", default="16384,479,1024")
    p.add_argument("--out")
    args = p.parse_args()
    m, k, n = (int(x) for x in args.shape.split(","))
    dev, dt = "cuda", torch.bfloat16
    align = pad_mm.get_alignment_size_dtype(dt)
    kp = pad_mm.get_padded_length(k, align)
    mat1 = torch.randn(m, k, device=dev, dtype=dt)  # the cat, as pad_mm realizes it
    mat2 = torch.randn(n, k, device=dev, dtype=dt).t()  # a weight's transpose
    bias = torch.randn(n, device=dev, dtype=dt)
    # mat1 is a cat Inductor can plan padded (pad_mm excludes its pad), mat2 is not
    mat1_pad = pad_mm.pad_mat1(mat1, m_padded_length=0, k_padded_length=kp)

    def ori():
        torch.addmm(bias, mat1, mat2)

    def pad():
        mat1_pad[:, -kp:].fill_(0)
        pad_mm.pad_addmm(bias, mat1_pad, mat2, 0, kp, 0, mat1_pre_padded=True)

    bench = pad_mm.get_do_bench()
    rows = []
    for rep in range(args.reps):
        for load in ("idle", "busy"):
            spinners = busy_host() if load == "busy" else []
            row = {"rep": rep, "host": load}
            for name, fn in (("ori", ori), ("pad", pad)):
                row[f"{name}_benchmark_gpu_us"] = bench(fn) * 1e3
                row[f"{name}_device_us"] = kernel_time_us(fn)
                row[f"{name}_host_us"] = host_time_us(fn)
            row["pads"] = row["ori_benchmark_gpu_us"] > 1.1 * row["pad_benchmark_gpu_us"]
            for proc in spinners:
                proc.kill()
                proc.wait()
            rows.append(row)
            print({k: round(v, 1) if isinstance(v, float) else v for k, v in row.items()})
    summary = {}
    for load in ("idle", "busy"):
        sel = [r for r in rows if r["host"] == load]
        summary[load] = {
            key: statistics.median(r[key] for r in sel)
            for key in sel[0]
            if key.endswith("_us")
        }
        summary[load]["pads"] = f"{sum(r['pads'] for r in sel)} of {len(sel)}"
    print(json.dumps(summary, indent=1))
    meta = {"machine": torch.cuda.get_device_name(), "torch": torch.__version__,
            "shape": [m, k, n], "reps": args.reps}
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "rows": rows, "summary": summary}, f, indent=1)


if __name__ == "__main__":
    main()
