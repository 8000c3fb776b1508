#!/bin/bash
# s35 device call D (1 x H200) at 75321b4: max_autotune at HEAD, input and relu'd pieces, against Inductor's own
# max_autotune on the ready cat (floor_mat) and cuBLAS (floor); the last such run was at d2e92df / 423817c.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps_d.log; }
python3 -m tools install --replace > $OUT/setup_d.log 2>&1 || { tail -20 $OUT/setup_d.log; exit 1; }
el installed
timeout 430 python3 benchmarks/cat_linear_fused_gpu.py --autotune --no-native --no-upstream --producers input,relu \
  --modes fwd --reps 3 --shapes 1,6,9,10,11,18,2 --out $OUT/autotune.json > $OUT/autotune.log 2>&1
el "autotune rc=$?"
grep -E "^[0-9]+ .* fwd" $OUT/autotune.log | cut -c1-260
