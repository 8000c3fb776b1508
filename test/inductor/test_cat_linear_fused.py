# Owner(s): ["module: inductor"]
import contextlib
import itertools
import logging
import unittest
from unittest import mock

import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config
from torch._inductor.test_case import run_tests, TestCase
from torch._inductor.utils import run_and_get_code
from torch.testing import FileCheck
from torch.testing._internal.common_utils import (
    instantiate_parametrized_tests,
    parametrize,
)
from torch.testing._internal.inductor_utils import HAS_CPU, HAS_CUDA_AND_TRITON


HAS_PASS = hasattr(inductor_config, "cat_linear_fused")
try:
    import torch._inductor.custom_pass_registry  # noqa: F401

    HAS_REGISTRY = True
except ImportError:
    HAS_REGISTRY = False
if HAS_PASS:
    from torch._inductor.fx_passes import (
        cat_linear_fused,
        cat_linear_fused_bench,
        cat_linear_fused_cost,
        cat_linear_fused_gemm,
    )

TOL = {
    torch.float32: dict(atol=1e-4, rtol=1e-4),
    torch.float16: dict(atol=1e-2, rtol=1e-2),
    torch.bfloat16: dict(atol=5e-2, rtol=5e-2),
}


def cat_linear(a, b, w, bias=None):
    return F.linear(torch.cat([a, b], dim=-1), w, bias)


def relu_cat_linear(a, b, w, bias=None):
    return F.linear(torch.cat([torch.relu(a), b], dim=-1), w, bias)


def make_inputs(lead, widths, n, dtype=torch.float32, device="cpu", bias=True, grad=True):
    parts = [torch.randn(*lead, k, dtype=dtype, device=device) for k in widths]
    w = torch.randn(n, sum(widths), dtype=dtype, device=device) / sum(widths) ** 0.5
    args = [*parts, w] + ([torch.randn(n, dtype=dtype, device=device)] if bias else [])
    return [t.requires_grad_(grad) for t in args]


