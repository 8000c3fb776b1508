"""export-pr on the fake patch set."""

from __future__ import annotations

import pytest

from tools.common import PatchsetError
from tools.export_pr import MARKER, benchmark_section, export_prs
from tools.tests.conftest import git


def _export(fp, **kw):
    return export_prs(fp.sources, cache_dir=fp.cache, **kw)


def test_export_pr_branches_and_pr_md(fake_generated, tmp_path):
    fp = fake_generated
    (fp.root / "benchmarks").mkdir()
    (fp.root / "benchmarks/README.md").write_text(
        "# Benchmarks\n\n## inductor-beta\n\n| case | stock | patched |\n|---|---|---|\n| x | 10 | 8 |\n\n## other\nnot this\n"
    )
    out = _export(fp, out=tmp_path / "out")
    repo = out / "repo"
    pristine = git(fp.base_tree("2.13.0"), "rev-parse", "HEAD").strip()
    for name in ("inductor-alpha", "inductor-beta", "inductor-gamma"):
        # one commit, alone on the pristine base
        assert git(repo, "rev-parse", f"{name}~1").strip() == pristine
        assert (out / name / "PR.md").is_file() and (out / name / f"{name}.patch").is_file()
    # beta alone: its files only, none of alpha's
    changed = git(repo, "diff", "--name-only", pristine, "inductor-beta").split()
    assert changed == ["test/inductor/test_beta.py", "torch/_inductor/config.py", "torch/_inductor/fx_passes/beta.py", "torch/_inductor/fx_passes/post_grad.py"]
    msg = git(repo, "log", "-1", "--format=%B", "inductor-beta")
    assert msg.startswith("[inductor] Add the beta pass\n\nBeta exists because")
    for trailer in ("Category:", "Upstream-Status:", "Affects:", "Tested-On:", "Overlay:", "Test:", "Last-Update:"):
        assert trailer not in msg
    assert "Upstream-Status" not in (out / "inductor-beta" / "inductor-beta.patch").read_text()
    pr = (out / "inductor-beta" / "PR.md").read_text()
    assert pr.startswith("# [inductor] Add the beta pass\n")
    assert "## Summary\n\nBeta exists because" in pr
    assert "```\npython test/inductor/test_beta.py\n```" in pr
    assert "| x | 10 | 8 |" in pr and "not this" not in pr
    assert "`torch/_inductor/fx_passes/beta.py` (new, +2 -0)" in pr
    assert "None yet" in (out / "inductor-alpha" / "PR.md").read_text()
    # the branch tree is exactly the pristine tree plus the committed patch
    assert git(repo, "status", "--porcelain") == ""
    assert not git(repo, "remote").strip()  # no remote pointing into the cache


def test_export_pr_one_patch_and_rerun(fake_generated, tmp_path):
    fp = fake_generated
    out = _export(fp, out=tmp_path / "out", names=["inductor-gamma"])
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "inductor-gamma", "repo"]
    out2 = _export(fp, out=tmp_path / "out", base="2.11.0", names=["inductor-alpha"])
    assert out2 == out and sorted(p.name for p in out.iterdir()) == [MARKER, "inductor-alpha", "repo"]
    assert "Affects" not in git(out / "repo", "log", "-1", "--format=%B", "inductor-alpha")


def test_export_pr_errors(fake_generated, tmp_path):
    fp = fake_generated
    with pytest.raises(PatchsetError, match="no such patch in the 2.11.0 series"):
        _export(fp, out=tmp_path / "o1", base="2.11.0", names=["inductor-gamma"])
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


def test_benchmark_section_matches_overlay_module(fake_patchset, tmp_path):
    from tools.common import load_patchset

    ps = load_patchset(fake_patchset.root / "patchset.toml")
    alpha = ps.patches[0]
    readme = tmp_path / "README.md"
    readme.write_text("# B\n\n```\n## alpha inside code is not a heading\n```\n\n### Alpha pass (CPU)\nrow\n#### detail\nmore\n## Next\nno\n")
    assert benchmark_section(readme, alpha) == "row\n#### detail\nmore"
    assert benchmark_section(tmp_path / "missing.md", alpha) is None


@pytest.mark.parametrize(
    "heading",
    ["## alpha", "## fx_passes alpha", "### The `alpha` pass (CPU)", "## inductor_alpha", "## Inductor Alpha: results"],
)
def test_benchmark_section_any_spelling(fake_patchset, tmp_path, heading):
    from tools.common import load_patchset

    alpha = load_patchset(fake_patchset.root / "patchset.toml").patches[0]
    readme = tmp_path / "README.md"
    readme.write_text(f"# B\n\n## alphabet soup\nnot this\n\n{heading}\nthe rows\n\n## beta\nno\n")
    assert benchmark_section(readme, alpha) == "the rows"


def test_benchmark_section_word_boundaries(tmp_path):
    """A patch name is matched as whole words: 'cat-linear' must not pick the 'concat-linear' section."""
    from tools.common import PatchMeta

    p = PatchMeta("inductor-cat-linear", "s", "upstreamable", "Pending", ("2.13.0",), (), ("t.py",), "2026-01-01", "b")
    readme = tmp_path / "README.md"
    readme.write_text("## da8w4 concat-linear\nwrong\n\n## cat_linear\nright\n")
    assert benchmark_section(readme, p) == "right"


def test_real_readme_has_a_section_per_patch():
    """What issue #11 found: every real patch's PR.md gets its own measured results from benchmarks/README.md."""
    from tools.common import PATCHSET_TOML, REPO_ROOT, load_patchset

    readme = REPO_ROOT / "benchmarks" / "README.md"
    sections = {}
    for p in load_patchset(PATCHSET_TOML).patches:
        sections[p.name] = benchmark_section(readme, p)
        assert sections[p.name], f"{p.name}: no section in {readme}"
    assert len(set(sections.values())) == len(sections), "two patches picked the same section"
