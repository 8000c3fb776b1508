"""Shared fixtures: a tiny fake torch wheel, pristine bases built from it by ``tools.bases``, and a tiny
fake patch-set repo (patchset.toml, hooks/, torch_overlay/, test/) whose series ``tools.generate`` generates:
one patch with a shared hook, one with an override per base, one without a hook.

Nothing here downloads anything or needs torch; a whole fixture builds in well under a second.
Fixture names are prefixed ``fake_`` so they do not collide with other test modules' own fixtures.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import subprocess
import textwrap
import zipfile
from pathlib import Path

import pytest

from tools import bases as bases_mod
from tools.sources import Sources


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: needs the real cached bases (~/.cache/torch-patchset); skipped when absent")


REAL_DOWNLOAD_WHEEL = bases_mod.download_wheel  # for a test that runs pip itself, offline (no index, no find-links)


@pytest.fixture(autouse=True)
def _no_downloads(monkeypatch):
    """No test downloads a wheel: ``tools.bases.download_wheel`` (every pip download the tools make) fails the test
    unless the test puts its own fake in its place."""
    monkeypatch.setattr(bases_mod, "download_wheel",
                        lambda project, version, wdir: pytest.fail(f"a test tried to download {project}=={version}"))


# ---------------------------------------------------------------------------------------------
# plain helpers (importable as ``from tools.tests.conftest import ...`` is avoided; use the fixtures)

GIT_ENV = {
    "GIT_AUTHOR_NAME": "tester",
    "GIT_AUTHOR_EMAIL": "tester@example.invalid",
    "GIT_COMMITTER_NAME": "tester",
    "GIT_COMMITTER_EMAIL": "tester@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


def git(cwd: Path, *args: str, check: bool = True) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")} | GIT_ENV
    r = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if check and r.returncode:
        raise AssertionError(f"git {' '.join(args)} failed in {cwd}: {r.stdout}{r.stderr}")
    return r.stdout


def tree_state(repo: Path) -> tuple:
    """Everything 'leave the tree exactly as it was' means: HEAD, refs, status (ignored files too) and
    the bytes of every work-tree file."""
    head = git(repo, "rev-parse", "HEAD").strip()
    refs = git(repo, "for-each-ref", "--format=%(refname) %(objectname)")
    status = git(repo, "status", "--porcelain", "--ignored")
    h = hashlib.sha256()
    for p in sorted(repo.rglob("*")):
        if ".git" in p.relative_to(repo).parts or not p.is_file():
            continue
        h.update(str(p.relative_to(repo)).encode() + b"\0" + p.read_bytes() + b"\0")
    in_progress = sorted(n for n in ("rebase-apply", "rebase-merge") if (repo / ".git" / n).exists())
    return head, refs, status, h.hexdigest(), in_progress


def dir_bytes(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()} if d.exists() else {}


def insert_after(text: str, anchor: str, new: str) -> str:
    assert anchor in text, anchor
    return text.replace(anchor, anchor + new, 1)


# ---------------------------------------------------------------------------------------------
# the fake torch


def fake_torch_files(version: str) -> dict[str, str]:
    """A few files shaped like torch's; 2.11 differs a little so hook diffs differ per base."""
    cfg = [f"option_{i} = {i}  # an upstream config option\n" for i in range(40)]
    if version.startswith("2.11"):
        cfg.insert(0, "# config of an older torch\n")
    files = {
        "torch/__init__.py": "from torch.version import __version__\n",
        "torch/version.py": f"__version__ = '{version}'\ndebug = False\ngit_version = 'abc123{version[2:4]}'\n",
        "torch/_inductor/__init__.py": "",
        "torch/_inductor/config.py": "".join(cfg),
        "torch/_inductor/fx_passes/__init__.py": "",
        "torch/_inductor/fx_passes/post_grad.py": "".join(f"def stage_{i}(gm):\n    return gm\n\n" for i in range(30)),
    }
    return files


def make_wheel(path: Path, version: str, files: dict[str, str] | None = None, extra: dict[str, bytes] | None = None) -> Path:
    files = files if files is not None else fake_torch_files(version)
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
        for name, data in (extra or {}).items():
            zf.writestr(name, data)
        zf.writestr(f"torch-{version}.dist-info/METADATA", f"Name: torch\nVersion: {version}\n")
    return path


# ---------------------------------------------------------------------------------------------
# the fake patch set

