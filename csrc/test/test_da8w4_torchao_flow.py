# Owner(s): ["module: inductor"]
"""torchao's own DA8W4 flow on CPU with our kernel.

torchao 0.18.0's wheel defines torchao::da8w4_linear_cpu but has no CPU kernel for it,
so `quantize_(model, Int8DynamicActivationInt4WeightConfig(...))` asserts. With our
library loaded the same flow runs, eagerly and under torch.compile (with freezing).
Skips cleanly unless torchao is importable and our kernel is built.
"""

import unittest

import torch
import torch._inductor.config as inductor_config
from torch._inductor.utils import run_and_get_code
from torch.testing import FileCheck
from torch.testing._internal.common_utils import (
    instantiate_parametrized_tests,
    parametrize,
    run_tests,
    TestCase,
)

from _da8w4_loader import import_loader
from _da8w4_reference import unpack_weight


loader = import_loader()
LOADED = loader.load()  # imports torchao first when it is installed

SKIP_REASON = None
try:
    from torchao.prototype.quantization.int4 import Int8DynamicActivationInt4WeightConfig
    from torchao.quantization import quantize_
    from torchao.quantization.quant_primitives import MappingType
except Exception as e:  # not installed, or an incompatible build
    SKIP_REASON = f"torchao's DA8W4 flow is not importable: {e!r}"
if SKIP_REASON is None and not LOADED:
    SKIP_REASON = f"da8w4 kernel not built ({loader.default_path()})"


class MLP(torch.nn.Module):
    def __init__(self, k, hidden, n, bias):
        super().__init__()
        self.up = torch.nn.Linear(k, hidden, bias=bias)
        self.down = torch.nn.Linear(hidden, n, bias=bias)

    def forward(self, x):
        return self.down(torch.nn.functional.silu(self.up(x)))


@unittest.skipIf(SKIP_REASON is not None, SKIP_REASON or "")
@instantiate_parametrized_tests
class TestDa8w4TorchaoFlow(TestCase):
    def _quantized(self, dtype, group_size, mapping, bias):
        torch.manual_seed(0)
        model = MLP(256, 128, 64, bias).to(dtype).eval()
        ref = MLP(256, 128, 64, bias).to(dtype).eval()
        ref.load_state_dict(model.state_dict())
        quantize_(
            model,
            Int8DynamicActivationInt4WeightConfig(
                group_size=group_size, act_mapping_type=mapping, set_inductor_config=False
            ),
        )
        return model, ref

    @parametrize("dtype", (torch.float32, torch.bfloat16))
    @parametrize("symmetric", (False, True))
    def test_quantize_and_compile(self, dtype, symmetric):
        mapping = MappingType.SYMMETRIC if symmetric else MappingType.ASYMMETRIC
        model, ref = self._quantized(dtype, 64, mapping, bias=True)
        self.assertEqual(type(model.up.weight).__name__, "Int4OpaqueTensor")
        x = torch.randn(2, 5, 256, dtype=dtype)
        with torch.no_grad():
            eager = model(x)
            want = ref(x)
            torch._dynamo.reset()
            with inductor_config.patch(freezing=True):
                compiled, (code,) = run_and_get_code(torch.compile(model), x)
        torch._dynamo.reset()
        FileCheck().check_count("torch.ops.torchao.da8w4_linear_cpu.default", 2).run(code)
        self.assertEqual(eager.shape, (2, 5, 64))
        self.assertEqual(eager.dtype, dtype)
        if dtype == torch.float32:
            # Inductor's decomposition of the activation quantisation and our kernel
            # reproduce eager bit for bit.
            self.assertEqual(compiled, eager, atol=0, rtol=0)
        else:
            # Inductor keeps the fused silu in fp32 where eager rounds to bf16 in between.
            self.assertEqual(compiled, eager, atol=2e-2, rtol=2e-2)
        # And the quantised model stays close to the float one (int4 weights).
        cos = torch.nn.functional.cosine_similarity(eager.float().flatten(), want.float().flatten(), dim=0)
        self.assertGreater(cos.item(), 0.99)

    @parametrize("group_size", (32, 128))
    def test_packed_weight_dequantises(self, group_size):
        # torchao's from_hp_da8w4 prepacked through our op: unpack our documented layout,
        # dequantise (q - zp) * scale and check the eager linear against it; the only
        # error left is the per-token 8-bit activation quantisation.
        model, ref = self._quantized(torch.float32, group_size, MappingType.ASYMMETRIC, bias=False)
        w = model.up.weight
        n, k = 128, 256
        self.assertEqual(w.qdata.shape, (n // 32, k // group_size, min(group_size, 128), 16))
        self.assertEqual(w.qdata.dtype, torch.int8)
        q = unpack_weight(w.qdata)
        g = k // group_size
        scales = w.scale_and_zero.transpose(1, 2).reshape(n, g).repeat_interleave(group_size, 1)
        zeros = w.qzeros.transpose(1, 2).reshape(n, g).repeat_interleave(group_size, 1)
        w_dq = (q.float() - zeros.float()) * scales
        self.assertEqual(w_dq, ref.up.weight, atol=scales.max().item(), rtol=0)
        x = torch.randn(3, 256)
        with torch.no_grad():
            y = model.up(x)
            self.assertEqual(y, x @ w_dq.T, atol=3e-2, rtol=1e-2)


if __name__ == "__main__":
    run_tests()
