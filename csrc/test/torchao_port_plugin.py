"""pytest plugin: torchao's own da8w4 tests, unchanged, against the kernel PR's file.

The kernel PR to torchao replaces ``torchao/csrc/cpu/aten_kernels/da8w4_linear.cpp`` whole
with ``upstream-prs/pytorch-ao/da8w4_linear.cpp`` (rendered from ``csrc/da8w4/`` by
``tools/torchao_kernel.py``). Loaded as a plugin (``-p torchao_port_plugin``, with csrc/test on
``PYTHONPATH``), this module builds that file as torchao 0.18.0's ``setup.py`` builds its CPU
kernels (``torchao_cpu_flags``), loads it after
``import torchao`` has defined the ops' schemas, and so registers it before pytest imports
torchao's test file::

    PYTHONPATH=csrc/test python -m pytest -p torchao_port_plugin \\
        "$(python csrc/test/torchao_kernel_plugin.py)"

torchao's Python is the PR's too: its diff to torchao's ops.py and Int4OpaqueTensor is applied
to a copy of the installed package (``_torchao_pr.py``). Our own library (csrc/CMakeLists.txt)
is not loaded: the tests exercise the PR alone.
``TORCHAO_PORT_BUILD_DIR`` names the build directory (default: a temporary one), and
``TORCHAO_PORT_ISA_FLAGS=0`` builds it without torchao's ISA flags.
"""

import os
import pathlib

import torch
import torch.utils.cpp_extension
from _torchao_pr import same_in_children, scratch_dir, use_patched_torchao


PORT = (
    pathlib.Path(__file__).resolve().parents[2]
    / "upstream-prs"
    / "pytorch-ao"
    / "da8w4_linear.cpp"
)


def cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            return next(
                (
                    set(line.split(":", 1)[1].split())
                    for line in f
                    if line.startswith("flags")
                ),
                set(),
            )
    except OSError:
        return set()


def torchao_cpu_flags() -> list[str]:
    """The C++ flags torchao 0.18.0's setup.py gives ``torchao/csrc/cpu/aten_kernels/*.cpp`` on
    Linux (``USE_CPU_KERNELS=1``) on a machine with AVX-512 (and VNNI), besides
    ``-DPy_LIMITED_API`` (no Python API is used here). ``TORCHAO_PORT_ISA_FLAGS=0`` leaves the
    ISA flags out, as that setup.py does where it finds no AVX-512: the port's ISA paths do not
    need them. (It asks ``torch._C._cpu._is_avx512_supported``, which torch 2.11-2.15 no longer
    have, so there it finds none on any machine; AVX-512 is read from /proc/cpuinfo here.)"""
    flags = ["-O3", "-fdiagnostics-color=always"]
    if os.environ.get("TORCHAO_PORT_ISA_FLAGS") == "0":
        return flags
    have = cpu_flags()
    if "avx512f" in have:
        flags += ["-DCPU_CAPABILITY_AVX512", "-march=native", "-mfma", "-fopenmp"]
        if "avx512_vnni" in have:
            flags += ["-DCPU_CAPABILITY_AVX512_VNNI"]
    return flags


def define_schemas() -> None:
    """The ops' schemas, which the port implements: torchao's ops.py defines them, or, without
    torchao, our loader's copy of them (csrc/da8w4_linear_cpu.py; nothing of ours is loaded)."""
    try:
        import torchao  # noqa: F401
    except ImportError:
        from _da8w4_loader import import_loader

        loader = import_loader()
        lib = torch.library.Library("torchao", "FRAGMENT")
        lib.define(loader.PREPACK_SCHEMA)
        lib.define(loader.LINEAR_SCHEMA)
        define_schemas.lib = lib  # kept alive with the process


def build_and_load(build: str | None = None, source: str | None = None) -> str:
    """Build the port (or ``source``, a variant of it) as a shared library in ``build`` and
    load it; its path."""
    define_schemas()
    build = (
        build
        or os.environ.get("TORCHAO_PORT_BUILD_DIR")
        or scratch_dir("torchao-port-")
    )
    os.makedirs(build, exist_ok=True)
    flags = torchao_cpu_flags()
    torch.utils.cpp_extension.load(
        name="torchao_da8w4_port",
        sources=[source or str(PORT)],
        extra_cflags=flags,
        extra_ldflags=["-fopenmp"] if "-fopenmp" in flags else [],
        build_directory=build,
        is_python_module=False,
        verbose=False,
    )
    return os.path.join(build, "torchao_da8w4_port.so")


def pytest_configure(config):
    if not PORT.is_file():
        raise RuntimeError(f"{PORT}: missing; run `python -m tools generate`")
    root = use_patched_torchao()
    path = build_and_load()
    same_in_children(root, f"torch.ops.load_library({path!r})")
    print(
        f"torchao_port_plugin: {PORT.name} built with {' '.join(torchao_cpu_flags())}: {path}"
    )
