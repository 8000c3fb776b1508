"""Demo: which slice/cat reassemblies of a TP collective micro-pipeline TP may fuse.

Builds the reported repro graphs (``all_gather -> cat(narrow(0), dim=1) -> mm``
and ``mm -> cat(narrow(1), dim=0) -> reduce_scatter``) and their unsafe
variants with ``make_fx`` on the fake process group, prints for each whether
the matcher proved it (or the logged reason it did not), and shows the graph
after ``micro_pipeline_tp_pass``.  CPU only: the fusion functions return early
without NCCL, so the demo patches ``is_nccl_available`` and enables symmetric
memory's test mode; nothing is executed, graphs are only rewritten.

Run in an environment with the patch set installed:
    python -m tools demo            (or: python examples/micro_pipeline_tp_slice_cat.py)
"""

import logging
from unittest import mock

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch._dynamo.utils import counters
from torch._inductor.decomposition import decompositions
from torch._inductor.fx_passes.micro_pipeline_tp import micro_pipeline_tp_pass
from torch._inductor.fx_passes.post_grad import remove_noop_ops, view_to_reshape
from torch.distributed._symmetric_memory import _test_mode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.testing._internal.distributed.fake_pg import FakeStore


LOGGER = "torch._inductor.fx_passes.micro_pipeline_tp_reassembly"
all_gather = getattr(funcol, "all_gather_single", None) or funcol.all_gather_tensor
reduce_scatter = (
    getattr(funcol, "reduce_scatter_single", None) or funcol.reduce_scatter_tensor
)


def narrows(y, dim, bounds):
    return [y.narrow(dim, start, length) for start, length in bounds]


def cases(group):
    # shard [64, 1024] per rank, gathered to [128, 1024]: rank i owns rows [64 i, 64 i + 64)
    ag = {
        "repro: cat([y[0:64], y[64:128]], dim=1)": [(0, 64), (64, 64)],
        "swapped: cat([y[64:128], y[0:64]], dim=1)": [(64, 64), (0, 64)],
        "duplicated: cat([y[0:64], y[0:64]], dim=1)": [(0, 64), (0, 64)],
        "partial: cat([y[0:48], y[64:112]], dim=1)": [(0, 48), (64, 48)],
    }
    # mm output [64, 16]: rank i's part of the scatter is columns [8 i, 8 i + 8)
    rs = {
        "repro: cat([y[:, 0:8], y[:, 8:16]], dim=0)": [(0, 8), (8, 8)],
        "swapped: cat([y[:, 8:16], y[:, 0:8]], dim=0)": [(8, 8), (0, 8)],
        "wrong chunk count: 4 chunks of 4 for 2 ranks": [
            (0, 4),
            (4, 4),
            (8, 4),
            (12, 4),
        ],
    }

    def all_gather_mm(bounds):
        def f(x, w):
            a = torch.cat(narrows(all_gather(x, 0, group), 0, bounds), dim=1)
            return a @ w[: a.shape[1]]

        return f

    def mm_reduce_scatter(bounds):
        def f(a, b):
            return reduce_scatter(
                torch.cat(narrows(a @ b, 1, bounds), dim=0), "sum", 0, group
            )

        return f

    for name, bounds in ag.items():
        args = (torch.randn(64, 1024), torch.randn(2048, 16))
        yield "all-gather + mm", name, all_gather_mm(bounds), args
    for name, bounds in rs.items():
        args = (torch.randn(64, 32), torch.randn(32, 16))
        yield "mm + reduce-scatter", name, mm_reduce_scatter(bounds), args


class _Reasons(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def main():
    dist.init_process_group("fake", rank=0, world_size=2, store=FakeStore())
    group = dist.group.WORLD.group_name
    logger = logging.getLogger(LOGGER)
    reasons = _Reasons()
    logger.addHandler(reasons)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        for kind, name, fn, args in cases(group):
            traced = make_fx(fn, decompositions, tracing_mode="fake")(*args)
            remove_noop_ops(traced.graph)
            view_to_reshape(traced)
            counters.clear()
            reasons.lines.clear()
            with (
                mock.patch.object(dist, "is_nccl_available", return_value=True),
                _test_mode(),
            ):
                micro_pipeline_tp_pass(traced.graph)
            traced.graph.lint()
            fused = any("symm_mem" in str(n.target) for n in traced.graph.nodes)
            through = counters["inductor"]["micro_pipeline_tp_slice_cat"]
            print(f"\n=== {kind}: {name}")
            print(f"    fused: {fused}   fusions through slice/cat (counter): {through}")
            for line in reasons.lines:
                if line.startswith("skipping"):
                    print(f"    reason: {line}")
            if fused:
                print("    graph after micro_pipeline_tp_pass:")
                for line in str(traced.graph).strip().splitlines()[1:]:
                    print("      " + line.strip())
    finally:
        logger.removeHandler(reasons)
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
