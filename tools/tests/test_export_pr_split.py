"""export-pr for a patch proposed as several PRs ([[patch.upstream.diff-pr]]) and the license header of a PR to another
repository, on the fake patch set, with a fake installed package for the diff PRs; and the real patch's diff PRs on
torchao's release."""

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

[[patch.upstream.diff-pr]]
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
    assert f"fakeao 1.0's files, for the diffs of inductor-gamma's PRs ({why} and no fakeao-1.0 wheel is in " in str(e.value)
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
    with pytest.raises(PatchsetError, match=r"\[\[patch.upstream.diff-pr\]\] has unknown keys \['colour'\]"):
        load_patchset(fp.sources.patchset_toml)
    fp.set_toml(fp.toml().replace('colour = "blue"\n', "").replace('measured = """\nNo speed change.\n"""\n', ""))
    with pytest.raises(PatchsetError, match=r"\[\[patch.upstream.diff-pr\]\] lacks measured"):
        load_patchset(fp.sources.patchset_toml)


SECOND_DIFF = """\
diff --git a/fakeao/passes.py b/fakeao/passes.py
--- a/fakeao/passes.py
+++ b/fakeao/passes.py
@@ -1,2 +1,3 @@
 def register():
     registry.add(run)
+    cleanup()
"""


def _two_diff_prs(fp, own_pr=True):
    """gamma with a second diff PR, made on fakeao 1.0 with the first applied (it needs the first's line)."""
    (fp.root / "upstream-prs/second.diff").write_text(SECOND_DIFF)
    toml = fp.toml() + '''
[[patch.upstream.diff-pr]]
name = "gamma-fixes"
title = "Fix gamma's pass"
diff = "upstream-prs/second.diff"
package = "fakeao"
version = "1.0"
test-plan = ["python test/test_passes.py"]
summary = """
The fixes alone.
"""
measured = """
No speed change.
"""
'''
    if not own_pr:
        toml = toml.replace('repo = "pytorch/ao"\n', 'repo = "pytorch/ao"\nown-pr = false\n', 1)
    fp.set_toml(toml)
    generate_fake(fp)
    return fp


def test_export_pr_writes_diff_prs_in_order(fake_generated, tmp_path, monkeypatch):
    """A second diff PR applies on the release with the first applied; it depends on the first, the patch's own
    PR on both."""
    _installed_package(tmp_path, monkeypatch)
    fp = _two_diff_prs(_split_patchset(fake_generated, tmp_path))
    out = export_prs(fp.sources, cache_dir=fp.cache, out=tmp_path / "out", names=["inductor-gamma"])
    assert (out / "gamma-fixes/files" / PKG_FILE).read_text() == "def register():\n    registry.add(run)\n    cleanup()\n"
    assert (out / "gamma-registry-client/files" / PKG_FILE).read_text() == "def register():\n    registry.add(run)\n"
    pr2 = (out / "gamma-fixes/PR.md").read_text()
    assert 'Depends on the pytorch/ao PR "Register gamma\'s pass through the registry".' in pr2
    assert "pytorch/pytorch" not in pr2
    own = (out / "inductor-gamma/PR.md").read_text()
    assert 'Depends on the pytorch/ao PR "Register gamma\'s pass through the registry".' in own
    assert 'Depends on the pytorch/ao PR "Fix gamma\'s pass".' in own


def test_export_pr_standalone_diff_pr(fake_generated, tmp_path, monkeypatch):
    """A standalone first diff PR (a fix to the release alone) depends on no PR; the next one depends on it and on
    the patch's depends-on PRs."""
    _installed_package(tmp_path, monkeypatch)
    fp = _two_diff_prs(_split_patchset(fake_generated, tmp_path))
    toml = fp.toml()
    first = 'name = "gamma-registry-client"\n'
    assert toml.count(first) == 1
    fp.set_toml(toml.replace(first, first + "standalone = true\n"))
    out = export_prs(fp.sources, cache_dir=fp.cache, out=tmp_path / "out", names=["inductor-gamma"])
    assert "Depends on" not in (out / "gamma-registry-client/PR.md").read_text()
    pr2 = (out / "gamma-fixes/PR.md").read_text()
    assert 'Depends on the pytorch/ao PR "Register gamma\'s pass through the registry".' in pr2
    assert 'Depends on the pytorch/pytorch PR "[inductor] Add the alpha pass".' in pr2
    fp.set_toml(toml.replace(first, first + 'standalone = "yes"\n'))
    with pytest.raises(PatchsetError, match="standalone must be true or false"):
        fp.sources.load()
    second = 'name = "gamma-fixes"\n'
    fp.set_toml(toml.replace(second, second + "standalone = true\n"))
    with pytest.raises(PatchsetError, match="standalone ones come first"):
        fp.sources.load()


