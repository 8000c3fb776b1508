"""Setup under a site-wide pip constraint (issue #28): ``tools bases`` (fetch) and ``tools venv`` (the per-base venv,
what ``scripts/dev.sh`` runs) install the pinned torch whatever a constraint file in pip's configuration says,
say so in one line naming the file, and keep going past a base that cannot be fetched.

Offline and fast: fake torch wheels in a find-links directory, pip's configuration in a file of the test's own
(``PIP_CONFIG_FILE``, whose ``global.constraint`` caps torch below the release), no index.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools import pipcap
from tools.baseenv import installed_torch, requirement_files, torch_pin
from tools.common import PatchsetError
from tools.tests import faketorch as ft


def _dist_wheel(links: Path, name: str, version: str) -> None:
    """An empty wheel of ``name`` (the fake torch depends on numpy, which must resolve offline too)."""
    import zipfile

    di = f"{name}-{version}.dist-info"
    files = {f"{di}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{di}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    with zipfile.ZipFile(links / f"{name}-{version}-py3-none-any.whl", "w") as z:
        for n, t in files.items():
            z.writestr(n, t)
        z.writestr(f"{di}/RECORD", "".join(f"{n},,\n" for n in files) + f"{di}/RECORD,,\n")


@pytest.fixture
def capped(tmp_path):
    """A project root with bases 2.15.0 (its fake wheel is in the find-links) and 2.16.0 (no such release), and a
    pip configuration that caps torch at 2.14.1 the way the issue's machine did (global.constraint)."""
    links = tmp_path / "links"
    links.mkdir()
    for v in ("2.14.1", "2.15.0"):
        w = ft.make_wheel(tmp_path / f"w{v}", version=v)
        w.rename(links / w.name)
    for v in ("2.0.0", "3.0.0"):
        _dist_wheel(links, "numpy", v)
    cap = tmp_path / "site-constraints.txt"
    cap.write_text("# the company's caps\ntorch<=2.14.1\nnumpy<3  # another cap, which must survive\n")
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nconstraint = {cap}\nno-index = true\nfind-links = {links}\n")
    root = tmp_path / "repo"
    root.mkdir()
    ft.write_metadata(root, bases=("2.15.0", "2.16.0"))
    (root / "requirements").mkdir()
    for b in ("2.15.0", "2.16.0"):
        (root / "requirements" / f"base-{b}.txt").write_text(f"# test pins\ntorch=={b}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=str(conf), PIP_NO_INDEX="1", PIP_FIND_LINKS=str(links),
               PIP_DISABLE_PIP_VERSION_CHECK="1", TORCH_PATCHSET_CACHE=str(tmp_path / "cache"),
               TORCH_PATCHSET_MIN_FREE_GIB="0")  # the fake wheels are a few KB, whatever the host's disk holds
    return root, cap, env


def _tools(env, *args):
    return subprocess.run([sys.executable, "-m", "tools", *args], cwd=ft.REPO, env=env, capture_output=True,
                          text=True, timeout=600)


def test_plain_pip_is_refused_by_the_cap(capped, tmp_path):
    """The situation of the issue, reproduced: without the override pip cannot fetch the pinned release."""
    root, cap, env = capped
    r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "torch==2.15.0", "-d", str(tmp_path / "d")],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "ResolutionImpossible" in r.stderr


def test_fetch_and_venv_override_the_cap_and_keep_going(capped):
    root, cap, env = capped
    # fetch (tools bases): 2.15.0 past the cap; 2.16.0 has no release: reported, the run goes on, exit 2 at the end
    r = _tools(env, "bases", "--repo-root", str(root))
    assert r.returncode == 2, r.stderr
    assert r.stdout.split() == [str(Path(env["TORCH_PATCHSET_CACHE"]) / "bases" / "v2.15.0")]
    line = f"pip: torch==2.15.0 overrides the cap 'torch<=2.14.1' in {cap} (pip's global.constraint)"
    assert r.stderr.count(line) == 1, r.stderr
    assert "error: torch==2.16.0:" in r.stderr and "error: base 2.16.0 has no pristine tree" in r.stderr
    # venv (what dev.sh runs): the same, and the wheel fetched above is reused (find-links of the wheel cache)
    r = _tools(env, "venv", "--repo-root", str(root))
    assert r.returncode == 2, r.stderr
    out = r.stdout.splitlines()
    assert out[0] == f"ready 2.15.0 {root / '.venv-2.15.0'}" and out[1].startswith("failed 2.16.0 ")
    assert installed_torch(root / ".venv-2.15.0") == "2.15.0"
    assert list((root / ".venv-2.15.0").glob("lib/python*/site-packages/numpy-2.0.0.dist-info"))  # numpy<3 held
    assert line.replace("2.15.0", "2.15.0") in r.stderr and "pip install failed" in r.stderr
    assert "error: base 2.16.0 has no venv (not tested)" in r.stderr
    # a second run finds it made: no pip install
    r = _tools(env, "venv", "2.15.0", "--repo-root", str(root))
    assert r.returncode == 0 and "has torch 2.15.0 and the requirements it was made from" in r.stderr
    assert "overrides the cap" not in r.stderr


