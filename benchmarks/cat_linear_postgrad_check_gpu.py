"""The post-grad cat_linear lowering on one GPU: per case, parity against fp32 eager, whether the generated
code runs the template and still has a cat kernel, the fusion's counters and the first call's wall time.

Cases: the template forced (2-D with bias, 3-D, a masked K tail, four fp16 pieces, a relu piece, wide
pieces), the decision in default mode at three sites, the view form in fp32, max_autotune, and a training
step (the partitioner saves the cat, so the site stays stock).

    PYTHONUNBUFFERED=1 python benchmarks/cat_linear_postgrad_check_gpu.py   # writes $OUT/cl_smoke.json
"""
import json, os, sys, time
import torch, torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._inductor import config
from torch._inductor.utils import run_and_get_code
out = {}
def case(name, lead, widths, n, dtype, bias=True, relu=False, form=None, autotune=False, grad=False):
    torch._dynamo.reset(); counters.clear()
    dev = "cuda"
    parts = [torch.randn(*lead, w, device=dev, dtype=dtype, requires_grad=grad) for w in widths]
    w = torch.randn(n, sum(widths), device=dev, dtype=dtype, requires_grad=grad) / sum(widths) ** 0.5
    b = torch.randn(n, device=dev, dtype=dtype, requires_grad=grad) if bias else None
    def f(*ps):
        ps = list(ps)
        if relu: ps[0] = torch.relu(ps[0])
        return F.linear(torch.cat(ps, -1), w, b)
    opts = {} if form is None else {"form": form}
    t0 = time.perf_counter()
    with config.patch(pre_grad_fusion_options={"cat_linear": opts}, max_autotune=autotune):
        try:
            res, code = run_and_get_code(torch.compile(f), *parts)
        except Exception as e:
            out[name] = {"error": repr(e)[:2000]}; print(name, "ERROR", repr(e)[:2000], flush=True); return
    ct = time.perf_counter() - t0
    ref = f(*[p.float() for p in parts]).to(dtype) if False else F.linear(torch.cat([torch.relu(parts[0]) if relu else parts[0], *parts[1:]], -1).float(), w.float(), None if b is None else b.float())
    err = (res.float() - ref).abs().max().item()
    scale = ref.abs().max().item()
    r = {"compile_s": round(ct, 2), "max_err": err, "ref_max": scale, "counters": {k: v for k, v in counters["inductor"].items() if k.startswith("cat_linear")},
         "template": any("triton_tem_" in s for s in code), "cat_kernel": any("cat" in s.split("def call")[-1] for s in code)}
    if grad:
        res.float().sum().backward(); r["bwd"] = "ran"
    out[name] = r; print(name, r, flush=True)
bf = torch.bfloat16
case("mm_2d_bias", (8192,), (1024, 1024), 1024, bf, form="mm")
case("mm_3d_nobias", (8, 1024), (512, 256), 768, bf, bias=False, form="mm")
case("mm_tail", (4096,), (128, 351), 512, bf, form="mm")
case("mm_4parts_fp16", (4096,), (64, 64, 64, 64), 512, torch.float16, form="mm")
case("mm_relu", (1 << 20,), (128, 128), 64, bf, relu=True, form="mm")
case("decide_big", (8192,), (2048, 2048), 1024, bf)
case("decide_narrow_n", (1 << 20,), (128, 128), 64, bf)
case("decide_upstream_site", (1 << 19,), (256, 256), 96, bf)
case("view_fp32", (4096,), (256, 256), 512, torch.float32, form="view")
case("autotune", (8192,), (1024, 1024), 1024, bf, autotune=True)
case("train", (4096,), (512, 512), 512, bf, grad=True, form="mm")
case("mm_wide", (8192,), (2048, 2048), 1024, bf, form="mm")
json.dump(out, open(os.path.join(os.environ.get("OUT", "/tmp"), "cl_smoke.json"), "w"), indent=1)