def test_export_pr_own_pr_false(fake_generated, tmp_path, monkeypatch):
    """own-pr = false: only the diff PRs are written; the patch's own files stay in the fork, and it needs no
    summary or test plan for them. Without a diff PR it would propose nothing: refused when loaded."""
    _installed_package(tmp_path, monkeypatch)
    fp = _two_diff_prs(_split_patchset(fake_generated, tmp_path), own_pr=False)
    fp.set_toml(fp.toml().replace('summary = """\nGamma, for fakeao, on top of the registry client.\n"""\n', ""))
    out = export_prs(fp.sources, cache_dir=fp.cache, out=tmp_path / "out", names=["inductor-gamma"])
    assert sorted(f.name for f in out.iterdir() if f.is_dir()) == ["gamma-fixes", "gamma-registry-client", "repo"]
    toml = fp.toml()
    fp.set_toml(toml[: toml.index("[[patch.upstream.diff-pr]]")])
    with pytest.raises(PatchsetError, match="own-pr = false proposes nothing"):
        fp.sources.load()


def test_diff_prs_share_one_release(fake_generated, tmp_path):
    fp = _two_diff_prs(_split_patchset(fake_generated, tmp_path))
    fp.set_toml(fp.toml().replace('version = "1.0"\ntest-plan = ["python test/test_passes.py"]\nsummary = """\nThe fixes',
                                  'version = "1.1"\ntest-plan = ["python test/test_passes.py"]\nsummary = """\nThe fixes'))
    with pytest.raises(PatchsetError, match="all need one package and version"):
        fp.sources.load()


def _real_diff_prs():
    from tools.common import PATCHSET_TOML

    split = [p for p in load_patchset(PATCHSET_TOML).patches if p.upstream and p.upstream.diff_prs]
    assert split, "no patch has [[patch.upstream.diff-pr]]"
    return split


def _real_release(dp):
    from tools.export_pr_split import release_files

    try:
        return release_files(dp)
    except PatchsetError:
        pytest.skip(f"{dp.package} {dp.version} is neither installed nor in the cache")


def test_real_diff_prs_apply_to_the_release(tmp_path):
    """The real patch's diff PRs: each applies, in order, to the package's release (installed here at that version,
    else its cached wheel) and passes the pasteability checks."""
    from tools.common import REPO_ROOT
    from tools.export_pr_split import export_diff_prs
    from tools.prmd import ForkPaths

    for p in _real_diff_prs():
        metas, findings = export_diff_prs(REPO_ROOT, p, tmp_path / p.name, [], ForkPaths.of(REPO_ROOT), None,
                                          _real_release(p.upstream.diff_prs[0]))
        assert findings == []
        for m, dp in zip(metas, p.upstream.diff_prs, strict=True):
            assert (tmp_path / p.name / m.name / "PR.md").read_text().startswith(f"# {dp.title}\n")


FIXES = "da8w4-concat-linear-fixes"