PATCHSET_TOML = textwrap.dedent(
    '''\
    [patchset]
    name = "fake-patchset"
    version = "0.0.1"
    primary-base = "2.13.0"
    bases = ["2.11.0", "2.13.0"]

    [[patch]]
    name = "inductor-alpha"
    subject = "[inductor] Add the alpha pass"
    category = "upstreamable"
    upstream-status = "Pending"
    bases = ["2.11.0", "2.13.0"]
    overlay = ["torch/_inductor/fx_passes/alpha.py"]
    tests = ["test/inductor/test_alpha.py"]
    tested-on = ["2.13.0+cpu"]
    last-update = "2026-01-02"
    body = """
    Alpha exists because stock Inductor cannot do alpha.
    """

    [patch.upstream]
    headline = "alpha: fused vs stock"
    test-plan = ["python test/inductor/test_alpha.py"]
    summary = """
    Alpha rewrites what stock Inductor leaves alone.
    """

    [[patch]]
    name = "inductor-beta"
    subject = "[inductor] Add the beta pass"
    category = "upstreamable"
    upstream-status = "Submitted https://github.com/pytorch/pytorch/pull/123456"
    bases = ["2.11.0", "2.13.0"]
    overlay = ["torch/_inductor/fx_passes/beta.py"]
    tests = ["test/inductor/test_beta.py"]
    last-update = "2026-01-03"
    body = """
    Beta exists because of reasons that are explained here.
    """

    [patch.upstream]
    headline = "beta: fused vs stock"
    test-plan = ["python test/inductor/test_beta.py", "python test/inductor/test_upstream_beta.py TestBeta"]
    summary = """
    Beta makes stage_20 do what its callers expect.
    """

    [[patch]]
    name = "inductor-gamma"
    subject = "[inductor] Add gamma helpers"
    category = "fork-only"
    upstream-status = "Inappropriate [fork-only test scaffolding]"
    bases = ["2.13.0"]
    overlay = ["torch/_inductor/gamma.py"]
    tests = ["test/inductor/test_gamma.py"]
    last-update = "2026-01-04"
    body = """
    Gamma has no hook at all: it only adds files.
    """
    '''
)

# patch -> list of (file, anchor line, inserted text): the hook edits, made on each pristine base
HOOK_EDITS = {
    "inductor-alpha": [
        ("torch/_inductor/config.py", "option_5 = 5  # an upstream config option\n", "alpha = False  # TORCHINDUCTOR_ALPHA\n"),
    ],
    "inductor-beta": [
        ("torch/_inductor/config.py", "option_30 = 30  # an upstream config option\n", "beta = False  # TORCHINDUCTOR_BETA\n"),
        ("torch/_inductor/fx_passes/post_grad.py", "def stage_20(gm):\n    return gm\n", "    # beta hook\n"),
    ],
}


def make_hook_diff(base_tree: Path, edits, scratch: Path) -> str:
    """Make a hook diff the documented way: edit a clone of the pristine tree, then ``git diff``."""
    if scratch.exists():
        shutil.rmtree(scratch)
    git(base_tree.parent, "clone", "-q", str(base_tree), str(scratch))
    for rel, anchor, new in edits:
        p = scratch / rel
        p.write_text(insert_after(p.read_text(), anchor, new))
    out = git(scratch, "diff")
    shutil.rmtree(scratch)
    return out


def write_requirements(root: Path, base: str) -> Path:
    """``requirements/base-<base>.txt`` as the real repo has it (check wants one per base)."""
    p = root / "requirements" / f"base-{base}.txt"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(f"# base {base}\ntorch=={base}\n-r ../requirements-dev.txt\n")
    return p


@dataclasses.dataclass
class FakePatchset:
    root: Path  # sources: patchset.toml, hooks/, torch_overlay/, test/, patches/
    cache: Path  # bases/ and wheels/
    bases: tuple[str, ...] = ("2.11.0", "2.13.0")

    @property
    def sources(self) -> Sources:
        return Sources(self.root)

    @property
    def patches_dir(self) -> Path:
        return self.root / "patches"

    def base_tree(self, base: str) -> Path:
        return bases_mod.base_tree(base, self.cache)

    def checkout(self, base: str, dst: Path) -> Path:
        """A user's 'PyTorch checkout': an independent clone of the pristine base."""
        git(dst.parent, "clone", "-q", str(self.base_tree(base)), str(dst))
        return dst

    def toml(self) -> str:
        return (self.root / "patchset.toml").read_text()

    def set_toml(self, text: str) -> None:
        (self.root / "patchset.toml").write_text(text)


