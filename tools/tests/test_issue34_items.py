"""Issue 34's smaller items (6-14, 16): each test fails on the code before its fix."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import tools.demo as demo
from tools.common import REPO_ROOT, PatchsetError
from tools.install import install
from tools.tests import faketorch as ft


@pytest.fixture
def env(tmp_path):
    site = ft.make_site(tmp_path / "env")
    patches = ft.make_series(tmp_path / "src")
    meta = ft.write_metadata(tmp_path)
    return site, patches, meta, tmp_path


def _cli(site, patches, meta, *args):
    return ft.run_tools(*args, "--site-packages", str(site), "--patches", str(patches), "--metadata", str(meta))


def test_item6_demo_with_a_name_no_demo_has_is_an_error(env, monkeypatch, capsys):
    site, patches, meta, tmp = env
    meta.write_text(meta.read_text() + '\n[[patch]]\nname = "inductor-feature-a"\nsubject = "s"\ncategory = "c"\n'
                    'upstream-status = "Pending"\nbases = ["2.13.0"]\nlast-update = "2026-01-01"\nbody = "b"\n')
    ex = tmp / "examples"
    ex.mkdir()
    (ex / "feature_a.py").write_text("def main():\n    pass\n")
    monkeypatch.setattr(demo, "find_site_packages", lambda: site)
    assert install(site, patches, meta) == 0
    with pytest.raises(PatchsetError, match=r"no demo's name contains 'nosuchdemo'; the demos: inductor-feature-a"):
        demo.run_demos(only=["nosuchdemo"], metadata=meta, examples=ex)
    assert "0 ok" not in capsys.readouterr().out
    assert demo.run_demos(only=["feature-a"], metadata=meta, examples=ex) == 0


def test_item7_wheel_from_a_file_that_is_no_wheel_and_the_exact_redownload_hint(env):
    site, patches, meta, tmp = env
    r = ft.run_tools("wheel", "--from", str(REPO_ROOT / "README.md"), "--out", str(tmp / "out"),
                     "--patches", str(patches), "--metadata", str(meta))
    assert r.returncode == 2 and "not a torch wheel" in r.stderr and "delete" not in r.stderr, r.stderr
    assert (REPO_ROOT / "README.md").is_file()
    bad = tmp / "dl" / "torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl"
    bad.parent.mkdir()
    bad.write_bytes(b"PK\x03\x04 truncated")
    r = ft.run_tools("wheel", "--from", str(bad), "--out", str(tmp / "out"), "--patches", str(patches), "--metadata", str(meta))
    assert r.returncode == 2, r.stderr
    assert "torch==2.13.0+cpu --index-url https://download.pytorch.org/whl/cpu" in r.stderr, r.stderr


def test_item8_demo_says_a_first_setup_is_one(tmp_path):
    """dev.sh's demo line called every setup "a re-check when nothing changed", the first one and the one after
    `clean` too; it now tells them apart (`dev.sh setup-kind`, what setup has ahead of it)."""
    def kind(**env):
        r = subprocess.run(["bash", str(REPO_ROOT / "scripts/dev.sh"), "setup-kind"], capture_output=True, text=True,
                           env={**os.environ, **env})
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    venv = tmp_path / "venv"
    assert kind(VENV=str(venv)) == "first"  # no venv yet
    (venv / "bin").mkdir(parents=True)
    (venv / "bin/python").symlink_to(sys.executable)
    assert kind(VENV=str(venv)) == "first"  # a venv, but the patch set not installed (after `clean`)
    state = venv / "lib/python3.11/site-packages/torch/_inductor/.patchset"
    state.mkdir(parents=True)
    (state / "manifest.json").write_text("{}")
    build = REPO_ROOT / "build" / "build.ninja"
    assert kind(VENV=str(venv)) == ("re-check" if build.is_file() else "first")
    dev = (REPO_ROOT / "scripts/dev.sh").read_text()
    demo_case = dev[dev.index("  demo)"):dev.index("  test)")]
    assert "a first setup" in demo_case and "a re-check when nothing changed" in demo_case


def test_item10_status_does_not_say_install_refuses_a_file_the_series_leaves_alone(env):
    site, patches, meta, _ = env
    (site / "torch/_inductor/__init__.py").write_text("# local edit\n")  # the fake series does not touch it
    st = _cli(site, patches, meta, "status")
    assert st.returncode == 1 and "NOT stock" in st.stdout
    assert "refuses" not in st.stdout and "the series touches none of them" in st.stdout, st.stdout
    assert _cli(site, patches, meta, "install").returncode == 0
    assert ft.run_tools("uninstall", "--site-packages", str(site)).returncode == 0
    (site / "torch/_inductor/config.py").write_text("# local edit\n")  # this one it patches
    st = _cli(site, patches, meta, "status")
    assert "`install` refuses these, which the series patches or adds: torch/_inductor/config.py" in st.stdout


def test_item11_status_after_torch_was_reinstalled_over_the_install(env):
    site, patches, meta, tmp = env
    stock = {rel: (site / rel).read_bytes() for rel in ("torch/_inductor/config.py", "torch/_inductor/fx_passes/post_grad.py")}
    assert _cli(site, patches, meta, "install").returncode == 0
    for rel, data in stock.items():  # what `pip install --force-reinstall torch` does to the files in RECORD
        (site / rel).write_bytes(data)
    st = _cli(site, patches, meta, "status")
    assert st.returncode == 1 and "DRIFT" not in st.stdout, st.stdout
    assert "STOCK AGAIN: torch/_inductor/config.py, torch/_inductor/fx_passes/post_grad.py are torch's own files again" in st.stdout
    assert "`python -m tools uninstall` removes them" in st.stdout
    assert ft.run_tools("uninstall", "--site-packages", str(site)).returncode == 0
    assert "stock torch" in _cli(site, patches, meta, "status").stdout


def test_item13_patches_naming_a_missing_directory(env):
    site, patches, meta, tmp = env
    missing = tmp / "no-such-patches"
    for cmd in ("install", "status"):
        r = _cli(site, missing, meta, cmd)
        if cmd == "install":
            assert r.returncode == 2 and f"error: {missing}: no such directory" in r.stderr, r.stderr
            assert "generate" not in r.stderr
    whl = ft.make_wheel(tmp / "w")
    r = ft.run_tools("wheel", "--from", str(whl), "--out", str(tmp / "o"), "--patches", str(missing), "--metadata", str(meta))
    assert r.returncode == 2 and f"error: {missing}: no such directory" in r.stderr, r.stderr


def test_item9_first_configure_shows_no_cmake_warning(tmp_path):
    """The first build showed two CMake warnings (kineto not found; libgomp may be hidden): both are silenced at
    their cause (CMakeLists.txt, csrc/CMakeLists.txt say why)."""
    import shutil

    if shutil.which("cmake") is None or shutil.which("ninja") is None:
        pytest.skip("cmake and ninja are needed")
    try:
        import torch.utils
    except ImportError:
        pytest.skip("needs torch")
    r = subprocess.run(["cmake", "-G", "Ninja", "-S", str(REPO_ROOT), "-B", str(tmp_path / "build"),
                        f"-DPython3_EXECUTABLE={sys.executable}", f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout + r.stderr
    assert "CMake Warning" not in out, out


def _overrides_today() -> dict[str, set[str]]:
    """CONTRIBUTING.md's "Overrides today:" list: patch -> bases."""
    import re

    text = (REPO_ROOT / "CONTRIBUTING.md").read_text()
    para = text[text.index("Overrides today:"):].split("\n\n", 1)[0]
    return {m.group(1): set(re.findall(r"\d+\.\d+\.\d+", m.group(2)))
            for m in re.finditer(r"`(inductor-[\w-]+)` on ((?:\d+\.\d+\.\d+(?:,\s*)?)+)", para)}


