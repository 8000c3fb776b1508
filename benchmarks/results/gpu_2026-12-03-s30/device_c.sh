#!/bin/bash
# s30 device call C (1 x H200): the one-loop table with 128x128x64, 8 warps, 3 stages first (the GPU tests; gnn inference and training).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps_c.log; }
timeout 230 python3 -m tools gpu-test --wheels .whl --out $OUT/gt > $OUT/gpu_test.txt 2>&1
el "gpu-test rc=$?"; grep -A8 '^suite' $OUT/gpu_test.txt
timeout 150 python3 benchmarks/cat_linear_workloads_gpu.py --workloads gnn --modes inference training --rounds 3 --budget-s 140 --out $OUT/wl_c.json > $OUT/wl_c.log 2>&1
el "wl rc=$?"; grep '^\[' $OUT/wl_c.log
