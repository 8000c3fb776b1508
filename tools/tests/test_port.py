"""port: carry hook diffs to a new (fake) torch release by three-way merge."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools import bases as bases_mod
from tools.common import REPO_ROOT, PatchsetError
from tools.port import add_base_to_toml, port, source_candidates
from tools.port_cli import report
from tools.check import check
from tools.generate import generate
from tools.tests.conftest import (HOOK_EDITS, REAL_DOWNLOAD_WHEEL, FakePatchset, dir_bytes, fake_torch_files,
                                   make_hook_diff, make_wheel)

NEW = "2.14.0"


def _new_base(fp: FakePatchset, tmp_path: Path, edit) -> FakePatchset:
    """A cache of its own: the session's pristine 2.11.0/2.13.0 (linked, read only) plus a 2.14.0 wheel whose
    files are ``edit(fake_torch_files('2.14.0'))``. Returns the fake patch set pointed at it."""
    cache = tmp_path / "cache"
    (cache / "bases").mkdir(parents=True)
    for b in fp.bases:
        (cache / "bases" / f"v{b}").symlink_to(fp.base_tree(b))
    files = fake_torch_files(NEW)
    edit(files)
    make_wheel(cache / "wheels" / f"torch-{NEW}-py3-none-any.whl", NEW, files)
    return FakePatchset(fp.root, cache)


def _expected_hook(fp: FakePatchset, patch: str, tmp_path: Path) -> str:
    """The hook made the documented way (edit a clone of the new pristine tree, git diff)."""
    return make_hook_diff(bases_mod.base_tree(NEW, fp.cache), HOOK_EDITS[patch], tmp_path / "expected")


def _hook(fp: FakePatchset, patch: str, base: str = NEW) -> Path:  # the override of ``base``
    return fp.root / "hooks" / patch / f"v{base}.diff"


def _report(fp, res) -> str:
    import io

    buf = io.StringIO()
    report(res, fp.sources, out=buf)
    return buf.getvalue()


def test_nearest_base_is_lower_then_higher():
    assert source_candidates("2.14.1", ["2.11.0", "2.13.0", "2.15.0"]) == ["2.13.0", "2.15.0"]
    assert source_candidates("2.10.0", ["2.11.0", "2.13.0"]) == ["2.11.0"]
    assert source_candidates("2.16.0", ["2.11.0", "2.15.0", "2.13.0"]) == ["2.15.0"]
    assert source_candidates("2.13.0", ["2.11.0", "2.13.0", "2.9.1"]) == ["2.11.0"]  # version order, not text order


def _beta_context(files):
    """Upstream changed option_28: inside beta's config.py hunk context (so no beta hook applies as it is), far from
    alpha's."""
    files["torch/_inductor/config.py"] = files["torch/_inductor/config.py"].replace("option_28 = 28", "option_28 = 2828")


def test_clean_carry_writes_the_same_hooks_as_by_hand(fake_patchset, tmp_path):
    fp = _new_base(fake_patchset, tmp_path, _beta_context)
    toml = fp.toml()
    res = port(NEW, fp.sources, fp.cache)
    st = {p.patch: p.status for p in res.patches}
    # alpha's shared hook applies to 2.14.0 as it is: no override; beta's inherited v2.13.0 hook does not: it gets one
    assert st == {"inductor-alpha": "inherited", "inductor-beta": "wrote", "inductor-gamma": "no-hook"}
    assert not _hook(fp, "inductor-alpha").exists()
    assert sorted(f.name for f in (fp.root / "hooks/inductor-alpha").iterdir()) == ["hook.diff"]
    assert _hook(fp, "inductor-beta").read_text() == _expected_hook(fp, "inductor-beta", tmp_path)
    assert all(p.carry.source == "2.13.0" for p in res.patches if p.carry)
    assert res.needs_hand_work == [] and fp.toml() == toml  # no --write: toml untouched
    out = _report(fp, res)
    assert "offset +0" in out and f'add "{NEW}" to bases of [patchset], inductor-alpha, inductor-beta, inductor-gamma' in out and "python -m tools generate --base 2.14.0" in out
    assert ("inductor-alpha: carried from v2.13.0; hooks/inductor-alpha/hook.diff, the hook torch 2.14.0 inherits (the "
            "shared one), applies as it is (offsets only) and gives the same; no override written") in out
    assert "hooks/inductor-beta/v2.13.0.diff (the hook torch 2.14.0 inherits) does not apply to torch 2.14.0 as it is" in out


