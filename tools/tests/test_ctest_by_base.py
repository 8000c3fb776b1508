"""scripts/ctest_by_base.sh, the loop of `dev.sh test`, against a fake ctest and a fake ``python -m tools venv``: the
ctest runs it makes (labels, --no-tests=error), the bases it reports as not tested, the venvs --room-for removed, the
table over every run, and an exit status that is nonzero whenever a run failed or a base was not tested."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from tools.tests import faketorch as ft

SCRIPT = ft.REPO / "scripts" / "ctest_by_base.sh"

# ctest: records its arguments, writes a LastTest.log with one test per label asked for, fails where FAIL_LABEL is
# among its arguments
_CTEST = r'''#!/usr/bin/env bash
printf '%s\n' "$*" >> "$RECORD"
build="$2"; mkdir -p "$build/Testing/Temporary"
name="once"; prev=""
for a in "$@"; do
  if [ "$prev" = -L ]; then name="${a#^}"; name="${name%\$}"; name="${name//\\/}/inductor.test_a"; fi; prev="$a"
done
printf '1/1 Testing: %s\n1/1 Test: %s\nOutput:\n--\n2 passed in 1.00s\n<end of output>\nTest time =   1.0 sec\n--\nTest Passed.\n\n' \
  "$name" "$name" > "$build/Testing/Temporary/LastTest.log"
case "$*" in *"$FAIL_LABEL"*) [ -n "$FAIL_LABEL" ] && exit 8 ;; esac
exit 0
'''

# python: `-m tools venv --room-for B ...` and `-m tools venv --install B` answer from the environment; anything else
# (ctest_summary.py) is the real interpreter
_PY = r'''#!/usr/bin/env bash
if [ "$1 $2 $3" = "-m tools venv" ]; then
  case "$4" in
    --room-for) for r in $REMOVE; do echo "removed $r /repo/.venv-$r"; done
                if [ "$5" = "$NOROOM" ]; then echo "no-room $5 1.0 GiB free, 8 GiB needed"; else echo "room $5"; fi ;;
    --install) if [ "$5" = "$FAILED" ]; then echo "failed $5 pip install failed: no such release"; else echo "ready $5 /repo/.venv-$5"; fi ;;
  esac
  exit 0
fi
exec "$REAL_PY" "$@"
'''


def _run(tmp_path: Path, *bases: str, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("ctest", _CTEST), ("python", _PY)):
        f = bin_dir / name
        f.write_text(text)
        f.chmod(f.stat().st_mode | stat.S_IXUSR)
    record = tmp_path / "ctest-args.txt"
    record.unlink(missing_ok=True)
    full = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PY": str(bin_dir / "python"),
            "REAL_PY": sys.executable, "RECORD": str(record), "FAIL_LABEL": "", "REMOVE": "", "NOROOM": "",
            "FAILED": "", **env}
    r = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "build"), *bases], capture_output=True, text=True,
                       env=full, timeout=120)
    return r, record.read_text().splitlines() if record.exists() else []


def test_every_base_in_turn_and_one_table(tmp_path):
    r, calls = _run(tmp_path, "2.11.0", "2.15.0")
    assert r.returncode == 0, r.stderr
    b = str(tmp_path / "build")
    assert calls == [f"--test-dir {b} --output-on-failure --no-tests=error -j 2 -LE ^v(2\\.11\\.0|2\\.15\\.0)$",
                     f"--test-dir {b} --output-on-failure --no-tests=error -j 2 -L ^v2\\.11\\.0$",
                     f"--test-dir {b} --output-on-failure --no-tests=error -j 2 -L ^v2\\.15\\.0$"]
    assert "[dev] base 2.11.0: its suites in .venv-2.11.0" in r.stderr
    for base in ("v2.11.0", "v2.15.0", "once"):
        assert f"{base}: 1 suites (0 failed), 2 passed" in r.stdout, r.stdout


def test_only_the_primary_base(tmp_path):
    r, calls = _run(tmp_path)
    assert r.returncode == 0 and calls == [f"--test-dir {tmp_path / 'build'} --output-on-failure --no-tests=error -j 2"]


def test_a_base_that_cannot_be_made_is_not_tested_and_the_rest_go_on(tmp_path):
    r, calls = _run(tmp_path, "2.11.0", "2.15.0", FAILED="2.11.0")
    assert r.returncode == 1
    assert "[dev] NOT TESTED: base 2.11.0: pip install failed: no such release" in r.stderr
    assert [c.split()[-1] for c in calls] == ["^v(2\\.11\\.0|2\\.15\\.0)$", "^v2\\.15\\.0$"]


def test_a_failing_run_fails_the_whole_and_the_rest_still_run(tmp_path):
    r, calls = _run(tmp_path, "2.11.0", "2.15.0", FAIL_LABEL="^v2\\.11\\.0$")
    assert r.returncode == 8 and len(calls) == 3


def test_room_lines_are_said(tmp_path):
    r, _ = _run(tmp_path, "2.11.0", "2.15.0", REMOVE="2.14.1", NOROOM="2.15.0")
    assert r.returncode == 0
    assert "[dev] removed .venv-2.14.1 to make room for base 2.11.0; the next run makes it again" in r.stderr
    assert "[dev] warning: base 2.15.0 may not fit: 1.0 GiB free, 8 GiB needed; trying anyway" in r.stderr
