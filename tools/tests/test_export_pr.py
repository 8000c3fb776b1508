"""export-pr on the fake patch set: PRs written from [patch.upstream], pasteable as is, upstream test hunks."""

from __future__ import annotations

import re
import shutil

import pytest

from tools.common import PatchsetError
from tools.export_pr import MARKER, export_prs, rewrite_for_repo
from tools.prmd import ForkPaths, added_lines, named_section, older_releases_re, pasteability_findings
from tools.tests.conftest import git

README = """# Benchmarks

## Is it faster for me?

### alpha: fused vs stock

Machine: a test box.

| case | stock | patched |
|---|---|---|
| x | 10 | 8 |

Command: `python benchmarks/alpha_bench.py --reps 3` (raw:
`results/alpha.json`)

### beta: fused vs stock

Pending.

## Results in full

not this
"""

UPSTREAM_TEST = "import unittest\n\n\nclass TestBeta(unittest.TestCase):\n    def test_count(self):\n        self.assertEqual(stages(), 2)\n"


TEST_CHANGE = """
[[patch.upstream.test-change]]
file = "test/inductor/test_upstream_beta.py"
test = "TestBeta.test_count"
assertion = "Expected 2 stages."
reason = "Beta adds one."
"""


def _export(fp, **kw):
    return export_prs(fp.sources, cache_dir=fp.cache, **kw)


def _with_readme(fp):
    """benchmarks/README.md with the headline tables, and beta's change to an upstream test with its hunk."""
    anchor = 'Beta makes stage_20 do what its callers expect.\n"""\n'
    assert anchor in fp.toml()
    fp.set_toml(fp.toml().replace(anchor, anchor + TEST_CHANGE))
    (fp.root / "benchmarks").mkdir(exist_ok=True)
    (fp.root / "benchmarks/README.md").write_text(README)
    (fp.root / "benchmarks/alpha_bench.py").write_text("# the alpha harness\n")
    _upstream_checkout(fp, fp.root.parent / "upstream-for-hunks")
    return fp


def _upstream_checkout(fp, tmp_path, text=UPSTREAM_TEST):
    """A 'PyTorch checkout' holding upstream's test file, and beta's hunk to it in hooks/ (made the documented way:
    edit the file in a checkout, ``git diff``)."""
    co = tmp_path / "pytorch"
    shutil.rmtree(co, ignore_errors=True)
    (co / "test/inductor").mkdir(parents=True)
    (co / "test/inductor/test_upstream_beta.py").write_text(text)
    git(co, "init", "-q")
    git(co, "add", ".")
    git(co, "commit", "-qm", "upstream")
    f = co / "test/inductor/test_upstream_beta.py"
    f.write_text(f.read_text().replace("stages(), 2)", "stages(), 3)"))
    (fp.root / "hooks/inductor-beta/upstream-tests.diff").write_text(git(co, "diff"))
    git(co, "checkout", "-q", ".")
    return co


def _am_onto_checkout(fp, co, patch, tmp_path):
    """``git am`` of an exported .patch onto the base plus the checkout's test files (a PyTorch checkout at the
    base); the resulting tree's changed files."""
    work = tmp_path / "am"
    git(tmp_path, "clone", "-q", str(fp.base_tree("2.13.0")), str(work))
    shutil.copytree(co / "test", work / "test", dirs_exist_ok=True)
    git(work, "add", "test")
    git(work, "commit", "-qm", "upstream tests")
    git(work, "am", "-q", "--keep", str(patch))
    return git(work, "diff", "--name-only", "HEAD~1", "HEAD").split(), work


