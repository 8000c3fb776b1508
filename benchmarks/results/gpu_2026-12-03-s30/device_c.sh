#!/bin/bash
# s30 device call C (1 x H200): the GPU tests with the one-loop table's 128x128x64, 8 warps, 3 stages first (08b95d8).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
timeout 280 python3 -m tools gpu-test --wheels .whl --out $OUT/gt > $OUT/gpu_test.txt 2>&1
echo "gpu-test rc=$?"; sed -n '/^suite/,$p' $OUT/gpu_test.txt | head -30
