"""install / uninstall / status: transactions on a fake site-packages (fast), plus one real torch end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.common import PatchsetError
from tools.distinfo import INFO_MODULE
from tools.install import install, uninstall
from tools.install_cli import status
from tools.journal import STATE_DIR
from tools.patchapply import apply_series
from tools.seriesfile import load_series
from tools.tests import faketorch as ft

REPO = ft.REPO


@pytest.fixture
def env(tmp_path):
    site = ft.make_site(tmp_path / "env")
    patches = ft.make_series(tmp_path / "src")
    meta = ft.write_metadata(tmp_path)
    return site, patches, meta, tmp_path


def cli(site, patches, meta, *args, **kw):
    if args[0] == "uninstall":  # needs only what install left in torch
        return ft.run_tools(*args, "--site-packages", str(site), **kw)
    return ft.run_tools(*args, "--site-packages", str(site), "--patches", str(patches), "--metadata", str(meta), **kw)


def test_applier_matches_git(env):
    """Our strict applier yields exactly the tree git committed (the fixture's patched tree)."""
    site, patches, meta, tmp = env
    changes = apply_series(load_series(patches / "v2.13.0"), lambda rel: (site / rel).read_bytes()
                           if (site / rel).exists() else None)
    tree = ft.patched_tree(tmp / "src")
    assert set(changes) == {p for p in (f.relative_to(tree).as_posix() for f in tree.rglob("*") if f.is_file())
                            if p.startswith("torch/") and (tree / p).read_bytes() != ((site / p).read_bytes()
                                                                                    if (site / p).exists() else None)}
    for rel, (_, after) in changes.items():
        assert after == (tree / rel).read_bytes(), rel


def test_install_uninstall_byte_identical(env):
    site, patches, meta, _ = env
    before = ft.tree_digest(site)
    r = cli(site, patches, meta, "install")
    assert r.returncode == 0, r.stderr
    assert (site / "torch/_inductor/fake_registry.py").read_text() == "REGISTRY = {}\n"
    assert "newpkg_enabled" in (site / "torch/_inductor/config.py").read_text()
    assert not (site / "test").exists(), "test/ parts must not be installed"
    info = (site / INFO_MODULE).read_text()
    assert "version = '0.1.0'" in info and "fake-newpkg" in info
    m = json.loads((site / STATE_DIR / "manifest.json").read_text())
    acts = {e["path"]: e["action"] for e in m["files"]}
    assert acts["torch/_inductor/config.py"] == "modified"
    assert acts["torch/_inductor/fx_passes/newpkg/sub/deep.py"] == "added"
    assert set(m["created_dirs"]) == {"torch/_inductor/fx_passes/newpkg", "torch/_inductor/fx_passes/newpkg/sub"}
    st = cli(site, patches, meta, "status")
    assert st.returncode == 0 and "inductor-patchset 0.1.0" in st.stdout and "all files match" in st.stdout
    # a second install of the same patch set is a no-op
    snap = ft.tree_digest(site)
    r = cli(site, patches, meta, "install")
    assert r.returncode == 0 and "nothing to do" in r.stdout
    assert ft.tree_digest(site) == snap
    # simulate Python having compiled an added module: uninstall must not leave its .pyc behind
    pc = site / "torch/_inductor/__pycache__"
    pc.mkdir()
    (pc / "fake_registry.cpython-311.pyc").write_bytes(b"x")
    r = cli(site, patches, meta, "uninstall")
    assert r.returncode == 0, r.stderr
    assert ft.tree_digest(site) == before
    st = cli(site, patches, meta, "status")
    assert st.returncode == 0 and "stock" in st.stdout


def test_unknown_version_clear_error_nothing_changed(tmp_path):
    site = ft.make_site(tmp_path / "env", version="9.9.0+cpu")
    patches = ft.make_series(tmp_path / "src")
    meta = ft.write_metadata(tmp_path)
    before = ft.tree_digest(site)
    r = cli(site, patches, meta, "install")
    assert r.returncode == 2
    assert "unsupported torch version" in r.stderr and "9.9.0+cpu" in r.stderr
    assert ft.tree_digest(site) == before


def test_modified_file_named_nothing_changed(env):
    site, patches, meta, _ = env
    cfg = site / "torch/_inductor/config.py"
    cfg.write_text(cfg.read_text() + "# local edit\n")
    before = ft.tree_digest(site)
    r = cli(site, patches, meta, "install")
    assert r.returncode == 2
    assert str(cfg) in r.stderr and "not pristine" in r.stderr
    assert ft.tree_digest(site) == before


def test_existing_target_refused(env):
    site, patches, meta, _ = env
    (site / "torch/_inductor/fake_registry.py").write_text("someone else's\n")
    before = ft.tree_digest(site)
    r = cli(site, patches, meta, "install")
    assert r.returncode == 2 and "fake_registry.py" in r.stderr and "not part of torch's RECORD" in r.stderr
    assert ft.tree_digest(site) == before


@pytest.mark.parametrize("crash_after", [1, 3, 6])
@pytest.mark.parametrize("next_cmd", ["install", "uninstall", "status"])
def test_interrupted_install_rolls_back(env, crash_after, next_cmd):
    site, patches, meta, _ = env
    before = ft.tree_digest(site)
    r = cli(site, patches, meta, "install", env={"TORCH_PATCHSET_CRASH_AFTER": str(crash_after)})
    assert r.returncode == 86, r.stderr  # died abruptly, mid-transaction
    assert (site / STATE_DIR / "journal.json").exists()
    assert ft.tree_digest(site) != before
    r = cli(site, patches, meta, next_cmd)
    assert r.returncode == 0, r.stderr
    assert "interrupted install" in r.stderr
    if next_cmd == "install":  # rolled back, then installed cleanly
        assert "installed inductor-patchset" in r.stdout
        assert cli(site, patches, meta, "uninstall").returncode == 0
    assert ft.tree_digest(site) == before


def test_interrupted_uninstall_completes(env):
    site, patches, meta, _ = env
    before = ft.tree_digest(site)
    assert cli(site, patches, meta, "install").returncode == 0
    r = cli(site, patches, meta, "uninstall", env={"TORCH_PATCHSET_CRASH_AFTER": "2"})
    assert r.returncode == 86
    r = cli(site, patches, meta, "status")
    assert r.returncode == 0 and "interrupted uninstall" in r.stderr and "stock" in r.stdout
    assert ft.tree_digest(site) == before


def test_failure_in_process_rolls_back(env, monkeypatch):
    """An exception half-way (e.g. disk full) rolls back at once, without waiting for the next command."""
    site, patches, meta, _ = env
    before = ft.tree_digest(site)
    import tools.journal as inst

    real = inst.write_atomic
    calls = {"n": 0}

    def flaky(target, data, **kw):
        if "torch/_inductor/fx_passes" in str(target) and "patchset-tmp" not in str(target):
            calls["n"] += 1
            if calls["n"] == 2:
                raise OSError(28, "No space left on device")
        return real(target, data, **kw)

    monkeypatch.setattr(inst, "write_atomic", flaky)
    with pytest.raises(PatchsetError, match="rolled back: No space left"):
        install(site, patches, meta)
    assert ft.tree_digest(site) == before


def test_other_version_installed_needs_replace(env, tmp_path):
    site, patches, meta, _ = env
    assert install(site, patches, meta) == 0
    (tmp_path / "m2").mkdir()
    meta2 = ft.write_metadata(tmp_path / "m2", version="0.2.0")
    with pytest.raises(PatchsetError, match="0.1.0.*is installed.*uninstall"):
        install(site, patches, meta2)
    assert install(site, patches, meta2, replace=True) == 0
    assert "version = '0.2.0'" in (site / INFO_MODULE).read_text()
    assert uninstall(site) == 0


def test_uninstall_refuses_changed_file(env):
    site, patches, meta, _ = env
    assert install(site, patches, meta) == 0
    (site / "torch/_inductor/fake_registry.py").write_text("edited\n")
    with pytest.raises(PatchsetError, match="fake_registry.py.*changed since install"):
        uninstall(site)
    assert uninstall(site, force=True) == 0
    assert not (site / "torch/_inductor/fake_registry.py").exists()


def test_status_reports_drift(env, capsys):
    site, patches, meta, _ = env
    assert install(site, patches, meta) == 0
    (site / "torch/_inductor/config.py").write_text("x = 1\n")
    assert status(site, patches, meta) == 1
    assert "DRIFT" in capsys.readouterr().out


# ------------------------------------------------------------------ one real torch, end to end


def test_errors_name_the_file_and_every_non_pristine_file(env, tmp_path):
    site, patches, meta, _ = env
    edited = [site / "torch/_inductor/config.py", site / "torch/_inductor/fx_passes/post_grad.py"]
    for p in edited:
        p.write_text(p.read_text() + "# local edit\n")
    before = ft.tree_digest(site)
    r = cli(site, patches, meta, "install")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert all(str(p) in r.stderr for p in edited) and "not pristine" in r.stderr and "1 more" in r.stderr
    assert ft.tree_digest(site) == before
    site2 = ft.make_site(tmp_path / "env2", version="9.9.0+cpu")
    r = cli(site2, patches, meta, "install")
    assert r.returncode == 2
    assert f"error: {site2 / 'torch-9.9.0+cpu.dist-info/METADATA'}: unsupported torch version 9.9.0+cpu" in r.stderr


def test_uninstall_restores_bytecode(env):
    """With bytecode writing on, Python compiles the patched modules; uninstall must leave the pycs as they were
    (pip compiles stock torch's .pyc at install time: here a first import does it)."""
    site, patches, meta, _ = env
    envv = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"PYTHONPATH": str(site)}
    code = "import torch._inductor.config, torch._inductor.fx_passes.post_grad"
    run = lambda: subprocess.run([sys.executable, "-c", code], env=envv, cwd=site, check=True)
    run()
    stock_pycs = sorted(site.rglob("*.pyc"))
    assert any("config" in p.name for p in stock_pycs)
    before = ft.tree_digest(site)
    assert cli(site, patches, meta, "install").returncode == 0
    run()  # compiles the patched config.py and post_grad.py
    pyc = next((site / "torch/_inductor/__pycache__").glob("config.*.pyc"))
    assert ft.tree_digest(site)[pyc.relative_to(site).as_posix()] != before[pyc.relative_to(site).as_posix()]
    r = cli(site, patches, meta, "uninstall")
    assert r.returncode == 0, r.stderr
    assert ft.tree_digest(site) == before
    run()  # the restored stock bytecode is still valid for the restored source: nothing recompiled
    assert ft.tree_digest(site) == before