def test_export_pr_branches_commit_and_pr_md(fake_generated, tmp_path, capsys):
    fp = _with_readme(fake_generated)
    out = _export(fp, out=tmp_path / "out")
    repo = out / "repo"
    pristine = git(fp.base_tree("2.13.0"), "rev-parse", "HEAD").strip()
    for name in ("inductor-alpha", "inductor-beta"):
        assert (out / name / "PR.md").is_file() and (out / name / f"{name}.patch").is_file()
    # alpha: one commit, alone on the pristine base
    assert git(repo, "rev-parse", "inductor-alpha~1").strip() == pristine
    # beta changes an upstream test, whose file the base lacks: no branch, its .patch carries the hunk
    assert git(repo, "branch", "--list", "inductor-beta") == ""
    err = capsys.readouterr().err
    assert "no branch for inductor-beta (its upstream test hunks need upstream's test files: --upstream-checkout)" in err
    changed, work = _am_onto_checkout(fp, fp.root.parent / "upstream-for-hunks" / "pytorch", out / "inductor-beta/inductor-beta.patch", tmp_path)
    assert changed == ["test/inductor/test_beta.py", "test/inductor/test_upstream_beta.py", "torch/_inductor/config.py",
                       "torch/_inductor/fx_passes/beta.py", "torch/_inductor/fx_passes/post_grad.py"]
    assert "stages(), 3)" in (work / "test/inductor/test_upstream_beta.py").read_text()
    # gamma is fork-only: not proposed
    assert not (out / "inductor-gamma").exists()
    # the commit message is the PR's: subject, summary, test plan; not the fork's body or trailers
    msg = git(work, "log", "-1", "--format=%B")
    assert msg.startswith("[inductor] Add the beta pass\n\nBeta makes stage_20 do what its callers expect.\n\nTest Plan:\n"
                          "python test/inductor/test_beta.py\n")
    assert "reasons that are explained here" not in msg and "Upstream-Status" not in msg
    pr = (out / "inductor-alpha" / "PR.md").read_text()
    assert pr.startswith("# [inductor] Add the alpha pass\n\n## Summary\n\nAlpha rewrites what stock Inductor leaves alone.\n")
    assert "## Test Plan\n\n```\npython test/inductor/test_alpha.py\n```" in pr
    # the headline table chosen by name, without its Command: paragraph
    measured = pr.split("## Measured\n", 1)[1]
    assert "Machine: a test box." in measured and "| x | 10 | 8 |" in measured
    assert "Command:" not in pr and "results/alpha.json" not in pr and "not this" not in pr
    beta = (out / "inductor-beta" / "PR.md").read_text()
    # the upstream expectation it changes has its own section after the summary (not counted in it)
    summary, rest = beta.split("## Upstream test changes\n", 1)
    assert "## Summary" in summary and "test_upstream_beta" not in summary
    assert "- `test/inductor/test_upstream_beta.py` `TestBeta.test_count`: Expected 2 stages. Beta adds one." in rest
    assert "not in this PR" not in beta
    assert "inductor-beta: the headline section 'beta: fused vs stock' of README.md has no table yet" in err
    assert git(repo, "status", "--porcelain") == ""
    assert not git(repo, "remote").strip()


def test_export_pr_refuses_a_test_change_without_its_hunk(fake_generated, tmp_path):
    fp = _with_readme(fake_generated)
    (fp.root / "hooks/inductor-beta/upstream-tests.diff").unlink()
    with pytest.raises(PatchsetError, match=r"test-change\]\] of inductor-beta \(test/inductor/test_upstream_beta.py, "
                                            r"TestBeta.test_count\): no hunk for .* make it from upstream's file"):
        _export(fp, out=tmp_path / "out", names=["inductor-beta"])
    assert not (tmp_path / "out").exists()
    # alpha changes no upstream test: it exports
    _export(fp, out=tmp_path / "out", names=["inductor-alpha"])


def test_export_pr_refuses_fork_wording_in_an_upstream_test_hunk(fake_generated, tmp_path):
    fp = _with_readme(fake_generated)
    diff = fp.root / "hooks/inductor-beta/upstream-tests.diff"
    diff.write_text(diff.read_text().replace("+        self.assertEqual(stages(), 3)",
                                             "+        self.assertEqual(stages(), 3)  # the seed PR's count"))
    with pytest.raises(PatchsetError, match=r"inductor-beta: test/inductor/test_upstream_beta.py:6: fork-internal wording 'seed PR'"):
        _export(fp, out=tmp_path / "out", names=["inductor-beta"])