def test_only_the_torch_line_that_excludes_the_pin_is_dropped(capped, monkeypatch):
    root, cap, env = capped
    for k in [k for k in os.environ if k.startswith("PIP_")]:
        monkeypatch.delenv(k)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pipcap.torch_pin_env(sys.executable, "download", "2.15.0") as (penv, caps):
        assert caps == [pipcap.Cap("torch<=2.14.1", str(cap), "global.constraint")]
        (copy,) = penv["PIP_CONSTRAINT"].split()
        text = Path(copy).read_text()
        assert "numpy<3" in text and "torch" not in text
    assert not Path(copy).exists()  # removed after the pip run
    with pipcap.torch_pin_env(sys.executable, "download", "2.14.1") as (penv, caps):
        assert caps == [] and "PIP_CONSTRAINT" not in penv  # the cap allows it: nothing overridden
    monkeypatch.setenv("PIP_CONSTRAINT", str(cap))  # the variable wins over the config file, as in pip
    with pipcap.torch_pin_env(sys.executable, "install", "2.15.0") as (penv, caps):
        assert [c.setting for c in caps] == ["PIP_CONSTRAINT"]


def test_nested_constraint_files_are_filtered_too(tmp_path):
    inner = tmp_path / "inner.txt"
    inner.write_text("Torch >= 2.0, <2.15 ; python_version >= '3'\nsympy<2\n")
    outer = tmp_path / "outer.txt"
    outer.write_text("-c inner.txt\ntorchvision<=0.29.1\n")
    caps: list = []
    out = tmp_path / "out"
    out.mkdir()
    copy = Path(pipcap._filter_file(str(outer), tmp_path, "2.15.0", "global.constraint", out, caps))
    assert [c.file for c in caps] == [str(inner)] and "torchvision<=0.29.1" in copy.read_text()
    nested = copy.read_text().split()[1]
    assert "sympy<2" in Path(nested).read_text() and "orch" not in Path(nested).read_text()


def test_another_projects_pin_drops_only_its_own_cap(tmp_path):
    """export-pr's download of torchao==0.18.0 (``pin_env`` for another project): a torchao cap is dropped, the
    torch cap and the rest stay."""
    cap = tmp_path / "caps.txt"
    cap.write_text("torch<=2.14.1\ntorchao<0.18\nnumpy<3\n")
    caps: list = []
    out = tmp_path / "out"
    out.mkdir()
    copy = Path(pipcap._filter_file(str(cap), tmp_path, "0.18.0", "global.constraint", out, caps, project="torchao"))
    assert caps == [pipcap.Cap("torchao<0.18", str(cap), "global.constraint")]
    assert copy.read_text().split() == ["torch<=2.14.1", "numpy<3"]


def test_the_repo_requirement_files_pin_each_base():
    from tools.sources import Sources
    from tools.baseenv import requirements_file

    src = Sources()
    ps = src.load()
    for b in ps.bases:
        req = requirements_file(src, b)
        assert torch_pin(req, b) == b
        assert [f.name for f in requirement_files(req)] == [req.name, "requirements-dev.txt"]


def test_a_bad_pin_names_the_file_and_line(tmp_path):
    req = tmp_path / "base-2.15.0.txt"
    req.write_text("torch==2.14.1\n")
    with pytest.raises(PatchsetError) as ei:
        torch_pin(req, "2.15.0")
    assert ei.value.where == f"{req}:1" and "is not torch==2.15.0" in ei.value.reason
    req.write_text("torchvision==0.1\n")
    with pytest.raises(PatchsetError, match="must pin torch exactly once"):
        torch_pin(req, "2.15.0")


def test_a_full_disk_is_refused_before_anything_is_written(capped, monkeypatch):
    """A filesystem without room for even torch's CPU build: one error naming the venv, the free space and what torch
    needs, before the venv is made or pip runs (pip would fail minutes in, with the venv half-written)."""
    import shutil as _shutil

    from tools import baseenv
    from tools.sources import Sources

    root, _, env = capped
    monkeypatch.delenv(baseenv.MIN_FREE_ENV, raising=False)
    monkeypatch.setattr(baseenv.shutil, "disk_usage", lambda p: _shutil._ntuple_diskusage(100, 99, 2**29))
    monkeypatch.setattr(baseenv.subprocess, "run", lambda *a, **k: pytest.fail(f"ran {a[0]}"))
    venv = root / ".venv-2.15.0"
    with pytest.raises(PatchsetError) as e:
        baseenv.ensure_venv("2.15.0", venv, Sources(root))
    assert str(venv) in str(e.value) and "0.5 GiB free on its filesystem; torch 2.15.0 needs at least 2 GiB" in str(e.value)
    assert not venv.exists()


