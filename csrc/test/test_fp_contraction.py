# Owner(s): ["module: inductor"]
"""The kernels keep their multiplies and adds apart under any compiler flags.

Every ISA path must give the spec's bits, so no multiply and add may be fused into
an FMA (csrc/da8w4/kernel.h). Our build passes -ffp-contract=off; another build
(torchao's, a compiler's default -ffp-contract=fast with FMA enabled) would not, so
the source forbids contraction (kernel.h: the AVX-512 paths' round-to-nearest
intrinsics, pragmas scoped to the scalar and AVX2 loops and to the op's own code).
Each ISA translation unit (they include no torch header) is compiled to assembly with its own ISA flags and our
build's path switches twice, with -ffp-contract=off and with -ffp-contract=fast, and
must hold the same number of FMA instructions: only those its source asks for (the
AMX epilogue's exact fnmadd). With the plain intrinsics, or without the scalar loop's
pragma, GCC fuses more. The same holds for the kernel PR's file, all of it in one
translation unit.
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
AVX512 = ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni", "-mfma"]
AMX = [*AVX512, "-mamx-tile", "-mamx-int8"]
# every path's switch, as csrc/CMakeLists.txt defines them for the whole library
DEFINES = ["-DDA8W4_HAVE_AVX2", "-DDA8W4_HAVE_AVX512VNNI", "-DDA8W4_HAVE_AMX"]
UNITS = {
    "kernel_scalar.cpp": ["-mavx2", "-mfma"],  # scalar C++, on a target with FMA
    "kernel_avx2.cpp": ["-mavx2", "-mfma"],
    "kernel_avx512vnni.cpp": AVX512,
    "kernel_amx.cpp": AMX,
}
FMA = re.compile(r"^\s*vfn?m(add|sub)", re.MULTILINE)
# The kernel PR's file (tools/torchao_kernel.py): one translation unit with torch's headers, its
# ISA sections under target pragmas, built with -mfma by torchao's setup.py.
PORT = Path(__file__).resolve().parents[2] / "upstream-prs" / "pytorch-ao" / "da8w4_linear.cpp"
CXX = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")


def count_fmas(source: Path, flags: list[str], contract: str) -> int:
    """FMA instructions in ``source`` compiled at -O3 with ``flags`` and -ffp-contract=``contract``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "unit.s")
        cmd = [CXX, "-std=c++17", "-O3", f"-ffp-contract={contract}", *flags]
        cmd += ["-w", "-S", "-o", out, str(source)]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        return len(FMA.findall(Path(out).read_text()))


def fmas(unit: str, contract: str) -> int:
    return count_fmas(SRC / unit, [*UNITS[unit], *DEFINES], contract)


def compiler_takes(flags: list[str]) -> bool:
    """Whether the compiler builds an empty program with ``flags`` (an older one lacks AMX's)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "empty.cpp"
        src.write_text("int main() { return 0; }\n")
        cmd = [CXX, *flags, "-c", "-o", os.path.join(tmp, "empty.o"), str(src)]
        return subprocess.run(cmd, capture_output=True, check=False).returncode == 0


def port_fmas(contract: str) -> int:
    """The port at -mavx2 -mfma, with torch's headers."""
    from torch.utils.cpp_extension import include_paths

    flags = ["-mavx2", "-mfma", "-fopenmp", *(f"-isystem{d}" for d in include_paths())]
    return count_fmas(PORT, flags, contract)


@unittest.skipUnless(
    platform.machine() in ("x86_64", "AMD64") and CXX, "needs an x86 C++ compiler"
)
class TestFpContraction(TestCase):
    def test_no_contraction_under_fast_flags(self):
        for unit in UNITS:
            with self.subTest(unit=unit):
                if not compiler_takes(UNITS[unit]):
                    self.skipTest(f"{CXX} lacks {' '.join(UNITS[unit])}")
                off = fmas(unit, "off")  # a compile error here is a failure
                self.assertEqual(fmas(unit, "fast"), off)

    def test_no_contraction_in_the_port(self):
        # the AVX-512 sections' round-to-nearest intrinsics, the scoped pragmas of the
        # scalar and the op sections: only the AMX epilogue's fnmadds are left
        try:
            off = port_fmas("off")
        except subprocess.CalledProcessError as e:
            self.skipTest(f"{CXX} cannot compile the port: {e.stderr[-300:]}")
        self.assertGreater(off, 0)
        self.assertEqual(port_fmas("fast"), off)


if __name__ == "__main__":
    run_tests()
