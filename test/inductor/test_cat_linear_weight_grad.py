# Owner(s): ["module: inductor"]
import functools

from hypothesis import given, settings, strategies as st

import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config
from torch._inductor.test_case import run_tests, TestCase
from torch._inductor.utils import fresh_cache, run_and_get_code
from torch.testing import FileCheck
from torch.testing._internal.common_utils import (
    instantiate_parametrized_tests,
    parametrize,
)
from torch.testing._internal.inductor_utils import HAS_CPU
from torch.testing._internal.triton_utils import requires_cuda_and_triton
from torch.utils.checkpoint import (
    checkpoint,
    CheckpointPolicy,
    create_selective_checkpoint_contexts,
)


TOL = {
    torch.float32: dict(atol=1e-4, rtol=1e-4),
    torch.bfloat16: dict(atol=5e-2, rtol=5e-2),
}


def made_cat_linear(a, b, w, bias=None):
    # pieces made in the graph: the caller cannot write them
    return F.linear(torch.cat([torch.relu(a), b * 2.0], dim=-1), w, bias)


def make_inputs(lead, widths, n, dtype=torch.float32, device="cpu", bias=True):
    parts = [torch.randn(*lead, k, dtype=dtype, device=device) for k in widths]
    w = torch.randn(n, sum(widths), dtype=dtype, device=device) / sum(widths) ** 0.5
    args = [*parts, w] + ([torch.randn(n, dtype=dtype, device=device)] if bias else [])
    return [t.requires_grad_() for t in args]


def fusion(form=None):
    options = {} if form is None else {"form": form}
    return inductor_config.patch(pre_grad_fusion_options={"cat_linear": options})


