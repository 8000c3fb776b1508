"""export-pr for a patch proposed as two PRs ([patch.upstream.first-pr]) and the license header of a PR to another
repository, on the fake patch set, with a fake installed package for the first PR's diff."""

from __future__ import annotations

import shutil
import zipfile

import pytest

from tools.common import PatchsetError, load_patchset
from tools.export_pr import export_prs
from tools.tests.conftest import generate_fake, git
from tools.tests.test_export_pr import _with_readme

HEADER = "# Copyright (c) Gamma's authors.\n# Licensed under the BSD 3-Clause license."
PKG_FILE = "fakeao/passes.py"
PKG_TEXT = "def register():\n    config.post_pass = run\n"


def _installed_package(tmp_path, monkeypatch, version="1.0"):
    """A distribution 'fakeao' at ``version`` on sys.path, as pip would install it."""
    site = tmp_path / "site"
    (site / "fakeao").mkdir(parents=True)
    (site / PKG_FILE).write_text(PKG_TEXT)
    info = site / f"fakeao-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: fakeao\nVersion: {version}\n")
    monkeypatch.syspath_prepend(str(site))
    return site


def _first_pr_diff(tmp_path) -> str:
    """The first PR's diff, made the documented way: the package's file in a scratch repo, edited, ``git diff``."""
    repo = tmp_path / "scratch"
    (repo / "fakeao").mkdir(parents=True)
    (repo / PKG_FILE).write_text(PKG_TEXT)
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "as released")
    (repo / PKG_FILE).write_text(PKG_TEXT.replace("config.post_pass = run", "registry.add(run)"))
    (repo / "test").mkdir()
    (repo / "test/test_passes.py").write_text("def test_register():\n    pass\n")
    git(repo, "add", ".")
    return git(repo, "diff", "--cached")


def _split_patchset(fp, tmp_path):
    """gamma proposed to pytorch/ao as two PRs: the first a diff to fakeao 1.0, then gamma's own."""
    fp = _with_readme(fp)
    (fp.root / "torch_overlay/torch/_inductor/gamma.py").write_text("GAMMA = 1\n")
    (fp.root / "test/inductor/test_gamma.py").write_text(
        '# Owner(s): ["module: inductor"]\nfrom torch._inductor.gamma import GAMMA\n')
    (fp.root / "upstream-prs").mkdir(exist_ok=True)
    (fp.root / "upstream-prs/first.diff").write_text(_first_pr_diff(tmp_path))
    toml = fp.toml().replace('category = "fork-only"\nupstream-status = "Inappropriate [fork-only test scaffolding]"',
                             'category = "upstreamable"\nupstream-status = "Pending"')
    toml += f'''
[patch.upstream]
repo = "pytorch/ao"
depends-on = ["inductor-alpha"]
headline = "alpha: fused vs stock"
test-plan = ["python test/prototype/test_gamma.py"]
paths = {{"torch/_inductor/gamma.py" = "fakeao/gamma.py", "test/inductor/test_gamma.py" = "test/test_gamma.py"}}
modules = {{"torch._inductor.gamma" = "fakeao.gamma"}}
title = "Gamma: the improvements"
header = """
{HEADER}
"""
summary = """
Gamma, for fakeao, on top of the registry client.
"""

[patch.upstream.first-pr]
name = "gamma-registry-client"
title = "Register gamma's pass through the registry"
diff = "upstream-prs/first.diff"
package = "fakeao"
version = "1.0"
test-plan = ["python test/test_passes.py"]
summary = """
The registry client alone.
"""
measured = """
No speed change.
"""
'''
    fp.set_toml(toml)
    generate_fake(fp)
    return fp


def test_export_pr_writes_both_prs(fake_generated, tmp_path, monkeypatch):
    _installed_package(tmp_path, monkeypatch)
    fp = _split_patchset(fake_generated, tmp_path)
    out = export_prs(fp.sources, cache_dir=fp.cache, out=tmp_path / "out", names=["inductor-gamma"])
    first = out / "gamma-registry-client"
    assert (first / "files" / PKG_FILE).read_text() == "def register():\n    registry.add(run)\n"
    assert (first / "files/test/test_passes.py").is_file()
    assert (first / "gamma-registry-client.patch").read_text() == (fp.root / "upstream-prs/first.diff").read_text()
    pr1 = (first / "PR.md").read_text()
    assert pr1.startswith("# Register gamma's pass through the registry\n\n## Summary\n\nThe registry client alone.\n")
    assert "## Measured\n\nNo speed change.\n" in pr1
    assert 'Depends on the pytorch/pytorch PR "[inductor] Add the alpha pass".' in pr1
    pr2 = (out / "inductor-gamma/PR.md").read_text()
    assert pr2.startswith("# Gamma: the improvements\n")  # [patch.upstream] title, not the patch's subject
    assert 'Depends on the pytorch/ao PR "Register gamma\'s pass through the registry".' in pr2
    # the second PR's files: the header on top, PyTorch's test ownership line gone
    assert (out / "inductor-gamma/files/fakeao/gamma.py").read_text() == f"{HEADER}\n\nGAMMA = 1\n"
    test = (out / "inductor-gamma/files/test/test_gamma.py").read_text()
    assert test.startswith(HEADER) and "Owner(s)" not in test


