"""Cache safety: stock torch, the patched torch and a second patch set version never share a cache entry.

Inductor's FX-graph cache key and AOTAutograd's cache key both include ``torch_key()``
(``torch/_inductor/codecache.py``): sha256 of ``torch.__version__`` plus the source of every module found by
``pkgutil.iter_modules`` under ``torch/`` (recursively through packages). So every file our patches modify or add
under a package is hashed, and so is the ``torch/_inductor/_patchset_info.py`` that ``install`` writes with the
patch set version and series digest: two versions of the patch set get different keys even when their
``torch/`` changes are identical. This test proves it on a real torch (a hard-linked private copy of this
interpreter's torch), with a tiny series made against the real ``torch/_inductor/config.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.tests import faketorch as ft
from tools.tests.test_install_real import clone_real_site

KEY = "from torch._inductor.codecache import torch_key; print(torch_key().hex())"

COMPILE = r"""
import json, torch
from torch._dynamo.utils import counters
torch._dynamo.config.automatic_dynamic_shapes = False
@torch.compile(backend="inductor")
def f(x, w):
    return torch.relu(x @ w) * 2 + 1
f(torch.randn(8, 8), torch.randn(8, 8))  # inference: one FX graph, one AOTAutograd entry
print(json.dumps({"fx": dict(counters["inductor"]), "aot": dict(counters["aot_autograd"])}))
"""


def _series_against_real_torch(tmp: Path, site: Path) -> Path:
    """One patch: a flag line in the real config.py and a new module, made by git format-patch."""
    cfg = (site / "torch/_inductor/config.py").read_text()
    anchor = next(l for l in cfg.splitlines(keepends=True) if l.startswith("debug = "))
    edits = {
        "torch/_inductor/config.py": lambda old: old.replace(anchor, anchor + "patchset_cache_test = False\n", 1),
        "torch/_inductor/fx_passes/patchset_cache_test.py": "def run(gm):\n    return gm\n",
    }
    tree = tmp / "tree"
    tree.mkdir()
    ft._git(tree, "init", "-q")
    (tree / "torch/_inductor").mkdir(parents=True)
    (tree / "torch/_inductor/config.py").write_text(cfg)
    ft._git(tree, "add", "-A")
    ft._git(tree, "commit", "-q", "-m", "base")
    for rel, e in edits.items():
        p = tree / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(e(p.read_text()) if callable(e) else e)
    ft._git(tree, "add", "-A")
    ft._git(tree, "commit", "-q", "-m", "[inductor] cache test")
    out = tmp / "patches" / "v2.13.0"
    out.mkdir(parents=True)
    ft._git(tree, "format-patch", "-q", "--zero-commit", "--no-stat", "-o", str(tmp / "fp"), "HEAD~1")
    next((tmp / "fp").iterdir()).rename(out / "cache-test.patch")
    (out / "series").write_text("cache-test.patch\n")
    return tmp / "patches"


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cachekey")
    site = clone_real_site(tmp)
    if not next(site.glob("torch-*.dist-info")).name.startswith("torch-2.13.0"):
        pytest.skip("needs torch 2.13.0 in this interpreter")
    patches = _series_against_real_torch(tmp, site)
    metas = {}
    for v in ("0.1.0", "0.2.0"):
        (tmp / v).mkdir()
        metas[v] = ft.write_metadata(tmp / v, version=v)
    yield site, patches, metas, tmp
    ft.run_tools("uninstall", "--site-packages", str(site))


def _py(code: str, site: Path, cwd: Path, env: dict | None = None) -> str:
    r = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": str(site), **(env or {})})
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.strip().splitlines()[-1]


def _install(site, patches, meta):
    r = ft.run_tools("install", "--replace", "--site-packages", str(site), "--patches", str(patches),
                     "--metadata", str(meta))
    assert r.returncode == 0, r.stderr


def _uninstall(site):
    r = ft.run_tools("uninstall", "--site-packages", str(site))
    assert r.returncode == 0, r.stderr


def test_torch_key_differs(real):
    site, patches, metas, tmp = real
    stock = _py(KEY, site, tmp)
    assert _py(KEY, site, tmp) == stock  # deterministic, so a difference below is caused by the install
    _install(site, patches, metas["0.1.0"])
    v1 = _py(KEY, site, tmp)
    _install(site, patches, metas["0.2.0"])  # same torch/ changes, only the patch set version differs
    v2 = _py(KEY, site, tmp)
    _uninstall(site)
    assert _py(KEY, site, tmp) == stock  # uninstall really restores the stock key
    assert len({stock, v1, v2}) == 3


def test_fx_graph_and_aot_cache_not_shared(real):
    site, patches, metas, tmp = real
    cache = tmp / "inductor-cache"
    env = {"TORCHINDUCTOR_CACHE_DIR": str(cache), "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
           "TORCHINDUCTOR_AUTOGRAD_CACHE": "1", "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "0"}

    def compile_counts():
        c = json.loads(_py(COMPILE, site, tmp, env))
        return (c["fx"].get("fxgraph_cache_miss", 0), c["fx"].get("fxgraph_cache_hit", 0),
                c["aot"].get("autograd_cache_miss", 0), c["aot"].get("autograd_cache_hit", 0))

    _uninstall(site)
    miss, hit, amiss, ahit = compile_counts()
    assert miss > 0 and hit == 0 and amiss > 0
    miss, hit, amiss, ahit = compile_counts()
    assert miss == 0 and hit > 0 and ahit > 0, "stock->stock must hit, or this test proves nothing"
    _install(site, patches, metas["0.1.0"])
    miss, hit, amiss, ahit = compile_counts()
    assert miss > 0 and hit == 0 and amiss > 0 and ahit == 0, "patched torch reused a stock cache entry"
    _install(site, patches, metas["0.2.0"])
    miss, hit, amiss, ahit = compile_counts()
    assert miss > 0 and hit == 0 and amiss > 0 and ahit == 0, "patch set 0.2.0 reused 0.1.0's cache entry"
    _uninstall(site)
    miss, hit, amiss, ahit = compile_counts()
    assert miss == 0 and hit > 0, "stock again after uninstall: the stock entries must be found again"
