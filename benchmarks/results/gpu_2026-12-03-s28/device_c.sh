#!/bin/bash
# s28 device call C: ATen's brgemm per da8w4 block vs the kernel's own tile loop (breakdown's tmul_store), 16 threads.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps.log; }
BUILD_ONLY=1 bash benchmarks/da8w4_amx_breakdown.sh /tmp/bd > $OUT/breakdown_build.log 2>&1; el built rc=$?
OMP_PROC_BIND=close OMP_PLACES=cores timeout 120 python3 benchmarks/da8w4_brgemm_blocks_cpu.py --threads 16 --ms 256 --reps 5 > $OUT/brgemm_blocks_t16.md 2>&1; el brgemm rc=$?
OMP_PROC_BIND=close OMP_PLACES=cores timeout 90 /tmp/bd --threads 16 --m 256 --min-time 0.05 --reps 3 > $OUT/breakdown_t16.md 2>&1; el breakdown rc=$?