def test_export_pr_upstream_checkout_adds_the_test_hunk(fake_generated, tmp_path):
    fp = _with_readme(fake_generated)
    co = _upstream_checkout(fp, tmp_path)
    out = _export(fp, out=tmp_path / "out", upstream_checkout=co)
    repo = out / "repo"
    pristine = git(fp.base_tree("2.13.0"), "rev-parse", "HEAD").strip()
    # the branches' parent is the base plus upstream's version of the test file
    parent = git(repo, "rev-parse", "inductor-beta~1").strip()
    assert git(repo, "rev-parse", f"{parent}~1").strip() == pristine
    assert git(repo, "show", f"{parent}:test/inductor/test_upstream_beta.py") == UPSTREAM_TEST
    diff = git(repo, "diff", parent, "inductor-beta", "--", "test/inductor/test_upstream_beta.py")
    assert "-        self.assertEqual(stages(), 2)\n+        self.assertEqual(stages(), 3)" in diff
    assert "test_upstream_beta.py" in (out / "inductor-beta" / "inductor-beta.patch").read_text()
    assert "## Upstream test changes" in (out / "inductor-beta" / "PR.md").read_text()
    # alpha changes no upstream test: its commit holds its own files only
    assert "test_upstream_beta" not in git(repo, "diff", "--name-only", parent, "inductor-alpha")


def test_export_pr_upstream_checkout_errors(fake_generated, tmp_path):
    fp = _with_readme(fake_generated)
    co = _upstream_checkout(fp, tmp_path)
    (co / "test/inductor/test_upstream_beta.py").unlink()
    with pytest.raises(PatchsetError, match=r"test_upstream_beta.py: missing: --upstream-checkout .* is not a PyTorch"):
        _export(fp, out=tmp_path / "o1", upstream_checkout=co)
    (co / "test/inductor/test_upstream_beta.py").write_text(UPSTREAM_TEST.replace("stages(), 2)", "other(), 2)"))
    with pytest.raises(PatchsetError, match=r"upstream-tests.diff: does not apply to the test files of"):
        _export(fp, out=tmp_path / "o2", upstream_checkout=co)
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()


def test_export_pr_refuses_text_a_reviewer_cannot_follow(fake_generated, tmp_path):
    """Fork-only paths, older releases and fork wording in PR.md, the commit message or code: nothing is written."""
    fp = _with_readme(fake_generated)
    toml = fp.toml().replace("Alpha rewrites what stock Inductor leaves alone.",
                             "Alpha rewrites it (see benchmarks/README.md; the alpha_bench.py harness).")
    fp.set_toml(toml)
    overlay = fp.root / "torch_overlay/torch/_inductor/fx_passes/alpha.py"
    overlay.write_text(overlay.read_text() + "# on 2.11 this is the backport path\n")
    from tools.tests.conftest import generate_fake

    generate_fake(fp)
    with pytest.raises(PatchsetError) as e:
        _export(fp, out=tmp_path / "out")
    msg = str(e.value)
    assert "inductor-alpha/PR.md:5: `benchmarks/README.md` exists only in this repo" in msg
    assert "inductor-alpha/PR.md:5: `alpha_bench.py` is a file of this repo only" in msg
    assert "inductor-alpha: commit message:3: `benchmarks/README.md`" in msg
    assert "inductor-alpha: torch/_inductor/fx_passes/alpha.py:3: names torch 2.11, older than" in msg
    assert "torch/_inductor/fx_passes/alpha.py:3: fork-internal wording 'backport'" in msg
    assert "nothing was written" in msg and not (tmp_path / "out").exists()


def test_export_pr_requires_the_upstream_fields(fake_generated, tmp_path):
    fp = _with_readme(fake_generated)
    fp.set_toml(fp.toml().replace('headline = "alpha: fused vs stock"\n', ""))
    with pytest.raises(PatchsetError, match=r"'inductor-alpha'.*lacks headline"):
        _export(fp, out=tmp_path / "o1")
    fp.set_toml(fp.toml().replace('[patch.upstream]\ntest-plan = ["python test/inductor/test_alpha.py"]',
                                  '[patch.upstream]\nheadline = "no such heading"\ntest-plan = ["python test/inductor/test_alpha.py"]'))
    with pytest.raises(PatchsetError, match=r"README.md: no heading 'no such heading'"):
        _export(fp, out=tmp_path / "o2")


def test_summary_word_limit(fake_patchset):
    fp = fake_patchset
    fp.set_toml(fp.toml().replace("Alpha rewrites what stock Inductor leaves alone.", "word " * 301))
    with pytest.raises(PatchsetError, match="summary has 301 words; a reviewer gets at most 300"):
        fp.sources.load()


def test_export_pr_one_patch_and_rerun(fake_generated, tmp_path):
    fp = _with_readme(fake_generated)
    out = _export(fp, out=tmp_path / "out", names=["inductor-beta"])
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "inductor-beta", "repo"]
    out2 = _export(fp, out=tmp_path / "out", base="2.11.0", names=["inductor-alpha"])
    assert out2 == out and sorted(p.name for p in out.iterdir()) == [MARKER, "inductor-alpha", "repo"]


