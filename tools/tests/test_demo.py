"""demo: runs each feature's examples/ script, tolerates a missing one, refuses when nothing is installed."""

from __future__ import annotations

import pytest

import tools.demo as demo
from tools.common import PatchsetError
from tools.install import install
from tools.tests import faketorch as ft


def test_demo(tmp_path, monkeypatch, capsys):
    site = ft.make_site(tmp_path / "env")
    patches = ft.make_series(tmp_path / "src")
    meta = ft.write_metadata(tmp_path)
    meta.write_text(meta.read_text() + "".join(
        f'\n[[patch]]\nname = "{n}"\nsubject = "s"\ncategory = "c"\nupstream-status = "Pending"\n'
        f'bases = ["2.13.0"]\nlast-update = "2026-01-01"\nbody = "b"\n'
        for n in ("inductor-feature-a", "inductor-feature-b", "inductor-feature-c")))
    ex = tmp_path / "examples"
    ex.mkdir()
    (ex / "feature_a.py").write_text("def main():\n    print('A-COUNTERS fired=1')\n")
    (ex / "feature_c.py").write_text("def main():\n    raise SystemExit(3)\n")
    (ex / "extra.py").write_text("def main():\n    print('EXTRA')\n")
    monkeypatch.setattr(demo, "find_site_packages", lambda: site)
    kw = dict(metadata=meta, examples=ex)
    with pytest.raises(PatchsetError, match="not installed"):
        demo.run_demos(**kw)
    assert install(site, patches, meta) == 0
    capsys.readouterr()
    rc = demo.run_demos(**kw)
    out = capsys.readouterr().out
    assert rc == 1  # feature_c failed
    assert "== inductor-feature-a" in out and "(no demo script yet)" in out
    assert "1 failed, 1 missing" in out and "2 ok" in out
    assert demo.run_demos(only=["feature-a"], **kw) == 0
    assert demo.run_demos(strict=True, only=["feature-a", "feature-b"], **kw) == 1

