"""CPU demo of the ``cat_linear`` lowering (run by `python -m tools demo` in a venv
with the patch set installed).

``linear(cat([relu(a), sigmoid(b)], -1), W, bias)`` reaches Inductor's post-grad
graphs as ``addmm(bias, cat(...), permute(W))``; the ``cat_linear`` lowering pattern
(``fx_passes/cat_linear_lowering.py``, registered from ``post_grad.py`` like
``mm_plus_mm``) matches it there, below autograd, and decides per site.  The demo
compiles the site four ways and shows what fired: the ``cat_linear*`` counters, the
per-site decision's logged reason, the GEMM / C++ kernel lines of the generated
code, and a FileCheck of it:

1. inference (``no_grad``), stock (the fusion off): one C++ kernel writes relu and
   sigmoid into the cat buffer, one addmm reads it;
2. inference, the fusion forced into its ``"view"`` form
   (``pre_grad_fusion_options={"cat_linear": {"form": "view"}}``): no cat buffer,
   one extern GEMM per piece on a column slice of W (an mm, then an addmm adding into
   it), and the bias added after the sum;
3. inference, the fusion deciding per site (``{"cat_linear": {}}``): it declines on
   CPU (the C++ backend writes the pointwise pieces straight into the cat buffer and
   one GEMM on it wins) and counts why (``cat_linear_device``); the code is stock's;
4. a training step (forward+backward) with the ``"view"`` form forced, the pieces
   being the caller's own tensors (``linear(cat([a, b]), W, bias)``): the weight
   gradient reads the cat, so the partitioner saves it for the backward; the cat
   has a second user and the site stays stock (``cat_linear_cat_users``);
   gradients match eager.  (Pieces made in the graph are another matter: the
   ``inductor-cat-linear-weight-grad`` patch, ``examples/cat_linear_weight_grad.py``.)

It does not time anything: one compile on a shared 2-core machine says nothing
about speed. Paired, repeated measurements are in benchmarks/README.md.
"""
import logging
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


def model_on_inputs(a, b, w, bias):
    return F.linear(torch.cat([a, b], dim=-1), w, bias)


def gemm_lines(code):
    return [ln.strip() for ln in code.splitlines() if re.search(r"extern_kernels\.\w*mm\(|^\s*cpp_fused_\w*\(", ln)]


class Reasons(logging.Handler):
    """The lowering's DEBUG log: the form a site took, or why it was skipped."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def filecheck(codes, check):
    try:
        check(codes)
        return "passed"
    except RuntimeError as e:
        return "FAILED: " + str(e).splitlines()[0]


def one_addmm_over_the_cat(codes):
    # stock: one C++ kernel for both pieces (it writes the cat buffer), one addmm
    FileCheck().check("cpp_fused_relu_sigmoid").check_count("extern_kernels.addmm(", 1, exactly=True).run(codes[0])


def a_gemm_per_piece(codes):
    # "view": relu and sigmoid each in their own kernel, each read by its own GEMM on
    # a column slice of W (offset 0, then 256: the second piece's columns), the second
    # accumulating into the first's output; then the bias, added after the sum
    (FileCheck().check_not("cpp_fused_relu_sigmoid").check("cpp_fused_relu")
     .check("extern_kernels.mm(").check(", 0), out=")
     .check("cpp_fused_sigmoid").check("extern_kernels.addmm(buf").check(", 256), alpha=1")
     .check_count("extern_kernels.addmm(", 0, exactly=True).check("cpp_fused_add").run(codes[0]))  # fmt: skip


def saved_cat(codes):
    # training: the forward computes the cat once and one addmm over it, and the
    # backward's weight gradient reads the saved cat (an mm with it as an input)
    FileCheck().check("cpp_fused_cat").check_count("extern_kernels.addmm(", 1, exactly=True).run(codes[0])
    FileCheck().check("assert_size_stride(cat,").check("extern_kernels.mm(").check(", cat, out=").run(codes[1])


def main():
    try:
        from torch._inductor.fx_passes import cat_linear_lowering, post_grad
    except ImportError:
        raise SystemExit("the inductor-cat-linear-fused patch is not installed in this torch") from None
    if not hasattr(post_grad, "register_cat_linear_lowerings"):
        raise SystemExit("the inductor-cat-linear-fused patch is not installed in this torch")
    torch.manual_seed(0)
    a, b = torch.randn(1024, 256), torch.randn(1024, 256)
    w, bias = torch.randn(256, 512) / 512**0.5, torch.randn(256)
    # force_disable_caches (every variant really compiles) makes dynamo warn that PGO is off: expected here
    warnings.filterwarnings("ignore", message="dynamo_pgo force disabled")
    reasons = Reasons()
    cat_linear_lowering.log.addHandler(reasons)
    cat_linear_lowering.log.setLevel(logging.DEBUG)
    cat_linear_lowering.log.propagate = False  # printed below, not twice by torch's handler
    failed = []
    variants = [
        # label, model, fusion options, training step?, rewrites expected, declines expected, FileCheck
        ("inference, stock (fusion off)", model, {}, False, 0, {}, one_addmm_over_the_cat),
        ('inference, fusion forced into "view"', model, {"form": "view"}, False, 1, {}, a_gemm_per_piece),
        ("inference, fusion deciding per site", model, {}, False, 0, {"cat_linear_device": 1},
         one_addmm_over_the_cat),
        ('training step on the caller\'s tensors, fusion forced into "view"', model_on_inputs, {"form": "view"},
         True, 0, {"cat_linear_cat_users": 1}, saved_cat),
    ]  # fmt: skip
    for i, (label, site, opts, train, want, declines, check) in enumerate(variants):
        options = {} if i == 0 else {"cat_linear": opts}
        args = [t.clone().requires_grad_(train) for t in (a, b, w, bias)]
        ref_args = [t.clone().requires_grad_(train) for t in (a, b, w, bias)]
        torch._dynamo.reset()
        counters.clear()
        reasons.lines.clear()
        with inductor_config.patch(force_disable_caches=True, pre_grad_fusion_options=options):
            fn = torch.compile(site)
            if train:
                def run():
                    out = fn(*args)
                    out.sum().backward()
                    return out
            else:
                def run():
                    with torch.no_grad():
                        return fn(*args)
            out, codes = run_and_get_code(run)
        ref = site(*ref_args)
        torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
        if train:
            ref.sum().backward()
            for got, exp in zip(args, ref_args):
                torch.testing.assert_close(got.grad, exp.grad, atol=1e-4, rtol=1e-4)
        ours = {k: v for k, v in counters["inductor"].items() if k.startswith("cat_linear")}
        fired = ours.get("cat_linear", 0)
        verdict = filecheck(codes, check)
        if fired != want or any(ours.get(k) != v for k, v in declines.items()) or verdict != "passed":
            failed.append(label)
        print(f"== {label}")
        print(f"   counters: {ours or '{}'}  -> {'rewritten' if fired else 'not rewritten'}")
        for line in reasons.lines:
            print(f"   decision: {line}")
        print(f"   generated GEMM / C++ kernel lines ({'forward, then backward' if train else 'forward'}):")
        for ln in gemm_lines("\n".join(codes)):
            print("   |", ln[:120])
        print(f"   FileCheck ({check.__name__.replace('_', ' ')}): {verdict}")
        print(f"   outputs{' and gradients' if train else ''} match eager: yes")
    print("== speed: not measured here; see benchmarks/README.md")
    if failed:
        raise SystemExit(f"unexpected result for: {', '.join(failed)}")


if __name__ == "__main__":
    main()
