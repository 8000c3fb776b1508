# Copyright (c) Meta Platforms, Inc. and affiliates.
# All rights reserved.
#
# This source code is licensed under the BSD 3-Clause license found in the
# LICENSE file in the root directory of this source tree.

"""torchao::da8w4_linear_cpu against the op's math, bit for bit.

The kernel's paths (AMX tiles from 8 rows, AVX512-VNNI register tiles below that
and on AVX-512 CPUs without AMX, a scalar loop elsewhere) must all give these bits:
per k block of min(group_size, 128), the exact int32 dot product of (a - za) and
(w - zw), then acc += (float(P) * sa) * sw in fp32, k block by k block, from the
bias. The shapes below reach every row remainder of the register kernel, one and
two 16-row AMX tiles, partial 32-row m tiles, several N blocks per work item,
group sizes 32 to 256 and weight zero points the AMX path hands to the register
kernel (below -112). The packed weight's int8 layout is new: the prepack fake
must give its shapes and dtypes, and a weight packed by an earlier version must
be refused, by the op and by load_state_dict.
"""

import os
import subprocess
import sys
import tempfile
import unittest

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.testing._internal import common_utils
from torch.testing._internal.common_utils import TestCase, run_tests

from torchao import quantize_
from torchao.prototype.quantization.int4 import (
    Int4OpaqueTensor,
    Int8DynamicActivationInt4WeightConfig,
)


def make_weight(n, k, group_size, gen, low_zero_points=False):
    g = k // group_size
    w = torch.randint(0, 16, (n, k), dtype=torch.uint8, generator=gen)
    scales = torch.rand(n, g, generator=gen) * 0.02 + 1e-3
    low = -128 if low_zero_points else 0
    qzeros = torch.randint(low, 16, (n, g), dtype=torch.int8, generator=gen)
    return w, scales, qzeros


def make_activation(m_shape, k, symmetric, gen):
    m = 1
    for d in m_shape:
        m *= d
    if symmetric:
        x = torch.randint(-128, 128, (*m_shape, k), dtype=torch.int8, generator=gen)
        zeros = torch.zeros(m, dtype=torch.int32)
    else:
        x = torch.randint(0, 256, (*m_shape, k), dtype=torch.uint8, generator=gen)
        zeros = torch.randint(0, 256, (m,), dtype=torch.int32, generator=gen)
    scales = torch.rand(m, generator=gen) * 0.05 + 1e-3
    return x, scales, zeros


