#!/bin/bash
# Build and run the da8w4 AMX cost breakdown (benchmarks/da8w4_amx_breakdown.cpp) on an AMX host.
# usage: bash benchmarks/da8w4_amx_breakdown.sh [out binary] [-- run args]   (defaults below)
# Add -DDA8W4_AMX_EMULATE via EXTRA= to build it on a CPU without AMX (numbers meaningless). BUILD_ONLY=1 builds and
# stops (CTest's benchmarks.da8w4_amx_breakdown_builds: it includes csrc/da8w4/kernel_amx.cpp as source).
set -e
HERE="$(cd "$(dirname "$0")" && pwd)"
OUTB="${1:-/tmp/da8w4_amx_breakdown}"; shift || true
g++ -std=c++17 -O3 -fopenmp -ffp-contract=off -Wall -Wno-uninitialized -Wno-maybe-uninitialized \
  -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mamx-tile -mamx-int8 \
  -DDA8W4_HAVE_AMX -DDA8W4_HAVE_AVX512VNNI -I"$HERE/../csrc/da8w4" $EXTRA \
  "$HERE/da8w4_amx_breakdown.cpp" -o "$OUTB"
[ -n "$BUILD_ONLY" ] && exit 0
[ "$1" = "--" ] && shift
OMP_PROC_BIND=close OMP_PLACES=cores "$OUTB" ${@:---threads $(nproc) 1 --m 128 512 --min-time 0.05 --reps 3}
