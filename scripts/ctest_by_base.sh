#!/usr/bin/env bash
# The suites of `dev.sh test`, one base at a time: bash scripts/ctest_by_base.sh BUILD_DIR [OTHER_BASE ...]
#   1. one ctest run for the primary base and the suites that run once (every test not labelled v<other base>);
#   2. for each other base: `tools venv --room-for` first (where its venv would not fit beside the other bases'
#      venvs, those are removed, a line each), then `tools venv --install` (.venv-<base>, the patch set installed),
#      then one ctest run of its suites (label v<base>); a base that cannot be made is NOT TESTED, with the reason;
#   3. one table over all the runs (scripts/ctest_summary.py).
# Exit status: 0 when every run passed and every base was tested; else nonzero. PY: the primary venv's python;
# CTEST_PARALLEL_LEVEL (default 2).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:?usage: ctest_by_base.sh BUILD_DIR [OTHER_BASE ...]}"; shift
PY="${PY:?set PY to the primary venv python}"
step() { printf '[dev] %s\n' "$*" >&2; }
cd "$ROOT"

rc=0 n=0 logs=()
mkdir -p "$BUILD/Testing"
rm -f "$BUILD"/Testing/batch-*.log
# run_batch CTEST-ARGS...: one ctest run; its log is kept for the table at the end
run_batch() {
  n=$((n + 1))
  rm -f "$BUILD/Testing/Temporary/LastTest.log"
  ctest --test-dir "$BUILD" --output-on-failure --no-tests=error -j "${CTEST_PARALLEL_LEVEL:-2}" "$@" || rc=$?
  if [ -f "$BUILD/Testing/Temporary/LastTest.log" ]; then
    cp "$BUILD/Testing/Temporary/LastTest.log" "$BUILD/Testing/batch-$n.log" && logs+=("$BUILD/Testing/batch-$n.log")
  fi
}
labels() { printf '%s\n' "$@" | sed 's/\./\\./g' | paste -sd'|'; }

if [ $# -gt 0 ]; then run_batch -LE "^v($(labels "$@"))\$"; else run_batch; fi
for b in "$@"; do
  room="$("$PY" -m tools venv --room-for "$b" "$@")" || room=""
  while read -r what other _; do
    if [ "$what" = removed ]; then step "removed .venv-$other to make room for base $b; the next run makes it again"; fi
  done <<<"$room"
  last="$(tail -n1 <<<"$room")"
  if [ "${last%% *}" = no-room ]; then
    step "warning: base $b may not fit: $(cut -d' ' -f3- <<<"$last"); trying anyway"
  fi
  made="$("$PY" -m tools venv --install "$b")" || true
  if [ "$(awk '{ print $1 }' <<<"$made")" = ready ]; then
    step "base $b: its suites in .venv-$b"
    run_batch -L "^v$(labels "$b")\$"
  else
    why="$(sed -n 's/^failed [^ ]* //p' <<<"$made")"
    step "NOT TESTED: base $b: ${why:-see the errors above}"
    [ "$rc" = 0 ] && rc=1
  fi
done
"$PY" scripts/ctest_summary.py "$BUILD" "${logs[@]}" || true
exit "$rc"