def _unpack_wheel(whl: Path, site: Path) -> Path:
    """What pip does with a wheel, for our purpose: its files, RECORD as built."""
    import zipfile

    with zipfile.ZipFile(whl) as z:
        z.extractall(site)
    return site


def test_torch_from_patched_wheel_is_recognised(env, tmp_path):
    from tools.wheel import build_wheel

    _, patches, meta, _ = env
    whl = build_wheel(ft.make_wheel(tmp_path / "w"), tmp_path / "dist", patches, meta)
    site = _unpack_wheel(whl, tmp_path / "wheelenv" / "site-packages")
    before = ft.tree_digest(site)
    st = cli(site, patches, meta, "status")
    assert st.returncode == 0, st.stdout + st.stderr
    assert "inductor-patchset 0.1.0" in st.stdout and "patched wheel" in st.stdout and "not installed" not in st.stdout
    r = cli(site, patches, meta, "install")  # the same series: nothing to do
    assert r.returncode == 0 and "nothing to do" in r.stdout, r.stderr
    (tmp_path / "m2").mkdir()
    meta2 = ft.write_metadata(tmp_path / "m2", version="0.2.0")
    r = ft.run_tools("install", "--site-packages", str(site), "--patches", str(patches), "--metadata", str(meta2))
    assert r.returncode == 2 and "patched wheel" in r.stderr.replace("wheel patched", "patched wheel")
    assert "pip install --force-reinstall --no-deps torch==2.13.0" in r.stderr and "hunk" not in r.stderr
    r = cli(site, patches, meta, "uninstall")
    assert r.returncode == 2 and "pip install --force-reinstall" in r.stderr and "stock torch)" not in r.stdout
    assert ft.tree_digest(site) == before


