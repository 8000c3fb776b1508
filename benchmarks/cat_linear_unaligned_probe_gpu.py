"""Probe: ``linear(cat(parts, -1), W, b)`` where the cat's K is not 16-byte aligned
(DLRM's top MLP, 128 + 351 -> 1024), on one GPU.

What stock does there (does ``pad_mm`` pad the K?), and what the in-place template
costs when its pieces and weight have unaligned row strides against the same
template reading them at aligned strides (each a view of a buffer one tile of
columns wider). Per shape, device time (µs, ``device_time.kernel_time_us``, median
of ``--reps`` interleaved rounds) of:

* ``cublas``: ``addmm`` on a ready, contiguous cat (unaligned K); ``cublas_padded``:
  on a ready cat and weight padded to an aligned K (what ``pad_mm`` computes);
* ``stock``: the compiled site with a relu'd first piece and a gathered second piece
  (as DLRM makes them), ``cat_linear`` off; ``default``: the same, ``cat_linear`` on
  (the decision's reason is printed); ``forced``: ``{"form": "mm"}``;
* ``forced_inputs``: the template on input pieces and weight as they are
  (unaligned row strides); ``forced_inputs_aligned``: the same values, each piece and
  the weight a view of a wider buffer, so their row strides are aligned.

    python benchmarks/cat_linear_unaligned_probe_gpu.py --out $OUT/unaligned.json
"""

import argparse
import json
import logging
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from device_time import kernel_breakdown_us, kernel_time_us  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402
from torch._inductor import config  # noqa: E402
from cat_linear_fused_gpu import fresh_code, run_and_keep_code  # noqa: E402

try:
    from torch._inductor.utils import fresh_cache
except ImportError:  # older releases
    from torch._inductor.utils import fresh_inductor_cache as fresh_cache

SHAPES = [(16384, (128, 351), 1024), (8192, (256, 300), 2048)]


def produced_site(p0, table, idx, w, b):
    # a relu'd piece and a gathered one, as DLRM's top MLP reads them
    return F.linear(torch.cat([torch.relu(p0), table[:, idx]], -1), w, b)


def input_site(p0, p1, w, b):
    return F.linear(torch.cat([p0, p1], -1), w, b)


