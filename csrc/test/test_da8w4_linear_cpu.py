# Owner(s): ["module: inductor"]
"""Numerics and contract tests of our CPU kernel for torchao::da8w4_linear_cpu.

Every result is compared with a pure-PyTorch implementation of the spec's math
(shared/specs/da8w4_linear_cpu.md, section 3), bit for bit, on each ISA path forced
through DA8W4_ISA. Needs the library: build it with
    cmake -G Ninja -S . -B build && cmake --build build
The tests skip when it is not built, unless DA8W4_REQUIRE_KERNEL=1 (CI), which turns
the skip into a failure.
"""

import os
import subprocess
import sys
import unittest
from unittest import mock

import torch
from torch._inductor.utils import run_and_get_code
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.testing import FileCheck
from torch.testing._internal.common_utils import (
    instantiate_parametrized_tests,
    parametrize,
    run_tests,
    TestCase,
)

from _da8w4_loader import import_loader
from _da8w4_reference import BN, make_activation, make_weight, reference_linear, SHAPES, unpack_weight


loader = import_loader()
LOADED = loader.load()
if not LOADED and os.environ.get("DA8W4_REQUIRE_KERNEL") == "1":
    raise RuntimeError(f"DA8W4_REQUIRE_KERNEL=1 but {loader.default_path()} did not load")
requires_kernel = unittest.skipUnless(
    LOADED, f"da8w4 kernel not built ({loader.default_path()})"
)

ISAS = ("scalar", "avx2", "avx512vnni", "amx")
OUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _isa_available(isa):
    order = {"scalar": 0, "avx2": 1, "avx512vnni": 2, "amx": 3}
    return LOADED and order[isa] <= order[loader.best_isa()]


def force_isa(isa):
    return mock.patch.dict(os.environ, {"DA8W4_ISA": isa})


def prepack(w, sw, zw):
    return torch.ops.torchao.da8w4_linear_prepack_cpu(w, sw, zw)


def da8w4(x, sa, za, packed, bias, out_dtype):
    pw, ps, pz, pc = packed
    return torch.ops.torchao.da8w4_linear_cpu(x, sa, za, pw, ps, pz, pc, bias, out_dtype)


