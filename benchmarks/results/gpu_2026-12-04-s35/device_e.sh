#!/bin/bash
# s35 device call E (1 x H200): the GPU tests with the max_autotune decision change (compute-bound sites read their
# produced pieces from their own buffers under max_autotune too).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
timeout 215 python3 -m tools gpu-test --wheels .whl --out $OUT/gte > $OUT/gpu_test_e.log 2>&1
echo "gpu-test rc=$?"; grep -A8 '^suite' $OUT/gpu_test_e.log; rm -rf $OUT/gte/*.xml
