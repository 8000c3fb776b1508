#!/bin/bash
# s28 device call B: the brgemm-tiles test at HEAD and pre-fix, the PR test's level check against main's stock
# krnl (must fail), then main's layout vs the PR's files at main's flags, 16 threads.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps.log; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > /dev/null 2>&1 || exit 1
export PYTHONPATH=/tmp/site
TP=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
[ -f /tmp/cs/libda8w4_linear_cpu.so ] || (cmake -G Ninja -S csrc -B /tmp/cs -DCMAKE_PREFIX_PATH=$TP && cmake --build /tmp/cs) > $OUT/build.log 2>&1 &
[ -f /tmp/cspre/libda8w4_linear_cpu.so ] || (cmake -G Ninja -S .ab/pre/csrc -B /tmp/cspre -DCMAKE_PREFIX_PATH=$TP && cmake --build /tmp/cspre) > /dev/null 2>&1 &
wait; el builds done
LIB=/tmp/cs/libda8w4_linear_cpu.so; PRE=/tmp/cspre/libda8w4_linear_cpu.so
PT="python3 -m pytest -q -p no:cacheprovider --timeout 150 -rs"
PRT=upstream-prs/pytorch-ao/test_da8w4_linear_cpu_kernel.py
( DA8W4_LINEAR_CPU_LIB=$LIB timeout 150 $PT csrc/test/test_da8w4_brgemm_tiles.py > $OUT/tiles.log 2>&1; el tiles_head rc=$? ) &
( DA8W4_LINEAR_CPU_LIB=$PRE timeout 150 $PT csrc/test/test_da8w4_brgemm_tiles.py > $OUT/tiles_prefix.log 2>&1; el tiles_prefix rc=$? ) &
K=upstream-prs/pytorch-ao/da8w4_linear_krnl.cpp; cp $K /tmp/krnl.pr; cp .torchao-main/torchao/csrc/cpu/aten_kernels/da8w4_linear_krnl.cpp $K
( TORCHAO_MAIN_SRC=.torchao-main TORCHAO_MAIN_BUILD_DIR=/tmp/tms PYTHONPATH=csrc/test:/tmp/site timeout 200 $PT -p torchao_main_plugin $PRT -k dispatch_levels > $OUT/main_stock_levels.log 2>&1; el stock_levels rc=$? )
cp /tmp/krnl.pr $K; wait; cmp /tmp/krnl.pr $K && el krnl restored
DA8W4_LINEAR_CPU_LIB=$LIB timeout 380 python3 benchmarks/da8w4_vs_torchao_cpu.py --main-src .torchao-main --port --threads 16 --shapes qkv gate_up down --ms 1 4 256 1024 --rounds 1 --json $OUT/main_vs_pr_t16.json > $OUT/main_vs_pr_t16.log 2>&1; el bench rc=$?
cp $OUT/main_vs_pr_t16.json.partial $OUT/partial.json 2>/dev/null; rm -f $OUT/main_vs_pr_t16.json.partial
el all done
