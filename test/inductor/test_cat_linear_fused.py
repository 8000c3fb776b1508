# Owner(s): ["module: inductor"]
import contextlib
from unittest import mock

import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config
from torch._inductor.fx_passes import (
    cat_linear_fused,
    cat_linear_fused_cost as cost,
    group_batch_fusion,
)
from torch._inductor.kernel import cat_linear as cat_linear_kernel
from torch._inductor.test_case import run_tests, TestCase
from torch._inductor.utils import run_and_get_code
from torch.testing import FileCheck
from torch.testing._internal.common_utils import (
    instantiate_parametrized_tests,
    parametrize,
)
from torch.testing._internal.inductor_utils import HAS_CPU, HAS_CUDA_AND_TRITON
from torch.testing._internal.triton_utils import requires_cuda_and_triton


TOL = {
    torch.float32: dict(atol=1e-4, rtol=1e-4),
    torch.float16: dict(atol=1e-2, rtol=1e-2),
    torch.bfloat16: dict(atol=5e-2, rtol=5e-2),
}


def cat_linear(a, b, w, bias=None):
    return F.linear(torch.cat([a, b], dim=-1), w, bias)


def relu_cat_linear(a, b, w, bias=None):
    return F.linear(torch.cat([torch.relu(a), b], dim=-1), w, bias)


def produced_cat_linear(a, b, w, bias=None):
    # Both pieces made in the graph: forward+backward, the caller cannot write
    # to what the rewrite saves.
    return F.linear(torch.cat([torch.relu(a), b * 2.0], dim=-1), w, bias)


def make_inputs(
    lead, widths, n, dtype=torch.float32, device="cpu", bias=True, grad=True
):
    parts = [torch.randn(*lead, k, dtype=dtype, device=device) for k in widths]
    w = torch.randn(n, sum(widths), dtype=dtype, device=device) / sum(widths) ** 0.5
    args = [*parts, w] + ([torch.randn(n, dtype=dtype, device=device)] if bias else [])
    return [t.requires_grad_(grad) for t in args]


def fusion(form=None):
    """The ``cat_linear`` fusion on, deciding per site or forced into ``form``."""
    options = {} if form is None else {"form": form}
    return inductor_config.patch(pre_grad_fusion_options={"cat_linear": options})


def cuda_site(widths, n, rows=8192, grad=False, produced=None, dtype=torch.bfloat16):
    return cost.CatLinearSite(
        rows=rows,
        widths=tuple(widths),
        n=n,
        dtype=dtype,
        device=torch.device("cuda", 0),
        needs_grad=grad,
        produced=tuple(produced or [False] * len(widths)),
    )


# An H100 SXM's properties: the ridge point the decision tests run with.
H100 = mock.Mock(
    major=9,
    minor=0,
    multi_processor_count=132,
    clock_rate=1_980_000,
    memory_clock_rate=2_619_000,
    memory_bus_width=5120,
)


@contextlib.contextmanager
def h100_figures():
    cost.ridge_point.cache_clear()
    with (
        mock.patch("torch.cuda.is_available", return_value=True),
        mock.patch("torch.cuda.get_device_properties", return_value=H100),
        mock.patch("torch.version.hip", None),
    ):
        yield
    cost.ridge_point.cache_clear()