@requires_kernel
@instantiate_parametrized_tests
class TestDa8w4Prepack(TestCase):
    @parametrize("group_size", (32, 64, 128, 256))
    def test_layout(self, group_size):
        gen = torch.Generator().manual_seed(group_size)
        n, k = 64, 512
        w, sw, zw = make_weight(n, k, group_size, gen)
        pw, ps, pz, pc = prepack(w, sw, zw)
        bk = min(group_size, 128)
        g = k // group_size
        self.assertEqual(pw.shape, (n // BN, k // bk, bk, BN // 2))
        self.assertEqual(pw.dtype, torch.int8)
        self.assertEqual(unpack_weight(pw), w, atol=0, rtol=0)
        # Scales and zero points: [n / 32, g, n % 32] = x[n, g] (torchao's layout).
        self.assertEqual(ps, sw.reshape(n // BN, BN, g).transpose(1, 2), atol=0, rtol=0)
        self.assertEqual(pz, zw.reshape(n // BN, BN, g).transpose(1, 2), atol=0, rtol=0)
        self.assertEqual((ps.dtype, pz.dtype, pc.dtype), (torch.float32, torch.int8, torch.int32))
        # compensation[n / 32, c, n % 32] = sum_{k in c} (w - zp)
        wd = w.to(torch.int32) - zw.to(torch.int32).repeat_interleave(group_size, dim=1)
        comp = wd.reshape(n, k // bk, bk).sum(-1, dtype=torch.int32).reshape(n // BN, BN, k // bk).transpose(1, 2)
        self.assertEqual(pc, comp, atol=0, rtol=0)

    def test_1d_scales(self):
        # A 1-D scales/qzeros means one group over the whole of K (torchao unsqueezes).
        gen = torch.Generator().manual_seed(0)
        w, sw, zw = make_weight(32, 64, 64, gen)
        got = prepack(w, sw.reshape(-1), zw.reshape(-1))
        want = prepack(w, sw, zw)
        for a, b in zip(got, want):
            self.assertEqual(a, b, atol=0, rtol=0)

    def test_converts_scale_and_zero_dtypes(self):
        gen = torch.Generator().manual_seed(0)
        w, sw, zw = make_weight(32, 64, 32, gen)
        got = prepack(w, sw.double(), zw.to(torch.int32))
        want = prepack(w, sw, zw)
        for a, b in zip(got, want):
            self.assertEqual(a, b, atol=0, rtol=0, exact_dtype=True)

    def test_rejects(self):
        w = torch.randint(0, 16, (64, 128), dtype=torch.uint8)
        s, z = torch.ones(64, 4), torch.zeros(64, 4, dtype=torch.int8)
        cases = [
            ((w[:48], s[:48], z[:48]), "N=48 must be a multiple of 32"),
            ((w.float(), s, z), "expected a 2-D uint8 weight"),
            ((w[None], s, z), r"expected a 2-D uint8 weight \[N, K\], got Byte of shape \[1, 64, 128\]"),
            ((w, torch.ones(64, 3), torch.zeros(64, 3, dtype=torch.int8)), "multiple of the number of groups"),
            # shapes and numbers are formatted without std::ostream (see num/shape in the kernel)
            ((w, s, z[:, :2]), r"qzeros must have the shape of scales \[64, 4\], got \[64, 2\]"),
            ((w[:, :6], torch.ones(64, 3), torch.zeros(64, 3, dtype=torch.int8)), "multiple of 4"),
            ((w | 16, s, z), r"int4 in \[0, 15\]"),
        ]
        for args, msg in cases:
            with self.assertRaisesRegex(RuntimeError, msg):
                prepack(*args)


@requires_kernel
@instantiate_parametrized_tests
class TestDa8w4Linear(TestCase):
    @parametrize("isa", ISAS)
    @parametrize("symmetric", (False, True))
    @parametrize("out_dtype", OUT_DTYPES)
    def test_matches_reference(self, isa, symmetric, out_dtype):
        if not _isa_available(isa):
            self.skipTest(f"{isa} not available on this CPU/build")
        gen = torch.Generator().manual_seed(1234)
        for i, (m_shape, k, n, group_size) in enumerate(SHAPES):
            w, sw, zw = make_weight(n, k, group_size, gen)
            x, sa, za = make_activation(m_shape, k, symmetric, gen)
            packed = prepack(w, sw, zw)
            for bias in (None, torch.randn(n, generator=gen)):
                want = reference_linear(x, sa, za, w, sw, zw, bias, out_dtype, symmetric)
                with force_isa(isa):
                    got = da8w4(x, sa, za, packed, bias, out_dtype)
                    self.assertEqual(loader.last_isa(), isa)
                self.assertEqual(got.shape, (*m_shape, n))
                self.assertEqual(got.dtype, out_dtype)
                self.assertEqual(
                    got, want, atol=0, rtol=0,
                    msg=f"shape #{i} {m_shape}x{k}x{n} gs={group_size} bias={bias is not None}",
                )

    @parametrize("symmetric", (False, True))
    def test_isa_paths_agree(self, symmetric):
        # Larger than the reference shapes: every row remainder of the 8-row (AVX-512)
        # row blocks, several 64-row chunks and N blocks.
        gen = torch.Generator().manual_seed(7)
        m, k, n = 150, 384, 160
        w, sw, zw = make_weight(n, k, 64, gen)
        x, sa, za = make_activation((m,), k, symmetric, gen)
        packed = prepack(w, sw, zw)
        bias = torch.randn(n, generator=gen)
        want = reference_linear(x, sa, za, w, sw, zw, bias, torch.float32, symmetric)
        for isa in ISAS:
            if _isa_available(isa):
                with force_isa(isa):
                    self.assertEqual(da8w4(x, sa, za, packed, bias, torch.float32), want, atol=0, rtol=0)

    @parametrize("symmetric", (False, True))
    def test_small_row_counts(self, symmetric):
        # Every row count of the small-tile paths (fp32 accumulators kept in registers
        # for <= 4 rows, the 8-row blocks above), with an even and an odd number of
        # 4-k steps per k block (group_size 32 and 36), against the reference.
        gen = torch.Generator().manual_seed(11)
        for group_size, k in ((32, 256), (36, 216)):
            n = 96
            w, sw, zw = make_weight(n, k, group_size, gen)
            packed = prepack(w, sw, zw)
            bias = torch.randn(n, generator=gen)
            for m in range(1, 10):
                x, sa, za = make_activation((m,), k, symmetric, gen)
                want = reference_linear(x, sa, za, w, sw, zw, bias, torch.float32, symmetric)
                for isa in ISAS:
                    if _isa_available(isa):
                        with force_isa(isa):
                            got = da8w4(x, sa, za, packed, bias, torch.float32)
                        self.assertEqual(
                            got, want, atol=0, rtol=0, msg=f"{isa} m={m} gs={group_size}"
                        )

    def test_thread_counts(self):
        # Each thread takes its own range of work items, then what the others left:
        # every item is computed whatever the thread count, including counts that do
        # not divide the items and more threads than cores or items. Deterministic
        # mode fills the op's at::empty output with NaN, so an item left out shows
        # (else a freed block of the last call could hold the right bits).
        gen = torch.Generator().manual_seed(13)
        k, n = 256, 7 * BN
        w, sw, zw = make_weight(n, k, 64, gen)
        packed = prepack(w, sw, zw)
        bias = torch.randn(n, generator=gen)
        before = torch.get_num_threads()
        deterministic = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(True)
        try:
            for m in (1, 3, 70):
                x, sa, za = make_activation((m,), k, False, gen)
                want = reference_linear(x, sa, za, w, sw, zw, bias, torch.float32, False)
                for threads in (1, 2, 3, 5, 8, 16):
                    torch.set_num_threads(threads)
                    for isa in ISAS:
                        if _isa_available(isa):
                            with force_isa(isa):
                                got = da8w4(x, sa, za, packed, bias, torch.float32)
                            self.assertEqual(
                                got, want, atol=0, rtol=0,
                                msg=f"{isa} m={m} threads={threads}",
                            )
        finally:
            torch.set_num_threads(before)
            torch.use_deterministic_algorithms(deterministic)

    def _thread_counts_in_a_process(self, **env):
        """test_thread_counts in a fresh process with ``env`` added (the settings
        below are read once per process)."""
        test = f"{os.path.abspath(__file__)}::{type(self).__name__}::test_thread_counts"
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
            env=dict(os.environ, **env), capture_output=True, text=True,
        )

    def test_amx_blocks_by_brgemm(self):
        # DA8W4_AMX_BLOCKS=brgemm, a benchmark of torchao main's route: each block's
        # int32 product from ATen's brgemm instead of the kernel's tiles gives the same
        # bits. The AMX tests, in a process that reads the setting (once).
        if not _isa_available("amx"):
            self.skipTest("amx not available on this CPU/build")
        tests = "amx_tiling or amx_row_chunks or amx_activation_zero_point or beyond_int32 or test_thread_counts"
        out = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", os.path.abspath(__file__),
             "-k", f"({tests}) and not fewer and not brgemm"],
            env=dict(os.environ, DA8W4_AMX_BLOCKS="brgemm"), capture_output=True, text=True,
        )
        self.assertEqual(out.returncode, 0, msg=out.stdout + out.stderr)
        self.assertIn("7 passed", out.stdout)

    def test_thread_counts_with_fewer_openmp_threads(self):
        # OMP_THREAD_LIMIT below torch's thread count: at::parallel_for's team is
        # smaller than the number of ranges, so a thread starts on several of them.
        out = self._thread_counts_in_a_process(OMP_THREAD_LIMIT="2")
        self.assertEqual(out.returncode, 0, msg=out.stdout + out.stderr)
        self.assertIn("1 passed", out.stdout)

    def test_unknown_schedule_is_refused(self):
        # DA8W4_SCHED (tuning builds) names a schedule; a dropped or misspelt one is
        # an error, never the default timed again under another name.
        out = self._thread_counts_in_a_process(DA8W4_SCHED="guided")
        self.assertNotEqual(out.returncode, 0, msg=out.stdout)
        self.assertIn("DA8W4_SCHED=guided: not a schedule", out.stdout + out.stderr)

    def test_extreme_values(self):
        # Largest magnitudes: a=255/za=0 against w=15/zw=0 and a=-128 against w=0/zw=15.
        for symmetric, a_val, w_val, z_val in ((False, 255, 15, 0), (True, -128, 0, 15), (True, 127, 15, 0)):
            n, k = 32, 256
            w = torch.full((n, k), w_val, dtype=torch.uint8)
            sw = torch.full((n, 2), 0.5)
            zw = torch.full((n, 2), z_val, dtype=torch.int8)
            dtype = torch.int8 if symmetric else torch.uint8
            x = torch.full((2, k), a_val, dtype=dtype)
            sa, za = torch.ones(2), torch.zeros(2, dtype=torch.int32)
            want = reference_linear(x, sa, za, w, sw, zw, None, torch.float32, symmetric)
            for isa in ISAS:
                if _isa_available(isa):
                    with force_isa(isa):
                        got = da8w4(x, sa, za, prepack(w, sw, zw), None, torch.float32)
                    self.assertEqual(got, want, atol=0, rtol=0)

    @parametrize("symmetric", (False, True))
    def test_amx_tiling(self, symmetric):
        # The AMX path's work split: several 32-row m tiles with 16-row and partial
        # tiles (m = 33, 70, 100), two N blocks per item with an odd number of N blocks
        # (N = 2080: 65 blocks), rows split over threads when N blocks are few (N = 32),
        # k blocks of 128, 64 and 36 bytes (one, one, nine-quad tile steps), every
        # output dtype; against the reference and the AVX512-VNNI path.
        if not _isa_available("amx"):
            self.skipTest("amx not available on this CPU/build")
        gen = torch.Generator().manual_seed(21)
        for m, k, n, group_size in ((33, 256, 96, 128), (70, 256, 2080, 64), (100, 216, 32, 36), (16, 128, 64, 128)):
            w, sw, zw = make_weight(n, k, group_size, gen)
            packed = prepack(w, sw, zw)
            bias = torch.randn(n, generator=gen)
            x, sa, za = make_activation((m,), k, symmetric, gen)
            for out_dtype in OUT_DTYPES:
                want = reference_linear(x, sa, za, w, sw, zw, bias, out_dtype, symmetric)
                with force_isa("amx"):
                    got = da8w4(x, sa, za, packed, bias, out_dtype)
                    self.assertEqual(loader.last_isa(), "amx")
                self.assertEqual(got, want, atol=0, rtol=0, msg=f"m={m} n={n} gs={group_size} {out_dtype}")

    @parametrize("symmetric", (False, True))
    def test_amx_row_chunks(self, symmetric):
        # Items of at most DA8W4_AMX_CHUNK_ROWS rows (rounded to whole 32-row m tiles),
        # taken chunk by chunk; 0 is the previous blocking (every item all rows). m = 231:
        # 8 m tiles, the last one partial; n = 2080: 65 N blocks, an odd last group.
        # Every blocking must give the reference's bits.
        if not _isa_available("amx"):
            self.skipTest("amx not available on this CPU/build")
        gen = torch.Generator().manual_seed(23)
        m, k, n, group_size = 231, 256, 2080, 128
        w, sw, zw = make_weight(n, k, group_size, gen)
        packed = prepack(w, sw, zw)
        bias = torch.randn(n, generator=gen)
        x, sa, za = make_activation((m,), k, symmetric, gen)
        want = reference_linear(x, sa, za, w, sw, zw, bias, torch.bfloat16, symmetric)
        for rows in ("32", "64", "100", "0", ""):
            env = {"DA8W4_ISA": "amx", "DA8W4_AMX_CHUNK_ROWS": rows}
            with mock.patch.dict(os.environ, env):
                got = da8w4(x, sa, za, packed, bias, torch.bfloat16)
                self.assertEqual(loader.last_isa(), "amx")
            self.assertEqual(got, want, atol=0, rtol=0, msg=f"chunk rows {rows!r}")

    def test_amx_activation_zero_point_routes(self):
        # The AMX epilogue takes float(C - za * comp) as one FMA on float(C), float(za)
        # and float(comp) while |za| < 2^24, and in int32 beyond. At the largest |C|
        # (a = 255 against w - zw = +-127 over a 128-k block: |C| = 4145280) with zero
        # points 0, 1, 255 and +-100000 (products up to 1.6e9), and with |za| >= 2^24
        # (int32 route); bit-identical to the reference and the other paths.
        if not _isa_available("amx"):
            self.skipTest("amx not available on this CPU/build")
        n, k, gs = 64, 256, 128
        w = torch.full((n, k), 15, dtype=torch.uint8)
        w[n // 2 :] = 0
        zw = torch.full((n, k // gs), -112, dtype=torch.int8)
        zw[n // 2 :] = 127
        sw = torch.full((n, k // gs), 0.25)
        x = torch.full((40, k), 255, dtype=torch.uint8)
        x[1::3] = 0
        za = torch.tensor([0, 1, 255, 100000, -100000] * 8, dtype=torch.int32)
        sa = torch.full((40,), 1.5)
        packed = prepack(w, sw, zw)
        want = reference_linear(x, sa, za, w, sw, zw, None, torch.float32, False)
        with force_isa("amx"):
            got = da8w4(x, sa, za, packed, None, torch.float32)
            self.assertEqual(loader.last_isa(), "amx")
        self.assertEqual(got, want, atol=0, rtol=0)
        # |za| >= 2^24 (second m tile only), where float(za) is not exact, against
        # comp = 3 per block (w - zw = 1 at three k of each block, else 0): za * comp
        # stays in int32 and the FMA route would round differently (za = 2^24 + 3).
        w_small = torch.full((n, k), 14, dtype=torch.uint8)
        w_small[:, [0, 1, 2, gs, gs + 1, gs + 2]] = 15
        zw_small = torch.full((n, k // gs), 14, dtype=torch.int8)
        za_big = za.clone()
        za_big[32:] = torch.tensor([2**24 + 3, -(2**24) - 7, 2**26 + 1, 3, 5, 7, 11, 13], dtype=torch.int32)
        packed = prepack(w_small, sw, zw_small)
        want = reference_linear(x, sa, za_big, w_small, sw, zw_small, None, torch.float32, False)
        for isa in ISAS:
            if _isa_available(isa):
                with force_isa(isa):
                    got = da8w4(x, sa, za_big, packed, None, torch.float32)
                self.assertEqual(got, want, atol=0, rtol=0, msg=isa)

    def test_zero_point_products_beyond_int32(self):
        # za * comp past 2^31 (za = +-200000 against comp = 115 * 128 = 14720 per block):
        # every path takes the block product modulo 2^32, as int32 arithmetic wraps, and
        # they agree bit for bit. The AMX epilogue's FMA route would compute it exactly
        # instead, so it is bounded to |za| * BK * 127 + BK * 255 * 127 < 2^31.
        n, k, gs = 64, 256, 128
        w = torch.full((n, k), 15, dtype=torch.uint8)
        zw = torch.full((n, k // gs), -100, dtype=torch.int8)
        sw = torch.full((n, k // gs), 0.25)
        gen = torch.Generator().manual_seed(41)
        x = torch.randint(0, 256, (40, k), dtype=torch.uint8, generator=gen)
        za = torch.tensor([200000, -200000, 150000, 131000, 7] * 8, dtype=torch.int32)
        sa = torch.full((40,), 1.5)
        packed = prepack(w, sw, zw)
        want = reference_linear(x, sa, za, w, sw, zw, None, torch.float32, False)
        ran = []
        for isa in ISAS:
            if _isa_available(isa):
                with force_isa(isa):
                    got = da8w4(x, sa, za, packed, None, torch.float32)
                    ran.append(loader.last_isa())
                self.assertEqual(got, want, atol=0, rtol=0, msg=isa)
        self.assertIn("scalar", ran)

    def test_amx_zero_point_out_of_int8_range(self):
        # zw < -112 makes w - zw overflow int8 (the AMX path's B operand): the work
        # items holding such a zero point go to the AVX512-VNNI kernel, with the same
        # (exact) result; the others stay on AMX (M = 40: two m tiles).
        if not _isa_available("amx"):
            self.skipTest("amx not available on this CPU/build")
        gen = torch.Generator().manual_seed(22)
        w, sw, zw = make_weight(64, 256, 128, gen)
        zw[3, 1] = -120
        packed = prepack(w, sw, zw)
        x, sa, za = make_activation((40,), 256, False, gen)
        want = reference_linear(x, sa, za, w, sw, zw, None, torch.float32, False)
        with force_isa("amx"):
            got = da8w4(x, sa, za, packed, None, torch.float32)
            self.assertEqual(loader.last_isa(), "amx")
        self.assertEqual(got, want, atol=0, rtol=0)

    def test_3d_input_is_flattened(self):
        gen = torch.Generator().manual_seed(3)
        w, sw, zw = make_weight(64, 128, 32, gen)
        x, sa, za = make_activation((2, 3), 128, False, gen)
        packed = prepack(w, sw, zw)
        y3 = da8w4(x, sa, za, packed, None, torch.bfloat16)
        y2 = da8w4(x.reshape(6, 128), sa, za, packed, None, torch.bfloat16)
        self.assertEqual(y3.shape, (2, 3, 64))
        self.assertEqual(y3.reshape(6, 64), y2, atol=0, rtol=0)

    def test_non_contiguous_input(self):
        gen = torch.Generator().manual_seed(4)
        w, sw, zw = make_weight(32, 64, 32, gen)
        x, sa, za = make_activation((8,), 128, False, gen)
        x = x[:, ::2]
        packed = prepack(w, sw, zw)
        self.assertEqual(
            da8w4(x, sa, za, packed, None, torch.float32),
            da8w4(x.contiguous(), sa, za, packed, None, torch.float32),
            atol=0, rtol=0,
        )

    def test_empty_m(self):
        gen = torch.Generator().manual_seed(5)
        packed = prepack(*make_weight(32, 64, 32, gen))
        x = torch.empty(0, 64, dtype=torch.uint8)
        e, ei = torch.empty(0), torch.empty(0, dtype=torch.int32)
        self.assertEqual(da8w4(x, e, ei, packed, None, torch.float32).shape, (0, 32))

    def test_symmetric_ignores_zero_points_and_compensation(self):
        # Symmetric activations read neither input_qzeros nor compensation (as torchao).
        gen = torch.Generator().manual_seed(6)
        w, sw, zw = make_weight(32, 64, 32, gen)
        x, sa, za = make_activation((4,), 64, True, gen)
        pw, ps, pz, pc = prepack(w, sw, zw)
        want = da8w4(x, sa, za, (pw, ps, pz, pc), None, torch.float32)
        got = torch.ops.torchao.da8w4_linear_cpu(
            x, sa, torch.full_like(za, 77), pw, ps, pz, torch.empty(0, dtype=torch.int32), None, torch.float32
        )
        self.assertEqual(got, want, atol=0, rtol=0)

    def test_rejects(self):
        gen = torch.Generator().manual_seed(8)
        w, sw, zw = make_weight(64, 128, 32, gen)
        pw, ps, pz, pc = prepack(w, sw, zw)
        x, sa, za = make_activation((3,), 128, False, gen)
        op = torch.ops.torchao.da8w4_linear_cpu

        def call(**kw):
            args = dict(input=x, input_scales=sa, input_qzeros=za, weight=pw, weight_scales=ps,
                        weight_qzeros=pz, compensation=pc, bias=None, output_dtype=torch.float32)
            args.update(kw)
            return op(*args.values())

        cases = [
            (dict(input=x.float()), "input must be uint8 .* or int8"),
            (dict(output_dtype=torch.int32), "output_dtype must be float32, bfloat16 or float16"),
            (dict(input=x[:, :96]), r"input.size\(-1\)=96 does not match the weight's K=128"),
            (dict(input_scales=sa[:2]), "one scale per row"),
            (dict(input_qzeros=za[:2]), "input_qzeros must have the shape of input_scales"),
            (dict(input_qzeros=za.long()), "input_qzeros of dtype Int"),
            (dict(input_scales=sa.double()), "input_scales of dtype Float"),
            (dict(weight=pw.reshape(2, 4, 64, 8)), r"weight.size\(3\) \* 2 must be the block size 32"),
            (dict(weight=pw.reshape(2, 4, -1)), "expected a prepacked int8 weight"),
            (dict(weight=pw.view(torch.uint8)), "the weight is uint8, packed by an earlier version"),
            (dict(weight=torch.zeros(2, 1, 256, 16, dtype=torch.int8)), r"weight.size\(2\)=256 must be .* at most 128"),
            (dict(weight_scales=ps[:1]), "expected weight_scales of shape"),
            (dict(weight_qzeros=pz.int()), "weight_qzeros of dtype Char"),
            (dict(compensation=pc[:, :2]), "expected compensation of shape"),
            (dict(bias=torch.zeros(32)), r"expected bias of shape \[64\]"),
            (dict(bias=torch.zeros(64, dtype=torch.bfloat16)), "bias of dtype Float"),
        ]
        for kw, msg in cases:
            with self.assertRaisesRegex(RuntimeError, msg):
                call(**kw)

    def test_isa_env(self):
        gen = torch.Generator().manual_seed(9)
        w, sw, zw = make_weight(32, 64, 32, gen)
        x, sa, za = make_activation((2,), 64, False, gen)
        packed = prepack(w, sw, zw)
        with force_isa("sse9"), self.assertRaisesRegex(RuntimeError, "unknown DA8W4_ISA=sse9"):
            da8w4(x, sa, za, packed, None, torch.float32)
        with force_isa("auto"):
            da8w4(x, sa, za, packed, None, torch.float32)
            # Auto-selected AMX leaves a few rows to the AVX512-VNNI register kernel.
            best = loader.best_isa()
            self.assertEqual(loader.last_isa(), "avx512vnni" if best == "amx" else best)
            x64, sa64, za64 = make_activation((64,), 64, False, gen)
            da8w4(x64, sa64, za64, packed, None, torch.float32)
            self.assertEqual(loader.last_isa(), best)
        with force_isa("scalar"):
            da8w4(x, sa, za, packed, None, torch.float32)
            self.assertEqual(loader.last_isa(), "scalar")


@requires_kernel
class TestDa8w4Loader(TestCase):
    def test_idempotent(self):
        self.assertTrue(loader.load())
        self.assertTrue(loader.load(loader.default_path()))
        with self.assertRaisesRegex(RuntimeError, "already loaded"):
            loader.load(__file__)  # a different file must not be loaded over ours
        self.assertTrue(loader.has_cpu_kernel())
        # Each schema is defined exactly once, with torchao's spelling.
        for name, schema in (
            ("da8w4_linear_prepack_cpu", loader.PREPACK_SCHEMA),
            ("da8w4_linear_cpu", loader.LINEAR_SCHEMA),
        ):
            op = getattr(torch.ops.torchao, name).default
            self.assertEqual(str(op._schema), "torchao::" + schema)

    def test_missing_library_loads_nothing(self):
        # In a fresh process: a missing file returns False and defines nothing.
        code = (
            "import importlib.util, sys\n"
            f"spec = importlib.util.spec_from_file_location('l', {str(loader.__file__)!r})\n"
            "l = importlib.util.module_from_spec(spec); spec.loader.exec_module(l)\n"
            "print(l.load('/nonexistent/libda8w4_linear_cpu.so'), l._schema_defined('da8w4_linear_cpu'))\n"
        )
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # without torchao
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        self.assertEqual(out.stdout.split(), ["False", "False"])


@requires_kernel
@instantiate_parametrized_tests
class TestDa8w4Fake(TestCase):
    @parametrize("group_size", (32, 256))
    def test_fake_matches_real(self, group_size):
        gen = torch.Generator().manual_seed(10)
        w, sw, zw = make_weight(64, 512, group_size, gen)
        x, sa, za = make_activation((2, 3), 512, False, gen)
        real = prepack(w, sw, zw)
        real_y = da8w4(x, sa, za, real, None, torch.bfloat16)
        with FakeTensorMode() as mode:
            fw, fsw, fzw = (mode.from_tensor(t) for t in (w, sw, zw))
            fx, fsa, fza = (mode.from_tensor(t) for t in (x, sa, za))
            fake = prepack(fw, fsw, fzw)
            fake_y = da8w4(fx, fsa, fza, fake, None, torch.bfloat16)
        for r, f in zip((*real, real_y), (*fake, fake_y)):
            self.assertEqual((f.shape, f.dtype), (r.shape, r.dtype))

    @parametrize("symmetric", (False, True))
    def test_opcheck(self, symmetric):
        # Schema, fake-vs-real shapes/strides/dtypes and dispatcher registrations.
        gen = torch.Generator().manual_seed(12)
        w, sw, zw = make_weight(64, 256, 64, gen)
        torch.library.opcheck(torch.ops.torchao.da8w4_linear_prepack_cpu.default, (w, sw, zw))
        pw, ps, pz, pc = prepack(w, sw, zw)
        x, sa, za = make_activation((2, 3), 256, symmetric, gen)
        for bias, dtype in ((None, torch.bfloat16), (torch.randn(64, generator=gen), torch.float32)):
            torch.library.opcheck(
                torch.ops.torchao.da8w4_linear_cpu.default, (x, sa, za, pw, ps, pz, pc, bias, dtype)
            )

    def test_meta(self):
        pw, ps, pz, pc = prepack(*(t.to("meta") for t in make_weight(64, 256, 128, torch.Generator())))
        self.assertEqual(pw.shape, (2, 2, 128, 16))
        x = torch.empty(5, 256, dtype=torch.int8, device="meta")
        y = torch.ops.torchao.da8w4_linear_cpu(
            x, torch.empty(5, device="meta"), torch.empty(5, dtype=torch.int32, device="meta"),
            pw, ps, pz, pc, None, torch.float16,
        )
        self.assertEqual((y.shape, y.dtype, y.device.type), ((5, 64), torch.float16, "meta"))

    def test_fake_rejects(self):
        with FakeTensorMode():
            with self.assertRaisesRegex(RuntimeError, "must be a multiple of 32"):
                prepack(torch.empty(48, 64, dtype=torch.uint8), torch.empty(48, 2), torch.empty(48, 2, dtype=torch.int8))
            with self.assertRaisesRegex(RuntimeError, "does not match the weight's K"):
                da8w4(
                    torch.empty(3, 60, dtype=torch.uint8), torch.empty(3), torch.empty(3, dtype=torch.int32),
                    (torch.empty(1, 2, 32, 16, dtype=torch.int8), torch.empty(1, 2, 32),
                     torch.empty(1, 2, 32, dtype=torch.int8), torch.empty(1, 2, 32, dtype=torch.int32)),
                    None, torch.float32,
                )

    def test_compile_fullgraph_dynamic_m(self):
        gen = torch.Generator().manual_seed(11)
        w, sw, zw = make_weight(64, 128, 32, gen)
        pw, ps, pz, pc = prepack(w, sw, zw)
        bias = torch.randn(64, generator=gen)

        def f(x, sa, za):
            y = torch.ops.torchao.da8w4_linear_cpu(x, sa, za, pw, ps, pz, pc, bias, torch.float32)
            return torch.relu(y) * 2.0

        torch._dynamo.reset()
        compiled = torch.compile(f, fullgraph=True, dynamic=True)
        for m in (3, 8, 1):
            x, sa, za = make_activation((m,), 128, False, gen)
            got, (code,) = run_and_get_code(compiled, x, sa, za)
            FileCheck().check("torch.ops.torchao.da8w4_linear_cpu.default").run(code)
            self.assertEqual(got, f(x, sa, za), atol=0, rtol=0)
        torch._dynamo.reset()


if __name__ == "__main__":
    run_tests()
