# Owner(s): ["module: inductor"]
"""The kernel PR's file for torchao main builds as main builds it, once per ISA level.

``upstream-prs/pytorch-ao/da8w4_linear_krnl.cpp`` (tools/torchao_kernel.py's ``render_main``)
is compiled as torchao main's setup.py compiles ``aten_kernels/*_krnl.cpp``: the DEFAULT copy
and those above it (AVX512, AVX10_2), with a stand-in for main's ``utils.h`` (the one function
the file uses of it). Each copy must define exactly the two entry points main's ``dispatch.cpp``
calls, in its level's namespace, keep everything else internal (the copies are linked
together), and hold the vector paths at every level above DEFAULT and only there. Run with
main's own dispatch.cpp, torchao's tests pass against it (``torchao_main_plugin.py``, which
needs a checkout of main).
"""

import os
import pathlib
import shutil
import subprocess
import sysconfig
import tempfile

import torch
import torch.utils.cpp_extension
from torch.testing._internal.common_utils import run_tests, TestCase

from torchao_main_plugin import AVX512, KRNL


UTILS_H = """\
#pragma once
// Stand-in for torchao main's utils.h: what da8w4_linear_krnl.cpp uses of it.
inline int dispatch_mode = 2;
static inline bool brgemm_enabled() {
  return dispatch_mode >= 2;
}
"""

# main's levels as its dynamic_dispatch.md gives them: -DCPU_CAPABILITY_<LEVEL> and the
# level's -m flags (AVX10_2: AVX512's plus -mavx10.2, which GCC 15 first has, so not here).
# torchao_main_plugin.py builds AVX512 with CPU_CAPABILITY_AVX512_VNNI as well.
LEVELS = {
    "DEFAULT": ["-DCPU_CAPABILITY=DEFAULT", "-fno-tree-vectorize"],
    "AVX512": ["-DCPU_CAPABILITY_AVX512", "-DCPU_CAPABILITY=AVX512", *AVX512],
    "AVX10_2": ["-DCPU_CAPABILITY_AVX10_2", "-DCPU_CAPABILITY=AVX10_2", *AVX512],
}


def global_text_symbols(obj: str) -> list[str]:
    """Demangled names of the strong functions ``obj`` defines."""
    out = subprocess.run(
        ["nm", "--defined-only", "-C", obj], capture_output=True, text=True, check=True
    ).stdout
    return [line.split(" ", 2)[2] for line in out.splitlines() if line.split(" ")[1:2] == ["T"]]


class TestTorchaoMainPort(TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.build = tempfile.mkdtemp(prefix="torchao-main-port-")
        pathlib.Path(cls.build, "utils.h").write_text(UTILS_H)
        cxx = os.environ.get("CXX", "g++")
        common = [cxx, "-O1", "-std=c++20", "-fPIC", "-fopenmp", f"-I{cls.build}"]
        common += [f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"]
        common += [f"-I{p}" for p in torch.utils.cpp_extension.include_paths()]
        common += [f"-I{sysconfig.get_path('include')}"]
        cls.objs = {}
        procs = {}
        for level, flags in LEVELS.items():
            obj = os.path.join(cls.build, f"krnl.{level}.o")
            procs[level] = subprocess.Popen(
                [*common, *flags, "-c", str(KRNL), "-o", obj],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            cls.objs[level] = obj
        for level, proc in procs.items():
            out, _ = proc.communicate(timeout=900)
            if proc.returncode:
                raise AssertionError(f"{level} copy does not build:\n{out[-4000:]}")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.build, ignore_errors=True)
        super().tearDownClass()

    def test_each_level_defines_the_two_entry_points_alone(self):
        for level, obj in self.objs.items():
            names = sorted(
                n.split("(")[0]
                for n in global_text_symbols(obj)
                if n.startswith("torchao::")
            )
            self.assertEqual(
                names,
                [
                    f"torchao::{level}::da8w4_linear_impl",
                    f"torchao::{level}::da8w4_linear_prepack_impl",
                ],
            )
            # nothing else of the file's own is global: the copies are linked together
            ours = [n for n in global_text_symbols(obj) if "da8w4" in n]
            self.assertEqual(len(ours), 2, msg=ours)

    def test_vector_paths_at_every_level_above_default(self):
        def code(obj):
            return subprocess.run(
                ["objdump", "-d", "--no-show-raw-insn", obj],
                capture_output=True,
                text=True,
                check=True,
            ).stdout

        default = code(self.objs["DEFAULT"])
        self.assertNotIn("zmm", default)  # the scalar loop alone
        self.assertNotIn("tdpbusd", default)
        for level in ("AVX512", "AVX10_2"):
            text = code(self.objs[level])
            # the AVX512-VNNI register kernel and the AMX tiles
            for insn in ("vpdpbusd", "tdpbusd"):
                self.assertTrue(insn in text, msg=f"{level}: no {insn}")


if __name__ == "__main__":
    run_tests()
