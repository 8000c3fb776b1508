# Owner(s): ["module: inductor"]
"""
The seed's explicit ``cat_linear`` entry points (``fuse_cat_linear_in_graph``
and ``cat_linear_fused_pre_grad_pass``): they rewrite above autograd, in
pre-grad graphs, into the ``"view"`` form, for callers that ask for it by
hand.  The ``cat_linear`` fusion itself is the post-grad lowering
(``test_cat_linear_fused.py``).
"""

import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config
from torch._inductor.fx_passes import cat_linear_fused
from torch._inductor.test_case import run_tests, TestCase
from torch.testing import FileCheck
from torch.testing._internal.inductor_utils import HAS_CPU


TOL = dict(atol=1e-4, rtol=1e-4)


def cat_linear(a, b, w, bias=None):
    return F.linear(torch.cat([a, b], dim=-1), w, bias)


def make_inputs(widths, rows=8, n=8):
    parts = [torch.randn(rows, k) for k in widths]
    return [*parts, torch.randn(n, sum(widths)) / sum(widths) ** 0.5]


class CatLinearSeedTest(TestCase):
    def _traced(self, fn, args):
        graphs = []

        def capture(gm, example_inputs):
            graphs.append(gm)
            return gm

        torch._dynamo.reset()
        torch.compile(fn, backend=capture)(*args)
        return graphs[0].graph

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

    def test_fuse_cat_linear_in_graph_adds_the_bias_last(self):
        # pieces whose products cancel: the bias is added after their sum, as
        # the linear adds it, not rounded away into the first piece's product
        def fn(a, b, w, bias):
            return cat_linear(a, b, w, bias)

        seen = []

        def backend(gm, example_inputs):
            # the rewritten graph, run on the inputs Dynamo passes (in its order)
            seen.append(cat_linear_fused.fuse_cat_linear_in_graph(gm.graph))
            gm.recompile()
            return gm

        a, b = torch.ones(4, 16), torch.ones(4, 16)
        w = torch.cat([torch.full((8, 16), 6.25e5), torch.full((8, 16), -6.25e5)], 1)
        args = [a, b, w, torch.full((8,), 1.5)]
        torch._dynamo.reset()
        out = torch.compile(fn, backend=backend)(*args)
        self.assertEqual(seen, [1])
        self.assertEqual(out, fn(*args), atol=0, rtol=0)

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
        self.assertEqual(out, m(x), **TOL)
        self.assertTrue(p.uuid())

    def test_cat_linear_fused_pre_grad_pass_registered(self):
        from torch._inductor.custom_pass_registry import register_custom_pass

        counters.clear()
        torch._dynamo.reset()
        p = cat_linear_fused.cat_linear_fused_pre_grad_pass
        with register_custom_pass("pre_grad_custom_pass", p, name="seed.cat_linear"):
            args = make_inputs((16, 16))
            self.assertEqual(
                torch.compile(cat_linear)(*args),
                cat_linear(*args),
                **TOL,
            )
        self.assertEqual(counters["inductor"]["cat_linear_fused"], 1)


if __name__ == "__main__":
    if HAS_CPU:
        run_tests()
