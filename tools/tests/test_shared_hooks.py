"""Shared hooks: ``hooks/<patch>/hook.diff`` serves every base without a ``v<base>.diff`` override.

In the fake patch set alpha has only a shared hook (made on the primary base 2.13.0; torch 2.11.0's config.py has
one more line at the top, so on 2.11.0 it applies one line further down), beta has an override per base.
"""

from __future__ import annotations

import pytest

from tools import generate as generate_mod
from tools.common import PatchsetError
from tools.sources import hook_base, orphan_hook_files, shadowed_shared_hooks, sources_digest
import io

from tools.check import check, check_hooks
from tools.tests.conftest import HOOK_EDITS, check_fake as _check, generate_fake as _generate, git, insert_after, make_hook_diff

ALPHA = "inductor-alpha"


def _alpha(fp):
    return next(p for p in fp.sources.load().patches if p.name == ALPHA)


def _without_digest(files: dict[str, bytes]) -> dict[str, bytes]:
    return {n: b"".join(l for l in d.splitlines(True) if not l.startswith(b"# sources-sha256:")) for n, d in files.items()}


def test_a_base_without_override_uses_the_shared_hook(fake_patchset, tmp_path):
    fp = fake_patchset
    alpha = _alpha(fp)
    assert fp.sources.hook_diff(alpha, "2.11.0") == fp.sources.hook_diff(alpha, "2.13.0") == fp.root / "hooks" / ALPHA / "hook.diff"
    assert hook_base(fp.sources.load(), alpha) == "2.13.0"
    shared = _generate(fp)
    text = shared["2.11.0"][f"{ALPHA}.patch"].decode()
    # on 2.11.0 option_5 is line 7, not 6: the hunk moved by git's offset handling, and the patch says where it is
    assert "@@ -5,6 +5,7 @@ option_2 = 2" in text and "option_5 = 5  # an upstream config option\n+alpha = False" in text
    # byte for byte what an override made on 2.11.0 the documented way gives (the hook's offsets do not leak)
    override = fp.root / "hooks" / ALPHA / "v2.11.0.diff"
    override.write_text(make_hook_diff(fp.base_tree("2.11.0"), HOOK_EDITS[ALPHA], tmp_path / "scratch"))
    assert override.read_text() != (fp.root / "hooks" / ALPHA / "hook.diff").read_text()  # other line numbers
    per_base = _generate(fp)
    assert _without_digest(per_base["2.11.0"]) == _without_digest(shared["2.11.0"])
    assert per_base["2.13.0"] == shared["2.13.0"]


def test_an_override_wins_and_the_digest_follows_the_file_each_base_uses(fake_patchset, tmp_path):
    fp = fake_patchset
    ps = fp.sources.load()
    alpha = _alpha(fp)
    shared = fp.root / "hooks" / ALPHA / "hook.diff"
    before = {b: sources_digest(ps, fp.sources, b) for b in fp.bases}
    # 2.11.0 gets other lines: alpha on by default there
    edits = [(f, a, n.replace("alpha = False", "alpha = True")) for f, a, n in HOOK_EDITS[ALPHA]]
    override = fp.root / "hooks" / ALPHA / "v2.11.0.diff"
    override.write_text(make_hook_diff(fp.base_tree("2.11.0"), edits, tmp_path / "scratch"))
    assert fp.sources.hook_diff(alpha, "2.11.0") == override and fp.sources.hook_diff(alpha, "2.13.0") == shared
    with_override = {b: sources_digest(ps, fp.sources, b) for b in fp.bases}
    assert with_override["2.11.0"] != before["2.11.0"] and with_override["2.13.0"] == before["2.13.0"]
    out = _generate(fp)
    assert "+alpha = True" in out["2.11.0"][f"{ALPHA}.patch"].decode()
    assert "+alpha = False" in out["2.13.0"][f"{ALPHA}.patch"].decode()
    assert _check(fp) == ([], "")
    # an edit of the shared hook changes the bases that use it, not the one with an override
    shared.write_text(shared.read_text().replace("+alpha = False  # TORCHINDUCTOR_ALPHA", "+alpha = False  # TORCHINDUCTOR_ALPHA=1"))
    after_shared = {b: sources_digest(ps, fp.sources, b) for b in fp.bases}
    assert after_shared["2.13.0"] != with_override["2.13.0"] and after_shared["2.11.0"] == with_override["2.11.0"]
    # ... and an edit of the override changes its base only
    override.write_text(override.read_text().replace("+alpha = True", "+alpha = None"))
    after_override = {b: sources_digest(ps, fp.sources, b) for b in fp.bases}
    assert after_override["2.11.0"] != after_shared["2.11.0"] and after_override["2.13.0"] == after_shared["2.13.0"]
    probs, _ = _check(fp)  # patches/ is stale now; check says so for both bases
    assert {p.where.rsplit("/", 2)[-2] for p in probs if "differs from what generate produces" in p.reason} == {"v2.11.0", "v2.13.0"}