def test_a_neighbouring_override_serves_the_new_base(fake_patchset, tmp_path):
    """Beta has overrides only (v2.11.0, v2.13.0). An upstream change far from its hunks: 2.14.0 inherits the
    v2.13.0 override (the nearest one on its side of the primary base), no file is written, and the generated
    series is what an override made on 2.14.0 would give."""
    def edit(files):
        files["torch/_inductor/config.py"] = files["torch/_inductor/config.py"].replace("option_20 = 20", "option_20 = 2020")

    fp = _new_base(fake_patchset, tmp_path, edit)
    res = port(NEW, fp.sources, fp.cache, write=True)
    by = {p.patch: p for p in res.patches}
    assert by["inductor-beta"].status == "inherited" and by["inductor-beta"].hook_file == _hook(fp, "inductor-beta", "2.13.0")
    assert not _hook(fp, "inductor-beta").exists()
    assert "hooks/inductor-beta/v2.13.0.diff, the hook torch 2.14.0 inherits (a neighbouring base's override)" in _report(fp, res)
    generate(fp.sources, None, fp.cache, warn=lambda m: None)
    assert check(fp.sources, None, fp.cache) == []
    inherited = (fp.patches_dir / f"v{NEW}" / "inductor-beta.patch").read_bytes()
    _hook(fp, "inductor-beta").write_text(_expected_hook(fp, "inductor-beta", tmp_path))
    warnings: list = []
    generate(fp.sources, [NEW], fp.cache, warn=lambda m: None)
    assert (fp.patches_dir / f"v{NEW}" / "inductor-beta.patch").read_bytes() == inherited
    assert check(fp.sources, None, fp.cache, warn=warnings.append) == []
    assert warnings == [f"warning: hooks/inductor-beta/v{NEW}.diff: gives the same files as the hook its base(s) would "
                        f"use without it (on {NEW} as hooks/inductor-beta/v2.13.0.diff): the patches it makes are byte "
                        "for byte what they would be without it; delete it"]


def test_shared_hook_that_does_not_apply_as_it_is_gets_an_override(fake_patchset, tmp_path):
    def edit(files):  # upstream changed option_3: inside alpha's context (so hook.diff no longer applies), not next to its line
        files["torch/_inductor/config.py"] = files["torch/_inductor/config.py"].replace("option_3 = 3", "option_3 = 33")

    fp = _new_base(fake_patchset, tmp_path, edit)
    res = port(NEW, fp.sources, fp.cache, write=True)
    by = {p.patch: p for p in res.patches}
    assert by["inductor-alpha"].status == "wrote" and by["inductor-alpha"].hook_file == _hook(fp, "inductor-alpha")
    assert _hook(fp, "inductor-alpha").read_text() == _expected_hook(fp, "inductor-alpha", tmp_path)
    assert any("hook.diff (the hook torch 2.14.0 inherits) does not apply to torch 2.14.0 as it is" in n and "torch/_inductor/config.py:4" in n for n in by["inductor-alpha"].notes)
    # the other bases keep using the shared hook; the new one uses its override
    generate(fp.sources, None, fp.cache, warn=lambda m: None)
    assert check(fp.sources, None, fp.cache) == []
    assert "+alpha = False" in (fp.patches_dir / f"v{NEW}" / "inductor-alpha.patch").read_text()


def test_moved_context_carries_with_offsets_and_write_makes_a_checked_base(fake_patchset, tmp_path):
    def edit(files):  # upstream grew 10 lines above every hunk
        for f in ("torch/_inductor/config.py", "torch/_inductor/fx_passes/post_grad.py"):
            files[f] = "".join(f"# new upstream line {i}\n" for i in range(10)) + files[f]

    fp = _new_base(fake_patchset, tmp_path, edit)
    res = port(NEW, fp.sources, fp.cache, write=True)
    assert [p.status for p in res.patches] == ["inherited", "inherited", "no-hook"]
    assert not _hook(fp, "inductor-alpha").exists()  # the shared hook applies 10 lines further down
    assert not _hook(fp, "inductor-beta").exists()  # and beta's v2.13.0 override too
    moved = [m for p in res.patches if p.carry for m in p.carry.moved]
    assert len(moved) == 3 and all(m.endswith("offset +10") for m in moved), moved
    assert 'torch/_inductor/config.py: hunk at line 4 (v2.13.0) -> line 14 (v2.14.0)' in moved[0]
    # --write: the base is in [patchset] and in every ported patch (gamma only adds files: ported too)
    ps = fp.sources.load()
    assert NEW in ps.bases and all(NEW in p.bases for p in ps.patches)
    assert ps.bases == ("2.11.0", "2.13.0", NEW)
    generate(fp.sources, [NEW], fp.cache, warn=lambda m: None)
    assert check(fp.sources, [NEW], fp.cache) == []


