#!/bin/bash
# s33 device call D (1 x H200): the latency-bound rule limited to the one loop (pieces read in place);
# the GPU tests, then the held-out sweep, default mode.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps_d.log; }
git rev-parse HEAD > $OUT/host_d.txt
timeout 240 python3 -m tools gpu-test --wheels .whl --out $OUT/gtd > $OUT/gpu_test_d.log 2>&1
el "gpu-test rc=$?"; grep '^|' $OUT/gpu_test_d.log
python3 -m tools install --replace > $OUT/setup_d.log 2>&1 || { tail -20 $OUT/setup_b.log; exit 1; }
el installed
timeout 150 python3 benchmarks/cat_linear_fused_gpu.py --no-native --producers input,relu --modes fwd --reps 3 --out $OUT/sweep_d.json > $OUT/sweep_d.log 2>&1
el "sweep rc=$?"; grep -E "^\| *[0-9]" $OUT/sweep_d.log | head -45
