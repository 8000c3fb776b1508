"""A hook that imports an overlay module its base does not ship (issue 34: the 2.12.0 port's micro_pipeline_tp.py
importing micro_pipeline_tp_reassembly_backport, which ships for 2.11.0 only): `check` and `port` refuse it and
name the patchset.toml entry to extend. And `port` of a base that is already ported (item 4)."""

from __future__ import annotations

from pathlib import Path

from tools.hookimports import imported_modules
from tools.port import port
from tools.tests.conftest import HOOK_EDITS, FakePatchset, check_fake, fake_torch_files, make_hook_diff, make_wheel

BACKPORT = "torch/_inductor/fx_passes/beta_backport.py"
ENTRY = f'{{path = "{BACKPORT}", bases = ["2.11.0"]}}'
IMPORT = ("torch/_inductor/fx_passes/post_grad.py", "def stage_25(gm):\n    return gm\n",
          "    from .beta_backport import BACKPORT  # noqa: F401\n")


def _with_backport(fp: FakePatchset, tmp: Path, import_on: tuple[str, ...]) -> None:
    """beta ships beta_backport.py on 2.11.0 only; its hook on each base of ``import_on`` imports it."""
    (fp.root / "torch_overlay" / BACKPORT).write_text("BACKPORT = 1\n")
    fp.set_toml(fp.toml().replace('overlay = ["torch/_inductor/fx_passes/beta.py"]',
                                  f'overlay = ["torch/_inductor/fx_passes/beta.py", {ENTRY}]'))
    for base in import_on:
        edits = [(f, a, n.replace("# beta hook", "# beta hook (2.11 form)")) for f, a, n in HOOK_EDITS["inductor-beta"]] \
            if base == "2.11.0" else HOOK_EDITS["inductor-beta"]
        (fp.root / "hooks/inductor-beta" / f"v{base}.diff").write_text(
            make_hook_diff(fp.base_tree(base), [*edits, IMPORT], tmp / "scratch"))


def test_imported_modules_resolves_relative_imports():
    diff = ("+++ b/torch/_inductor/fx_passes/post_grad.py\n+from .beta_backport import X\n+from ..config import y\n"
            "+import torch._inductor.fx_passes.alpha\n+from torch._inductor.custom_pass_registry import (\n"
            "+from . import z\n+from numpy import q\n")
    assert imported_modules(diff) == [
        ("torch/_inductor/fx_passes/post_grad.py", "torch._inductor.fx_passes.beta_backport"),
        ("torch/_inductor/fx_passes/post_grad.py", "torch._inductor.config"),
        ("torch/_inductor/fx_passes/post_grad.py", "torch._inductor.fx_passes.alpha"),
        ("torch/_inductor/fx_passes/post_grad.py", "torch._inductor.custom_pass_registry"),
        ("torch/_inductor/fx_passes/post_grad.py", "torch._inductor.fx_passes"),
    ]


def test_check_refuses_a_hook_importing_a_module_the_base_does_not_ship(fake_patchset, tmp_path):
    fp = fake_patchset
    _with_backport(fp, tmp_path, ("2.11.0",))
    probs, _ = check_fake(fp)
    assert not [p for p in probs if "beta_backport" in str(p)]  # 2.11.0 ships it; 2.13.0's hook does not import it
    _with_backport(fp, tmp_path, ("2.11.0", "2.13.0"))
    probs, _ = check_fake(fp)
    bad = [str(p) for p in probs if "beta_backport" in str(p)]
    assert len(bad) == 1, probs
    assert bad[0].startswith("hooks/inductor-beta/v2.13.0.diff: on torch 2.13.0")
    assert "imports torch._inductor.fx_passes.beta_backport" in bad[0]
    assert f'extend its entry {ENTRY} in [[patch]] inductor-beta of patchset.toml with "2.13.0"' in bad[0]


def test_port_refuses_a_carried_hook_importing_a_module_the_new_base_does_not_ship(fake_patchset, tmp_path):
    fp = fake_patchset
    _with_backport(fp, tmp_path, ("2.11.0",))
    cache = tmp_path / "cache"
    (cache / "bases").mkdir(parents=True)
    for b in fp.bases:
        (cache / "bases" / f"v{b}").symlink_to(fp.base_tree(b))
    make_wheel(cache / "wheels" / "torch-2.12.0-py3-none-any.whl", "2.12.0", fake_torch_files("2.12.0"))
    fp = FakePatchset(fp.root, cache)
    toml = fp.toml()
    res = port("2.12.0", fp.sources, fp.cache, write=True)
    by = {p.patch: p for p in res.patches}
    beta = by["inductor-beta"]
    assert beta.status == "imports" and beta in res.needs_hand_work  # carried from 2.11.0, import and all
    assert any(f'extend its entry {ENTRY} in [[patch]] inductor-beta of patchset.toml with "2.12.0"' in n
               for n in beta.notes), beta.notes
    assert "inductor-beta" not in res.ported()
    # --write adds 2.12.0 to the other patches only
    assert fp.toml() != toml and 'bases = ["2.11.0", "2.13.0"]\noverlay = ["torch/_inductor/fx_passes/beta.py"' in fp.toml()


def test_port_of_a_base_already_ported_carries_nothing(fake_generated, tmp_path):
    """Item 4: `port 2.13.0` (the primary base: hook.diff is made on it) and of a base with its own override: the
    hook each patch uses there applies as it is; no hand work, no file suggested."""
    fp = fake_generated
    before = {p: p.read_bytes() for p in (fp.root / "hooks").rglob("*.diff")}
    for base in fp.bases:
        res = port(base, fp.sources, fp.cache, fetch=False)
        assert res.needs_hand_work == []
        by = {p.patch: p for p in res.patches}
        assert by["inductor-alpha"].status == "unchanged" and by["inductor-alpha"].hook_file.name == "hook.diff"
        assert by["inductor-beta"].status == "unchanged" and by["inductor-beta"].hook_file.name == f"v{base}.diff"
    assert {p: p.read_bytes() for p in (fp.root / "hooks").rglob("*.diff")} == before
