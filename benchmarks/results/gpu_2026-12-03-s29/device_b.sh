#!/bin/bash
# s29 device call B: the scratch change's cost (before / after in one run), then ATen's brgemm per block and the breakdown at 1 and 16 threads.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps.log; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/torchao*.whl .whl/expecttest*.whl > /dev/null 2>&1 || exit 1
export PYTHONPATH=/tmp/site
TP=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
[ -f /tmp/cs/libda8w4_linear_cpu.so ] || (cmake -G Ninja -S csrc -B /tmp/cs -DCMAKE_PREFIX_PATH=$TP && cmake --build /tmp/cs) > $OUT/build.log 2>&1 &
[ -f /tmp/cspre/libda8w4_linear_cpu.so ] || (cmake -G Ninja -S .ab/pre/csrc -B /tmp/cspre -DCMAKE_PREFIX_PATH=$TP && cmake --build /tmp/cspre) > /dev/null 2>&1 &
[ -x /tmp/bd ] || (BUILD_ONLY=1 bash benchmarks/da8w4_amx_breakdown.sh /tmp/bd > /dev/null 2>&1) &
wait; el builds done
LIB=/tmp/cs/libda8w4_linear_cpu.so; PRE=/tmp/cspre/libda8w4_linear_cpu.so
DA8W4_LINEAR_CPU_LIB=$LIB timeout ${AB_S:-300} python3 benchmarks/da8w4_vs_torchao_cpu.py --torchao-src .ab/torchao_da8w4 --variant pre:DA8W4_LINEAR_CPU_LIB=$PRE --threads 16 --shapes qkv gate_up down --ms 1 4 256 1024 --rounds ${ROUNDS:-2} --json $OUT/scratch_ab_t16.json > $OUT/scratch_ab_t16.log 2>&1; el ab rc=$?
cp $OUT/scratch_ab_t16.json.partial $OUT/scratch_ab_partial.json 2>/dev/null; rm -f $OUT/scratch_ab_t16.json.partial
OMP_PROC_BIND=close OMP_PLACES=cores timeout 100 python3 benchmarks/da8w4_brgemm_blocks_cpu.py --threads 1 16 --shapes qkv --ms 256 --rows 128 --reps 5 > $OUT/brgemm_blocks_t1_t16.md 2>&1; el brgemm rc=$?
for t in 1 16; do OMP_PROC_BIND=close OMP_PLACES=cores timeout 60 /tmp/bd --threads $t --m 256 --min-time 0.05 --reps 3 > $OUT/breakdown_t$t.md 2>&1; el breakdown t$t rc=$?; done
el all done
