"""pytest plugin: torchao's own da8w4 tests, unchanged, against this kernel.

torchao 0.18.0's wheel installs its test file for the op, ``test/prototype/test_da8w4_cpu.py``
(52 tests: the quantize_ + torch.compile flow in every dtype, bias, rank, batch and
activation mapping, and its concat-linear pass), into site-packages. Its tests skip unless
a CPU kernel for ``torchao::da8w4_linear_cpu`` is registered when the file is imported, and
the wheel ships none; loaded as a plugin (``-p torchao_kernel_plugin``, with csrc/test on
``PYTHONPATH``), this module registers ours before pytest imports the file. torchao's Python is the kernel
PR's (``_torchao_pr.py``): our kernel is the one that PR ships, and the PR's test file runs
here too::

    PYTHONPATH=csrc/test python -m pytest -p torchao_kernel_plugin \\
        "$(python csrc/test/torchao_kernel_plugin.py)"

Run as a script it prints that file's path (exit status 1, with the reason, when torchao
or the file is missing). CTest runs it as ``csrc.torchao_da8w4_cpu`` and fails on any
skip, since a skip there means the kernel was not used.
"""

import importlib.metadata
import pathlib
import sys

from _da8w4_loader import import_loader
from _torchao_pr import same_in_children, use_patched_torchao


TEST_FILE = "test/prototype/test_da8w4_cpu.py"


def torchao_test_file() -> str:
    dist = importlib.metadata.distribution("torchao")
    path = dist.locate_file(TEST_FILE)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: torchao {dist.version} installed no {TEST_FILE}"
        )
    return str(path)


def pytest_configure(config):
    root = use_patched_torchao()
    loader = import_loader()
    if not loader.load():
        raise RuntimeError(
            f"da8w4 kernel not loaded ({loader.default_path()}): build csrc/ first"
        )
    here = str(pathlib.Path(__file__).resolve().parent)
    same_in_children(
        root,
        f"sys.path.insert(0, {here!r})\n"
        "from _da8w4_loader import import_loader\n"
        f"import_loader().load({loader.default_path()!r})",
    )


if __name__ == "__main__":
    try:
        print(torchao_test_file())
    except (importlib.metadata.PackageNotFoundError, FileNotFoundError) as e:
        sys.exit(f"error: torchao's da8w4 tests: {e}")