def test_export_pr_errors(fake_generated, tmp_path):
    fp = _with_readme(fake_generated)
    with pytest.raises(PatchsetError, match="no upstreamable patch of that name in the 2.13.0 series"):
        _export(fp, out=tmp_path / "o1", names=["inductor-gamma"])
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("precious")
    with pytest.raises(PatchsetError, match="not made by export-pr"):
        _export(fp, out=foreign)
    assert [p.name for p in foreign.iterdir()] == ["keep.txt"]
    (fp.patches_dir / "v2.13.0" / "inductor-beta.patch").unlink()
    with pytest.raises(PatchsetError, match="python -m tools generate --base 2.13.0"):
        _export(fp, out=tmp_path / "o2")
    assert not (tmp_path / "o2").exists()


def test_export_pr_for_another_repository(fake_generated, tmp_path):
    """A patch whose PR goes to another repository (gamma, made upstreamable for pytorch/ao): no branch on torch,
    its files at their paths there with their module names and relative imports rewritten."""
    fp = _with_readme(fake_generated)
    (fp.root / "torch_overlay/torch/_inductor/gamma.py").write_text("from . import config\nfrom .fx_passes.alpha import alpha_pass\n")
    (fp.root / "test/inductor/test_gamma.py").write_text("from torch._inductor import gamma\nfrom torch._inductor.gamma import GAMMA\n")
    toml = fp.toml().replace('category = "fork-only"\nupstream-status = "Inappropriate [fork-only test scaffolding]"',
                             'category = "upstreamable"\nupstream-status = "Pending"')
    # the dependency is named by its PR's title where that is not its subject
    toml = toml.replace("[patch.upstream]\n", '[patch.upstream]\ntitle = "[inductor] Alpha, as titled upstream"\n', 1)
    toml += '''
[patch.upstream]
repo = "pytorch/ao"
depends-on = ["inductor-alpha"]
headline = "alpha: fused vs stock"
test-plan = ["python test/prototype/test_gamma.py"]
paths = {"torch/_inductor/gamma.py" = "torchao/prototype/gamma.py", "test/inductor/test_gamma.py" = "test/prototype/test_gamma.py"}
modules = {"torch._inductor.gamma" = "torchao.prototype.gamma"}
summary = """
Gamma, for torchao.
"""
'''
    fp.set_toml(toml)
    from tools.tests.conftest import generate_fake

    generate_fake(fp)
    out = _export(fp, out=tmp_path / "out", names=["inductor-gamma"])
    d = out / "inductor-gamma"
    assert (d / "files/torchao/prototype/gamma.py").read_text() == (
        "from torch._inductor import config\nfrom torch._inductor.fx_passes.alpha import alpha_pass\n")
    assert (d / "files/test/prototype/test_gamma.py").read_text() == (
        "from torchao.prototype import gamma\nfrom torchao.prototype.gamma import GAMMA\n")
    pr = (d / "PR.md").read_text()
    assert 'Depends on the pytorch/pytorch PR "[inductor] Alpha, as titled upstream".' in pr
    assert "For pytorch/ao:\n\n- `test/prototype/test_gamma.py`: test\n- `torchao/prototype/gamma.py`: module\n" in pr
    assert git(out / "repo", "branch", "--list", "inductor-gamma") == ""
    # nothing else in the exported tree (no .ruff_cache of the import sorting)
    assert sorted(f.relative_to(d / "files").as_posix() for f in (d / "files").rglob("*") if not f.is_dir()) == [
        "test/prototype/test_gamma.py", "torchao/prototype/gamma.py"]


def test_rewrite_for_repo():
    text = "from .. import config\nfrom ..custom_pass_registry import register\nfrom .sibling import x\nimport os\n"
    got = rewrite_for_repo(text, "torch/_inductor/fx_passes/mod.py", ())
    assert got == ("from torch._inductor import config\nfrom torch._inductor.custom_pass_registry import register\n"
                   "from torch._inductor.fx_passes.sibling import x\nimport os\n")
    mods = (("torch._inductor.fx_passes.mod", "torchao.p.fx_passes.mod_cpu"), ("test_mod", "test_mod_cpu"))
    t = ("from torch._inductor.fx_passes import mod as m\nlogger = 'torch._inductor.fx_passes.mod'\n"
         "from .test_mod import helper\nfrom test_mod import helper\nimport test_mod_fuzz\n")
    assert rewrite_for_repo(t, "test/inductor/test_mod_fuzz.py", mods) == (
        "from torchao.p.fx_passes import mod_cpu as m\nlogger = 'torchao.p.fx_passes.mod_cpu'\n"
        "from .test_mod_cpu import helper\nfrom test_mod_cpu import helper\nimport test_mod_fuzz\n")


