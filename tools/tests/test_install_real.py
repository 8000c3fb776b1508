"""install on the real torch of this interpreter (a copy of its site-packages) and the real series."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tools.install import uninstall
from tools.journal import STATE_DIR
from tools.patchapply import apply_series
from tools.seriesfile import load_series
from tools.tests import faketorch as ft

REPO = ft.REPO


def clone_real_site(dst: Path) -> Path:
    """A cheap private, stock copy of the dev venv's torch: hard links (install/uninstall only ever replace
    files, never write into them, so the originals are untouched); a real copy across filesystems."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None:
        pytest.skip("no torch in this interpreter")
    src_site = Path(spec.origin).parent.parent
    site = dst / "site-packages"
    site.mkdir(parents=True)
    for name in ["torch", *[p.name for p in src_site.glob("torch-*.dist-info")]]:
        r = subprocess.run(["cp", "-al", str(src_site / name), str(site / name)], capture_output=True)
        if r.returncode:
            shutil.copytree(src_site / name, site / name, symlinks=True)
    if (site / STATE_DIR / "manifest.json").exists():  # the dev venv is usually patched: make the copy stock
        assert uninstall(site) == 0
    return site


# the committed series; TORCH_PATCHSET_TEST_PATCHES points these tests at another `generate` output
REAL_PATCHES = Path(os.environ.get("TORCH_PATCHSET_TEST_PATCHES", REPO / "patches"))
REAL_SERIES = REAL_PATCHES / "v2.13.0" / "series"


@pytest.mark.skipif(not REAL_SERIES.exists(), reason="patches/v2.13.0 not generated yet")
def test_real_series_on_real_torch(tmp_path):
    site = clone_real_site(tmp_path)
    if "2.13.0" not in next(site.glob("torch-*.dist-info")).name:
        pytest.skip("this interpreter's torch is not 2.13.0")
    before = ft.tree_digest(site, skip_pycache=True)
    r = ft.run_tools("install", "--site-packages", str(site), "--patches", str(REAL_PATCHES))
    assert r.returncode == 0, r.stderr
    # the patched torch imports and knows its patch set
    code = "import torch._inductor._patchset_info as i, torch._inductor.config; print(i.version)"
    p = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(site)},
                       capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr
    r = ft.run_tools("uninstall", "--site-packages", str(site))
    assert r.returncode == 0, r.stderr
    assert ft.tree_digest(site, skip_pycache=True) == before


@pytest.mark.parametrize("base", ["2.11.0", "2.13.0", "2.14.1", "2.15.0"])
def test_real_series_strict_applier_matches_git_am(base, tmp_path):
    """install/wheel's own applier gives byte for byte what `git am` gives on the pristine base tree."""
    from tools.common import CACHE_DIR

    sdir, tree = REAL_PATCHES / f"v{base}", CACHE_DIR / "bases" / f"v{base}"
    if not (sdir / "series").exists() or not (tree / ".git").exists():
        pytest.skip(f"needs patches/v{base} and the pristine base (python -m tools bases)")
    patches = load_series(sdir)
    clone = tmp_path / "c"
    subprocess.run(["git", "clone", "-q", str(tree), str(clone)], check=True)
    ft._git(clone, "am", "-q", *[str(p.path) for p in patches])

    def pristine(rel):
        r = subprocess.run(["git", "show", f"HEAD~{len(patches)}:{rel}"], cwd=clone, capture_output=True)
        return r.stdout if r.returncode == 0 else None

    changes = apply_series(patches, pristine)
    assert changes
    for rel, (_, after) in changes.items():
        assert after == (clone / rel).read_bytes(), rel


# ------------------------------------------------------------------ issue #11