@instantiate_parametrized_tests
class CatLinearWeightGradTest(TestCase):
    def common(self, fn, args, split, form="view"):
        """Train ``fn`` once compiled with ``cat_linear`` on: the weight
        gradient computed per piece (``split``; None: whether or not) exactly
        where the forward site is then taken, outputs and gradients as
        eager's.  Returns the forward's and the backward's code."""
        dtype = args[0].dtype
        ref_args = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
        counters.clear()
        torch._dynamo.reset()
        compiled = torch.compile(fn)

        def step():
            out = compiled(*args)
            out.backward(grad)
            return out

        grad = torch.randn_like(fn(*ref_args))
        # a cache hit replays cat_linear's count but not the split's
        with fusion(form), fresh_cache():
            out, code = run_and_get_code(step)
        taken = counters["inductor"]["cat_linear_weight_grad"]
        # forward sites taken where gradients are split (two heads' equal
        # GEMMs, merged by CSE after the split, are one site)
        self.assertEqual(counters["inductor"]["cat_linear"] > 0, taken > 0)
        if split is not None:
            self.assertEqual(taken, int(split))
        ref = fn(*ref_args)
        ref.backward(grad)
        self.assertEqual(out, ref, **TOL[dtype])
        for a, r in zip(args, ref_args):
            self.assertEqual(a.grad, r.grad, **TOL[dtype])
        return code

    def infer(self, fn, args, **patches):
        """``fn`` compiled without gradients, ``cat_linear`` forced into the
        view form (and ``patches`` to Inductor's config): its outputs and the
        generated code."""
        counters.clear()
        torch._dynamo.reset()
        with torch.no_grad(), fusion("view"), fresh_cache():
            with inductor_config.patch(patches):
                return run_and_get_code(torch.compile(fn), *args)

    def assertNoCatBuffer(self, code):
        # stock's forward writes the 24-wide piece into a view of the 40-wide
        # cat buffer (row stride 40, at column 16), which it saves for the
        # weight gradient; taken, each piece is a buffer of its own
        self.assertNotIn("40, 1), 16)", code)

    @parametrize("lead", [(8,), (2, 4)])
    @parametrize("bias", [False, True])
    def test_weight_grad_split_frees_the_cat(self, lead, bias):
        # the partitioner saves the pieces instead of the cat, so the
        # forward's cat has one user: no cat in the forward, and the backward
        # writes each piece's block of the weight gradient into views of one
        # buffer (two GEMMs, no copy)
        args = make_inputs(lead, (16, 24), 8, bias=bias)
        forward, backward = self.common(made_cat_linear, args, True)
        self.assertNoCatBuffer(forward)
        FileCheck().check_count("# alias", 2, exactly=True).run(backward)

    @parametrize("lead", [(8,), (2, 4)])
    def test_weight_grad_split_of_cat_matmul(self, lead):
        # cat(parts, -1) @ W: the weight gradient is mm(cat.T, grad), computed
        # as row blocks mm(part.T, grad) written into views of one buffer
        def fn(a, b, w):
            return torch.cat([torch.relu(a), b * 2.0], -1) @ w

        a, b, _ = make_inputs(lead, (16, 24), 8, bias=False)
        w = torch.randn(40, 8, requires_grad=True)
        forward, backward = self.common(fn, [a, b, w], True)
        self.assertNoCatBuffer(forward)
        FileCheck().check_count("# alias", 2, exactly=True).run(backward)

    def test_inference_gemm_reading_the_cat_as_mat2(self):
        # in an inference graph too, a GEMM that reads the cat as its second
        # operand is split, so that the linear reads the pieces (made by
        # GEMMs, so no producer of theirs writes into the cat) in place
        def fn(a, b, w1, w2, w, p):
            x = torch.cat([a @ w1, b @ w2], -1)
            return F.linear(x, w), p @ x

        args = [torch.randn(8, 32), torch.randn(8, 32), torch.randn(32, 16)]
        args += [torch.randn(32, 24), torch.randn(8, 40), torch.randn(4, 8)]
        out, (code,) = self.infer(fn, args)
        self.assertEqual(out, fn(*args))
        self.assertEqual(counters["inductor"]["cat_linear_weight_grad"], 1)
        self.assertEqual(counters["inductor"]["cat_linear"], 1)
        # (the split GEMM's (4, 40) output takes its blocks as such views)
        self.assertNotIn("(8, 24), (40, 1), 16)", code)

    def test_weight_grad_keeps_a_gemm_of_two_cats(self):
        # A.T @ B reads two cats, each a linear's input: split on B, it
        # would give A.T two readers after A's other gradient (p @ A, visited
        # first) was split for A's site, which is then declined; neither
        # cat's gradients are split for it, and the counts agree
        def fn(a, c, b, d, w1, wa, wb, p):
            x = torch.cat([a @ w1, c @ w1], -1)
            y = torch.cat([b @ w1, d @ w1], -1)
            return F.linear(x, wa), F.linear(y, wb), x.t() @ y, p @ x

        args = [torch.randn(64, 32) for _ in range(4)] + [torch.randn(32, 32)]
        args += [torch.randn(8, 64), torch.randn(8, 64), torch.randn(4, 64)]
        out, _ = self.infer(fn, args)
        self.assertEqual(out, fn(*args), **TOL[torch.float32])
        self.assertEqual(counters["inductor"]["cat_linear_weight_grad"], 0)
        self.assertEqual(counters["inductor"]["cat_linear"], 0)
        self.assertGreater(counters["inductor"]["cat_linear_weight_grad_cats"], 0)

    def test_inference_gemm_reading_the_cat_beside_an_equal_cat(self):
        # no partitioner merges equal cats in an inference graph, so another
        # reader of an equal cat does not keep this one's GEMM
        def fn(a, b, w1, w2, w, p):
            x = torch.cat([a @ w1, b @ w2], -1)
            return F.linear(x, w), p @ x, torch.cat([a @ w1, b @ w2], -1).sum(0)

        args = [torch.randn(8, 32), torch.randn(8, 32), torch.randn(32, 16)]
        args += [torch.randn(32, 24), torch.randn(8, 40), torch.randn(4, 8)]
        out, _ = self.infer(fn, args)
        self.assertEqual(out, fn(*args), **TOL[torch.float32])
        self.assertEqual(counters["inductor"]["cat_linear_weight_grad"], 1)
        self.assertEqual(counters["inductor"]["cat_linear"], 1)

    @parametrize("freezing", [False, True])
    def test_inference_gemm_reading_the_cat_under_freezing(self, freezing):
        # freezing packs a CPU linear for oneDNN or MKL after this pass and
        # before the lowering, which then never sees the site: nothing split
        class Heads(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a, self.b = torch.nn.Linear(32, 16), torch.nn.Linear(32, 24)
                self.head = torch.nn.Linear(40, 8)
                self.p = torch.nn.Parameter(torch.randn(4, 8))

            def forward(self, a, b):
                x = torch.cat([self.a(a), self.b(b)], -1)
                return self.head(x), self.p @ x

        model, args = Heads().eval(), (torch.randn(8, 32), torch.randn(8, 32))
        out, _ = self.infer(model, args, freezing=freezing)
        with torch.no_grad():
            self.assertEqual(out, model(*args), **TOL[torch.float32])
        split = counters["inductor"]["cat_linear_weight_grad"]
        self.assertEqual(
            (split, counters["inductor"]["cat_linear"]), (1 - freezing,) * 2
        )

    def test_weight_grad_split_dynamic_rows(self):
        args = make_inputs((8,), (16, 24), 8)
        for a in args[:2]:
            torch._dynamo.mark_dynamic(a, 0)
        self.common(made_cat_linear, args, True)

    def test_weight_grad_keeps_the_cat_of_caller_tensors(self):
        # pieces the caller holds (graph inputs, or a dropout's alias of one)
        # may be written before the backward: the weight gradient keeps
        # reading the saved cat, and the forward site stays
        def dropout_piece(a, b, w):
            return F.linear(torch.cat([F.dropout(a, 0.0), b * 2.0], -1), w)

        def raw(a, b, w):
            return F.linear(torch.cat([a, b], -1), w)

        for fn in (dropout_piece, raw):
            self.common(fn, make_inputs((8,), (16, 16), 8, bias=False), False)
            self.assertEqual(counters["inductor"]["cat_linear_cat_users"], 1)
            self.assertGreater(counters["inductor"]["cat_linear_weight_grad_caller"], 0)

    def test_weight_grad_keeps_the_cat_of_an_input_written_before_it(self):
        # a[...] = v before the cat: the piece is the value written back into
        # the input, in the input's own storage. The caller then writes the
        # input before the backward; the weight gradient must still read what
        # the forward concatenated
        def write_then_cat(a, b, w):
            a[:, :2] = 1.0
            return F.linear(torch.cat([a, torch.sin(b)], -1), w)

        def make():
            torch.manual_seed(0)
            a = torch.randn(8, 16)
            b, w = torch.randn(8, 16, requires_grad=True), torch.randn(8, 32)
            return a, b, w.requires_grad_()

        (a, b, w), (ra, rb, rw) = make(), make()
        counters.clear()
        torch._dynamo.reset()
        with fusion("view"):
            out = torch.compile(write_then_cat)(a, b, w)
        self.assertEqual(counters["inductor"]["cat_linear_weight_grad"], 0)
        ref = write_then_cat(ra, rb, rw)
        with torch.no_grad():
            a.add_(100.0)
            ra.add_(100.0)
        out.sum().backward()
        ref.sum().backward()
        self.assertEqual(out, ref)
        self.assertEqual(w.grad, rw.grad)
        self.assertEqual(b.grad, rb.grad)

    def test_weight_grad_keeps_the_cat_where_the_site_stays(self):
        # the forward site would be declined (the view form in 16-bit; the
        # decision on a CPU), so splitting the gradient would free nothing
        args = make_inputs((8,), (16, 16), 8, torch.bfloat16)
        self.common(made_cat_linear, args, False)
        self.common(made_cat_linear, make_inputs((8,), (16, 16), 8), False, None)
        self.common(made_cat_linear, make_inputs((8,), (16, 16), 8), False, "off")

    def test_weight_grad_keeps_a_cat_with_other_users(self):
        def fn(a, b, w):
            x = torch.cat([torch.relu(a), b * 2.0], -1)
            return F.linear(x, w) + x.sum()

        self.common(fn, make_inputs((8,), (16, 16), 8, bias=False), False)
        self.assertGreater(counters["inductor"]["cat_linear_weight_grad_cat_users"], 0)

    def test_weight_grad_keeps_the_cat_read_by_a_backward_gemm(self):
        # torch.func.grad in the step: the outer backward reads the cat as
        # mat1 (mm(cat, tangent.T)), which is no forward site, so the cat is
        # saved for it and the forward site stays: no gradient is split
        def grad_of_w(a, b, w, bias):
            def loss(w):
                return made_cat_linear(a, b, w, bias).pow(2).sum()

            return torch.func.grad(loss)(w)

        self.common(grad_of_w, make_inputs((16,), (16, 16), 8), False)
        self.assertEqual(counters["inductor"]["cat_linear_cat_users"], 1)

    def test_weight_grad_split_of_two_equal_cats(self):
        # two linears on equal cats of the same pieces: both gradients split,
        # and once the partitioner's CSE has merged the two cats into one
        # read by two GEMMs, both forward sites are still taken
        def fn(a, b, w):
            a, b = torch.relu(a), b * 2.0
            return F.linear(torch.cat([a, b], -1), w) + F.linear(
                torch.cat([a, b], -1), w * 0.5
            )

        forward, _ = self.common(fn, make_inputs((8,), (16, 24), 8, bias=False), None)
        self.assertEqual(counters["inductor"]["cat_linear_weight_grad"], 2)
        self.assertNoCatBuffer(forward)

    def test_weight_grad_keeps_other_reads_of_the_cat_as_mat2(self):
        # GEMMs that read the cat as their second operand but not as a weight
        # gradient does: through a view that is not the flattening one (the
        # per-piece split would not type-check), or the cat twice (a Gram
        # matrix; splitting it keeps the cat): nothing is split
        def other_view(a, b, w, p):
            x = torch.cat([torch.relu(a), b * 2.0], -1)
            return F.linear(x, w).sum() + (p @ x.view(4, 80)).sum()

        def gram(a, b, w, p):
            x = torch.cat([torch.relu(a), b * 2.0], -1)
            return F.linear(x, w).sum() + (x.t() @ x).sum() + p.sum()

        for fn in (other_view, gram):
            args = make_inputs((8,), (16, 24), 8, bias=False)
            self.common(fn, [*args, torch.randn(3, 4)], False)

    def test_weight_grad_split_of_two_heads_on_one_cat(self):
        # one cat read by two forward GEMMs, a linear and a matmul: both
        # gradients split, and both forward sites read the pieces in place
        def fn(a, b, w, w2):
            x = torch.cat([torch.relu(a), b * 2.0], -1)
            return F.linear(x, w) + x @ w2

        args = make_inputs((8,), (16, 24), 8, bias=False)
        args.append(torch.randn(40, 8, requires_grad=True))
        forward, _ = self.common(fn, args, None)
        self.assertEqual(counters["inductor"]["cat_linear_weight_grad"], 2)
        self.assertNoCatBuffer(forward)

    def test_weight_grad_keeps_two_heads_whose_gradients_cost_more(self):
        # as above, but the second head is wide: each head alone would pay,
        # both gradients' extra reads together (8 x (8 + 28) floats) cost
        # more than relu(a)'s trip through the cat saves (2 x 8 x 16), so
        # neither is split (one split alone would still save the cat)
        def fn(a, b, w, wide):
            x = torch.cat([torch.relu(a), b * 2.0], -1)
            return F.linear(x, w).sum(-1) + F.linear(x, wide).sum(-1)

        args = make_inputs((8,), (16, 24), 8, bias=False)
        args.append(torch.randn(28, 40, requires_grad=True))
        self.common(fn, args, False)

    def test_weight_grad_split_of_equal_cats_in_both_forms(self):
        # as above, one linear and one matmul: both gradients split, one per
        # form, and both forward sites taken
        def fn(a, b, w, w2):
            a, b = torch.relu(a), b * 2.0
            return F.linear(torch.cat([a, b], -1), w) + torch.cat([a, b], -1) @ w2

        args = make_inputs((8,), (16, 24), 8, bias=False)
        args.append(torch.randn(40, 8, requires_grad=True))
        forward, _ = self.common(fn, args, None)
        self.assertEqual(counters["inductor"]["cat_linear_weight_grad"], 2)
        self.assertNoCatBuffer(forward)

    @parametrize("recompute", [False, True])
    def test_weight_grad_keeps_equal_cats_where_one_stays(self, recompute):
        # as above, but one linear's gradient reads too much to split (a
        # wide output): the merged cat is saved for it, so neither is split;
        # also where each cat's pieces are computed again (CSE merges those
        # first, then the cats)
        def fn(a, b, w, wide):
            made = torch.relu(a), b * 2.0

            def cat():
                if recompute:
                    return torch.cat([torch.relu(a), b * 2.0], -1)
                return torch.cat(made, -1)

            return F.linear(cat(), w).sum(-1) + F.linear(cat(), wide).sum(-1)

        args = make_inputs((8,), (16, 24), 8, bias=False)
        args.append(torch.randn(256, 40, requires_grad=True))
        self.common(fn, args, False)

    def test_weight_grad_equal_cats_decide_as_one(self):
        # equal cats whose pieces differ in their other readers (the second
        # sin also feeds a sum): every gradient's check sees the same class
        # of cats, so both are split or neither is
        def fn(a, b, w, w2):
            s = torch.sin(a)
            first = F.linear(torch.cat([torch.sin(a), b * 2.0], -1), w)
            return first + F.linear(torch.cat([s, b * 2.0], -1), w2) + s.sum()

        args = make_inputs((16,), (16, 24), 8, bias=False)
        args.append(torch.randn(8, 40, requires_grad=True))
        self.common(fn, args, None)

    def test_weight_grad_keeps_the_cat_a_checkpoint_policy_saves(self):
        # selective activation checkpointing that must save the cat: the
        # partitioner saves it, so splitting its gradient saves nothing
        def policy(ctx, op, *args, **kwargs):
            if op is torch.ops.aten.cat.default:
                return CheckpointPolicy.MUST_SAVE
            return CheckpointPolicy.PREFER_RECOMPUTE

        def fn(a, b, w):
            return checkpoint(
                lambda a, b, w: torch.tanh(made_cat_linear(a, b, w)),
                a,
                b,
                w,
                use_reentrant=False,
                context_fn=functools.partial(
                    create_selective_checkpoint_contexts, policy
                ),
            )

        self.common(fn, make_inputs((16,), (16, 24), 8, bias=False), False)
        self.assertGreater(counters["inductor"]["cat_linear_weight_grad_checkpoint"], 0)

    def test_weight_grad_keeps_the_cat_of_a_recomputed_gemm(self):
        # a checkpoint around the linear alone: the backward recomputes the
        # GEMM from the cat, so the cat stays saved, and pieces saved for a
        # split gradient would only add to it
        def fn(a, b, w):
            c = torch.cat([torch.relu(a), torch.sigmoid(b)], -1)
            return checkpoint(
                lambda c, w: torch.relu(F.linear(c, w)), c, w, use_reentrant=False
            )

        self.common(fn, make_inputs((64,), (16, 16), 4, bias=False), False)
        self.assertGreater(counters["inductor"]["cat_linear_weight_grad_checkpoint"], 0)

    def test_weight_grad_split_inside_a_checkpoint(self):
        # the cat inside the checkpoint: the backward recomputes it with the
        # GEMM, so the gradient is split and neither pass writes a cat (the
        # forward still saves only the checkpoint's inputs)
        def fn(a, b, w, w2):
            return F.linear(
                checkpoint(made_cat_linear, a, b, w, use_reentrant=False), w2
            )

        args = make_inputs((16,), (16, 24), 8, bias=False)
        args.append(torch.randn(4, 8, requires_grad=True))
        forward, backward = self.common(fn, args, True)
        # the forward's site and the backward's recomputed one
        self.assertEqual(counters["inductor"]["cat_linear"], 2)
        self.assertNoCatBuffer(forward)
        (saved,) = [l for l in forward.splitlines() if l.strip().startswith("return (")]
        self.assertEqual(saved.count("buf"), 1)  # the output; the rest are inputs
        FileCheck().check_count("# alias", 2, exactly=True).run(backward)

    def test_weight_grad_keeps_equal_cats_of_merged_getitems(self):
        # layer_norm's outputs are getitems of one node: CSE merges the two
        # layer_norms' getitems, then the cats; the second cat's other user
        # then keeps the merged cat, so the first gradient is not split
        def fn(x, y, w):
            q = torch.sin(y)
            c1 = torch.cat([F.layer_norm(x, (16,)), q], -1)
            c2 = torch.cat([F.layer_norm(x, (16,)), q], -1)
            return F.linear(c1, w) + (c2 * 2.0).sum()

        self.common(fn, make_inputs((8,), (16, 16), 8, bias=False), False)

    @inductor_config.patch(max_autotune=True, max_autotune_gemm_backends="ATEN")
    def test_weight_grad_keeps_the_cat_of_a_gemm_summed_by_mm_plus_mm(self):
        # under max_autotune mm_plus_mm's pattern takes a sum of two mm (it
        # is matched at the add first), so the forward site is not taken
        def fn(a, b, z, w, w2):
            x = torch.cat([torch.relu(a), torch.sin(b)], -1)
            return F.linear(x, w) + F.linear(z, w2)

        args = make_inputs((8,), (16, 16), 8, bias=False)
        args[2:2] = [torch.randn(8, 32, requires_grad=True)]
        args.append(torch.randn(8, 32, requires_grad=True))
        self.common(fn, args, False)

    def test_weight_grad_keeps_the_cat_where_the_gradient_costs_more(self):
        # four pieces into a wide output: the gradient's three extra reads
        # (rows x N each) cost more than the cat (rows x K) saves
        args = make_inputs((8,), (8, 8, 8, 8), 64, bias=False)

        def fn(a, b, c, d, w):
            return F.linear(torch.cat([p * 2.0 for p in (a, b, c, d)], -1), w)

        self.common(fn, args, False)
        self.assertGreater(
            counters["inductor"]["cat_linear_weight_grad_extra_reads"], 0
        )

    @settings(max_examples=10, deadline=None, derandomize=True, database=None)
    @given(
        widths=st.lists(st.sampled_from([8, 16, 24]), min_size=2, max_size=4),
        lead=st.sampled_from([(5,), (2, 3)]),
        made=st.sampled_from(["relu", "first", "no_grad"]),
        frozen_parts=st.booleans(),
        bias=st.booleans(),
        dynamic_rows=st.booleans(),
        matmul=st.booleans(),
        two_heads=st.booleans(),
    )
    def test_weight_grad_generated(
        self, widths, lead, made, frozen_parts, bias, dynamic_rows, matmul, two_heads
    ):
        # eager's numbers, the gradients split exactly where the forward
        # sites are then taken, and never with a piece the caller holds
        def fn(*args):
            parts, w = list(args[: len(widths)]), args[len(widths)]
            b = args[-1] if bias else None
            if made == "no_grad":
                with torch.no_grad():
                    x = torch.cat([p * 2.0 for p in parts], -1)
            else:
                if made == "relu":
                    parts = [torch.relu(p) for p in parts]
                else:
                    parts[0] = torch.relu(parts[0])
                x = torch.cat(parts, -1)
            if matmul:  # cat @ W.T (+ b): the gradient's other form
                out = x @ w
                out = out if b is None else out + b
            else:
                out = F.linear(x, w, b)
            if two_heads:  # a second head on the cat, in the other form
                out = out + 0.5 * (F.linear(x, w.t()) if matmul else x @ w.t())
            return out

        n = 8
        args = make_inputs(lead, widths, n, bias=bias)
        if matmul:
            args[len(widths)] = args[len(widths)].detach().t().requires_grad_()
        for a in args[: len(widths)]:
            a.requires_grad_(not frozen_parts)
            if dynamic_rows:
                torch._dynamo.mark_dynamic(a, 0)
        self.common(fn, args, False if made == "first" else None)

    @parametrize("n,gather,split", [(64, True, True), (64, False, False)])
    def test_weight_grad_counts_gathered_pieces_as_saved(self, n, gather, split):
        # relu(a) is read by the cat and by its own backward, b[idx] * 2.0
        # (or b * 2.0) by the cat alone: a produced piece, which the split
        # forward writes to a buffer of its own.  It saves its trip through
        # the cat only where it loads through a gather.  At n = 64 the cat
        # (2 x 8 x 64 floats) saves more than the gradient's extra read of
        # grad (8 x n), relu(a)'s trip alone (2 x 8 x 16) less
        def fn(a, b, idx, w):
            piece = b[idx] if gather else b
            return F.linear(torch.cat([torch.relu(a), piece * 2.0], -1), w)

        a, b, w = make_inputs((8,), (16, 48), n, bias=False)
        idx = torch.randperm(8)
        self.common(fn, [a, b, idx, w], split)

    @requires_cuda_and_triton
    @parametrize(
        "n,gather,split", [(256, False, True), (576, True, True), (576, False, False)]
    )
    def test_weight_grad_cuda_counts_gathered_pieces_as_saved(self, n, gather, split):
        # as above on the device's own decision: relu(a) is read by its
        # backward too, b and c (gathered or not) times 2.0 by the cat alone;
        # at n = 576 the cat (2 x 1024 x 640) saves more than the gradient's
        # two extra reads of grad (2 x 1024 x n), relu(a)'s trip alone
        # (2 x 1024 x 512) less
        from torch._inductor.fx_passes import cat_linear_decision as cost

        widths = (512, 64, 64)
        site = cost.CatLinearSite(
            rows=1024,
            widths=widths,
            n=n,
            dtype=torch.bfloat16,
            device=torch.device("cuda"),
            produced=(False, True, True),
            gathers=(None, "rows", "rows") if gather else (),
        )
        if cost.decide(site).form != "mm":
            self.skipTest(f"this device's figures decline {site}")

        def fn(a, b, c, idx, w):
            b, c = (b[idx], c[idx]) if gather else (b, c)
            return F.linear(torch.cat([torch.relu(a), b * 2.0, c * 2.0], -1), w)

        a, b, c, w = make_inputs((1024,), widths, n, torch.bfloat16, "cuda", bias=False)
        idx = torch.randperm(1024, device="cuda")
        self.common(fn, [a, b, c, idx, w], split, None)

    @requires_cuda_and_triton
    @parametrize("matmul", [False, True])
    def test_weight_grad_split_cuda_template(self, matmul):
        # the forward site takes the in-place template
        def made_cat_matmul(a, b, w):
            return torch.cat([torch.relu(a), b * 2.0], dim=-1) @ w

        args = make_inputs(
            (256,), (64, 64), 96, torch.bfloat16, "cuda", bias=not matmul
        )
        fn = made_cat_linear
        if matmul:
            args[2] = args[2].detach().t().contiguous().requires_grad_()
            fn = made_cat_matmul
        forward, _ = self.common(fn, args, True, "mm")
        FileCheck().check("def triton_tem_").check_not("triton_poi_fused_cat").run(
            forward
        )


if __name__ == "__main__":
    if HAS_CPU:
        run_tests()
