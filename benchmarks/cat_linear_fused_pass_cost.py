"""How the ``cat_linear`` fusion's per-site decisions scale with the graph, on CPU.

Traces ``FusionHead`` (``cat_linear_fused_model_gpu.py``) at its small sizes with
``--depth`` trunk layers (``depth + 6`` sites, about 8 graph nodes per layer) and
runs the fusion's decision (``CatLinearRule.match`` on every node, as the fusion's
search does) on Dynamo's graph as if on an H100: the sites report a CUDA device
and the ridge point is an H100 SXM's (no GPU is touched).  Nothing is rewritten.
Prints the wall time of the whole decision phase (median of ``--reps``) and per
site.

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


H100_RIDGE = 238.0  # cat_linear_fused_cost.ridge_point of an H100 SXM


def decision_ms(depth, reps):
    from torch._inductor.fx_passes import cat_linear_fused as clf
    from torch._inductor.fx_passes import cat_linear_fused_cost as cost

    B, dt, di, da, proj, pair, d, _, heads = SIZES["small"]
    model = FusionHead(dt, di, da, proj, pair, d, depth, heads).bfloat16()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        xs = [torch.randn(B, k, dtype=torch.bfloat16) for k in (dt, di, da)]
        torch.compile(model, backend=backend)(*xs)
    graph = graphs[0].graph
    site = clf.CatLinearMatch.site

    def cuda_site(match):
        s = site(match)
        return None if s is None else cost.dataclasses.replace(s, device=torch.device("cuda", 0))

    with (
        mock.patch.object(clf.CatLinearMatch, "site", cuda_site),
        mock.patch.object(cost, "ridge_point", return_value=H100_RIDGE),
    ):
        times, decided = [], 0
        for _ in range(reps):
            rule = clf.CatLinearRule({})
            t0 = time.perf_counter()
            decided = sum(rule.match(n) is not None for n in graph.nodes)
            times.append((time.perf_counter() - t0) * 1e3)
    sites = sum(n.target in clf.LINEAR_TARGETS for n in graph.nodes)
    return len(graph.nodes), sites, decided, statistics.median(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--depth", type=int, nargs="+", default=[6, 50, 200])
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs")
    print("| depth | graph nodes | linear sites | taken | decisions ms | ms per site |")
    print("|---:|---:|---:|---:|---:|---:|")
    for depth in args.depth:
        nodes, sites, taken, ms = decision_ms(depth, args.reps)
        print(f"| {depth} | {nodes} | {sites} | {taken} | {ms:.1f} | {ms / sites:.2f} |")


if __name__ == "__main__":
    sys.exit(main())