def fakeao_wheel(wdir, version="1.0"):
    """fakeao's release as its wheel (what ``pip download --no-deps fakeao==<version>`` leaves in ``wdir``)."""
    wdir.mkdir(parents=True, exist_ok=True)
    wheel = wdir / f"fakeao-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(PKG_FILE, PKG_TEXT)
        zf.writestr(f"fakeao-{version}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: fakeao\nVersion: {version}\n")
    return wheel


def own_cache(fp, tmp_path):
    """A copy of the session's fake cache (bases and wheels) that the test may add to."""
    shared, fp.cache = fp.cache, tmp_path / "own-cache"
    shutil.copytree(shared, fp.cache, symlinks=True)
    return fp


@pytest.mark.parametrize("version, why", [("2.0", "fakeao 2.0 is installed here"),
                                          (None, "fakeao is not installed here")])
def test_export_pr_first_pr_without_that_release(fake_generated, tmp_path, monkeypatch, version, why):
    """Neither installed at the diff's version nor in the cache, and not fetched: the error names the download."""
    if version:
        _installed_package(tmp_path, monkeypatch, version)
    fp = _split_patchset(fake_generated, tmp_path)
    with pytest.raises(PatchsetError) as e:
        export_prs(fp.sources, cache_dir=fp.cache, out=tmp_path / "out", names=["inductor-gamma"], fetch=False)
    assert f"fakeao 1.0's files, for the first PR of inductor-gamma ({why} and no fakeao-1.0 wheel is in " in str(e.value)
    assert f"-m pip download --no-deps --only-binary=:all: fakeao==1.0 -d {fp.cache / 'wheels'}" in str(e.value)
    assert not (tmp_path / "out").exists()


def test_export_pr_first_pr_from_the_cached_wheel(fake_generated, tmp_path, monkeypatch):
    """Another release installed here: the one the diff is made against is read from its wheel in the cache."""
    _installed_package(tmp_path, monkeypatch, "2.0")
    fp = own_cache(_split_patchset(fake_generated, tmp_path), tmp_path)
    fakeao_wheel(fp.cache / "wheels")
    out = export_prs(fp.sources, cache_dir=fp.cache, out=tmp_path / "out", names=["inductor-gamma"], fetch=False)
    assert (out / "gamma-registry-client/files" / PKG_FILE).read_text() == "def register():\n    registry.add(run)\n"


def test_export_pr_first_pr_diff_that_does_not_apply(fake_generated, tmp_path, monkeypatch):
    site = _installed_package(tmp_path, monkeypatch)
    (site / PKG_FILE).write_text("def register():\n    something_else()\n")
    fp = _split_patchset(fake_generated, tmp_path)
    with pytest.raises(PatchsetError, match="first.diff: does not apply to fakeao 1.0"):
        export_prs(fp.sources, cache_dir=fp.cache, out=tmp_path / "out", names=["inductor-gamma"])


def test_first_pr_table_fields(fake_generated, tmp_path):
    fp = _split_patchset(fake_generated, tmp_path)
    fp.set_toml(fp.toml() + 'colour = "blue"\n')
    with pytest.raises(PatchsetError, match=r"\[patch.upstream.first-pr\] has unknown keys \['colour'\]"):
        load_patchset(fp.sources.patchset_toml)
    fp.set_toml(fp.toml().replace('colour = "blue"\n', "").replace('measured = """\nNo speed change.\n"""\n', ""))
    with pytest.raises(PatchsetError, match=r"\[patch.upstream.first-pr\] lacks measured"):
        load_patchset(fp.sources.patchset_toml)


def test_real_first_pr_applies_to_the_installed_release(tmp_path):
    """The real patch's first PR: its diff applies to the installed package's release and passes the
    pasteability checks (skipped where that release is not installed)."""
    import importlib.metadata

    from tools.common import PATCHSET_TOML, REPO_ROOT
    from tools.export_pr_split import export_first_pr
    from tools.prmd import ForkPaths

    split = [p for p in load_patchset(PATCHSET_TOML).patches if p.upstream and p.upstream.first_pr]
    assert split, "no patch has [patch.upstream.first-pr]"
    for p in split:
        fp = p.upstream.first_pr
        try:
            installed = importlib.metadata.version(fp.package)
        except importlib.metadata.PackageNotFoundError:
            installed = None
        if installed != fp.version:
            pytest.skip(f"{fp.package} {fp.version} is not installed")
        name, findings = export_first_pr(REPO_ROOT, p, tmp_path, [], ForkPaths.of(REPO_ROOT), None)
        assert findings == []
        assert (tmp_path / name / "PR.md").read_text().startswith(f"# {fp.title}\n")
