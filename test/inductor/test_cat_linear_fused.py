# Owner(s): ["module: inductor"]
import contextlib
import dataclasses
import re
from unittest import mock

from hypothesis import given, settings, strategies as st

import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config
from torch._inductor.fx_passes import (
    cat_linear_decision as cost,
    cat_linear_lowering,
)
from torch._inductor.test_case import run_tests, TestCase
from torch._inductor.utils import run_and_get_code
from torch.testing import FileCheck
from torch.testing._internal.common_utils import (
    instantiate_parametrized_tests,
    parametrize,
)
from torch.testing._internal.inductor_utils import HAS_CPU
from torch.testing._internal.triton_utils import requires_cuda_and_triton


TOL = {
    torch.float32: dict(atol=1e-4, rtol=1e-4),
    torch.float16: dict(atol=1e-2, rtol=1e-2),
    torch.bfloat16: dict(atol=5e-2, rtol=5e-2),
}


def cat_linear(a, b, w, bias=None):
    return F.linear(torch.cat([a, b], dim=-1), w, bias)


def produced_cat_linear(a, b, w, bias=None):
    return F.linear(torch.cat([torch.relu(a), b * 2.0], dim=-1), w, bias)


def make_inputs(
    lead, widths, n, dtype=torch.float32, device="cpu", bias=True, grad=True
):
    parts = [torch.randn(*lead, k, dtype=dtype, device=device) for k in widths]
    w = torch.randn(n, sum(widths), dtype=dtype, device=device) / sum(widths) ** 0.5
    args = [*parts, w] + ([torch.randn(n, dtype=dtype, device=device)] if bias else [])
    return [t.requires_grad_(grad) for t in args]


def _generated_site(num_parts, op):
    def fn(*args):
        x = torch.cat(args[:num_parts], -1)
        w, *bias = args[num_parts:]
        if op == "linear":
            return F.linear(x, w, *bias)
        if op == "mm":
            return torch.mm(x, w.t())
        return torch.addmm(bias[0], x, w.t(), beta=1, alpha=1)

    return fn


def _generated_site_args(widths, rows, n, dtype, device, strided, op):
    """Pieces (column slices of wider tensors when ``strided``), a weight and,
    but for ``mm``, a bias."""
    parts = []
    for k in widths:
        if strided:
            parts.append(torch.randn(rows, k + 8, dtype=dtype, device=device)[:, 3:-5])
        else:
            parts.append(torch.randn(rows, k, dtype=dtype, device=device))
    w = torch.randn(n, sum(widths), dtype=dtype, device=device) / sum(widths) ** 0.5
    bias = [] if op == "mm" else [torch.randn(n, dtype=dtype, device=device)]
    return [*parts, w, *bias]


def fusion(form=None):
    """``cat_linear`` on, deciding per site or forced into ``form``."""
    options = {} if form is None else {"form": form}
    return inductor_config.patch(pre_grad_fusion_options={"cat_linear": options})


def template_left_out():
    """The template reported available but given no config, so that a forced
    ``"mm"`` site reaches ``tuned_cat_mm`` on a CPU: its layout of the pieces
    and weight, then its fallback (counted ``cat_linear_no_choice``, never
    ``cat_linear``), without a GPU."""
    from torch._inductor.kernel import cat_linear as kernel

    stack = contextlib.ExitStack()
    for name, value in (
        ("why_no_template", None),
        ("can_use_template", True),
        ("_default_config", None),
    ):
        stack.enter_context(mock.patch.object(kernel, name, return_value=value))
    return stack


def cuda_site(widths, n, rows=8192, produced=None, dtype=torch.bfloat16, **kw):
    return cost.CatLinearSite(
        rows=rows,
        widths=tuple(widths),
        n=n,
        dtype=dtype,
        device=torch.device("cuda", 0),
        produced=tuple(produced or [False] * len(widths)),
        **kw,
    )


@contextlib.contextmanager
def h100_figures():
    """An H100 SXM's datasheet peaks (dense bf16 compute, DRAM bandwidth) and
    multiprocessors where the decision asks Inductor for the device's figures."""
    cost.ridge_point.cache_clear()
    with (
        mock.patch("torch.cuda.is_available", return_value=True),
        mock.patch("torch.cuda.device", return_value=contextlib.nullcontext()),
        mock.patch("torch.version.hip", None),
        mock.patch("torch._inductor.utils.get_device_tflops", return_value=989.0),
        mock.patch("torch._inductor.utils.get_gpu_dram_gbps", return_value=3350),
        mock.patch("torch._inductor.utils.get_num_sms", return_value=132),
    ):
        yield
    cost.ridge_point.cache_clear()


