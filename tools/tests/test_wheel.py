"""wheel: patched wheel from a (fake, tiny) torch wheel; RECORD, version label, raw copies, bad input."""

from __future__ import annotations

import hashlib
import re
import zipfile
from pathlib import Path

import pytest

from tools.common import PatchsetError
from tools.distinfo import INFO_MODULE, parse_record
from tools.tests import faketorch as ft
from tools.wheel import build_wheel, patched_version, verify_wheel

PEP440_LOCAL = re.compile(r"^\d+(\.\d+)*\+[a-z0-9]+(\.[a-z0-9]+)*$")


@pytest.fixture
def src(tmp_path):
    whl = ft.make_wheel(tmp_path / "w")
    patches = ft.make_series(tmp_path / "src")
    meta = ft.write_metadata(tmp_path)
    return whl, patches, meta, tmp_path


def test_patched_version():
    assert patched_version("2.13.0+cpu", "inductor-patchset", "0.1.0") == "2.13.0+cpu.inductorpatchset.0.1.0"
    assert patched_version("2.11.0+cu130", "inductor-patchset", "1.2.0rc1") == "2.11.0+cu130.inductorpatchset.1.2.0rc1"
    assert patched_version("2.13.0", "inductor-patchset", "0.1.0") == "2.13.0+inductorpatchset.0.1.0"
    for v in ("2.13.0+cpu", "2.13.0"):
        assert PEP440_LOCAL.match(patched_version(v, "inductor-patchset", "0.1.0-dev_1"))


def test_wheel_contents_record_and_version(src):
    whl, patches, meta, tmp = src
    out = build_wheel(whl, tmp / "dist", patches, meta)
    assert out.name == "torch-2.13.0+cpu.inductorpatchset.0.1.0-py3-none-any.whl"
    verify_wheel(out)  # every member hashes to RECORD, RECORD unhashed, nothing extra/missing
    with zipfile.ZipFile(whl) as zi, zipfile.ZipFile(out) as zo:
        names = zo.namelist()
        di = "torch-2.13.0+cpu.inductorpatchset.0.1.0.dist-info"
        assert not any(n.startswith("torch-2.13.0+cpu.dist-info/") for n in names)
        assert names[-1] == f"{di}/RECORD" and all(n.startswith(di) for n in names[-4:])
        meta_text = zo.read(f"{di}/METADATA").decode()
        assert "\nVersion: 2.13.0+cpu.inductorpatchset.0.1.0\n" in meta_text and "Requires-Dist: numpy" in meta_text
        assert "__version__ = '2.13.0+cpu.inductorpatchset.0.1.0'\n" in zo.read("torch/version.py").decode()
        assert b"registry_enabled" in zo.read("torch/_inductor/config.py")
        assert zo.read("torch/_inductor/fx_passes/newpkg/sub/deep.py") == b"X = 1\n"
        assert b"version = '0.1.0'" in zo.read(INFO_MODULE)
        assert not any(n.startswith("test/") for n in names)
        # unchanged members: identical compressed bytes and CRC (raw copy, no recompression)
        for n in ("torch/_inductor/fx_passes/__init__.py", "torchgen/__init__.py", "torch/__init__.py"):
            a, b = zi.getinfo(n), zo.getinfo(n)
            assert (a.CRC, a.compress_size, a.compress_type) == (b.CRC, b.compress_size, b.compress_type)
            assert zi.read(n) == zo.read(n)
        rec = parse_record(zo.read(f"{di}/RECORD").decode())
        assert rec[f"{di}/RECORD"] == (None, "")
        data = zo.read("torch/_inductor/config.py")
        assert rec["torch/_inductor/config.py"] == (hashlib.sha256(data).hexdigest(), str(len(data)))
        assert zo.testzip() is None


def test_cuda_style_wheel(src):
    """PyPI CUDA wheels: METADATA says 2.11.0, torch.__version__ says 2.11.0+cu130, and dirs are stored."""
    _, _, meta, tmp = src
    whl = ft.make_wheel(tmp / "cu", version="2.11.0", dir_entries=True, py_version="2.11.0+cu130")
    patches = ft.make_series(tmp / "src211", base="2.11.0")
    out = build_wheel(whl, tmp / "dist", patches, meta)
    assert out.name == "torch-2.11.0+inductorpatchset.0.1.0-py3-none-any.whl"
    verify_wheel(out)
    with zipfile.ZipFile(out) as zo:
        assert "__version__ = '2.11.0+cu130.inductorpatchset.0.1.0'\n" in zo.read("torch/version.py").decode()
        assert "torch-2.11.0+inductorpatchset.0.1.0.dist-info/" in zo.namelist()


