# Owner(s): ["module: inductor"]
"""The kernels keep their multiplies and adds apart under any compiler flags.

Every ISA path must give the spec's bits, so no multiply and add may be fused into
an FMA (csrc/da8w4/kernel.h). Our build passes -ffp-contract=off; another build
(torchao's, a compiler's default -ffp-contract=fast with FMA enabled) would not, so
kernel.h forbids contraction in the source. Each ISA translation unit (they include
no torch header) is compiled to assembly with its own ISA flags twice, with
-ffp-contract=off and with -ffp-contract=fast, and must hold the same number of FMA
instructions: only those its source asks for (the AMX epilogue's exact
fnmadd). Without kernel.h's pragmas GCC fuses more, in every file.
"""

import os
import platform
import re
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

from torch.testing._internal.common_utils import run_tests, TestCase


SRC = Path(__file__).resolve().parents[1] / "da8w4"
AVX512 = ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni"]
UNITS = {
    "kernel_scalar.cpp": ["-mavx2", "-mfma"],  # scalar C++, on a target with FMA
    "kernel_avx2.cpp": ["-mavx2", "-mfma"],
    "kernel_avx512vnni.cpp": AVX512,
    "kernel_amx.cpp": [*AVX512, "-mamx-tile", "-mamx-int8"],
}
FMA = re.compile(r"^\s*vfn?m(add|sub)", re.MULTILINE)
CXX = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")


def fmas(unit: str, contract: str) -> int:
    """FMA instructions in ``unit`` compiled at -O3 with -ffp-contract=``contract``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "unit.s")
        cmd = [CXX, "-std=c++17", "-O3", f"-ffp-contract={contract}", *UNITS[unit]]
        cmd += ["-w", "-S", "-o", out, str(SRC / unit)]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        return len(FMA.findall(Path(out).read_text()))


@unittest.skipUnless(
    platform.machine() in ("x86_64", "AMD64") and CXX, "needs an x86 C++ compiler"
)
class TestFpContraction(TestCase):
    def test_no_contraction_under_fast_flags(self):
        for unit in UNITS:
            with self.subTest(unit=unit):
                try:
                    off = fmas(unit, "off")
                except subprocess.CalledProcessError as e:
                    self.skipTest(f"{CXX} cannot compile {unit}: {e.stderr[-300:]}")
                self.assertEqual(fmas(unit, "fast"), off)


if __name__ == "__main__":
    run_tests()