@instantiate_parametrized_tests
class CatLinearFusedTest(TestCase):
    def common(self, fn, args, expected, form=None, dynamic=None, backward=True):
        """Compile ``fn`` with ``cat_linear`` on, check the rewrite counter,
        compare with eager forward (and backward).  Returns the generated code."""
        dtype = args[0].dtype
        counters.clear()
        torch._dynamo.reset()
        ref_args = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
        with fusion(form):
            out, code = run_and_get_code(torch.compile(fn, dynamic=dynamic), *args)
        self.assertEqual(counters["inductor"]["cat_linear"], expected)
        ref = fn(*ref_args)
        self.assertEqual(out, ref, **TOL[dtype])
        if backward and ref.requires_grad:
            g = torch.randn_like(ref)
            out.backward(g)
            ref.backward(g)
            for a, r in zip(args, ref_args):
                self.assertEqual(a.grad, r.grad, **TOL[dtype])
        return code

    # ---- the post-grad lowering, forced forms on CPU ---------------------------

    @parametrize("bias", [False, True])
    @parametrize("lead", [(6,), (2, 5)])
    def test_cat_linear_view_form_inference(self, lead, bias):
        # Below autograd the split-K chain replaces the cat: one extern GEMM
        # per piece, no cat.
        args = make_inputs(lead, (16, 24), 8, bias=bias, grad=False)
        fn = produced_cat_linear
        with torch.no_grad():
            (code,) = self.common(fn, args, 1, form="view")
        FileCheck().check("extern_kernels.mm").check("extern_kernels.addmm").run(code)
        FileCheck().check_not("aten.cat").run(code)

    def test_cat_linear_view_form_adds_the_bias_last(self):
        # pieces whose products cancel: the bias is added to the whole
        # product, not rounded away into the first piece's (eager's
        # ``addmm`` gives 1.5 here; the bias in the first GEMM gave 2.0)
        def fn(a, b, w, bias):
            return F.linear(torch.cat([a, b], -1), w, bias)

        a, b = torch.ones(4, 8), torch.ones(4, 8)
        w = torch.cat([torch.full((4, 8), 1.25e6), torch.full((4, 8), -1.25e6)], 1)
        bias = torch.full((4,), 1.5)
        with torch.no_grad():
            self.common(fn, [a, b, w, bias], 1, "view")

    def test_cat_linear_off_by_default(self):
        self.common(cat_linear, make_inputs((8,), (16, 16), 8, grad=False), 0, "off")
        counters.clear()
        torch._dynamo.reset()
        args = make_inputs((8,), (16, 16), 8, grad=False)
        torch.compile(cat_linear)(*args)
        # off, no site reaches the decision (which on CPU would decline it)
        seen = [k for k, v in counters["inductor"].items() if "cat_linear" in k and v]
        self.assertEqual(seen, [])

    def test_cat_linear_forced_off(self):
        self.common(cat_linear, make_inputs((8,), (16, 16), 8, grad=False), 0, "off")
        self.assertEqual(counters["inductor"]["cat_linear_off"], 1)

    def test_cat_linear_bad_form(self):
        args = make_inputs((8,), (16, 16), 8, grad=False)
        with self.assertRaisesRegex(Exception, "must be one of"):
            self.common(cat_linear, args, 0, "bogus")

    def test_cat_linear_training_keeps_the_cat_of_caller_tensors(self):
        # In training the weight gradient reads the cat the forward saved
        # (here the parts are the caller's tensors, which it may write before
        # the backward): the forward's cat has a second user and stays;
        # gradients match eager.
        self.common(cat_linear, make_inputs((8,), (16, 16), 8), 0, "view")
        self.assertEqual(counters["inductor"]["cat_linear_cat_users"], 1)

    def test_cat_linear_frozen_weight_training(self):
        # Only the pieces need gradients: nothing saves the cat, the forward
        # site is taken, and both gradients match eager.
        a, b, w, bias = make_inputs((8,), (16, 16), 8)
        w.requires_grad_(False)
        self.common(produced_cat_linear, [a, b, w, bias], 1, "view")

    def test_cat_linear_no_grad_region(self):
        # A cat made under no_grad feeding a linear with gradients: the frozen
        # producers get no gradient, as in eager.
        def fn(a, b, w):
            with torch.no_grad():
                x = torch.cat([torch.relu(a), b * 2.0], -1)
            return F.linear(x, w)

        a, b, w = make_inputs((8,), (16, 16), 8, bias=False)
        # the weight gradient reads the cat, so the forward saves it
        self.common(fn, [a, b, w], 0, "view")
        self.assertIsNone(a.grad)
        self.assertIsNone(b.grad)

    def test_cat_linear_dropout_alias(self):
        # dropout with p=0 returns its input at run time; a caller's write
        # between forward and backward must reach W.grad as in eager.
        def fn(a, b, w):
            return F.linear(torch.cat([F.dropout(a, 0.0), b], -1), w)

        a, b, w = make_inputs((8,), (16, 16), 8, bias=False)
        a.requires_grad_(False)
        b.requires_grad_(False)
        ref_w = w.detach().clone().requires_grad_()
        torch._dynamo.reset()
        with fusion("view"):
            out = torch.compile(fn)(a, b, w)
        ref = fn(a.clone(), b, ref_w)
        a.add_(3.0)
        out.sum().backward()
        ref.sum().backward()
        self.assertEqual(w.grad, ref_w.grad, **TOL[torch.float32])

    def test_cat_linear_out_variant(self):
        def fn(a, b, w, buf):
            torch.cat([a, b], -1, out=buf)
            return F.linear(buf, w), buf

        a, b, w = make_inputs((8,), (16, 16), 8, bias=False, grad=False)
        buf, ref_buf = torch.empty(8, 32), torch.empty(8, 32)
        torch._dynamo.reset()
        with fusion("view"):
            out, got = torch.compile(fn)(a, b, w, buf)
        ref, _ = fn(a, b, w, ref_buf)
        self.assertEqual(out, ref, **TOL[torch.float32])
        self.assertEqual(buf, ref_buf)

    def test_cat_linear_view_form_declines_16_bit(self):
        # each piece's product would be rounded before the sum
        args = make_inputs((8,), (16, 16), 8, torch.bfloat16, grad=False)
        self.common(cat_linear, args, 0, "view")
        self.assertEqual(counters["inductor"]["cat_linear_view_dtype"], 1)

    def test_cat_linear_mm_form_needs_a_template(self):
        # no in-place template on CPU: the site stays stock, and says why
        self.common(cat_linear, make_inputs((8,), (16, 16), 8, grad=False), 0, "mm")
        self.assertEqual(counters["inductor"]["cat_linear_no_template"], 1)

    def test_cat_linear_symbolic_widths_3d(self):
        # dynamic=True makes the 3-D parts' widths symbolic: declined as such,
        # before the view's size is compared with them (no guard on them)
        args = make_inputs((2, 7), (16, 24), 8, grad=False)
        self.common(cat_linear, args, 0, "view", dynamic=True)
        self.assertEqual(counters["inductor"]["cat_linear_width"], 1)

    def test_cat_linear_dynamic_rows(self):
        args = make_inputs((8,), (16, 16), 8, grad=False)
        torch._dynamo.mark_dynamic(args[0], 0)
        torch._dynamo.mark_dynamic(args[1], 0)
        with torch.no_grad():
            self.common(produced_cat_linear, args, 1, form="view")

    @parametrize("case", ["num_parts", "rank"])
    def test_cat_linear_declines(self, case):
        if case == "num_parts":
            # more parts than MAX_PARTS
            n = cat_linear_lowering.MAX_PARTS + 1
            args = make_inputs((8,), (16,) * n, 8, grad=False)

            def fn(*a):
                return F.linear(torch.cat(a[:n], -1), *a[n:])

        else:
            # a 2-D cat viewed to other columns than its own
            args = make_inputs((8,), (16, 16), 8, grad=False)
            args[2] = torch.randn(8, 16)

            def fn(a, b, w, bias):
                return F.linear(torch.cat([a, b], -1).reshape(-1, 16), w, bias)

        with torch.no_grad():
            self.common(fn, args, 0, form="view")
        self.assertEqual(counters["inductor"][f"cat_linear_{case}"], 1)

    @parametrize(
        "beta,alpha,nan_bias",
        [(0.5, 1.0, False), (1.0, 2.0, False), (0.0, 1.0, True), (0.0, 3.0, True)],
    )
    def test_cat_linear_scaled_addmm_declined(self, beta, alpha, nan_bias):
        # A pattern without addmm's beta/alpha keywords matches such a site
        # (where the node keeps them): it stays stock, and beta=0 ignores a
        # NaN bias as eager does
        def fn(a, b, w, c):
            return torch.addmm(c, torch.cat([a, b], 1), w, beta=beta, alpha=alpha)

        a, b = torch.randn(8, 16), torch.randn(8, 24)
        c = torch.full((8,), float("nan")) if nan_bias else torch.randn(8)
        (code,) = self.common(fn, [a, b, torch.randn(40, 8), c], 0, "view")
        # declined as scaled where the pattern matches a node with addmm's
        # keywords; a pattern matcher that leaves such a node alone keeps it
        seen = {k for k, v in counters["inductor"].items() if "cat_linear" in k and v}
        self.assertLessEqual(seen, {"cat_linear_scaled"})
        FileCheck().check("cpp_fused_cat").check(f"beta={beta}").run(code)

    def test_cat_linear_plain_addmm(self):
        def fn(a, b, w, c):
            return torch.addmm(c, torch.cat([a, b], 1), w, beta=1, alpha=1)

        args = [torch.randn(8, 16), torch.randn(8, 24), torch.randn(40, 8)]
        self.common(fn, [*args, torch.randn(8)], 1, "view")

    def test_cat_linear_cat_with_other_users(self):
        # the cat is materialized for its other user anyway: counted, stock
        def fn(a, b, w, bias):
            x = torch.cat([a, b], -1)
            return F.linear(x, w, bias) + x.sum()

        self.common(fn, make_inputs((8,), (16, 16), 8, grad=False), 0, "view")
        self.assertEqual(counters["inductor"]["cat_linear_cat_users"], 1)

    @parametrize("also", ["bias", "mat2"])
    def test_cat_linear_gemm_reads_the_cat_twice(self, also):
        # addmm(z, z, W) (a residual written as one addmm), mm(z, z): the GEMM
        # itself needs the cat in memory, so reading its pieces saves nothing
        def fn(a, b, w):
            z = torch.cat([a, b], 1)
            return torch.addmm(z, z, w) if also == "bias" else torch.mm(z, z) + w

        args = [torch.randn(40, 16), torch.randn(40, 24), torch.randn(40, 40)]
        (code,) = self.common(fn, args, 0, "view")
        self.assertEqual(counters["inductor"]["cat_linear_cat_users"], 1)
        FileCheck().check("cpp_fused_cat").run(code)

    @parametrize("other", ["none", "sum", "declined_head", "as_mat2"])
    def test_cat_linear_cat_read_by_two_gemms(self, other):
        # two heads on one cat (one with a bias, so mm_plus_mm leaves their
        # sum alone): both read the pieces in place and the cat is never
        # made.  Where the cat is also read otherwise (by a sum, by a head
        # the lowering declines, as another GEMM's mat2) it is made anyway,
        # and no head reads the pieces.
        def fn(a, b, w, bias, c):
            x = torch.cat([a, b], -1)
            out = F.linear(x, w, bias) + F.linear(x, w * 2.0)
            if other == "sum":
                out = out + x.sum()
            elif other == "declined_head":
                out = out + torch.addmm(bias, x, w.t(), beta=0.5)
            elif other == "as_mat2":
                out = out + torch.mm(c, x).sum()
            return out

        a, b, w, bias = make_inputs((8,), (16, 16), 8, grad=False)
        args = [a, b, w, bias, torch.randn(6, 8)]
        (code,) = self.common(fn, args, 2 if other == "none" else 0, "view")
        if other == "none":
            FileCheck().check_not("aten.cat").check_not("cpp_fused_cat").run(code)
        else:
            self.assertEqual(counters["inductor"]["cat_linear_cat_users"], 2)

    @parametrize("summed", ["broadcast", "equal"])
    def test_cat_linear_next_to_mm_plus_mm(self, summed):
        # Under max_autotune, mm_plus_mm takes add(mm, mm) where its own check
        # passes (equal shapes), before this lowering sees the mm; the cat is
        # then made for it, and the other head on the cat declines.  Where
        # that check fails (a broadcast sum) both heads read the pieces in
        # place.
        def fn(a, b, c, w1, w2, w3, bias):
            x = torch.cat([a, b], 1)
            return x @ w1 + c @ w2, F.linear(x, w3, bias)

        rows = 1 if summed == "broadcast" else 8
        args = [torch.randn(8, 16), torch.randn(8, 16), torch.randn(rows, 4)]
        args += [torch.randn(32, 12), torch.randn(4, 12), torch.randn(12, 32)]
        args += [torch.randn(12)]
        counters.clear()
        torch._dynamo.reset()
        with (
            fusion("view"),
            inductor_config.patch(
                max_autotune_gemm=True, max_autotune_gemm_backends="ATEN"
            ),
        ):
            out, (code,) = run_and_get_code(torch.compile(fn), *args)
        self.assertEqual(out, fn(*args))
        if summed == "broadcast":
            self.assertEqual(counters["inductor"]["cat_linear"], 2)
            FileCheck().check_not("aten.cat").check_not("cpp_fused_cat").run(code)
        else:
            self.assertEqual(counters["inductor"]["cat_linear"], 0)
            self.assertEqual(counters["inductor"]["cat_linear_cat_users"], 1)
            FileCheck().check("cpp_fused_cat").run(code)

    @parametrize("dynamic_rows", [False, True])
    def test_cat_linear_aligned_rows(self, dynamic_rows):
        # How the lowering lays out the template's pieces, with the template
        # left out (it needs a GPU) so that its fallback, stock's cat and
        # GEMM, reads them: a single-use producer's piece at 16-byte aligned
        # rows (351 wide, 352 apart) at any row count; one narrower than a
        # vector, or read by something else too (here returned transposed,
        # whose strides must stay eager's), as it is.
        def fn(x, table, idx, w, b):
            shared = torch.cos(table[:, :301])
            pieces = [torch.relu(x), table[:, idx], torch.sin(x[:, :3]), shared]
            return F.linear(torch.cat(pieces, -1), w, b), shared.t()

        args = [
            torch.randn(64, 128),
            torch.randn(64, 729),
            torch.randperm(729)[:351],
            torch.randn(96, 783),
            torch.randn(96),
        ]
        if dynamic_rows:
            torch._dynamo.mark_dynamic(args[0], 0)
            torch._dynamo.mark_dynamic(args[1], 0)
        decide = mock.patch.object(cost, "decide", side_effect=AssertionError)
        with template_left_out(), decide:  # forced: no decision
            (code,) = self.common(fn, args, 0, form="mm", backward=False)
        self.assertEqual(counters["inductor"]["cat_linear_no_choice"], 1)
        for rows in ("351), (352, 1)", "3), (3, 1)", "301), (301, 1)"):
            FileCheck().check_regex(
                r"empty_strided_cpu\(\(\w+, " + re.escape(rows)
            ).run(code)

    def test_cat_linear_weight_layout_kept(self):
        # A weight made in the graph keeps the layout stock gives it, which
        # its other readers see (here a view of it, returned): the lowering
        # lays out only the pieces it owns, and copies a weight, never
        # re-lays one out. The template is left out as above.
        def fn(x, y, w):
            w2 = w * 2
            out = torch.mm(torch.cat([torch.relu(x), y], 1), w2)
            return out, w2.unsqueeze(0)

        args = [torch.randn(9, 13), torch.randn(9, 6), torch.randn(19, 5)]
        counters.clear()
        torch._dynamo.reset()
        with fusion("mm"), template_left_out():
            out = torch.compile(fn)(*args)
        self.assertEqual(counters["inductor"]["cat_linear_no_choice"], 1)
        ref = fn(*args)
        self.assertEqual(out, ref)
        self.assertEqual(out[1].stride(), ref[1].stride())
        self.assertEqual(out[1].view(-1), ref[1].view(-1))

    def test_cat_linear_fallback_is_stock(self):
        # Where the template turns out not to apply (left out as above), the
        # site is computed as stock computes it, one GEMM over all of K: a
        # chain of per-piece GEMMs would round each piece's 16-bit product,
        # here 16 * 64 * 80 in each half, which overflows fp16 and cancels
        # in the whole sum.
        def fn(a, b, w):
            return F.linear(torch.cat([a, b], -1), w)

        a = torch.full((8, 16), 64.0, dtype=torch.float16)
        w = torch.cat([torch.full((4, 16), 80.0), torch.full((4, 16), -80.0)], 1)
        args = [a, a.clone(), w.half()]
        counters.clear()
        torch._dynamo.reset()
        with torch.no_grad(), fusion("mm"), template_left_out():
            out = torch.compile(fn)(*args)
        self.assertEqual(out, fn(*args))
        self.assertEqual(counters["inductor"]["cat_linear"], 0)
        self.assertEqual(counters["inductor"]["cat_linear_no_choice"], 1)

    def test_cat_linear_site_alignment(self):
        # Whether stock's GEMM reads aligned rows: the cat's (K) and the
        # weight's leading stride (K for linear's transposed weight, N for
        # x @ W), as pad_mm counts alignment
        sites, recorded = [], []
        decide = cost.decide

        def record(site):
            sites.append(site.gemm_aligned)
            recorded.append(site)
            return decide(site)

        cases = [
            (lambda x, w: F.linear(x, w), (32, 30), (12, 62)),  # K 62
            (lambda x, w: F.linear(x, w), (32, 32), (10, 64)),  # N 10: aligned
            (lambda x, w: x @ w, (32, 32), (64, 10)),  # N 10 leads
            (lambda x, w: x @ w, (32, 32), (64, 16)),
        ]
        with mock.patch.object(cost, "decide", record):
            for op, widths, wshape in cases:
                parts = [torch.randn(8, k) for k in widths]
                w = torch.randn(*wshape)

                def fn(a, b, w, op=op):
                    return op(torch.cat([a, b], -1), w)

                torch._dynamo.reset()
                with fusion(None):
                    torch.compile(fn)(*parts, w)
        self.assertEqual(sites, [False, True, False, True])
        # the pieces' rows do not enter: a piece 300 wide (at rows 600 bytes
        # apart) beside a relu'd one, where stock's K (556) is unaligned
        with mock.patch.object(cost, "decide", record), fusion(None):
            torch._dynamo.reset()
            parts = [torch.randn(8, k, dtype=torch.bfloat16) for k in (256, 300)]
            w = torch.randn(16, 556, dtype=torch.bfloat16)
            torch.compile(lambda a, b, w: F.linear(torch.cat([a.relu(), b], -1), w))(
                *parts, w
            )
        (site,) = [s for s in recorded if s.widths == (256, 300)]
        on_gpu = dataclasses.replace(
            site, device=torch.device("cuda", 0), rows=8192, n=4096
        )
        with h100_figures():
            self.assertEqual(cost.decide(on_gpu).form, "mm")

    def test_cat_linear_in_cond_branches(self):
        # A site in a cond branch is lowered with its subgraph; the parent
        # graph's fake-tensor update re-runs the rewritten branch on fake
        # tensors (before the fix: 'FakeTensor' object has no attribute
        # 'get_size').
        def fn(a, b, w, bias):
            def yes(a, b, w, bias):
                return F.linear(torch.cat([a, b], -1), w, bias)

            def no(a, b, w, bias):
                return F.linear(torch.cat([b, a], -1), w, bias)

            return torch.cond(a.sum() > 0, yes, no, (a, b, w, bias))

        self.common(fn, make_inputs((8,), (16, 16), 8, grad=False), 2, "view")

    def test_cat_linear_in_while_loop_body(self):
        def fn(a, b, w, bias):
            def body(i, x):
                return i + 1, F.linear(torch.cat([x, b], -1), w, bias)

            return torch._higher_order_ops.while_loop(
                lambda i, x: i < 3, body, (torch.tensor(0), a)
            )[1]

        args = make_inputs((8,), (16, 16), 16, grad=False)
        self.common(fn, args, 1, "view")

    def test_cat_linear_part_written_before_cat(self):
        # a part written through an index after it is made: the write is in
        # the functional graph, the site is read after it
        def fn(a, b, w, bias):
            p = a * 2.0
            p[0] = 5.0
            q = b + 1.0
            q[:, 1:3].mul_(3.0)
            return F.linear(torch.cat([p, q], -1), w, bias)

        self.common(fn, make_inputs((8,), (16, 16), 8, grad=False), 1, "view")

    def test_cat_linear_skip_is_logged(self):
        with self.assertLogs(cat_linear_lowering.log, level="DEBUG") as logs:
            self.common(cat_linear, make_inputs((8,), (16, 16), 8, grad=False), 0)
        self.assertTrue(
            any(
                "skipping cat_linear: no in-place GEMM on cpu" in m for m in logs.output
            )
        )

    def test_cat_linear_switch_is_not_a_pre_grad_pass(self):
        # pre_grad.py must skip the key (it names no pre-grad pattern pass);
        # where it does not, the compile fails here with a KeyError
        with fusion():
            torch._dynamo.reset()
            torch.compile(cat_linear)(*make_inputs((8,), (16, 16), 8, grad=False))

    # ---- the decision ---------------------------------------------------------

    def test_cat_linear_cpu_declines(self):
        site = cost.CatLinearSite(
            4096, (64, 64), 64, torch.float32, torch.device("cpu"), (False, False)
        )
        self.assertEqual(cost.decide(site).counter, "device")

    def test_cat_linear_rocm_declines(self):
        # figures aside: the template is measured on CUDA devices only
        site = cuda_site((256, 256), 8, rows=8192)
        with h100_figures():
            self.assertEqual(cost.decide(site).form, "mm")
            with mock.patch("torch.version.hip", "6.4"):
                self.assertEqual(cost.decide(site).counter, "device")

    def test_cat_linear_produced_pieces(self):
        # Which pieces the decision sees as made by an op the template can
        # compute in its loads: single-use pointwise ops and gathers; not one
        # with other readers, before the cat (EdgeConv's x_i, read by the cat
        # and by x_j - x_i: the scheduler fuses it with x_j - x_i first) or
        # after it.
        def edge(x, src, dst, w):
            x_i, x_j = x[dst], x[src]
            return F.linear(torch.cat([x_i, x_j - x_i], -1), w)

        def read_after(x, src, dst, w):
            x_i = x[dst]
            return F.linear(torch.cat([x_i, x[src]], -1), w) + x_i.sum()

        def read_by_mm(x, src, dst, w):
            x_i = x[dst]
            return (
                F.linear(torch.cat([x_i, torch.relu(x[src])], -1), w) + x_i @ w[:, :16]
            )

        x = torch.randn(20, 16)
        src, dst = torch.randint(0, 20, (64,)), torch.randint(0, 20, (64,))
        w = torch.randn(16, 32)
        for fn, produced in (
            (edge, (False, True)),
            (read_after, (False, True)),
            (read_by_mm, (False, True)),
        ):
            sites = []

            def record(site, decide=cost.decide):
                sites.append(site)
                return decide(site)

            torch._dynamo.reset()
            with fusion(), mock.patch.object(cost, "decide", side_effect=record):
                torch.compile(fn)(x, src, dst, w)
            self.assertEqual([s.produced for s in sites], [produced], msg=fn.__name__)

    def test_cat_linear_cat_of_two_sites_is_decided_alike(self):
        # Two GEMMs read one cat of a relu'd piece. The first site's check
        # asks the decision about the second too; once the first is lowered,
        # its node reads the pieces, and the second's own check must still
        # see the site the first predicted. The relu is written either way
        # (two readers), so neither computes it in its loads.
        def fn(a, b, w1, w2):
            c = torch.cat([torch.relu(a), b], -1)
            return F.linear(c, w1) + F.linear(c, w2)

        sites = []

        def record(site):
            sites.append(site)
            return cost.Decision("view", "taken", "roofline")

        args = make_inputs((8,), (16, 16), 4, bias=False, grad=False)
        args.append(torch.randn(4, 32))
        torch._dynamo.reset()
        decide = mock.patch.object(cost, "decide", side_effect=record)
        with fusion(), decide, inductor_config.patch(prologue_fusion=True):
            with torch.no_grad():
                torch.compile(fn)(*args)
        self.assertGreaterEqual(len(sites), 3)
        self.assertEqual(
            {(s.produced, s.prologue_fusion) for s in sites}, {((True, False), False)}
        )

    def test_cat_linear_gather_kinds(self):
        # How a produced piece loads through an index, through the pointwise
        # and view ops Inductor inlines: "rows" only for whole rows read
        # contiguously and reached through no view, else "other".
        x, idx = torch.randn(80, 16), torch.randint(0, 16, (64,))
        cases = {
            "rows": lambda x, i: x[i],
            "index_select_rows": lambda x, i: torch.index_select(x, 0, i),
            "embedding": lambda x, i: F.embedding(i, x),
            "relu_of_rows": lambda x, i: torch.relu(x[i]),
            "difference_of_rows": lambda x, i: x[i] - x[i.flip(0)],
            "columns": lambda x, i: x[:64, i[:16]],
            "index_select_columns": lambda x, i: torch.index_select(x[:64], 1, i[:16]),
            "rows_times_columns": lambda x, i: x[i] * x[:64, i[:16]],
            "pointwise": lambda x, i: torch.relu(x[:64]),
            # whole rows, but not read contiguously or not as rows of the piece
            "rows_of_transposed": lambda x, i: torch.relu(x[:16].t()[i]),
            "columns_through_views": lambda x, i: torch.relu(x.t()[i[:16]].t()[:64]),
            "row_broadcast_along_k": lambda x, i: torch.relu(
                x[0][i[:16]].expand(64, 16)
            ),
            "rows_through_expand": lambda x, i: x[i[:1]].expand(64, 16) + 1,
            "torch_gather": lambda x, i: torch.relu(
                torch.gather(x[:64], 1, i.view(64, 1).expand(64, 16))
            ),
            "gathered_index": lambda x, i: x[i[i]],
            # a piece torch.gather makes is produced (stock writes it into the cat)
            "bare_torch_gather": lambda x, i: torch.gather(
                x[:64], 1, i.view(64, 1).expand(64, 16)
            ),
        }
        expected = {
            "columns": "other",
            "index_select_columns": "other",
            "rows_times_columns": "other",
            "pointwise": None,
            "rows_of_transposed": "other",
            "columns_through_views": "other",
            "row_broadcast_along_k": "other",
            "rows_through_expand": "other",
            "torch_gather": "other",
            "gathered_index": "other",
            "bare_torch_gather": "other",
        }
        for name, make in cases.items():

            def fn(a, x, i, w, make=make):
                return F.linear(torch.cat([a, make(x, i)], -1), w)

            args = (torch.randn(64, 16), x, idx)
            sites = []

            def record(site, decide=cost.decide):
                sites.append(site)
                return decide(site)

            torch._dynamo.reset()
            with (
                fusion(),
                inductor_config.patch(fx_graph_cache=False),
                mock.patch.object(cost, "decide", side_effect=record),
            ):
                torch.compile(fn)(*args, torch.randn(8, 32))
            want = (None, expected.get(name, "rows"))
            self.assertEqual([s.gathers for s in sites], [want], msg=name)

    def test_cat_linear_site_static_shape(self):
        # the decision sees sizes on their hints: it is told which are static
        def fn(a, b, w):
            return F.linear(torch.cat([a, b], -1), w)

        for dynamic in (False, True):
            sites = []

            def record(site, decide=cost.decide):
                sites.append(site)
                return decide(site)

            torch._dynamo.reset()
            a, b = torch.randn(64, 16), torch.randn(64, 16)
            if dynamic:  # the rows, not the widths (a dynamic width is declined)
                torch._dynamo.mark_dynamic(a, 0)
                torch._dynamo.mark_dynamic(b, 0)
            with (
                fusion(),
                inductor_config.patch(fx_graph_cache=False),
                mock.patch.object(cost, "decide", side_effect=record),
            ):
                torch.compile(fn)(a, b, torch.randn(8, 32))
            self.assertEqual([s.static_shape for s in sites], [not dynamic])

    def test_cat_linear_cuda_decision_latency_bound(self):
        with h100_figures():
            # a compute-bound GEMM whose output tiles fill at most two waves
            # runs at its tiles' latency, in cuBLAS as in the one loop over
            # 64-wide K tiles: decided as a memory-bound site there, though its
            # best case is below the compute-bound one; at four waves it is not
            few = cuda_site((512, 512), 2048, rows=2048)  # 256 tiles
            sms = cost.multiprocessors(few.device)
            ridge = cost.ridge_point(few.device, few.dtype)
            self.assertEqual(sms, 132)
            self.assertTrue(few.compute_bound(ridge) and few.latency_bound(sms))
            self.assertLess(few.speedup_bound(ridge), cost.COMPUTE_BOUND_MIN_BOUND)
            self.assertEqual(
                cost.decide(few), cost.Decision("mm", mock.ANY, "roofline")
            )
            waves = dataclasses.replace(few, rows=4096)
            self.assertFalse(waves.latency_bound(sms))
            self.assertEqual(cost.decide(waves).counter, "compute_bound")
            for count, taken in ((128, True), (127, False)):  # 2 x 128 tiles
                with mock.patch(
                    "torch._inductor.utils.get_num_sms", return_value=count
                ):
                    self.assertEqual(cost.decide(few).form == "mm", taken, msg=count)
            # not over 32-wide K tiles, nor with a K tail before the last
            # piece, nor where the rows are a hint of a dynamic size
            narrow_k = cuda_site((480, 544), 2048, rows=2048)
            self.assertTrue(narrow_k.one_loop)
            self.assertEqual(cost.decide(narrow_k).counter, "compute_bound")
            tail_first = cuda_site((488, 536), 2048, rows=2048)
            self.assertEqual(cost.decide(tail_first).counter, "k_tail")
            dynamic = dataclasses.replace(few, static_shape=False)
            self.assertEqual(cost.decide(dynamic).counter, "compute_bound")
            # nor where the per-piece loops would compute a piece in their
            # loads: read from its own buffer, it saves nothing, and the one
            # loop reads the rest in place
            made = cost.decide(dataclasses.replace(few, produced=(True, False)))
            self.assertEqual((made.form, made.prologues), ("mm", ()))
            all_made = dataclasses.replace(few, produced=(True, True))
            self.assertEqual(cost.decide(all_made).counter, "screened")
            # no multiprocessor count: compute-bound as before
            with mock.patch("torch._inductor.utils.get_num_sms", side_effect=OSError):
                self.assertIsNone(cost.multiprocessors(few.device))
                self.assertEqual(cost.decide(few).counter, "compute_bound")

    def test_cat_linear_cuda_decision(self):
        with h100_figures():
            # a memory-bound forward site of whole K tiles: taken
            self.assertEqual(cost.decide(cuda_site((256, 256), 160)).form, "mm")
            # compute-bound: screened
            big = cost.decide(cuda_site((4096, 4096), 8192))
            self.assertEqual((big.form, big.counter), (None, "screened"))
            # compute-bound with headroom: taken over a long K loop, not a
            # short one (the template's fill and epilogue weigh more there)
            long_k = cost.decide(cuda_site((1024, 1024), 1024))
            self.assertEqual((long_k.form, long_k.counter), ("mm", "roofline"))
            short_k = cost.decide(cuda_site((128, 128, 128), 1024))
            self.assertEqual((short_k.form, short_k.counter), (None, "compute_bound"))
            # compute-bound over a long K loop, but too little to save
            thin_gain = cost.decide(cuda_site((2048, 2048), 4096))
            self.assertEqual(
                (thin_gain.form, thin_gain.counter), (None, "compute_bound")
            )
            # memory-bound with a K tail: the per-piece loops need more
            tail_low = cost.decide(cuda_site((8, 120), 1024))
            self.assertEqual((tail_low.form, tail_low.counter), (None, "below_bound"))
            # a K tail in the last piece is the masked end of the one loop:
            # taken where memory-bound, and where compute-bound decided as
            # any one-loop site (here K is short)
            tail = cost.decide(cuda_site((128, 351), 256))
            self.assertEqual((tail.form, tail.counter), ("mm", "roofline"))
            self.assertTrue(cuda_site((128, 351), 256).one_loop)
            last_tail = cost.decide(cuda_site((128, 352), 2048))
            self.assertEqual(
                (last_tail.form, last_tail.counter), (None, "compute_bound")
            )
            # ... unless stock's GEMM reads unaligned rows, which puts cuBLAS
            # on its unaligned kernels (the lowering's site() says which)
            unaligned = cuda_site((128, 351), 2048, gemm_aligned=False)
            self.assertEqual(cost.decide(unaligned).form, "mm")
            # ... even with little to save (as DLRM's top MLP: a gather makes
            # the 351, written as stock writes it)
            dlrm = cuda_site(
                (128, 351), 2048, rows=16384, produced=[False, True], gemm_aligned=False
            )
            ridge = cost.ridge_point(dlrm.device, dlrm.dtype)
            unfolded = dataclasses.replace(dlrm, prologue_fusion=False)
            self.assertLess(unfolded.speedup_bound(ridge), cost.MARGIN)
            self.assertEqual(cost.decide(dlrm), cost.decide(unfolded))
            self.assertEqual(cost.decide(dlrm).form, "mm")
            # ... but not where the GEMM is memory-bound
            thin = dataclasses.replace(dlrm, rows=64, n=4096)
            self.assertFalse(thin.compute_bound(ridge))
            self.assertEqual(cost.decide(thin).counter, "screened")
            # a relu'd piece and one read in place at unaligned rows (300
            # wide), little to save once the relu'd piece is written by its
            # own kernel: that kernel, then the one loop
            relu = cuda_site(
                (256, 300), 4096, produced=[True, False], gemm_aligned=False
            )
            unfolded = dataclasses.replace(relu, prologue_fusion=False)
            self.assertLess(unfolded.speedup_bound(ridge), cost.MARGIN)
            taken = cost.decide(relu)
            self.assertEqual((taken.form, taken.prologues), ("mm", ()))
            aligned = cost.decide(dataclasses.replace(relu, gemm_aligned=True))
            self.assertEqual(aligned.form, None)
            # a K tail before the last piece needs the per-piece loops: left
            # to max_autotune where compute-bound
            self.assertFalse(cuda_site((351, 128), 2048).one_loop)
            wide = cost.decide(cuda_site((351, 128), 2048))
            self.assertEqual((wide.form, wide.counter), (None, "k_tail"))
            # pieces made by pointwise ops or gathers: the template computes
            # them in its loads (its per-piece loops), so they save their
            # traffic too
            made = [True, True]
            whole = cuda_site((256, 256), 160, produced=made)
            self.assertFalse(whole.one_loop)
            self.assertEqual(cost.decide(whole).form, "mm")
            tail_made = cost.decide(cuda_site((128, 351), 256, produced=made))
            self.assertEqual((tail_made.form, tail_made.counter), ("mm", "roofline"))
            self.assertEqual(cost.decide(whole).prologues, (True, True))
            # ... but not at a compute-bound GEMM, where the per-piece loops
            # trail cuBLAS most: there the produced pieces are read from
            # their own buffers, in the one loop, and save nothing
            made_cb = cost.decide(cuda_site((1024, 1024), 1024, produced=made))
            self.assertEqual((made_cb.form, made_cb.counter), (None, "screened"))
            half_cb = cost.decide(
                cuda_site(
                    (128, 351),
                    1024,
                    rows=16384,
                    produced=[True, False],
                    gemm_aligned=False,
                )
            )
            self.assertEqual((half_cb.form, half_cb.prologues), ("mm", ()))
            # without prologue fusion stock writes them straight into the cat
            # and the template reads them from their own buffers: they save
            # nothing, and the template keeps its one loop
            no_fusion = dict(produced=made, prologue_fusion=False)
            off = cost.decide(cuda_site((256, 256), 160, **no_fusion))
            self.assertEqual((off.form, off.counter), (None, "screened"))
            # one piece in place still saves its own traffic
            half = cuda_site((256, 256), 160, produced=[True, False])
            half_off = dataclasses.replace(half, prologue_fusion=False)
            self.assertTrue(half_off.one_loop)
            self.assertEqual(cost.decide(half_off).form, "mm")
            self.assertLess(half_off.saved_bytes(), half.saved_bytes())
            # a gather in the loads runs once per column tile, and one along
            # K reads uncoalesced: computed there only along rows into one
            # column tile; else its own kernel writes it and it saves nothing
            for gather, n, folded in (
                ("rows", 96, (True, True)),
                ("rows", 160, (True, False)),
                ("other", 96, (True, False)),
            ):
                site = cuda_site((256, 256), n, produced=made, gathers=(None, gather))
                self.assertEqual(site.folded, folded, msg=(gather, n))
                self.assertEqual(cost.decide(site).prologues, folded)
                unfolded = dataclasses.replace(site, gathers=())
                saves = site.saved_bytes() == unfolded.saved_bytes()
                self.assertEqual(saves, all(folded), msg=(gather, n))
            # nor under max_autotune, whose configs may tile N more finely
            rows = cuda_site((256, 256), 96, produced=made, gathers=(None, "rows"))
            tuned_rows = dataclasses.replace(rows, max_autotune=True)
            self.assertEqual(tuned_rows.folded, (True, False))
            # under max_autotune: handed to autotuning
            tuned = cost.decide(cuda_site((128, 351), 2048, max_autotune=True))
            self.assertEqual((tuned.form, tuned.counter), ("mm", "autotune"))
            # ... with the produced pieces in the loads where memory-bound,
            # from their own buffers where compute-bound (autotuning times
            # the template without the producers the scheduler fuses in)
            tuned_made = dataclasses.replace(whole, max_autotune=True)
            self.assertEqual(cost.decide(tuned_made).prologues, (True, True))
            relu_cb = cuda_site(
                (128, 351), 1024, rows=16384, produced=[True, False], max_autotune=True
            )
            self.assertTrue(relu_cb.compute_bound(ridge) and relu_cb.folded)
            tuned_cb = cost.decide(relu_cb)
            self.assertEqual(
                (tuned_cb.form, tuned_cb.counter, tuned_cb.prologues),
                ("mm", "autotune", ()),
            )
            tuned_made_cb = cuda_site(
                (1024, 1024), 1024, produced=made, max_autotune=True
            )
            self.assertEqual(cost.decide(tuned_made_cb).counter, "screened")

    def test_cat_linear_default_config_fits_small_shared_memory(self):
        # where no config of the one-loop layout's K tile fits, the next K
        # tile's and then the per-piece loops' are tried before declining
        from torch._inductor.kernel import cat_linear as kernel

        for smem, widths in ((65536, (64, 64)), (32768, (64, 64)), (32768, (40, 24))):
            with mock.patch.object(kernel, "get_gpu_shared_memory", return_value=smem):
                cfg = kernel._default_config(256, widths, 2)
            self.assertIsNotNone(cfg, (smem, widths))
            need = cfg["num_stages"] * (cfg["BLOCK_M"] + cfg["BLOCK_N"])
            self.assertLessEqual(need * cfg["BLOCK_K"] * 2 + 128, smem)
        with mock.patch.object(kernel, "get_gpu_shared_memory", return_value=8192):
            self.assertIsNone(kernel._default_config(256, (64, 64), 2))

    def test_cat_linear_loops_unmasked_pieces(self):
        # the per-piece loops load a piece of whole K tiles unmasked
        from torch._inductor.kernel import cat_linear as kernel

        cfg = dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, num_stages=3, num_warps=4)
        with mock.patch.object(kernel, "get_gpu_shared_memory", return_value=232448):
            loops = kernel._layout(cfg, (40, 64, 128), 2)
            # whole tiles of the config's BLOCK_K: 96 is of 32, not of 64
            by_64 = kernel._layout(cfg, (40, 96, 128), 2)
            by_32 = kernel._layout(dict(cfg, BLOCK_K=32), (40, 96, 128), 2)
            folded = kernel._layout(cfg, (64, 64, 40), 2, loops=True)
            one_loop = kernel._layout(cfg, (64, 64, 40), 2)
        self.assertEqual((loops["ONE_LOOP"], loops["EVEN_PIECES"]), (False, 0b110))
        self.assertEqual((by_64["EVEN_PIECES"], by_32["EVEN_PIECES"]), (0b100, 0b110))
        self.assertEqual((folded["ONE_LOOP"], folded["EVEN_PIECES"]), (False, 0b011))
        self.assertEqual((one_loop["ONE_LOOP"], one_loop["EVEN_PIECES"]), (True, 0))
        self.assertFalse(one_loop["EVEN_K"])

    def test_cat_linear_ridge_point_from_inductor_figures(self):
        with h100_figures():
            ridge = cost.ridge_point(torch.device("cuda", 0), torch.bfloat16)
        want = 989e12 * cost.GEMM_EFFICIENCY / (3350e9 * cost.COPY_EFFICIENCY)
        self.assertAlmostEqual(ridge, want)
        with (
            h100_figures(),
            mock.patch("torch._inductor.utils.get_device_tflops", return_value=0.5),
        ):
            # a figure off by orders of magnitude is not believed
            self.assertIsNone(cost.ridge_point(torch.device("cuda", 0), torch.bfloat16))
        self.assertIsNone(cost.ridge_point(torch.device("cpu"), torch.float32))

    def test_cat_linear_decision_fp32_has_no_template(self):
        # the figures are there; the template is 16-bit only
        with h100_figures():
            self.assertEqual(
                cost.decide(cuda_site((128, 128), 64, dtype=torch.float32)).counter,
                "no_template",
            )
            self.assertEqual(cost.decide(cuda_site((128, 128), 64)).counter, "roofline")

    # ---- generated programs through the whole compile -------------------------

    @settings(max_examples=12, deadline=None, derandomize=True, database=None)
    @given(
        widths=st.lists(st.sampled_from([8, 16, 40]), min_size=2, max_size=5),
        rows=st.sampled_from([2, 7, 33]),  # one row: Inductor decomposes the mm
        strided=st.booleans(),
        scale=st.sampled_from([(1.0, 1.0), (0.5, 1.0), (1.0, -2.0), (0.0, 1.0)]),
        nan_bias=st.booleans(),
        grad=st.booleans(),
        dynamic_rows=st.booleans(),
    )
    def test_cat_linear_generated_sites(
        self, widths, rows, strided, scale, nan_bias, grad, dynamic_rows
    ):
        # addmm(bias, cat(parts, 1), W^T, beta=, alpha=) over piece counts,
        # strides, keywords and dynamic rows, forced into the view form:
        # eager's numbers forward and backward; taken exactly when it is exact
        # (beta = alpha = 1, at most MAX_PARTS parts; without gradients, since
        # the forward saves the cat for the weight gradient).
        beta, alpha = scale

        def fn(*args):
            x = torch.cat(args[: len(widths)], 1)
            w, c = args[len(widths) :]
            return torch.addmm(c, x, w.t(), beta=beta, alpha=alpha)

        args = _generated_site_args(
            widths, rows, 8, torch.float32, "cpu", strided, "addmm"
        )
        if nan_bias and beta == 0.0:
            args[-1] = torch.full_like(args[-1], float("nan"))
        else:
            args = [a.requires_grad_(grad) if a.is_leaf else a for a in args]
        if dynamic_rows:
            for a in args[: len(widths)]:
                torch._dynamo.mark_dynamic(a, 0)
        exact = (beta, alpha) == (1.0, 1.0)
        taken = exact and len(widths) <= cat_linear_lowering.MAX_PARTS
        expected = int(taken and not any(a.requires_grad for a in args))
        self.common(fn, args, expected, "view")

    @settings(max_examples=10, deadline=None, derandomize=True)
    @given(
        widths=st.lists(st.sampled_from([8, 16, 24]), min_size=2, max_size=4),
        lead=st.sampled_from([(5,), (2, 3)]),
        producer=st.sampled_from(["input", "relu", "dropout0", "no_grad", "made"]),
        grads=st.sampled_from(["none", "all", "frozen_weight", "frozen_parts"]),
        bias=st.booleans(),
        write_after=st.booleans(),
        dynamic_rows=st.booleans(),
    )
    def test_cat_linear_generated_programs(
        self, widths, lead, producer, grads, bias, write_after, dynamic_rows
    ):
        # Forced into the view form below autograd, every program matches eager
        # forward and backward, a caller's write to an input between them
        # included: the rewrite cannot see grad mode, aliases or saved tensors.
        def fn(*args):
            parts, w = list(args[: len(widths)]), args[len(widths)]
            b = args[-1] if bias else None
            if producer == "relu":
                parts[0] = torch.relu(parts[0])
            elif producer == "dropout0":
                parts[0] = F.dropout(parts[0], 0.0)
            elif producer == "made":
                parts = [torch.relu(p) * 2.0 for p in parts]
            if producer == "no_grad":
                with torch.no_grad():
                    x = torch.cat([p * 2.0 for p in parts], -1)
            else:
                x = torch.cat(parts, -1)
            return F.linear(x, w, b)

        args = make_inputs(lead, widths, 8, bias=bias, grad=grads != "none")
        if grads == "frozen_weight":
            args[len(widths)].requires_grad_(False)
        elif grads == "frozen_parts":
            for a in args[: len(widths)]:
                a.requires_grad_(False)
        ref_args = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
        if dynamic_rows:
            for a in args[: len(widths)]:
                torch._dynamo.mark_dynamic(a, 0)
        counters.clear()
        torch._dynamo.reset()
        with fusion("view"):
            out = torch.compile(fn)(*args)
        ref = fn(*ref_args)
        self.assertEqual(out, ref, **TOL[torch.float32])
        if not ref.requires_grad:
            return
        if write_after:
            with torch.no_grad():
                args[0].add_(1.0)
                ref_args[0].add_(1.0)
        g = torch.randn_like(ref)
        out.backward(g)
        ref.backward(g)
        for a, r in zip(args, ref_args):
            self.assertEqual(a.grad, r.grad, **TOL[torch.float32])

    # ---- CUDA: the in-place GEMM template ------------------------------------

    @requires_cuda_and_triton
    @parametrize("dtype", [torch.bfloat16, torch.float16])
    @parametrize(
        "lead,widths,n,bias",
        [
            ((256,), (64, 64), 96, True),
            ((2, 100), (64, 128, 64), 130, False),  # 3-D, odd M and N
            ((256,), (320, 384), 256, True),
            ((256,), (40, 24, 16, 72), 64, True),  # masked K tails, four pieces
            ((2, 100), (64, 100), 96, True),  # a K tail in the last piece only
            ((256,), (40, 64, 128), 96, True),  # loops, two of whole K tiles
        ],
    )
    def test_cat_linear_cuda_template_parity(self, dtype, lead, widths, n, bias):
        args = make_inputs(lead, widths, n, dtype, "cuda", bias=bias, grad=False)

        def fn(*a):
            return F.linear(torch.cat(a[: len(widths)], -1), *a[len(widths) :])

        with torch.no_grad():
            (code,) = self.common(fn, args, 1, form="mm")
        FileCheck().check("def triton_tem_").check_not("triton_poi_fused_cat").run(code)
        # every piece but the last whole K tiles: one loop over the cat, each
        # tile's piece selected (its last tile masked where K is not whole
        # tiles); else one loop per piece, masked where the piece is not
        # whole K tiles
        one_loop = FileCheck().check("def triton_tem_")
        if all(w % 32 == 0 for w in widths[:-1]):
            block_k = 64 if all(w % 64 == 0 for w in widths[:-1]) else 32
            one_loop.check("tl.where(in_a1")
            if sum(widths) % block_k:
                one_loop.check("mask=rk[None, :] < K")
            else:
                one_loop.check_not("mask=rk")
            one_loop.run(code)
        else:
            from torch._inductor.kernel import cat_linear as kernel

            one_loop.check_not("tl.where(in_a1").run(code)
            block_k = kernel._default_config(n, widths, dtype.itemsize)["BLOCK_K"]
            masked = sum(w % block_k != 0 for w in widths)
            self.assertEqual(code.count("a_mask = "), masked)
            self.assertEqual(code.count("b_mask = "), masked)

    @requires_cuda_and_triton
    def test_cat_linear_cuda_unaligned_rows(self):
        # DLRM's top MLP: K 128 + 351, a gathered piece, read from its own
        # buffer (no prologue), K left unpadded (pad_mm off). The template
        # reads the pieces it realizes at aligned rows (351 wide, 352 apart)
        # and, the GEMM being compute-bound, a copy of the weight at aligned
        # rows, with the K tail masked after the loop (a mask in it would
        # keep every tile's loads scalar)
        def fn(x, table, idx, w, b):
            return F.linear(torch.cat([torch.relu(x), table[:, idx]], -1), w, b)

        args = [
            torch.randn(8192, 128, device="cuda", dtype=torch.bfloat16),
            torch.randn(8192, 729, device="cuda", dtype=torch.bfloat16),
            torch.randperm(729, device="cuda")[:351],
            torch.randn(1024, 479, device="cuda", dtype=torch.bfloat16),
            torch.randn(1024, device="cuda", dtype=torch.bfloat16),
        ]
        with (
            torch.no_grad(),
            inductor_config.patch(shape_padding=False, prologue_fusion=False),
        ):
            (code,) = self.common(fn, args, 1, "mm")
        FileCheck().check("empty_strided_cuda((8192, 351), (352, 1)").run(code)
        FileCheck().check("empty_strided_cuda((479, 1024), (1, 480)").run(code)
        FileCheck().check("def triton_tem_").check("K // BLOCK_K").check(
            "mask=rk[None, :] < K"
        ).run(code)

    @requires_cuda_and_triton
    def test_cat_linear_cuda_one_loop_strided_pieces(self):
        # whole tiles of 32 only (the one loop at BLOCK_K 32), one piece
        # transposed (strides (1, rows)) and one a column slice (an offset)
        def fn(x, y, w, b):
            return F.linear(torch.cat([x.t(), y[:, 4:36]], -1), w, b)

        args = [
            torch.randn(96, 256, device="cuda", dtype=torch.bfloat16),
            torch.randn(256, 100, device="cuda", dtype=torch.bfloat16),
            torch.randn(64, 128, device="cuda", dtype=torch.bfloat16),
            torch.randn(64, device="cuda", dtype=torch.bfloat16),
        ]
        with torch.no_grad():
            (code,) = self.common(fn, args, 1, "mm")
        FileCheck().check("def triton_tem_").check("tl.where(in_a1").run(code)

    @requires_cuda_and_triton
    @parametrize("dynamic", ["rows", "all"])
    def test_cat_linear_cuda_strided_pieces_and_epilogue(self, dynamic):
        # Dynamic rows with static piece widths (the common case) are taken;
        # under dynamic=True the widths are symbolic too, and a guard per
        # width would specialize them, so the site is declined and counted.
        def fn(x, y, w, b):
            return torch.sigmoid(
                F.linear(torch.cat([x[:, 8:72], torch.relu(y)], -1), w, b)
            )

        args = [
            torch.randn(300, 80, device="cuda", dtype=torch.bfloat16),
            torch.randn(300, 64, device="cuda", dtype=torch.bfloat16),
            torch.randn(96, 128, device="cuda", dtype=torch.bfloat16),
            torch.randn(96, device="cuda", dtype=torch.bfloat16),
        ]
        if dynamic == "rows":
            torch._dynamo.mark_dynamic(args[0], 0)
            torch._dynamo.mark_dynamic(args[1], 0)
        with torch.no_grad():
            self.common(
                fn, args, int(dynamic == "rows"), "mm", dynamic=dynamic == "all" or None
            )
        if dynamic == "all":
            self.assertGreaterEqual(counters["inductor"]["cat_linear_width"], 1)

    @requires_cuda_and_triton
    @parametrize("prologue_fusion", [True, False])
    def test_cat_linear_cuda_prologues(self, prologue_fusion):
        # Pieces made by a pointwise op or a gather are computed in the
        # template's loads (no kernel writes them first), in its per-piece
        # loops; without prologue fusion they are written by kernels of
        # their own and the template keeps its one loop.
        def fn(a, b, x, idx, w, bias):
            parts = [torch.relu(a), b * 2.0, x[idx]]
            return F.linear(torch.cat(parts, -1), w, bias)

        rows = 256
        args = [
            torch.randn(rows, 64, device="cuda", dtype=torch.bfloat16),
            torch.randn(rows, 64, device="cuda", dtype=torch.bfloat16),
            torch.randn(50, 64, device="cuda", dtype=torch.bfloat16),
            torch.randint(0, 50, (rows,), device="cuda"),
            torch.randn(96, 192, device="cuda", dtype=torch.bfloat16),
            torch.randn(96, device="cuda", dtype=torch.bfloat16),
        ]
        with (
            torch.no_grad(),
            inductor_config.patch(prologue_fusion=prologue_fusion),
        ):
            (code,) = self.common(fn, args, 1, "mm")
        if prologue_fusion:
            FileCheck().check_not("def triton_poi").run(code)
            FileCheck().check("def triton_tem_").check("maximum").check_not(
                "tl.where(in_a1"
            ).run(code)
            # each piece is whole K tiles: no load is masked
            FileCheck().check("def triton_tem_").check_not("a_mask").run(code)
        else:
            FileCheck().check("def triton_poi").check("def triton_tem_").check(
                "tl.where(in_a1"
            ).run(code)

    @requires_cuda_and_triton
    @parametrize("gather", ["columns", "rows_wide_n"])
    def test_cat_linear_cuda_gather_written_first(self, gather):
        # A gather along K, or one read by several column tiles, is written by
        # a kernel of its own and read in place (a plain load of A1, the
        # buffer that kernel writes); the relu'd piece beside it is still
        # computed in the template's loads.
        def fn(a, x, idx, w):
            made = x[:, idx] if gather == "columns" else x[idx]
            return F.linear(torch.cat([torch.relu(a), made], -1), w)

        rows, n = 256, (96 if gather == "columns" else 256)
        bf16 = dict(device="cuda", dtype=torch.bfloat16)
        args = [
            torch.randn(rows, 64, **bf16),
            torch.randn(rows, 64, **bf16),
            torch.randperm(64, device="cuda")
            if gather == "columns"
            else torch.randint(0, rows, (rows,), device="cuda"),
            torch.randn(n, 128, **bf16),
        ]
        with torch.no_grad():
            (code,) = self.common(fn, args, 1, "mm")
        FileCheck().check("def triton_poi").check("def triton_tem_").check(
            "FOLDED : tl.constexpr = 1"
        ).check("maximum").check("a_ptrs = A1 + (").run(code)
        (gather_args,) = re.findall(r"triton_poi_\w*\.run\(([^\n]*)\)", code)
        (template_args,) = re.findall(r"triton_tem_\w*\.run\(([^\n]*)\)", code)
        written = set(re.findall(r"\bbuf\d+\b", gather_args))
        self.assertTrue(written & set(re.findall(r"\bbuf\d+\b", template_args)))

    @requires_cuda_and_triton
    def test_cat_linear_cuda_no_triton_backend(self):
        # With the Triton GEMM backend off the in-place template cannot run:
        # the site is declined before it is taken, never counted as done.
        args = make_inputs((256,), (64, 64), 96, torch.bfloat16, "cuda", grad=False)
        with torch.no_grad(), inductor_config.patch(max_autotune_gemm_backends="ATEN"):
            (code,) = self.common(cat_linear, args, 0, "mm")
        self.assertEqual(counters["inductor"]["cat_linear_no_template"], 1)
        FileCheck().check_not("def triton_tem_").run(code)

    @requires_cuda_and_triton
    @settings(max_examples=12, deadline=None, derandomize=True, database=None)
    @given(
        widths=st.lists(
            st.sampled_from([16, 64, 72, 128, 200]), min_size=2, max_size=4
        ),
        rows=st.sampled_from([2, 37, 256]),  # one row: Inductor decomposes the mm
        n=st.sampled_from([8, 96, 130]),
        dtype=st.sampled_from([torch.bfloat16, torch.float16]),
        strided=st.booleans(),
        op=st.sampled_from(["linear", "addmm", "mm"]),
        dynamic_rows=st.booleans(),
    )
    def test_cat_linear_cuda_generated(
        self, widths, rows, n, dtype, strided, op, dynamic_rows
    ):
        # The in-place template forced on generated sites matches eager.
        args = _generated_site_args(widths, rows, n, dtype, "cuda", strided, op)
        if dynamic_rows:
            for a in args[: len(widths)]:
                torch._dynamo.mark_dynamic(a, 0)
        with torch.no_grad():
            self.common(_generated_site(len(widths), op), args, 1, "mm")

    @requires_cuda_and_triton
    def test_cat_linear_cuda_max_autotune(self):
        args = make_inputs((512,), (128, 128), 128, torch.bfloat16, "cuda", grad=False)
        with torch.no_grad(), inductor_config.patch(max_autotune=True):
            self.common(cat_linear, args, 1, form="mm")

    @requires_cuda_and_triton
    def test_cat_linear_cuda_max_autotune_cpp_wrapper(self):
        # the extern cat + mm choice has no C++ kernel: only the template
        # competes, and the wrapper calls it
        args = make_inputs((512,), (128, 128), 128, torch.bfloat16, "cuda", grad=False)
        patch = inductor_config.patch(max_autotune=True, cpp_wrapper=True)
        with torch.no_grad(), patch:
            (code,) = self.common(cat_linear, args, 1, form="mm")
        FileCheck().check("triton_tem_").check_not("cat_linear_cat").run(code)

    @requires_cuda_and_triton
    def test_cat_linear_cuda_max_autotune_no_choice(self):
        # no config fits and the C++ wrapper takes no extern choice: stock's
        # cat and GEMM, counted as no_choice, never as a site taken
        from torch._inductor.kernel import cat_linear as kernel

        args = make_inputs((512,), (128, 128), 128, torch.bfloat16, "cuda", grad=False)
        patch = inductor_config.patch(max_autotune=True, cpp_wrapper=True)
        none_fit = mock.patch.object(kernel, "_heuristic_configs", return_value=[])
        with torch.no_grad(), patch, none_fit:
            self.common(cat_linear, args, 0, form="mm")
        self.assertEqual(counters["inductor"]["cat_linear_no_choice"], 1)


if __name__ == "__main__":
    if HAS_CPU:
        run_tests()
