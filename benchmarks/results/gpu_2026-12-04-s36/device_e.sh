#!/bin/bash
# s36 device call E (1 x H200), run with .whl carried: the GPU tests after review's finding that a split saves no
# produced piece (once split, the backward reads every piece, so the forward computes none in its loads): the weight
# gradient credits only the pieces not made by a fused producer; test_weight_grad_cuda_counts_no_produced_piece_as_saved
# splits at N = 256 and keeps the cat at N = 1024.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
timeout 300 python3 -m tools gpu-test --wheels .whl --out $OUT/gte > $OUT/gpu_test_e.log 2>&1
echo "gpu-test rc=$?"; grep -A8 '^suite' $OUT/gpu_test_e.log; grep -E "FAILED|failed" $OUT/gte/*.log | head -5; rm -rf $OUT/gte/*.xml