def test_item12_contributing_lists_the_overrides_there_are():
    listed = _overrides_today()
    on_disk: dict[str, set[str]] = {}
    for f in (REPO_ROOT / "hooks").glob("*/v*.diff"):
        on_disk.setdefault(f.parent.name, set()).add(f.stem[1:])
    assert listed == on_disk


@pytest.mark.slow
def test_item12_contributing_says_check_warns_about_exactly_the_redundant_overrides(tmp_path):
    """CONTRIBUTING.md said `check` warns that cat_linear's v2.15.0.diff repeats v2.14.1.diff; it does not (the
    override is needed). Every such claim must be what check's redundant_overrides finds on the real bases."""
    import re

    from tools import bases as bases_mod
    from tools.check import redundant_overrides
    from tools.sources import Sources

    sources = Sources()
    ps = sources.load()
    trees = {b: bases_mod.base_tree(b) for b in ps.bases}
    if not all((t / ".git").exists() for t in trees.values()):
        pytest.skip("real pristine bases not cached (python -m tools bases)")
    found = {str(sources.rel(f)) for f, _ in redundant_overrides(ps, sources, trees, tmp_path)}
    text = (REPO_ROOT / "CONTRIBUTING.md").read_text()
    claimed = set()
    for m in re.finditer(r"`check` warns that `(v[\d.]+\.diff)`", text):
        before = text[: m.start()]
        patch = re.findall(r"`(inductor-[\w-]+)`", before)[-1]
        claimed.add(f"hooks/{patch}/{m.group(1)}")
    assert claimed == found


def test_item16_the_venvs_python_runs_tools_from_any_directory(tmp_path):
    """`python -m tools` outside the repo root failed with Python's bare `No module named tools`. The venvs that
    `tools venv` (dev.sh setup) makes carry a .pth naming the repo root (baseenv.link_repo)."""
    from tools.baseenv import link_repo

    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    pth = link_repo(tmp_path / "venv", REPO_ROOT)
    assert pth is not None and pth.read_text() == f"{REPO_ROOT}\n"
    code = f"import site; site.addsitedir({str(site)!r}); import tools.cli; print(tools.cli.__file__)"
    r = subprocess.run([sys.executable, "-I", "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == str(REPO_ROOT / "tools" / "cli.py"), r.stderr
    # and this checkout's own venv, when dev.sh made the one running the tests
    if (Path(sys.prefix) / ".patchset-requirements.sha256").is_file():
        r = subprocess.run([sys.executable, "-m", "tools", "--help"], cwd=tmp_path, capture_output=True, text=True)
        assert r.returncode == 0 and "usage: python -m tools" in r.stdout, r.stderr
