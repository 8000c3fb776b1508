#!/bin/bash
# s36 device call C (1 x H200): the weight-gradient CUDA tests, with the one added in 637e3ff (call B's gpu-test ran the
# two older ones only: gpu-test selects the tests whose name says cuda, and that one's did not until renamed).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
timeout 320 python3 -m tools gpu-test --wheels .whl --out $OUT/gtc > $OUT/gpu_test_c.log 2>&1
echo "gpu-test rc=$?"; grep -A8 '^suite' $OUT/gpu_test_c.log; grep -h "test_weight_grad.*cuda" $OUT/gtc/*.log | tail -8; rm -rf $OUT/gtc/*.xml
