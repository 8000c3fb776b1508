#!/bin/bash
# s38 device call D (1 x H200), .whl carried: the GPU tests at the session's last GPU-affecting tree (the weight
# gradient kept under a checkpoint's recompute; site_reading shared by the lowering and the weight gradient).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
W=$OUT/d; mkdir -p $W
python3 -m tools install --replace > $W/setup_d.log 2>&1 || { tail -20 $W/setup_d.log; exit 1; }
S=$(date +%s); timeout 165 python3 -m tools gpu-test --wheels .whl --workers 6 --out /tmp/gtd > $W/gpu_test_d.log 2>&1
echo "gpu-test rc=$? in $(( $(date +%s) - S ))s"; grep -A6 '^suite' $W/gpu_test_d.log
tar czf $OUT/d.tgz -C $OUT d && rm -rf $W
