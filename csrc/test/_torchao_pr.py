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


def use_patched_torchao() -> pathlib.Path:
    """The directory that now provides ``import torchao``: the installed package with
    ``DIFF`` applied."""
    if "torchao" in sys.modules:
        raise RuntimeError("torchao is imported already: the PR's changes cannot apply")
    spec = importlib.util.find_spec("torchao")
    if spec is None or spec.origin is None:
        raise RuntimeError("torchao is not installed")
    root = pathlib.Path(tempfile.mkdtemp(prefix="torchao-pr-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
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