@pytest.mark.slow
def test_real_fixes_pr_test_fails_before_and_passes_after(tmp_path):
    """torchao's test file as the fixes PR leaves it, run on torchao's release (its five new tests fail: the replaced
    constants are kept; in the shared-weight one, beside those its unfused call still reads) and with the fixes
    applied (all pass). Needs torchao at that version installed here and a
    CPU kernel for torchao::da8w4_linear_cpu (this checkout's, built into build/csrc/, or where DA8W4_LINEAR_CPU_LIB
    points)."""
    import importlib.metadata
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tools.common import REPO_ROOT
    from tools.export_pr_split import export_diff_prs
    from tools.prmd import ForkPaths

    (p,) = [p for p in _real_diff_prs() if any(dp.name == FIXES for dp in p.upstream.diff_prs)]
    dp = next(dp for dp in p.upstream.diff_prs if dp.name == FIXES)
    try:
        installed = importlib.metadata.version(dp.package)
    except importlib.metadata.PackageNotFoundError:
        installed = None
    sys.path.insert(0, str(REPO_ROOT / "csrc"))
    try:
        import da8w4_linear_cpu
    finally:
        sys.path.pop(0)
    lib = Path(da8w4_linear_cpu.default_path())
    if installed != dp.version or not lib.is_file():
        pytest.skip(f"needs {dp.package} {dp.version} installed and {lib}")
    release = _real_release(dp)
    export_diff_prs(REPO_ROOT, p, tmp_path, [], ForkPaths.of(REPO_ROOT), None, release)
    module = "torchao/prototype/inductor/fx_passes/da8w4_concat_linear_fusion_cpu.py"
    before, after = tmp_path / "release", tmp_path / FIXES / "files"
    (before / module).parent.mkdir(parents=True)
    (before / module).write_bytes(release.read(module))
    test = after / "test/prototype/test_da8w4_cpu.py"
    # the pass module of each state shadows the installed one (same package, path first), the kernel loaded first
    runner = (
        "import importlib.util, runpy, sys\n"
        "import torch, torchao\n"
        "spec = importlib.util.spec_from_file_location('torchao.prototype.inductor.fx_passes."
        "da8w4_concat_linear_fusion_cpu', sys.argv[1])\n"
        "mod = importlib.util.module_from_spec(spec); sys.modules[spec.name] = mod; spec.loader.exec_module(mod)\n"
        "import torchao.prototype.inductor.fx_passes as fx; fx.da8w4_concat_linear_fusion_cpu = mod\n"
        f"sys.path.insert(0, {str(REPO_ROOT / 'csrc')!r}); import da8w4_linear_cpu\n"
        f"assert da8w4_linear_cpu.load({str(lib)!r})\n"
        "sys.argv = [sys.argv[2], '-k', 'test_8da4w_concat_linear_cpu_graph']\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    # torch's run_tests writes a JUnit report, and so needs xmlrunner, wherever CI is set: not this test's concern
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    for state, ok in ((before, False), (after, True)):
        r = subprocess.run([sys.executable, "-c", runner, str(state / module), str(test)], capture_output=True,
                           text=True, timeout=300, check=False, env=env)
        assert (r.returncode == 0) == ok, (state, r.stdout[-3000:] + r.stderr[-3000:])
        assert ("Ran 5 tests" in r.stderr), r.stderr[-3000:]  # bias or not x (a)symmetric activation, a shared weight
        assert ok or "FAILED (failures=5)" in r.stderr, r.stderr[-3000:]


FILE_PR = '''
[[patch.upstream.file-pr]]
name = "gamma-kernel"
title = "Gamma's kernel, rewritten"
path = "fakeao/csrc/gamma_kernel.cpp"
source = "upstream-prs/gamma_kernel.cpp"
package = "fakeao"
version = "1.0"
headline = "alpha: fused vs stock"
test-plan = ["python test/test_kernel.py"]
summary = """
The kernel, whole.
"""
'''


def _with_file_pr(fp):
    (fp.root / "upstream-prs/gamma_kernel.cpp").write_text("// the new kernel\nint gamma() { return 1; }\n")
    fp.set_toml(fp.toml() + FILE_PR)
    generate_fake(fp)
    return fp


def test_export_pr_writes_a_file_pr(fake_generated, tmp_path, monkeypatch):
    """A file PR: the generated file at its path in the package's tree, and a PR.md that depends on no other PR,
    says the file is replaced whole, and measures with the headline section (its Command line left out)."""
    _installed_package(tmp_path, monkeypatch)
    fp = _with_file_pr(_split_patchset(fake_generated, tmp_path))
    out = export_prs(fp.sources, cache_dir=fp.cache, out=tmp_path / "out", names=["inductor-gamma"])
    d = out / "gamma-kernel"
    assert (d / "files/fakeao/csrc/gamma_kernel.cpp").read_text() == (fp.root / "upstream-prs/gamma_kernel.cpp").read_text()
    assert sorted(str(f.relative_to(d)) for f in d.rglob("*") if f.is_file()) == [
        "PR.md", "files/fakeao/csrc/gamma_kernel.cpp"]
    pr = (d / "PR.md").read_text()
    assert pr.startswith("# Gamma's kernel, rewritten\n\n## Summary\n\nThe kernel, whole.\n")
    assert "Depends on" not in pr
    assert "- `fakeao/csrc/gamma_kernel.cpp`: replaces fakeao 1.0's file whole" in pr
    assert "## Test Plan\n\n```\npython test/test_kernel.py\n```" in pr
    assert "| x | 10 | 8 |" in pr and "Command:" not in pr
    # the other PRs are unchanged by it
    assert (out / "gamma-registry-client/PR.md").is_file() and (out / "inductor-gamma/PR.md").is_file()


def test_file_pr_adds_files(fake_generated, tmp_path, monkeypatch):
    """A file PR's ``add``: each new file (its tests) at its path in the package's tree, listed in PR.md as new;
    a missing one fails the export before anything is written, and a malformed ``add`` fails the load."""
    _installed_package(tmp_path, monkeypatch)
    fp = _with_file_pr(_split_patchset(fake_generated, tmp_path))
    (fp.root / "upstream-prs/test_gamma_kernel.py").write_text("def test_gamma():\n    assert True\n")
    add = 'add = [{path = "test/test_gamma_kernel.py", source = "upstream-prs/test_gamma_kernel.py"}]\n'
    fp.set_toml(fp.toml().replace('name = "gamma-kernel"\n', 'name = "gamma-kernel"\n' + add)
                .replace("The kernel, whole.", "The kernel, whole; `test_gamma_kernel.py` tests it."))
    out = export_prs(fp.sources, cache_dir=fp.cache, out=tmp_path / "out", names=["inductor-gamma"])
    d = out / "gamma-kernel"
    assert sorted(str(f.relative_to(d)) for f in d.rglob("*") if f.is_file()) == [
        "PR.md", "files/fakeao/csrc/gamma_kernel.cpp", "files/test/test_gamma_kernel.py"]
    assert (d / "files/test/test_gamma_kernel.py").read_text() == "def test_gamma():\n    assert True\n"
    pr = (d / "PR.md").read_text()
    assert "- `fakeao/csrc/gamma_kernel.cpp`: replaces fakeao 1.0's file whole\n- `test/test_gamma_kernel.py`: new" in pr
    assert "`test_gamma_kernel.py` tests it" in pr  # the PR's own file, not one of this repo's alone
    (fp.root / "upstream-prs/test_gamma_kernel.py").unlink()
    with pytest.raises(PatchsetError, match="test_gamma_kernel.py: missing"):
        export_prs(fp.sources, cache_dir=fp.cache, out=tmp_path / "out2", names=["inductor-gamma"])
    assert not (tmp_path / "out2").exists()
    fp.set_toml(fp.toml().replace(add, 'add = ["test/test_gamma_kernel.py"]\n'))
    with pytest.raises(PatchsetError, match="add must be a list of"):
        fp.sources.load()


def test_file_pr_diff_changes_release_files(fake_generated, tmp_path, monkeypatch):
    """A file PR's ``diff``: the release's files it changes, with it applied, beside the replaced file, the diff as
    ``<name>.patch``, and each listed in PR.md as changed; a diff that does not apply to the release fails the export
    before anything is written."""
    _installed_package(tmp_path, monkeypatch)
    fp = _with_file_pr(_split_patchset(fake_generated, tmp_path))
    diff = (f"diff --git a/{PKG_FILE} b/{PKG_FILE}\n--- a/{PKG_FILE}\n+++ b/{PKG_FILE}\n@@ -1,2 +1,2 @@\n def register():\n"
            "-    config.post_pass = run\n+    config.post_pass = run_packed\n")
    (fp.root / "upstream-prs/gamma_kernel.diff").write_text(diff)
    fp.set_toml(fp.toml().replace('name = "gamma-kernel"\n',
                                  'name = "gamma-kernel"\ndiff = "upstream-prs/gamma_kernel.diff"\n'))
    out = export_prs(fp.sources, cache_dir=fp.cache, out=tmp_path / "out", names=["inductor-gamma"])
    d = out / "gamma-kernel"
    assert sorted(str(f.relative_to(d)) for f in d.rglob("*") if f.is_file()) == [
        "PR.md", "files/fakeao/csrc/gamma_kernel.cpp", f"files/{PKG_FILE}", "gamma-kernel.patch"]
    assert (d / "files" / PKG_FILE).read_text() == "def register():\n    config.post_pass = run_packed\n"
    assert (d / "gamma-kernel.patch").read_text() == diff
    assert f"- `{PKG_FILE}`: changed" in (d / "PR.md").read_text()
    (fp.root / "upstream-prs/gamma_kernel.diff").write_text(diff.replace(" def register():", " def other():"))
    with pytest.raises(PatchsetError, match="gamma_kernel.diff: does not apply to fakeao 1.0"):
        export_prs(fp.sources, cache_dir=fp.cache, out=tmp_path / "out2", names=["inductor-gamma"])
    assert not (tmp_path / "out2").exists()


def test_file_pr_for_a_branch(fake_generated, tmp_path, monkeypatch):
    """A file PR with ``branch``: it goes to the package's development branch, whose file it replaces (PR.md says
    whose), while its ``diff`` is still applied to the release's files (and PR.md says which); a branch that is not a
    name fails the load."""
    _installed_package(tmp_path, monkeypatch)
    fp = _with_file_pr(_split_patchset(fake_generated, tmp_path))
    diff = (f"diff --git a/{PKG_FILE} b/{PKG_FILE}\n--- a/{PKG_FILE}\n+++ b/{PKG_FILE}\n@@ -1,2 +1,2 @@\n def register():\n"
            "-    config.post_pass = run\n+    config.post_pass = run_packed\n")
    (fp.root / "upstream-prs/gamma_kernel.diff").write_text(diff)
    fp.set_toml(fp.toml().replace('name = "gamma-kernel"\n', 'name = "gamma-kernel"\nbranch = "main"\n'
                                  'diff = "upstream-prs/gamma_kernel.diff"\n'))
    out = export_prs(fp.sources, cache_dir=fp.cache, out=tmp_path / "out", names=["inductor-gamma"])
    d = out / "gamma-kernel"
    assert sorted(str(f.relative_to(d)) for f in d.rglob("*") if f.is_file()) == [
        "PR.md", "files/fakeao/csrc/gamma_kernel.cpp", f"files/{PKG_FILE}", "gamma-kernel.patch"]
    text = (d / "PR.md").read_text()
    assert "- `fakeao/csrc/gamma_kernel.cpp`: replaces main's file whole" in text
    assert f"- `{PKG_FILE}`: changed (made against fakeao 1.0)" in text
    assert "fakeao 1.0's file" not in text
    fp.set_toml(fp.toml().replace('branch = "main"\n', 'branch = {name = "main"}\n'))
    with pytest.raises(PatchsetError, match="branch must be a branch name"):
        fp.sources.load()


def test_file_pr_source_missing_or_table_wrong(fake_generated, tmp_path, monkeypatch):
    _installed_package(tmp_path, monkeypatch)
    fp = _with_file_pr(_split_patchset(fake_generated, tmp_path))
    (fp.root / "upstream-prs/gamma_kernel.cpp").unlink()
    with pytest.raises(PatchsetError, match="gamma_kernel.cpp: missing"):
        export_prs(fp.sources, cache_dir=fp.cache, out=tmp_path / "out", names=["inductor-gamma"])
    assert not (tmp_path / "out").exists()  # nothing written
    fp.set_toml(fp.toml().replace('headline = "alpha: fused vs stock"\ntest-plan = ["python test/test_kernel.py"]',
                                  'test-plan = ["python test/test_kernel.py"]'))
    with pytest.raises(PatchsetError, match=r"\[\[patch.upstream.file-pr\]\] lacks headline"):
        fp.sources.load()
    fp.set_toml(fp.toml().replace('name = "gamma-kernel"\n', 'name = "gamma-kernel"\nheadline = "x"\nbogus = 1\n'))
    with pytest.raises(PatchsetError, match=r"file-pr\]\] has unknown keys \['bogus'\]"):
        fp.sources.load()
    fp.set_toml(fp.toml().replace("headline = \"x\"\nbogus = 1\n", "headline = \"x\"\n").replace(
        "The kernel, whole.", "word " * 301))
    with pytest.raises(PatchsetError, match=r"file-pr\]\] gamma-kernel: summary has 301 words; a reviewer gets at most 300"):
        fp.sources.load()
