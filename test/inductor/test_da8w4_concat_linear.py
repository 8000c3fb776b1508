# Owner(s): ["module: inductor"]
"""
Tests for the post-grad pass that concatenates ``torchao::da8w4_linear_cpu``
calls sharing a quantized activation (``config.cpp.enable_concat_linear`` with
freezing).  The pass is a client of the custom pass registry: this module
registers it once (``register_da8w4_concat_linear_cpu_pass``), as torchao's
quantization flow would.

The op comes from torchao's CPU kernels.  When no CPU kernel is registered,
this file defines the op's schema (if needed), a pure-PyTorch reference CPU
implementation of its math and a fake kernel in a test-local
``torch.library.Library``, so the pass is exercised without them too.
"""

import logging
import operator
import unittest

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config
from torch._inductor.custom_graph_pass import CustomGraphPass
from torch._inductor.fx_passes import da8w4_concat_linear as pass_module
from torch._inductor.test_case import run_tests, TestCase
from torch._inductor.utils import run_and_get_code
from torch.testing import FileCheck
from torch.testing._internal.common_utils import (
    instantiate_parametrized_tests,
    IS_LINUX,
    parametrize,
)
from torch.testing._internal.inductor_utils import HAS_CPU


try:
    from torch._inductor.custom_pass_registry import (
        custom_pass_cache_details,
        list_custom_passes,
        register_custom_pass,
    )

    HAS_REGISTRY = True
except ImportError:  # a torch without the registry: the pass is assigned
    HAS_REGISTRY = False
NEEDS_REGISTRY = "needs torch._inductor.custom_pass_registry"


try:  # optional: torchao's own quantization flow
    from torchao.prototype.quantization.int4 import (
        Int8DynamicActivationInt4WeightConfig,
    )
    from torchao.quantization import quantize_

    HAS_TORCHAO = True
except Exception:  # not installed, or a build incompatible with this torch
    HAS_TORCHAO = False


BLOCK_N = 32
OP_STR = "torch.ops.torchao.da8w4_linear_cpu.default("

_LINEAR_SCHEMA = (
    "da8w4_linear_cpu(Tensor input, Tensor input_scales, Tensor input_qzeros, "
    "Tensor weight, Tensor weight_scales, Tensor weight_qzeros, "
    "Tensor compensation, Tensor? bias, ScalarType output_dtype) -> Tensor"
)
_PREPACK_SCHEMA = (
    "da8w4_linear_prepack_cpu(Tensor weight, Tensor scales, Tensor qzeros) "
    "-> (Tensor, Tensor, Tensor, Tensor)"
)


def _has_op(name):
    return (
        torch._C._dispatch_has_kernel_for_dispatch_key(f"torchao::{name}", "CPU")
        if _has_schema(name)
        else False
    )


def _has_schema(name):
    try:
        torch._C._dispatch_find_schema_or_throw(f"torchao::{name}", "")
    except RuntimeError:
        return False
    return True