@unittest.skipUnless(HAS_PASS, "needs the inductor-cat-linear-fused patch")
@instantiate_parametrized_tests
class CatLinearFusedTest(TestCase):
    def common(self, fn, args, expected, force=None, dynamic=None, backward=True, check=None):
        """Compile fn with the pass on, compare with eager forward (and backward),
        and check the rewrite counter.  Returns the generated code."""
        dtype = args[0].dtype
        counters.clear()
        torch._dynamo.reset()
        ref_args = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
        with inductor_config.patch(cat_linear_fused=True, cat_linear_fused_force=force):
            compiled = torch.compile(fn, dynamic=dynamic)
            out, code = run_and_get_code(compiled, *args)
        ref = fn(*ref_args)
        self.assertEqual(out, ref, **TOL[dtype])
        if expected is not None:
            self.assertEqual(counters["inductor"]["cat_linear_fused"], expected)
        if backward and ref.requires_grad:
            g = torch.randn_like(ref)
            out.backward(g)
            ref.backward(g)
            for a, r in zip(args, ref_args):
                self.assertEqual(a.grad, r.grad, **TOL[dtype])
        return code

    # ---- eager parity, forward and backward ----------------------------------

    @parametrize("form", ["view", "addmm"])
    @parametrize("dtype", [torch.float32, torch.bfloat16])
    def test_cat_linear_fused_parity(self, form, dtype):
        for lead, bias in (((6,), False), ((2, 5), True)):
            args = make_inputs(lead, (8, 12), 16, dtype=dtype, bias=bias)
            self.common(relu_cat_linear, args, 1, force=form)

    @parametrize("form", ["view", "addmm"])
    def test_cat_linear_fused_parity_dynamic(self, form):
        for lead in ((6,), (2, 5)):
            args = make_inputs(lead, (8, 12), 16)
            for a in args[:2]:
                torch._dynamo.mark_dynamic(a, 0)
            self.common(relu_cat_linear, args, 1, force=form)

    @parametrize(
        "variant",
        ["concat", "concatenate", "positive_dim", "kwargs", "c_nn_linear", "three_parts"],
    )
    def test_cat_linear_fused_spellings(self, variant):
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
            return F.linear(x, w)

        a, b, c, w = make_inputs((2, 3), (4, 8, 4), 8, bias=False)
        self.common(fn, [a, b, c, w], 1, force="view")

    def test_cat_linear_fused_inference_no_grad(self):
        args = make_inputs((16,), (8, 8), 16, grad=False)
        with torch.no_grad():
            self.common(relu_cat_linear, args, 1, force="addmm", backward=False)

    # ---- negative gates ------------------------------------------------------

    def test_cat_linear_fused_off_by_default(self):
        counters.clear()
        args = make_inputs((4,), (8, 8), 16)
        with inductor_config.patch(cat_linear_fused_force="view"):
            self.assertEqual(torch.compile(cat_linear)(*args), cat_linear(*args))
        self.assertEqual(counters["inductor"]["cat_linear_fused"], 0)

    def test_cat_linear_fused_cat_on_other_dim(self):
        def fn(a, b, w):
            return F.linear(torch.cat([a, b], dim=0), w)

        a, b, w = make_inputs((4,), (8, 8), 16, bias=False)
        b = torch.randn(4, 16, requires_grad=True)
        a = torch.randn(4, 16, requires_grad=True)
        self.common(fn, [a, b, w], 0, force="view")

    def test_cat_linear_fused_mismatched_part_ranks(self):
        # torch.cat accepts legacy empty 1-D parts next to N-D ones
        def fn(a, e, w):
            return F.linear(torch.cat([a, e], dim=-1), w)

        a = torch.randn(4, 8, requires_grad=True)
        e = torch.empty(0)
        w = torch.randn(16, 8, requires_grad=True)
        self.common(fn, [a, e, w], 0, force="view")

    def test_cat_linear_fused_weight_not_2d(self):
        a, b = torch.randn(4, 8), torch.randn(4, 8)
        w = torch.randn(16, requires_grad=True)
        self.common(cat_linear, [a, b, w], 0, force="view")

    def test_cat_linear_fused_cat_with_other_users(self):
        def fn(a, b, w):
            x = torch.cat([a, b], dim=-1)
            return F.linear(x, w) + x.sum()

        self.common(fn, make_inputs((4,), (8, 8), 16, bias=False), 0, force="view")

    def test_cat_linear_fused_mutation_between(self):
        def fn(a, b, w):
            a = a * 1.0
            x = torch.cat([a, b], dim=-1)
            a.add_(1.0)  # must not leak into the linear
            return F.linear(x, w)

        self.common(fn, make_inputs((4,), (8, 8), 16, bias=False), 0, force="view")

    def test_cat_linear_fused_graph_index_matches_walk(self):
        # The pass asks a GraphIndex built once per graph instead of walking the
        # graph per site: every query must answer as the walk does, also for a
        # node inserted after the index was built (it falls back to the walk).
        def fn(a, b, w):
            x, y = a * 2.0, b + 1.0
            z = torch.cat([x, y], dim=-1)
            x.add_(1.0)
            out = F.linear(z, w)
            F.relu(y, True)
            v = x.view(-1)
            v.mul_(3.0)
            return out, x.sum(), y.sum()

        graph = self._traced(fn, make_inputs((4,), (8, 8), 16, bias=False, grad=False))
        index = cat_linear_fused.GraphIndex(graph)
        with graph.inserting_after(next(iter(graph.nodes))):
            graph.call_function(torch.neg, (next(iter(graph.nodes)),))
        nodes = list(graph.nodes)
        first = cat_linear_fused._first_possible_mutation
        first_of = cat_linear_fused._first_possible_mutation_of
        found = set()
        for i, start in enumerate(nodes):
            for end in nodes[i:]:
                got = first(start, end, index)
                self.assertIs(got, first(start, end))
                found.add(got)
            for part in nodes:
                if cat_linear_fused._val(part) is not None:
                    self.assertIs(first_of([part], start, index), first_of([part], start))
        self.assertGreaterEqual(len(found - {None}), 3)  # add_, relu(inplace), mul_

    def test_cat_linear_fused_positional_inplace_between(self):
        def fn(a, b, w):
            a = a * 1.0
            x = torch.cat([a, b], dim=-1)
            F.relu(a, True)  # inplace passed positionally
            return F.linear(x, w)

        self.common(fn, make_inputs((4,), (8, 8), 16, bias=False), 0, force="view")

    def test_cat_linear_fused_inplace_on_part_after_linear(self):
        # The per-piece GEMMs save the parts for backward where stock saved
        # the cat: a later in-place write to a part (directly, through a view,
        # or reordered after the linear by dynamo, as 2.15's
        # canonicalize_output_graph_node_order does) must block the rewrite.
        def direct(a, b, w):
            a = a * 1.0
            y = F.linear(torch.cat([a, b], dim=-1), w)
            F.relu(a, True)
            return y

        def method(a, b, w):
            a = a * 1.0
            y = F.linear(torch.cat([a, b], dim=-1), w)
            a.add_(1.0)
            return y

        def through_view(a, b, w):
            a = a * 1.0
            y = F.linear(torch.cat([a, b], dim=-1), w)
            a.view(-1).mul_(2.0)
            return y

        for fn in (direct, method, through_view):
            with self.subTest(fn.__name__):
                args = make_inputs((4,), (8, 8), 16, bias=False)
                self.common(fn, args, 0, force="view")

    def test_cat_linear_fused_inplace_elsewhere_after_linear(self):
        # An in-place op after the linear that cannot touch a part does not
        # block the rewrite.
        def fn(a, b, w):
            a = a * 1.0
            y = F.linear(torch.cat([a, b], dim=-1), w)
            return F.relu(y * 1.0, True)

        self.common(fn, make_inputs((4,), (8, 8), 16, bias=False), 1, force="view")

    @unittest.skipIf(
        not hasattr(torch._dynamo.config, "canonicalize_output_graph_node_order"),
        "needs torch >= 2.15 (dynamo's canonicalize_output_graph_node_order)",
    )
    def test_cat_linear_fused_inplace_reordered_after_linear(self):
        # 2.15's canonical node order moves a user-less in-place relu after the
        # linear: the check must not depend on where the graph puts it.
        def fn(a, b, w):
            a = a * 1.0
            x = torch.cat([a, b], dim=-1)
            F.relu(a, True)
            return F.linear(x, w)

        with torch._dynamo.config.patch(canonicalize_output_graph_node_order=True):
            self.common(fn, make_inputs((4,), (8, 8), 16, bias=False), 0, force="view")

    # ---- the seed PR's entry points (ROCm/pytorch#3233) ----------------------

    def test_fuse_cat_linear_in_graph_returns_count(self):
        graphs = []

        def capture(gm, example_inputs):
            graphs.append((gm, example_inputs))
            return gm

        def fn(a, b, c, w1, w2):
            return cat_linear(a, b, w1) + cat_linear(b, c, w2)

        args = [torch.randn(4, 8) for _ in range(3)] + [torch.randn(16, 16) for _ in range(2)]
        torch._dynamo.reset()
        torch.compile(fn, backend=capture)(*args)
        ((gm, gm_args),) = graphs
        with inductor_config.patch(cat_linear_fused_force="view"):
            self.assertEqual(cat_linear_fused.fuse_cat_linear_in_graph(gm.graph), 2)
            # Nothing left to rewrite.
            self.assertEqual(cat_linear_fused.fuse_cat_linear_in_graph(gm.graph), 0)
        gm.recompile()
        FileCheck().check_not("torch.cat").run(gm.code)
        (out,) = gm(*gm_args)
        self.assertEqual(out, fn(*args), **TOL[torch.float32])

    def test_cat_linear_fused_pre_grad_pass_assigned(self):
        p = cat_linear_fused.cat_linear_fused_pre_grad_pass
        args = make_inputs((4,), (8, 8), 16)
        ref_args = [a.detach().clone().requires_grad_() for a in args]
        counters.clear()
        torch._dynamo.reset()
        # Assigning the pass is the opt-in: config.cat_linear_fused stays off.
        with inductor_config.patch(
            pre_grad_custom_pass=p, cat_linear_fused_force="view"
        ):
            out = torch.compile(cat_linear)(*args)
        self.assertEqual(counters["inductor"]["cat_linear_fused"], 1)
        ref = cat_linear(*ref_args)
        self.assertEqual(out, ref, **TOL[torch.float32])
        out.sum().backward()
        ref.sum().backward()
        for a, r in zip(args, ref_args):
            self.assertEqual(a.grad, r.grad, **TOL[torch.float32])

    def test_cat_linear_fused_pre_grad_pass_uuid(self):
        p = cat_linear_fused.cat_linear_fused_pre_grad_pass
        self.assertEqual(p.uuid(), p.uuid())
        with inductor_config.patch(cat_linear_fused_force="view"):
            forced = p.uuid()
        self.assertNotEqual(forced, p.uuid())

    @unittest.skipUnless(HAS_REGISTRY, "needs the inductor-custom-pass-registry patch")
    def test_cat_linear_fused_pre_grad_pass_registered(self):
        from torch._inductor.custom_pass_registry import register_custom_pass

        counters.clear()
        torch._dynamo.reset()
        args = make_inputs((4,), (8, 8), 16, grad=False)
        with register_custom_pass(
            "pre_grad_custom_pass",
            cat_linear_fused.cat_linear_fused_pre_grad_pass,
            name="test.cat_linear_fused",
        ), inductor_config.patch(cat_linear_fused_force="view"):
            out = torch.compile(cat_linear)(*args)
        self.assertEqual(counters["inductor"]["cat_linear_fused"], 1)
        self.assertEqual(out, cat_linear(*args), **TOL[torch.float32])

    def test_cat_linear_fused_autocast_mixed_dtype(self):
        args = make_inputs((4,), (8, 8), 16, grad=False)
        counters.clear()
        with torch.autocast("cpu", dtype=torch.bfloat16), inductor_config.patch(
            cat_linear_fused=True, cat_linear_fused_force="view"
        ):
            out = torch.compile(cat_linear)(*args)
            ref = cat_linear(*args)
        self.assertEqual(out, ref, **TOL[torch.bfloat16])
        self.assertEqual(counters["inductor"]["cat_linear_fused"], 0)

    def test_cat_linear_fused_gemm_form_needs_cuda(self):
        # The Triton GEMM form exists only on CUDA with fp16/bf16: forcing it
        # elsewhere is a logged no-op, never an error or a wrong rewrite.
        args = make_inputs((4,), (8, 8), 16)
        with self.assertLogs(cat_linear_fused.log, level=logging.DEBUG) as cm:
            self.common(cat_linear, args, 0, force="gemm")
        self.assertIn("forced form gemm is not available", "\n".join(cm.output))

    def test_cat_linear_fused_forced_off(self):
        self.common(cat_linear, make_inputs((4,), (8, 8), 16), 0, force="off")

    def test_cat_linear_fused_cpu_rule(self):
        # The measured CPU rule (benchmarks/README.md), no benchmark either way:
        rows = cat_linear_fused.CPU_MIN_ROWS
        # forward only keeps stock ...
        with torch.no_grad():
            args = make_inputs((rows,), (64, 64), 64, grad=False)
            self.common(relu_cat_linear, args, 0, backward=False)
        # ... forward+backward with an in-graph pointwise producer rewrites,
        # rows counted over all leading dims ...
        self.common(relu_cat_linear, make_inputs((rows,), (64, 64), 64), 1)
        self.common(relu_cat_linear, make_inputs((2, rows // 2), (64, 64), 64), 1)
        # ... but not with pieces narrower than measured ...
        self.common(relu_cat_linear, make_inputs((rows,), (32, 96), 64), 0)
        # ... nor when every part is a graph input, however wide ...
        self.common(cat_linear, make_inputs((rows,), (256, 256), 64), 0)
        # ... nor when the produced parts are less than a third of K.
        self.common(relu_cat_linear, make_inputs((rows,), (96, 192), 64), 1)
        with self.assertLogs(cat_linear_fused.log, level=logging.DEBUG) as cm:
            self.common(relu_cat_linear, make_inputs((rows,), (64, 192), 64), 0)
        self.assertIn("in-graph producers make 64 of 256 columns", "\n".join(cm.output))
        self.assertEqual(counters["inductor"]["cat_linear_fused_bench"], 0)

    def test_cat_linear_fused_cpu_rule_rows(self):
        # Below CPU_MIN_ROWS rows the CPU rule keeps stock, and says why.
        rows = cat_linear_fused.CPU_MIN_ROWS
        with self.assertLogs(cat_linear_fused.log, level=logging.DEBUG) as cm:
            self.common(relu_cat_linear, make_inputs((rows - 1,), (64, 64), 64), 0)
            self.common(relu_cat_linear, make_inputs((2, rows // 4), (256, 256), 64), 0)
        self.assertEqual(
            "\n".join(cm.output).count(f"fewer than {rows} rows"), 2, cm.output
        )
        self.common(relu_cat_linear, make_inputs((rows + 1,), (64, 64), 64), 1)
        # Rows not known at compile time count as too few (no guard added).
        args = make_inputs((2 * rows,), (64, 64), 64)
        for a in args[:2]:
            torch._dynamo.mark_dynamic(a, 0)
        with self.assertLogs(cat_linear_fused.log, level=logging.DEBUG) as cm:
            self.common(relu_cat_linear, args, 0)
        self.assertIn(f"fewer than {rows} rows", "\n".join(cm.output))
        self.assertEqual(counters["inductor"]["cat_linear_fused_bench"], 0)

    def test_cat_linear_fused_non_tensor_part(self):
        # The finder on a hand-built graph: a cat part that is not a node.
        from torch._subclasses.fake_tensor import FakeTensorMode

        graph = torch.fx.Graph()
        with FakeTensorMode():
            a, w = torch.empty(4, 8), torch.empty(16, 16)
            nodes = {}
            for name, val in (("a", a), ("w", w)):
                nodes[name] = graph.placeholder(name)
                nodes[name].meta["example_value"] = val
            cat = graph.call_function(torch.cat, ([nodes["a"], 3.0], -1))
            cat.meta["example_value"] = torch.empty(4, 16)
            lin = graph.call_function(F.linear, (cat, nodes["w"]))
            lin.meta["example_value"] = torch.empty(4, 16)
            graph.output(lin)
        self.assertIsNone(cat_linear_fused.can_cat_linear_fused(lin))
        self.assertEqual(cat_linear_fused.find_cat_linear_matches(graph), [])

    @parametrize("producer,folded", [
        ("relu", "relu"), ("relu_method", "relu"), ("sigmoid", "sigmoid"),
        ("silu", "silu"), ("gelu", "gelu"), ("gelu_tanh", None),
        ("relu_inplace", None), ("two_users", None), ("mutated_input", None),
    ])  # fmt: skip
    def test_cat_linear_fused_gemm_prologue_folding(self, producer, folded):
        # Which producers the "gemm" form may apply inside its loads, on a
        # hand-built pre-grad graph (device-independent logic).
        from torch._subclasses.fake_tensor import FakeTensorMode

        graph = torch.fx.Graph()
        with FakeTensorMode():
            vals = {"a": torch.empty(4, 8), "b": torch.empty(4, 8), "w": torch.empty(16, 16)}

            def node(target, args, kwargs=None, op="call_function"):
                n = graph.create_node(op, target, tuple(args), kwargs or {})
                vv = torch.fx.node.map_arg(tuple(args), lambda a: vals[a.name])
                fn = getattr(torch.Tensor, target) if op == "call_method" else target
                n.meta["example_value"] = vals[n.name] = fn(*vv, **(kwargs or {}))
                return n

            ph = {}
            for name in vals.copy():
                ph[name] = graph.placeholder(name)
                ph[name].meta["example_value"] = vals[name]
            a = ph["a"]
            if producer == "relu_method":
                p = node("relu", [a], op="call_method")
            elif producer in ("gelu", "gelu_tanh"):
                approx = "none" if producer == "gelu" else "tanh"
                p = node(F.gelu, [a], {"approximate": approx})
            elif producer == "relu_inplace":
                p = node(F.relu, [a], {"inplace": True})
            else:
                target = {"sigmoid": torch.sigmoid, "silu": F.silu}.get(producer, torch.relu)
                p = node(target, [a])
            if producer == "mutated_input":  # between producer and cat
                node("add_", [a, 1.0], op="call_method")
            cat = node(torch.cat, [[p, ph["b"]], -1])
            lin = node(F.linear, [cat, ph["w"]])
            outs = [lin, p] if producer == "two_users" else [lin]
            graph.output(tuple(outs))
        match = cat_linear_fused.can_cat_linear_fused(lin)
        self.assertIsNotNone(match)
        folds = match.gemm_prologues()
        self.assertEqual(folds[1], None)
        if folded is None:
            self.assertIsNone(folds[0])
        else:
            self.assertEqual(folds[0], (folded, a))

    def test_cat_linear_fused_skip_is_logged(self):
        def fn(a, b, w):
            return F.linear(torch.cat([a, b], dim=0), w)

        a, b = torch.randn(4, 16), torch.randn(4, 16)
        w = torch.randn(8, 16)
        with self.assertLogs(cat_linear_fused.log, level=logging.DEBUG) as cm:
            self.common(fn, [a, b, w], 0, force="view")
        self.assertIn("skipping cat_linear_fused: cat is not on the last dim", "\n".join(cm.output))

    # ---- decision logic --------------------------------------------------------

    def test_cat_linear_fused_choose_form(self):
        choose = cat_linear_fused.choose_form
        self.assertEqual(choose({"stock": 2.0, "view": 1.0, "addmm": 1.5}), "view")
        self.assertEqual(choose({"stock": 2.0, "view": 1.5, "addmm": 1.0}), "addmm")
        # inside the 1.1x margin: keep stock
        self.assertEqual(choose({"stock": 1.05, "view": 1.0, "addmm": 1.0}), "stock")
        self.assertEqual(choose({"stock": 1.0, "view": 2.0, "addmm": 3.0}), "stock")
        self.assertEqual(choose({"stock": 2.0, "view": 3.0, "addmm": 3.0, "gemm": 1.5}), "gemm")
        # forms that were not timed (not available at the site) are not chosen
        self.assertEqual(choose({"stock": 2.0, "view": 1.0}), "view")

    @parametrize("times,expected", [
        ({"stock": 3.0, "view": 1.0, "addmm": 2.0}, "view"),
        ({"stock": 3.0, "view": 2.0, "addmm": 1.0}, "addmm"),
        ({"stock": 1.0, "view": 1.0, "addmm": 1.0}, None),
    ])  # fmt: skip
    def test_cat_linear_fused_decision_stubbed(self, times, expected):
        stub = mock.Mock(return_value=times)
        args = make_inputs((8,), (8, 8), 16)
        with mock.patch.object(cat_linear_fused_bench, "benchmark_forms", stub):
            code = self.common(cat_linear, args, int(expected is not None), force="bench")
            stub.assert_called_once()
            (spec,) = stub.call_args.args
            self.assertTrue(spec.backward)
            self.assertEqual(spec.forms, ("view", "addmm"))  # no Triton GEMM on CPU
            self.assertEqual([p[0] for p in spec.parts], [(8, 8), (8, 8)])
            # second compile of the same site (graph caches off so the pass runs):
            # the decision comes from the LocalCache, no second benchmark
            with inductor_config.patch(force_disable_caches=True):
                self.common(cat_linear, make_inputs((8,), (8, 8), 16), int(expected is not None), force="bench")
            stub.assert_called_once()
        if expected is None:
            FileCheck().check("cat").run(code[0])

    def test_cat_linear_fused_gemm_benchmarked_forward_only(self):
        # Where the Triton GEMM form exists, the benchmark times it for
        # forward-only sites and never for forward+backward ones (measured).
        stub = mock.Mock(return_value={"stock": 1.0, "view": 2.0, "addmm": 2.0, "gemm": 2.0})
        with mock.patch.object(cat_linear_fused_bench, "benchmark_forms", stub), mock.patch.object(
            cat_linear_fused_gemm, "gemm_form_available", return_value=True
        ):
            with torch.no_grad():
                args = make_inputs((8,), (8, 8), 16, grad=False)
                self.common(cat_linear, args, 0, force="bench", backward=False)
            self.common(cat_linear, make_inputs((8,), (8, 8), 16), 0, force="bench")
        self.assertEqual(
            [c.args[0].forms for c in stub.call_args_list],
            [("view", "addmm", "gemm"), ("view", "addmm")],
        )

    def test_cat_linear_fused_decision_mode_fwd_vs_bwd(self):
        stub = mock.Mock(return_value={"stock": 1.0, "view": 1.0, "addmm": 1.0})
        with mock.patch.object(cat_linear_fused_bench, "benchmark_forms", stub):
            self.common(cat_linear, make_inputs((8,), (8, 8), 16, grad=False), 0, force="bench")
            self.common(cat_linear, make_inputs((8,), (8, 8), 16, grad=True), 0, force="bench")
        self.assertEqual([c.args[0].backward for c in stub.call_args_list], [False, True])

    @staticmethod
    def _fixed_timer(times):
        """A stand-in for the benchmark's timer: runs each form for real and
        reports ``times`` in the order the benchmark times them (stock, then
        the candidate forms), so the decision does not depend on the machine."""

        def get_do_bench(device, backward):
            it = itertools.cycle(times)

            def do_bench(fn):
                fn()
                return next(it)

            return do_bench

        return mock.patch.object(cat_linear_fused_bench, "get_do_bench", get_do_bench)

    @parametrize("times,expected", [((2.0, 1.0, 1.5), 1), ((1.0, 1.05, 1.2), 0)])
    def test_cat_linear_fused_real_benchmark_counts_and_caches(self, times, expected):
        # The real benchmark runs every form on real tensors; only the timer is
        # fixed.  The second compile of the site takes the cached decision.
        args = make_inputs((32,), (16, 16), 16)
        with self._fixed_timer(times), inductor_config.patch(force_disable_caches=True):
            self.common(cat_linear, args, expected, force="bench")
            self.assertEqual(counters["inductor"]["cat_linear_fused_bench"], 1)
            self.common(cat_linear, make_inputs((32,), (16, 16), 16), expected, force="bench")
            self.assertEqual(counters["inductor"]["cat_linear_fused_bench"], 0)

    def test_cat_linear_fused_no_benchmark_when_deterministic(self):
        stub = mock.Mock(return_value={"stock": 9.0, "view": 1.0, "addmm": 1.0})
        # Nothing timed decides: neither the benchmark nor the roofline's limits.
        limits = mock.Mock(side_effect=AssertionError("limits measured"))
        with mock.patch.object(cat_linear_fused_bench, "benchmark_forms", stub), inductor_config.patch(
            deterministic=True
        ), mock.patch.object(cat_linear_fused_cost, "device_limits", limits):
            self.common(cat_linear, make_inputs((8,), (8, 8), 16), 0, force="bench")
        stub.assert_not_called()
        limits.assert_not_called()
        self.assertEqual(counters["inductor"]["cat_linear_fused_bench"], 0)

    # ---- roofline screen -------------------------------------------------------

    def test_cat_linear_fused_roofline_bound(self):
        # An H100-like device: 989 dense bf16 TFLOPS, 3350 GB/s.
        limits = cat_linear_fused_cost.DeviceLimits(tflops=989.0, dram_gbps=3350.0)

        def bound(m, k, n, backward=False):
            shape = cat_linear_fused_cost.SiteShape(m, k, n, itemsize=2, backward=backward)
            return shape.speedup_bound(limits)

        # 8192 x 4096 -> 4096: the GEMM is 275 GFLOP (278 us at peak), the cat
        # 2 x 64 MiB of traffic (40 us): at best 1.14x.
        self.assertAlmostEqual(bound(8192, 4096, 4096), (278.0 + 40.1) / 278.0, delta=0.01)
        # 8192 x 128 -> 256 is bound by bytes: GEMM 6.3 MB, cat 4.2 MB.
        self.assertAlmostEqual(bound(8192, 128, 256), 1 + 4.19 / 6.36, delta=0.01)
        # The cat's share shrinks as N grows, and with the backward's two GEMMs.
        self.assertGreater(bound(8192, 2048, 1024), bound(8192, 2048, 8192))
        self.assertGreater(bound(8192, 2048, 1024), bound(8192, 2048, 1024, backward=True))
        self.assertLess(bound(512, 4096, 8192), 1.1)

    @parametrize("widths,n,fused,prologues,backward,expected", [
        ((64, 64), 256, (False, False), (0, 0), False, "gemm"),  # 1.66x best case
        ((64, 64), 256, (True, True), (1, 1), False, "gemm"),  # relu folded
        ((64, 64), 256, (True, True), (0, 0), False, "screen"),  # producers not folded
        ((96, 160), 1024, (False, False), (0, 0), False, "bench"),  # K tails
        ((64, 64), 256, (False, False), (0, 0), True, "bench"),  # forward+backward
        ((2048, 2048), 4096, (False, False), (0, 0), False, "bench"),  # 1.11x at best
        ((4096, 4096), 8192, (False, False), (0, 0), False, "screen"),  # 1.05x at best
    ])  # fmt: skip
    def test_cat_linear_fused_roofline_decision(self, widths, n, fused, prologues, backward, expected):
        # An H100 as measured: ~650 TFLOPS sustained bf16 GEMM, ~2900 GB/s copy.
        spec = cat_linear_fused_bench.BenchSpec(
            parts=tuple(((8192, k), (k, 1), backward) for k in widths),
            weight=((n, sum(widths)), (sum(widths), 1), backward),
            bias=None, fused_producers=fused, prologues=prologues, dtype=torch.bfloat16,
            device="cuda", backward=backward,
            forms=("view", "addmm") if backward else ("view", "addmm", "gemm"),
        )  # fmt: skip
        with self._with_limits(tflops=650.0, dram_gbps=2900.0):
            bound = cat_linear_fused.speedup_bound(spec)
        self.assertEqual(cat_linear_fused.roofline_decision(spec, bound), expected)

    @parametrize("widths,n,config,expected", [
        ((64, 64), 256, "one_loop", "gemm"),  # memory-bound GEMM
        ((64, 64, 64, 64), 512, "one_loop", "gemm"),  # memory-bound GEMM
        ((128, 128, 128), 1024, "one_loop", "bench"),  # compute-bound: not clear of stock
        ((128, 128, 128), 1024, "per_piece", "gemm"),
        ((1024, 1024), 1024, "per_piece", "gemm"),  # compute-bound, 128x256 tiles
    ])  # fmt: skip
    def test_cat_linear_fused_roofline_decision_one_loop(self, widths, n, config, expected):
        # The one-loop kernel is taken without a benchmark only where the GEMM
        # is bound by its bytes (H100 limits as measured: ridge at ~224 FLOP/B).
        cfg = {"one_loop": cat_linear_fused_gemm.ONE_LOOP_CONFIG,
               "per_piece": cat_linear_fused_gemm.PER_PIECE_CONFIG}[config]  # fmt: skip
        spec = cat_linear_fused_bench.BenchSpec(
            parts=tuple(((8192, k), (k, 1), False) for k in widths),
            weight=((n, sum(widths)), (sum(widths), 1), False),
            bias=None, fused_producers=(False,) * len(widths), prologues=(0,) * len(widths),
            dtype=torch.bfloat16, device="cuda", backward=False, forms=("view", "addmm", "gemm"),
            gemm_config=cfg,
        )  # fmt: skip
        with self._with_limits(tflops=650.0, dram_gbps=2900.0):
            bound = cat_linear_fused.speedup_bound(spec)
            self.assertGreaterEqual(bound, cat_linear_fused.GEMM_WITHOUT_BENCHMARK_BOUND)
            self.assertEqual(cat_linear_fused.roofline_decision(spec, bound), expected)

    @parametrize(
        "producer,expected",
        [("none", "gemm"), ("relu", "gemm"), ("sigmoid", "bench"), ("silu", "bench"), ("gelu", "bench")],
    )
    def test_cat_linear_fused_roofline_decision_prologue(self, producer, expected):
        # Folding relu is free for the roofline; a transcendental fold runs once per
        # N tile inside the K loop, which the roofline does not count: benchmark.
        code = 0 if producer == "none" else cat_linear_fused_gemm.PROLOGUES[producer]
        spec = cat_linear_fused_bench.BenchSpec(
            parts=tuple(((8192, 256), (256, 1), False) for _ in range(2)),
            weight=((160, 512), (512, 1), False),
            bias=None, fused_producers=(code != 0,) * 2, prologues=(code,) * 2,
            dtype=torch.bfloat16, device="cuda", backward=False, forms=("view", "addmm", "gemm"),
            gemm_config=cat_linear_fused_gemm.ONE_LOOP_CONFIG,
        )  # fmt: skip
        with self._with_limits(tflops=650.0, dram_gbps=2900.0):
            bound = cat_linear_fused.speedup_bound(spec)
            self.assertGreaterEqual(bound, cat_linear_fused.GEMM_WITHOUT_BENCHMARK_BOUND)
            self.assertEqual(cat_linear_fused.roofline_decision(spec, bound), expected)

    def test_cat_linear_fused_no_benchmark_by_default(self):
        # Between the margin and the gemm bound only a benchmark can tell, and
        # that runs only under max_autotune (or force="bench").
        stub = mock.Mock(return_value={"stock": 9.0, "view": 1.0, "addmm": 1.0})
        with mock.patch.object(cat_linear_fused_bench, "benchmark_forms", stub), self._with_limits(
            tflops=1e6, dram_gbps=1000.0
        ), mock.patch.object(cat_linear_fused, "_should_on_cpu", side_effect=AssertionError):
            with mock.patch.object(cat_linear_fused.CatLinearMatch, "device", torch.device("cuda")):
                self.assertIsNone(self._decide(make_inputs((64,), (32, 32), 64)))
                stub.assert_not_called()
                with inductor_config.patch(max_autotune=True):
                    self.assertEqual(self._decide(make_inputs((64,), (32, 32), 64)), "view")
                stub.assert_called_once()

    @staticmethod
    def _traced(fn, args):
        """The graph of ``fn`` as Dynamo hands it to the pre-grad passes."""
        gms = []

        def backend(gm, example_inputs):
            gms.append(gm)
            return gm

        torch._dynamo.reset()
        torch.compile(fn, backend=backend)(*args)
        return gms[0].graph

    def _decide(self, args, fn=cat_linear):
        """should_cat_linear_fused on the one site of ``fn`` traced by Dynamo
        (no rewrite, no compile)."""
        (match,) = cat_linear_fused.find_cat_linear_matches(self._traced(fn, args))
        return cat_linear_fused.should_cat_linear_fused(match)

    @parametrize("grad", [False, True])
    def test_cat_linear_fused_graph_roofline_us(self, grad):
        # 1 us per FLOP and per byte: each op costs max(FLOPs, bytes).
        limits = cat_linear_fused_cost.DeviceLimits(tflops=1e-6, dram_gbps=1e-3)

        def fn(a, b, w, x, w2):
            return F.linear(torch.cat([a, b], -1), w), torch.relu(x @ w2)

        a, b, w = make_inputs((8,), (4, 4), 16, bias=False, grad=grad)
        x, w2 = (torch.randn(8, 32).requires_grad_(grad), torch.randn(32, 2))
        graph = self._traced(fn, [a, b, w, x, w2])
        cat = 2 * 8 * 8 * 4  # write + read of the 8 x 8 fp32 buffer
        linear = max(2 * 8 * 16 * 8, (8 * 8 + 16 * 8 + 8 * 16) * 4)  # FLOPs: 2048
        matmul = max(2 * 8 * 2 * 32, (8 * 32 + 32 * 2 + 8 * 2) * 4)  # bytes: 1344
        expected = cat * 2 + (linear + matmul) * 3 if grad else cat + linear + matmul
        self.assertAlmostEqual(cat_linear_fused.graph_roofline_us(graph, limits), expected)

    def test_cat_linear_fused_small_share_declined(self):
        # A site the roofline takes in the "gemm" form on its own is declined when
        # it saves under MIN_STEP_SHARE of its graph's step: here a large GEMM
        # beside it.  Under max_autotune the benchmark decides instead.
        def with_big_gemm(a, b, w, x, w2):
            return F.linear(torch.cat([a, b], -1), w), x @ w2

        site = make_inputs((256,), (64, 64), 64, bias=False, grad=False)
        big = [torch.randn(256, 2048), torch.randn(2048, 2048)]
        stub = mock.Mock(return_value={"stock": 9.0, "view": 9.0, "addmm": 9.0, "gemm": 1.0})
        with self._with_limits(tflops=1e6, dram_gbps=1000.0), mock.patch.object(
            cat_linear_fused_gemm, "gemm_form_available", return_value=True
        ), mock.patch.object(
            cat_linear_fused.CatLinearMatch, "device", torch.device("cuda")
        ), mock.patch.object(cat_linear_fused_bench, "benchmark_forms", stub):
            counters.clear()
            self.assertEqual(self._decide(site), "gemm")
            self.assertEqual(counters["inductor"]["cat_linear_fused_roofline"], 1)
            counters.clear()
            with self.assertLogs(cat_linear_fused.log, level=logging.DEBUG) as cm:
                self.assertIsNone(self._decide(site + big, fn=with_big_gemm))
            self.assertEqual(counters["inductor"]["cat_linear_fused_small_share"], 1)
            self.assertEqual(counters["inductor"]["cat_linear_fused_roofline"], 0)
            self.assertIn("of its graph's step (roofline)", "\n".join(cm.output))
            stub.assert_not_called()
            with inductor_config.patch(max_autotune=True, force_disable_caches=True):
                self.assertEqual(self._decide(site + big, fn=with_big_gemm), "gemm")
            stub.assert_called_once()

    def _with_limits(self, tflops, dram_gbps):
        limits = cat_linear_fused_cost.DeviceLimits(tflops=tflops, dram_gbps=dram_gbps)
        return mock.patch.object(cat_linear_fused_cost, "device_limits", return_value=limits)

    def test_cat_linear_fused_screen_declines_without_benchmark(self):
        # With a slow enough tensor core every GEMM is compute-bound and the
        # cat's traffic is noise: declined without running a benchmark.
        stub = mock.Mock(return_value={"stock": 9.0, "view": 1.0, "addmm": 1.0})
        args = make_inputs((64,), (32, 32), 64)
        with mock.patch.object(cat_linear_fused_bench, "benchmark_forms", stub), self._with_limits(
            tflops=1e-6, dram_gbps=1000.0
        ), self.assertLogs(cat_linear_fused.log, level=logging.DEBUG) as cm:
            self.common(cat_linear, args, 0, force="bench")
        stub.assert_not_called()
        self.assertEqual(counters["inductor"]["cat_linear_fused_screened"], 1)
        self.assertEqual(counters["inductor"]["cat_linear_fused_bench"], 0)
        self.assertIn("at best 1.000x faster (roofline)", "\n".join(cm.output))

    def test_cat_linear_fused_screen_passes_to_benchmark(self):
        # Bound by bytes, the same site could gain: the benchmark decides.
        stub = mock.Mock(return_value={"stock": 9.0, "view": 1.0, "addmm": 2.0})
        args = make_inputs((64,), (32, 32), 64)
        with mock.patch.object(cat_linear_fused_bench, "benchmark_forms", stub), self._with_limits(
            tflops=1e6, dram_gbps=1000.0
        ):
            self.common(cat_linear, args, 1, force="bench")
        stub.assert_called_once()
        self.assertEqual(counters["inductor"]["cat_linear_fused_screened"], 0)

    def test_cat_linear_fused_no_screen_without_device_figures(self):
        # No figures for the device (CPU here): nothing is screened.
        self.assertIsNone(cat_linear_fused_cost.device_limits(torch.device("cpu"), torch.float32))
        stub = mock.Mock(return_value={"stock": 1.0, "view": 1.0, "addmm": 1.0})
        with mock.patch.object(cat_linear_fused_bench, "benchmark_forms", stub):
            self.common(cat_linear, make_inputs((8,), (8, 8), 16), 0, force="bench")
        stub.assert_called_once()

    # ---- pinned gemm config ----------------------------------------------------

    @parametrize("widths,lead,prologues,expected", [
        ((64, 128), (256,), (0, 0), "one_loop"),  # narrow whole K tiles
        ((128, 128, 128), (4, 64), (1, 1, 1), "one_loop"),  # 3-D, one shared prologue
        ((1024, 1024), (256,), (0, 0), "per_piece"),  # wide pieces
        ((96, 160), (256,), (0, 0), "per_piece"),  # K tails: one loop cannot run
        ((64, 64), (256,), (1, 0), "per_piece"),  # different prologues
    ])  # fmt: skip
    def test_cat_linear_fused_gemm_pick_config(self, widths, lead, prologues, expected):
        mod = cat_linear_fused_gemm
        parts = [torch.empty(*lead, k) for k in widths]
        w = torch.empty(32, sum(widths))
        want = {"one_loop": mod.ONE_LOOP_CONFIG, "per_piece": mod.PER_PIECE_CONFIG}[expected]
        self.assertEqual(mod.pick_config(parts, w, list(prologues)), want)
        # A transposed weight (K stride != 1) never takes the single loop.
        self.assertEqual(
            mod.pick_config(parts, torch.empty(sum(widths), 32).t(), list(prologues)),
            mod.PER_PIECE_CONFIG,
        )

    def test_cat_linear_fused_bad_force_value(self):
        with inductor_config.patch(cat_linear_fused_force="sometimes"):
            with self.assertRaisesRegex(ValueError, "cat_linear_fused_force"):
                cat_linear_fused._forced_form()

    # ---- generated code --------------------------------------------------------

    def test_cat_linear_fused_generated_code(self):
        args = make_inputs((32,), (16, 16), 16, bias=False, grad=False)
        torch._dynamo.reset()
        with torch.no_grad():
            _, (stock_code,) = run_and_get_code(torch.compile(cat_linear), *args)
            view_code = self.common(cat_linear, args, 1, force="view", backward=False)[0]
            addmm_code = self.common(cat_linear, args, 1, force="addmm", backward=False)[0]
        FileCheck().check("cpp_fused_cat").check_count(
            "extern_kernels.mm(", 1, exactly=True
        ).run(stock_code)
        # per piece: a GEMM on each weight view, the second accumulating into the
        # first through addmm's C input (Inductor folds the view form's add into
        # addmm too); no cat buffer
        for code in (view_code, addmm_code):
            FileCheck().check_not("cat").check("extern_kernels.mm(").check(
                "reinterpret_tensor(arg"
            ).check("extern_kernels.addmm(").check("reinterpret_tensor(arg").run(code)
            FileCheck().check_not("cpp_fused_cat").run(code)

    # ---- GPU -------------------------------------------------------------------

    @unittest.skipUnless(HAS_CUDA_AND_TRITON, "needs CUDA")
    @parametrize("dtype", [torch.float32, torch.bfloat16])
    def test_cat_linear_fused_cuda_decides_by_benchmark(self, dtype):
        # The CUDA benchmark runs every candidate form on the GPU; with the timer
        # fixed, a winning form is taken and a losing one is not.  force="bench",
        # not max_autotune: under max_autotune Inductor also autotunes every mm
        # (for fp32 that took over 100 s on an H100); when the benchmark runs by
        # default is tested on CPU (test_cat_linear_fused_no_benchmark_by_default).
        for times, expected in (((2.0, 1.0, 1.5), 1), ((1.0, 1.05, 1.2), 0)):
            with self.subTest(times=times), self._fixed_timer(times):
                # another M per subtest: a site of its own in the LocalCache
                m = 256 + 64 * expected
                args = make_inputs((m,), (64, 64), 128, dtype=dtype, device="cuda")
                with inductor_config.patch(force_disable_caches=True):
                    self.common(relu_cat_linear, args, expected, force="bench")
                self.assertEqual(counters["inductor"]["cat_linear_fused_bench"], 1)

    @unittest.skipUnless(HAS_CUDA_AND_TRITON, "needs CUDA")
    def test_cat_linear_fused_cuda_roofline_limits_measured(self):
        # Measured once per device and dtype, then served from the cache.
        cost = cat_linear_fused_cost
        cost._cuda_limits.cache_clear()
        limits = cost.device_limits(torch.device("cuda"), torch.bfloat16)
        self.assertGreater(limits.tflops, 1.0)
        self.assertGreater(limits.dram_gbps, 10.0)
        cost._cuda_limits.cache_clear()
        with mock.patch.object(torch, "randn", side_effect=AssertionError("measured twice")):
            self.assertEqual(cost.device_limits(torch.device("cuda"), torch.bfloat16), limits)

    @unittest.skipUnless(HAS_CUDA_AND_TRITON, "needs CUDA")
    def test_cat_linear_fused_cuda_no_benchmark_when_deterministic(self):
        args = make_inputs((256,), (64, 64), 128, dtype=torch.bfloat16, device="cuda")
        with inductor_config.patch(deterministic=True):
            self.common(relu_cat_linear, args, 0, force="bench")
        self.assertEqual(counters["inductor"]["cat_linear_fused_bench"], 0)

    @unittest.skipUnless(HAS_CUDA_AND_TRITON, "needs CUDA")
    @parametrize("form", ["view", "addmm"])
    def test_cat_linear_fused_cuda_forced_parity(self, form):
        args = make_inputs((4, 64), (32, 96), 64, dtype=torch.bfloat16, device="cuda")
        self.common(relu_cat_linear, args, 1, force=form)

    @unittest.skipUnless(HAS_CUDA_AND_TRITON, "needs CUDA")
    @parametrize("dtype", [torch.float16, torch.bfloat16])
    @parametrize("widths", [(64, 64), (64, 128, 64), (32, 96, 40), (16, 48, 64, 8)])
    def test_cat_linear_fused_cuda_gemm_parity(self, dtype, widths):
        # 2-D and 3-D, bias or none, odd widths (K tails), forward and backward;
        # one Triton kernel reads the pieces in place, no cat kernel.
        for lead, bias in (((300,), True), ((3, 70), False)):
            args = make_inputs(lead, widths, 72, dtype=dtype, device="cuda", bias=bias)
            fn = lambda *a: F.linear(torch.cat(a[: len(widths)], -1), *a[len(widths):])  # noqa: E731
            code = self.common(fn, args, 1, force="gemm")
            FileCheck().check("cat_linear_kernel").run(code[0])
            FileCheck().check_not("triton_poi_fused_cat").run(code[0])

    @unittest.skipUnless(HAS_CUDA_AND_TRITON, "needs CUDA")
    def test_cat_linear_fused_cuda_gemm_dynamic_and_no_grad(self):
        args = make_inputs((2, 50), (64, 32), 64, dtype=torch.bfloat16, device="cuda")
        for a in args[:2]:
            torch._dynamo.mark_dynamic(a, 0)
            torch._dynamo.mark_dynamic(a, 1)
        self.common(relu_cat_linear, args, 1, force="gemm")
        args = make_inputs((128,), (64, 64), 64, dtype=torch.float16, device="cuda", grad=False)
        with torch.no_grad():
            self.common(relu_cat_linear, args, 1, force="gemm", backward=False)

    @unittest.skipUnless(HAS_CUDA_AND_TRITON, "needs CUDA")
    @parametrize("producer", ["relu", "sigmoid", "silu", "gelu"])
    def test_cat_linear_fused_cuda_gemm_prologue(self, producer):
        # Forward only: the pointwise producer runs inside the GEMM's loads, so
        # no kernel writes its output; numbers match eager.
        act = {"relu": torch.relu, "sigmoid": torch.sigmoid, "silu": F.silu, "gelu": F.gelu}[producer]

        def fn(a, b, w, bias):
            return F.linear(torch.cat([act(a), b], -1), w, bias)

        args = make_inputs((300,), (64, 40), 48, dtype=torch.bfloat16, device="cuda", grad=False)
        with torch.no_grad():
            code = self.common(fn, args, 1, force="gemm", backward=False)[0]
        FileCheck().check("cat_linear_kernel").run(code)
        FileCheck().check_not("triton_poi").run(code)

    @unittest.skipUnless(HAS_CUDA_AND_TRITON, "needs CUDA")
    @parametrize("producer", ["none", "relu", "gelu"])
    def test_cat_linear_fused_cuda_gemm_kernel_layouts(self, producer):
        # Every autotuning config in both K-loop layouts, launched directly: the
        # autotuner runs only one of them per shape, so parity through the pass
        # alone would leave the others untested.  Widths that are whole K tiles
        # allow the single loop; a K tail forces the per-piece loops.
        import triton

        mod = cat_linear_fused_gemm
        code = {"none": 0, **mod.PROLOGUES}[producer]
        act = {"none": lambda t: t, "relu": torch.relu, "gelu": F.gelu}[producer]
        for widths in ((64, 128, 64, 64), (64, 64), (64, 40)):
            parts = [torch.randn(200, k, device="cuda", dtype=torch.bfloat16) for k in widths]
            w = torch.randn(96, sum(widths), device="cuda", dtype=torch.bfloat16)
            b = torch.randn(96, device="cuda", dtype=torch.bfloat16)
            ref = F.linear(torch.cat([act(p) for p in parts], -1).float(), w.float(), b.float())
            a, ks, pro = mod.kernel_slots(parts, [code] * len(parts))
            # True for the first two width sets, False for the K tail.
            aligned = mod.one_loop_ok(parts, w, pro)
            self.assertEqual(aligned, 40 not in widths)
            for cfg in mod._CONFIGS:
                y = torch.full((200, 96), float("nan"), device="cuda", dtype=torch.bfloat16)
                meta = cfg.all_kwargs()
                grid = (triton.cdiv(200, meta["BLOCK_M"]) * triton.cdiv(96, meta["BLOCK_N"]),)
                mod.cat_linear_kernel.fn[grid](
                    a[0], a[1], a[2], a[3],
                    a[0].stride(0), 1, a[1].stride(0), 1, a[2].stride(0), 1, a[3].stride(0), 1,
                    *ks, w, w.stride(0), 1, b, y, y.stride(0), 1, 200, 96, sum(widths),
                    NUM_PARTS=len(parts), HAS_BIAS=True, ONE_LOOP_OK=aligned,
                    PRO0=pro[0], PRO1=pro[1], PRO2=pro[2], PRO3=pro[3], **meta,
                )  # fmt: skip
                self.assertEqual(y.float(), ref, atol=0.1, rtol=0.02, msg=f"{widths} {cfg}")

    @unittest.skipUnless(HAS_CUDA_AND_TRITON, "needs CUDA")
    def test_cat_linear_fused_cuda_gemm_relu_keeps_nan(self):
        # The folded relu propagates NaN like torch.relu (a plain max would not).
        args = make_inputs((128,), (64, 64), 32, dtype=torch.bfloat16, device="cuda", grad=False)
        args[0][5, 3] = float("nan")
        with torch.no_grad():
            self.common(relu_cat_linear, args, 1, force="gemm", backward=False)

    @unittest.skipUnless(HAS_CUDA_AND_TRITON, "needs CUDA")
    def test_cat_linear_fused_cuda_gemm_not_available(self):
        # fp32 (TF32 semantics) and more than MAX_PARTS pieces: left alone.
        self.common(cat_linear, make_inputs((64,), (32, 32), 32, device="cuda"), 0, force="gemm")
        n = cat_linear_fused_gemm.MAX_PARTS + 1
        args = make_inputs((64,), (16,) * n, 32, dtype=torch.bfloat16, device="cuda", bias=False)
        fn = lambda *a: F.linear(torch.cat(a[:n], -1), a[n])  # noqa: E731
        self.common(fn, args, 0, force="gemm")

    # ---- coexistence with upstream's cat_linear (torch >= 2.14) ------------------

    def test_cat_linear_fused_coexists_with_upstream_cat_linear(self):
        from torch._inductor.fx_passes import group_batch_fusion

        if "cat_linear" not in group_batch_fusion.PRE_GRAD_FUSIONS:
            self.skipTest("needs torch >= 2.14 (upstream's cat_linear pre-grad fusion)")
        gates = dict(
            CAT_LINEAR_MAX_OUTPUT_WIDTH=1 << 30, CAT_LINEAR_CAT_TRAFFIC_FLOOR_BYTES=0
        )
        with contextlib.ExitStack() as stack:
            for name, value in gates.items():
                stack.enter_context(mock.patch.object(group_batch_fusion, name, value))
            stack.enter_context(
                inductor_config.patch(pre_grad_fusion_options={"cat_linear": {}})
            )
            self.common(cat_linear, make_inputs((8,), (8, 8), 16), 0, force="view")
        self.assertEqual(counters["inductor"]["cat_linear"], 1)


if __name__ == "__main__":
    if HAS_CPU or HAS_CUDA_AND_TRITON:
        run_tests()
