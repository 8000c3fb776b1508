# Owner(s): ["module: inductor"]
"""
Differential fuzzing of the seed's explicit ``cat_linear`` entry points
(``fuse_cat_linear_in_graph`` and ``cat_linear_fused_pre_grad_pass``) against
eager, forward and backward.

They rewrite above autograd, in pre-grad graphs, into the ``"view"`` form
(per-piece linears on column views of W, summed).  Generated programs put
one of seven hazards next to a ``linear(cat(...))`` site; on each, the
rewritten program must give eager's outputs, gradients (``None`` where
eager's is ``None``) and inputs, also after the caller writes to an input or
an output between forward and backward:

1. ``grad_mode``: the cat under ``torch.no_grad()``, a part made under
   ``no_grad`` or ``inference_mode``, while the linear has gradients;
2. ``alias``: a part made by ``F.dropout`` in eval mode or with ``p=0``
   (it returns its input; the fake value looks fresh), the caller writes
   that input before the backward;
3. ``stale``: an inner site's output feeds an outer site and a view of it is
   returned; the pass runs twice on the graph, so the second run indexes a
   graph the first one rewrote;
4. ``out``: ``torch.cat(parts, -1, out=buf)``;
5. ``frozen``: parts that need no gradient, a weight that does;
6. ``half``: fp16/bf16 (the view form adds rounded per-piece products);
7. ``batch_norm``: ``F.batch_norm`` updating running stats that a part
   reads, between the cat and the linear.

Each hazard also has a pinned example below that failed before the entry
points declined it (see each test's comment).  The seed is fixed;
INDUCTOR_FUZZ_LONG=1 runs 10x as many cases.
"""

import dataclasses
import os
import unittest

import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config
from torch._inductor.fx_passes import cat_linear_fused
from torch._inductor.fx_passes.pre_grad import pre_grad_passes
from torch._inductor.test_case import run_tests, TestCase
from torch.testing._internal.common_utils import (
    instantiate_parametrized_tests,
    IS_LINUX,
    parametrize,
)
from torch.testing._internal.inductor_utils import HAS_CPU


try:
    from hypothesis import event, given, HealthCheck, settings, strategies as st

    HAS_HYPOTHESIS = True
except ImportError:  # pragma: no cover
    HAS_HYPOTHESIS = False

LONG = os.environ.get("INDUCTOR_FUZZ_LONG", "0") == "1"
SCALE = 10 if LONG else 1

TOL = {
    torch.float32: dict(atol=1e-4, rtol=1e-4),
    torch.float16: dict(atol=1e-2, rtol=1e-2),
    torch.bfloat16: dict(atol=5e-2, rtol=5e-2),
}

HAZARDS = (
    None,
    "no_grad_cat",
    "no_grad_part",
    "inference_part",
    "dropout_eval",
    "dropout_p0",
    "dropout_train",
    "stale",
    "out",
    "frozen",
    "half",
    "batch_norm",
)
# Producers of a part from its input; all but "input" make a fresh tensor.
PRODUCERS = ("relu", "mul", "sigmoid", "input")


@dataclasses.dataclass(frozen=True)
class Case:
    hazard: str | None
    widths: tuple
    rows: int
    n: int
    producers: tuple
    bias: bool = False
    dtype: torch.dtype = torch.float32
    target: int = 0  # the part the hazard is about
    passes: int = 1  # how often the pass runs on the graph
    backward: bool = True  # inputs require grad (not with out=, as in eager)

    @property
    def grad(self):
        return self.backward and self.hazard != "out"


def produce(kind, x):
    if kind == "relu":
        return torch.relu(x)
    if kind == "mul":
        return x * 2.0
    if kind == "sigmoid":
        return torch.sigmoid(x)
    return x


