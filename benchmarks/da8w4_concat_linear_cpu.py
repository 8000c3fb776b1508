"""
Paired benchmark: da8w4 concat-linear pass off (stock) vs on, one run, CPU.

Llama-3.1-8B shapes: QKV (K=4096 -> 4096 + 1024 + 1024) and gate/up
(K=4096 -> 14336 x 2), int8 dynamic per-token activation (asymmetric, as
torchao's default) quantized inside the forward, int4 weights with
group_size 32, compiled with freezing, static M.  For every M each variant is
compiled once; rounds are interleaved (stock, fused, then fused, stock, ...).

Two measurements per round and variant:
  linear  per compiled step, the CPU time (torch.profiler, with
          cpp.enable_kernel_profile so generated kernels are visible) of the
          ``torchao::da8w4_linear_cpu`` call(s) plus every kernel that runs
          after the first call except the activation quantization and the
          gate/up consumer, i.e. the op(s) and the split copies the pass adds;
          median over the round's steps.  The counted names are printed.
  module  wall time of the whole compiled module (quantization, wrapper and
          consumer included), mean over the round's steps, profiler off.
Reported: medians over rounds, and ratio = stock / variant per round as
median [min, max] (> 1: the pass is faster).

Variants:
  stock        config.cpp.enable_concat_linear=False (separate calls)
  fused        the pass on (split outputs are views where consumers allow)
  fused+clone  (--with-clone) the pass on, every split output cloned
               contiguous (what torchao's pass emits)
  forced       (--forced) the pass on with its gates opened (copy cost and
               MAX_FUSED_ROWS): every compatible group fused

Consumers: the QKV outputs are returned (graph outputs: the pass must give them
a contiguous copy, so this is its worst case; at M=1 the split views are
contiguous and need none), gate/up feed silu(gate) * up (one pointwise
consumer, reads the strided views).

Needs our kernel (``cmake -G Ninja -S . -B build && cmake --build build``, or
``DA8W4_LINEAR_CPU_LIB=<path to libda8w4_linear_cpu.so>``) or torchao with a
CPU kernel; the pure-PyTorch reference would be far too slow.

    python benchmarks/da8w4_concat_linear_cpu.py [--threads N] [--m 1 4 32 128 512]
        [--rounds 15] [--round-s 0.25] [--groups qkv gate_up] [--with-clone] [--forced]
"""

import argparse
import copy
import os
import platform
import re
import statistics
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_kernel():
    try:
        if torch._C._dispatch_has_kernel_for_dispatch_key(
            "torchao::da8w4_linear_cpu", "CPU"
        ):
            return "already registered"
    except RuntimeError:
        pass
    loader = _LOADER
    if not loader.load():
        sys.exit(
            "da8w4 kernel not built: run `cmake -G Ninja -S . -B build && "
            "cmake --build build` or set DA8W4_LINEAR_CPU_LIB"
        )
    isa = getattr(loader, "best_isa", lambda: "?")()
    return f"csrc kernel ({isa})"


def _loader():
    # Imported once, outside any compiled frame: touching sys.path inside the
    # traced forward made dynamo guard on len(sys.path) and recompile every call.
    csrc = os.path.join(REPO, "csrc")
    if csrc not in sys.path:
        sys.path.insert(0, csrc)
    import da8w4_linear_cpu

    return da8w4_linear_cpu


_LOADER = _loader()


def quantize_act(x):
    """torchao's asymmetric per-token uint8 activation quantisation (csrc's)."""
    return _LOADER.quantize_activation(x)


