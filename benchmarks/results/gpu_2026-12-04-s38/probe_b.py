"""s38 call B: review's findings 1b (int32 offsets in the template at > 2**31 elements) and 1d (one relu'd
tensor as two pieces, both folded), against eager, default mode and the template forced."""
import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._inductor import config
from torch._inductor.utils import run_and_get_code


def check(name, fn, args, form):
    torch._dynamo.reset()
    counters.clear()
    opts = {} if form is None else {"form": form}
    with config.patch(pre_grad_fusion_options={"cat_linear": opts}), torch.no_grad():
        out, codes = run_and_get_code(torch.compile(fn), *args)
        ref = fn(*[a.float() for a in args])
    err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
    cl = {k: v for k, v in counters["inductor"].items() if k.startswith("cat_linear")}
    tem = any("triton_tem_" in c for c in codes)
    print(f"{name:40s} form={form!s:5s} rel_err={err:.2e} template={tem} {cl}", flush=True)


dev = "cuda"
# 1b: column-major pieces, rows * K >= 2**31 (4M rows x 512 + 512 bf16)
rows = 4 * 1024 * 1024
a = torch.randn(512, rows, device=dev, dtype=torch.bfloat16).t()
b = torch.randn(512, rows, device=dev, dtype=torch.bfloat16).t()
w = torch.randn(256, 1024, device=dev, dtype=torch.bfloat16) / 32
for form in (None, "mm"):
    check("1b column-major 4M x 512+512 -> 256", lambda a, b, w: F.linear(torch.cat([a, b], -1), w), (a, b, w), form)
del a, b
# per-piece loops: a relu'd piece (folded), column-major second piece
x = torch.randn(512, rows, device=dev, dtype=torch.bfloat16).t()
y = torch.randn(512, rows, device=dev, dtype=torch.bfloat16).t()
w = torch.randn(64, 1024, device=dev, dtype=torch.bfloat16) / 32
for form in (None, "mm"):
    check("1b relu(x) + y^T, 4M x 512+512 -> 64", lambda x, y, w: F.linear(torch.cat([x.relu(), y], -1), w), (x, y, w), form)
del x, y
torch.cuda.empty_cache()
# 1d: one relu'd tensor twice
x = torch.randn(8192, 128, device=dev, dtype=torch.bfloat16)
w = torch.randn(64, 256, device=dev, dtype=torch.bfloat16) / 16
for form in (None, "mm"):
    check("1d cat([r, r]), r = relu(x), 8192 -> 64", lambda x, w: F.linear(torch.cat([x.relu(), x.relu()], -1), w) if False else F.linear(torch.cat([(r := x.relu()), r], -1), w), (x, w), form)
x = torch.randn(1 << 20, 128, device=dev, dtype=torch.bfloat16)
for form in (None, "mm"):
    check("1d cat([r, r]), r = relu(x), 1M -> 64", lambda x, w: F.linear(torch.cat([(r := x.relu()), r], -1), w), (x, w), form)
