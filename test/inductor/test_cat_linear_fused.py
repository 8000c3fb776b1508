# Owner(s): ["module: inductor"]
import contextlib
from unittest import mock

from hypothesis import given, settings, strategies as st

import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config
from torch._inductor.fx_passes import (
    cat_linear_fused,
    cat_linear_fused_cost as cost,
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


def fusion(form=None):
    """``cat_linear`` on, deciding per site or forced into ``form``."""
    options = {} if form is None else {"form": form}
    return inductor_config.patch(pre_grad_fusion_options={"cat_linear": options})


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
    """An H100 SXM's datasheet peaks (dense bf16 compute, DRAM bandwidth)
    where the decision asks Inductor for the device's figures."""
    cost.ridge_point.cache_clear()
    with (
        mock.patch("torch.cuda.is_available", return_value=True),
        mock.patch("torch.cuda.device", return_value=contextlib.nullcontext()),
        mock.patch("torch.version.hip", None),
        mock.patch("torch._inductor.utils.get_device_tflops", return_value=989.0),
        mock.patch("torch._inductor.utils.get_gpu_dram_gbps", return_value=3350),
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
        gemms = "extern_kernels.addmm" if bias else "extern_kernels.mm"
        FileCheck().check(gemms).check("extern_kernels.addmm").run(code)
        FileCheck().check_not("aten.cat").run(code)

    def test_cat_linear_off_by_default(self):
        self.common(cat_linear, make_inputs((8,), (16, 16), 8, grad=False), 0, "off")
        counters.clear()
        torch._dynamo.reset()
        args = make_inputs((8,), (16, 16), 8, grad=False)
        torch.compile(cat_linear)(*args)
        self.assertEqual(counters["inductor"]["cat_linear"], 0)
        self.assertEqual(counters["inductor"]["cat_linear_off"], 0)

    def test_cat_linear_forced_off(self):
        self.common(cat_linear, make_inputs((8,), (16, 16), 8, grad=False), 0, "off")
        self.assertEqual(counters["inductor"]["cat_linear_off"], 1)

    def test_cat_linear_bad_form(self):
        args = make_inputs((8,), (16, 16), 8, grad=False)
        with self.assertRaisesRegex(Exception, "must be one of"):
            self.common(cat_linear, args, 0, "bogus")

    def test_cat_linear_training_keeps_the_saved_cat(self):
        # In training the partitioner saves the cat for the weight gradient:
        # the forward's cat has a second user and stays; gradients match eager.
        self.common(produced_cat_linear, make_inputs((8,), (16, 16), 8), 0, "view")

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
            n = cost.MAX_PARTS + 1
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

    def test_cat_linear_skip_is_logged(self):
        with self.assertLogs(cat_linear_lowering.log, level="DEBUG") as logs:
            self.common(cat_linear, make_inputs((8,), (16, 16), 8, grad=False), 0)
        self.assertTrue(
            any(
                "skipping cat_linear: no in-place GEMM on cpu" in m for m in logs.output
            )
        )

    def test_cat_linear_switch_is_not_a_pre_grad_pass(self):
        # pre_grad.py must skip the key (it names no pre-grad pattern pass): a
        # missing hook fails here with a KeyError, it never skips
        with fusion():
            torch._dynamo.reset()
            torch.compile(cat_linear)(*make_inputs((8,), (16, 16), 8, grad=False))

    def _traced(self, fn, args):
        graphs = []

        def capture(gm, example_inputs):
            graphs.append(gm)
            return gm

        torch._dynamo.reset()
        torch.compile(fn, backend=capture)(*args)
        return graphs[0].graph

    # ---- the decision ---------------------------------------------------------

    def test_cat_linear_cpu_declines(self):
        site = cost.CatLinearSite(
            4096, (64, 64), 64, torch.float32, torch.device("cpu"), (False, False)
        )
        self.assertEqual(cost.decide(site).counter, "device")

    def test_cat_linear_cuda_decision(self):
        with h100_figures():
            # a memory-bound forward site of whole K tiles: taken
            self.assertEqual(cost.decide(cuda_site((256, 256), 160)).form, "mm")
            # compute-bound: screened
            big = cost.decide(cuda_site((4096, 4096), 8192))
            self.assertEqual((big.form, big.counter), (None, "screened"))
            # a masked K tail: only max_autotune can tell
            tail = cost.decide(cuda_site((128, 351), 256))
            self.assertEqual((tail.form, tail.counter), (None, "k_tail"))
            # a piece made by a pointwise op: stock (its cat write is fused)
            made = cost.decide(cuda_site((256, 256), 160, produced=[True, False]))
            self.assertEqual((made.form, made.counter), (None, "produced"))
            # under max_autotune: handed to autotuning
            tuned = cost.decide(cuda_site((128, 351), 256, max_autotune=True))
            self.assertEqual((tuned.form, tuned.counter), ("mm", "autotune"))
            # a small share of its graph's step
            small = cost.decide(cuda_site((256, 256), 160), step_cost=1e12)
            self.assertEqual((small.form, small.counter), (None, "small_share"))

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

    # ---- the explicit entry points (above autograd, the "view" rewrite) ------

    def test_cat_linear_seed_gates_exist(self):
        self.assertGreaterEqual(cat_linear_fused.MAX_PARTS, 2)
        self.assertLessEqual(cat_linear_fused.MIN_PIECE_WIDTH, 16)
        self.assertGreater(cat_linear_fused.MAX_TOTAL_CAT_WIDTH, 32)

    def test_fuse_cat_linear_in_graph_plain_graph(self):
        # A plain fx.Graph whose meta["val"] are real tensors: 4 x (16+16) -> 8.
        graph = torch.fx.Graph()
        a, b, w = (graph.placeholder(n) for n in "abw")
        x = graph.call_function(torch.cat, ([a, b], -1))
        graph.output(graph.call_function(F.linear, (x, w)))
        vals = {
            "a": torch.randn(4, 16),
            "b": torch.randn(4, 16),
            "w": torch.randn(8, 32),
        }
        for node in graph.nodes:
            if node.op == "placeholder":
                node.meta["val"] = vals[node.name]
        x.meta["val"] = torch.cat([vals["a"], vals["b"]], -1)
        x.next.meta["val"] = F.linear(x.meta["val"], vals["w"])
        self.assertEqual(cat_linear_fused.fuse_cat_linear_in_graph(graph), 1)
        self.assertEqual(cat_linear_fused.fuse_cat_linear_in_graph(graph), 0)
        gm = torch.fx.GraphModule(torch.nn.Module(), graph)
        FileCheck().check_not("torch.cat").run(gm.code)
        self.assertEqual(
            gm(**vals), F.linear(torch.cat([vals["a"], vals["b"]], -1), vals["w"])
        )

    def test_fuse_cat_linear_in_graph_gates(self):
        def fn(a, b, c, d, e, w1, w2, w3):
            return (
                cat_linear(a, b, w1),
                cat_linear(c, d, w2),
                F.linear(torch.cat([a, b, c, d, e], -1), w3),
            )

        args = [torch.randn(4, 16) for _ in range(3)] + [
            torch.randn(4, 8),
            torch.randn(4, 16),
        ]
        args += [torch.randn(8, 32), torch.randn(8, 24), torch.randn(8, 72)]
        graph = self._traced(fn, args)
        # (16+8) has a piece under MIN_PIECE_WIDTH, the 5-part cat is over MAX_PARTS
        self.assertEqual(cat_linear_fused.fuse_cat_linear_in_graph(graph), 1)

    def test_cat_linear_fused_pre_grad_pass_assigned(self):
        # 8 rows, two relu'd 64-wide projections into 32, on CPU: the explicit
        # pass fires where the fusion's decision would not, and matches eager.
        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.p, self.q = torch.nn.Linear(32, 64), torch.nn.Linear(32, 64)
                self.out = torch.nn.Linear(128, 32)

            def forward(self, x):
                return self.out(torch.cat([self.p(x).relu(), self.q(x).relu()], -1))

        m, x = M(), torch.randn(8, 32)
        counters.clear()
        torch._dynamo.reset()
        p = cat_linear_fused.cat_linear_fused_pre_grad_pass
        with inductor_config.patch(pre_grad_custom_pass=p):
            out = torch.compile(m)(x)
        self.assertEqual(counters["inductor"]["cat_linear_fused"], 1)
        self.assertEqual(out, m(x), **TOL[torch.float32])
        self.assertTrue(p.uuid())

    def test_cat_linear_fused_pre_grad_pass_registered(self):
        from torch._inductor.custom_pass_registry import register_custom_pass

        counters.clear()
        torch._dynamo.reset()
        p = cat_linear_fused.cat_linear_fused_pre_grad_pass
        with register_custom_pass("pre_grad_custom_pass", p, name="seed.cat_linear"):
            args = make_inputs((8,), (16, 16), 8, grad=False)
            self.assertEqual(
                torch.compile(cat_linear)(*args),
                cat_linear(*args),
                **TOL[torch.float32],
            )
        self.assertEqual(counters["inductor"]["cat_linear_fused"], 1)

    # ---- generated programs through the whole compile -------------------------

    @settings(max_examples=10, deadline=None, derandomize=True)
    @given(
        widths=st.lists(st.sampled_from([8, 16, 24]), min_size=2, max_size=4),
        lead=st.sampled_from([(5,), (2, 3)]),
        producer=st.sampled_from(["input", "relu", "dropout0", "no_grad"]),
        grads=st.sampled_from(["none", "all", "frozen_weight", "frozen_parts"]),
        bias=st.booleans(),
        write_after=st.booleans(),
    )
    def test_cat_linear_generated_programs(
        self, widths, lead, producer, grads, bias, write_after
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
        ],
    )
    def test_cat_linear_cuda_template_parity(self, dtype, lead, widths, n, bias):
        args = make_inputs(lead, widths, n, dtype, "cuda", bias=bias, grad=False)

        def fn(*a):
            return F.linear(torch.cat(a[: len(widths)], -1), *a[len(widths) :])

        with torch.no_grad():
            (code,) = self.common(fn, args, 1, form="mm")
        FileCheck().check("def triton_tem_").check_not("triton_poi_fused_cat").run(code)

    @requires_cuda_and_triton
    def test_cat_linear_cuda_strided_pieces_and_epilogue(self):
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
        with torch.no_grad():
            self.common(fn, args, 1, form="mm", dynamic=True)

    @requires_cuda_and_triton
    def test_cat_linear_cuda_max_autotune(self):
        args = make_inputs((512,), (128, 128), 128, torch.bfloat16, "cuda", grad=False)
        with torch.no_grad(), inductor_config.patch(max_autotune=True):
            self.common(cat_linear, args, 1, form="mm")


if __name__ == "__main__":
    if HAS_CPU:
        run_tests()