def build(case):
    """The program, its inputs, and what the caller does between forward
    and backward."""
    nparts, hz, j = len(case.widths), case.hazard, case.target
    dtype = case.dtype

    def fn(*args):
        xs, w = args[:nparts], args[nparts]
        b = args[nparts + 1] if case.bias else None
        extra = args[nparts + 1 + case.bias :]
        parts = [produce(p, x) for p, x in zip(case.producers, xs)]
        outs = []
        if hz == "no_grad_part":
            with torch.no_grad():
                parts[j] = xs[j] * 2.0
        elif hz == "inference_part":
            with torch.inference_mode():
                parts[j] = xs[j] * 2.0
        elif hz == "dropout_eval":
            parts[j] = F.dropout(xs[j], 0.5, False)
        elif hz == "dropout_p0":
            parts[j] = F.dropout(xs[j], 0.0, True)
        elif hz == "dropout_train":
            # a fresh tensor: the one dropout the rule takes as made here
            parts[j] = F.dropout(torch.relu(xs[j]), 0.5, True)
        elif hz == "batch_norm":
            rm, rv, z = extra
            parts[j] = rm.expand(xs[j].shape[0], -1)
        if hz == "no_grad_cat":
            with torch.no_grad():
                x = torch.cat(parts, -1)
        elif hz == "out":
            x = torch.cat(parts, -1, out=extra[0])
        else:
            x = torch.cat(parts, -1)
        if hz == "batch_norm":
            outs.append(F.batch_norm(z, rm, rv, training=True))
        y = F.linear(x, w, b)
        if hz == "stale":
            # y feeds an outer site; a view of it goes to the caller
            outs.append(y.view(-1))
            y = F.linear(torch.cat([y, torch.relu(extra[0])], -1), extra[1])
        return (y, *outs)

    torch.manual_seed(0)
    k, rows, n = sum(case.widths), case.rows, case.n
    xs = [torch.randn(rows, w, dtype=dtype) for w in case.widths]
    w = torch.randn(n, k, dtype=dtype) / k**0.5
    args = [*xs, w] + ([torch.randn(n, dtype=dtype)] if case.bias else [])
    grads = [case.grad] * len(args)
    if hz == "frozen":
        grads = [False] * nparts + [True] * (len(args) - nparts)
    if hz == "batch_norm":
        args += [torch.randn(case.widths[j]), torch.rand(case.widths[j]) + 0.5]
        args += [torch.randn(4, case.widths[j])]  # batch stats need 2+ rows
        grads += [False, False, False]
    elif hz == "out":
        args += [torch.empty(rows, k, dtype=dtype)]
        grads += [False]
    elif hz == "stale":
        args += [torch.randn(rows, 16, dtype=dtype)]
        args += [torch.randn(8, n + 16, dtype=dtype) / (n + 16) ** 0.5]
        grads += [True, True]

    def caller(args, outs):
        with torch.no_grad():
            if hz in ("dropout_eval", "dropout_p0"):
                args[j].add_(100.0)
            elif hz == "stale":
                outs[1].add_(100.0)

    return fn, [a.requires_grad_(g) for a, g in zip(args, grads)], caller


if HAS_HYPOTHESIS:

    @st.composite
    def cases(draw, hazard):
        nparts = draw(st.integers(2, 3))
        widths = draw(st.lists(st.integers(16, 40), min_size=nparts, max_size=nparts))
        producers = draw(
            st.lists(st.sampled_from(PRODUCERS), min_size=nparts, max_size=nparts)
        )
        half = st.sampled_from([torch.float16, torch.bfloat16])
        return Case(
            hazard=hazard,
            widths=tuple(widths),
            rows=draw(st.integers(1, 6)),
            n=draw(st.integers(1, 12)),
            producers=tuple(producers),
            bias=draw(st.booleans()),
            dtype=draw(half) if hazard == "half" else torch.float32,
            target=draw(st.integers(0, nparts - 1)),
            passes=draw(st.integers(1, 2)),
            backward=draw(st.booleans()),
        )

    def fuzz_settings(examples):
        return settings(
            max_examples=examples,
            derandomize=True,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )

else:  # keep the decorators importable

    def given(*a, **k):
        return lambda f: unittest.skip("needs hypothesis")(f)

    def fuzz_settings(examples):
        return lambda f: f

    def cases(hazard):
        return None

    class st:
        @staticmethod
        def sampled_from(values):
            return None

        @staticmethod
        def data():
            return None


