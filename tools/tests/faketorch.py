"""Tiny fake torch installs, wheels and generated series for the install/wheel tests (fast, no real torch)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from tools.distinfo import record_hash

REPO = Path(__file__).resolve().parents[2]

STOCK = {
    "torch/__init__.py": "from torch.version import __version__\n",
    "torch/version.py": "__version__ = '{version}'\ndebug = False\ngit_version = 'abc'\n",
    "torch/_inductor/__init__.py": "",
    "torch/_inductor/config.py": "".join(f"option_{i} = {i}\n" for i in range(40)),
    "torch/_inductor/fx_passes/__init__.py": "",
    "torch/_inductor/fx_passes/post_grad.py": "".join(f"def f{i}():\n    return {i}\n\n" for i in range(30)),
    "torchgen/__init__.py": "",
}


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z",
           "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z"}
    return subprocess.run(["git", "-c", "core.hooksPath=/dev/null", *args], cwd=cwd, env=env, check=True,
                          capture_output=True, text=True).stdout


def stock_files(version: str) -> dict[str, str]:
    return {k: v.replace("{version}", version) for k, v in STOCK.items()}


def make_site(root: Path, version: str = "2.13.0+cpu", py_version: str | None = None) -> Path:
    """site-packages with a fake torch, its dist-info and a RECORD with real sha256s. py_version: a different
    torch.__version__ than METADATA's (PyPI's CUDA wheels: 2.11.0 vs 2.11.0+cu130)."""
    site = root / "site-packages"
    files = stock_files(py_version or version)
    rows = []
    for rel, text in files.items():
        p = site / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        data = p.read_bytes()
        rows.append(f"{rel},{record_hash(hashlib.sha256(data).hexdigest())},{len(data)}")
    di = site / f"torch-{version}.dist-info"
    di.mkdir()
    (di / "METADATA").write_text(f"Metadata-Version: 2.4\nName: torch\nVersion: {version}\nRequires-Dist: numpy\n\nDescription\n")
    (di / "WHEEL").write_text("Wheel-Version: 1.0\nGenerator: fake\nRoot-Is-Purelib: false\nTag: py3-none-any\n")
    (di / "top_level.txt").write_text("torch\ntorchgen\n")
    for n in ("METADATA", "WHEEL", "top_level.txt"):
        data = (di / n).read_bytes()
        rows.append(f"{di.name}/{n},{record_hash(hashlib.sha256(data).hexdigest())},{len(data)}")
    rows.append(f"{di.name}/RECORD,,")
    (di / "RECORD").write_text("\n".join(rows) + "\n")
    return site


def tamper_wheel(whl: Path, dst: Path, members: tuple[str, ...]) -> Path:
    """A copy of ``whl`` at ``dst`` whose ``members`` no longer match its RECORD."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(whl) as zi, zipfile.ZipFile(dst, "w") as zo:
        for i in zi.infolist():
            data = zi.read(i)
            if i.filename in members:
                data += b"# edit\n"
            zo.writestr(i, data)
    return dst


def make_wheel(root: Path, version: str = "2.13.0+cpu", dir_entries: bool = False, py_version: str | None = None) -> Path:
    """A fake torch wheel. dir_entries: also store directory entries (as PyPI's CUDA wheels do)."""
    site = make_site(root / "wheelsrc", version, py_version)
    whl = root / f"torch-{version}-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w", zipfile.ZIP_DEFLATED) as z:
        if dir_entries:
            z.mkdir("torch/")
            z.mkdir(f"torch-{version}.dist-info/")
        for p in sorted(site.rglob("*")):
            if p.is_file() and ".dist-info" not in p.parent.name:
                z.write(p, p.relative_to(site).as_posix())
        for p in sorted(site.glob("*.dist-info/*")):  # dist-info last, as wheels have it
            z.write(p, p.relative_to(site).as_posix())
    return whl


# each fake patch: name -> {path: new full text or callable(old)->new}
def _edit_config(old: str) -> str:
    return old.replace("option_10 = 10\n", "option_10 = 10\nregistry_enabled = False\n")


def _edit_config2(old: str) -> str:
    return old.replace("option_30 = 30\n", "option_30 = 30\nnewpkg_enabled = False\n")


def _edit_post_grad(old: str) -> str:
    return old.replace("def f5():\n    return 5\n", "def f5():\n    from torch._inductor.fx_passes.newpkg import run\n    return run(5)\n")


FAKE_PATCHES = [
    ("fake-registry", {
        "torch/_inductor/config.py": _edit_config,
        "torch/_inductor/fake_registry.py": "REGISTRY = {}\n",
        "test/inductor/test_fake_registry.py": "def test_x():\n    pass\n",
    }),
    ("fake-newpkg", {
        "torch/_inductor/config.py": _edit_config2,
        "torch/_inductor/fx_passes/post_grad.py": _edit_post_grad,
        "torch/_inductor/fx_passes/newpkg/__init__.py": "def run(x):\n    return x\n",
        "torch/_inductor/fx_passes/newpkg/sub/deep.py": "X = 1\n",
    }),
]


def make_series(root: Path, base: str = "2.13.0", patches=FAKE_PATCHES, extra_line: str = "") -> Path:
    """A patches/ dir with v<base>/series made by `git format-patch` on a pristine fake tree. Returns patches/."""
    tree = root / f"tree-{base}{len(extra_line)}"
    tree.mkdir(parents=True)
    _git(tree, "init", "-q")
    for rel, text in stock_files(base + "+cpu").items():
        p = tree / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    _git(tree, "add", "-A")
    _git(tree, "commit", "-q", "-m", "base")
    for name, edits in patches:
        for rel, e in edits.items():
            p = tree / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            text = e(p.read_text()) if callable(e) else e + extra_line
            p.write_text(text)
        _git(tree, "add", "-A")
        _git(tree, "commit", "-q", "-m", f"[inductor] {name}\n\nWhy: test.\n\nUpstream-Status: Pending\n")
    out = root / "patches" / f"v{base}"
    out.mkdir(parents=True)
    tmp = root / "fp"
    _git(tree, "format-patch", "-q", "--zero-commit", "--no-stat", "--no-numbered", "-o", str(tmp), "HEAD~%d" % len(patches))
    names = []
    for (name, _), f in zip(patches, sorted(tmp.iterdir())):
        f.rename(out / f"{name}.patch")
        names.append(f"{name}.patch")
    (out / "series").write_text("\n".join(names) + "\n")
    return root / "patches"


def patched_tree(root: Path, base: str = "2.13.0", extra_line: str = "") -> Path:
    return root / f"tree-{base}{len(extra_line)}"


def write_metadata(root: Path, version: str = "0.1.0", bases=("2.11.0", "2.13.0", "2.15.0")) -> Path:
    p = root / "patchset.toml"
    p.write_text(
        f'[patchset]\nname = "inductor-patchset"\nversion = "{version}"\nprimary-base = "2.13.0"\n'
        f"bases = {list(bases)!r}\n".replace("'", '"')
    )
    return p


def tree_digest(site: Path, skip_pycache: bool = False) -> dict[str, str]:
    """sha256 of every file under site/ (torch/ and dist-info included), plus the set of dirs."""
    out = {}
    for p in sorted(site.rglob("*")):
        rel = p.relative_to(site).as_posix()
        if skip_pycache and "__pycache__" in p.parts:
            continue
        if p.is_dir():
            out[rel + "/"] = "dir"
        else:
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest() + f" {oct(p.stat().st_mode)}"
    return out


def run_tools(*args: str, env: dict | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=600)
