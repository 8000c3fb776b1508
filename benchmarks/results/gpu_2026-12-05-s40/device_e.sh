#!/bin/bash
# s40 device call E (1 x H200), .whl and .upstream-tests carried: `gpu-test --stock-first` at 54c978c, the new option's
# first run on a GPU (upstream's classes unchanged on stock 2.11 first, then the series and our hunks).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
W=$OUT/e; mkdir -p $W; S=$(date +%s)
timeout 330 python3 -m tools gpu-test --wheels .whl --workers 6 --upstream-tests .upstream-tests --stock-first --budget 320 --out /tmp/gte > $W/gpu_test_e.log 2>&1
echo "gpu-test rc=$? in $(( $(date +%s) - S ))s"; sed -n '/^suite/,$p' $W/gpu_test_e.log
tar czf $W/gte.tgz -C /tmp gte 2>/dev/null; tar czf $OUT/e.tgz -C $OUT e && rm -rf $W