def capture(fn, args):
    """Dynamo's pre-grad graph of ``fn``."""
    gms = []

    def backend(gm, example_inputs):
        gms.append(gm)
        return gm

    torch._dynamo.reset()
    torch.compile(fn, backend=backend, fullgraph=True)(
        *[a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    )
    return gms[0]


def explicit(passes=1):
    """A backend: ``fuse_cat_linear_in_graph`` ``passes`` times on dynamo's
    graph, which then runs under eager autograd.  ``fired`` counts the
    rewrites."""

    def backend(gm, example_inputs):
        for _ in range(passes):
            backend.fired += cat_linear_fused.fuse_cat_linear_in_graph(gm.graph)
        gm.graph.lint()
        gm.recompile()
        return gm

    backend.fired = 0
    return backend


def pre_grad_aot_eager(gm, example_inputs):
    """Inductor's pre-grad passes (custom passes included, as Inductor calls
    them), then AOTAutograd with eager kernels: no C++ compile."""
    gm = pre_grad_passes(gm, example_inputs)
    return torch._dynamo.lookup_backend("aot_eager")(gm, example_inputs)


@instantiate_parametrized_tests
class CatLinearFusedFuzzTest(TestCase):
    def stock(self, fn, args, path, backend):
        """``fn`` compiled the same way without the pass: the reference.  The
        pass must keep the meaning of the graph it is given; where dynamo's
        own graph differs from eager (under this test case's config, dynamo
        may move ``batch_norm``'s running-stat write ahead of a cat that reads
        the running mean), that is not the pass's doing."""
        torch._dynamo.reset()
        torch.manual_seed(2)
        if path == "graph":
            return torch.compile(fn, backend=explicit(0), fullgraph=True)(*args)
        return torch.compile(fn, backend=backend)(*args)

    def check(self, case, path="graph", backend=pre_grad_aot_eager):
        """Run ``case`` compiled without the pass and with it; assert they
        agree (and, where dynamo's graph matches eager, with eager).  Returns
        the number of sites rewritten."""
        fn, args, caller = build(case)
        ref_args = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
        counters.clear()
        got_args = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
        if path == "graph":
            torch._dynamo.reset()
            backend = explicit(case.passes)
            torch.manual_seed(2)
            got = torch.compile(fn, backend=backend, fullgraph=True)(*got_args)
            fired = backend.fired
        else:
            torch._dynamo.reset()
            p = cat_linear_fused.cat_linear_fused_pre_grad_pass
            if path == "assigned":
                with inductor_config.patch(pre_grad_custom_pass=p):
                    torch.manual_seed(2)
                    got = torch.compile(fn, backend=backend)(*got_args)
            else:
                from torch._inductor.custom_pass_registry import register_custom_pass

                handles = [
                    register_custom_pass("pre_grad_custom_pass", p, name=f"seed.{i}")
                    for i in range(case.passes)
                ]
                try:
                    torch.manual_seed(2)
                    got = torch.compile(fn, backend=backend)(*got_args)
                finally:
                    for h in handles:
                        h.remove()
            fired = counters["inductor"]["cat_linear_fused"]
        self.assertEqual(counters["inductor"]["cat_linear_fused"], fired)

        counters["inductor"]["cat_linear_fused"] = fired
        ref = self.stock(fn, ref_args, path, backend)
        self.assertEqual(counters["inductor"]["cat_linear_fused"], fired)
        caller(ref_args, ref)
        caller(got_args, got)
        tol = TOL[case.dtype]
        msg = f"fired={fired}: {case}"
        for o, r in zip(got, ref):
            self.assertEqual(o, r, **tol, msg=f"forward differs, {msg}")
        if case.grad:
            torch.manual_seed(1)
            gs = [torch.randn_like(r) for r in ref]
            torch.autograd.backward(
                [r for r in ref if r.requires_grad],
                [g for r, g in zip(ref, gs) if r.requires_grad],
            )
            torch.autograd.backward(
                [o for o in got if o.requires_grad],
                [g for o, g in zip(got, gs) if o.requires_grad],
            )
            for i, (a, r) in enumerate(zip(got_args, ref_args)):
                if r.grad is None:
                    self.assertIsNone(a.grad, msg=f"input {i} got a gradient, {msg}")
                else:
                    self.assertEqual(
                        a.grad, r.grad, **tol, msg=f"grad {i} differs, {msg}"
                    )
        for i, (a, r) in enumerate(zip(got_args, ref_args)):
            self.assertEqual(a.detach(), r.detach(), **tol, msg=f"input {i}, {msg}")
        return fired

    def plain(self, case):
        """``case`` without its hazard, as a control: rewritten."""
        return dataclasses.replace(case, hazard=None, dtype=torch.float32, passes=1)

    # ---- generated -----------------------------------------------------------

    # every hazard class gets its own examples: drawn from one strategy,
    # derandomized hypothesis would leave some out

    @parametrize("hazard", HAZARDS)
    @fuzz_settings(8 * SCALE)
    @given(data=st.data())
    def test_cat_linear_fused_fuzz_explicit_graph(self, hazard, data):
        case = data.draw(cases(hazard))
        fired = self.check(case)
        event(f"rewrote={bool(fired)}")
        if case.hazard in (None, "dropout_train", "frozen") and (
            "input" not in case.producers
        ):
            # nothing unsafe and every part made in the graph
            self.assertEqual(fired, 1, msg=f"declined a plain site: {case}")
        if case.hazard == "half":
            self.assertEqual(fired, 0, msg=f"16-bit view form: {case}")

    @fuzz_settings(12 * SCALE)
    @given(
        hazard=st.sampled_from(HAZARDS),
        path=st.sampled_from(["assigned", "registered"]),
        data=st.data(),
    )
    def test_cat_linear_fused_fuzz_pre_grad_pass(self, hazard, path, data):
        case = data.draw(cases(hazard))
        fired = self.check(case, path=path)
        event(f"{path} hazard={hazard} rewrote={bool(fired)}")

    # ---- pinned: one per hazard, each failed before it was declined ---------

    def pinned(self, case, fired, path="graph"):
        self.assertEqual(self.check(case, path=path), fired)
        if case.hazard != "half":
            # the same site without the hazard is rewritten, and right
            self.assertGreaterEqual(self.check(self.plain(case), path=path), 1)

    def test_cat_linear_fused_grad_mode_no_grad_cat(self):
        # 1. A linear probe on frozen encoders: eager leaves the encoders'
        # inputs without gradients; the view form, rewritten where grad mode
        # is on again, trained them (x0.grad was a tensor).
        case = Case("no_grad_cat", (16, 16), 4, 8, ("relu", "mul"))
        self.pinned(case, 0)
        self.pinned(case, 0, path="assigned")

    def test_cat_linear_fused_grad_mode_no_grad_cat_inductor(self):
        # 1. The same through the whole Inductor compile (one C++ compile).
        case = Case("no_grad_cat", (16, 16), 4, 8, ("relu", "mul"))
        self.assertEqual(self.check(case, path="assigned", backend="inductor"), 0)

    def test_cat_linear_fused_grad_mode_inference_part(self):
        # 1. A part made under inference_mode: the view form saved the
        # inference tensor for backward ("Inference tensors cannot be saved
        # for backward"), where eager saves the cat.
        self.pinned(Case("inference_part", (16, 24), 3, 8, ("relu", "relu")), 0)

    def test_cat_linear_fused_dropout_eval_aliases_input(self):
        # 2. F.dropout in eval mode returns its input; the fake value looks
        # fresh.  The view form saved the caller's x0, which the caller then
        # wrote: w.grad was off (eager saves the cat).
        case = Case("dropout_eval", (16, 16), 4, 8, ("relu", "relu"))
        self.pinned(case, 0)
        # (Inductor's pre-grad passes drop an eval-mode dropout before the
        # custom pass runs, so this path saw the caller's input and declined
        # before too.)
        self.pinned(case, 0, path="assigned")

    def test_cat_linear_fused_dropout_p0_aliases_input(self):
        # 2. The same with p=0 in training.
        self.pinned(Case("dropout_p0", (16, 32), 2, 4, ("mul", "relu")), 0)

    def test_cat_linear_fused_stale_after_earlier_rewrite(self):
        # 3. The pass runs twice on one graph (registered under two names).
        # The first run rewrites the inner site and declines the outer one
        # (its part's view is returned); the second run's index saw the
        # rewritten inner site as a fresh tensor unrelated to the returned
        # view, rewrote the outer site, and the caller's write to the view
        # reached the saved part: eager autograd raised (a saved tensor was
        # modified), and through AOTAutograd w2.grad was silently off.
        case = Case("stale", (16, 16), 4, 16, ("relu", "mul"), passes=2)
        self.assertEqual(self.check(case), 1)
        self.assertEqual(self.check(case, path="registered"), 1)
        self.assertEqual(self.check(dataclasses.replace(case, hazard=None)), 1)

    def test_cat_linear_fused_cat_out(self):
        # 4. torch.cat(parts, -1, out=buf): the cat was erased and buf never
        # written.
        self.pinned(Case("out", (16, 16), 4, 8, ("relu", "mul")), 0)

    def test_cat_linear_fused_frozen_parts_trainable_weight(self):
        # 5. Parts that need no gradient, a weight that does: rewritten, and
        # only the weight (and bias) get gradients.  (The view form was right
        # here before too; the op form crashed in backward.)
        case = Case("frozen", (16, 16), 4, 8, ("relu", "mul"), bias=True)
        self.assertEqual(self.check(case), 1)
        self.assertEqual(self.check(case, path="assigned"), 1)

    def test_cat_linear_fused_fp16_declined(self):
        # 6. fp16 pieces whose products overflow on their own but cancel in
        # the whole sum: eager gives 0, the view form inf - inf = nan.
        case = Case("half", (16, 16), 1, 1, ("mul", "mul"), dtype=torch.float16)
        fn, args, _ = build(case)
        a, b, w = (t.detach() for t in args)
        a.fill_(32.0)
        b.fill_(32.0)
        w[:, :16] = 80.0
        w[:, 16:] = -80.0
        torch._dynamo.reset()
        backend = explicit()
        got = torch.compile(fn, backend=backend)(a, b, w)[0]
        self.assertEqual(fn(a, b, w)[0], torch.zeros(1, 1, dtype=torch.float16))
        self.assertEqual(got, fn(a, b, w)[0])
        self.assertEqual(backend.fired, 0)
        for dtype in (torch.float16, torch.bfloat16):
            self.assertEqual(self.check(dataclasses.replace(case, dtype=dtype)), 0)
        self.assertEqual(self.check(self.plain(case)), 1)

    def test_cat_linear_fused_batch_norm_running_stats(self):
        # 7. F.batch_norm(training=True) updates running_mean between the cat
        # and the linear, and a part reads running_mean: the view form read
        # it updated (forward only: with gradients the part, a view of an
        # input, is the caller's and declined for that).
        case = Case("batch_norm", (16, 16), 4, 8, ("relu", "relu"), target=1)
        fn, args, _ = build(case)
        order = [n.target for n in capture(fn, args).graph.nodes]
        if order.index(F.batch_norm) < order.index(torch.cat):
            # the graph the pass is given has no write between cat and linear
            self.skipTest("dynamo orders the running-stat write before the cat")
        self.pinned(dataclasses.replace(case, backward=False), 0)
        self.pinned(case, 0)

    def test_cat_linear_fused_mutation_by_schema(self):
        # 7. What the aten ops a node dispatches write, by their schemas.
        graph = capture(
            lambda x, m, v: F.batch_norm(x, m, v, training=True) + x.add_(1.0),
            [torch.randn(4, 8), torch.zeros(8), torch.ones(8)],
        ).graph
        found = {
            n.name for n in graph.nodes if cat_linear_fused.is_possible_mutation(n)
        }
        self.assertEqual(len(found), 2, msg=found)  # batch_norm and add_
        graph = capture(
            lambda x, m, v: F.batch_norm(x, m, v, training=False) + x.add(1.0),
            [torch.randn(4, 8), torch.zeros(8), torch.ones(8)],
        ).graph
        self.assertFalse(
            any(cat_linear_fused.is_possible_mutation(n) for n in graph.nodes)
        )


if __name__ == "__main__":
    if IS_LINUX and HAS_CPU:
        run_tests()
