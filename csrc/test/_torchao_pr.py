"""torchao with the kernel PR's Python changes, for the tests that run torchao's code.

The kernel PR to torchao replaces ``torchao/csrc/cpu/aten_kernels/da8w4_linear.cpp`` and
changes two of torchao 0.18.0's Python files (``upstream-prs/pytorch-ao/da8w4-linear-cpu-kernel.diff``):
the prepack op's fake returns the kernel's shapes and dtypes, and ``Int4OpaqueTensor.copy_``
refuses a weight packed by an earlier version. ``use_patched_torchao()`` copies the installed
torchao package into a temporary directory, applies that diff there and puts the directory
first on ``sys.path``, so that torchao's own tests and the PR's run against the PR's files.
It must run before anything imports torchao; the directory is removed at exit.
"""

import atexit
import importlib
import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile


DIFF = (
    pathlib.Path(__file__).resolve().parents[2]
    / "upstream-prs"
    / "pytorch-ao"
    / "da8w4-linear-cpu-kernel.diff"
)


def scratch_dir(prefix: str) -> pathlib.Path:
    """A new temporary directory, removed when this process exits."""
    path = pathlib.Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def use_patched_torchao() -> pathlib.Path:
    """The directory that now provides ``import torchao``: the installed package with
    ``DIFF`` applied."""
    if "torchao" in sys.modules:
        raise RuntimeError("torchao is imported already: the PR's changes cannot apply")
    spec = importlib.util.find_spec("torchao")
    if spec is None or spec.origin is None:
        raise RuntimeError("torchao is not installed")
    root = scratch_dir("torchao-pr-")
    shutil.copytree(
        pathlib.Path(spec.origin).parent,
        root / "torchao",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    # a repository of its own, so that git applies the paths from here
    for args in (["init", "-q"], ["apply", "--whitespace=nowarn", str(DIFF)]):
        try:
            r = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
        except FileNotFoundError as e:
            raise RuntimeError(
                f"{DIFF}: git applies it, and there is no git: {e}"
            ) from e
        if r.returncode != 0:
            raise RuntimeError(
                f"{DIFF}: does not apply to the torchao installed at "
                f"{pathlib.Path(spec.origin).parent}: {r.stderr.strip()}"
            )
    sys.path.insert(0, str(root))
    importlib.invalidate_caches()
    return root


def same_in_children(root: pathlib.Path, load: str) -> None:
    """Python processes the tests start (the PR's test runs each TORCHAO_CPU_DISPATCH level
    in one) get what this one has: ``root``'s torchao first on ``sys.path`` and the kernel
    under test loaded by ``load`` (Python code) after ``import torchao`` has defined the
    schemas. A ``sitecustomize`` in a directory put first on ``PYTHONPATH`` does it at
    their start."""
    site = root / "children"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(root)!r})\n"
        "import torch\n"
        "import torchao  # noqa: F401\n"
        f"{load}\n"
    )
    path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(site) + (os.pathsep + path if path else "")
