"""
What the inductor-custom-pass-registry patch costs, CPU, one process.

Passes reach Inductor two ways on a patched torch:
  assign    the stock API: the config field holds the passes
            (``config.post_grad_custom_post_pass = [p1, ..., pN]``; one callable
            or a list, as torch 2.13 takes them)
  registry  ``register_custom_pass("post_grad_custom_post_pass", p, name=...)``
Every pass is a trivial ``CustomGraphPass`` (walks the graph, changes nothing,
has a ``uuid()``), so what is timed is the plumbing, not the pass.

1. compile time: a small pointwise function (sin, cos, mul, add) is compiled
   from scratch (``torch._dynamo.reset()``, ``force_disable_caches``) with no
   pass ("none"), and with N = 1, 4, 16 passes assigned and registered.  Rounds
   are interleaved (every variant once per round, order rotated per round);
   reported: median and [min, max] per variant, the per-pass overhead
   (median - median(none)) / N, and registry/assign per round (paired) as
   median [min, max].
2. plumbing per compile, isolated: what Inductor calls per compile for custom
   passes -- ``get_custom_passes`` for the stage plus running each pass on the
   post-grad graph, ``custom_pass_cache_bypass_reason`` and
   ``custom_pass_cache_details`` (the FX graph cache key part) -- timed with
   ``timeit`` (best of 5 repeats of a loop), per pass.
3. FX graph cache with several "libraries": L = 4 libraries each bring one pass
   and the same function is compiled R times in a fresh cache dir
   (``torch._dynamo.reset()`` between compiles, AOTAutograd cache off so the
   FX graph cache is what answers).  Reported: passes that ran on the first
   compile, hits/misses/bypasses, hit rate over compiles 2..R.  Scenarios:
     assign-each   each library assigns the field (what torchao does today):
                   the last one wins, the other three never run
     assign-list   the libraries cooperate on one list in the field
     registry      each library registers its pass
     registry+1    as registry, plus one library pass without uuid()
                   (a plain function): the compile must bypass, never hit stale

    python benchmarks/custom_pass_registry_cpu.py [--rounds 7] [--n 1 4 16] [--compiles 5]

On a torch without the patch only "none" and "assign" are measured.
"""

import argparse
import itertools
import os
import platform
import statistics
import tempfile
import time
import timeit
import warnings

import torch
from torch._dynamo.utils import counters
from torch._inductor import config
from torch._inductor.custom_graph_pass import CustomGraphPass

from cpu_info import cpu_model


try:
    from torch._inductor import custom_pass_registry as cpr
except ImportError:  # stock torch
    cpr = None

STAGE = "post_grad_custom_post_pass"


class NoopPass(CustomGraphPass):
    def __init__(self, tag):
        self.tag = tag
        self.runs = 0

    def __call__(self, graph):
        self.runs += 1
        for _ in graph.nodes:
            pass

    def uuid(self):
        return f"bench-noop-{self.tag}"


def f(x):
    return torch.sin(x) * 2 + torch.cos(x)


def machine():
    cpu = cpu_model()
    return (f"{cpu}; {os.cpu_count()} logical CPUs, {torch.get_num_threads()} torch threads; "
            f"torch {torch.__version__}; Python {platform.python_version()}; load {os.getloadavg()}")


class Passes:
    """Install N passes by assignment or registration for the duration of a with-block."""

    def __init__(self, mode, n, tag="p"):
        self.mode, self.passes = mode, [NoopPass(f"{tag}{i}") for i in range(n)]

    def __enter__(self):
        if self.mode == "assign":
            self._patch = config.patch({STAGE: list(self.passes)})
            self._patch.__enter__()
        elif self.mode == "registry":
            self._handles = [cpr.register_custom_pass(STAGE, p, name=f"bench.{p.tag}") for p in self.passes]
        return self

    def __exit__(self, *exc):
        if self.mode == "assign":
            self._patch.__exit__(*exc)
        elif self.mode == "registry":
            for h in self._handles:
                h.remove()


def compile_seconds(x):
    torch._dynamo.reset()
    with config.patch(force_disable_caches=True):
        t0 = time.perf_counter()
        torch.compile(f)(x)
        return time.perf_counter() - t0


def spread(xs):
    return f"{statistics.median(xs):.3f} [{min(xs):.3f}, {max(xs):.3f}]"


def bench_compile(args, modes, x):
    variants = [("none", 0)] + [(m, n) for n in args.n for m in modes]
    times = {v: [] for v in variants}
    compile_seconds(x)  # warm-up: imports, first-compile costs
    for r in range(args.rounds):
        order = variants[r % len(variants):] + variants[: r % len(variants)]
        for mode, n in order:
            with Passes(mode, n) as ps:
                times[(mode, n)].append(compile_seconds(x))
            assert all(p.runs == 1 for p in ps.passes), (mode, n, [p.runs for p in ps.passes])
    base = statistics.median(times[("none", 0)])
    print(f"\n## 1. compile time, s (median [min, max] of {args.rounds} interleaved rounds)")
    print(f"none: {spread(times[('none', 0)])}")
    print("| N | mode | compile s | overhead per pass, ms | registry/assign (paired) |")
    print("|---:|---|---:|---:|---:|")
    for n in args.n:
        for mode in modes:
            ts = times[(mode, n)]
            ratio = ""
            if mode == "registry" and "assign" in modes:
                rs = [a / b for a, b in zip(ts, times[("assign", n)])]
                ratio = spread(rs)
            print(f"| {n} | {mode} | {spread(ts)} | {(statistics.median(ts) - base) / n * 1e3:+.2f} | {ratio} |")