def test_conflict_is_reported_with_file_line_reason_and_nothing_written(fake_patchset, tmp_path):
    def edit(files):  # upstream added a line exactly where alpha's hook inserts its own
        files["torch/_inductor/config.py"] = files["torch/_inductor/config.py"].replace(
            "option_5 = 5  # an upstream config option\n", "option_5 = 5  # an upstream config option\nalpha_upstream = 1\n"
        )

    fp = _new_base(fake_patchset, tmp_path, edit)
    toml = fp.toml()
    res = port(NEW, fp.sources, fp.cache, write=True, workdir=tmp_path / "wd")
    by = {p.patch: p for p in res.patches}
    assert by["inductor-alpha"].status == "conflict" and by["inductor-beta"].status == "inherited"
    assert not _hook(fp, "inductor-alpha").exists()
    (issue,) = by["inductor-alpha"].carry.issues
    assert issue.file == "torch/_inductor/config.py"
    assert issue.line == 7  # where upstream's new line sits in 2.14.0
    assert issue.hunk.startswith("@@ -4,") and "conflict" in issue.reason and "context" in issue.reason
    assert "<<<<<<< hooked v2.13.0\nalpha = False  # TORCHINDUCTOR_ALPHA\n" in issue.conflict
    assert "=======\nalpha_upstream = 1\n>>>>>>> v2.14.0" in issue.conflict
    out = _report(fp, res)
    assert "inductor-alpha: NEEDS HAND WORK from v2.13.0: 1 hunk(s); nothing written" in out
    assert "HAND WORK: torch/_inductor/config.py:7: hook hunk @@ -4," in out
    # the work tree to finish it in has the markers; alpha is left out of the toml, beta and gamma are in
    assert "<<<<<<< hooked v2.13.0" in (tmp_path / "wd" / "inductor-alpha" / "torch/_inductor/config.py").read_text()
    ps = fp.sources.load()
    assert NEW in ps.bases
    assert {p.name for p in ps.patches if NEW in p.bases} == {"inductor-beta", "inductor-gamma"}
    assert fp.toml() != toml
    # the CLI exits 1 and says so
    r = subprocess.run(
        [sys.executable, "-m", "tools", "port", NEW, "--repo-root", str(fp.root)],
        cwd=REPO_ROOT, env=dict(os.environ, TORCH_PATCHSET_CACHE=str(fp.cache)), capture_output=True, text=True,
    )
    assert r.returncode == 1, r.stderr
    assert "1 need hand work (inductor-alpha)" in r.stdout and "the hook torch 2.14.0 inherits" in r.stdout


def test_missing_file_is_reported_per_hunk(fake_patchset, tmp_path):
    def edit(files):
        files["torch/_inductor/fx_passes/pattern_passes.py"] = files.pop("torch/_inductor/fx_passes/post_grad.py")

    fp = _new_base(fake_patchset, tmp_path, edit)
    res = port(NEW, fp.sources, fp.cache)
    by = {p.patch: p for p in res.patches}
    assert by["inductor-alpha"].status == "inherited" and by["inductor-beta"].status == "conflict"
    (issue,) = by["inductor-beta"].carry.issues
    assert issue.file == "torch/_inductor/fx_passes/post_grad.py" and issue.line is None
    assert issue.reason == "file missing in torch 2.14.0"
    assert not _hook(fp, "inductor-beta").exists()


