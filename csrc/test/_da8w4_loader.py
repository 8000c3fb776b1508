"""Shared by the csrc/test tests: import csrc/da8w4_linear_cpu.py (the kernel
library's loader) once, as the module ``da8w4_linear_cpu``."""

import importlib.util
import pathlib
import sys


def import_loader():
    if "da8w4_linear_cpu" in sys.modules:
        return sys.modules["da8w4_linear_cpu"]
    path = pathlib.Path(__file__).resolve().parents[1] / "da8w4_linear_cpu.py"
    spec = importlib.util.spec_from_file_location("da8w4_linear_cpu", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["da8w4_linear_cpu"] = mod
    spec.loader.exec_module(mod)
    return mod
