#!/bin/bash
# s34 device call B (1 x H200): the relu'd rows, mm forced with and without its prologue (mm_unfolded: the relu'd piece
# written by its own kernel, the one loop); then multimodal inference and training at HEAD (eccd2dc's rule).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps_b.log; }
python3 -m tools install --replace > $OUT/setup_b.log 2>&1 || { tail -20 $OUT/setup_b.log; exit 1; }
el installed
timeout 150 python3 benchmarks/cat_linear_fused_gpu.py --no-native --no-upstream --producers relu --forms mm,mm_unfolded --modes fwd --reps 3 --out $OUT/relu_unfolded.json > $OUT/relu_unfolded.log 2>&1
el "sweep rc=$?"
grep -E "^[0-9]+ .* relu fwd" $OUT/relu_unfolded.log | cut -c1-250
timeout 120 python3 benchmarks/cat_linear_workloads_gpu.py --workloads multimodal --modes inference --reps 2 --rounds 3 --budget-s 110 --out $OUT/wl_mm_inf.json > $OUT/wl_mm_inf.log 2>&1
el "wl mm inf rc=$?"; grep '^|' $OUT/wl_mm_inf.log | tail -3
timeout 140 python3 benchmarks/cat_linear_workloads_gpu.py --workloads multimodal --modes training --reps 2 --rounds 3 --budget-s 130 --out $OUT/wl_mm_train.json > $OUT/wl_mm_train.log 2>&1
el "wl mm train rc=$?"; grep '^|' $OUT/wl_mm_train.log | tail -3