def test_an_override_serves_the_later_bases_and_check_flags_one_that_repeats_it(fake_patchset, tmp_path):
    """The case of cat_linear's v2.15.0.diff (#28): alpha's shared hook stops applying at 2.14.0, which gets an
    override; 2.15.0 keeps 2.14.0's lines, so it inherits v2.14.0.diff (not hook.diff, which does not apply there),
    and an override made on 2.15.0 that repeats it is flagged by check."""
    def edit(files):  # inside alpha's context: hook.diff no longer applies as it is
        files["torch/_inductor/config.py"] = files["torch/_inductor/config.py"].replace("option_3 = 3", "option_3 = 33")

    fp = _new_base(fake_patchset, tmp_path, edit)
    files = fake_torch_files("2.15.0")
    edit(files)
    make_wheel(fp.cache / "wheels" / "torch-2.15.0-py3-none-any.whl", "2.15.0", files)
    assert [p.status for p in port(NEW, fp.sources, fp.cache, write=True).patches] == ["wrote", "inherited", "no-hook"]
    alpha = next(p for p in fp.sources.load().patches if p.name == "inductor-alpha")
    assert fp.sources.hook_diff(alpha, "2.15.0") == _hook(fp, "inductor-alpha")  # before 2.15.0 is even a base
    res = port("2.15.0", fp.sources, fp.cache, write=True)
    by = {p.patch: p for p in res.patches}
    assert by["inductor-alpha"].status == "inherited" and by["inductor-alpha"].hook_file == _hook(fp, "inductor-alpha")
    assert not _hook(fp, "inductor-alpha", "2.15.0").exists()
    generate(fp.sources, None, fp.cache, warn=lambda m: None)
    warnings: list = []
    assert check(fp.sources, None, fp.cache, warn=warnings.append) == [] and warnings == []
    text = (fp.patches_dir / "v2.15.0" / "inductor-alpha.patch").read_text()
    assert "+alpha = False  # TORCHINDUCTOR_ALPHA" in text
    # an override on 2.15.0 made the documented way repeats v2.14.0.diff there: check flags it (a warning)
    repeat = _hook(fp, "inductor-alpha", "2.15.0")
    repeat.write_text(make_hook_diff(bases_mod.base_tree("2.15.0", fp.cache), HOOK_EDITS["inductor-alpha"], tmp_path / "x"))
    generate(fp.sources, None, fp.cache, warn=lambda m: None)
    assert check(fp.sources, None, fp.cache, warn=warnings.append) == []
    assert warnings == ["warning: hooks/inductor-alpha/v2.15.0.diff: gives the same files as the hook its base(s) would "
                        "use without it (on 2.15.0 as hooks/inductor-alpha/v2.14.0.diff): the patches it makes are byte "
                        "for byte what they would be without it; delete it"]
    # while v2.14.0.diff earns its place: without it 2.14.0 and 2.15.0 would get hook.diff, which does not apply
    assert not any("v2.14.0.diff:" in w for w in warnings)


def test_rerun_keeps_a_different_hook_unless_forced(fake_patchset, tmp_path):
    fp = _new_base(fake_patchset, tmp_path, _beta_context)
    port(NEW, fp.sources, fp.cache)
    again = port(NEW, fp.sources, fp.cache)
    assert {p.patch: p.status for p in again.patches} == {"inductor-alpha": "inherited", "inductor-beta": "unchanged", "inductor-gamma": "no-hook"}
    h = _hook(fp, "inductor-beta")
    carried = h.read_text()
    h.write_text(carried.replace("beta = False", "beta = True"))  # finished by hand
    kept = port(NEW, fp.sources, fp.cache, only=["inductor-beta"])
    assert [p.status for p in kept.patches] == ["kept"] and "beta = True" in h.read_text()
    forced = port(NEW, fp.sources, fp.cache, only=["inductor-beta"], force=True)
    assert [p.status for p in forced.patches] == ["wrote"] and h.read_text() == carried
    # an override that the hook it would inherit makes redundant is compared and kept, and the report says it can go
    redundant = _hook(fp, "inductor-alpha")
    redundant.write_text(_expected_hook(fp, "inductor-alpha", tmp_path))
    (res,) = port(NEW, fp.sources, fp.cache, only=["inductor-alpha"]).patches
    assert res.status == "unchanged" and any("can be deleted" in n for n in res.notes)
    redundant.unlink()
    port(NEW, fp.sources, fp.cache, write=True)
    assert "already lists 2.14.0 in [patchset] and every patch here" in _report(fp, port(NEW, fp.sources, fp.cache))


def test_unknown_version_is_an_error_that_changes_nothing(fake_patchset, tmp_path, monkeypatch):
    fp = _new_base(fake_patchset, tmp_path, lambda files: None)
    before = dir_bytes(fp.root)
    with pytest.raises(PatchsetError) as ei:
        port("2.14", fp.sources, fp.cache)
    assert ei.value.where == "torch 2.14" and "X.Y.Z" in ei.value.reason
    # no such release: pip (offline here) finds no wheel
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(empty))
    monkeypatch.setattr(bases_mod, "download_wheel", REAL_DOWNLOAD_WHEEL)  # pip itself, with nothing to find
    with pytest.raises(PatchsetError) as ei:
        port("2.99.0", fp.sources, fp.cache, write=True)
    assert ei.value.where == "torch 2.99.0" and "cannot get its wheel" in ei.value.reason
    with pytest.raises(PatchsetError, match="not a base of this patch set"):
        port(NEW, fp.sources, fp.cache, from_base="2.12.0")
    with pytest.raises(PatchsetError, match="no such patch"):
        port(NEW, fp.sources, fp.cache, only=["inductor-omega"])
    assert dir_bytes(fp.root) == before
    assert not bases_mod.base_tree("2.99.0", fp.cache).exists()