def test_pasteability_findings(tmp_path):
    (tmp_path / "benchmarks/results").mkdir(parents=True)
    (tmp_path / "benchmarks/results/run.json").write_text("{}")
    (tmp_path / "benchmarks/sweep_gpu.py").write_text("")
    (tmp_path / "torch_overlay/torch/_inductor").mkdir(parents=True)
    (tmp_path / "torch_overlay/torch/_inductor/mod.py").write_text("")
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples/mod.py").write_text("")  # shares the module's name: a mention means the module
    # a hidden folder is local scratch (a checkout of another project, wheels, a venv), not the fork's, but CI's is
    (tmp_path / ".scratch/src").mkdir(parents=True)
    (tmp_path / ".scratch/src/dispatch.cpp").write_text("")
    (tmp_path / ".ci").mkdir()
    (tmp_path / ".ci/run_ci.sh").write_text("")
    fork = ForkPaths.of(tmp_path)
    assert "dispatch.cpp" not in fork.names and "run_ci.sh" in fork.names
    old = older_releases_re(("2.11.0", "2.13.0", "2.15.0"), "2.15.0")
    lines = [(1, "raw data: benchmarks/results/run.json."), (2, "run sweep_gpu.py"), (3, "see mod.py and torch/_inductor/mod.py"),
             (4, "on 2.13+ and 2.11.0"), (5, "version 2.15 and 12.11.3 and 2.110"), (6, "our fork's patch set"),
             (7, "the seed PR's contract (ROCm/pytorch#3233)"), (8, "from a kernel built next to these patches"),
             (9, "a plain PyTorch checkout"), (10, "see pytorch/pytorch#184911; a plain torch.cat")]
    got = pasteability_findings("x", lines, fork, old)
    assert any(f.startswith("x:1: `benchmarks/results/run.json` exists only") for f in got)
    assert any(f.startswith("x:2: `sweep_gpu.py` is a file of this repo only") for f in got)
    assert not any(f.startswith(("x:3:", "x:5:")) for f in got), got
    assert any(f.startswith("x:4: names torch 2.13") for f in got)
    assert any(f.startswith("x:6: fork-internal wording") for f in got)
    assert [f.split(": ", 2)[1] for f in got if f.startswith(("x:7:", "x:8:", "x:9:", "x:10:"))] == [
        "fork-internal wording 'seed PR'", "fork-internal wording 'ROCm/pytorch#3233'",
        "fork-internal wording 'these patches'", "fork-internal wording 'plain PyTorch'"]


def test_unwrap():
    from tools.prmd import unwrap

    text = "A wrapped\nparagraph.\n\n- item one\n  goes on\n- item two\n\nLast.\n| a |\n|---|\n| 1 |\n\n```\nx\ny\n```"
    assert unwrap(text) == "A wrapped paragraph.\n\n- item one goes on\n- item two\n\nLast.\n| a |\n|---|\n| 1 |\n\n```\nx\ny\n```"


def test_added_lines_and_named_section(tmp_path):
    diff = "+++ b/a.py\n@@ -1,2 +1,3 @@\n ctx\n+new\n ctx2\n@@ -10 +11,2 @@\n-old\n+x\n+y\n"
    assert added_lines(diff) == {"a.py": [(2, "new"), (11, "x"), (12, "y")]}
    readme = tmp_path / "R.md"
    readme.write_text("# T\n\n## A: b\n\ntext\n\n```\n## not a heading\n```\n\n### sub\nmore\n\n## C\nno\n")
    assert named_section(readme, "A: b") == ["text", "", "```", "## not a heading", "```", "", "### sub", "more"]
    assert named_section(readme, "A") is None


