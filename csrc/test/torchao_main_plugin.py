"""pytest plugin: torchao's own da8w4 tests, unchanged, against the kernel PR's file for torchao main.

torchao's main branch builds each ``torchao/csrc/cpu/aten_kernels/*_krnl.cpp`` once per ISA level
and registers the ops in ``dispatch.cpp``, which calls the level ``TORCHAO_CPU_DISPATCH`` picks.
The kernel PR's file for it, ``upstream-prs/pytorch-ao/da8w4_linear_krnl.cpp``, is rendered from
``csrc/da8w4/`` by ``tools/torchao_kernel.py``. Loaded as a plugin (``-p torchao_main_plugin``,
with csrc/test on ``PYTHONPATH``), this module builds it as main's setup.py does (the DEFAULT copy
``-DCPU_CAPABILITY=DEFAULT -fno-tree-vectorize``; the AVX512 copy with its defines and ``-m``
flags, where the CPU has AVX-512), with main's own ``dispatch.cpp`` and ``utils.h`` (stubs for
the other kernels dispatch.cpp names), and loads it before pytest imports torchao's test file::

    TORCHAO_MAIN_SRC=<torchao main checkout> PYTHONPATH=csrc/test python -m pytest \\
        -p torchao_main_plugin "$(python csrc/test/torchao_kernel_plugin.py)"

main's files are not in this repository: ``TORCHAO_MAIN_SRC`` names a checkout (or a folder with
its ``torchao/csrc/cpu/aten_kernels/{dispatch.cpp,utils.h}``); without it the plugin stops the
run with that message. torchao's Python is the PR's (``_torchao_pr.py``), as for the 0.18.0 file.
``TORCHAO_MAIN_BUILD_DIR`` names the build directory (default: a temporary one).
"""

import concurrent.futures
import os
import pathlib
import subprocess
import sysconfig

import torch
import torch.utils.cpp_extension
from _torchao_pr import same_in_children, scratch_dir, use_patched_torchao
from torchao_port_plugin import cpu_flags, define_schemas


HERE = pathlib.Path(__file__).resolve().parent
KRNL = HERE.parents[1] / "upstream-prs" / "pytorch-ao" / "da8w4_linear_krnl.cpp"
STUBS = HERE / "_torchao_main_stubs.cpp"
MAIN_FILES = ("dispatch.cpp", "utils.h")
AVX512 = ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512vnni"]


def main_sources() -> pathlib.Path:
    """main's ``aten_kernels`` folder, from ``TORCHAO_MAIN_SRC``."""
    root = os.environ.get("TORCHAO_MAIN_SRC")
    if not root:
        raise RuntimeError(
            "torchao_main_plugin: set TORCHAO_MAIN_SRC to a torchao main checkout"
        )
    src = pathlib.Path(root) / "torchao" / "csrc" / "cpu" / "aten_kernels"
    missing = [f for f in MAIN_FILES if not (src / f).is_file()]
    if missing:
        raise RuntimeError(f"torchao_main_plugin: {src}: no {', '.join(missing)}")
    return src


def compile_lines(
    src: pathlib.Path, build: pathlib.Path, krnl: pathlib.Path = KRNL
) -> list[list[str]]:
    """The compiler runs main's setup.py would make, one per object (AVX512 where the CPU has it),
    for ``krnl`` (default: the PR's file; main's own, ``src / "da8w4_linear_krnl.cpp"``, for
    benchmarks/da8w4_vs_torchao_cpu.py --main-src)."""
    cxx = os.environ.get("CXX", "g++")
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    common = [cxx, "-O3", "-std=c++20", "-fPIC", "-fopenmp"]
    common += [f"-D_GLIBCXX_USE_CXX11_ABI={abi}", f"-I{src}"]
    common += [f"-I{p}" for p in torch.utils.cpp_extension.include_paths()]
    common += [f"-I{sysconfig.get_path('include')}"]
    default = ["-DCPU_CAPABILITY=DEFAULT", "-fno-tree-vectorize"]
    avx512 = "avx512f" in cpu_flags() and "avx512_vnni" in cpu_flags()
    lines = [
        [*common, *default, "-c", str(krnl), "-o", str(build / "krnl.DEFAULT.o")],
        [*common, "-DSTUB_NS=DEFAULT", "-c", str(STUBS), "-o", str(build / "stubs.DEFAULT.o")],
        [*common, *default, *(["-DBUILD_AVX512"] if avx512 else []), "-c",
         str(src / "dispatch.cpp"), "-o", str(build / "dispatch.o")],
    ]
    if avx512:
        isa = ["-DCPU_CAPABILITY_AVX512", "-DCPU_CAPABILITY_AVX512_VNNI", "-DCPU_CAPABILITY=AVX512"]
        lines += [
            [*common, *isa, *AVX512, "-c", str(krnl), "-o", str(build / "krnl.AVX512.o")],
            [*common, "-DSTUB_NS=AVX512", "-c", str(STUBS), "-o", str(build / "stubs.AVX512.o")],
        ]
    return lines


def build_and_load(build: str | None = None, krnl: pathlib.Path = KRNL) -> str:
    """Build ``krnl`` with main's dispatch.cpp as one shared library and load it; its path."""
    define_schemas()
    src = main_sources()
    out = pathlib.Path(
        build
        or os.environ.get("TORCHAO_MAIN_BUILD_DIR")
        or scratch_dir("torchao-main-")
    )
    out.mkdir(parents=True, exist_ok=True)
    lines = compile_lines(src, out, krnl)
    with concurrent.futures.ThreadPoolExecutor() as pool:
        for line, r in zip(lines, pool.map(_run, lines)):
            if r.returncode:
                raise RuntimeError(f"{' '.join(line)}\n{r.stdout}{r.stderr}")
    lib = out / "libtorchao_da8w4_main.so"
    objs = [line[line.index("-o") + 1] for line in lines]
    libdir = torch.utils.cpp_extension.library_paths()[0]
    link = [os.environ.get("CXX", "g++"), "-shared", "-fopenmp", "-o", str(lib), *objs]
    link += [f"-L{libdir}", "-lc10", "-ltorch_cpu", "-ltorch", f"-Wl,-rpath,{libdir}"]
    link += ["-Wl,--no-undefined"]
    r = _run(link)
    if r.returncode:
        raise RuntimeError(f"{' '.join(link)}\n{r.stdout}{r.stderr}")
    torch.ops.load_library(str(lib))
    return str(lib)


def _run(line: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(line, capture_output=True, text=True)


def pytest_configure(config):
    if not KRNL.is_file():
        raise RuntimeError(f"{KRNL}: missing; run `python -m tools generate`")
    root = use_patched_torchao()
    path = build_and_load()
    same_in_children(root, f"torch.ops.load_library({path!r})")
    mode = os.environ.get("TORCHAO_CPU_DISPATCH", "AUTO")
    print(f"torchao_main_plugin: {KRNL.name} with main's dispatch.cpp: {path} (TORCHAO_CPU_DISPATCH={mode})")
