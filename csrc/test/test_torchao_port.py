# Owner(s): ["module: inductor"]
"""The kernel PR's file gives the spec's bits.

``upstream-prs/pytorch-ao/da8w4_linear.cpp`` (tools/torchao_kernel.py's port of csrc/da8w4/)
is built as torchao 0.18.0's setup.py builds its CPU kernels (torchao_port_plugin) and loaded
alone in this process, without our library. Its results must equal the pure-PyTorch
reference of the spec bit for bit, as our library's do (test_da8w4_linear_cpu.py), on the
path this CPU takes: AMX from 8 rows where the CPU has it, the AVX512-VNNI register kernel
below that and on other AVX-512 CPUs, the scalar loop elsewhere. Its packed layout is ours.
"""

import os

import torch
from torch.testing._internal.common_utils import (
    instantiate_parametrized_tests,
    parametrize,
    run_tests,
    TestCase,
)

import torchao_port_plugin
from _da8w4_reference import (
    make_activation,
    make_weight,
    reference_linear,
    SHAPES,
    unpack_weight,
)


torchao_port_plugin.build_and_load()

OUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# Beyond the shared shapes: every row remainder of the register kernel's row blocks, the
# AMX path's 32-row m tiles (one partial) and several N blocks per work item.
LARGER = (((150,), 384, 160, 64), ((40,), 256, 256, 128), ((64,), 512, 96, 32))


def da8w4(x, sa, za, packed, bias, out_dtype):
    pw, ps, pz, pc = packed
    return torch.ops.torchao.da8w4_linear_cpu(
        x, sa, za, pw, ps, pz, pc, bias, out_dtype
    )


@instantiate_parametrized_tests
class TestTorchaoPort(TestCase):
    def test_builds_as_torchao_does(self):
        flags = torchao_port_plugin.torchao_cpu_flags()
        self.assertIn("-O3", flags)
        if os.environ.get("TORCHAO_PORT_ISA_FLAGS") != "0":
            has_avx512 = "avx512f" in torchao_port_plugin.cpu_flags()
            self.assertEqual("-DCPU_CAPABILITY_AVX512" in flags, has_avx512)

    def test_prepack_layout_is_ours(self):
        gen = torch.Generator().manual_seed(3)
        w, sw, zw = make_weight(64, 256, 64, gen)
        packed = torch.ops.torchao.da8w4_linear_prepack_cpu(w, sw, zw)
        self.assertEqual(unpack_weight(packed[0]), w, atol=0, rtol=0)

    @parametrize("symmetric", (False, True))
    @parametrize("out_dtype", OUT_DTYPES)
    def test_matches_reference(self, symmetric, out_dtype):
        gen = torch.Generator().manual_seed(1234)
        for i, (m_shape, k, n, group_size) in enumerate(SHAPES + LARGER):
            w, sw, zw = make_weight(n, k, group_size, gen)
            x, sa, za = make_activation(m_shape, k, symmetric, gen)
            packed = torch.ops.torchao.da8w4_linear_prepack_cpu(w, sw, zw)
            for bias in (None, torch.randn(n, generator=gen)):
                want = reference_linear(
                    x, sa, za, w, sw, zw, bias, out_dtype, symmetric
                )
                got = da8w4(x, sa, za, packed, bias, out_dtype)
                self.assertEqual(got.shape, (*m_shape, n))
                self.assertEqual(
                    got,
                    want,
                    atol=0,
                    rtol=0,
                    msg=f"shape #{i} {m_shape}x{k}x{n} gs={group_size} bias={bias is not None}",
                )


if __name__ == "__main__":
    run_tests()