def test_upstream_tests_diff_is_not_an_orphan_hook(fake_generated, tmp_path):
    from tools.sources import orphan_hook_files

    fp = _with_readme(fake_generated)
    _upstream_checkout(fp, tmp_path)
    assert orphan_hook_files(fp.sources.load(), fp.sources) == []
    shutil.copy(fp.root / "hooks/inductor-beta/upstream-tests.diff", fp.root / "hooks/inductor-beta/stray.diff")
    assert [f.name for f, _ in orphan_hook_files(fp.sources.load(), fp.sources)] == ["stray.diff"]


def test_real_headlines_results_and_scripts():
    """Every real patch names its results section and every upstreamable one its headline table (a fork-only patch
    proposes no PR), both headings of benchmarks/README.md;
    the README stays short and every script it or the history cites exists (the history may cite a script
    it says was removed, naming the commit)."""
    from tools.common import PATCHSET_TOML, REPO_ROOT, load_patchset

    readme = REPO_ROOT / "benchmarks" / "README.md"
    for p in load_patchset(PATCHSET_TOML).patches:
        if p.category == "upstreamable":
            assert p.upstream and named_section(readme, p.upstream.headline) is not None, p.name
        assert named_section(readme, p.results) is not None, p.name
        for f in (*p.examples, *p.benchmarks, *p.docs):
            assert (REPO_ROOT / f).is_file(), f"{p.name}: {f}"
    assert len(readme.read_text().splitlines()) < 400
    history = REPO_ROOT / "benchmarks/results/history.md"
    for doc in (readme, history, REPO_ROOT / "benchmarks/results/da8w4_kernel.md"):
        text = doc.read_text()
        for script in set(re.findall(r"[\w/.-]*\b[\w-]+\.(?:py|sh)\b", text)):
            name = script.split("/")[-1]
            if name.startswith("test_") or "/" in script.removeprefix("benchmarks/"):
                continue
            removed = doc == history and re.search(rf"{re.escape(name)}` \(removed in [0-9a-f]{{7,40}}\b", text)
            assert removed or (REPO_ROOT / "benchmarks" / name).is_file(), f"{doc.name} cites {script}"


def test_check_holds_the_map_and_the_upstream_tests(fake_generated, tmp_path):
    from tools.tests.conftest import check_fake

    fp = _with_readme(fake_generated)
    _upstream_checkout(fp, tmp_path)
    probs, _ = check_fake(fp)
    assert probs == []
    fp.set_toml(fp.toml().replace('tests = ["test/inductor/test_alpha.py"]',
                                  'tests = ["test/inductor/test_alpha.py"]\nexamples = ["examples/alpha.py"]\nresults = "alpha results"'))
    fp.set_toml(fp.toml().replace('file = "test/inductor/test_upstream_beta.py"', 'file = "test/inductor/test_other.py"'))
    warnings = []
    from tools.check import check_map_and_upstream

    got = [str(p) for p in check_map_and_upstream(fp.sources.load(), fp.sources, warn=warnings.append)]
    assert any("no heading 'alpha results' (results of inductor-alpha)" in p for p in got), got
    assert any("changes test/inductor/test_upstream_beta.py but no [[patch.upstream.test-change]]" in p for p in got), got
    assert any("no hunk stored for its change to test/inductor/test_other.py" in w for w in warnings), warnings


def test_find_ruff(tmp_path, monkeypatch):
    """ruff from the running Python, else the project's .venv, else PATH."""
    import importlib.util
    import sys

    from tools.export_pr import find_ruff

    assert find_ruff(tmp_path) == [sys.executable, "-m", "ruff"]  # requirements-dev.txt installs it here
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert find_ruff(tmp_path) is None
    on_path = tmp_path / "bin" / "ruff"
    on_path.parent.mkdir()
    on_path.write_text("#!/bin/sh\n")
    on_path.chmod(0o755)
    assert find_ruff(tmp_path) == [str(on_path)]
    venv = tmp_path / ".venv" / "bin" / "ruff"
    venv.parent.mkdir(parents=True)
    venv.write_text("#!/bin/sh\n")
    venv.chmod(0o755)
    assert find_ruff(tmp_path) == [str(venv)]


def test_placeholder_author_is_named():
    """An author address in a reserved domain (RFC 2606) is a placeholder: export-pr warns when git config gives one."""
    from tools.export_pr import placeholder_author

    assert placeholder_author(("A", "maintainers@users.noreply.a-seed-8f783bcf.example"))
    assert placeholder_author(("Jane Doe", "jane@example.com"))
    assert not placeholder_author(("Jane Doe", "jane@pytorch.org"))
    assert not placeholder_author(("Jane Doe", "jane@examples.dev"))


