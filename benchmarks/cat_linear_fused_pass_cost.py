"""How cat_linear_fused's per-site decisions scale with the graph, on CPU.

Traces ``FusionHead`` (``cat_linear_fused_model_gpu.py``) at its small sizes with
``--depth`` trunk layers (``depth + 6`` sites, about 8 graph nodes per layer) and
runs the pass's decision phase on Dynamo's graph as if it were on an H100: the
sites report a CUDA device, the gemm form counts as available, and the device
limits are fixed (650 TFLOPS, 2900 GB/s; no GPU is touched).  Nothing is
rewritten.  Prints the wall time of the whole decision phase (median of
``--reps``) and per site.

    python benchmarks/cat_linear_fused_pass_cost.py --depth 6 50 200
"""

import argparse
import os
import statistics
import sys
import time
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from cat_linear_fused_model_gpu import FusionHead, SIZES  # noqa: E402


def decision_ms(depth, reps):
    from torch._inductor.fx_passes import cat_linear_fused as clf
    from torch._inductor.fx_passes import cat_linear_fused_cost as cost
    from torch._inductor.fx_passes import cat_linear_fused_gemm as gemm

    B, dt, di, da, proj, pair, d, _, heads = SIZES["small"]
    model = FusionHead(dt, di, da, proj, pair, d, depth, heads)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, backend=backend)(*[torch.randn(B, k) for k in (dt, di, da)])
    graph = graphs[0].graph
    limits = cost.DeviceLimits(tflops=650.0, dram_gbps=2900.0)
    with mock.patch.object(clf.CatLinearMatch, "device", torch.device("cuda", 0)), \
            mock.patch.object(gemm, "gemm_form_available", return_value=True), \
            mock.patch.object(cost, "device_limits", return_value=limits):  # fmt: skip
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            forms = [clf.should_cat_linear_fused(m) for m in clf.find_cat_linear_matches(graph)]
            times.append((time.perf_counter() - t0) * 1e3)
    return len(graph.nodes), len(forms), statistics.median(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--depth", type=int, nargs="+", default=[6, 50, 200])
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs")
    print("| depth | graph nodes | sites | decisions ms | ms per site |")
    print("|---:|---:|---:|---:|---:|")
    for depth in args.depth:
        nodes, sites, ms = decision_ms(depth, args.reps)
        print(f"| {depth} | {nodes} | {sites} | {ms:.1f} | {ms / sites:.2f} |")


if __name__ == "__main__":
    sys.exit(main())
