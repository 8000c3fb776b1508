"""check on the fake patch set (each problem named with its file), and on the real patches/ and bases."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys

import pytest

from tools import check as check_mod
from tools import generate as generate_mod
from tools.sources import Sources
from tools.common import REPO_ROOT
from tools.tests.conftest import check_fake as _check, generate_fake as _generate, git


def test_check_passes_on_a_good_tree(fake_generated):
    probs, out = _check(fake_generated)
    assert probs == []
    assert out == ""


def test_check_cli_exit_codes(fake_generated):
    env = dict(os.environ, TORCH_PATCHSET_CACHE=str(fake_generated.cache))
    cmd = [sys.executable, "-m", "tools", "check", "--repo-root", str(fake_generated.root)]
    r = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "[4/4] each hook alone on the pristine tree, then regenerate and compare" in r.stderr  # progress is shown
    p = fake_generated.patches_dir / "v2.13.0" / "inductor-gamma.patch"
    p.write_text(p.read_text().replace("GAMMA = 1", "GAMMA = 2"))
    r = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert r.returncode == 1
    assert "python -m tools generate" in r.stderr + r.stdout


def test_check_detects_hand_edit(fake_generated):
    fp = fake_generated
    p = fp.patches_dir / "v2.13.0" / "inductor-alpha.patch"
    p.write_text(p.read_text().replace("+def alpha_pass(gm):", "+def alpha_pass(gm):  # tweak"))
    probs, out = _check(fp)
    assert [(pr.where, "differs from what generate produces" in pr.reason) for pr in probs] == [(str(p), True)]
    assert "-+def alpha_pass(gm):  # tweak" in out and "++def alpha_pass(gm):" in out
    assert "fix: python -m tools generate --base 2.13.0" in out


def test_check_detects_source_change_without_regenerate(fake_generated):
    fp = fake_generated
    (fp.root / "test/inductor/test_beta.py").write_text("def test_beta():\n    assert True\n")
    probs, _ = _check(fp, selected=["2.11.0"])
    # the patch that ships the file, and the series' record of its sources (sources-sha256)
    v = fp.patches_dir / "v2.11.0"
    assert sorted(pr.where for pr in probs) == [str(v / "inductor-beta.patch"), str(v / "series")]


def test_check_series_lists_missing_file(fake_generated):
    fp = fake_generated
    (fp.patches_dir / "v2.13.0" / "inductor-beta.patch").unlink()
    probs, _ = _check(fp, selected=["2.13.0"])
    reasons = [f"{pr.where}: {pr.reason}" for pr in probs]
    assert any("series:" in r and "inductor-beta.patch is listed but" in r for r in reasons), reasons


def test_check_unlisted_duplicate_and_newline(fake_generated):
    fp = fake_generated
    d = fp.patches_dir / "v2.13.0"
    s = d / "series"
    s.write_text(s.read_text().replace("inductor-gamma.patch\n", "inductor-alpha.patch"))
    probs, _ = _check(fp, selected=["2.13.0"])
    reasons = [f"{pr.where}: {pr.reason}" for pr in probs]
    assert any("listed twice" in r for r in reasons), reasons
    assert any(r.startswith(str(d / "inductor-gamma.patch")) and "not listed in series" in r for r in reasons), reasons
    assert any(r.startswith(str(s)) and "newline" in r for r in reasons), reasons


@pytest.mark.parametrize(
    "old,new,expect",
    [
        ("Upstream-Status: Submitted https://github.com/pytorch/pytorch/pull/123456", "Upstream-Status: Submitted", "malformed 'Upstream-Status: Submitted'"),
        ("Upstream-Status: Submitted https://github.com/pytorch/pytorch/pull/123456\n", "", "missing trailer Upstream-Status"),
        ("Subject: [inductor] Add the beta pass", "Subject: Add the beta pass", "does not start with '[inductor] '"),
        ("Affects: torch==2.13.0", "Affects: torch==2.11.0", "Affects: 'torch==2.11.0'"),
        ("Last-Update: 2026-01-03", "Last-Update: yesterday", "Last-Update: 'yesterday'"),
        ("Category: upstreamable", "Category: maybe", "Category: 'maybe'"),
    ],
)
def test_check_malformed_header(fake_generated, old, new, expect):
    fp = fake_generated
    p = fp.patches_dir / "v2.13.0" / "inductor-beta.patch"
    text = p.read_text()
    assert old in text
    p.write_text(text.replace(old, new, 1))
    probs, _ = _check(fp, selected=["2.13.0"])
    header = [pr for pr in probs if "differs from" not in pr.reason]
    assert len(header) == 1 and header[0].where == str(p) and expect in header[0].reason, probs


def test_check_patch_that_does_not_apply(fake_generated):
    fp = fake_generated
    p = fp.patches_dir / "v2.13.0" / "inductor-beta.patch"
    p.write_text(p.read_text().replace(" option_29 = 29", " option_29 = 2900"))
    probs, _ = _check(fp, selected=["2.13.0"])
    am = [pr for pr in probs if "git am fails" in pr.reason]
    assert len(am) == 1 and am[0].where == str(p)
    assert "after inductor-alpha.patch" in am[0].reason and "torch/_inductor/config.py" in am[0].reason
    assert any("does not apply alone" in pr.reason and pr.where == str(p) for pr in probs)


def test_check_patch_that_only_applies_in_series(fake_patchset, tmp_path):
    """A hook made on top of another patch (not on the pristine tree) generates fine but is not
    independently revertible; check says so."""
    fp = fake_patchset
    _generate(fp, selected=["2.13.0"])
    # remake beta's hook with a hunk inside alpha's context, on a tree that has alpha applied
    scratch = tmp_path / "stacked"
    fp.checkout("2.13.0", scratch)
    git(scratch, "am", "-q", str(fp.patches_dir / "v2.13.0" / "inductor-alpha.patch"))
    cfg = scratch / "torch/_inductor/config.py"
    cfg.write_text(cfg.read_text().replace("option_7 = 7", "option_7 = 7  # touched by beta"))
    (fp.root / "hooks/inductor-beta/v2.13.0.diff").write_text(git(scratch, "diff"))
    _generate(fp, selected=["2.13.0"])  # applies in series order
    probs, _ = _check(fp, selected=["2.13.0"])
    assert [(pr.where, "does not apply alone" in pr.reason) for pr in probs] == [
        (str(fp.patches_dir / "v2.13.0" / "inductor-beta.patch"), True),
        (str(fp.root / "hooks/inductor-beta/v2.13.0.diff"), False),
    ]
    # the hook itself is named too, with the hunk that needs the other patch's line
    assert "does not apply to pristine torch 2.13.0: torch/_inductor/config.py hunk #1 (@@ -6,7 +6,7 @@ option_4" in probs[1].reason


def test_check_unclaimed_overlay_file(fake_generated):
    fp = fake_generated
    stray = fp.root / "torch_overlay/torch/_inductor/fx_passes/alpha_helpers.py"
    stray.write_text("x = 1\n")
    (fp.root / "torch_overlay/torch/_inductor/fx_passes/__pycache__").mkdir()
    (fp.root / "torch_overlay/torch/_inductor/fx_passes/__pycache__/alpha.cpython-311.pyc").write_bytes(b"")
    probs, _ = _check(fp)
    assert [(pr.where, "no [[patch]]" in pr.reason) for pr in probs] == [(str(stray), True)]
    msgs = []
    generate_mod.generate(fp.sources, cache_dir=fp.cache, warn=msgs.append)
    assert any(str(stray) in m and "not shipped" in m for m in msgs)


def test_check_orphan_hook_files(fake_generated):
    fp = fake_generated
    gamma = fp.root / "hooks/inductor-gamma/v2.11.0.diff"  # gamma is 2.13-only
    typo = fp.root / "hooks/inductor-alfa/v2.13.0.diff"
    stray = fp.root / "hooks/inductor-alpha/v2.13.0.diff.orig"
    for f in (gamma, typo, stray):
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("")
    probs, _ = _check(fp)
    got = {pr.where: pr.reason for pr in probs}
    assert set(got) == {str(gamma), str(typo), str(stray)}
    assert "does not list base 2.11.0" in got[str(gamma)]
    assert "no [[patch]] named 'inductor-alfa'" in got[str(typo)]


def test_check_missing_series_dir_and_stale_base_dir(fake_generated):
    fp = fake_generated
    shutil.rmtree(fp.patches_dir / "v2.11.0")
    (fp.patches_dir / "v2.9.0").mkdir()
    probs, _ = _check(fp)
    wheres = {pr.where for pr in probs}
    assert str(fp.patches_dir / "v2.11.0") in wheres
    assert str(fp.patches_dir / "v2.9.0") in wheres


# ----------------------------------------------------------------------------------- the real thing


def _real_bases_cached() -> bool:
    from tools import bases as b
    from tools.common import load_patchset

    return all((b.base_tree(x) / ".git").exists() for x in load_patchset().bases)


@pytest.mark.slow
@pytest.mark.skipif(not (REPO_ROOT / "patches").is_dir() or not any((REPO_ROOT / "patches").glob("v*/series")), reason="patches/ not generated in this checkout")
@pytest.mark.skipif(not _real_bases_cached(), reason="real pristine bases not cached (python -m tools bases)")
def test_real_patches_check_against_real_bases():
    """The committed patches/ of this repo against the cached real pristine trees (2.11, 2.13, 2.15)."""
    out = io.StringIO()
    probs = check_mod.check(Sources(), out=out)
    assert probs == [], "\n".join(map(str, probs)) + "\n" + out.getvalue()


@pytest.mark.slow
@pytest.mark.skipif(not _real_bases_cached(), reason="real pristine bases not cached (python -m tools bases)")
def test_real_sources_generate_and_check(tmp_path):
    """This repo's sources (patchset.toml, hooks/, torch_overlay/, test/) generate on the real bases and the
    result passes check, without touching this checkout's patches/."""
    root = tmp_path / "repo"
    root.mkdir()
    for rel in ("patchset.toml", "hooks", "torch_overlay", "test", "benchmarks", "requirements"):
        src = REPO_ROOT / rel
        if src.is_dir():
            shutil.copytree(src, root / rel, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif src.is_file():
            shutil.copy2(src, root / rel)
    sources = Sources(root)
    generate_mod.generate(sources)
    out = io.StringIO()
    probs = check_mod.check(sources, out=out)
    assert probs == [], "\n".join(map(str, probs)) + "\n" + out.getvalue()