def test_add_base_to_toml_edits_only_the_bases_lines(fake_patchset):
    text = fake_patchset.toml()
    new = add_base_to_toml(text, "2.12.0", ["inductor-gamma"], Path("patchset.toml"))
    changed = [(a, b) for a, b in zip(text.splitlines(), new.splitlines()) if a != b]
    assert changed == [
        ('bases = ["2.11.0", "2.13.0"]', 'bases = ["2.11.0", "2.12.0", "2.13.0"]'),
        ('bases = ["2.13.0"]', 'bases = ["2.12.0", "2.13.0"]'),
    ]
    with pytest.raises(PatchsetError, match="inductor-omega"):
        add_base_to_toml(text, "2.12.0", ["inductor-omega"], Path("patchset.toml"))


# ------------------------------------------------------------------ issue #28 items 5 and 12


def test_an_override_that_differs_only_in_its_index_lines_is_the_same(fake_patchset, tmp_path):
    """Item 5: an existing override whose only difference from the carried hook is an ``index`` line (a blob id git
    apply never reads) gives the same files: reported as the same, with the form difference named, not "kept"."""
    fp = _new_base(fake_patchset, tmp_path, _beta_context)
    port(NEW, fp.sources, fp.cache)
    h = _hook(fp, "inductor-beta")
    lines = h.read_text().splitlines(True)
    i = next(k for k, l in enumerate(lines) if l.startswith("index "))
    lines[i] = lines[i].split("..")[0] + "..1234567 100644\n"  # a stale post-image id, as a hand edit leaves it
    h.write_text("".join(lines))
    (res,) = port(NEW, fp.sources, fp.cache, only=["inductor-beta"]).patches
    assert res.status == "unchanged", res.notes
    assert any("gives the same files as the carried hook" in n and "only its `index` lines differ" in n for n in res.notes)
    assert not any("differs from the carried hook" in n for n in res.notes)
    out = _report(fp, port(NEW, fp.sources, fp.cache, only=["inductor-beta"]))
    assert "already says the same" in out and "kept" not in out.split("note:")[0]
    assert "1234567" in h.read_text()  # kept as it is; --force rewrites it
    port(NEW, fp.sources, fp.cache, only=["inductor-beta"], force=True)
    assert "1234567" not in h.read_text()


def test_the_readme_step_only_when_the_base_is_missing_there(fake_patchset, tmp_path):
    """Item 5: "README.md 'Supported bases': add X" only when README's table has no row for X."""
    fp = _new_base(fake_patchset, tmp_path, lambda files: None)
    readme = fp.root / "README.md"
    readme.write_text("# x\n\n## Supported bases\n\n| base | series |\n|---|---|\n| 2.13.0 | `patches/v2.13.0` |\n\n## Next\n\n| 2.14.0 | elsewhere |\n")
    assert "README.md 'Supported bases': add 2.14.0" in _report(fp, port(NEW, fp.sources, fp.cache))
    readme.write_text(readme.read_text().replace("| 2.13.0 |", "| 2.14.0 | `patches/v2.14.0` |\n| 2.13.0 |"))
    assert "README.md" not in _report(fp, port(NEW, fp.sources, fp.cache))


def test_port_of_a_release_the_index_does_not_know_downloads_nothing(fake_patchset, tmp_path, monkeypatch):
    """Item 12: `port 9.9.9` asks the index first and fails before any download, listing what exists."""
    fp = _new_base(fake_patchset, tmp_path, lambda files: None)
    links = tmp_path / "links"
    links.mkdir()
    for v in ("2.14.0", "2.15.0"):
        make_wheel(links / f"torch-{v}-py3-none-any.whl", v)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.setattr(bases_mod, "fetch_wheel", lambda *a, **k: pytest.fail("downloaded before validating"))
    before = dir_bytes(fp.root)
    with pytest.raises(PatchsetError) as ei:
        port("9.9.9", fp.sources, fp.cache)
    assert ei.value.where == "torch 9.9.9"
    assert "not a release the package index knows (it lists 2.15.0, 2.14.0)" in ei.value.reason
    assert "nothing was downloaded" in ei.value.reason
    assert dir_bytes(fp.root) == before and not (fp.cache / "wheels" / "torch-9.9.9-py3-none-any.whl").exists()