class Da8w4Group(nn.Module):
    def __init__(self, k, out_features, group_size=32, mlp=False):
        super().__init__()
        self.k, self.out_features, self.mlp = k, list(out_features), mlp
        g = torch.Generator().manual_seed(0)
        for i, n in enumerate(self.out_features):
            q = torch.randint(0, 16, (n, k), dtype=torch.uint8, generator=g)
            scales = torch.rand(n, k // group_size, generator=g) * 0.02 + 1e-3
            zeros = torch.randint(0, 16, (n, k // group_size), generator=g)
            packed = torch.ops.torchao.da8w4_linear_prepack_cpu(
                q, scales, zeros.to(torch.int8)
            )
            for name, t in zip(("w", "ws", "wz", "comp"), packed):
                self.register_buffer(f"{name}{i}", t)

    def forward(self, x):
        outs = []
        for i, n in enumerate(self.out_features):
            xq, xs, xz = quantize_act(x)  # per linear, as torchao; CSE'd before post-grad
            outs.append(
                torch.ops.torchao.da8w4_linear_cpu(
                    xq, xs, xz, getattr(self, f"w{i}"), getattr(self, f"ws{i}"),
                    getattr(self, f"wz{i}"), getattr(self, f"comp{i}"), None, x.dtype,
                )
            )
        if self.mlp:
            gate, up = outs
            return F.silu(gate) * up
        return tuple(outs)


VARIANTS = {
    "stock": dict(concat=False, clone=False),
    "fused": dict(concat=True, clone=False),
    "fused+clone": dict(concat=True, clone=True),
    # The pass on with its gates opened (every compatible group fused):
    # what the gate's decision is measured against (--forced).
    "forced": dict(concat=True, clone=False, gate=False),
}

_LINEAR_OP = "torchao::da8w4_linear_cpu"
_STEP_EVENT = "## Call CompiledFxGraph"
# Generated kernels that are not linear time: activation quantization (its
# kernels always contain round / amax) and the gate/up consumer (silu * mul).
_NOT_LINEAR = ("round", "amax", "silu")


def compile_variant(mod, x, concat, clone, gate=True):
    from torch._inductor.fx_passes import da8w4_concat_linear as pass_mod

    counters.clear()
    # fused+clone: the group is decided as usual, then its rewrite gives every
    # split output a contiguous copy (what torchao's pass emits).
    replace = pass_mod.Da8w4ConcatLinearMatch.replace
    if clone:
        def replace_cloning(match):
            reads_in_place = pass_mod._reads_split_in_place
            pass_mod._reads_split_in_place = lambda *args: False
            try:
                replace(match)
            finally:
                pass_mod.Da8w4ConcatLinearMatch.replace = replace

        pass_mod.Da8w4ConcatLinearMatch.replace = replace_cloning
    saved_bytes, max_rows = pass_mod.SAVED_BYTES_PER_CALL, pass_mod.MAX_FUSED_ROWS
    if not gate:
        pass_mod.SAVED_BYTES_PER_CALL = pass_mod.MAX_FUSED_ROWS = 1 << 62
    try:
        with inductor_config.patch(
            {
                "freezing": True,
                "cpp.enable_concat_linear": concat,
                "fx_graph_cache": False,
                # RECORD_FUNCTION around every generated C++ kernel, so the
                # profiler sees the copies the pass adds and the consumer.
                "cpp.enable_kernel_profile": True,
            }
        ):
            fn = torch.compile(copy.deepcopy(mod), dynamic=False)
            fn(x)
    finally:
        pass_mod.Da8w4ConcatLinearMatch.replace = replace
        pass_mod.SAVED_BYTES_PER_CALL, pass_mod.MAX_FUSED_ROWS = saved_bytes, max_rows
    fusions = counters["inductor"]["da8w4_concat_linear"]
    # With the pass on it may still decline (split-output copies worth more
    # than the saved calls): then "fused" runs the stock graph, and says so.
    assert fusions <= (1 if concat else 0), f"expected fusion<={int(concat)}, got {fusions}"
    fn.fusions = fusions
    return fn


def linear_times(prof, counted):
    """Per compiled step: the summed CPU time (ms) of the step's direct children
    from the first ``torchao::da8w4_linear_cpu`` call on, less the gate/up
    consumer kernel (``silu(gate) * up``) and activation quantization kernels
    (stock Inductor re-materializes the quantized activation per call and may
    run part of it between the calls): the da8w4 op call(s) and whatever runs
    after them to produce the linear outputs (the copies the pass adds).  ``counted`` collects the counted names (graph prefix stripped)
    with their count per step, for the report."""
    steps = []
    for ev in prof.events():
        if not ev.name.startswith(_STEP_EVENT):
            continue
        total, names, seen_op = 0.0, [], False
        for child in sorted(ev.cpu_children, key=lambda e: e.time_range.start):
            seen_op = seen_op or child.name == _LINEAR_OP
            if not seen_op or any(k in child.name for k in _NOT_LINEAR):
                continue
            total += child.cpu_time_total
            names.append(re.sub(r"^graph_\d+_", "", child.name))
        assert seen_op, "no da8w4 call in the compiled step"
        steps.append(total / 1e3)  # us -> ms
        counted.add(", ".join(f"{n} x{names.count(n)}" for n in sorted(set(names))))
    assert steps, "no compiled step in the profile"
    return steps


def bench(fns, x, rounds, target_s=0.25, warmup_s=0.5):
    """Interleaved rounds (order alternates); per round and variant: the mean
    wall time of one module call over ``iters`` calls, then the median over
    ``iters`` profiled calls of the per-call linear time.  Each variant first
    runs for about ``warmup_s`` (caches, page faults of the first output
    buffers, OpenMP thread pool)."""
    for fn in fns.values():
        fn(x)
    t0 = time.perf_counter()
    next(iter(fns.values()))(x)
    step_s = max(time.perf_counter() - t0, 1e-6)
    for fn in fns.values():  # warm up
        for _ in range(max(3, int(warmup_s / step_s))):
            fn(x)
    iters = max(3, int(target_s / step_s))
    wall = {name: [] for name in fns}
    lin = {name: [] for name in fns}
    counted = {name: set() for name in fns}
    names = list(fns)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            fn = fns[name]
            t0 = time.perf_counter()
            for _ in range(iters):
                fn(x)
            wall[name].append((time.perf_counter() - t0) / iters * 1e3)
            with torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU]
            ) as prof:
                for _ in range(iters):
                    fn(x)
            lin[name].append(statistics.median(linear_times(prof, counted[name])))
    return wall, lin, counted, iters


def _ratio_stats(stock, other):
    ratios = [a / b for a, b in zip(stock, other)]
    return statistics.median(ratios), min(ratios), max(ratios)


def machine():
    info = {}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            key, _, val = line.partition(":")
            info[key.strip()] = val.strip()
    except OSError:
        pass
    model = info.get("Model name") or platform.processor() or platform.machine()
    return (
        f"{model}, CPU family {info.get('CPU family', '?')} model "
        f"{info.get('Model', '?')}, {info.get('CPU(s)', os.cpu_count())} logical CPUs "
        f"({info.get('Core(s) per socket', '?')} cores/socket x "
        f"{info.get('Socket(s)', '?')} sockets, {info.get('Thread(s) per core', '?')} "
        f"thread/core), L3 {info.get('L3 cache', '?')}"
    )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--m", type=int, nargs="+", default=[1, 4, 32, 128, 512])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument(
        "--round-s", type=float, default=0.25,
        help="seconds per variant per round (and per measurement kind)",
    )
    p.add_argument("--groups", nargs="+", default=["qkv", "gate_up"])
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    p.add_argument(
        "--with-clone",
        action="store_true",
        help="also time fused+clone (every split output copied, as torchao's pass)",
    )
    p.add_argument(
        "--forced",
        action="store_true",
        help="also time forced: the pass on with its gates opened",
    )
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    torch._dynamo.config.recompile_limit = 64
    torch._dynamo.config.cache_size_limit = 64
    backend = load_kernel()
    variants = [
        v for v in VARIANTS
        if (args.with_clone or v != "fused+clone") and (args.forced or v != "forced")
    ]
    others = variants[1:]
    print(f"# {machine()}")
    print(
        f"# {torch.get_num_threads()} threads used, torch {torch.__version__}, {backend}"
    )
    print(
        f"# {args.rounds} interleaved rounds of ~{args.round_s}s per variant "
        "(after ~0.5s warm-up each); ms = median over rounds; "
        "ratio = stock / variant per round: median [min, max]"
    )
    print(
        "# linear = per compiled step, CPU time of the da8w4 op call(s) + kernels "
        "the pass adds (profiler; median over the round's steps)"
    )
    print(
        "# module = wall time of the whole compiled module (activation quantization "
        "and gate/up consumer included; mean over the round's steps)"
    )
    print("# load average at start: %.2f %.2f %.2f" % os.getloadavg())
    head = "| group | M | linear stock ms |"
    head += "".join(f" linear {v} ms |" for v in others)
    head += "".join(f" **linear stock/{v}** |" for v in others)
    head += " module stock ms |" + "".join(f" module {v} ms |" for v in others)
    head += "".join(f" module stock/{v} |" for v in others)
    head += " load 1m |"
    print(head)
    print("|---|---:|" + "---:|" * (head.count("|") - 3))
    shapes = {"qkv": ([4096, 1024, 1024], False), "gate_up": ([14336, 14336], True)}
    notes = []
    with torch.no_grad():
        for group in args.groups:
            ns, mlp = shapes[group]
            mod = Da8w4Group(4096, ns, mlp=mlp).eval()
            for m in args.m:
                x = torch.randn(m, 4096)
                fns = {name: compile_variant(mod, x, **VARIANTS[name]) for name in variants}
                ref = fns["stock"](x)
                for name in others:
                    out = fns[name](x)
                    out = out if isinstance(out, tuple) else (out,)
                    r = ref if isinstance(ref, tuple) else (ref,)
                    assert all(torch.equal(a, b) for a, b in zip(r, out)), name
                wall, lin, counted, iters = bench(fns, x, args.rounds, args.round_s)
                row = f"| {group} | {m} | {statistics.median(lin['stock']):.3f} |"
                row += "".join(f" {statistics.median(lin[v]):.3f} |" for v in others)
                for v in others:
                    med, lo, hi = _ratio_stats(lin["stock"], lin[v])
                    row += f" **{med:.3f}** [{lo:.3f}, {hi:.3f}] |"
                row += f" {statistics.median(wall['stock']):.3f} |"
                row += "".join(f" {statistics.median(wall[v]):.3f} |" for v in others)
                for v in others:
                    med, lo, hi = _ratio_stats(wall["stock"], wall[v])
                    row += f" {med:.3f} [{lo:.3f}, {hi:.3f}] |"
                row += " %.2f |" % os.getloadavg()[0]
                print(row, flush=True)
                notes.append(
                    f"# {group} M={m}: {iters} steps/round; linear counted: "
                    + "; ".join(f"{v}: {' / '.join(sorted(counted[v]))}" for v in variants)
                    + "; groups fused: "
                    + ", ".join(f"{v}={fns[v].fusions}" for v in variants)
                )
                del fns
    print("# load average at end: %.2f %.2f %.2f" % os.getloadavg())
    for n in notes:
        print(n)


if __name__ == "__main__":
    main()