def aligned_view(t, align=8):
    """``t``'s values in a view whose row stride is a multiple of ``align``."""
    rows, cols = t.shape
    wide = torch.zeros(rows, -(-cols // align) * align, dtype=t.dtype, device=t.device)
    wide[:, :cols] = t
    return wide[:, :cols]


CODE_DIR = None
PAD_CALLS: list = []  # what pad_mm's checks answered, per compile (trace_pad_mm)


def compiled(fn, opts, args, name):
    """``fn`` compiled with ``opts``, as a code object of its own, without a
    Dynamo reset: each variant keeps its code (``run_and_get_code`` resets)."""
    counters.clear()
    PAD_CALLS.clear()
    with fresh_cache(), config.patch(pre_grad_fusion_options=opts):
        cfn = torch.compile(fresh_code(fn, name))
        out, codes = run_and_keep_code(cfn, *args)
    code = "\n".join(codes)
    if CODE_DIR:
        with open(os.path.join(CODE_DIR, f"{name}.py"), "w") as f:
            f.write(code)
    info = {
        "counters": {k: v for k, v in counters["inductor"].items() if "cat_linear" in k},
        "template": "triton_tem" in code,
        "padded_k": any(f", {k}), ({k}, 1)" in code for k in (480, 560, 568, 576)),
        "extern_mm": code.count("extern_kernels.addmm") + code.count("extern_kernels.mm"),
        "pad_mm": list(PAD_CALLS),
        "pad_mm_bench": counters["inductor"].get("pad_mm_bench", 0),
    }
    return cfn, out, info


def trace_pad_mm():
    """Log what pad_mm's checks answer (which of them declines)."""
    from torch._inductor.fx_passes import pad_mm

    calls = PAD_CALLS

    def wrap(name):
        fn = getattr(pad_mm, name)

        def wrapped(*a, **kw):
            out = fn(*a, **kw)
            shapes = [tuple(x.shape) for x in a if isinstance(x, torch.Tensor)]
            scalars = [x for x in a if isinstance(x, (int, float))]
            calls.append((name, shapes or scalars, out))
            return out

        setattr(pad_mm, name, wrapped)

    names = ("can_pad", "is_mm_compute_bound", "should_pad", "should_exclude_padding_time")
    # is_padded_faster(key, ori_time, pad_time): its benchmark's two times
    for name in (*names, "is_padded_faster", "get_cached_should_pad"):
        if hasattr(pad_mm, name):
            wrap(name)
    return calls


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--out")
    p.add_argument("--code-dir", help="write each variant's generated code here")
    p.add_argument("--shapes", type=int, nargs="*", help="indices into SHAPES")
    args = p.parse_args()
    global CODE_DIR
    CODE_DIR = args.code_dir
    if CODE_DIR:
        os.makedirs(CODE_DIR, exist_ok=True)
    logging.getLogger("torch._inductor.fx_passes.cat_linear_lowering").setLevel(logging.DEBUG)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    torch.manual_seed(0)
    from torch._inductor.utils import get_device_tflops, get_gpu_dram_gbps

    print("figures:", get_device_tflops(torch.bfloat16), get_gpu_dram_gbps())
    trace_pad_mm()
    dev, dt = "cuda", torch.bfloat16
    rows_out = []
    for m, widths, n in [SHAPES[i] for i in (args.shapes or range(len(SHAPES)))]:
        k = sum(widths)
        p0 = torch.randn(m, widths[0], device=dev, dtype=dt)
        table = torch.randn(m, 27 * 27, device=dev, dtype=dt)
        idx = torch.randperm(27 * 27, device=dev)[: widths[1]]
        p1 = table[:, idx].contiguous()
        w = torch.randn(n, k, device=dev, dtype=dt) / k**0.5
        b = torch.randn(n, device=dev, dtype=dt)
        kp = -(-k // 8) * 8
        cat = torch.cat([p0, p1], 1)
        cat_p = torch.nn.functional.pad(cat, (0, kp - k))
        w_p = torch.nn.functional.pad(w, (0, kp - k))
        ref = F.linear(torch.cat([torch.relu(p0), p1], 1).float(), w.float(), b.float())
        ref_in = F.linear(cat.float(), w.float(), b.float())
        fns, infos = {}, {}
        fns["cublas"] = lambda: torch.addmm(b, cat, w.t())
        fns["cublas_padded"] = lambda: torch.addmm(b, cat_p, w_p.t())
        for name, opts in (("stock", {}), ("default", {"cat_linear": {}}), ("forced", {"cat_linear": {"form": "mm"}})):
            a = (p0, table, idx, w, b)
            cfn, out, info = compiled(produced_site, opts, a, f"{m}_{name}")
            info["err"] = ((out.float() - ref).abs().max() / ref.abs().max()).item()
            fns[name], infos[name] = (lambda cfn=cfn, a=a: cfn(*a)), info
        with config.patch(force_shape_pad=True):
            _, _, info = compiled(produced_site, {}, (p0, table, idx, w, b), f"{m}_pad")
        print("stock, force_shape_pad:", info)
        for name, a in (
            ("forced_inputs", (p0, p1, w, b)),
            ("forced_inputs_aligned", (aligned_view(p0), aligned_view(p1), aligned_view(w), b)),
        ):
            cfn, out, info = compiled(input_site, {"cat_linear": {"form": "mm"}}, a, f"{m}_{name}")
            info["err"] = ((out.float() - ref_in).abs().max() / ref_in.abs().max()).item()
            fns[name], infos[name] = (lambda cfn=cfn, a=a: cfn(*a)), info
        times = {name: [] for name in fns}
        for _ in range(args.reps):
            for name, fn in fns.items():
                times[name].append(kernel_time_us(fn))
        row = {
            "rows": m,
            "widths": widths,
            "n": n,
            "us": {name: statistics.median(t) for name, t in times.items()},
            "us_rounds": times,
            "info": infos,
        }
        rows_out.append(row)
        print(f"\n{m} x {'+'.join(map(str, widths))} -> {n}")
        for name, us in row["us"].items():
            print(f"  {name:24s} {us:9.1f} µs  {infos.get(name, '')}")
        for name in ("stock", "default", "forced_inputs_aligned"):
            per = kernel_breakdown_us(fns[name])
            row.setdefault("per_kernel", {})[name] = per
            print(f"  {name} per kernel:", {k[:60]: round(v, 1) for k, v in per.items()})
    meta = {"machine": torch.cuda.get_device_name(), "torch": torch.__version__, "reps": args.reps}
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "rows": rows_out}, f, indent=1)


if __name__ == "__main__":
    main()
