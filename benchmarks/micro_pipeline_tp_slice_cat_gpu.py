"""Micro-pipeline TP through slice/cat reassembly: fused vs unfused vs canonical.

Needs two GPUs and a torch with the inductor-micro-pipeline-tp-slice-cat patch
installed; run with

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
    torchrun --nproc_per_node 2 benchmarks/micro_pipeline_tp_slice_cat_gpu.py

(NVLink multicast stays off).  For each case it compiles, in one process per
rank and on the same inputs,

  canonical_unfused   funcol all_gather_single / reduce_scatter_single   _micro_pipeline_tp off
  canonical_fused     the same                                           _micro_pipeline_tp on
  slicecat_unfused    the slice/cat reassembly of the same collective    _micro_pipeline_tp off
  slicecat_fused      the same                                           _micro_pipeline_tp on

records whether the generated code calls the fused symm_mem op, checks every
output against slicecat_unfused, and times each variant: a fixed number of
iterations between CUDA events (the same count on both ranks, so the
collectives stay in lockstep), the slower rank's time, repeated --reps times
with the variants interleaved; medians and ratios are reported.  Without the
patch on 2.11 the slice/cat forms never fuse; on stock 2.13/2.15 they fuse,
and so do the unsafe ones (see test/inductor/test_micro_pipeline_tp_slice_cat.py).

Sizes follow ``shared/bench/tp_symm_mem_probe.py``: bf16, gathered M=8192 and
K=N=8192, so each rank's GEMM is 8192x8192x8192 for all-gather+mm and
8192x(8192/ws)x8192 for mm+reduce-scatter.  Writes JSON to --out, or to
$OUT/micro_pipeline_tp_slice_cat_gpu.json when $OUT is set.
"""

import argparse
import json
import os
import platform
import socket
import statistics
import time
import types
from unittest import mock

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch._dynamo.utils import counters
from torch._inductor.graph import GraphLowering


all_gather = getattr(funcol, "all_gather_single", None) or funcol.all_gather_tensor
reduce_scatter = (
    getattr(funcol, "reduce_scatter_single", None) or funcol.reduce_scatter_tensor
)

FEATURE = "micro_pipeline_tp_slice_cat"


def chunks(y, ws, dim):
    n = y.shape[dim] // ws
    return [y.narrow(dim, i * n, n) for i in range(ws)]


