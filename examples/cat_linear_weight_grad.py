"""CPU demo of the ``cat_linear`` weight gradient computed per piece (run by
`python -m tools demo` in a venv with the patch set installed).

In training, autograd's weight gradient of ``linear(cat(parts, -1), W, bias)`` is
``mm(grad.T, cat)``, so the partitioner saves the cat and the post-grad
``cat_linear`` lowering leaves the forward site alone.  The joint-graph pattern of
``fx_passes/cat_linear_weight_grad.py`` computes that gradient per piece where the
lowering will take the forward site.  The demo runs a training step with the
``"view"`` form forced (``pre_grad_fusion_options={"cat_linear": {"form": "view"}}``)
two ways and shows the counters, the GEMM lines of the forward and backward code,
and a FileCheck of them:

1. pieces made in the graph (``relu(a)``, ``sigmoid(b)``): the weight gradient is
   computed per piece (``cat_linear_weight_grad``), so the backward reads the
   pieces, the forward has no cat and takes the site (``cat_linear``), and the
   backward writes each piece's block of the gradient into a view of one buffer;
2. the caller's own tensors as the pieces (``cat([a, b])``): the caller may write
   them before the backward, so the gradient keeps reading the saved cat
   (``cat_linear_weight_grad_caller``), and the site stays stock
   (``cat_linear_cat_users``).

Outputs and gradients match eager in both.  Nothing is timed here.
"""
import re
import warnings

import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config
from torch._inductor.utils import run_and_get_code
from torch.testing import FileCheck


def made_in_graph(a, b, w, bias):
    return F.linear(torch.cat([torch.relu(a), torch.sigmoid(b)], dim=-1), w, bias)


def callers_tensors(a, b, w, bias):
    return F.linear(torch.cat([a, b], dim=-1), w, bias)


def split(codes):
    # forward: a GEMM per piece (an mm, then an addmm into it), no cat; backward: two
    # GEMMs into views of one buffer
    FileCheck().check_not("cpp_fused_cat").check("extern_kernels.mm(").check_count(
        "extern_kernels.addmm(", 1, exactly=True
    ).run(codes[0])
    FileCheck().check_count("# alias", 2, exactly=True).run(codes[1])


def kept(codes):
    # forward: the cat and one addmm over it; backward: the weight gradient reads the cat
    FileCheck().check("cpp_fused_cat").check_count("extern_kernels.addmm(", 1, exactly=True).run(codes[0])
    FileCheck().check("extern_kernels.mm(").check(", cat, out=").run(codes[1])


def main():
    try:
        from torch._inductor.fx_passes import cat_linear_weight_grad  # noqa: F401
    except ImportError:
        raise SystemExit("the inductor-cat-linear-weight-grad patch is not installed in this torch") from None
    torch.manual_seed(0)
    a, b = torch.randn(1024, 256), torch.randn(1024, 256)
    w, bias = torch.randn(256, 512) / 512**0.5, torch.randn(256)
    warnings.filterwarnings("ignore", message="dynamo_pgo force disabled")
    failed = []
    variants = [
        # label, site, counters expected, FileCheck
        ("pieces made in the graph", made_in_graph, {"cat_linear_weight_grad": 1, "cat_linear": 1}, split),
        ("the caller's tensors as pieces", callers_tensors,
         {"cat_linear_weight_grad_caller": 1, "cat_linear_cat_users": 1}, kept),
    ]
    for label, site, want, check in variants:
        args = [t.clone().requires_grad_() for t in (a, b, w, bias)]
        ref_args = [t.clone().requires_grad_() for t in (a, b, w, bias)]
        torch._dynamo.reset()
        counters.clear()
        options = {"cat_linear": {"form": "view"}}
        with inductor_config.patch(force_disable_caches=True, pre_grad_fusion_options=options):
            fn = torch.compile(site)

            def run():
                out = fn(*args)
                out.sum().backward()
                return out

            out, codes = run_and_get_code(run)
        ref = site(*ref_args)
        ref.sum().backward()
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
        for got, exp in zip(args, ref_args):
            torch.testing.assert_close(got.grad, exp.grad, atol=1e-4, rtol=1e-4)
        ours = {k: v for k, v in counters["inductor"].items() if k.startswith("cat_linear")}
        try:
            check(codes)
            verdict = "passed"
        except RuntimeError as e:
            verdict = "FAILED: " + str(e).splitlines()[0]
        if ours != want or verdict != "passed":
            failed.append(label)
        print(f"== training step, {label}")
        print(f"   counters: {ours or '{}'}")
        print("   generated GEMM lines (forward, then backward):")
        for ln in "\n".join(codes).splitlines():
            if re.search(r"extern_kernels\.\w*mm\(|^\s*cpp_fused_\w*\(", ln):
                print("   |", ln.strip()[:120])
        print(f"   FileCheck ({check.__name__}): {verdict}")
        print("   outputs and gradients match eager: yes")
    print("== speed: not measured here; see benchmarks/README.md")
    if failed:
        raise SystemExit(f"unexpected result for: {', '.join(failed)}")


if __name__ == "__main__":
    main()
