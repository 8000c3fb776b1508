# Owner(s): ["module: inductor"]
"""
Differential fuzzing of the da8w4 concat-linear post-grad pass.

Property: for generated groups of ``torchao::da8w4_linear_cpu`` calls the
fused result is bit-identical to the unfused one.  Two levels:

* the pass applied to generated frozen post-grad graphs (cheap, many cases):
  the graph module's outputs before and after the pass are ``torch.equal``;
* whole compiles (freezing on) with ``config.cpp.enable_concat_linear`` on vs
  off: ``torch.equal`` outputs, for a first and (dynamic M) a second M.

Cases vary the number of calls, whether calls share the activation, its
scales and its zero points, output features, group sizes, bias on some calls,
positional or keyword arguments, the output dtype, 2-D or 3-D activations,
dynamic M, the consumers of the outputs and other users of the activation.

Like test_da8w4_concat_linear.py, this file uses a registered CPU kernel for
the op when there is one, and otherwise registers a pure-PyTorch reference
implementation of the op's math (the same as that file's) in a test-local
library.  The seed is fixed; INDUCTOR_FUZZ_LONG=1 runs 10x as many cases.
"""

import dataclasses
import os
import unittest

import torch
import torch.nn as nn
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config
from torch._inductor.test_case import run_tests, TestCase
from torch.testing._internal.common_utils import IS_LINUX
from torch.testing._internal.inductor_utils import HAS_CPU


try:
    from hypothesis import event, given, HealthCheck, settings, strategies as st

    HAS_HYPOTHESIS = True
except ImportError:  # pragma: no cover
    HAS_HYPOTHESIS = False

LONG = os.environ.get("INDUCTOR_FUZZ_LONG", "0") == "1"
SCALE = 10 if LONG else 1


# The op, its reference kernel and the quantization helpers are the patch's
# main test file's (one copy, one registration when both files run together).
try:
    from .test_da8w4_concat_linear import (
        _as_tuple,
        _ensure_ops,
        _quantize_act,
        _quantize_weight,
    )
except ImportError:
    from test_da8w4_concat_linear import (  # type: ignore[no-redef]
        _as_tuple,
        _ensure_ops,
        _quantize_act,
        _quantize_weight,
    )


ARG_NAMES = (
    "input",
    "input_scales",
    "input_qzeros",
    "weight",
    "weight_scales",
    "weight_qzeros",
    "compensation",
    "bias",
    "output_dtype",
)
CONSUMERS = ("output", "add", "view_flat", "transpose")


@dataclasses.dataclass(frozen=True)
class Call:
    act: int  # which activation (0 or 1)
    own_scales: bool  # its own input_scales node (different values)
    own_zp: bool  # its own input_qzeros node
    n: int
    group_size: int
    bias: bool
    kwargs: bool
    other_out_dtype: bool  # bf16 output where the activation is fp32, and vice versa
    consumer: str


@dataclasses.dataclass(frozen=True)
class Case:
    k: int
    m: int
    three_d: bool
    dtype: torch.dtype
    symmetric: bool
    foreign_user: bool  # another user of activation 0's quantized tensor
    dynamic: bool
    calls: tuple


def _out_dtype(case, call):
    if not call.other_out_dtype:
        return case.dtype
    return torch.float32 if case.dtype == torch.bfloat16 else torch.bfloat16


class FuzzModule(nn.Module):
    """The case as torchao's flow writes it: every call quantizes its
    activation itself (freezing's CSE merges equal chains)."""

    def __init__(self, case, share_quantization=False):
        super().__init__()
        self.case = case
        # True: quantize each activation once (what freezing's CSE makes of
        # the per-call chains), for graphs traced without Inductor
        self.share_quantization = share_quantization
        for i, c in enumerate(case.calls):
            q, scale, zp = _quantize_weight(torch.randn(c.n, case.k), c.group_size)
            packed = torch.ops.torchao.da8w4_linear_prepack_cpu(q, scale, zp)
            for name, t in zip(("qweight", "qscales", "qzeros", "comp"), packed):
                self.register_buffer(f"{name}{i}", t)
            b = nn.Parameter(torch.randn(c.n), requires_grad=False) if c.bias else None
            self.register_parameter(f"bias{i}", b)

    def quantized(self, x, act):
        case = self.case
        x = x if act == 0 else x * 2
        xq, xs, xz = _quantize_act(x.reshape(-1, case.k), case.symmetric)
        if case.three_d:
            xq = xq.view(*x.shape[:-1], case.k)
        return xq, xs, xz

    def forward(self, x):
        case, outs, memo = self.case, [], {}
        quantized = self.quantized
        if self.share_quantization:

            def quantized(x, act):
                if act not in memo:
                    memo[act] = self.quantized(x, act)
                return memo[act]

        for i, c in enumerate(case.calls):
            xq, xs, xz = quantized(x, c.act)
            if c.own_scales:
                xs = xs * (1 + (i + 1) / 4)
            if c.own_zp:
                xz = xz + 1
            b = getattr(self, f"bias{i}")
            values = (
                xq,
                xs,
                xz,
                getattr(self, f"qweight{i}"),
                getattr(self, f"qscales{i}"),
                getattr(self, f"qzeros{i}"),
                getattr(self, f"comp{i}"),
                None if b is None else b.float(),
                _out_dtype(case, c),
            )
            op = torch.ops.torchao.da8w4_linear_cpu.default
            y = op(**dict(zip(ARG_NAMES, values))) if c.kwargs else op(*values)
            outs.append(consume(y, c.consumer))
        if case.foreign_user:
            outs.append(quantized(x, 0)[0].float().sum(-1))
        return tuple(outs)


