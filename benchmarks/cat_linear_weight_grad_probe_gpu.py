"""Probe: which produced pieces save their trip through the cat once the weight gradient is split
(``cat_linear_weight_grad._saved_bytes``)?  One GPU, the patched torch (the series installed), bf16, a
training step (forward and backward).  Split, the forward writes a produced piece to a buffer of its own,
the bytes stock's cat kernel writes.  Per site this prints the GPU time of a step (µs,
``device_time.kernel_time_us``, median of interleaved rounds) of:

  stock   cat_linear off
  kept    cat_linear on, the weight gradient never split (``_extra_bytes`` made infinite): the forward site
          stays stock's, as its cat is saved
  split   cat_linear on, default mode

and the counters (sites taken, gradients split).  Every piece is made in the graph: by a pointwise op,
or (EdgeConv's) through a gather.

    PYTHONUNBUFFERED=1 python benchmarks/cat_linear_weight_grad_probe_gpu.py --rounds 3 --out $OUT/wg_probe.json

Its figures: ``benchmarks/README.md``, "cat_linear in training: the weight gradient per piece".
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import types
from unittest import mock

import torch
import torch.nn.functional as F


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from device_time import kernel_time_us


def _mul(a, b, w):
    return F.linear(torch.cat([a * 2.0, b + 1.0], -1), w)


def _relu_mul(a, b, w):
    return F.linear(torch.cat([torch.relu(a), b * 2.0], -1), w)


def _mul3(a, b, c, w):
    return F.linear(torch.cat([a * 2.0, b + 1.0, c * 0.5], -1), w)


def _edge(x, src, dst, w):
    x_i, x_j = x.index_select(0, dst), x.index_select(0, src)
    return torch.relu(F.linear(torch.cat([x_i, x_j - x_i], -1), w))


def sites(scale: float):
    """(name, fn, args): every piece made in the graph from an input."""
    dev, dt = "cuda", torch.bfloat16

    def t(*shape, grad=True):
        return torch.randn(*shape, device=dev, dtype=dt).requires_grad_(grad)

    rows = lambda r: max(256, int(r * scale))  # noqa: E731
    out = []
    for r, k, n in ((1 << 20, 128, 64), (1 << 19, 128, 256)):
        m = rows(r)
        out.append((f"{m} x mul({k})+add({k}) -> {n}", _mul, [t(m, k), t(m, k), t(n, 2 * k)]))
        out.append((f"{m} x relu({k})+mul({k}) -> {n}", _relu_mul, [t(m, k), t(m, k), t(n, 2 * k)]))
    m = rows(1 << 20)
    out.append((f"{m} x 3 x 64 (mul, add, mul) -> 64", _mul3, [t(m, 64), t(m, 64), t(m, 64), t(64, 192)]))
    nodes, edges = rows(1 << 17), rows(1 << 21)
    src = torch.randint(0, nodes, (edges,), device=dev)
    dst = torch.randint(0, nodes, (edges,), device=dev)
    out.append((f"edge {edges} x 64+64 -> 128", _edge, [t(nodes, 64), src, dst, t(128, 128)]))
    return out


def compiled_step(fn, args, variant):
    """The variant compiled, and its counters."""
    from torch._dynamo.utils import counters
    from torch._inductor.fx_passes import cat_linear_weight_grad as wg
    from torch._inductor.utils import fresh_cache

    counters.clear()
    opts = {} if variant == "stock" else {"cat_linear": {}}
    never = mock.patch.object(wg, "_extra_bytes", return_value=float("inf"))
    compiling = never if variant == "kept" else contextlib.nullcontext()
    # a code object of its own: dynamo caches per code object, whatever the backend
    own = types.FunctionType(fn.__code__.replace(co_name=f"{fn.__name__}_{variant}"), fn.__globals__)
    compiled = torch.compile(own, options={"pre_grad_fusion_options": opts})
    grad = torch.randn_like(fn(*args))

    def step():
        for a in args:
            a.grad = None
        compiled(*args).backward(grad)

    with fresh_cache(), compiling:
        step()
    got = {k: counters["inductor"][k] for k in ("cat_linear", "cat_linear_weight_grad")}
    return step, got


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--scale", type=float, default=1.0, help="rows times this (a dry run: small)")
    p.add_argument("--out", default="cat_linear_weight_grad_probe_gpu.json")
    a = p.parse_args()
    variants = ("stock", "kept", "split")
    rows = []
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, bf16, training step, GPU µs")
    for name, fn, args in sites(a.scale):
        steps, counts = {}, {}
        torch._dynamo.reset()  # a site's variants share no entry with another site's shapes
        for v in variants:
            steps[v], counts[v] = compiled_step(fn, args, v)
        times = {v: [] for v in variants}
        for _ in range(a.rounds):
            for v in variants:
                times[v].append(kernel_time_us(steps[v], calls=a.calls))
        med = {v: statistics.median(ts) for v, ts in times.items()}
        row = dict(site=name, median_us=med, times_us=times, counters=counts,
                   split_over_stock=med["split"] / med["stock"], split_over_kept=med["split"] / med["kept"])
        rows.append(row)
        print(f"{name:44s} stock {med['stock']:9.1f}  kept {med['kept']:9.1f}  split {med['split']:9.1f}  "
              f"split/stock {row['split_over_stock']:.3f}  split/kept {row['split_over_kept']:.3f}  "
              f"taken/split: kept {counts['kept']}, split {counts['split']}", flush=True)
        with open(a.out, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