def test_verify_wheel_catches_bad_record(src):
    """verify_wheel is what the other tests rely on: make sure it can fail."""
    whl, patches, meta, tmp = src
    out = build_wheel(whl, tmp / "dist", patches, meta)
    bad = tmp / "bad.whl"
    with zipfile.ZipFile(out) as zi, zipfile.ZipFile(bad, "w") as zo:
        for i in zi.infolist():
            data = zi.read(i)
            if i.filename.endswith("RECORD"):
                data = data.replace(b"torch/_inductor/config.py,sha256=", b"torch/_inductor/config.py,sha256=AA")
            zo.writestr(i, data)
    with pytest.raises(PatchsetError, match="config.py"):
        verify_wheel(bad)


def test_wheel_refuses_unknown_version_and_non_pristine(src):
    whl, patches, meta, tmp = src
    bad_ver = ft.make_wheel(tmp / "w2", version="9.9.0+cpu")
    with pytest.raises(PatchsetError, match="unsupported torch version"):
        build_wheel(bad_ver, tmp / "dist", patches, meta)
    # a member that does not match the wheel's RECORD
    tampered = ft.tamper_wheel(whl, tmp / "t" / whl.name, ("torch/_inductor/config.py",))
    with pytest.raises(PatchsetError, match=r"config\.py.*not pristine"):
        build_wheel(tampered, tmp / "dist2", patches, meta)
    assert not (tmp / "dist2").exists() or not any((tmp / "dist2").iterdir())


def test_wheel_cli(src):
    whl, patches, meta, tmp = src
    r = ft.run_tools("wheel", "--from", str(whl), "--out", str(tmp / "o"), "--patches", str(patches),
                     "--metadata", str(meta), "--verify")
    assert r.returncode == 0, r.stderr
    assert Path(r.stdout.strip()).is_file()


def test_real_wheel_matches_install(tmp_path):
    """On the real 2.13.0 wheel: the patched wheel's torch/ changes are exactly what `install` writes (so the
    suite run against `install` also covers the wheel's code), and only version.py/_patchset_info differ."""
    from tools.common import CACHE_DIR
    from tools.journal import STATE_DIR
    from tools.tests.test_install_real import REAL_PATCHES, clone_real_site

    wheels = sorted((CACHE_DIR / "wheels").glob("torch-2.13.0+cpu-*.whl")) + sorted(Path("/opt/wheels").glob("torch-2.13.0+cpu-*.whl"))
    if not wheels or not (REAL_PATCHES / "v2.13.0" / "series").exists():
        pytest.skip("needs the local torch 2.13.0+cpu wheel and patches/v2.13.0")
    out = build_wheel(wheels[0], tmp_path / "dist", REAL_PATCHES)
    site = clone_real_site(tmp_path / "env")
    r = ft.run_tools("install", "--site-packages", str(site), "--patches", str(REAL_PATCHES))
    assert r.returncode == 0, r.stderr
    import json

    m = json.loads((site / STATE_DIR / "manifest.json").read_text())
    with zipfile.ZipFile(wheels[0]) as zi, zipfile.ZipFile(out) as zo:
        changed = {i.filename for i in zo.infolist() if i.filename.startswith("torch/")
                   and (i.filename not in zi.NameToInfo or zi.getinfo(i.filename).CRC != i.CRC)}
        assert changed == {e["path"] for e in m["files"]} | {"torch/version.py"}
        for e in m["files"]:
            if e["path"] != INFO_MODULE:
                assert zo.read(e["path"]) == (site / e["path"]).read_bytes(), e["path"]
    assert ft.run_tools("uninstall", "--site-packages", str(site)).returncode == 0


# ------------------------------------------------------------------ issue #11: bad input, partial output


