"""pytest setup for this repo's test/ tree (not shipped in the patches).

Loads our CPU kernel for torchao::da8w4_linear_cpu (csrc/, built with
`cmake -G Ninja -S . -B build && cmake --build build`) when it is built, so that in this
repo's CI the torchao ops have a real CPU kernel. When it is not built nothing happens:
tests that need the op then skip or fall back to their own reference implementation,
exactly as they do inside a PyTorch checkout. DA8W4_REQUIRE_KERNEL=1 makes a missing
build an error instead.
"""

import importlib.util
import os
import pathlib
import sys


_LOADER = pathlib.Path(__file__).resolve().parents[1] / "csrc" / "da8w4_linear_cpu.py"


def _load_da8w4_kernel() -> None:
    if not _LOADER.is_file():
        return
    mod = sys.modules.get("da8w4_linear_cpu")
    if mod is None:
        spec = importlib.util.spec_from_file_location("da8w4_linear_cpu", _LOADER)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["da8w4_linear_cpu"] = mod
        spec.loader.exec_module(mod)
    if not mod.load() and os.environ.get("DA8W4_REQUIRE_KERNEL") == "1":
        raise RuntimeError(
            f"DA8W4_REQUIRE_KERNEL=1 but the da8w4 kernel did not load from {mod.default_path()}"
        )


_load_da8w4_kernel()
