"""CPU demo of the ``cat_linear`` fusion (run by `python -m tools demo` in a venv
with the patch set installed).

Compiles a training step (forward+backward) of
linear(cat([relu(a), sigmoid(b)], -1), W, bias) three ways (both pieces are made
in the graph: with gradients, a piece the caller owns, such as an input, keeps
its cat) -- stock (the fusion off), the fusion deciding per site
(``pre_grad_fusion_options={"cat_linear": {}}``; on CPU its rule takes this
forward+backward site in the "view" form) and the fusion forced into its other
form, "mm" (the ``inductor::cat_linear`` op, which on CPU lowers to stock's cat
+ addmm) -- and shows what fired: the counters, the form the decision picked,
the GEMM / cat lines of the generated forward and backward code, and a
FileCheck of the forward (stock and "mm" write the cat buffer from one C++
kernel that also runs relu and sigmoid, then one addmm reads it; "view" has no
cat buffer and one addmm per piece).

It does not time anything: one compile on a shared 2-core machine says nothing
about speed. Paired, repeated measurements are in benchmarks/README.md.
"""
import re
import warnings

import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config
from torch._inductor.utils import run_and_get_code
from torch.testing import FileCheck


def model(a, b, w, bias):
    return F.linear(torch.cat([torch.relu(a), torch.sigmoid(b)], dim=-1), w, bias)


def gemm_lines(code):
    return [ln.strip() for ln in code.splitlines() if re.search(r"extern_kernels\.\w*mm\(|cpp_fused_\w*\(", ln)]


def step(fn, args):
    fn(*args).sum().backward()


def filecheck(code, rewritten):
    """FileCheck of the forward graph's code (the first module run_and_get_code returns)."""
    fc = FileCheck()
    if rewritten:
        fc = fc.check_count("extern_kernels.addmm(", 2, exactly=True)
    else:
        fc = fc.check_count("extern_kernels.addmm(", 1, exactly=True)
    try:
        fc.run(code)
        return "passed"
    except RuntimeError as e:
        return "FAILED: " + str(e).splitlines()[0]


def main():
    from torch._inductor.fx_passes.group_batch_fusion import PRE_GRAD_FUSIONS

    if "cat_linear" not in PRE_GRAD_FUSIONS:
        raise SystemExit("the inductor-cat-linear-fused patch is not installed in this torch")
    torch.manual_seed(0)
    a, b = torch.randn(1024, 256), torch.randn(1024, 256)
    w, bias = torch.randn(256, 512) / 512**0.5, torch.randn(256)
    args = tuple(t.requires_grad_() for t in (a, b, w, bias))
    ref = model(*args)
    # force_disable_caches (every variant really compiles) makes dynamo warn that PGO is off: expected here
    warnings.filterwarnings("ignore", message="dynamo_pgo force disabled")
    failed = []
    for label, options, rewritten in [
        ("stock", {}, False),
        ('fusion, decided per site: the CPU rule picks "view"', {"cat_linear": {}}, True),
        ('fusion forced into "mm" (on CPU: lowered to cat + addmm)', {"cat_linear": {"form": "mm"}}, False),
    ]:
        torch._dynamo.reset()
        counters.clear()
        with inductor_config.patch(force_disable_caches=True, pre_grad_fusion_options=options):
            fn = torch.compile(model)
            out, codes = run_and_get_code(step, fn, args)
        torch.testing.assert_close(fn(*args), ref, atol=1e-4, rtol=1e-4)
        fired = counters["inductor"]["cat_linear"]
        verdict = filecheck(codes[0], rewritten)
        if (fired > 0) != bool(options) or verdict != "passed":
            failed.append(label)
        print(f"== {label}")
        print(f"   counters: {dict((k, v) for k, v in counters['inductor'].items() if 'cat_linear' in k) or '{}'}"
              f"  -> {'rewritten' if fired else 'not rewritten'}")
        print("   generated GEMM / cat lines (forward, then backward):")
        for ln in gemm_lines("\n".join(codes)):
            print("   |", ln[:110])
        print(f"   FileCheck (forward: {'an addmm per piece' if rewritten else 'one addmm over the cat'}): {verdict}")
        print("   outputs match eager: yes")
    print("== speed: not measured here; see benchmarks/README.md")
    if failed:
        raise SystemExit(f"unexpected result for: {', '.join(failed)}")


if __name__ == "__main__":
    main()