def _with_stored_member(whl: Path, dst: Path, member: str) -> Path:
    """A copy of the wheel with `member` stored (uncompressed), so its bytes can be damaged in place."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(whl) as zi, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zo:
        for i in zi.infolist():
            zo.writestr(i, zi.read(i), compress_type=zipfile.ZIP_STORED if i.filename == member else zipfile.ZIP_DEFLATED)
    return dst


def _damage(path: Path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    assert data.count(old) == 1 and len(old) == len(new)
    path.write_bytes(data.replace(old, new))


@pytest.mark.parametrize("member,old,new", [
    ("torch/_inductor/config.py", b"option_3 = 3\n", b"option_3 = 4\n"),  # a member the series patches
    ("torch/__init__.py", b"version import", b"versiom import"),  # a member copied as it is
])
def test_corrupt_member_is_an_error(src, member, old, new):
    whl, patches, meta, tmp = src
    bad = _with_stored_member(whl, tmp / "bad" / whl.name, member)
    _damage(bad, old, new)
    r = ft.run_tools("wheel", "--from", str(bad), "--out", str(tmp / "o"), "--patches", str(patches),
                     "--metadata", str(meta))
    assert r.returncode == 2, r.stderr
    assert f"error: {bad}:{member}: corrupt member" in r.stderr and "Traceback" not in r.stderr
    assert "download the wheel again" in r.stderr
    assert not (tmp / "o").exists()  # issue #28 item 9: no empty --out left behind either


def test_already_patched_wheel_is_named(src):
    whl, patches, meta, tmp = src
    out = build_wheel(whl, tmp / "dist", patches, meta)
    with pytest.raises(PatchsetError, match=r"_patchset_info\.py: this wheel is already patched \(inductor-patchset 0\.1\.0"):
        build_wheel(out, tmp / "dist2", patches, meta)


def test_errors_name_the_file_and_every_non_pristine_member(src):
    whl, patches, meta, tmp = src
    bad_ver = ft.make_wheel(tmp / "w2", version="9.9.0+cpu")
    with pytest.raises(PatchsetError, match=r"torch-9\.9\.0\+cpu\.dist-info/METADATA: unsupported torch version 9\.9\.0"):
        build_wheel(bad_ver, tmp / "dist", patches, meta)
    tampered = ft.tamper_wheel(
        whl, tmp / "t" / whl.name, ("torch/_inductor/config.py", "torch/_inductor/fx_passes/post_grad.py")
    )
    with pytest.raises(PatchsetError) as e:
        build_wheel(tampered, tmp / "dist2", patches, meta)
    assert "config.py" in str(e.value) and "post_grad.py" in str(e.value) and "1 more" in str(e.value)


def test_failed_verify_leaves_nothing_in_out(src, monkeypatch):
    import tools.wheel as wheel_mod

    whl, patches, meta, tmp = src

    def bad_verify(path, fileobj=None):
        raise PatchsetError(path, "sha256 or size differs from RECORD")

    monkeypatch.setattr(wheel_mod, "verify_wheel", bad_verify)
    with pytest.raises(PatchsetError, match="differs from RECORD"):
        build_wheel(whl, tmp / "dist", patches, meta, verify=True)
    assert not (tmp / "dist").exists()  # nothing, not even the directory it made
    assert build_wheel(whl, tmp / "dist", patches, meta).is_file()  # without --verify it is published


def test_killed_build_leaves_no_partial_wheel(src):
    whl, patches, meta, tmp = src
    args = ("wheel", "--from", str(whl), "--out", str(tmp / "o"), "--patches", str(patches), "--metadata", str(meta))
    r = ft.run_tools(*args, env={"TORCH_PATCHSET_CRASH_AFTER": "2"})
    assert r.returncode == 86, r.stderr  # died abruptly (os._exit), like kill -9
    assert list((tmp / "o").iterdir()) == []
    r = ft.run_tools(*args)
    assert r.returncode == 0 and [p.name for p in (tmp / "o").iterdir()] == [Path(r.stdout.strip()).name]


def test_named_part_fallback_cleans_up(src, monkeypatch):
    """Without O_TMPFILE the wheel is staged as <name>.whl.part: removed on error, and a leftover from a killed
    run is removed by the next run."""
    import tools.wheel as wheel_mod
    import tools.wheelzip as wheelzip

    whl, patches, meta, tmp = src
    monkeypatch.delattr(wheelzip.os, "O_TMPFILE", raising=False)
    out_dir = tmp / "dist"
    out_dir.mkdir()
    part = out_dir / "torch-2.13.0+cpu.inductorpatchset.0.1.0-py3-none-any.whl.part"
    part.write_bytes(b"left by a kill -9")

    def boom(k):
        if k >= 2:
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(wheel_mod, "maybe_crash", boom)
    with pytest.raises(OSError):
        build_wheel(whl, out_dir, patches, meta)
    assert list(out_dir.iterdir()) == []  # the stale part was removed, and this run's too
    monkeypatch.setattr(wheel_mod, "maybe_crash", lambda k: None)
    out = build_wheel(whl, out_dir, patches, meta, verify=True)
    assert [p.name for p in out_dir.iterdir()] == [out.name]


def test_truncated_wheel_says_download_it_again_and_leaves_no_out_dir(src):
    """Issue #28 item 9: a truncated download gives a hint, and a failed build leaves no (empty) --out behind."""
    whl, patches, meta, tmp = src
    bad = tmp / "trunc" / whl.name
    bad.parent.mkdir()
    bad.write_bytes(whl.read_bytes()[: whl.stat().st_size // 2])
    out = tmp / "out" / "nested"
    r = ft.run_tools("wheel", "--from", str(bad), "--out", str(out), "--patches", str(patches), "--metadata", str(meta))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"error: {bad}: cannot open as a wheel" in r.stderr and "Download it again" in r.stderr
    assert "pip download --no-deps torch==2.13.0" in r.stderr
    assert not (tmp / "out").exists()


def test_a_failure_while_copying_leaves_no_out_dir(src, monkeypatch):
    import tools.wheel as wheel_mod

    whl, patches, meta, tmp = src
    real = wheel_mod.raw_copy
    calls = []

    def failing(*a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise PatchsetError(whl, "simulated read error")
        return real(*a, **k)

    monkeypatch.setattr(wheel_mod, "raw_copy", failing)
    (tmp / "existing").mkdir()
    with pytest.raises(PatchsetError, match="simulated"):
        build_wheel(whl, tmp / "existing" / "a" / "b", patches, meta)
    assert list((tmp / "existing").iterdir()) == []  # made a/ and b/, removed them; kept the dir that was there