def consume(y, consumer):
    if consumer == "add":
        return y + 1
    if consumer == "view_flat":
        return y.view(-1)
    if consumer == "transpose":
        return y.transpose(-1, -2)
    return y


if HAS_HYPOTHESIS:

    @st.composite
    def cases(draw, max_calls=4):
        k = draw(st.sampled_from([64, 128]))
        group_size = draw(st.sampled_from([32, 64]))
        n_calls = draw(st.integers(2, max_calls))
        # Most calls are compatible; a few deviate in one grouping key.
        deviations = [None] * 8 + ["act", "scales", "zp", "out_dtype", "group_size"]
        calls = []
        for _ in range(n_calls):
            dev = draw(st.sampled_from(deviations))
            calls.append(
                Call(
                    act=int(dev == "act"),
                    own_scales=dev == "scales",
                    own_zp=dev == "zp",
                    n=draw(st.sampled_from([32, 64, 96])),
                    group_size=96 - group_size if dev == "group_size" else group_size,
                    bias=draw(st.booleans()),
                    kwargs=draw(st.booleans()),
                    other_out_dtype=dev == "out_dtype",
                    consumer=draw(st.sampled_from(CONSUMERS)),
                )
            )
        calls = tuple(calls)
        return Case(
            k=k,
            m=draw(st.integers(1, 6)),
            three_d=draw(st.booleans()),
            dtype=draw(st.sampled_from([torch.float32, torch.bfloat16])),
            symmetric=draw(st.booleans()),
            foreign_user=draw(st.booleans()),
            dynamic=draw(st.booleans()),
            calls=calls,
        )

    def fuzz_settings(examples):
        return settings(
            max_examples=examples,
            derandomize=True,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        )
else:

    def given(*a, **k):
        return lambda f: unittest.skip("needs hypothesis")(f)

    def fuzz_settings(examples):
        return lambda f: f

    def cases(max_calls=4):
        return None


def make_input(case, m=None):
    m = case.m if m is None else m
    lead = (2, m) if case.three_d else (m,)
    return torch.randn(*lead, case.k, dtype=case.dtype)


def frozen_post_grad_graph(mod, x):
    """The frozen post-grad graph of ``mod`` as the pass sees it: the
    activation quantization traced to ATen, the da8w4 calls on get_attr
    constants, FakeTensor metadata on every node."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    with torch.no_grad():
        gm = make_fx(mod)(x)
    # make_fx lifts module buffers to get_attr nodes already (frozen form)
    fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    FakeTensorProp(gm, fake_mode).propagate(fake_mode.from_tensor(x))
    return gm


def _equal(testcase, a, b, case):
    a, b = _as_tuple(a), _as_tuple(b)
    testcase.assertEqual(len(a), len(b))
    for x, y in zip(a, b):
        testcase.assertEqual((x.shape, x.dtype), (y.shape, y.dtype), msg=str(case))
        testcase.assertTrue(torch.equal(x, y), f"fused differs from unfused: {case}")


class Da8w4ConcatLinearFuzzTest(TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.backend = _ensure_ops()

    def run_pass_case(self, case):
        """The pass on the frozen graph: outputs before == after, exactly."""
        from torch._inductor.fx_passes.da8w4_concat_linear import (
            da8w4_concat_linear_pass,
        )

        torch.manual_seed(0)
        mod = FuzzModule(case, share_quantization=True).eval()
        x = make_input(case)
        gm = frozen_post_grad_graph(mod, x)
        with torch.no_grad():
            before = gm(x)
        counters.clear()
        with inductor_config.patch(freezing=True):
            da8w4_concat_linear_pass(gm)
        gm.graph.lint()
        gm.recompile()
        fused = counters["inductor"]["da8w4_concat_linear"]
        event(f"pass: fused groups={fused}")
        with torch.no_grad():
            _equal(self, before, gm(x), case)
        return fused

    def compile_once(self, mod, inputs, concat, dynamic):
        torch._dynamo.reset()
        counters.clear()
        with (
            inductor_config.patch(
                {"freezing": True, "cpp.enable_concat_linear": concat}
            ),
            torch.no_grad(),
        ):
            x = inputs[0].clone()
            if dynamic:
                torch._dynamo.mark_dynamic(x, 1 if x.dim() == 3 else 0)
            fn = torch.compile(mod)
            outs = [fn(x)] + [fn(i) for i in inputs[1:]]
        return outs, counters["inductor"]["da8w4_concat_linear"]

    def run_compile_case(self, case):
        """Whole compiles: concat-linear on vs off, bit-identical."""
        torch.manual_seed(0)
        mod = FuzzModule(case).eval()
        inputs = [make_input(case)]
        if case.dynamic:
            inputs.append(make_input(case, m=case.m + 3))
        ref, ref_fused = self.compile_once(mod, inputs, False, case.dynamic)
        self.assertEqual(ref_fused, 0)
        out, fused = self.compile_once(mod, inputs, True, case.dynamic)
        event(f"compile: fused groups={fused}")
        for a, b in zip(ref, out):
            _equal(self, a, b, case)
        return fused

    @fuzz_settings(50 * SCALE)
    @given(case=cases())
    def test_da8w4_concat_linear_fuzz_pass(self, case):
        self.run_pass_case(case)

    @fuzz_settings(2 * SCALE)
    @given(case=cases(max_calls=3))
    def test_da8w4_concat_linear_fuzz_compile(self, case):
        self.run_compile_case(case)


if __name__ == "__main__":
    if IS_LINUX and HAS_CPU:
        run_tests()
