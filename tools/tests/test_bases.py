"""bases: pristine trees from (fake) wheels. No downloads: the wheel is already in the cache's wheels/."""

from __future__ import annotations

import json

import pytest

from tools import bases
from tools.common import PatchsetError
from tools.tests.conftest import fake_torch_files, git, make_wheel


@pytest.fixture
def cache(tmp_path):
    c = tmp_path / "cache"
    make_wheel(
        c / "wheels" / "torch-2.13.0+cpu-py3-none-any.whl",
        "2.13.0+cpu",
        extra={"torch/lib/libtorch.so": b"\x7fELF", "torch/_C/__init__.pyi": b"stub", "torchgen/x.py": b"x = 1\n"},
    )
    return c


def test_build_tree_contents_and_single_commit(cache):
    tree = bases.ensure_base("2.13.0", cache, fetch=False)
    assert tree == cache / "bases" / "v2.13.0"
    assert git(tree, "rev-list", "--count", "HEAD").strip() == "1"
    tracked = git(tree, "ls-files").split()
    assert tracked == sorted(fake_torch_files("2.13.0+cpu"))  # torch/**/*.py only: no .so, .pyi, torchgen
    assert git(tree, "status", "--porcelain", "--untracked-files=all") == ""
    assert (tree / "test").is_dir()  # empty, untracked (see tools/bases.py docstring)
    stamp = json.loads((tree / ".git" / bases.STAMP_NAME).read_text())
    assert stamp["commit"] == git(tree, "rev-parse", "HEAD").strip()
    assert stamp["sha256"] == bases.sha256_file(cache / "wheels" / stamp["wheel"])


def test_build_is_deterministic(cache, tmp_path):
    wheel = bases.find_wheel("2.13.0", cache / "wheels")
    a = bases.build_tree(wheel, tmp_path / "a", "2.13.0")
    b = bases.build_tree(wheel, tmp_path / "b", "2.13.0")
    assert a == b


def test_second_run_is_cheap_and_keeps_the_tree(cache, monkeypatch):
    tree = bases.ensure_base("2.13.0", cache, fetch=False)
    ino = (tree / ".git").stat().st_ino
    # neither re-hash nor rebuild
    monkeypatch.setattr(bases, "sha256_file", lambda p: pytest.fail("re-hashed an unchanged wheel"))
    monkeypatch.setattr(bases, "build_tree", lambda *a, **k: pytest.fail("rebuilt an up-to-date tree"))
    assert bases.ensure_base("2.13.0", cache, fetch=True) == tree  # fetch=True: a cached wheel needs no pip
    assert (tree / ".git").stat().st_ino == ino


def test_changed_wheel_rebuilds(cache):
    tree = bases.ensure_base("2.13.0", cache, fetch=False)
    old = git(tree, "rev-parse", "HEAD").strip()
    files = fake_torch_files("2.13.0+cpu") | {"torch/new_module.py": "y = 2\n"}
    make_wheel(cache / "wheels" / "torch-2.13.0+cpu-py3-none-any.whl", "2.13.0+cpu", files)
    bases.ensure_base("2.13.0", cache, fetch=False)
    assert git(tree, "rev-parse", "HEAD").strip() != old
    assert (tree / "torch/new_module.py").read_text() == "y = 2\n"


def test_hand_made_tree_without_stamp_is_rebuilt(cache):
    tree = bases.ensure_base("2.13.0", cache, fetch=False)
    (tree / ".git" / bases.STAMP_NAME).unlink()
    bases.ensure_base("2.13.0", cache, fetch=False)
    assert (tree / ".git" / bases.STAMP_NAME).is_file()


def test_dirty_tree_is_not_replaced_without_force(cache):
    tree = bases.ensure_base("2.13.0", cache, fetch=False)
    cfg = tree / "torch/_inductor/config.py"
    cfg.write_text("# someone's hook experiment\n")
    with pytest.raises(PatchsetError) as ei:
        bases.ensure_base("2.13.0", cache, fetch=False)
    assert ei.value.where == str(tree) and "torch/_inductor/config.py" in ei.value.reason and "--force" in ei.value.reason
    assert cfg.read_text() == "# someone's hook experiment\n"
    bases.ensure_base("2.13.0", cache, fetch=False, force=True)
    assert cfg.read_text() != "# someone's hook experiment\n"
    assert git(tree, "status", "--porcelain") == ""


def test_wrong_version_wheel_is_rejected_and_nothing_is_built(tmp_path):
    c = tmp_path / "cache"
    make_wheel(c / "wheels" / "torch-2.13.0-py3-none-any.whl", "2.12.0")
    with pytest.raises(PatchsetError, match="expected torch 2.13.0"):
        bases.ensure_base("2.13.0", c, fetch=False)
    assert not (c / "bases" / "v2.13.0").exists()
    assert list((c / "bases").iterdir()) == []  # no temp dir left behind


def test_unsafe_member_is_rejected(tmp_path):
    c = tmp_path / "cache"
    make_wheel(c / "wheels" / "torch-2.13.0-py3-none-any.whl", "2.13.0", extra={"torch/../../evil.py": b"x"})
    with pytest.raises(PatchsetError, match="unsafe member"):
        bases.ensure_base("2.13.0", c, fetch=False)
    assert not (tmp_path / "evil.py").exists()


def test_not_a_wheel(tmp_path):
    c = tmp_path / "cache"
    (c / "wheels").mkdir(parents=True)
    (c / "wheels" / "torch-2.13.0-py3-none-any.whl").write_bytes(b"not a zip")
    with pytest.raises(PatchsetError, match="not a readable wheel"):
        bases.ensure_base("2.13.0", c, fetch=False)


def test_find_wheel_matches_exact_version_only(tmp_path):
    for n in ("torch-2.13.0-cp311-none-any.whl", "torch-2.13.01-py3-none-any.whl", "torch-2.13.0.post1-py3-none-any.whl", "torch-2.1.0-py3-none-any.whl"):
        (tmp_path / n).write_bytes(b"")
    assert bases.find_wheel("2.13.0", tmp_path).name == "torch-2.13.0-cp311-none-any.whl"
    assert bases.find_wheel("2.15.0", tmp_path) is None


def test_missing_tree_message():
    with pytest.raises(PatchsetError, match=r"python -m tools bases --base 9.9.9"):
        bases.require_base_tree("9.9.9")