def make_case(name, M, K, N, ws, group_name):
    """(input shapes, canonical fn, slice/cat fn, fused op name) for one case."""

    # The canonical forms spell out the split + cat that funcol itself emits for a
    # non-zero gather/scatter dim (its helper is skipped by Dynamo on 2.11), i.e. the
    # graph upstream's matchers already fuse; dim 0 is the plain collective.
    def ag_canonical(gather_dim):
        def fn(x, w):
            y = all_gather(x, 0, group_name)
            if gather_dim != 0:
                y = torch.cat(torch.chunk(y, ws, 0), dim=gather_dim)
            return y @ w

        return fn

    def ag_slicecat(cat_dim):
        def fn(x, w):
            y = all_gather(x, 0, group_name)
            return torch.cat(chunks(y, ws, 0), dim=cat_dim) @ w

        return fn

    def rs_canonical(scatter_dim):
        def fn(a, b):
            y = a @ b
            if scatter_dim != 0:
                y = torch.cat(torch.chunk(y, ws, scatter_dim), dim=0)
            return reduce_scatter(y, "sum", 0, group_name)

        return fn

    def rs_slicecat(slice_dim):
        def fn(a, b):
            y = torch.cat(chunks(a @ b, ws, slice_dim), dim=0)
            return reduce_scatter(y, "sum", 0, group_name)

        return fn

    ag, rs = "fused_all_gather_matmul", "fused_matmul_reduce_scatter"
    cases = {
        # the reported repro: all_gather -> cat(narrow(0), dim=1) -> mm
        "ag_k": ([(M, K // ws), (K, N)], ag_canonical(1), ag_slicecat(1), ag),
        # sequence parallel: [b, s, h] gathered on s
        "ag_seq": ([(2, M // 2 // ws, K), (K, N)], ag_canonical(1), ag_slicecat(1), ag),
        # cat on the stacking dim: the probe's canonical case
        "ag_m": ([(M // ws, K), (K, N)], ag_canonical(0), ag_slicecat(0), ag),
        # the reported repro: mm -> cat(narrow(1), dim=0) -> reduce_scatter
        "rs_n": ([(M, K // ws), (K // ws, N)], rs_canonical(1), rs_slicecat(1), rs),
        # sequence parallel: [b, s, h] scattered on s
        "rs_seq": (
            [(2, M // 2, K // ws), (K // ws, N)],
            rs_canonical(1),
            rs_slicecat(1),
            rs,
        ),
        # slices on the scattered dim: the probe's canonical case
        "rs_m": ([(M, K // ws), (K // ws, N)], rs_canonical(0), rs_slicecat(0), rs),
    }
    return cases[name]


def compile_variants(canon, slicecat, inputs, op):
    """Compile the four variants so that each keeps running its own graph.

    Dynamo caches compiled graphs on the function's code object, and the fused
    and unfused variants of a form share one.  This harness used to compile
    each under ``inductor_config.patch`` through ``run_and_get_code``, which
    calls ``torch._dynamo.reset()`` first: the earlier entries were thrown
    away, so at timing time ``canon`` recompiled with the default config
    (unfused) for both canonical variants, and both slice/cat variants ran the
    last (fused) entry, i.e. "slicecat vs canonical" was really "fused vs
    unfused".  Each variant now gets its own code object and carries
    ``_micro_pipeline_tp`` in its compile options, the code is captured
    without a reset, and the timing loop refuses to recompile."""
    torch._dynamo.reset()
    variants = {}
    for vname, fn, on in (
        ("canonical_unfused", canon, False),
        ("canonical_fused", canon, True),
        ("slicecat_unfused", slicecat, False),
        ("slicecat_fused", slicecat, True),
    ):
        fn = types.FunctionType(
            fn.__code__.replace(co_name=f"{fn.__code__.co_name}_{vname}"),
            fn.__globals__,
            vname,
            fn.__defaults__,
            fn.__closure__,
        )
        counters.clear()
        t0 = time.perf_counter()
        compiled = torch.compile(
            fn, fullgraph=True, options={"_micro_pipeline_tp": on}
        )
        codes = []
        with mock.patch.object(GraphLowering, "save_output_code", codes.append):
            out = compiled(*inputs)
        variants[vname] = {
            "fn": compiled,
            "out": out,
            "fused": op in "\n".join(codes),
            "slice_cat_proven": counters["inductor"][FEATURE],
            "compile_s": time.perf_counter() - t0,
            "ms": [],
        }
    return variants


def timed_ms(fn, args, warmup, iters):
    """Mean latency of one step. Each step is timed on its own, with the GPU idle
    before it starts: timing steps back to back would let the next step's collective
    (which only depends on the inputs) overlap this step's matmul on NCCL's stream,
    which flatters whichever graph frees the collective's buffer earliest and hides
    exactly the overlap that the fused ops exist to provide."""
    for _ in range(warmup):
        fn(*args)
    torch.cuda.synchronize()
    dist.barrier()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    total = 0.0
    for _ in range(iters):
        dist.barrier()  # both ranks enter the step together
        torch.cuda.synchronize()
        start.record()
        fn(*args)
        end.record()
        torch.cuda.synchronize()
        total += start.elapsed_time(end)
    t = torch.tensor([total / iters], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slower rank is the step time
    return t.item()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default="ag_k,ag_seq,ag_m,rs_n,rs_seq,rs_m")
    p.add_argument("--M", type=int, default=8192)
    p.add_argument("--K", type=int, default=8192)
    p.add_argument("--N", type=int, default=8192)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--out", default=None)
    args = p.parse_args()

    rank, ws = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group("nccl")
    group_name = dist.group.WORLD.group_name
    from torch.distributed._symmetric_memory import enable_symm_mem_for_group

    enable_symm_mem_for_group(group_name)
    dtype = torch.bfloat16
    log = (lambda *a: print(*a, flush=True)) if rank == 0 else (lambda *a: None)

    machine = {
        "host": socket.gethostname(),
        "gpu": torch.cuda.get_device_name(),
        "gpus": ws,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())),
        "python": platform.python_version(),
        "env": {
            k: os.environ.get(k)
            for k in (
                "NCCL_NVLS_ENABLE",
                "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                "NVSHMEM_DISABLE_NVLS",
            )
        },
    }
    log(f"# {machine}")
    log(
        f"# bf16 M={args.M} K={args.K} N={args.N}, {args.iters} iters x {args.reps} reps, slower rank"
    )

    results = []
    for case in args.cases.split(","):
        shapes, canon, slicecat, op = make_case(
            case, args.M, args.K, args.N, ws, group_name
        )
        torch.manual_seed(rank)
        inputs = [
            torch.randn(s, device="cuda", dtype=dtype) / s[-1] ** 0.5 for s in shapes
        ]
        variants = compile_variants(canon, slicecat, inputs, op)
        ref = variants["slicecat_unfused"]["out"].float()
        for v in variants.values():
            v["max_rel_err"] = (
                (v["out"].float() - ref).abs().max() / ref.abs().max()
            ).item()
        variants["slicecat_fused"]["identical_to_canonical_fused"] = torch.equal(
            variants["slicecat_fused"]["out"], variants["canonical_fused"]["out"]
        )
        # rotate which variant goes first in each repetition so that no variant
        # always pays (or profits from) its position in the sequence
        order = list(variants.values())
        with torch._dynamo.config.patch(error_on_recompile=True):
            for rep in range(args.reps):
                for v in order[rep % len(order) :] + order[: rep % len(order)]:
                    v["ms"].append(timed_ms(v["fn"], inputs, args.warmup, args.iters))
        med = {k: statistics.median(v["ms"]) for k, v in variants.items()}
        row = {
            "case": case,
            "shapes": shapes,
            "fused_op": op,
            "median_ms": med,
            "ms": {k: v["ms"] for k, v in variants.items()},
            "fused_in_code": {k: v["fused"] for k, v in variants.items()},
            "slice_cat_proven": {k: v["slice_cat_proven"] for k, v in variants.items()},
            "max_rel_err_vs_slicecat_unfused": {
                k: v["max_rel_err"] for k, v in variants.items()
            },
            "slicecat_fused_identical_to_canonical_fused": variants["slicecat_fused"][
                "identical_to_canonical_fused"
            ],
            "compile_s": {k: round(v["compile_s"], 1) for k, v in variants.items()},
            "speedup_fused_vs_unfused_slicecat": med["slicecat_unfused"]
            / med["slicecat_fused"],
            "speedup_fused_vs_unfused_canonical": med["canonical_unfused"]
            / med["canonical_fused"],
            "slicecat_fused_over_canonical_fused": med["slicecat_fused"]
            / med["canonical_fused"],
        }
        row["slicecat_fused_within_3pct_of_canonical_fused"] = (
            row["slicecat_fused_over_canonical_fused"] <= 1.03
        )
        results.append(row)
        log(
            f"{case:7} {op:28} "
            + " ".join(f"{k}={med[k] * 1000:7.0f}us" for k in med)
            + f" | fused/unfused slicecat {row['speedup_fused_vs_unfused_slicecat']:.3f}x"
            f" canonical {row['speedup_fused_vs_unfused_canonical']:.3f}x"
            f" | slicecat_fused/canonical_fused {row['slicecat_fused_over_canonical_fused']:.3f}"
            f" | fused in code {row['fused_in_code']}"
            f" | identical {row['slicecat_fused_identical_to_canonical_fused']}"
            f" max rel err {max(row['max_rel_err_vs_slicecat_unfused'].values()):.2e}"
        )
        del variants, inputs, ref

    out = args.out or (
        os.path.join(os.environ["OUT"], "micro_pipeline_tp_slice_cat_gpu.json")
        if os.environ.get("OUT")
        else None
    )
    if rank == 0 and out:
        with open(out, "w") as f:
            json.dump(
                {"machine": machine, "args": vars(args), "results": results},
                f,
                indent=1,
            )
        log(f"# wrote {out}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
