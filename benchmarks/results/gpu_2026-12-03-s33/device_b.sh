#!/bin/bash
# s33 device call B (1 x H200): at 048ddfe (compute-bound sites of <= 2 waves decided as memory-bound;
# the narrow one-loop table at 2 stages): the GPU tests, then the held-out sweep, default mode.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps_b.log; }
git rev-parse HEAD > $OUT/host_b.txt
timeout 280 python3 -m tools gpu-test --wheels .whl --out $OUT/gt > $OUT/gpu_test.log 2>&1
el "gpu-test rc=$?"; grep '^|' $OUT/gpu_test.log
python3 -m tools install --replace > $OUT/setup_b.log 2>&1 || { tail -20 $OUT/setup_b.log; exit 1; }
el installed
timeout 240 python3 benchmarks/cat_linear_fused_gpu.py --no-native --producers input,relu --modes fwd --reps 3 --out $OUT/sweep.json > $OUT/sweep.log 2>&1
el "sweep rc=$?"; grep -E "^\| *[0-9]" $OUT/sweep.log | head -45
