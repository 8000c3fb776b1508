# Owner(s): ["module: inductor"]
"""The kernel PR's file gives the spec's bits.

``upstream-prs/pytorch-ao/da8w4_linear.cpp`` (tools/torchao_kernel.py's port of csrc/da8w4/)
is built as torchao 0.18.0's setup.py builds its CPU kernels (torchao_port_plugin) and loaded
alone, without our library, in a process of its own (_torchao_port_worker.py), so that this
file can run next to our library's tests. Its results must equal the pure-PyTorch reference
of the spec bit for bit, as our library's do, on the path this CPU takes (AMX from 8 rows
where the CPU has it, the AVX512-VNNI register kernel below that and on other AVX-512 CPUs),
built with torchao's ISA flags and without them (what its setup.py gives where it finds no
AVX-512), and with its x86-64 sections compiled out, on the scalar loop.
"""

import json
import os
import subprocess
import sys
import tempfile

from torch.testing._internal.common_utils import (
    instantiate_parametrized_tests,
    parametrize,
    run_tests,
    TestCase,
)


HERE = os.path.dirname(os.path.abspath(__file__))


def run_worker(*args: str, isa_flags: bool = True) -> dict:
    """The worker's results; it builds in ``TORCHAO_PORT_BUILD_DIR`` where set (kept), else in a
    temporary directory removed after it."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]))
    env["TORCHAO_PORT_ISA_FLAGS"] = "1" if isa_flags else "0"
    env.pop("DA8W4_LINEAR_CPU_LIB", None)  # the worker loads the port, never our library
    with tempfile.TemporaryDirectory(prefix="torchao-port-") as build:
        env.setdefault("TORCHAO_PORT_BUILD_DIR", build)
        out = subprocess.run(
            [sys.executable, os.path.join(HERE, "_torchao_port_worker.py"), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
    if out.returncode != 0:
        raise AssertionError(f"worker {args} failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


@instantiate_parametrized_tests
class TestTorchaoPort(TestCase):
    @parametrize("build", ("as_built", "without_isa_flags", "scalar_only"))
    def test_matches_reference(self, build):
        args = ["--scalar-only"] if build == "scalar_only" else []
        results = run_worker(*args, isa_flags=build != "without_isa_flags")
        cases = results["cases"]
        self.assertGreater(len(cases), 100)
        wrong = [case for case, ok in cases.items() if not ok]
        self.assertEqual(wrong, [], msg=f"built with {results['flags']}")


if __name__ == "__main__":
    run_tests()
