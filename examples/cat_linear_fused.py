"""CPU demo of the cat_linear_fused pre-grad pass (run by `python -m tools demo`
in a venv with the patch installed).

Compiles a training step (forward+backward) of linear(cat([relu(a), b], -1), W,
bias) three ways -- stock, the pass with its measured CPU rule (forward+backward
takes the "view" form: see benchmarks/README.md), and the pass forced into the
"addmm" form -- and prints the counters, the GEMM / cat lines of the generated
forward and backward code and a before/after timing on this CPU.
"""
import re
import statistics
import time

import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config
from torch._inductor.utils import run_and_get_code


def model(a, b, w, bias):
    return F.linear(torch.cat([torch.relu(a), b], dim=-1), w, bias)


def gemm_lines(code):
    return [ln.strip() for ln in code.splitlines() if re.search(r"extern_kernels\.\w*mm\(|cpp_fused_cat", ln)]


def step(fn, args):
    fn(*args).sum().backward()


def timed(fn, args, reps=20):
    step(fn, args)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step(fn, args)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e6


def main():
    if not hasattr(inductor_config, "cat_linear_fused"):
        raise SystemExit("the inductor-cat-linear-fused patch is not installed in this torch")
    torch.manual_seed(0)
    a, b = torch.randn(1024, 256), torch.randn(1024, 256)
    w, bias = torch.randn(256, 512) / 512**0.5, torch.randn(256)
    args = tuple(t.requires_grad_() for t in (a, b, w, bias))
    ref = model(*args)
    results = {}
    for label, patch in [
        ("stock", dict(cat_linear_fused=False)),
        ("pass (CPU rule)", dict(cat_linear_fused=True)),
        ("pass forced addmm", dict(cat_linear_fused=True, cat_linear_fused_force="addmm")),
    ]:
        torch._dynamo.reset()
        counters.clear()
        with inductor_config.patch(force_disable_caches=True, **patch):
            fn = torch.compile(model)
            out, codes = run_and_get_code(step, fn, args)
            us = timed(fn, args)
        torch.testing.assert_close(fn(*args), ref, atol=1e-4, rtol=1e-4)
        code = "\n".join(codes)
        results[label] = us
        print(f"== {label}")
        print("   counters:", {k: v for k, v in counters["inductor"].items() if "cat_linear" in k} or "{}")
        for ln in gemm_lines(code):
            print("   |", ln[:110])
        print(f"   median {us:.1f} us")
    base = results["stock"]
    print("== after/before:", ", ".join(f"{k}: {v / base:.2f}x" for k, v in results.items()))


if __name__ == "__main__":
    main()
