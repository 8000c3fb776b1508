"""Our AMX path beside ATen's brgemm on one thread.

ATen's ``at::native::cpublas::brgemm`` (oneDNN's ukernel) loads its tile configuration
(LDTILECFG) only when it believes another one is loaded: it remembers, per thread, the
last kernel it configured, until ``brgemm_release()`` says the tiles were released. Our
AMX path configures the tiles itself and releases them when it is done; if ATen still
believed its configuration loaded, its next brgemm would run tile instructions on
released tiles, which fault (#UD, SIGILL). So our release goes through
``brgemm_release()`` too. Here a brgemm that is not released, then our op, then the same
brgemm again, in a process of its own (a fault kills it), single-threaded so that every
call runs on that one thread. Needs AMX-INT8 (skipped elsewhere) and builds a small
extension with torch's C++ toolchain.
"""

import os
import pathlib
import subprocess
import sys
import tempfile
import unittest

import torch
import torch.utils.cpp_extension
from torch.testing._internal.common_utils import run_tests, TestCase

from _da8w4_loader import import_loader


HERE = pathlib.Path(__file__).resolve().parent
loader = import_loader()
LOADED = loader.load()

SOURCE = r"""
#include <ATen/ATen.h>
#include <ATen/native/CPUBlas.h>

bool can_pack() {
  return at::native::cpublas::could_pack(at::kByte);
}

// u8 x s8 -> s32 brgemm of ones (the VNNI layout of B does not matter then), left
// configured: no brgemm_release().
at::Tensor brgemm_ones(int64_t M, int64_t N, int64_t K) {
  auto a = at::ones({M, K}, at::kByte);
  auto b = at::ones({K, N}, at::kChar);
  auto c = at::zeros({M, N}, at::kInt);
  at::native::cpublas::brgemm(M, N, K, K, N, N, false, a.data_ptr<uint8_t>(),
                              b.data_ptr<int8_t>(), c.data_ptr<int32_t>());
  return c;
}
"""

CHILD = """
import sys
import torch
import torch.utils.cpp_extension
import torch.utils.cpp_extension

sys.path.insert(0, {here!r})
from _da8w4_loader import import_loader
from _da8w4_reference import make_activation, make_weight

loader = import_loader()
assert loader.load()
ext = torch.utils.cpp_extension.load_inline(
    "da8w4_brgemm_probe", cpp_sources=[{source!r}],
    functions=["can_pack", "brgemm_ones"], build_directory={build!r})
torch.set_num_threads(1)
first = ext.brgemm_ones(32, 32, 64)
gen = torch.Generator().manual_seed(0)
w, sw, zw = make_weight(64, 256, 128, gen)
x, sa, za = make_activation((32,), 256, False, gen)
packed = torch.ops.torchao.da8w4_linear_prepack_cpu(w, sw, zw)
torch.ops.torchao.da8w4_linear_cpu(x, sa, za, *packed, None, torch.float)
assert loader.last_isa() == "amx", loader.last_isa()
again = ext.brgemm_ones(32, 32, 64)
assert bool((first == 64).all()) and bool((again == 64).all()), (first, again)
print("ok")
"""


def _amx_int8() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " amx_int8" in line for line in f)
    except OSError:
        return False


@unittest.skipUnless(LOADED and loader.best_isa() == "amx", "needs our kernel with its AMX path")
@unittest.skipUnless(_amx_int8(), "needs AMX-INT8")
class TestBrgemmBesideOurTiles(TestCase):
    def test_brgemm_configures_again_after_our_op(self):
        with tempfile.TemporaryDirectory() as build:
            ext = torch.utils.cpp_extension.load_inline(
                "da8w4_brgemm_probe",
                cpp_sources=[SOURCE],
                functions=["can_pack", "brgemm_ones"],
                build_directory=build,
            )
            if not ext.can_pack():
                self.skipTest("ATen's brgemm does not use AMX here (oneDNN ukernel off)")
            code = CHILD.format(here=str(HERE), source=SOURCE, build=build)
            r = subprocess.run(
                [sys.executable, "-c", code],
                capture_output=True,
                text=True,
                env=dict(os.environ, OMP_NUM_THREADS="1"),
            )
        self.assertEqual(
            r.returncode, 0, msg=f"exit {r.returncode} (-4: SIGILL)\n{r.stderr[-2000:]}"
        )
        self.assertEqual(r.stdout.strip().splitlines()[-1], "ok")


if __name__ == "__main__":
    run_tests()
