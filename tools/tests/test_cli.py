"""The CLI as a whole: every subcommand's help, and scripts/dev.sh's usage."""

from __future__ import annotations

import subprocess
import sys

from tools.tests import faketorch as ft

REPO = ft.REPO


def test_help_describes_each_subcommand():
    r = ft.run_tools("--help")
    assert r.returncode == 0 and "Subcommand dispatch" not in r.stdout and "error: <file>: <reason>" in r.stdout
    for cmd, words in {"install": "RECORD", "uninstall": "byte for byte", "status": "MODIFIED",
                       "wheel": "local version"}.items():
        r = ft.run_tools(cmd, "--help")
        assert r.returncode == 0 and words in r.stdout, (cmd, r.stdout)
    r = ft.run_tools("uninstall", "--patches", "x")
    assert r.returncode == 2 and "unrecognized arguments: --patches" in r.stderr


def test_dev_sh_usage():
    r = subprocess.run(["bash", str(REPO / "scripts/dev.sh")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "Usage: bash scripts/dev.sh <command>" in r.stderr and "set -euo" not in r.stderr


def test_runnable_from_anywhere_by_path(tmp_path):
    """Issue #28 item 14: `python -m tools` needs the repo root as cwd (Python's own "No module named tools" otherwise);
    `python <repo>/tools` works from any directory, with relative paths taken from there."""
    # a python without the dev venv's .pth (-S: no site-packages; issue 34 item 16 made the venv's own work anywhere)
    r = subprocess.run([sys.executable, "-S", "-m", "tools", "--help"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 1 and "No module named tools" in r.stderr  # what the newcomer saw; Python's, not ours
    r = subprocess.run([sys.executable, str(REPO / "tools"), "--help"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert f"usage: python {REPO / 'tools'}" in r.stdout and "from anywhere else: `python /path/to/repo/tools" in r.stdout
    site = ft.make_site(tmp_path / "env")
    r = subprocess.run([sys.executable, str(REPO / "tools"), "status", "--site-packages", "env/site-packages"],
                       cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert f"torch 2.13.0+cpu at {site}" in r.stdout and "stock torch" in r.stdout