@pytest.fixture(scope="session")
def fake_cache(tmp_path_factory) -> Path:
    """Wheels and pristine bases for 2.11.0 and 2.13.0, built once per session by tools.bases.
    Tests must not modify it; tests that need to mutate a base build their own."""
    cache = tmp_path_factory.mktemp("cache")
    make_wheel(cache / "wheels" / "torch-2.11.0-py3-none-any.whl", "2.11.0")
    make_wheel(cache / "wheels" / "torch-2.13.0+cpu-py3-none-any.whl", "2.13.0+cpu")
    for b in ("2.11.0", "2.13.0"):
        bases_mod.ensure_base(b, cache, fetch=False)
    return cache


# alpha has one shared hook (hooks/inductor-alpha/hook.diff, made on the primary base 2.13.0; on 2.11.0 it applies
# with an offset of one line); beta has an override per base (other lines on 2.11.0) and no shared hook, so a base
# above 2.13.0 inherits v2.13.0.diff; gamma has no hook at all
SHARED_HOOK_PATCHES = ("inductor-alpha",)


def _build_sources(root: Path, fp_cache: Path, scratch: Path) -> FakePatchset:
    root.mkdir()
    fp = FakePatchset(root, fp_cache)
    fp.set_toml(PATCHSET_TOML)
    for name, edits in HOOK_EDITS.items():
        d = root / "hooks" / name
        d.mkdir(parents=True, exist_ok=True)
        if name in SHARED_HOOK_PATCHES:
            (d / "hook.diff").write_text(make_hook_diff(fp.base_tree("2.13.0"), edits, scratch))
            continue
        for base in fp.bases:  # 2.11.0 takes other lines, so its override earns its place (check warns otherwise)
            e = [(f, a, n.replace("# beta hook", "# beta hook (2.11 form)")) for f, a, n in edits] if base == "2.11.0" else edits
            (d / f"v{base}.diff").write_text(make_hook_diff(fp.base_tree(base), e, scratch))
    for b in fp.bases:
        write_requirements(root, b)
    for rel, text in {
        "torch_overlay/torch/_inductor/fx_passes/alpha.py": "def alpha_pass(gm):\n    return gm\n",
        "torch_overlay/torch/_inductor/fx_passes/beta.py": "def beta_pass(gm):\n    return gm\n",
        "torch_overlay/torch/_inductor/gamma.py": "GAMMA = 1\n",
        "test/inductor/test_alpha.py": "# Owner(s): [\"module: inductor\"]\ndef test_alpha():\n    pass\n",
        "test/inductor/test_beta.py": "def test_beta():\n    pass\n",
        "test/inductor/test_gamma.py": "def test_gamma():\n    pass\n",
    }.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return fp


@pytest.fixture(scope="session")
def _fake_templates(tmp_path_factory, fake_cache) -> tuple[Path, Path]:
    """Sources (and sources + generated patches/) built once; tests get their own copies."""
    from tools.generate import generate

    top = tmp_path_factory.mktemp("templates")
    src = _build_sources(top / "sources", fake_cache, top / "scratch").root
    gen = top / "generated"
    shutil.copytree(src, gen, symlinks=True)
    generate(Sources(gen), cache_dir=fake_cache, warn=lambda m: None)
    return src, gen


@pytest.fixture
def fake_patchset(tmp_path, fake_cache, _fake_templates) -> FakePatchset:
    """A fake patch-set repo of its own (sources only; ``patches/`` not generated yet)."""
    root = tmp_path / "repo"
    shutil.copytree(_fake_templates[0], root, symlinks=True)
    return FakePatchset(root, fake_cache)


@pytest.fixture
def fake_generated(tmp_path, fake_cache, _fake_templates) -> FakePatchset:
    """A fake patch-set repo of its own with ``patches/`` generated."""
    root = tmp_path / "repo"
    shutil.copytree(_fake_templates[1], root, symlinks=True)
    return FakePatchset(root, fake_cache)


def generate_fake(fp: FakePatchset, **kw):
    from tools.generate import generate

    return generate(fp.sources, cache_dir=fp.cache, warn=lambda m: None, **kw)


def check_fake(fp: FakePatchset, **kw):
    """(problems, what check printed)."""
    import io

    from tools.check import check

    out = io.StringIO()
    probs = check(fp.sources, cache_dir=fp.cache, out=out, **kw)
    return probs, out.getvalue()
