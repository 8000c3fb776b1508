"""The CLI as a whole: every subcommand's help, and scripts/dev.sh's usage."""

from __future__ import annotations

import subprocess

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