@instantiate_parametrized_tests
class CatLinearFusedTest(TestCase):
    def common(self, fn, args, expected, form=None, dynamic=None, backward=True):
        """Compile ``fn`` with the fusion on, check the rewrite counter, compare
        with eager forward (and backward).  Returns the generated code."""
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

    def test_cat_linear_fusion_registered(self):
        # The switch is upstream's: a missing hook must fail here, not skip.
        self.assertIn("cat_linear", group_batch_fusion.PRE_GRAD_FUSIONS)
        rule = group_batch_fusion.PRE_GRAD_FUSIONS["cat_linear"]()
        self.assertIsInstance(rule.rule, cat_linear_fused.CatLinearRule)

    # ---- eager parity, forward and backward ----------------------------------

    @parametrize("form", ["view", "mm"])
    @parametrize("dtype", [torch.float32, torch.bfloat16])
    def test_cat_linear_parity(self, form, dtype):
        for lead, bias in (((6,), False), ((2, 5), True)):
            args = make_inputs(lead, (16, 24), 16, dtype=dtype, bias=bias)
            self.common(produced_cat_linear, args, 1, form=form)

    @parametrize("form", ["view", "mm"])
    def test_cat_linear_parity_dynamic(self, form):
        for lead in ((6,), (2, 5)):
            args = make_inputs(lead, (16, 24), 16)
            for a in args[:2]:
                torch._dynamo.mark_dynamic(a, 0)
            self.common(produced_cat_linear, args, 1, form=form)

    @parametrize(
        "variant",
        ["concat", "concatenate", "positive_dim", "kwargs", "c_nn_linear", "module"],
    )
    def test_cat_linear_spellings(self, variant):
        lin = torch.nn.Linear(64, 8, bias=False).requires_grad_(False)

        def fn(a, b, c, w):
            if variant == "concat":
                x = torch.concat([a, b, c], -1)
            elif variant == "concatenate":
                x = torch.concatenate((a, b, c), axis=2)
            elif variant == "positive_dim":
                x = torch.cat([a, b, c], 2)
            elif variant == "kwargs":
                x = torch.cat(tensors=[a, b, c], dim=-1)
            else:
                x = torch.cat([a, b, c], -1)
            if variant == "c_nn_linear":
                return torch._C._nn.linear(x, w)
            if variant == "kwargs":
                return F.linear(input=x, weight=w)
            if variant == "module":
                return lin(x)
            return F.linear(x, w)

        a, b, c, w = make_inputs((2, 3), (16, 32, 16), 8, bias=False, grad=False)
        self.common(fn, [a, b, c, w], 1, form="view")

    def test_cat_linear_mm_lowers_to_stock_on_cpu(self):
        # Off CUDA the op's lowering is cat + mm: stock's code.
        args = make_inputs((64,), (16, 16), 8, grad=False)
        with torch.no_grad():
            (code,) = self.common(cat_linear, args, 1, form="mm", backward=False)
        FileCheck().check("extern_kernels.").check_not("cat_mm").run(code)

    def test_cat_linear_op_autograd(self):
        # The op's own backward (stock's math), in double precision.
        parts = [
            torch.randn(3, 2, k, dtype=torch.double, requires_grad=True) for k in (2, 3)
        ]
        w = torch.randn(4, 5, dtype=torch.double, requires_grad=True)
        b = torch.randn(4, dtype=torch.double, requires_grad=True)
        op = torch.ops.inductor.cat_linear.default
        torch.autograd.gradcheck(lambda *a: op(list(a[:2]), a[2], a[3]), (*parts, w, b))
        torch.library.opcheck(op, (parts, w, b))

    # ---- off, forced off, and sites that must stay stock --------------------

    def test_cat_linear_off_by_default(self):
        counters.clear()
        args = make_inputs((300,), (64, 64), 16)
        self.assertEqual(torch.compile(relu_cat_linear)(*args), relu_cat_linear(*args))
        self.assertEqual(counters["inductor"]["cat_linear"], 0)

    def test_cat_linear_forced_off(self):
        # The CPU rule would take this site (see test_cat_linear_cpu_rule).
        args = make_inputs((300,), (64, 64), 16)
        self.common(produced_cat_linear, args, 0, form="off")

    def test_cat_linear_bad_form(self):
        with self.assertRaisesRegex(ValueError, "form"):
            cat_linear_fused.CatLinearRule({"form": "gemm"})

    def test_cat_linear_cat_on_other_dim(self):
        def fn(a, b, w):
            return F.linear(torch.cat([a, b], dim=0), w)

        a, b = make_inputs((4,), (16,), 8, bias=False)
        c, w = make_inputs((4,), (16,), 16, bias=False)
        self.common(fn, [a, c, w], 0, form="view")

    def test_cat_linear_mismatched_part_ranks(self):
        # torch.cat accepts legacy empty 1-D parts next to N-D ones
        def fn(a, e, w):
            return F.linear(torch.cat([a, e], dim=-1), w)

        a = torch.randn(4, 8, requires_grad=True)
        w = torch.randn(16, 8, requires_grad=True)
        self.common(fn, [a, torch.empty(0), w], 0, form="view")

    def test_cat_linear_too_many_parts(self):
        def fn(*args):
            return F.linear(torch.cat(args[:-1], dim=-1), args[-1])

        n = cat_linear_fused.MAX_PARTS + 1
        self.common(fn, make_inputs((4,), (16,) * n, 16, bias=False), 0, form="view")

    def test_cat_linear_cat_with_other_users(self):
        def fn(a, b, w):
            x = torch.cat([a, b], dim=-1)
            return F.linear(x, w) + x.sum()

        self.common(fn, make_inputs((4,), (16, 16), 16, bias=False), 0, form="view")

    def test_cat_linear_mixed_dtypes(self):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            args = make_inputs((8,), (16, 16), 16, bias=False)
            self.common(cat_linear, args, 0, form="view", backward=False)

    @parametrize("where", ["between", "between_positional", "after", "after_view"])
    def test_cat_linear_mutation(self, where):
        # Between cat and linear the rewrite would read the new values; after
        # the linear, autograd saves the parts where stock saved the cat.
        def fn(a, b, w):
            a = a * 1.0
            x = torch.cat([a, b], dim=-1)
            if where == "between":
                a.add_(1.0)
            elif where == "between_positional":
                F.relu(a, True)
            y = F.linear(x, w)
            if where == "after":
                a.add_(1.0)
            elif where == "after_view":
                a.view(-1).mul_(2.0)
            return y

        self.common(fn, make_inputs((4,), (16, 16), 16, bias=False), 0, form="view")

    def test_cat_linear_mutation_elsewhere_after_linear(self):
        def fn(a, b, w):
            a, b = a * 1.0, b * 1.0
            y = F.linear(torch.cat([a, b], dim=-1), w)
            return F.relu(y * 1.0, True)

        self.common(fn, make_inputs((4,), (16, 16), 16, bias=False), 1, form="view")

    @parametrize("form", ["view", "mm", None])
    def test_cat_linear_caller_writes_part_before_backward(self, form):
        # The rewrite saves the parts where stock saved a fresh cat: a part the
        # caller can reach (an input, or returned) and write to between
        # forward and backward must stay in the cat.
        def from_input(a, b, w):
            return (relu_cat_linear(a, b, w),)

        def returned(a, b, w):
            p = b * 2.0
            return relu_cat_linear(a, p, w), p

        for fn in (from_input, returned):

            def run(f, args):
                outs = f(*args)
                with torch.no_grad():
                    (outs[-1] if fn is returned else args[1]).add_(1.0)
                outs[0].sum().backward()
                return args[2].grad

            args = make_inputs((300,), (64, 64), 16, bias=False)
            ref_args = [a.detach().clone().requires_grad_() for a in args]
            counters.clear()
            torch._dynamo.reset()
            with fusion(form):
                got = run(torch.compile(fn), args)
            self.assertEqual(counters["inductor"]["cat_linear"], 0)
            self.assertEqual(got, run(fn, ref_args), **TOL[torch.float32])

    @parametrize("form", ["view", "mm"])
    def test_cat_linear_chained_sites(self, form):
        # The inner site's output is a part of the outer one: rewriting it
        # first must leave the outer site reading the new node.
        def fn(a, b, c, w1, w2):
            h = cat_linear(a, b, w1)
            return h + cat_linear(h, c, w2)

        args = [torch.randn(8, 16) for _ in range(3)]
        args += [torch.randn(16, 32), torch.randn(16, 32)]
        self.common(fn, args, 2, form=form)

        # The explicit call matches both sites before it rewrites either.
        gm = torch.fx.symbolic_trace(fn)

        class RecordVals(torch.fx.Interpreter):
            def run_node(self, node):
                node.meta["val"] = super().run_node(node)
                return node.meta["val"]

        RecordVals(gm).run(*args)
        self.assertEqual(cat_linear_fused.fuse_cat_linear_in_graph(gm.graph), 2)
        gm.recompile()
        FileCheck().check_not("torch.cat").run(gm.code)
        self.assertEqual(gm(*args), fn(*args), **TOL[torch.float32])

    def test_cat_linear_graph_index_matches_walk(self):
        # Every query answers as a walk of the graph does, also from a node
        # inserted after the index was built.
        def fn(a, b, w):
            x, y = a * 2.0, b + 1.0
            z = torch.cat([x, y], dim=-1)
            x.add_(1.0)
            out = F.linear(z, w)
            F.relu(y, True)
            x.view(-1).mul_(3.0)
            return out, x.sum(), y.sum()

        graph = self._traced(
            fn, make_inputs((4,), (16, 16), 16, bias=False, grad=False)
        )
        index = cat_linear_fused.GraphIndex(graph)
        first = next(iter(graph.nodes))
        with graph.inserting_after(first):
            graph.call_function(torch.neg, (first,))
        nodes = list(graph.nodes)
        found = set()
        for i, start in enumerate(nodes):
            for end in [*nodes[i + 1 :], None]:
                walk, node = [], start
                while node is not end and node.op != "root":
                    if cat_linear_fused.is_possible_mutation(node):
                        walk.append(node)
                    node = node.next
                self.assertEqual(index.mutations(start, end), walk)
                found.update(walk)
        self.assertEqual(len(found), 3)  # add_, relu(inplace), mul_

    def _traced(self, fn, args):
        graphs = []

        def capture(gm, example_inputs):
            graphs.append(gm)
            return gm

        torch._dynamo.reset()
        torch.compile(fn, backend=capture)(*args)
        return graphs[0].graph

    # ---- the decision ---------------------------------------------------------

    def test_cat_linear_cpu_rule(self):
        # forward+backward, >= 256 rows, a produced share >= 1/3, pieces >= 64,
        # float32
        self.common(produced_cat_linear, make_inputs((300,), (64, 64), 16), 1)
        self.assertEqual(counters["inductor"]["cat_linear_cpu_rule"], 1)
        for args in (
            make_inputs((300,), (64, 64), 16, grad=False),  # forward only
            make_inputs((100,), (64, 64), 16),  # too few rows
            make_inputs((300,), (32, 32), 16),  # narrow pieces
            make_inputs((300,), (64, 64), 16, torch.bfloat16),  # not float32
        ):
            self.common(produced_cat_linear, args, 0)
        self.assertEqual(counters["inductor"]["cat_linear_cpu_rule"], 0)

    def test_cat_linear_cpu_rule_rows_are_hints(self):
        args = make_inputs((2, 150), (64, 64), 16)
        torch._dynamo.mark_dynamic(args[0], 1)
        torch._dynamo.mark_dynamic(args[1], 1)
        self.common(produced_cat_linear, args, 1)

    def test_cat_linear_cpu_rule_dynamic_out_features(self):
        # The decision reads N's hint: no guard, no specialization.
        args = make_inputs((300,), (64, 64), 16)
        torch._dynamo.mark_dynamic(args[2], 0)
        torch._dynamo.mark_dynamic(args[3], 0)
        self.common(produced_cat_linear, args, 1)

    @parametrize(
        "widths,n,rows,produced,grad,form,reason",
        [
            ((64, 64), 256, 8192, None, False, "mm", "best case"),
            ((1024, 1024), 1024, 8192, None, False, "mm", "best case"),
            ((64, 64), 256, 8192, (True, True), False, None, "below"),
            ((64, 64), 256, 8192, None, True, None, "forward+backward"),
            ((2048, 2048), 8192, 512, None, False, None, "below"),
            ((256, 512, 128), 4096, 8192, None, False, None, "only max_autotune"),
            ((96, 160), 1024, 8192, None, False, None, "not whole K tiles"),
            ((128, 128, 128), 1024, 8192, None, False, None, "compute-bound"),
        ],
    )
    def test_cat_linear_cuda_decision(
        self, widths, n, rows, produced, grad, form, reason
    ):
        with h100_figures():
            d = cost.decide(cuda_site(widths, n, rows, grad, produced))
        self.assertEqual(d.form, form, msg=d.reason)
        self.assertIn(reason, d.reason)

    def test_cat_linear_cuda_decision_max_autotune(self):
        site = cuda_site((256, 512, 128), 4096)
        with h100_figures():
            self.assertIsNone(cost.decide(site).form)
            d = cost.decide(cost.dataclasses.replace(site, max_autotune=True))
            self.assertEqual((d.form, d.counter), ("mm", "cat_linear_autotune"))
            screened = cuda_site((64, 64), 256, produced=(True, True))
            screened = cost.dataclasses.replace(screened, max_autotune=True)
            self.assertEqual(cost.decide(screened).counter, "cat_linear_screened")

    def test_cat_linear_cuda_decision_step_share(self):
        site = cuda_site((64, 64), 256)
        with h100_figures():
            ridge = cost.ridge_point(site.device, site.dtype)
            own = site.gemm_cost(ridge) + site.saved_bytes()
            self.assertEqual(cost.decide(site, own).form, "mm")
            d = cost.decide(site, 100 * own)
            self.assertEqual((d.form, d.counter), (None, "cat_linear_small_share"))

    def test_cat_linear_ridge_point(self):
        with h100_figures():
            ridge = cost.ridge_point(torch.device("cuda", 0), torch.bfloat16)
            self.assertIsNone(cost.ridge_point(torch.device("cuda", 0), torch.float32))
        peak = 132 * 1.98e9 * 4096 / (2.619e9 * 2 * 640)
        self.assertAlmostEqual(
            ridge, peak * cost.GEMM_EFFICIENCY / cost.COPY_EFFICIENCY
        )
        self.assertIsNone(cost.ridge_point(torch.device("cpu"), torch.bfloat16))
        cost.ridge_point.cache_clear()
        h100_no_clock = mock.Mock(**{**H100.__dict__, "clock_rate": 0})
        with (
            mock.patch("torch.cuda.is_available", return_value=True),
            mock.patch("torch.cuda.get_device_properties", return_value=h100_no_clock),
        ):
            self.assertIsNone(cost.ridge_point(torch.device("cuda", 0), torch.float16))
        cost.ridge_point.cache_clear()

    def test_cat_linear_step_cost(self):
        # The graph's GEMMs and cats, three GEMMs and two cat passes with grad.
        for grad in (False, True):
            args = make_inputs((32,), (16, 16), 16, bias=False, grad=grad)
            graph = self._traced(lambda a, b, w: cat_linear(a, b, w) @ w, args)
            got = cat_linear_fused.GraphIndex(graph).step_cost(100.0)
            want = cost.cat_step_cost(32 * 32, 4, grad)  # cat: 32 x (16+16)
            want += cost.gemm_step_cost(32, 32, 16, 4, grad, 100.0)  # linear
            want += cost.gemm_step_cost(32, 16, 32, 4, grad, 100.0)  # @ w
            self.assertAlmostEqual(got, want)

    def test_cat_linear_skip_is_logged(self):
        with self.assertLogs(cat_linear_fused.log, level="DEBUG") as logs:
            self.common(cat_linear, make_inputs((8,), (16, 16), 16, grad=False), 0)
        self.assertTrue(
            any("skipping cat_linear: forward only" in m for m in logs.output)
        )

    # ---- the module's entry points and gates ---------------------------------

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
        self.assertEqual(counters["inductor"]["cat_linear"], 1)
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
        self.assertEqual(counters["inductor"]["cat_linear"], 1)

    # ---- CUDA: the in-place GEMM template ------------------------------------

    @requires_cuda_and_triton
    def test_cat_linear_cuda_default_takes_template(self):
        # A memory-bound forward site the roofline takes without a benchmark:
        # one template kernel reads both pieces, no cat kernel.
        args = make_inputs((8192,), (64, 64), 256, torch.bfloat16, "cuda", grad=False)
        with torch.no_grad():
            (code,) = self.common(cat_linear, args, 1, backward=False)
        self.assertEqual(counters["inductor"]["cat_linear_roofline"], 1)
        FileCheck().check("def triton_tem_").check_not("triton_poi_fused_cat").run(code)

    @requires_cuda_and_triton
    @parametrize("dtype", [torch.bfloat16, torch.float16])
    @parametrize(
        "lead,widths,n",
        [
            ((256,), (64, 64), 96),  # one loop
            ((2, 100), (64, 128, 64), 130),  # one loop, 3-D, odd M and N
            ((256,), (320, 384), 256),  # per piece
            ((256,), (40, 24, 16, 72), 64),  # masked K tails, four pieces
        ],
    )
    def test_cat_linear_cuda_template_parity(self, dtype, lead, widths, n):
        args = make_inputs(lead, widths, n, dtype, "cuda", grad=False)

        def fn(*a):
            return F.linear(torch.cat(a[: len(widths)], -1), *a[len(widths) :])

        with torch.no_grad():
            (code,) = self.common(fn, args, 1, form="mm", backward=False)
        FileCheck().check("def triton_tem_").run(code)

    @requires_cuda_and_triton
    def test_cat_linear_cuda_template_views_and_dynamic(self):
        # Pieces that are strided views of larger tensors, a dynamic M, a relu
        # producer, and a consumer that fuses as the epilogue.
        def fn(x, y, w, b):
            return torch.sigmoid(
                F.linear(torch.cat([x[:, 8:72], torch.relu(y)], -1), w, b)
            )

        x = torch.randn(300, 80, device="cuda", dtype=torch.bfloat16)
        y = torch.randn(300, 64, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(128, 128, device="cuda", dtype=torch.bfloat16) / 12
        b = torch.randn(128, device="cuda", dtype=torch.bfloat16)
        torch._dynamo.mark_dynamic(x, 0)
        torch._dynamo.mark_dynamic(y, 0)
        with torch.no_grad():
            self.common(fn, [x, y, w, b], 1, form="mm", backward=False)
            x2, y2 = x[:200].clone(), y[:200].clone()
            self.assertEqual(
                torch.compile(fn)(x2, y2, w, b), fn(x2, y2, w, b), **TOL[torch.bfloat16]
            )

    @requires_cuda_and_triton
    def test_cat_linear_cuda_backward(self):
        args = make_inputs((512,), (64, 64), 128, torch.bfloat16, "cuda")
        self.common(relu_cat_linear, args, 1, form="mm")

    @requires_cuda_and_triton
    @inductor_config.patch(max_autotune=True, max_autotune_gemm_backends="TRITON,ATEN")
    def test_cat_linear_cuda_max_autotune(self):
        args = make_inputs(
            (4096,), (256, 512, 128), 1024, torch.bfloat16, "cuda", grad=False
        )

        def fn(a, b, c, w, bias):
            return F.linear(torch.cat([a, b, c], -1), w, bias)

        with torch.no_grad():
            self.common(fn, args, 1, backward=False)
        self.assertEqual(counters["inductor"]["cat_linear_autotune"], 1)

    @requires_cuda_and_triton
    def test_cat_linear_cuda_fp32_stays_stock(self):
        args = make_inputs((8192,), (64, 64), 256, torch.float32, "cuda", grad=False)
        with torch.no_grad():
            self.common(cat_linear, args, 0, backward=False)

    def test_cat_linear_template_source(self):
        # The template's jinja source for every part count and layout renders
        # the kernel's def, loads every piece and stores once.
        for n in range(2, cat_linear_kernel.MAX_PARTS + 1):
            src = cat_linear_kernel._per_piece_source(n)
            self.assertEqual(src.count("load_input("), n)
            self.assertIn(
                f'def_kernel({", ".join(f"{chr(34)}A{i}{chr(34)}" for i in range(n))}, "B")',
                src,
            )
            src = cat_linear_kernel._one_loop_source(n)
            self.assertEqual(src.count("tl.where(in"), 2 * (n - 1))
            self.assertEqual(src.count("store_output("), 1)


if __name__ == "__main__":
    if HAS_CPU or HAS_CUDA_AND_TRITON:
        run_tests()
