#!/usr/bin/env bash
# Developer entry point. Usage: bash scripts/dev.sh <command>
#   setup   create/refresh .venv (requirements/base-<primary>.txt: torch==2.13.0 + requirements-dev.txt), install the
#           patch set into it, configure and build csrc/ with CMake + Ninja (idempotent; quick when already done)
#   demo    setup, then `python -m tools demo` (every feature's examples/*.py; extra arguments filter by name)
#   test    setup, the pristine base trees, one venv per other base (.venv-<base> from requirements/base-<base>.txt:
#           torch from PyPI with its dependencies, the patch set installed), then every CTest suite: tools and csrc
#           once, the test/inductor suites on every base (labels v<base>), one base after another; per-base and
#           per-suite counts at the end. A base whose torch cannot be fetched is reported as NOT TESTED (with the
#           reason) and the exit status is 1. Where the disk cannot hold a base's venv beside the others
#           (`tools venv --room-for`), the others are removed first, each with a line saying so
#           (scripts/ctest_by_base.sh runs the suites).
#   status  `python -m tools status` for .venv
#   clean   uninstall the patch set from .venv and remove build/ (keeps .venv)
# Environment: VENV (default .venv), CTEST_PARALLEL_LEVEL (default 2: CI has 2 cores), PATCHSET_TEST_BASES (default:
# every base in patchset.toml; e.g. "2.13.0" for the primary base only).
# The venvs are made by `python -m tools venv` (tools/baseenv.py): it installs each base's pinned torch even where a
# site-wide pip constraint file caps torch below it, and says so in one line naming that file.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"
BUILD="$ROOT/build"
PRIMARY="$(python3 -c 'import tomllib; print(tomllib.load(open("patchset.toml", "rb"))["patchset"]["primary-base"])')"

step() { printf '[dev] %s\n' "$*" >&2; }

# .venv: the primary base's torch and requirements-dev.txt (requirements/base-<primary>.txt); reinstalled only when
# torch is missing or another release, or a requirements file changed. Needs only python3 (3.11), not torch.
ensure_venv() {
  python3 -m tools venv "$PRIMARY" --dir "$VENV" > /dev/null
  export PATH="$VENV/bin:$PATH"
}

# The bases in patchset.toml other than the primary one, or PATCHSET_TEST_BASES.
other_bases() {
  local all
  all="${PATCHSET_TEST_BASES:-$("$PY" -c 'import tomllib; print(" ".join(tomllib.load(open("patchset.toml", "rb"))["patchset"]["bases"]))')}"
  for b in $all; do [ "$b" != "$PRIMARY" ] && printf '%s\n' "$b"; done
  return 0
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

# What setup has ahead of it: "first" (no .venv, no build/, or the patch set not installed: a first run, or after
# `clean`) or "re-check" (everything there: it only checks, and redoes what changed). `dev.sh setup-kind` prints it.
setup_kind() {
  if [ -x "$PY" ] && [ -f "$BUILD/build.ninja" ] &&
     compgen -G "$VENV/lib/python3*/site-packages/torch/_inductor/.patchset/manifest.json" > /dev/null; then
    echo re-check
  else
    echo first
  fi
}

setup() {
  ensure_venv
  install_patchset
  build_csrc
}

cmd="${1:-}"
case "$cmd" in
  setup) setup ;;
  setup-kind) setup_kind ;;
  demo)
    t0=$SECONDS
    kind="$(setup_kind)"
    setup
    if [ "$kind" = first ]; then
      step "setup took $((SECONDS - t0))s (a first setup: venv, patch set, csrc build); running the demos"
    else
      step "setup took $((SECONDS - t0))s (a re-check when nothing changed); running the demos"
    fi
    exec "$PY" -m tools demo "${@:2}" ;;
  test)
    t0=$SECONDS
    ensure_venv
    step "pristine base trees for \`tools check\` (cached under ~/.cache/torch-patchset; a CUDA wheel of ~530 MB" \
         "per base not yet cached)"
    "$PY" -m tools bases || step "warning: \`tools bases\` failed for a base (see above); patchset_check will report it," \
                                 "the other suites still run"
    install_patchset
    bases="$(other_bases | tr '\n' ' ' | sed 's/ $//')"
    build_csrc "$bases"
    step "setup took $((SECONDS - t0))s; running the suites one base at a time (ctest -j ${CTEST_PARALLEL_LEVEL:-2})"
    rc=0
    PY="$PY" bash "$ROOT/scripts/ctest_by_base.sh" "$BUILD" $bases || rc=$?
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
