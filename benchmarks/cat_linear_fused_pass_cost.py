"""How the ``cat_linear`` lowering's per-site work scales with the graph, on CPU.

Compiles ``FusionHead`` (``cat_linear_fused_model_gpu.py``) at its small widths and
``--batch`` rows, bf16, inference, with ``--depth`` trunk layers (``depth + 6`` sites), the fusion off, and
captures the post-grad forward graph with a post-grad custom pre pass
(``config.post_grad_custom_pre_pass``).  On that graph it runs what the lowering
adds to a compile, as ``PatternMatcherPass.apply`` runs it: for every ``mm``/``addmm``
node, the ``cat_linear`` patterns' match and, where one matches, the per-site check
(``cat_linear_lowering._check``: ``can_fuse_cat_mm``, then ``should_fuse_cat_mm`` and
the analytic decision ``cat_linear_decision.decide``, the graph's step cost
included), with the fusion on and the sites taken as if on an H100: they report a
CUDA device and the ridge point is the one ``cat_linear_decision.ridge_point``
computes from an H100 SXM's datasheet figures (no GPU is touched).  Nothing is
rewritten: the compile is stopped once the graph is measured.  Prints the wall time
of the whole per-graph work (median of ``--reps``; the graph's step cost is
recomputed each time, as once per compile) and per site.

    python benchmarks/cat_linear_fused_pass_cost.py --depth 6 50 200
"""

import argparse
import contextlib
import warnings
import dataclasses
import os
import statistics
import sys
import time
import uuid
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from cat_linear_fused_model_gpu import FusionHead, SIZES  # noqa: E402
from torch._inductor.custom_graph_pass import CustomGraphPass  # noqa: E402


# An H100 SXM's datasheet figures, where cat_linear_decision.ridge_point asks
# Inductor for them (get_device_tflops: dense bf16 TFLOP/s; get_gpu_dram_gbps: GB/s).
H100_TFLOPS, H100_DRAM_GBPS = 989.0, 3350


class Measured(Exception):
    """Raised by the pre pass once it has measured: the rest of the compile is not needed."""


def h100_ridge():
    """``cost.ridge_point`` of a CUDA bf16 device with an H100 SXM's figures."""
    from torch._inductor.fx_passes import cat_linear_decision as cost

    cost.ridge_point.cache_clear()
    try:
        with (
            mock.patch("torch.cuda.is_available", return_value=True),
            mock.patch("torch.cuda.device", return_value=contextlib.nullcontext()),
            mock.patch("torch.version.hip", None),
            mock.patch("torch._inductor.utils.get_device_tflops", return_value=H100_TFLOPS),
            mock.patch("torch._inductor.utils.get_gpu_dram_gbps", return_value=H100_DRAM_GBPS),
        ):
            return cost.ridge_point(torch.device("cuda", 0), torch.bfloat16)
    finally:
        cost.ridge_point.cache_clear()


def cat_linear_entries():
    """The pattern entries the lowering registered into post-grad's pattern passes,
    by the node target they are tried on."""
    from torch._inductor.fx_passes import cat_linear_lowering, post_grad

    post_grad.lazy_init()
    by_target = {}
    for pass_dict in post_grad.pass_patterns:
        for (op, target), entries in pass_dict.patterns.items():
            for e in entries:
                if e.extra_check is cat_linear_lowering._check:
                    by_target.setdefault(target, []).append(e)
    assert by_target, "no cat_linear pattern in post_grad.pass_patterns: install the inductor-cat-linear-fused patch"
    return by_target


def measure(graph, reps):
    """The lowering's match + check over ``graph``, as if on an H100: (mm/addmm nodes,
    pattern matches, sites taken, per-rep milliseconds)."""
    from torch._inductor import config
    from torch._inductor.fx_passes import cat_linear_decision as cost, cat_linear_lowering as cl
    from torch._inductor.pattern_matcher import is_match

    entries = cat_linear_entries()
    site = cl.site

    def cuda_site(match):
        return dataclasses.replace(site(match), device=torch.device("cuda", 0))

    ridge = h100_ridge()
    times, gemms, matched, taken = [], 0, 0, 0
    with (
        config.patch(pre_grad_fusion_options={"cat_linear": {}}),
        mock.patch.object(cl, "site", cuda_site),
        mock.patch.object(cost, "ridge_point", return_value=ridge),
    ):
        for _ in range(reps):
            gemms = matched = taken = 0
            t0 = time.perf_counter()
            for target, es in entries.items():
                for node in graph.find_nodes(op="call_function", target=target):
                    gemms += 1
                    for e in es:
                        m = e.pattern.match(node)
                        if is_match(m):
                            matched += 1
                            taken += bool(e.extra_check(m))
                            break
            times.append((time.perf_counter() - t0) * 1e3)
    return gemms, matched, taken, times


def decision_ms(depth, reps, batch):
    from torch._dynamo.utils import counters
    from torch._inductor import config

    B, dt, di, da, proj, pair, d, _, heads = SIZES["small"]
    B = batch or B
    model = FusionHead(dt, di, da, proj, pair, d, depth, heads).bfloat16()
    got = {}

    class MeasureThenStop(CustomGraphPass):
        def __call__(self, graph):
            got["nodes"] = len(graph.nodes)
            got["result"] = measure(graph, reps)
            raise Measured

        def uuid(self):
            return uuid.uuid4().hex  # never a cache hit: the pass must run

    torch._dynamo.reset()
    counters.clear()
    xs = [torch.randn(B, k, dtype=torch.bfloat16) for k in (dt, di, da)]
    with (
        torch.no_grad(),
        config.patch(pre_grad_fusion_options={}, post_grad_custom_pre_pass=MeasureThenStop()),
    ):
        try:
            torch.compile(model)(*xs)
        except Exception as e:  # dynamo wraps the backend's exception
            if "result" not in got:
                raise
            if not any(isinstance(x, Measured) for x in (e, e.__cause__, getattr(e, "inner_exception", None))):
                raise
    gemms, matched, taken, times = got["result"]
    reasons = {k.removeprefix("cat_linear_"): v // reps for k, v in counters["inductor"].items()
               if k.startswith("cat_linear_")}  # fmt: skip
    return got["nodes"], gemms, matched, taken, statistics.median(times), reasons


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--depth", type=int, nargs="+", default=[6, 50, 200])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=SIZES["full"][0], help="rows (the graph is only traced)")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore", message="dynamo_pgo force disabled")
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs; post-grad forward graph, bf16, sites as on an H100")
    print(f"batch {args.batch}; declined: the decision's counters (cat_linear_<reason>) per graph")
    print("| depth | graph nodes | mm/addmm nodes | cat_linear sites (matched) | taken | declined "
          "| match + check ms | ms per site |")
    print("|---:|---:|---:|---:|---:|---|---:|---:|")
    for depth in args.depth:
        nodes, gemms, matched, taken, ms, reasons = decision_ms(depth, args.reps, args.batch)
        declined = ", ".join(f"{k} {v}" for k, v in sorted(reasons.items()) if k != "roofline") or "-"
        print(f"| {depth} | {nodes} | {gemms} | {matched} | {taken} | {declined} | {ms:.1f} "
              f"| {ms / max(matched, 1):.2f} |")


if __name__ == "__main__":
    sys.exit(main())
