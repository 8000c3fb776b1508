"""The template's contiguity hints against upstream mm's, in default mode, one GPU.

Review asked whether the template should hint its offsets as upstream's mm templates do: ours
hints B's column offsets only for a row-major B (``stride_bn == 1 and N >= BLOCK_N``), while
upstream's (``triton_mm``, ``triton_persistent_mm``) also hints a transposed B (``stride_bk == 1
and stride_bn == K``, which ``linear``'s ``W.t()`` always is) and A's row offsets.  This compiles
``F.linear(cat(parts, -1), W, b)`` (bf16, no grad) with the template forced
(``{"form": "mm"}``) three ways, the template source swapped for the process's compile:

- ``ours``: the template as shipped;
- ``b_hint``: B's hint under upstream's condition (either layout, ``N >= BLOCK_N and K > 1``);
- ``ab_hint``: that, and A's row offsets hinted when ``M >= BLOCK_M`` (every piece is read
  row-major);

and stock (no ``cat_linear``) beside them.  Device time per call
(``device_time.kernel_time_us``, 20 calls), ``--reps`` interleaved rounds, median and spread,
each variant's ratio to stock and to ``ours``; each compile's code is checked to hold the
template and its rel. error against eager is recorded.  ``--relu`` makes the first piece
``relu(x)`` (computed in the template's loads where the decision would fold it: forced, it
is folded wherever prologue fusion takes it).

    PYTHONUNBUFFERED=1 python benchmarks/cat_linear_b_hint_probe_gpu.py --reps 3 --out $OUT/b_hint.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from cat_linear_fused_gpu import fresh_code, run_and_keep_code  # noqa: E402
from cat_linear_stages_probe_gpu import site_tensors  # noqa: E402
from device_time import interleaved_us  # noqa: E402


SHAPES = [  # (M, piece widths, N)
    (2_000_000, (64, 64), 128),  # EdgeConv layer 1
    (8192, (64, 64), 256),
    (8192, (1024, 1024), 1024),
    (8192, (2048, 2048), 1024),
    (8192, (2048, 2048), 4096),
    (2048, (512, 512), 2048),
    (4096, (64, 64, 64, 64), 512),
    (16384, (128, 351), 1024),
    (8192, (256, 300), 2048),
    (1 << 20, (128, 128), 64),
    (1 << 20, (128, 100), 64),
]

OURS_HINT = """    offs_a_m = rm % M
    if stride_bn == 1 and N >= BLOCK_N:
        offs_b_n = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    else:
        offs_b_n = rn % N
"""
B_HINT = """    offs_a_m = rm % M
    KB = {{size("B", 0)}}
    if ((stride_bk == 1 and stride_bn == KB) or (stride_bk == N and stride_bn == 1)) and (N >= BLOCK_N and KB > 1):
        offs_b_n = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    else:
        offs_b_n = rn % N
"""
AB_HINT = B_HINT.replace(
    "    offs_a_m = rm % M\n",
    "    if M >= BLOCK_M:\n"
    "        offs_a_m = tl.max_contiguous(tl.multiple_of(rm % M, BLOCK_M), BLOCK_M)\n"
    "    else:\n"
    "        offs_a_m = rm % M\n",
)
VARIANTS = {"stock": None, "ours": OURS_HINT, "b_hint": B_HINT, "ab_hint": AB_HINT}
_TEMPLATES: dict[str, object] = {}


def template(name):
    """The shipped template with its hint block replaced by ``VARIANTS[name]`` (made once)."""
    from pathlib import Path

    from torch._inductor.kernel import cat_linear as kc
    from torch._inductor.select_algorithm import TritonTemplate

    if name == "ours":
        return kc.cat_mm_template
    if name not in _TEMPLATES:
        path = Path(kc.__file__).parent / "templates" / "triton_cat_mm.py.jinja"
        source = path.read_text()
        assert source.count(OURS_HINT) == 1, "the shipped template's hint block changed"
        _TEMPLATES[name] = TritonTemplate(
            name=f"cat_mm_probe_{name}", grid=kc.cat_mm_template.grid, source=source.replace(OURS_HINT, VARIANTS[name])
        )
    return _TEMPLATES[name]


def compile_site(tag, parts, w, b, variant, relu):
    from torch._dynamo.utils import counters
    from torch._inductor import config
    from torch._inductor.kernel import cat_linear as kc

    def fn(*parts):
        parts = (torch.relu(parts[0]), *parts[1:]) if relu else parts
        return F.linear(torch.cat(parts, -1), w, b)

    counters.clear()
    fn = fresh_code(fn, tag)
    saved = kc.cat_mm_template
    opts = {} if variant == "stock" else {"cat_linear": {"form": "mm"}}
    try:
        if variant != "stock":
            kc.cat_mm_template = template(variant)
        with config.patch(pre_grad_fusion_options=opts, force_disable_caches=True), torch.no_grad():
            compiled = torch.compile(fn)
            out, code = run_and_keep_code(compiled, *parts)
    finally:
        kc.cat_mm_template = saved
    src = "\n".join(code)
    ref = fn(*parts)
    err = ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
    info = {
        "taken": counters["inductor"]["cat_linear"],
        "template": "triton_tem" in src,
        "hinted_b": "stride_bk == 1 and stride_bn == KB" in src or variant in ("stock", "ours"),
        "rel_err": err,
    }

    def step():
        with torch.no_grad():
            return compiled(*parts)

    return step, info


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--shapes", default=None, help="comma-separated indices into SHAPES")
    ap.add_argument("--relu", action="store_true", help="the first piece is relu(x)")
    ap.add_argument("--out", default="cat_linear_b_hint_probe.json")
    a = ap.parse_args()
    shapes = SHAPES if a.shapes is None else [SHAPES[int(i)] for i in a.shapes.split(",")]
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "relu": a.relu}
    rows = []
    for m, widths, n in shapes:
        torch._dynamo.reset()
        parts, w, b = site_tensors(m, widths, n)
        steps, infos = {}, {}
        for name in VARIANTS:
            steps[name], infos[name] = compile_site(f"v{len(rows)}_{name}", parts, w, b, name, a.relu)
        med, spreads = interleaved_us(steps, a.reps)
        rows.append({"m": m, "widths": widths, "n": n, "median_us": med, "spread": spreads, "info": infos})
        cells = "  ".join(
            f"{k}={v:.1f}" + ("" if k == "stock" else f"({v / med['stock']:.2f}s,{v / med['ours']:.3f}o"
                               f"{'' if infos[k]['template'] else ',NOTEM'})")
            for k, v in med.items()
        )
        print(f"{m} {widths} {n}: {cells}", flush=True)
        del steps, parts, w, b
        torch.cuda.empty_cache()
        with open(a.out, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