def _fresh_machine(fake_generated, tmp_path, monkeypatch):
    """The fake patch set with gamma proposed as two PRs (its first a diff to fakeao 1.0), on a machine with neither
    a pristine base nor fakeao (installed or cached): an empty cache."""
    from tools import bases as bases_mod
    from tools.tests.test_export_pr_split import _split_patchset

    fp = _split_patchset(fake_generated, tmp_path)
    fp.cache = tmp_path / "fresh-cache"
    monkeypatch.setattr(bases_mod, "CACHE_DIR", fp.cache)  # for the CLI, which takes the default cache
    return fp


def test_export_pr_on_a_fresh_machine_names_every_missing_step_at_once(fake_generated, tmp_path, monkeypatch, capsys):
    """Issue 39 item 4: where fetching fails (no network), one error names both missing steps, each with its
    command; nothing is written. With --no-fetch nothing is downloaded and the same two are named."""
    from tools import bases as bases_mod
    from tools.cli import main

    fp = _fresh_machine(fake_generated, tmp_path, monkeypatch)
    tried = []

    def offline(project, version, wdir):
        tried.append(f"{project}=={version}")
        raise PatchsetError(f"{project}=={version}", "`pip download ...` failed with exit code 1 (see pip's output above)")

    monkeypatch.setattr(bases_mod, "download_wheel", offline)
    with pytest.raises(PatchsetError) as e:
        _export(fp, out=tmp_path / "out")
    msg = str(e.value)
    assert tried == ["torch==2.13.0", "fakeao==1.0"]
    assert "2 thing(s) it needs are missing, so nothing was written" in msg
    assert ": python -m tools bases --base 2.13.0\n" in msg
    assert f"-m pip download --no-deps --only-binary=:all: fakeao==1.0 -d {fp.cache / 'wheels'}" in msg
    assert not (tmp_path / "out").exists()

    tried.clear()
    capsys.readouterr()
    rc = main(["export-pr", "--no-fetch", "--repo-root", str(fp.root), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and tried == []
    assert "run each command below, or export-pr without --no-fetch" in err
    assert f"the pristine tree of torch 2.13.0 (no {fp.cache / 'bases/v2.13.0'}): python -m tools bases --base 2.13.0" in err
    assert "fakeao 1.0's files, for the diffs of inductor-gamma's PRs (fakeao is not installed here" in err
    assert not (tmp_path / "out").exists()


def test_export_pr_on_a_fresh_machine_fetches_what_it_needs(fake_generated, fake_cache, tmp_path, monkeypatch, capsys):
    """Allowed to fetch (the default): the pristine base is built as `tools bases` builds it and fakeao's wheel is
    downloaded into the cache (nothing installed), one line each; a second export downloads nothing."""
    from tools import bases as bases_mod
    from tools.tests.conftest import make_wheel
    from tools.tests.test_export_pr_split import PKG_FILE, fakeao_wheel

    fp = _fresh_machine(fake_generated, tmp_path, monkeypatch)
    fetched = []

    def download(project, version, wdir):
        fetched.append((project, version, wdir))
        if project == "torch":
            return make_wheel(wdir / f"torch-{version}+cpu-py3-none-any.whl", f"{version}+cpu")
        return fakeao_wheel(wdir, version)

    monkeypatch.setattr(bases_mod, "download_wheel", download)
    out = _export(fp, out=tmp_path / "out")
    wheels = fp.cache / "wheels"
    assert fetched == [("torch", "2.13.0", wheels), ("fakeao", "1.0", wheels)]
    err = capsys.readouterr().err
    assert "export-pr: no pristine tree for torch 2.13.0 yet; building it as `python -m tools bases --base 2.13.0` does" in err
    assert f"export-pr: downloading fakeao==1.0 into {wheels} (pip download --no-deps;" in err
    # the same base as the one patches/ was generated on, and the first PR made from the downloaded release's files
    tree = "HEAD^{tree}"
    assert git(fp.base_tree("2.13.0"), "rev-parse", tree) == git(bases_mod.base_tree("2.13.0", fake_cache), "rev-parse", tree)
    assert (out / "gamma-registry-client/files" / PKG_FILE).read_text() == "def register():\n    registry.add(run)\n"
    assert (out / "inductor-alpha/PR.md").is_file()
    _export(fp, out=tmp_path / "out")
    assert len(fetched) == 2