def _block_k(k, groups):
    return min(k // groups, 128)


def _ref_prepack(weight, scales, qzeros):
    """Plain (non-AMX) nibble layout: tile byte k*BN/2 + n/2, even n low."""
    n, k = weight.shape
    if scales.dim() == 1:
        scales = scales.unsqueeze(1)
        qzeros = qzeros.unsqueeze(1)
    groups = scales.shape[1]
    bk = _block_k(k, groups)
    nc, kc = n // BLOCK_N, k // bk
    w = weight.to(torch.uint8)
    tile = w.view(nc, BLOCK_N, kc, bk).permute(0, 2, 3, 1)  # [Nc, Kc, BK, BN]
    packed = (tile[..., 0::2] | (tile[..., 1::2] << 4)).contiguous()
    blocked_scales = scales.float().view(nc, BLOCK_N, groups).transpose(1, 2)
    blocked_zeros = qzeros.to(torch.int8).view(nc, BLOCK_N, groups).transpose(1, 2)
    zp_per_block = qzeros.to(torch.int32).repeat_interleave(kc // groups, dim=1)
    comp = w.to(torch.int32).view(n, kc, bk).sum(-1) - bk * zp_per_block
    comp = comp.view(nc, BLOCK_N, kc).transpose(1, 2)
    return (
        packed,
        blocked_scales.contiguous(),
        blocked_zeros.contiguous(),
        comp.contiguous().to(torch.int32),
    )


def _ref_linear(
    input,
    input_scales,
    input_qzeros,
    weight,
    weight_scales,
    weight_qzeros,
    compensation,
    bias,
    output_dtype,
):
    """The op's math: exact int32 per k-block, then fp32 dequant in order."""
    nc, kc, bk, half_bn = weight.shape
    bn = half_bn * 2
    n, k = nc * bn, kc * bk
    groups = weight_scales.shape[1]
    m = input.numel() // k
    a = input.reshape(m, k).to(torch.float64)
    if input.dtype == torch.uint8:
        a = a - input_qzeros.reshape(m, 1).to(torch.float64)
    tile = torch.stack([weight & 0xF, weight >> 4], dim=-1).reshape(nc, kc, bk, bn)
    w = tile.permute(0, 3, 1, 2).reshape(n, kc, bk).to(torch.float64)
    zw = weight_qzeros.transpose(1, 2).reshape(n, groups).to(torch.float64)
    sw = weight_scales.transpose(1, 2).reshape(n, groups)
    per_group = kc // groups
    zw = zw.repeat_interleave(per_group, dim=1)  # [N, Kc]
    sw = sw.repeat_interleave(per_group, dim=1)
    w = w - zw.unsqueeze(-1)
    partial = torch.einsum("mcb,ncb->cmn", a.view(m, kc, bk), w).float()
    sa = input_scales.reshape(m, 1).float()
    acc = torch.zeros(m, n) if bias is None else bias.float().expand(m, n).clone()
    for c in range(kc):
        acc = acc + (partial[c] * sa) * sw[:, c]
    return acc.to(output_dtype).reshape(*input.shape[:-1], n)


def _fake_linear(input, input_scales, input_qzeros, weight, *args):
    output_dtype = args[-1]
    n = weight.size(0) * weight.size(3) * 2
    return input.new_empty((*input.shape[:-1], n), dtype=output_dtype)


_REFERENCE_LIB = None


def setUpModule():
    pass_module.register_da8w4_concat_linear_cpu_pass()


def tearDownModule():
    handle = pass_module.register_da8w4_concat_linear_cpu_pass()
    if handle is not None:
        handle.remove()
    else:
        inductor_config.post_grad_custom_post_pass = None


def _ensure_ops():
    """Use the registered CPU kernel if there is one; else the reference."""
    global _REFERENCE_LIB
    if _has_op("da8w4_linear_cpu") and _has_op("da8w4_linear_prepack_cpu"):
        return "kernel"
    if _REFERENCE_LIB is None:
        lib = torch.library.Library("torchao", "FRAGMENT")  # noqa: TOR901
        if not _has_schema("da8w4_linear_prepack_cpu"):
            lib.define(_PREPACK_SCHEMA)
        if not _has_schema("da8w4_linear_cpu"):
            lib.define(_LINEAR_SCHEMA)
        lib.impl("da8w4_linear_prepack_cpu", _ref_prepack, "CPU")
        lib.impl("da8w4_linear_cpu", _ref_linear, "CPU")
        try:
            torch.library.register_fake(
                "torchao::da8w4_linear_cpu", _fake_linear, lib=lib
            )
        except RuntimeError as e:
            # torchao defines the op with its own fake impl, which older torch
            # does not let another registration override: use that one.
            if "fake impl registered" not in str(e):
                raise
        _REFERENCE_LIB = lib
    return "reference"


def _as_tuple(out):
    return (out,) if isinstance(out, torch.Tensor) else tuple(out)


def _quantize_weight(w, group_size):
    """Asymmetric per-group uint4 (0..15), as torchao's from_hp_da8w4."""
    n, k = w.shape
    g = w.view(n, k // group_size, group_size)
    minv = g.amin(-1).clamp(max=0)
    maxv = g.amax(-1).clamp(min=0)
    scale = ((maxv - minv) / 15).clamp(min=1e-6)
    zp = (-torch.round(minv / scale)).clamp(0, 15)
    q = (torch.round(g / scale.unsqueeze(-1)) + zp.unsqueeze(-1)).clamp(0, 15)
    return q.view(n, k).to(torch.uint8), scale.float(), zp.to(torch.int8)


def _quantize_act(x, symmetric):
    """Dynamic per-token quantization of a 2-D activation, as torchao does."""
    eps = torch.finfo(torch.float32).eps
    if symmetric:
        amax = x.abs().amax(-1, keepdim=True)
        scale = (amax / 127).clamp(min=eps).float()
        q = torch.round(x / scale).clamp(-127, 127).to(torch.int8)
        zp = torch.zeros_like(scale, dtype=torch.int32)
    else:
        minv = x.amin(-1, keepdim=True).clamp(max=0)
        maxv = x.amax(-1, keepdim=True).clamp(min=0)
        scale = ((maxv - minv) / 255).clamp(min=eps).float()
        zp = (-torch.round(minv / scale)).clamp(0, 255).to(torch.int32)
        q = (torch.round(x / scale) + zp).clamp(0, 255).to(torch.uint8)
    return q.contiguous(), scale.reshape(-1), zp.reshape(-1)


class Da8w4Linears(nn.Module):
    """Several da8w4 linears on one input, the way torchao's flow calls them.

    Each linear quantizes the activation itself; freezing's CSE merges those
    chains so the calls share one quantized activation.
    """

    def __init__(
        self,
        k,
        out_features,
        bias=False,
        group_sizes=None,
        symmetric=False,
        keep_3d=False,
        use_kwargs=False,
    ):
        super().__init__()
        self.k = k
        self.out_features = list(out_features)
        self.symmetric = symmetric
        self.keep_3d = keep_3d
        self.use_kwargs = use_kwargs
        if not isinstance(bias, (list, tuple)):
            bias = [bias] * len(self.out_features)
        group_sizes = group_sizes or [32] * len(self.out_features)
        for i, (n, gs) in enumerate(zip(self.out_features, group_sizes)):
            q, scale, zp = _quantize_weight(torch.randn(n, k), gs)
            packed = torch.ops.torchao.da8w4_linear_prepack_cpu(q, scale, zp)
            for name, t in zip(("qweight", "qscales", "qzeros", "comp"), packed):
                self.register_buffer(f"{name}{i}", t)
            b = nn.Parameter(torch.randn(n), requires_grad=False) if bias[i] else None
            self.register_parameter(f"bias{i}", b)

    def linear(self, x, i, output_dtype=None):
        x2 = x.reshape(-1, self.k)
        xq, xs, xz = _quantize_act(x2, self.symmetric)
        if self.keep_3d:
            xq = xq.view(*x.shape[:-1], self.k)
        b = getattr(self, f"bias{i}")
        args = dict(
            input=xq,
            input_scales=xs,
            input_qzeros=xz,
            weight=getattr(self, f"qweight{i}"),
            weight_scales=getattr(self, f"qscales{i}"),
            weight_qzeros=getattr(self, f"qzeros{i}"),
            compensation=getattr(self, f"comp{i}"),
            bias=None if b is None else b.float(),
            output_dtype=output_dtype or x.dtype,
        )
        op = torch.ops.torchao.da8w4_linear_cpu.default
        y = op(**args) if self.use_kwargs else op(*args.values())
        return y.reshape(*x.shape[:-1], self.out_features[i])

    def forward(self, x):
        return [self.linear(x, i) for i in range(len(self.out_features))]


@instantiate_parametrized_tests
class Da8w4ConcatLinearTest(TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.backend = _ensure_ops()

    def _compile(
        self, mod, *inputs, concat=True, freezing=True, dynamic=None, more_inputs=()
    ):
        torch._dynamo.reset()
        counters.clear()
        with (
            inductor_config.patch(
                {"freezing": freezing, "cpp.enable_concat_linear": concat}
            ),
            torch.no_grad(),
        ):
            fn = torch.compile(mod, dynamic=dynamic)
            out, (code,) = run_and_get_code(fn, *inputs)
            ctrs = dict(counters["inductor"])
            extra = [fn(*i) for i in more_inputs]
        return out, code, ctrs, extra

    def common(
        self,
        mod,
        inputs,
        expected_calls,
        expected_fusions,
        more_inputs=(),
        dynamic=None,
    ):
        """Fused vs unfused compile: bit-identical; op count; counters.

        Without an expected fusion the graph is the unfused one, so only the
        counters, the op count and eager parity are checked.
        """
        more_inputs = [tuple(i) for i in more_inputs]
        if expected_fusions:
            ref, _, ref_counters, ref_extra = self._compile(
                mod, *inputs, concat=False, dynamic=dynamic, more_inputs=more_inputs
            )
            self.assertEqual(ref_counters.get("da8w4_concat_linear", 0), 0)
        out, code, fused_counters, extra = self._compile(
            mod, *inputs, concat=True, dynamic=dynamic, more_inputs=more_inputs
        )
        self.assertEqual(
            fused_counters.get("da8w4_concat_linear", 0), expected_fusions, msg=code
        )
        FileCheck().check_count(OP_STR, expected_calls, exactly=True).run(code)
        # Each fused call reads concatenated constants; nothing else does.
        fused_calls = [
            line
            for line in code.splitlines()
            if OP_STR in line and "_da8w4_concat_weight," in line
        ]
        self.assertEqual(len(fused_calls), expected_fusions)
        if expected_fusions:
            for a, b in zip([ref, *ref_extra], [out, *extra]):
                a, b = _as_tuple(a), _as_tuple(b)
                for x, y in zip(a, b):
                    self.assertEqual(x.shape, y.shape)
                    self.assertEqual(x.dtype, y.dtype)
                    self.assertTrue(torch.equal(x, y), "fused differs from unfused")
        # And close to eager: the compiled activation quantization may round
        # a value to the neighbouring step, so allow a few steps of error.
        with torch.no_grad():
            eager = mod(*inputs)
        self.assertClose(eager, out)
        return code

    def assertClose(self, eager, out):
        for x, y in zip(_as_tuple(eager), _as_tuple(out)):
            atol = 2e-2 * x.float().abs().max().item()
            self.assertEqual(x.float(), y.float(), atol=atol, rtol=0)

    @parametrize("bias,symmetric", [(True, False), (False, True)])
    def test_da8w4_concat_linear_qkv(self, bias, symmetric):
        torch.manual_seed(0)
        mod = Da8w4Linears(64, [64, 32, 32], bias=bias, symmetric=symmetric).eval()
        self.common(mod, (torch.randn(4, 64),), expected_calls=1, expected_fusions=1)

    def test_da8w4_concat_linear_copy_cost_gate(self):
        # Returned QKV outputs must be copied out of the fused buffer when M > 1.
        # Small M: the copies are cheaper than the saved calls, fuse.  Larger M:
        # they cost more than the calls they save, keep the calls.
        from torch._inductor.fx_passes import da8w4_concat_linear as pass_mod

        torch.manual_seed(0)
        features = [2048, 1024, 1024]
        mod = Da8w4Linears(64, features).eval()
        self.common(mod, (torch.randn(4, 64),), expected_calls=1, expected_fusions=1)
        # 2 calls saved are worth 2 * saved_bytes_per_call(); all three strided
        # outputs (fp32) need copies: M just above that, below MAX_FUSED_ROWS.
        rows = 2 * pass_mod.saved_bytes_per_call() // (sum(features) * 4) + 1
        self.assertLess(rows, pass_mod.MAX_FUSED_ROWS)
        with self.assertLogs(pass_mod.log, level=logging.DEBUG) as cm:
            self.common(
                mod, (torch.randn(rows, 64),), expected_calls=3, expected_fusions=0
            )
        self.assertIn("bytes of copies", "\n".join(cm.output))

        # The same M with consumers that read strided views: no copy, fuse.
        class Pointwise(Da8w4Linears):
            def forward(self, x):
                return sum(y.sum(-1) for y in super().forward(x))

        mod = Pointwise(64, features).eval()
        self.common(mod, (torch.randn(rows, 64),), expected_calls=1, expected_fusions=1)

    def test_da8w4_concat_linear_copy_cost_gate_threads(self):
        # A saved call is worth more copy bytes with more threads: an M the gate
        # declines at 2 threads fuses at 16, up to the budget grown by 16 / 2.
        from torch._inductor.fx_passes import da8w4_concat_linear as pass_mod

        torch.manual_seed(0)
        features = [2048, 1024, 1024]
        mod = Da8w4Linears(64, features).eval()
        per_row = sum(features) * 4  # three strided fp32 outputs
        rows = 2 * pass_mod.SAVED_BYTES_PER_CALL // per_row + 1
        with inductor_config.patch({"cpp.threads": 1}):
            self.assertEqual(
                pass_mod.saved_bytes_per_call(), pass_mod.SAVED_BYTES_PER_CALL
            )
        with inductor_config.patch({"cpp.threads": 2}):
            self.assertEqual(
                pass_mod.saved_bytes_per_call(), pass_mod.SAVED_BYTES_PER_CALL
            )
            self.common(
                mod, (torch.randn(rows, 64),), expected_calls=3, expected_fusions=0
            )
        with inductor_config.patch({"cpp.threads": 16}):
            self.assertEqual(
                pass_mod.saved_bytes_per_call(), 8 * pass_mod.SAVED_BYTES_PER_CALL
            )
            self.common(
                mod, (torch.randn(rows, 64),), expected_calls=1, expected_fusions=1
            )
            rows = 2 * 8 * pass_mod.SAVED_BYTES_PER_CALL // per_row + 1
            self.assertLess(rows, pass_mod.MAX_FUSED_ROWS)
            self.common(
                mod, (torch.randn(rows, 64),), expected_calls=3, expected_fusions=0
            )

    @parametrize("threads", [2, 16])
    def test_da8w4_concat_linear_large_m(self, threads):
        # Outputs read in place (gate/up into a pointwise consumer) cost no copy,
        # but from MAX_FUSED_ROWS rows the saved calls are noise against the
        # work: the group is left alone, at any thread count, also when the rows
        # come from two leading dims.
        from torch._inductor.fx_passes import da8w4_concat_linear as pass_mod

        class GateUp(Da8w4Linears):
            def forward(self, x):
                gate, up = super().forward(x)
                return F.silu(gate) * up

        torch.manual_seed(0)
        mod = GateUp(64, [32, 32], keep_3d=True).eval()
        big = pass_mod.MAX_FUSED_ROWS
        with inductor_config.patch({"cpp.threads": threads}):
            self.common(
                mod,
                (torch.randn(1, big - 1, 64),),
                expected_calls=1,
                expected_fusions=1,
            )
            with self.assertLogs(pass_mod.log, level=logging.DEBUG) as cm:
                self.common(
                    mod,
                    (torch.randn(2, big // 2, 64),),
                    expected_calls=2,
                    expected_fusions=0,
                )
        self.assertIn(f"{big} rows", "\n".join(cm.output))

    def test_da8w4_concat_linear_decode_m1(self):
        # One token: each split output is contiguous, yet returned as a graph
        # output it gets its own storage, as eager's do (a view of the fused
        # output would let a resize_ of one output overwrite another).
        torch.manual_seed(0)
        mod = Da8w4Linears(64, [64, 32, 32], bias=True).eval()
        self.common(mod, (torch.randn(1, 64),), expected_calls=1, expected_fusions=1)
        x = torch.randn(1, 64)
        with (
            torch.no_grad(),
            inductor_config.patch({"freezing": True, "cpp.enable_concat_linear": True}),
        ):
            torch._dynamo.reset()
            counters.clear()
            outs = torch.compile(mod)(x)
            expected = mod(x)
        self.assertEqual(counters["inductor"]["da8w4_concat_linear"], 1)
        storages = {out.untyped_storage().data_ptr() for out in outs}
        self.assertEqual(len(storages), len(outs))
        for out, ref in zip(outs, expected):
            self.assertEqual(out.storage_offset(), 0)
            self.assertEqual(out.stride(), ref.stride())

    def test_da8w4_concat_linear_gate_up_3d_bf16(self):
        torch.manual_seed(0)
        mod = Da8w4Linears(64, [96, 96], keep_3d=True).eval()
        x = torch.randn(2, 3, 64, dtype=torch.bfloat16)
        self.common(mod, (x,), expected_calls=1, expected_fusions=1)

    def test_da8w4_concat_linear_group_size_256(self):
        # BK = 128 for both; G differs only when group_size > 128.
        torch.manual_seed(0)
        mod = Da8w4Linears(512, [32, 32, 32], group_sizes=[256, 128, 256]).eval()
        code = self.common(
            mod, (torch.randn(3, 512),), expected_calls=2, expected_fusions=1
        )
        FileCheck().check_count(OP_STR, 2, exactly=True).run(code)

    def test_da8w4_concat_linear_mixed_bias(self):
        torch.manual_seed(0)
        mod = Da8w4Linears(64, [32, 64, 32], bias=[True, False, True]).eval()
        self.common(mod, (torch.randn(4, 64),), expected_calls=1, expected_fusions=1)

    def test_da8w4_concat_linear_kwargs(self):
        torch.manual_seed(0)
        mod = Da8w4Linears(64, [32, 32], bias=True, use_kwargs=True).eval()
        self.common(mod, (torch.randn(4, 64),), expected_calls=1, expected_fusions=1)

    def test_da8w4_concat_linear_partial_group_foreign_user(self):
        torch.manual_seed(0)

        class M(Da8w4Linears):
            def forward(self, x):
                q, k, v = (self.linear(x, i) for i in range(3))
                xq, _, _ = _quantize_act(x.reshape(-1, self.k), self.symmetric)
                # A foreign user of the quantized activation, and a linear
                # that cannot join (different group size -> different BK).
                other = self.linear(x, 3)
                return q, k, v, other, xq.float().sum(-1)

        mod = M(128, [32, 64, 32, 32], group_sizes=[32, 32, 32, 64]).eval()
        self.common(mod, (torch.randn(3, 128),), expected_calls=2, expected_fusions=1)

    def test_da8w4_concat_linear_two_groups(self):
        torch.manual_seed(0)

        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.attn = Da8w4Linears(64, [64, 32, 32])
                self.mlp = Da8w4Linears(64, [96, 96])

            def forward(self, x):
                q, k, v = self.attn(x)
                gate, up = self.mlp(x * 2)
                return q + k.repeat(1, 2) + v.repeat(1, 2), gate * up

        self.common(
            M().eval(), (torch.randn(4, 64),), expected_calls=2, expected_fusions=2
        )

    def test_da8w4_concat_linear_output_dtype_mismatch(self):
        torch.manual_seed(0)

        class M(Da8w4Linears):
            def forward(self, x):
                return (
                    self.linear(x, 0),
                    self.linear(x, 1, output_dtype=torch.bfloat16),
                )

        mod = M(64, [32, 32]).eval()
        self.common(mod, (torch.randn(4, 64),), expected_calls=2, expected_fusions=0)

    def test_da8w4_concat_linear_different_activation(self):
        torch.manual_seed(0)

        class M(Da8w4Linears):
            def forward(self, x, y):
                return self.linear(x, 0), self.linear(y, 1)

        mod = M(64, [32, 32]).eval()
        inputs = (torch.randn(4, 64), torch.randn(4, 64))
        self.common(mod, inputs, expected_calls=2, expected_fusions=0)

    def test_da8w4_concat_linear_non_constant_weight(self):
        torch.manual_seed(0)

        class M(Da8w4Linears):
            def forward(self, x, w1):
                xq, xs, xz = _quantize_act(x, self.symmetric)
                op = torch.ops.torchao.da8w4_linear_cpu.default
                a = op(
                    xq,
                    xs,
                    xz,
                    self.qweight0,
                    self.qscales0,
                    self.qzeros0,
                    self.comp0,
                    None,
                    x.dtype,
                )
                b = op(
                    xq,
                    xs,
                    xz,
                    w1,
                    self.qscales1,
                    self.qzeros1,
                    self.comp1,
                    None,
                    x.dtype,
                )
                return a, b

        mod = M(64, [32, 32]).eval()
        inputs = (torch.randn(4, 64), mod.qweight1.clone())
        self.common(mod, inputs, expected_calls=2, expected_fusions=0)

    def test_da8w4_concat_linear_dynamic_m(self):
        torch.manual_seed(0)
        mod = Da8w4Linears(64, [64, 32, 32], bias=True).eval()
        x = torch.randn(6, 64)
        torch._dynamo.mark_dynamic(x, 0)
        code = self.common(
            mod,
            (x,),
            expected_calls=1,
            expected_fusions=1,
            more_inputs=[(torch.randn(2, 64),), (torch.randn(17, 64),)],
        )
        del code

    def test_da8w4_concat_linear_dynamic_true_3d(self):
        torch.manual_seed(0)
        mod = Da8w4Linears(64, [32, 32], keep_3d=True).eval()
        self.common(
            mod,
            (torch.randn(2, 5, 64),),
            expected_calls=1,
            expected_fusions=1,
            more_inputs=[(torch.randn(3, 7, 64),)],
            dynamic=True,
        )

    @unittest.skipIf(not HAS_TORCHAO, "torchao is not importable")
    def test_da8w4_concat_linear_torchao_flow(self):
        torch.manual_seed(0)

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.q = nn.Linear(128, 128, bias=False)
                self.k = nn.Linear(128, 64, bias=False)
                self.v = nn.Linear(128, 64, bias=False)
                self.gate = nn.Linear(128, 96, bias=True)
                self.up = nn.Linear(128, 96, bias=True)

            def forward(self, x):
                q, k, v = self.q(x), self.k(x), self.v(x)
                a = q + torch.cat([k, v], -1)
                return torch.nn.functional.silu(self.gate(a)) * self.up(a)

        mod = Block().eval()
        quantize_(
            mod,
            Int8DynamicActivationInt4WeightConfig(
                group_size=32, set_inductor_config=False
            ),
        )
        self.common(mod, (torch.randn(4, 128),), expected_calls=2, expected_fusions=2)

    def test_da8w4_concat_linear_flag_off(self):
        torch.manual_seed(0)
        mod = Da8w4Linears(64, [32, 32]).eval()
        x = torch.randn(4, 64)
        _, code, ctrs, _ = self._compile(mod, x, concat=False)
        self.assertEqual(ctrs.get("da8w4_concat_linear", 0), 0)
        FileCheck().check_count(OP_STR, 2, exactly=True).run(code)
        _, code, ctrs, _ = self._compile(mod, x, concat=True, freezing=False)
        self.assertEqual(ctrs.get("da8w4_concat_linear", 0), 0)
        FileCheck().check_count(OP_STR, 2, exactly=True).run(code)


def _compile_and_capture_post_grad(mod, x):
    """Compile ``mod`` frozen with the pass on; return the post-grad graph
    module (captured by a pass registered to run after it) and the output."""
    captured = {}

    def capture(graph):
        captured["gm"] = graph.owning_module

    torch._dynamo.reset()
    counters.clear()
    with (
        register_custom_pass(
            "post_grad_custom_post_pass",
            capture,
            name="test.capture",
            after=pass_module.PASS_NAME,
        ),
        inductor_config.patch({"freezing": True, "cpp.enable_concat_linear": True}),
        torch.no_grad(),
    ):
        out = torch.compile(mod)(x)
    return captured["gm"], out


@instantiate_parametrized_tests
@unittest.skipIf(not HAS_REGISTRY, NEEDS_REGISTRY)
class Da8w4ConcatLinearGraphTest(TestCase):
    """The rewrite itself, checked on the graph."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        _ensure_ops()

    def _targets(self, gm, target):
        return gm.graph.find_nodes(op="call_function", target=target)

    def test_da8w4_concat_linear_graph_views_and_clones(self):
        torch.manual_seed(0)

        @torch.library.custom_op("da8w4_concat_linear_test::consume", mutates_args=())
        def consume(x: torch.Tensor) -> torch.Tensor:
            return x.contiguous() * 2

        @consume.register_fake
        def _(x):
            return torch.empty_like(x, memory_format=torch.contiguous_format)

        class M(Da8w4Linears):
            def forward(self, x):
                q, k, v = super().forward(x)
                # q: view chain into pointwise (strided view is fine),
                # k: into a custom op (needs its own contiguous copy),
                # v: returned (graph output keeps eager's layout).
                return (q.view(4, 2, 32) + 1).sum(1), consume(k), v

        mod = M(64, [64, 32, 32]).eval()
        x = torch.randn(4, 64)
        gm, out = _compile_and_capture_post_grad(mod, x)
        op = torch.ops.torchao.da8w4_linear_cpu.default
        self.assertEqual(len(self._targets(gm, op)), 1)
        self.assertEqual(
            len(self._targets(gm, torch.ops.aten.split_with_sizes.default)), 1
        )
        clones = self._targets(gm, torch.ops.aten.clone.default)
        self.assertEqual(len(clones), 2)
        for c in clones:
            self.assertTrue(c.meta["val"].is_contiguous())
        fused = self._targets(gm, op)[0]
        self.assertEqual(tuple(fused.meta["val"].shape), (4, 128))
        getitems = [
            n
            for n in gm.graph.nodes
            if n.target is operator.getitem
            and n.args[0].target == torch.ops.aten.split_with_sizes.default
        ]
        self.assertEqual(
            [tuple(g.meta["val"].shape) for g in getitems], [(4, 64), (4, 32), (4, 32)]
        )
        self.assertEqual(getitems[0].meta["val"].stride(), (128, 1))
        # Numerics through all three consumers.
        with torch.no_grad():
            eager = mod(x)
        for a, b in zip(eager, out):
            atol = 2e-2 * a.abs().max().item()
            self.assertEqual(a, b, atol=atol, rtol=0)
        self.assertTrue(out[2].is_contiguous())

    def test_da8w4_concat_linear_graph_drops_old_constants(self):
        torch.manual_seed(0)
        mod = Da8w4Linears(64, [32, 32, 64], bias=True).eval()
        gm, _ = _compile_and_capture_post_grad(mod, torch.randn(4, 64))
        op = torch.ops.torchao.da8w4_linear_cpu.default
        (fused,) = self._targets(gm, op)
        attrs = [n.target for n in gm.graph.find_nodes(op="get_attr")]
        # Only the concatenated constants remain, and the module holds no
        # attribute that no node reads.
        self.assertEqual(len(attrs), 5)
        for a in fused.args[3:8]:
            self.assertEqual(a.op, "get_attr")
            self.assertEqual(a.meta["val"].shape, getattr(gm, a.target).shape)
        tensors = {n for n, _ in gm.named_buffers()} | {
            n for n, _ in gm.named_parameters()
        }
        self.assertEqual(tensors, set(attrs))
        self.assertEqual(getattr(gm, fused.args[3].target).shape[0], 4)


@instantiate_parametrized_tests
class Da8w4ConcatLinearPassTest(TestCase):
    """The pass applied directly to hand-built frozen graphs (no compile)."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        _ensure_ops()

    def _graph(self, use_kwargs=False, placeholder_arg=None, bias=(True, False)):
        """Two calls on one activation; ``placeholder_arg`` of the second call
        is a graph input instead of a frozen constant."""
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.passes.fake_tensor_prop import FakeTensorProp

        torch.manual_seed(0)
        mod = Da8w4Linears(64, [32, 64], bias=list(bias))
        names = ("qweight", "qscales", "qzeros", "comp", "bias")
        arg_names = ("weight", "weight_scales", "weight_qzeros", "compensation", "bias")
        op = torch.ops.torchao.da8w4_linear_cpu.default
        g = torch.fx.Graph()
        xq, xs, xz = (g.placeholder(n) for n in ("xq", "xs", "xz"))
        extra_inputs = []
        outs = []
        for i in range(2):
            consts = {}
            for name, arg in zip(names, arg_names):
                t = getattr(mod, f"{name}{i}")
                if t is None:
                    consts[arg] = None
                elif i == 1 and arg == placeholder_arg:
                    consts[arg] = g.placeholder(f"{name}{i}")
                    extra_inputs.append(t)
                else:
                    consts[arg] = g.get_attr(f"{name}{i}")
            kwargs = dict(
                input=xq,
                input_scales=xs,
                input_qzeros=xz,
                **consts,
                output_dtype=torch.float32,
            )
            if use_kwargs:
                outs.append(g.call_function(op, (), kwargs))
            else:
                outs.append(g.call_function(op, tuple(kwargs.values())))
        aten = torch.ops.aten
        g.output(
            (
                g.call_function(aten.add.Tensor, (outs[0], 1)),
                g.call_function(aten.mul.Tensor, (outs[1], 2)),
            )
        )
        gm = torch.fx.GraphModule(mod, g)
        x = torch.randn(5, 64)
        inputs = [*_quantize_act(x, symmetric=False), *extra_inputs]
        fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
        FakeTensorProp(gm, fake_mode).propagate(
            *[fake_mode.from_tensor(t) for t in inputs]
        )
        return gm, inputs

    def _run_pass(self, gm):
        from torch._inductor.fx_passes.da8w4_concat_linear import (
            da8w4_concat_linear_pass,
        )

        counters.clear()
        with inductor_config.patch(
            {"freezing": True, "cpp.enable_concat_linear": True}
        ):
            da8w4_concat_linear_pass(gm)
        gm.graph.lint()
        gm.recompile()
        return counters["inductor"]["da8w4_concat_linear"]

    @parametrize("use_kwargs", [False, True])
    def test_da8w4_concat_linear_pass_args_and_meta(self, use_kwargs):
        gm, inputs = self._graph(use_kwargs=use_kwargs)
        expected = gm(*inputs)
        self.assertEqual(self._run_pass(gm), 1)
        op = torch.ops.torchao.da8w4_linear_cpu.default
        (fused,) = gm.graph.find_nodes(op="call_function", target=op)
        self.assertEqual(tuple(fused.meta["val"].shape), (5, 96))
        self.assertEqual(fused.meta["val"].dtype, torch.float32)
        # Consumers are pointwise: they read strided views, no clone.
        self.assertEqual(
            len(
                gm.graph.find_nodes(
                    op="call_function", target=torch.ops.aten.clone.default
                )
            ),
            0,
        )
        # The bias-less call got zeros: still bit-identical.
        for a, b in zip(expected, gm(*inputs)):
            self.assertTrue(torch.equal(a, b))
        # Old constants are gone from the module.
        for name in ("qweight0", "qscales1", "comp0", "bias0"):
            self.assertFalse(hasattr(gm, name), name)

    @parametrize(
        "arg", ["weight", "weight_scales", "weight_qzeros", "compensation", "bias"]
    )
    def test_da8w4_concat_linear_pass_non_constant_operand(self, arg):
        gm, inputs = self._graph(placeholder_arg=arg, bias=(True, True))
        before = str(gm.graph)
        self.assertEqual(self._run_pass(gm), 0)
        self.assertEqual(str(gm.graph), before)

    def test_da8w4_concat_linear_pass_weight_layouts(self):
        # torchao 0.18's packed weights are uint8; a layout with another byte
        # order is int8. Either is concatenated with its own kind, never mixed.
        op = torch.ops.torchao.da8w4_linear_cpu.default
        for dtypes, fused in (
            ((torch.uint8, torch.uint8), 1),
            ((torch.int8, torch.uint8), 0),
        ):
            gm, _ = self._graph()
            for i, dtype in enumerate(dtypes):
                setattr(gm, f"qweight{i}", getattr(gm, f"qweight{i}").view(dtype))
            before = str(gm.graph)
            self.assertEqual(self._run_pass(gm), fused, dtypes)
            calls = gm.graph.find_nodes(op="call_function", target=op)
            self.assertEqual(len(calls), 2 - fused, dtypes)
            if fused:
                self.assertEqual(
                    getattr(gm, calls[0].args[3].target).dtype, torch.uint8
                )
            else:
                self.assertEqual(str(gm.graph), before)

    def test_da8w4_concat_linear_pass_freezing_off(self):
        gm, _ = self._graph()
        before = str(gm.graph)
        from torch._inductor.fx_passes.da8w4_concat_linear import (
            da8w4_concat_linear_pass,
        )

        counters.clear()
        for freezing, concat in ((False, True), (True, False)):
            with inductor_config.patch(
                {"freezing": freezing, "cpp.enable_concat_linear": concat}
            ):
                da8w4_concat_linear_pass(gm)
        self.assertEqual(counters["inductor"]["da8w4_concat_linear"], 0)
        self.assertEqual(str(gm.graph), before)


class _CountingPass(CustomGraphPass):
    def __init__(self):
        self.calls = 0

    def __call__(self, graph):
        self.calls += 1

    def uuid(self):
        return "test.counting.v1"


@unittest.skipIf(not HAS_REGISTRY, NEEDS_REGISTRY)
class Da8w4ConcatLinearRegistryTest(TestCase):
    """The pass as the registry's client: it composes with other passes at
    its stage and keeps the FX graph cache usable."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        _ensure_ops()

    def _compile(self, mod, x):
        torch._dynamo.reset()
        counters.clear()
        with (
            inductor_config.patch({"freezing": True, "cpp.enable_concat_linear": True}),
            torch.no_grad(),
        ):
            return torch.compile(mod)(x)

    def test_da8w4_concat_linear_registered_once(self):
        handle = pass_module.register_da8w4_concat_linear_cpu_pass()
        self.assertIs(pass_module.register_da8w4_concat_linear_cpu_pass(), handle)
        stage = "post_grad_custom_post_pass"
        names = [p.name for p in list_custom_passes(stage)[stage]]
        self.assertEqual(names.count(pass_module.PASS_NAME), 1)

    def test_da8w4_concat_linear_composes_with_other_passes(self):
        # A user pass registered at the same stage and one assigned to the
        # config field both run, and the fusion still happens.
        torch.manual_seed(0)
        mod, x = Da8w4Linears(64, (32, 64)), torch.randn(4, 64)
        registered, assigned = _CountingPass(), _CountingPass()
        with (
            register_custom_pass(
                "post_grad_custom_post_pass", registered, name="user.counting"
            ),
            inductor_config.patch(post_grad_custom_post_pass=assigned),
        ):
            self._compile(mod, x)
        self.assertEqual(counters["inductor"]["da8w4_concat_linear"], 1)
        self.assertEqual((registered.calls, assigned.calls), (1, 1))

    def test_da8w4_concat_linear_cache_key(self):
        # The pass's (name, uuid) is in the FX graph cache key, so a second
        # compile hits the cache instead of bypassing it; removing the pass
        # changes the key.
        details = custom_pass_cache_details(include_pre_grad=False)
        self.assertIn(pass_module.PASS_NAME, str(details))
        torch.manual_seed(0)
        mod, x = Da8w4Linears(64, (32, 64)), torch.randn(4, 64)
        with inductor_config.patch(fx_graph_cache=True, fx_graph_remote_cache=False):
            first = self._compile(mod, x)
            self.assertEqual(counters["inductor"]["fxgraph_cache_miss"], 1)
            self.assertEqual(counters["inductor"]["fxgraph_cache_bypass"], 0)
            second = self._compile(mod, x)
            self.assertEqual(counters["inductor"]["fxgraph_cache_hit"], 1)
        for a, b in zip(first, second):
            self.assertTrue(torch.equal(a, b))
        pass_module.register_da8w4_concat_linear_cpu_pass().remove()
        try:
            self.assertNotIn(
                pass_module.PASS_NAME,
                str(custom_pass_cache_details(include_pre_grad=False)),
            )
        finally:
            pass_module.register_da8w4_concat_linear_cpu_pass()


if __name__ == "__main__":
    if IS_LINUX and HAS_CPU:
        run_tests()