def _top_of_file_hook(fp, tmp_path) -> str:
    """alpha's hook plus a line right after option_0: a hunk at line 1 of 2.13.0's config.py. git applies a hunk
    that starts at line 1 only at the top of the file, and 2.11.0's config.py has another first line."""
    edits = [*HOOK_EDITS[ALPHA], ("torch/_inductor/config.py", "option_0 = 0  # an upstream config option\n", "alpha_early = False\n")]
    return make_hook_diff(fp.base_tree("2.13.0"), edits, tmp_path / "scratch")


def test_check_names_base_file_and_hunk_of_a_shared_hook_that_fails_on_one_base(fake_generated, tmp_path):
    fp = fake_generated
    shared = fp.root / "hooks" / ALPHA / "hook.diff"
    shared.write_text(_top_of_file_hook(fp, tmp_path))
    probs, _ = _check(fp)
    bad = [p for p in probs if p.where == str(shared)]
    assert len(bad) == 1, probs
    why = bad[0].reason
    assert "the shared hook (made against 2.13.0) does not apply to pristine torch 2.11.0" in why
    # (the two lines are close enough for git diff to make one hunk of them, so the whole hunk is anchored at line 1)
    assert "torch/_inductor/config.py hunk #1 (@@ -1,9 +1,11 @@): it starts at line 1" in why and "top of the file" in why
    assert "give it an override hooks/inductor-alpha/v2.11.0.diff made against pristine torch 2.11.0" in why
    assert [p for p in probs if "does not apply" in p.reason] == bad  # on 2.13.0 it applies (its series is only stale)
    with pytest.raises(PatchsetError) as ei:
        _generate(fp)
    assert ei.value.where == str(shared) and "does not apply to pristine torch 2.11.0" in ei.value.reason
    # the suggested fix: an override made on 2.11.0 the documented way
    override = fp.root / "hooks" / ALPHA / "v2.11.0.diff"
    scratch = tmp_path / "co"
    fp.checkout("2.11.0", scratch)
    cfg = scratch / "torch/_inductor/config.py"
    text = insert_after(cfg.read_text(), "option_0 = 0  # an upstream config option\n", "alpha_early = False\n")
    cfg.write_text(insert_after(text, "option_5 = 5  # an upstream config option\n", "alpha = False  # TORCHINDUCTOR_ALPHA\n"))
    override.write_text(git(scratch, "diff"))
    _generate(fp)
    assert _check(fp) == ([], "")


def test_hook_layout_problems(fake_generated, tmp_path):
    fp = fake_generated
    ps = fp.sources.load()
    d = fp.root / "hooks" / ALPHA
    # an override of the base the shared hook is made against: the shared hook would be made on a base that never uses it
    (d / "v2.13.0.diff").write_text((d / "hook.diff").read_text())
    assert [(f.name, "the base the shared hook is made against" in why) for f, why in shadowed_shared_hooks(ps, fp.sources)] == [("v2.13.0.diff", True)]
    probs, _ = _check(fp)
    assert [p.where for p in probs if "made against" in p.reason] == [str(d / "v2.13.0.diff")]
    # every base overridden: hook.diff is never read
    (d / "v2.11.0.diff").write_text(make_hook_diff(fp.base_tree("2.11.0"), HOOK_EDITS[ALPHA], tmp_path / "scratch"))
    assert [(f.name, f"every base of {ALPHA} has its own" in why) for f, why in orphan_hook_files(ps, fp.sources)] == [("hook.diff", True)]
    (d / "v2.13.0.diff").unlink()
    # an override that gives what the shared hook gives is a warning of check (delete it), not a problem
    assert check_hooks("2.11.0", ps, fp.sources, fp.base_tree("2.11.0"), tmp_path) == []
    _generate(fp)
    msgs: list = []
    assert check(fp.sources, ["2.11.0"], fp.cache, out=io.StringIO(), warn=msgs.append) == []
    assert msgs == [f"warning: hooks/{ALPHA}/v2.11.0.diff: gives the same files as the hook its base(s) would use "
                    f"without it (on 2.11.0 as hooks/{ALPHA}/hook.diff): the patches it makes are byte for byte what "
                    "they would be without it; delete it"]
    gen_msgs = []
    generate_mod.generate(fp.sources, ["2.13.0"], fp.cache, warn=gen_msgs.append)
    assert not any(ALPHA in m for m in gen_msgs), gen_msgs  # 2.13.0 uses hook.diff: no orphan warning
