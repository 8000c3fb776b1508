#!/usr/bin/env bash
# CTest `wheel_smoke`: build the patched wheel from the stock torch 2.13.0 wheel, pip install it into a
# fresh venv, check the version label and _patchset_info, and run the upstream-style tests against it.
# Usage: bash scripts/wheel_smoke.sh WORKDIR [test files...]  (default tests: every test/inductor/test_*.py)
# TORCH_WHEEL=path overrides the stock wheel (default: the cached/local torch-2.13.0+cpu wheel, else pip download).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="${1:?usage: wheel_smoke.sh WORKDIR [tests...]}"; shift
PY="${PYTHON:-$ROOT/.venv/bin/python}"
log() { printf '[wheel_smoke] %s\n' "$*" >&2; }
rm -rf "$WORK"; mkdir -p "$WORK/dist"
t0=$SECONDS

whl="${TORCH_WHEEL:-}"
if [ -z "$whl" ]; then
  for d in "${TORCH_PATCHSET_CACHE:-$HOME/.cache/torch-patchset}/wheels" /opt/wheels; do
    for f in "$d"/torch-2.13.0+cpu-*.whl; do [ -f "$f" ] && whl="$f" && break 2; done
  done
fi
if [ -z "$whl" ]; then
  log "no local torch 2.13.0 wheel; pip download"
  "$PY" -m pip download -q --no-deps torch==2.13.0 -d "$WORK/src"
  whl="$(ls "$WORK"/src/torch-2.13.0*.whl)"
fi

log "building the patched wheel from $whl"
(cd "$ROOT" && "$PY" -m tools wheel --from "$whl" --out "$WORK/dist" --verify) > "$WORK/wheel.txt"
patched="$(tail -n1 "$WORK/wheel.txt")"
log "built $(basename "$patched") in $((SECONDS - t0))s"

t1=$SECONDS
python3 -m venv "$WORK/venv"
V="$WORK/venv/bin/python"
# a real pip install with dependency resolution (deps from the configured index / pip cache)
grep -vE '^(cmake|ninja)' "$ROOT/requirements-dev.txt" > "$WORK/requirements-test.txt"
log "fresh venv: pip install $(basename "$patched") + test requirements (about a minute)"
"$V" -m pip install -q "$patched" -r "$WORK/requirements-test.txt"
log "fresh venv + pip install took $((SECONDS - t1))s"

version="$(basename "$patched" | cut -d- -f2)"
"$V" - "$version" <<'PY'
import sys, importlib.metadata as md
import torch, torch._inductor._patchset_info as info
want = sys.argv[1]
assert torch.__version__ == want == md.version("torch"), (torch.__version__, want, md.version("torch"))
assert "inductorpatchset" in want and info.installed_by == "wheel", info
print(f"torch {torch.__version__} from {torch.__file__}; patch set {info.name} {info.version}, {len(info.series)} patches")
PY

if [ $# -eq 0 ]; then set -- "$ROOT"/test/inductor/test_*.py; fi
log "running ${#} test file(s) against the wheel-installed torch, one at a time"
cd "$ROOT"   # so test/conftest.py is picked up, like upstream
i=0; failed=()
for t in "$@"; do
  i=$((i + 1)); t2=$SECONDS
  log "[$i/$#] ${t#"$ROOT"/} ..."
  if "$V" -m pytest -q -p no:cacheprovider "$t" > "$WORK/pytest-$i.txt" 2>&1; then
    log "[$i/$#] ${t#"$ROOT"/}: $(tail -n1 "$WORK/pytest-$i.txt") ($((SECONDS - t2))s)"
  else
    cat "$WORK/pytest-$i.txt"
    log "[$i/$#] ${t#"$ROOT"/}: FAILED: $(tail -n1 "$WORK/pytest-$i.txt") ($((SECONDS - t2))s)"
    failed+=("${t#"$ROOT"/}")
  fi
done
rm -rf "$WORK/venv"   # about 1.2 GB; the logs and the patched wheel stay in $WORK
log "done in $((SECONDS - t0))s: $(( $# - ${#failed[@]} )) of $# test file(s) passed${failed:+; failed: ${failed[*]}}"
[ ${#failed[@]} -eq 0 ]
