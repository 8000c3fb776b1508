"""apply onto a 'PyTorch checkout' (a clone of the fake pristine base)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tools.apply import apply_series, detect_version
from tools.common import PatchsetError, REPO_ROOT
from tools.tests.conftest import git, tree_state


def _apply(fp, checkout):
    return apply_series(checkout, fp.patches_dir, fp.sources)


def _subjects(repo, n):
    return git(repo, "log", f"-{n}", "--format=%s").splitlines()[::-1]


def test_apply_series_as_commits(fake_generated, tmp_path):
    fp = fake_generated
    co = fp.checkout("2.13.0", tmp_path / "pytorch")
    orig = git(co, "rev-parse", "HEAD").strip()
    res = _apply(fp, co)
    assert res.base == "2.13.0" and res.orig_head == orig
    assert res.applied == ["inductor-alpha.patch", "inductor-beta.patch", "inductor-gamma.patch"] and res.skipped == []
    assert _subjects(co, 3) == ["[inductor] Add the alpha pass", "[inductor] Add the beta pass", "[inductor] Add gamma helpers"]
    assert git(co, "rev-parse", "HEAD~3").strip() == orig
    assert git(co, "status", "--porcelain") == ""
    assert "alpha = False" in (co / "torch/_inductor/config.py").read_text()
    assert (co / "test/inductor/test_gamma.py").is_file()
    # the trailers travel with the commits
    assert "Upstream-Status: Pending" in git(co, "log", "-1", "--format=%B", "HEAD~2")


def test_apply_reads_version_txt_of_a_source_checkout(fake_generated, tmp_path):
    fp = fake_generated
    co = fp.checkout("2.11.0", tmp_path / "pytorch")
    (co / "version.txt").write_text("2.11.0a0\n")
    git(co, "add", "version.txt")
    git(co, "commit", "-qm", "version.txt like a real checkout")
    assert detect_version(co) == ("2.11.0a0", co / "version.txt")
    res = _apply(fp, co)
    assert res.base == "2.11.0" and res.applied == ["inductor-alpha.patch", "inductor-beta.patch"]


def test_apply_refuses_a_dirty_checkout(fake_generated, tmp_path):
    fp = fake_generated
    co = fp.checkout("2.13.0", tmp_path / "pytorch")
    (co / "torch/_inductor/config.py").write_text("# local edit\n")
    (co / "notes.txt").write_text("untracked\n")
    before = tree_state(co)
    with pytest.raises(PatchsetError) as ei:
        _apply(fp, co)
    assert ei.value.where == str(co)
    assert "torch/_inductor/config.py" in ei.value.reason and "notes.txt" in ei.value.reason
    assert tree_state(co) == before


def test_apply_refuses_staged_change(fake_generated, tmp_path):
    fp = fake_generated
    co = fp.checkout("2.13.0", tmp_path / "pytorch")
    (co / "torch/__init__.py").write_text("# staged\n")
    git(co, "add", "torch/__init__.py")
    before = tree_state(co)
    with pytest.raises(PatchsetError, match="torch/__init__.py"):
        _apply(fp, co)
    assert tree_state(co) == before


def test_apply_conflict_restores_everything(fake_generated, tmp_path):
    """alpha applies, beta conflicts: beta is named with its file, alpha's commit is undone too."""
    fp = fake_generated
    co = fp.checkout("2.13.0", tmp_path / "pytorch")
    cfg = co / "torch/_inductor/config.py"
    cfg.write_text(cfg.read_text().replace("option_29 = 29", "option_29 = 2900"))
    git(co, "commit", "-qam", "upstream moved on")
    before = tree_state(co)
    with pytest.raises(PatchsetError) as ei:
        _apply(fp, co)
    assert ei.value.where == str(fp.patches_dir / "v2.13.0" / "inductor-beta.patch")
    assert "torch/_inductor/config.py" in ei.value.reason
    assert "nothing was changed" in ei.value.reason
    assert tree_state(co) == before  # same HEAD, refs, status, files; no am in progress


def test_apply_conflict_on_detached_head(fake_generated, tmp_path):
    fp = fake_generated
    co = fp.checkout("2.13.0", tmp_path / "pytorch")
    cfg = co / "torch/_inductor/fx_passes/post_grad.py"
    cfg.write_text(cfg.read_text().replace("def stage_21(gm):", "def stage_21(graph):"))
    git(co, "commit", "-qam", "conflict with beta's post_grad hook")
    git(co, "checkout", "-q", "--detach")
    before = tree_state(co)
    with pytest.raises(PatchsetError, match="post_grad.py"):
        _apply(fp, co)
    assert tree_state(co) == before


