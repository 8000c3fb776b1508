"""Per-base and per-suite counts of CTest runs: ``python scripts/ctest_summary.py BUILD_DIR [LOG ...]``.

Reads each LOG, by default ``BUILD_DIR/Testing/Temporary/LastTest.log`` (CTest keeps every test's output there;
``dev.sh test`` keeps one per ctest run, one run per base), and prints one row per
suite with pytest's passed/failed/skipped counts and time, grouped by base (tests named ``v<base>/...``; the rest,
``tools_tests``, ``csrc.*``, ``patchset_check``, ``wheel_smoke``, run once), then one total line per base.
Exit status 0; it only reports (CTest's own exit status is the verdict).
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)\b")
_KEYS = ("passed", "failed", "skipped", "error")


def parse(log: str) -> list[dict]:
    """One dict per test: name, status, seconds, and pytest's counts when it is a pytest run."""
    rows = []
    for block in re.split(r"^\d+/\d+ Testing: ", log, flags=re.M)[1:]:
        name = block.splitlines()[0].strip()
        out = block.partition("\nOutput:\n")[2].partition("<end of output>")[0]
        seconds = re.search(r"^Test time =\s*([\d.]+) sec", block, re.M)
        status = "passed" if re.search(r"^Test Passed\.", block, re.M) else "FAILED"
        counts: dict[str, int] = {}
        # pytest's closing line, e.g. "== 43 passed, 2 skipped, 14 warnings in 33.5s ==" or "1 failed, 2 passed in 3s";
        # a suite that runs pytest several times (wheel_smoke: once per file) has one per run: they add up.
        for line in out.splitlines():
            if re.search(r"\b(passed|failed|skipped|errors?)\b", line) and re.search(r" in [\d.]+s\b", line):
                for n, what in _COUNT.findall(line):
                    key = "error" if what.startswith("error") else what
                    counts[key] = counts.get(key, 0) + int(n)
        rows.append({"name": name, "status": status, "seconds": float(seconds.group(1)) if seconds else 0.0,
                     "counts": counts})
    return rows


def render(rows: list[dict]) -> str:
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        base, sep, suite = r["name"].partition("/")
        groups[base if sep else "once"].append({**r, "suite": suite if sep else r["name"]})
    # columns as wide as their longest entry, so a long suite or base name never shifts the ones after it
    wb = max([4, *(len(b) for b in groups)])
    ws = max([5, *(len(r["suite"]) for g in groups.values() for r in g)])
    lines = [f"{'base':<{wb}} {'suite':<{ws}} {'status':<7} {'passed':>6} {'failed':>6} {'skipped':>7} {'error':>5} {'time':>7}"]
    totals = []
    for base in sorted(groups, key=lambda b: (b == "once", b)):
        tot = dict.fromkeys(_KEYS, 0)
        secs = 0.0
        for r in sorted(groups[base], key=lambda r: r["suite"]):
            c = r["counts"]
            for k in _KEYS:
                tot[k] += c.get(k, 0)
            secs += r["seconds"]
            cells = [str(c.get(k, "-")) if c else "-" for k in _KEYS]
            lines.append(f"{base:<{wb}} {r['suite']:<{ws}} {r['status']:<7} {cells[0]:>6} {cells[1]:>6} {cells[2]:>7} "
                         f"{cells[3]:>5} {r['seconds']:>6.0f}s")
        failed_suites = sum(r["status"] != "passed" for r in groups[base])
        totals.append(f"{base}: {len(groups[base])} suites ({failed_suites} failed), {tot['passed']} passed, "
                      f"{tot['failed']} failed, {tot['skipped']} skipped, {tot['error']} errors, {secs:.0f}s of test time")
    return "\n".join(lines + ["", "per base:"] + [f"  {t}" for t in totals])


def main(argv: list[str]) -> int:
    build = Path(argv[1] if len(argv) > 1 else "build")
    logs = [Path(a) for a in argv[2:]] or [build / "Testing" / "Temporary" / "LastTest.log"]
    rows = []
    for log in logs:
        if not log.is_file():
            print(f"ctest_summary: {log}: no CTest log (did ctest run?)", file=sys.stderr)
            continue
        rows += parse(log.read_text(errors="replace"))
    if rows:
        print(render(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