def test_the_free_space_limit_is_an_environment_setting(tmp_path, monkeypatch):
    """TORCH_PATCHSET_MIN_FREE_GIB moves the limit both ways; a value that is not a count of GiB is an error naming it."""
    import shutil as _shutil

    from tools import baseenv

    monkeypatch.setattr(baseenv.shutil, "disk_usage", lambda p: _shutil._ntuple_diskusage(100, 99, 2**29))
    venv = tmp_path / ".venv-2.15.0"
    monkeypatch.setenv(baseenv.MIN_FREE_ENV, "0.25")
    baseenv.check_free_space(venv, "2.15.0")  # 0.5 GiB free, 0.25 needed
    monkeypatch.setenv(baseenv.MIN_FREE_ENV, "1")
    with pytest.raises(PatchsetError, match=r"0.5 GiB free on its filesystem; torch 2.15.0 needs at least 1 GiB .*"
                                            r"\(TORCH_PATCHSET_MIN_FREE_GIB sets this limit\)"):
        baseenv.check_free_space(venv, "2.15.0")
    for bad in ("two", "-1"):
        monkeypatch.setenv(baseenv.MIN_FREE_ENV, bad)
        with pytest.raises(PatchsetError, match="TORCH_PATCHSET_MIN_FREE_GIB"):
            baseenv.check_free_space(venv, "2.15.0")


def _made(venv, base):
    d = venv / "lib" / "python3.11" / "site-packages" / f"torch-{base}.dist-info"
    d.mkdir(parents=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {base}\n")


def test_room_for_a_venv_frees_the_other_bases_venvs_in_order(capped, monkeypatch):
    """dev.sh test asks `tools venv --room-for <base> <bases...>` before each base: on a disk that holds one CUDA venv
    beside the rest, the venvs an earlier run left are removed (in the order given, never the base's own or the
    primary's) until the base fits; a made venv needs no room."""
    import shutil as _shutil

    from tools import baseenv

    root, _, _ = capped
    monkeypatch.delenv(baseenv.ROOM_ENV, raising=False)

    def disk(_):  # 20 GiB, each .venv-* taking 6
        used = 6 * 2**30 * len(list(root.glob(".venv-*")))
        return _shutil._ntuple_diskusage(20 * 2**30, used, 20 * 2**30 - used)

    monkeypatch.setattr(baseenv.shutil, "disk_usage", disk)
    for b in ("2.11.0", "2.13.0", "2.15.0"):
        _made(root / f".venv-{b}", b)
    order = ["2.11.0", "2.13.0", "2.14.1", "2.15.0"]
    # 2 GiB free: the first other base's venv goes; the primary's name is skipped, 2.15.0 stays (8 GiB free now)
    removed, why = baseenv.make_room(root, "2.14.1", order, "2.13.0")
    assert removed == [("2.11.0", root / ".venv-2.11.0")] and why is None
    assert (root / ".venv-2.13.0").exists() and (root / ".venv-2.15.0").exists()
    # a made venv needs nothing; the base's own venv is never a candidate
    assert baseenv.make_room(root, "2.15.0", order, "2.13.0") == ([], None)
    # nothing left that may go: why it still does not fit
    monkeypatch.setenv(baseenv.ROOM_ENV, "100")
    removed, why = baseenv.make_room(root, "2.11.0", order, "2.13.0")
    assert removed == [("2.15.0", root / ".venv-2.15.0")] and (root / ".venv-2.13.0").exists()
    assert why == f"14.0 GiB free where {root / '.venv-2.11.0'} goes, 100 GiB needed for it and its test run " \
                  f"({baseenv.ROOM_ENV} sets this)"
    for bad in ("nan", "inf", "-1", "two"):
        monkeypatch.setenv(baseenv.ROOM_ENV, bad)
        with pytest.raises(PatchsetError, match=baseenv.ROOM_ENV):
            baseenv.room_for(root / ".venv-2.11.0", "2.11.0")


def test_room_for_on_the_command_line(capped):
    """The lines dev.sh reads: one per venv removed, then room or no-room; only the bases given may go."""
    from tools import baseenv

    root, _, env = capped
    _made(root / ".venv-2.16.0", "2.16.0")
    r = _tools({**env, baseenv.ROOM_ENV: "1000000"}, "venv", "--room-for", "2.15.0", "--repo-root", str(root))
    assert r.returncode == 0 and r.stdout.startswith("no-room 2.15.0 ") and "1e+06 GiB needed" in r.stdout, r
    assert (root / ".venv-2.16.0").exists()  # not given: not a candidate
    r = _tools({**env, baseenv.ROOM_ENV: "1000000"}, "venv", "--room-for", "2.15.0", "2.15.0", "2.16.0",
               "--repo-root", str(root))
    lines = r.stdout.splitlines()
    assert lines[0] == f"removed 2.16.0 {root / '.venv-2.16.0'}" and lines[1].startswith("no-room 2.15.0 "), r
    assert not (root / ".venv-2.16.0").exists() and not (root / ".venv-2.15.0").exists()
    r = _tools({**env, baseenv.ROOM_ENV: "0"}, "venv", "--room-for", "2.15.0", "2.16.0", "--repo-root", str(root))
    assert r.stdout == "room 2.15.0\n", r
    r = _tools(env, "venv", "--room-for", "2.15.0", "--install", "--repo-root", str(root))
    assert r.returncode != 0 and "without --dir or --install" in r.stderr