def test_apply_skips_already_applied(fake_generated, tmp_path):
    fp = fake_generated
    co = fp.checkout("2.13.0", tmp_path / "pytorch")
    git(co, "am", "-q", str(fp.patches_dir / "v2.13.0" / "inductor-alpha.patch"))
    res = _apply(fp, co)
    assert [n for n, _ in res.skipped] == ["inductor-alpha.patch"]
    assert "reverse-applies" in res.skipped[0][1]
    assert res.applied == ["inductor-beta.patch", "inductor-gamma.patch"]
    # and a second run is a no-op
    head = git(co, "rev-parse", "HEAD").strip()
    res2 = _apply(fp, co)
    assert res2.applied == [] and len(res2.skipped) == 3
    assert git(co, "rev-parse", "HEAD").strip() == head


def test_apply_skips_patch_whose_pr_was_merged(fake_generated, tmp_path):
    """Upstream merged beta's PR in a different form: the patch neither reverse-applies nor applies,
    but the merge bot's 'Pull Request resolved:' line says it is in."""
    fp = fake_generated
    co = fp.checkout("2.13.0", tmp_path / "pytorch")
    cfg = co / "torch/_inductor/config.py"
    cfg.write_text(cfg.read_text().replace("option_30 = 30  # an upstream config option\n", "option_30 = 30  # an upstream config option\nbeta = True\n"))
    git(co, "commit", "-qam", "[inductor] beta, reworked\n\nPull Request resolved: https://github.com/pytorch/pytorch/pull/123456")
    res = _apply(fp, co)
    assert [n for n, _ in res.skipped] == ["inductor-beta.patch"]
    assert "pull/123456" in res.skipped[0][1]
    assert res.applied == ["inductor-alpha.patch", "inductor-gamma.patch"]


def test_apply_skips_when_added_files_are_identical(fake_generated, tmp_path):
    """Upstream landed alpha's new files verbatim but wired them up differently (no alpha hook line):
    the patch does not reverse-apply, yet its files are there, identical."""
    fp = fake_generated
    co = fp.checkout("2.13.0", tmp_path / "pytorch")
    for rel, src in [("torch/_inductor/fx_passes/alpha.py", "torch_overlay/torch/_inductor/fx_passes/alpha.py"), ("test/inductor/test_alpha.py", "test/inductor/test_alpha.py")]:
        (co / rel).parent.mkdir(parents=True, exist_ok=True)
        (co / rel).write_bytes((fp.root / src).read_bytes())
    git(co, "add", "-A")
    git(co, "commit", "-qm", "upstream landed alpha's files")
    res = _apply(fp, co)
    assert [n for n, _ in res.skipped] == ["inductor-alpha.patch"]
    assert "identical content" in res.skipped[0][1]
    assert res.applied == ["inductor-beta.patch", "inductor-gamma.patch"]


def test_apply_rejects_unknown_version(fake_generated, tmp_path):
    fp = fake_generated
    co = fp.checkout("2.13.0", tmp_path / "pytorch")
    (co / "version.txt").write_text("2.12.0a0\n")
    git(co, "add", "version.txt")
    git(co, "commit", "-qm", "an unsupported version")
    before = tree_state(co)
    with pytest.raises(PatchsetError) as ei:
        _apply(fp, co)
    assert ei.value.where == str(co / "version.txt")
    assert "2.12.0a0" in ei.value.reason and "2.11.0, 2.13.0" in ei.value.reason
    assert tree_state(co) == before


def test_apply_rejects_non_checkout(fake_generated, tmp_path):
    d = tmp_path / "plain"
    (d / "torch").mkdir(parents=True)
    (d / "torch/version.py").write_text("__version__ = '2.13.0'\n")
    with pytest.raises(PatchsetError, match="not the top directory of a git checkout"):
        _apply(fake_generated, d)


def test_apply_cli(fake_generated, tmp_path):
    fp = fake_generated
    co = fp.checkout("2.13.0", tmp_path / "pytorch")
    env = dict(os.environ, TORCH_PATCHSET_CACHE=str(fp.cache))
    cmd = [sys.executable, "-m", "tools", "apply", str(co), "--repo-root", str(fp.root)]
    r = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "applied 3, skipped 0" in r.stdout
    (co / "junk").write_text("x")
    r = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert r.returncode == 2 and f"error: {co}: working tree is not clean (junk)" in r.stderr


def test_apply_interrupted_midway_restores(fake_generated, tmp_path, monkeypatch):
    """Ctrl-C while the second patch is being applied: the first patch's commit is undone too."""
    import tools.apply as ap

    fp = fake_generated
    co = fp.checkout("2.13.0", tmp_path / "pytorch")
    before = tree_state(co)
    real_git = ap.gitutil.git
    ams = []

    def flaky_git(*args, **kw):
        if args[0] == "am" and "--abort" not in args:
            ams.append(args)
            if len(ams) == 2:
                real_git(*args, **kw)  # the patch lands, then the user hits Ctrl-C
                raise KeyboardInterrupt
        return real_git(*args, **kw)

    monkeypatch.setattr(ap.gitutil, "git", flaky_git)
    with pytest.raises(KeyboardInterrupt):
        _apply(fp, co)
    assert len(ams) == 2
    assert tree_state(co) == before