def test_modified_series_is_reported(tmp_path):
    site = ft.make_site(tmp_path / "env")
    patches = ft.make_series(tmp_path / "src")
    meta = ft.write_metadata(tmp_path)
    ft._git(patches, "init", "-q")
    ft._git(patches, "add", "-A")
    ft._git(patches, "commit", "-q", "-m", "series")
    assert cli(site, patches, meta, "install").returncode == 0
    st = cli(site, patches, meta, "status")
    assert "MODIFIED" not in st.stdout and "as committed" in st.stdout
    assert cli(site, patches, meta, "uninstall").returncode == 0
    # hand-edit a patch: it still applies, but it is not the series `check` vouched for
    p = patches / "v2.13.0" / "fake-registry.patch"
    p.write_text(p.read_text().replace("+REGISTRY = {}", "+REGISTRY = []"))
    r = cli(site, patches, meta, "install")
    assert r.returncode == 0 and "MODIFIED" in r.stdout and "differs from the committed series" in r.stderr
    st = cli(site, patches, meta, "status")
    assert "inductor-patchset 0.1.0 (MODIFIED series)" in st.stdout and "fake-registry.patch" in st.stdout
    assert "series_state = 'modified'" in (site / INFO_MODULE).read_text()


def test_no_lock_file_left_behind(env):
    import tempfile

    site, patches, meta, _ = env
    tmpdir = Path(tempfile.gettempdir())
    before = set(tmpdir.glob("torch-patchset-*.lock"))
    for cmd in ("install", "status", "uninstall"):
        assert cli(site, patches, meta, cmd).returncode == 0
    assert set(tmpdir.glob("torch-patchset-*.lock")) == before


