#!/bin/bash
# s34 device call C (1 x H200) at HEAD: generated programs (seed 13, the per-piece loops unmasked at whole-tile
# pieces), then the sweep in default mode, input and relu'd pieces.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps_c.log; }
python3 -m tools install --replace > $OUT/setup_c.log 2>&1 || { tail -20 $OUT/setup_c.log; exit 1; }
el installed
timeout 200 python3 benchmarks/cat_linear_fuzz_gpu.py --seconds 150 --seed 13 --out $OUT/fuzz_s13.json > $OUT/fuzz_s13.log 2>&1
el "fuzz rc=$?"; tail -15 $OUT/fuzz_s13.log
timeout 170 python3 benchmarks/cat_linear_fused_gpu.py --no-native --producers input,relu --modes fwd --reps 3 --out $OUT/sweep_c.json > $OUT/sweep_c.log 2>&1
el "sweep rc=$?"
grep -E "^[0-9]+ .* fwd" $OUT/sweep_c.log | cut -c1-200 | head -45
