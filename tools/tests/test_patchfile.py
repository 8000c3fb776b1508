"""The patch format (tools.patchfile), the series record of its sources, and what export-pr writes for people."""

from __future__ import annotations

import pytest

from tools.common import REPO_ROOT, PatchsetError
from tools.patchfile import parse_header, parse_patch
from tools.seriesfile import load_series, recorded_sources_digest
from tools.sources import fresh_series_dir, sources_digest
from tools.tests.conftest import git


def test_wrapped_subject_is_unfolded():
    data = (b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
            b"From: a <a@b.c>\nSubject: [inductor] a subject long enough that git format-patch\n"
            b" wraps it onto a second line\n\nWhy.\n\nUpstream-Status: Submitted https://github.com/pytorch/pytorch/pull/1\n"
            b"---\ndiff --git a/x b/x\n")
    h = parse_header(data)
    assert h.subject == "[inductor] a subject long enough that git format-patch wraps it onto a second line"
    assert h.body == "Why." and h.submitted_url == "https://github.com/pytorch/pytorch/pull/1"


def test_generated_patch_parts(fake_generated):
    patches = load_series(fake_generated.patches_dir / "v2.13.0")
    beta = next(p for p in patches if p.name == "inductor-beta")
    assert beta.header.subject.startswith("[inductor] ") and ("Category", "upstreamable") in beta.header.trailers
    added = {f.path for f in beta.files if f.kind == "add"}
    assert set(beta.new_files) == added and all(len(b) == 40 for b in beta.new_files.values())
    modified = [f for f in beta.files if f.kind == "modify"]
    assert modified and all(f.old_blob and set(f.old_blob) != {"0"} and f.hunks for f in modified)


def test_bad_diff_is_named(tmp_path):
    p = tmp_path / "x.patch"
    p.write_text("diff --git a/a b/b\nrename from a\n")
    with pytest.raises(PatchsetError, match="x.patch: unsupported diff header"):
        parse_patch(p)


def test_stale_series_is_refused_with_the_command(fake_generated):
    """Issue #16: an overlay/hook/test/patchset.toml edit without `generate` makes install and wheel refuse."""
    fp = fake_generated
    meta = fp.root / "patchset.toml"
    ps = fp.sources.load()
    assert recorded_sources_digest(fp.patches_dir / "v2.13.0") == sources_digest(ps, fp.sources, "2.13.0")
    assert fresh_series_dir(fp.patches_dir, "2.13.0", meta) == fp.patches_dir / "v2.13.0"
    overlay = fp.root / "torch_overlay" / ps.patches[0].overlay[0]
    overlay.write_text(overlay.read_text() + "# edited\n")
    with pytest.raises(PatchsetError, match=r"v2.13.0/series: out of date: .* run `python -m tools generate`"):
        fresh_series_dir(fp.patches_dir, "2.13.0", meta)


@pytest.mark.slow
def test_real_pr_md_is_pasteable(tmp_path):
    """Each real PR: export-pr refuses a PR with fork-only paths, older releases or fork wording, so exporting them
    all proves that; each PR.md has the title, a summary of at most 300 words, the test plan and Measured."""
    from tools.bases import base_tree
    from tools.common import load_patchset, version_key
    from tools.export_pr import export_prs
    from tools.prmd import unwrap
    from tools.sources import Sources

    newest = max(load_patchset().bases, key=version_key)
    if not (base_tree(newest) / ".git").exists():
        pytest.skip(f"no pristine {newest} tree cached")
    out = export_prs(Sources(), out=tmp_path / "prs", author=("Jane Doe", "jane@example.com"))
    for p in load_patchset().series(newest):
        if p.category != "upstreamable":
            continue
        for dp in p.upstream.diff_prs:
            text = (out / dp.name / "PR.md").read_text()
            assert text.startswith(f"# {dp.title}\n\n## Summary\n\n{unwrap(dp.summary)}\n"), dp.name
            assert len(dp.summary.split()) <= 300 and "## Measured\n" in text, dp.name
        if not p.upstream.own_pr:
            assert not (out / p.name).exists(), p.name  # its own files stay in the fork
            continue
        text = (out / p.name / "PR.md").read_text()
        title = p.upstream.title or p.subject
        assert text.startswith(f"# {title}\n\n## Summary\n\n{unwrap(p.upstream.summary)}\n"), p.name
        assert len(p.upstream.summary.split()) <= 300 and title.startswith(("[inductor] ", "[cpu] "))
        assert "## Test Plan\n\n```\n" + "\n".join(p.upstream.test_plan) + "\n```" in text, p.name
        assert "## Measured\n" in text, p.name
        if p.upstream.repo == "pytorch/pytorch":
            # a patch with upstream test hunks has its .patch only (no branch without upstream's test files)
            patch = (out / p.name / f"{p.name}.patch").read_text()
            assert "\nFrom: Jane Doe <jane@example.com>\n" in patch, p.name
    assert (REPO_ROOT / "patches" / f"v{newest}").is_dir()
