#!/bin/bash
# s36 device call A (1 x H200) at 0b9e827: max_autotune with relu'd pieces after 39eb9dc (a compute-bound site reads its
# produced pieces from their own buffers under max_autotune too), against Inductor's own max_autotune on the ready cat
# (floor_mat), stock's max_autotune (stock_mat) and cuBLAS (floor); s35's call D measured these rows at 75321b4.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps_a.log; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/host_a.txt 2>&1
python3 -m tools install --replace > $OUT/setup_a.log 2>&1 || { tail -20 $OUT/setup_a.log; exit 1; }
el installed
timeout 540 python3 benchmarks/cat_linear_fused_gpu.py --autotune --no-native --no-upstream --producers relu \
  --modes fwd --reps 3 --shapes 1,6,9,10,11,18,2 --out $OUT/autotune.json > $OUT/autotune.log 2>&1
el "autotune rc=$?"
grep -E "^[0-9]+ .* fwd" $OUT/autotune.log | cut -c1-260
