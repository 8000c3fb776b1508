"""apply onto a 'PyTorch checkout' (a clone of the fake pristine base)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tools.apply import ConflictError, apply_series, detect_version
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
    assert "nothing in the checkout was touched" in ei.value.reason
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


def _land_alpha_files(fp, co):
    for rel, src in [("torch/_inductor/fx_passes/alpha.py", "torch_overlay/torch/_inductor/fx_passes/alpha.py"), ("test/inductor/test_alpha.py", "test/inductor/test_alpha.py")]:
        (co / rel).parent.mkdir(parents=True, exist_ok=True)
        (co / rel).write_bytes((fp.root / src).read_bytes())
    git(co, "add", "-A")
    git(co, "commit", "-qm", "upstream landed alpha's files")


def test_a_half_present_patch_is_applied_for_the_rest(fake_generated, tmp_path):
    """Issue #28 item 1: the checkout has the files alpha adds, identical, but not its hook in config.py. That is not
    "already there": alpha is applied for the rest (its hook), as one commit, and the output names both parts."""
    fp = fake_generated
    co = fp.checkout("2.13.0", tmp_path / "pytorch")
    _land_alpha_files(fp, co)
    res = _apply(fp, co)
    assert res.skipped == [] and res.applied == ["inductor-alpha.patch", "inductor-beta.patch", "inductor-gamma.patch"]
    assert res.partial == [("inductor-alpha.patch", ["test/inductor/test_alpha.py", "torch/_inductor/fx_passes/alpha.py"],
                            ["torch/_inductor/config.py"])]
    assert "alpha = False  # TORCHINDUCTOR_ALPHA" in (co / "torch/_inductor/config.py").read_text()
    assert _subjects(co, 3)[0] == "[inductor] Add the alpha pass"
    assert git(co, "show", "--stat", "--format=", "HEAD~2").split()[0] == "torch/_inductor/config.py"
    assert git(co, "status", "--porcelain") == ""


def test_a_half_present_patch_cli_says_what_was_there(fake_generated, tmp_path):
    fp = fake_generated
    co = fp.checkout("2.13.0", tmp_path / "pytorch")
    _land_alpha_files(fp, co)
    env = dict(os.environ, TORCH_PATCHSET_CACHE=str(fp.cache))
    r = subprocess.run([sys.executable, "-m", "tools", "apply", str(co), "--repo-root", str(fp.root)], cwd=REPO_ROOT,
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "applied 3, skipped 0" in r.stdout and "identical content" not in r.stdout
    assert ("inductor-alpha.patch: partly there already (test/inductor/test_alpha.py, torch/_inductor/fx_passes/alpha.py);"
            " applied the rest (torch/_inductor/config.py)") in r.stdout


def test_apply_skips_a_patch_whose_every_file_is_there(fake_generated, tmp_path):
    fp = fake_generated
    co = fp.checkout("2.13.0", tmp_path / "pytorch")
    git(co, "am", "-q", str(fp.patches_dir / "v2.13.0" / "inductor-gamma.patch"))
    res = _apply(fp, co)
    assert [n for n, _ in res.skipped] == ["inductor-gamma.patch"] and res.partial == []


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
    assert ei.value.reason.count("2.12.0a0") == 1, ei.value.reason  # issue #28 item 6: said once
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


# --------------------------------------------------------------------------------------------------
# --base and --3way: a fork with its own edits, a version we have no series for


def _commit_edit(co, rel, old, new, msg="fork: local edit"):
    p = co / rel
    text = p.read_text()
    assert old in text, old
    p.write_text(text.replace(old, new, 1))
    git(co, "commit", "-qam", msg)


def test_3way_applies_over_a_local_edit_that_plain_am_refuses(fake_generated, tmp_path):
    """The fork changed option_4 and option_29, inside alpha's and beta's hunk context: plain am refuses,
    the merge applies both. beta's pre-image of config.py is 2.13.0 + alpha, a blob no checkout has: it is
    computed from the pristine blob and the series."""
    fp = fake_generated
    co = fp.checkout("2.13.0", tmp_path / "pytorch")
    _commit_edit(co, "torch/_inductor/config.py", "option_4 = 4  #", "option_4 = 44  # fork default;")
    _commit_edit(co, "torch/_inductor/config.py", "option_29 = 29  #", "option_29 = 290  # fork default;")
    before = tree_state(co)
    with pytest.raises(PatchsetError, match="inductor-alpha.patch"):
        _apply(fp, co)
    assert tree_state(co) == before
    res = apply_series(co, fp.patches_dir, fp.sources, three_way=True)
    assert res.applied == ["inductor-alpha.patch", "inductor-beta.patch", "inductor-gamma.patch"]
    assert res.merged == ["inductor-alpha.patch", "inductor-beta.patch"]
    cfg = (co / "torch/_inductor/config.py").read_text()
    assert "option_4 = 44  # fork default;" in cfg and "option_5 = 5  # an upstream config option\nalpha = False" in cfg
    assert "option_29 = 290  # fork default;" in cfg and "option_30 = 30  # an upstream config option\nbeta = False" in cfg
    assert git(co, "status", "--porcelain") == "" and not (co / ".git" / "rebase-apply").exists()


def test_3way_conflict_is_reported_per_hunk_and_leaves_the_tree_as_it_was(fake_generated, tmp_path):
    fp = fake_generated
    co = fp.checkout("2.13.0", tmp_path / "pytorch")
    # the fork put its own line exactly where beta's config hook goes (alpha, earlier in the series, merges)
    _commit_edit(co, "torch/_inductor/config.py", "option_30 = 30  # an upstream config option\n", "option_30 = 30  # an upstream config option\nfork_beta = 1\n")
    before = tree_state(co)
    with pytest.raises(ConflictError) as ei:
        apply_series(co, fp.patches_dir, fp.sources, three_way=True)
    e = ei.value
    assert e.where == str(fp.patches_dir / "v2.13.0" / "inductor-beta.patch")
    (h,) = e.hunks
    # option_30 is line 31 of 2.13.0; alpha's line above it makes it 32, and the conflict block follows it
    assert h.file == "torch/_inductor/config.py" and h.first == 33 and h.last > h.first
    assert "both change these lines" in h.reason
    assert "torch/_inductor/config.py:33-" in e.reason and "nothing in the checkout was touched" in e.reason
    assert tree_state(co) == before  # HEAD (alpha's commit undone), refs, index, files; no rebase-apply


def test_3way_without_the_base_blobs_names_patch_and_file(fake_generated, tmp_path):
    """A checkout whose history never had the pristine blobs (a fresh repo of edited files)."""
    fp = fake_generated
    src = fp.checkout("2.13.0", tmp_path / "src")
    co = tmp_path / "fork"
    co.mkdir()
    git(co, "init", "-q")
    for p in src.rglob("*"):
        if p.is_file() and ".git" not in p.relative_to(src).parts:
            (co / p.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
            (co / p.relative_to(src)).write_bytes(p.read_bytes())
    cfg = co / "torch/_inductor/config.py"
    cfg.write_text(cfg.read_text().replace("option_4 = 4  #", "option_4 = 44  #"))
    git(co, "add", "-A")
    git(co, "commit", "-qm", "fork without upstream history")
    before = tree_state(co)
    with pytest.raises(PatchsetError) as ei:
        apply_series(co, fp.patches_dir, fp.sources, three_way=True)
    assert ei.value.where == str(fp.patches_dir / "v2.13.0" / "inductor-alpha.patch")
    assert "pristine torch 2.13.0 version of torch/_inductor/config.py" in ei.value.reason and "lacks" in ei.value.reason
    assert tree_state(co) == before


def test_base_overrides_an_unknown_version_txt(fake_generated, tmp_path):
    fp = fake_generated
    co = fp.checkout("2.13.0", tmp_path / "pytorch")
    (co / "version.txt").write_text("2.14.0a0\n")
    git(co, "add", "version.txt")
    git(co, "commit", "-qm", "main moved on")
    with pytest.raises(PatchsetError, match="--base X.Y.Z"):
        _apply(fp, co)
    with pytest.raises(PatchsetError) as ei:
        apply_series(co, fp.patches_dir, fp.sources, base="2.12.0")
    assert ei.value.where == "--base 2.12.0"
    env = dict(os.environ, TORCH_PATCHSET_CACHE=str(fp.cache))
    r = subprocess.run([sys.executable, "-m", "tools", "apply", str(co), "--base", "2.13.0", "--repo-root", str(fp.root)], cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "torch 2.14.0a0 (series v2.13.0, --base): applied 3" in r.stdout
    assert "using the v2.13.0 series as --base asks" in r.stderr


# --------------------------------------------------------------------------------------------------
# issue #28: the series checks of install/wheel (item 2), an untouched checkout on failure (item 3), the failure
# message (item 4)


def _cli(fp, *args):
    env = dict(os.environ, TORCH_PATCHSET_CACHE=str(fp.cache))
    return subprocess.run([sys.executable, "-m", "tools", "apply", *map(str, args), "--repo-root", str(fp.root)],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True)


def test_apply_refuses_a_stale_series_and_warns_about_a_modified_one(fake_generated, tmp_path):
    fp = fake_generated
    co = fp.checkout("2.13.0", tmp_path / "pytorch")
    before = tree_state(co)
    test_beta = fp.root / "test/inductor/test_beta.py"
    text = test_beta.read_text()
    test_beta.write_text(text + "# edited without `generate`\n")
    r = _cli(fp, co)
    assert r.returncode == 2 and f"error: {fp.patches_dir / 'v2.13.0' / 'series'}: out of date" in r.stderr
    assert "python -m tools generate" in r.stderr and tree_state(co) == before
    test_beta.write_text(text)
    # a hand edit of a committed series: applied, with the warning install and wheel give
    git(fp.root, "init", "-q")
    git(fp.root, "add", "-A")
    git(fp.root, "commit", "-qm", "the patch set")
    p = fp.patches_dir / "v2.13.0" / "inductor-gamma.patch"
    p.write_text(p.read_text().replace("+GAMMA = 1", "+GAMMA = 2"))
    r = _cli(fp, co)
    assert r.returncode == 0, r.stderr
    assert f"warning: {fp.patches_dir / 'v2.13.0'}: the series differs from the committed series" in r.stderr
    assert "inductor-gamma.patch" in r.stderr and "has not vouched for it" in r.stderr


def _snapshot(repo):
    """What a build system or git sees besides the contents: every file's mtime, the index bytes, .git's entries."""
    files = {str(p.relative_to(repo)): p.stat().st_mtime_ns for p in repo.rglob("*")
             if p.is_file() and ".git" not in p.relative_to(repo).parts}
    return files, (repo / ".git" / "index").read_bytes(), sorted(os.listdir(repo / ".git"))


def _age(repo):
    for p in repo.rglob("*"):
        if p.is_file() and ".git" not in p.relative_to(repo).parts:
            os.utime(p, ns=(978307200 * 10**9, 978307200 * 10**9))  # 2001-01-01: any rewrite shows
    git(repo, "update-index", "--refresh")


@pytest.mark.parametrize("three_way", [False, True])
def test_a_failed_apply_leaves_mtimes_index_and_orig_head_alone(fake_generated, tmp_path, three_way):
    """Issue #28 item 3: alpha applies, beta fails: the files alpha touched must keep their mtimes, the index its
    bytes, and no ORIG_HEAD (or anything else) may appear in .git."""
    fp = fake_generated
    co = fp.checkout("2.13.0", tmp_path / "pytorch")
    edit = ("option_30 = 30  # an upstream config option\n", "option_30 = 30  # an upstream config option\nfork_beta = 1\n") \
        if three_way else ("option_29 = 29", "option_29 = 2900")
    _commit_edit(co, "torch/_inductor/config.py", *edit)
    _age(co)
    before, state = _snapshot(co), tree_state(co)
    assert "ORIG_HEAD" not in before[2]
    with pytest.raises(PatchsetError, match="inductor-beta|config.py") as ei:
        apply_series(co, fp.patches_dir, fp.sources, three_way=three_way)
    after = _snapshot(co)
    assert [f for f in before[0] if after[0].get(f) != before[0][f]] == []  # no mtime changed
    assert after[2] == before[2] and "ORIG_HEAD" not in after[2]  # nothing new in .git
    assert after[1] == before[1] and tree_state(co) == state  # index bytes, HEAD, refs, status, contents
    assert git(co, "diff-files") == ""  # the index's stat data still matches every file: nothing to refresh
    assert "nothing in the checkout was touched" in ei.value.reason


def test_a_successful_apply_writes_only_the_files_it_changes(fake_generated, tmp_path):
    fp = fake_generated
    co = fp.checkout("2.13.0", tmp_path / "pytorch")
    _age(co)
    before = _snapshot(co)[0]
    res = _apply(fp, co)
    after = _snapshot(co)[0]
    changed = {f for f in after if before.get(f) != after[f]}
    assert changed == {f for f in git(co, "diff", "--name-only", res.orig_head, "HEAD").split()}
    assert git(co, "reflog", "-1", "--format=%gs").strip() == "patchset apply: 3 patch(es) of the v2.13.0 series"
    assert not (co / ".git" / "worktrees").exists()


def test_a_plain_failure_names_every_file_the_matching_series_and_3way(fake_generated, tmp_path):
    """Issue #28 item 4: --base 2.11.0 on a checkout that says 2.13.0 and has moved on in two files beta hooks."""
    fp = fake_generated
    co = fp.checkout("2.13.0", tmp_path / "pytorch")
    (co / "version.txt").write_text("2.13.0\n")
    git(co, "add", "version.txt")
    git(co, "commit", "-qm", "version.txt")
    _commit_edit(co, "torch/_inductor/config.py", "option_29 = 29", "option_29 = 2900")
    _commit_edit(co, "torch/_inductor/fx_passes/post_grad.py", "def stage_21(gm):", "def stage_21(graph):")
    before = tree_state(co)
    with pytest.raises(PatchsetError) as ei:
        apply_series(co, fp.patches_dir, fp.sources, base="2.11.0")
    why = ei.value.reason
    assert ei.value.where == str(fp.patches_dir / "v2.11.0" / "inductor-beta.patch")
    assert "in 2 files (torch/_inductor/config.py, torch/_inductor/fx_passes/post_grad.py)" in why
    assert f"this checkout is torch 2.13.0 (version.txt), and {fp.patches_dir / 'v2.13.0'} is the series made for it: drop --base" in why
    assert "--3way merges each patch with them" in why
    assert tree_state(co) == before
    with pytest.raises(PatchsetError) as ei:  # its own series: no --base hint, still the --3way one
        apply_series(co, fp.patches_dir, fp.sources)
    assert "drop --base" not in ei.value.reason and "--3way" in ei.value.reason
