#!/bin/bash
# s34 device call D (1 x H200) at the unaligned-rule commit: the GPU tests, then the sweep's three unaligned-K shapes
# (17-19) in default mode, input and relu'd pieces.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps_d.log; }
timeout 240 python3 -m tools gpu-test --wheels .whl --out $OUT/gtd > $OUT/gpu_test_d.log 2>&1
el "gpu-test rc=$?"; grep -A8 '^suite' $OUT/gpu_test_d.log
python3 -m tools install --replace > $OUT/setup_d.log 2>&1 || { tail -20 $OUT/setup_d.log; exit 1; }
el installed
timeout 100 python3 benchmarks/cat_linear_fused_gpu.py --no-native --shapes 17,18,19 --producers input,relu --modes fwd --reps 3 --out $OUT/sweep_unaligned.json > $OUT/sweep_unaligned.log 2>&1
el "sweep rc=$?"
grep -E "^[0-9]+ .* fwd" $OUT/sweep_unaligned.log | cut -c1-220
rm -rf $OUT/gtd/*.xml