def reference(x, sa, za, w, sw, zw, bias, out_dtype, symmetric):
    """The op's math on the unpacked weight [N, K] and scales/zero points [N, G]."""
    n, k = w.shape
    group_size = k // sw.shape[1]
    bk = min(group_size, 128)
    a = x.reshape(-1, k).to(torch.float64)
    if not symmetric:
        a = a - za.reshape(-1, 1).to(torch.float64)
    wd = w.to(torch.float64) - zw.to(torch.float64).repeat_interleave(group_size, 1)
    sa = sa.reshape(-1, 1).to(torch.float32)
    acc = torch.zeros(a.shape[0], n) if bias is None else bias.expand(a.shape[0], n)
    for c in range(k // bk):
        blk = slice(c * bk, (c + 1) * bk)
        # integers below 2**53: exact in float64, then the int32 value, modulo 2**32
        # where it overflows (activation zero points beyond about 2**31 / (bk * 127))
        p = (a[:, blk] @ wd[:, blk].T).to(torch.int64)
        p = (p + 2**31).remainder(2**32).sub(2**31).to(torch.int32)
        acc = acc + (p.to(torch.float32) * sa) * sw[:, (c * bk) // group_size]
    return acc.to(out_dtype).reshape(*x.shape[:-1], n)


# (M shape, K, N, group_size)
SHAPES = [
    ((1,), 128, 32, 32),
    ((3,), 96, 64, 32),
    ((2, 5), 192, 32, 64),
    ((7,), 256, 64, 128),
    ((8,), 256, 96, 128),
    ((17,), 256, 96, 128),
    ((9,), 512, 64, 256),
    ((33,), 128, 32, 32),
    ((40,), 256, 256, 128),
    ((150,), 384, 160, 64),
    ((48,), 128, 1024, 64),
    ((2,), 72, 32, 36),
]


# One TORCHAO_CPU_DISPATCH level in a process of its own (the level is read once per
# process): it packs the weight and runs the activations with its own packed weight and
# with the one given (packed at another level).
_LEVEL_CHILD = """
import sys
import torch
import torchao  # noqa: F401

d, level = sys.argv[1:]
data = torch.load(f"{d}/inputs.pt")
packed = torch.ops.torchao.da8w4_linear_prepack_cpu(data["w"], data["sw"], data["zw"])
out = {"packed": packed}
for name, weight in (("own", packed), ("given", data.get("packed"))):
    if weight is not None:
        out[name] = [
            torch.ops.torchao.da8w4_linear_cpu(x, sa, za, *weight, None, torch.float)
            for x, sa, za in data["acts"]
        ]
torch.save(out, f"{d}/{level}.pt")
"""

DISPATCH_LEVELS = ("DEFAULT", "AVX512", "AMX", "AUTO")


@unittest.skipIf(
    "CPU" not in torch._C._dispatch_dump("torchao::da8w4_linear_cpu"),
    reason="cpp kernels not built",
)
class TestDa8w4LinearCpuKernel(TestCase):
    @common_utils.parametrize("out_dtype", [torch.float, torch.bfloat16, torch.half])
    @common_utils.parametrize("bias", [True, False])
    @common_utils.parametrize("symmetric", [True, False])
    @common_utils.parametrize("low_zero_points", [True, False])
    def test_matches_reference(self, out_dtype, bias, symmetric, low_zero_points):
        gen = torch.Generator().manual_seed(1234)
        for m_shape, k, n, group_size in SHAPES:
            w, sw, zw = make_weight(n, k, group_size, gen, low_zero_points)
            x, sa, za = make_activation(m_shape, k, symmetric, gen)
            b = torch.randn(n, generator=gen) if bias else None
            packed = torch.ops.torchao.da8w4_linear_prepack_cpu(w, sw, zw)
            got = torch.ops.torchao.da8w4_linear_cpu(x, sa, za, *packed, b, out_dtype)
            want = reference(x, sa, za, w, sw, zw, b, out_dtype, symmetric)
            self.assertEqual(
                got, want, atol=0, rtol=0, msg=f"{m_shape} x {k} x {n}, gs {group_size}"
            )

    def test_thread_counts(self):
        # Each thread takes its own range of work items, then what the others left:
        # every item is computed whatever the thread count. Deterministic mode fills
        # the uninitialized output with NaN, so an item left out shows.
        gen = torch.Generator().manual_seed(4321)
        w, sw, zw = make_weight(224, 256, 64, gen)
        packed = torch.ops.torchao.da8w4_linear_prepack_cpu(w, sw, zw)
        before = torch.get_num_threads()
        deterministic = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(True)
        try:
            for m in (1, 3, 70):
                x, sa, za = make_activation((m,), 256, False, gen)
                want = reference(x, sa, za, w, sw, zw, None, torch.float, False)
                for threads in (1, 2, 3, 5, 8, 16):
                    torch.set_num_threads(threads)
                    got = torch.ops.torchao.da8w4_linear_cpu(
                        x, sa, za, *packed, None, torch.float
                    )
                    self.assertEqual(
                        got, want, atol=0, rtol=0, msg=f"m={m}, {threads} threads"
                    )
        finally:
            torch.set_num_threads(before)
            torch.use_deterministic_algorithms(deterministic)

    def test_zero_point_products_beyond_int32(self):
        # za * sum(w - zw) past 2**31 (za = +-200000 against 115 * 128 per block):
        # the block product is taken modulo 2**32 on every path, as int32 wraps.
        n, k, group_size = 64, 256, 128
        w = torch.full((n, k), 15, dtype=torch.uint8)
        zw = torch.full((n, k // group_size), -100, dtype=torch.int8)
        sw = torch.full((n, k // group_size), 0.25)
        gen = torch.Generator().manual_seed(41)
        packed = torch.ops.torchao.da8w4_linear_prepack_cpu(w, sw, zw)
        for m in (3, 40):
            x = torch.randint(0, 256, (m, k), dtype=torch.uint8, generator=gen)
            za = torch.tensor([200000, -200000, 150000, 131000, 7] * 8)[:m].int()
            sa = torch.full((m,), 1.5)
            got = torch.ops.torchao.da8w4_linear_cpu(
                x, sa, za, *packed, None, torch.float
            )
            want = reference(x, sa, za, w, sw, zw, None, torch.float, False)
            self.assertEqual(got, want, atol=0, rtol=0, msg=f"m={m}")

    def test_dispatch_levels_agree(self):
        # Each TORCHAO_CPU_DISPATCH level, in a process of its own, packs the weight
        # into the same bytes, and gives the same output bits (the op's math) from its
        # own packed weight and from one packed at DEFAULT: a weight packed on one
        # machine or level is read alike on every other. M = 1, 4, 40: the register
        # kernel and the AMX tiles; low zero points: the AMX path's fallback.
        gen = torch.Generator().manual_seed(99)
        w, sw, zw = make_weight(96, 256, 64, gen, low_zero_points=True)
        cases = [(m, sym) for m in (1, 4, 40) for sym in (False, True)]
        acts = [make_activation((m,), 256, sym, gen) for m, sym in cases]
        with tempfile.TemporaryDirectory() as d:
            inputs = {"w": w, "sw": sw, "zw": zw, "acts": acts}
            results = {}
            for level in DISPATCH_LEVELS:
                torch.save(inputs, f"{d}/inputs.pt")
                env = dict(os.environ, TORCHAO_CPU_DISPATCH=level)
                r = subprocess.run(
                    [sys.executable, "-c", _LEVEL_CHILD, d, level],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=600,
                )
                self.assertEqual(r.returncode, 0, msg=f"{level}: {r.stderr}")
                results[level] = torch.load(f"{d}/{level}.pt")
                inputs["packed"] = results["DEFAULT"]["packed"]
        want = [
            reference(x, sa, za, w, sw, zw, None, torch.float, sym)
            for (x, sa, za), (_, sym) in zip(acts, cases)
        ]
        for level, got in results.items():
            for a, b in zip(got["packed"], results["DEFAULT"]["packed"]):
                self.assertEqual(a, b, atol=0, rtol=0, msg=f"{level}: packed")
            for name in ("own", "given") if level != "DEFAULT" else ("own",):
                for out, ref, case in zip(got[name], want, cases):
                    self.assertEqual(
                        out, ref, atol=0, rtol=0, msg=f"{level} {name} {case}"
                    )

    def test_refuses_weights_packed_by_earlier_versions(self):
        # The packed weight keeps its shape (the fake and the concat-linear pass
        # read it) but is int8: earlier versions wrote uint8 with the nibbles in
        # another order, which this kernel must refuse rather than misread.
        gen = torch.Generator().manual_seed(7)
        w, sw, zw = make_weight(64, 256, 64, gen)
        x, sa, za = make_activation((3,), 256, False, gen)
        pw, ps, pz, pc = torch.ops.torchao.da8w4_linear_prepack_cpu(w, sw, zw)
        self.assertEqual((pw.dtype, tuple(pw.shape)), (torch.int8, (2, 4, 64, 16)))
        with self.assertRaisesRegex(RuntimeError, "packed by an earlier version"):
            torch.ops.torchao.da8w4_linear_cpu(
                x, sa, za, pw.view(torch.uint8), ps, pz, pc, None, torch.float
            )

    def test_load_state_dict_refuses_weights_packed_by_earlier_versions(self):
        # load_state_dict copies into the quantized model's weight; copy_ must not
        # cast an earlier version's uint8 bytes into the int8 weight.
        def quantized():
            m = torch.nn.Linear(256, 64)
            quantize_(m, Int8DynamicActivationInt4WeightConfig(group_size=64))
            return m

        torch.manual_seed(0)
        m, x = quantized(), torch.randn(3, 256)
        want = m(x)
        w = m.weight
        earlier = Int4OpaqueTensor(
            w.qdata.view(torch.uint8),
            w.scale_and_zero,
            w.block_size,
            w.shape,
            qzeros=w.qzeros,
            compensation=w.compensation,
            act_mapping_type=w.act_mapping_type,
        )
        # (the current bytes, viewed as uint8: what is checked is the dtype)
        target = quantized()
        before = target.weight.qdata.clone()
        with self.assertRaisesRegex(ValueError, "packed by another torchao version"):
            target.weight.copy_(earlier)
        # load_state_dict reports the ValueError as a RuntimeError
        with self.assertRaisesRegex(RuntimeError, "packed by another torchao version"):
            target.load_state_dict({"weight": earlier, "bias": m.bias})
        self.assertEqual(target.weight.qdata, before, atol=0, rtol=0)
        # assign=True takes the tensor as it is: the op refuses it
        target.load_state_dict({"weight": earlier, "bias": m.bias}, assign=True)
        with self.assertRaisesRegex(RuntimeError, "packed by an earlier version"):
            target(x)
        target = quantized()
        target.load_state_dict(m.state_dict())
        self.assertEqual(target(x), want, atol=0, rtol=0)

    def test_prepack_fake_matches_kernel(self):
        gen = torch.Generator().manual_seed(3)
        for n, k, group_size in ((64, 256, 64), (96, 512, 256), (32, 128, 128)):
            w, sw, zw = make_weight(n, k, group_size, gen)
            if group_size == k:  # per-channel scales may be 1-D
                sw, zw = sw[:, 0], zw[:, 0]
            real = torch.ops.torchao.da8w4_linear_prepack_cpu(w, sw, zw)
            with FakeTensorMode() as mode:
                fake = torch.ops.torchao.da8w4_linear_prepack_cpu(
                    *(mode.from_tensor(t) for t in (w, sw, zw))
                )
            self.assertEqual(
                [(t.dtype, t.shape) for t in fake], [(t.dtype, t.shape) for t in real]
            )
        # what the kernel refuses, the fake refuses too
        for n, k, group_size in ((48, 128, 32), (32, 384, 192)):
            w, sw, zw = make_weight(n, k, group_size, gen)
            with self.assertRaises(RuntimeError):
                torch.ops.torchao.da8w4_linear_prepack_cpu(w, sw, zw)
            with FakeTensorMode() as mode, self.assertRaises(RuntimeError):
                torch.ops.torchao.da8w4_linear_prepack_cpu(
                    *(mode.from_tensor(t) for t in (w, sw, zw))
                )

    def test_prepack_rejects_bad_weights(self):
        gen = torch.Generator().manual_seed(0)
        w, sw, zw = make_weight(32, 128, 32, gen)
        with self.assertRaisesRegex(RuntimeError, "int4"):
            torch.ops.torchao.da8w4_linear_prepack_cpu(w + 16, sw, zw)
        with self.assertRaisesRegex(RuntimeError, "multiple of 32"):
            torch.ops.torchao.da8w4_linear_prepack_cpu(w[:16], sw[:16], zw[:16])


common_utils.instantiate_parametrized_tests(TestDa8w4LinearCpuKernel)


if __name__ == "__main__":
    run_tests()