# ------------------------------------------------------------------ issue #28 items 7, 8 and 13


def test_status_does_not_call_a_hand_edited_torch_stock(env):
    """Item 7: two Inductor files edited by hand and no install: status says NOT stock, names them, exits 1."""
    site, patches, meta, _ = env
    st = cli(site, patches, meta, "status")
    assert st.returncode == 0 and "stock torch" in st.stdout and "NOT stock" not in st.stdout
    edited = ["torch/_inductor/config.py", "torch/_inductor/fx_passes/post_grad.py"]
    for rel in edited:
        (site / rel).write_text((site / rel).read_text() + "# local edit\n")
    (site / "torch/_inductor/leftover.py").write_text("X = 1\n")
    st = cli(site, patches, meta, "status")
    assert st.returncode == 1, st.stdout
    assert "(stock torch" not in st.stdout and "NOT stock" in st.stdout
    assert "2 file(s) differ from torch's RECORD (edited by hand?): " + ", ".join(edited) in st.stdout
    assert "not in torch's RECORD (left by someone?): torch/_inductor/leftover.py" in st.stdout
    assert "pip install --force-reinstall --no-deps torch==2.13.0" in st.stdout
    # and install agrees: not pristine
    r = cli(site, patches, meta, "install")
    assert r.returncode == 2 and "not pristine" in r.stderr


def _commit_series(patches):
    ft._git(patches, "init", "-q")
    ft._git(patches, "add", "-A")
    ft._git(patches, "commit", "-q", "-m", "series")


def test_dry_run_of_a_modified_series_says_nothing_was_installed(tmp_path):
    """Item 8: --dry-run must not say "It is installed as ..."."""
    site = ft.make_site(tmp_path / "env")
    patches = ft.make_series(tmp_path / "src")
    meta = ft.write_metadata(tmp_path)
    _commit_series(patches)
    p = patches / "v2.13.0" / "fake-registry.patch"
    p.write_text(p.read_text().replace("+REGISTRY = {}", "+REGISTRY = []"))
    before = ft.tree_digest(site)
    r = cli(site, patches, meta, "install", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "It is installed as" not in r.stderr and "Installing it as" not in r.stderr
    assert "without --dry-run would install it as inductor-patchset 0.1.0 with series_state 'modified'" in r.stderr
    assert "dry run: nothing was installed" in r.stdout and "would modify torch/_inductor/config.py" in r.stdout
    assert ft.tree_digest(site) == before


def test_a_series_untracked_inside_another_repository_is_not_modified(tmp_path):
    """Item 13: the project tree lies, untracked, inside someone's git repository. Its series is not in any checkout
    of the patch set, so it is 'unknown' (not judged), never MODIFIED."""
    outer = tmp_path / "home"
    outer.mkdir()
    ft._git(outer, "init", "-q")
    (outer / "notes.txt").write_text("mine\n")
    ft._git(outer, "add", "notes.txt")
    ft._git(outer, "commit", "-q", "-m", "someone's repo")
    proj = outer / "inductor-patchset"
    site = ft.make_site(tmp_path / "env")
    patches = ft.make_series(proj)
    meta = ft.write_metadata(proj)
    r = cli(site, patches, meta, "install")
    assert r.returncode == 0, r.stderr
    assert "MODIFIED" not in r.stdout and "warning" not in r.stderr
    assert "tracks neither it nor" in r.stderr
    st = cli(site, patches, meta, "status")
    assert "MODIFIED" not in st.stdout and "series_state = 'unknown'" in (site / INFO_MODULE).read_text()
    # the same tree committed in its own checkout is judged again: a hand edit is MODIFIED
    assert cli(site, patches, meta, "uninstall").returncode == 0
    ft._git(outer, "add", "inductor-patchset")
    ft._git(outer, "commit", "-q", "-m", "now it is tracked")
    p = patches / "v2.13.0" / "fake-registry.patch"
    p.write_text(p.read_text().replace("+REGISTRY = {}", "+REGISTRY = []"))
    r = cli(site, patches, meta, "install")
    assert r.returncode == 0 and "MODIFIED" in r.stdout
