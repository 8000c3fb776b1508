#!/usr/bin/env bash
# Developer entry point. Usage: bash scripts/dev.sh <command>
#   setup   create/refresh .venv (torch==2.13.0 + requirements-dev.txt), install the patch set into it,
#           configure and build csrc/ with CMake + Ninja (idempotent; quick when already done)
#   demo    setup, then `python -m tools demo` (every feature's examples/*.py)
#   test    setup, the pristine base trees, one venv per other base (.venv-<base>: torch from PyPI with its
#           dependencies, the patch set installed), then every CTest suite: tools and csrc once, the
#           test/inductor suites on every base (labels v<base>); per-base and per-suite counts at the end
#   status  `python -m tools status` for .venv
#   clean   uninstall the patch set from .venv and remove build/ (keeps .venv)
# Environment: VENV (default .venv), TORCH_SPEC (default torch==2.13.0), CTEST_PARALLEL_LEVEL (default 2: CI has 2
# cores), PATCHSET_TEST_BASES (default: every base in patchset.toml; e.g. "2.13.0" for the primary base only).
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

# The bases in patchset.toml other than the primary one (TORCH_SPEC's), or PATCHSET_TEST_BASES.
other_bases() {
  local all
  all="${PATCHSET_TEST_BASES:-$("$PY" -c 'import tomllib; print(" ".join(tomllib.load(open("patchset.toml", "rb"))["patchset"]["bases"]))')}"
  for b in $all; do [ "$b" != "${TORCH_SPEC#torch==}" ] && printf '%s\n' "$b"; done
  return 0
}

# .venv-<base>: that release's torch (PyPI's are CUDA builds: with their nvidia-* wheels they import and compile on a
# CPU), requirements-dev.txt and the patch set. Reinstalled only when missing or changed; pip's cache keeps repeat
# runs on one machine off the network. The torch wheel is the one `tools bases` already fetched.
ensure_base_venv() {
  local base="$1" venv="$ROOT/.venv-$1" have whl stamp sum
  if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
  fi
  have="$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null || true)"
  stamp="$venv/.requirements-dev.sha256"
  sum="$(sha256sum requirements-dev.txt | cut -d' ' -f1)"
  if [ "${have%%+*}" != "$base" ] || [ "$(cat "$stamp" 2>/dev/null || true)" != "$sum" ]; then
    whl="$(ls "${TORCH_PATCHSET_CACHE:-$HOME/.cache/torch-patchset}"/wheels/torch-"$base"-*.whl 2>/dev/null | head -n1 || true)"
    step "venv for torch $base: pip install ${whl:-torch==$base} + its dependencies (CUDA build: about 2.5 GB of" \
         "nvidia-* wheels to download unless pip's cache has them, 5 GB on disk; a few minutes)"
    "$venv/bin/python" -m pip install -q "${whl:-torch==$base}" -r requirements-dev.txt
    echo "$sum" > "$stamp"
  fi
  "$venv/bin/python" -m tools install --replace
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
  # build_csrc [BASES]: with an argument, (re)configure so that test/inductor also runs on exactly BASES
  local bases="${1:-}" reconf=0
  [ ! -f "$BUILD/build.ninja" ] && reconf=1
  if [ $# -gt 0 ] && ! grep -qxF "PATCHSET_OTHER_BASES:STRING=$bases" "$BUILD/CMakeCache.txt" 2>/dev/null; then reconf=1; fi
  if [ "$reconf" = 1 ]; then
    step "configuring build/ (CMake + Ninja)${bases:+; test/inductor also on $bases}"
    cmake -G Ninja -S . -B "$BUILD" -DPython3_EXECUTABLE="$PY" ${1+-DPATCHSET_OTHER_BASES="$bases"} \
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
    t0=$SECONDS
    ensure_venv
    step "pristine base trees for \`tools check\` (cached under ~/.cache/torch-patchset; a CUDA wheel of ~530 MB" \
         "per base not yet cached)"
    "$PY" -m tools bases || step "warning: \`tools bases\` failed; patchset_check will report it, the other suites still run"
    install_patchset
    bases="$(other_bases | tr '\n' ' ' | sed 's/ $//')"
    for b in $bases; do ensure_base_venv "$b"; done
    build_csrc "$bases"
    step "setup took $((SECONDS - t0))s; running the suites (ctest -j ${CTEST_PARALLEL_LEVEL:-2})"
    rc=0
    ctest --test-dir "$BUILD" --output-on-failure -j "${CTEST_PARALLEL_LEVEL:-2}" || rc=$?
    "$PY" scripts/ctest_summary.py "$BUILD" || true
    step "total $((SECONDS - t0))s"
    exit "$rc" ;;
  status)
    ensure_venv
    exec "$PY" -m tools status ;;
  clean)
    [ -x "$PY" ] && "$PY" -m tools uninstall
    rm -rf "$BUILD" ;;
  *)
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2
    exit 2 ;;
esac