def bench_plumbing(args, modes, x):
    gm = torch.fx.symbolic_trace(f)
    print("\n## 2. custom-pass plumbing per compile, us (timeit, best of 5)")
    print("| N | mode | get + run passes | bypass check + cache details | total | total / N |")
    print("|---:|---|---:|---:|---:|---:|")
    for n in args.n:
        for mode in modes:
            with Passes(mode, n):
                if cpr is not None:
                    def run():
                        for p in cpr.get_custom_passes(STAGE):
                            p(gm.graph)

                    def key():
                        cpr.custom_pass_cache_bypass_reason(include_pre_grad=True)
                        cpr.custom_pass_cache_details(include_pre_grad=True)
                else:
                    from torch._inductor.custom_graph_pass import get_custom_graph_passes

                    def run():
                        for p in get_custom_graph_passes(getattr(config, STAGE)):
                            p(gm.graph)

                    def key():
                        [(p.uuid(),) for p in get_custom_graph_passes(getattr(config, STAGE))]

                loops = 500
                t_run = min(timeit.repeat(run, number=loops, repeat=5)) / loops * 1e6
                t_key = min(timeit.repeat(key, number=loops, repeat=5)) / loops * 1e6
            print(f"| {n} | {mode} | {t_run:.1f} | {t_key:.1f} | {t_run + t_key:.1f} | {(t_run + t_key) / n:.1f} |")


def bench_cache(args, x):
    libs = 4

    @contextlib_contextmanager
    def scenario(name):
        passes = [NoopPass(f"lib{i}") for i in range(libs)]
        if name == "assign-each":
            patches = []
            for p in passes:  # each library in turn: config.<field> = its pass
                patches.append(config.patch({STAGE: p}))
                patches[-1].__enter__()
            try:
                yield passes
            finally:
                for pt in reversed(patches):
                    pt.__exit__(None, None, None)
        elif name == "assign-list":
            with config.patch({STAGE: list(passes)}):
                yield passes
        else:
            handles = [cpr.register_custom_pass(STAGE, p, name=f"lib{i}.pass") for i, p in enumerate(passes)]
            if name == "registry+1":
                no_uuid = NoopPass("no-uuid")
                passes.append(no_uuid)
                # a plain function, as a library that never heard of uuid() would register
                handles.append(cpr.register_custom_pass(STAGE, lambda g: no_uuid(g), name="lib_no_uuid.pass"))
            try:
                yield passes
            finally:
                for h in handles:
                    h.remove()

    names = ["assign-each", "assign-list"] + (["registry", "registry+1"] if cpr is not None else [])
    print(f"\n## 3. FX graph cache, {libs} libraries, the same function compiled {args.compiles} times")
    print("| scenario | passes run (first compile) | hit / miss / bypass | hit rate, compiles 2.. | first s | later s (median) |")
    print("|---|---:|---|---:|---:|---:|")
    import logging

    logging.getLogger("torch._inductor.custom_pass_registry").setLevel(logging.ERROR)  # the expected warning
    for name in names:
        with tempfile.TemporaryDirectory() as d, scenario(name) as passes:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = d
            counters.clear()
            secs = []
            ran_first = None
            with config.patch(fx_graph_cache=True, fx_graph_remote_cache=False), \
                    torch._functorch.config.patch(enable_autograd_cache=False):
                for i in range(args.compiles):
                    torch._dynamo.reset()
                    t0 = time.perf_counter()
                    torch.compile(f)(x)
                    secs.append(time.perf_counter() - t0)
                    if i == 0:
                        ran_first = sum(p.runs for p in passes)
            c = counters["inductor"]
            hit, miss, byp = c["fxgraph_cache_hit"], c["fxgraph_cache_miss"], c["fxgraph_cache_bypass"]
            later = args.compiles - 1
            rate = min(hit, later) / later if later else float("nan")
            print(f"| {name} | {ran_first} of {libs + (name == 'registry+1')} | {hit} / {miss} / {byp} | "
                  f"{rate:.0%} | {secs[0]:.3f} | {statistics.median(secs[1:]):.3f} |")
    os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)


def contextlib_contextmanager(fn):
    import contextlib

    return contextlib.contextmanager(fn)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--n", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--compiles", type=int, default=5)
    ap.add_argument("--skip", nargs="*", default=[], choices=["compile", "plumbing", "cache"])
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore", message="dynamo_pgo force disabled")  # expected: caches are off on purpose
    modes = ["assign"] + (["registry"] if cpr is not None else [])
    print("machine:", machine())
    print("patched:", cpr is not None)
    x = torch.randn(1024)
    if "plumbing" not in args.skip:
        bench_plumbing(args, modes, x)
    if "cache" not in args.skip:
        bench_cache(args, x)
    if "compile" not in args.skip:
        bench_compile(args, modes, x)
    print("\nload at end:", os.getloadavg())


if __name__ == "__main__":
    main()
