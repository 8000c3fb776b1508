#!/usr/bin/env bash
# Developer entry point. Usage: bash scripts/dev.sh <command>
#   setup   create/refresh .venv (torch==2.13.0 + requirements-dev.txt), install the patch set into it,
#           configure and build csrc/ with CMake + Ninja (idempotent; quick when already done)
#   demo    setup, then `python -m tools demo` (every feature's examples/*.py)
#   test    setup (+ pristine bases for `tools check`), then every CTest suite
#   status  `python -m tools status` for .venv
#   clean   uninstall the patch set from .venv and remove build/ (keeps .venv)
# Environment: VENV (default .venv), TORCH_SPEC (default torch==2.13.0), CTEST_PARALLEL_LEVEL (default 2: CI has 2 cores).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
BUILD="$ROOT/build"

step() { printf '[dev] %s\n' "$*" >&2; }

ensure_venv() {
  if [ ! -x "$PY" ]; then
    step "creating $VENV"
    python3 -m venv "$VENV"
  fi
  export PATH="$VENV/bin:$PATH"
  # torch: (re)install only when missing or not the wanted version; never imports torch
  local want have
  want="${TORCH_SPEC#torch==}"
  have="$("$PY" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null || true)"
  if [ "${have%%+*}" != "$want" ]; then
    step "pip install $TORCH_SPEC (have: ${have:-none})"
    "$PY" -m pip install -q "$TORCH_SPEC"
  fi
  local stamp="$VENV/.requirements-dev.sha256" sum
  sum="$(sha256sum requirements-dev.txt | cut -d' ' -f1)"
  if [ "$(cat "$stamp" 2>/dev/null || true)" != "$sum" ]; then
    step "pip install -r requirements-dev.txt"
    "$PY" -m pip install -q -r requirements-dev.txt
    echo "$sum" > "$stamp"
  fi
}

install_patchset() {
  # a no-op when this exact series is installed; swaps in the new one when patches/ changed
  "$PY" -m tools install --replace
}

build_csrc() {
  if [ -f "$BUILD/CMakeCache.txt" ] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$BUILD/CMakeCache.txt"; then
    step "build/ was configured with another generator; reconfiguring from scratch"
    rm -rf "$BUILD"
  fi
  if [ ! -f "$BUILD/build.ninja" ]; then
    step "configuring build/ (CMake + Ninja)"
    cmake -G Ninja -S . -B "$BUILD" -DPython3_EXECUTABLE="$PY" \
      -DCMAKE_PREFIX_PATH="$("$PY" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')"
  fi
  cmake --build "$BUILD"   # re-globs test files (CONFIGURE_DEPENDS) and rebuilds csrc/ only if needed
}

setup() {
  ensure_venv
  install_patchset
  build_csrc
}

cmd="${1:-}"
case "$cmd" in
  setup) setup ;;
  demo)
    setup
    exec "$PY" -m tools demo ;;
  test)
    ensure_venv
    step "pristine base trees for \`tools check\` (cached under ~/.cache/torch-patchset)"
    "$PY" -m tools bases || step "warning: \`tools bases\` failed; patchset_check will report it, the other suites still run"
    install_patchset
    build_csrc
    exec ctest --test-dir "$BUILD" --output-on-failure -j "${CTEST_PARALLEL_LEVEL:-2}" ;;
  status)
    ensure_venv
    exec "$PY" -m tools status ;;
  clean)
    [ -x "$PY" ] && "$PY" -m tools uninstall
    rm -rf "$BUILD" ;;
  *)
    sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2 ;;
esac
