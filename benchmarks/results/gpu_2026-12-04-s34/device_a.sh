#!/bin/bash
# s34 device call A (1 x H200): GPU tests at e13d281 (the per-piece loops unmasked at whole-K-tile pieces), then
# the relu'd sweep rows with the form forced to mm (the relu'd piece in the per-piece loops), old template
# (8b60fd9, .ab/s34pre) and new, stock paired in each run.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps_a.log; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/host_a.txt 2>&1
timeout 240 python3 -m tools gpu-test --wheels .whl --out $OUT/gta > $OUT/gpu_test_a.log 2>&1
el "gpu-test rc=$?"; grep '^|' $OUT/gpu_test_a.log
SW="--no-native --no-upstream --producers relu --forms mm --modes fwd --reps 3"
python3 -m tools install --replace > $OUT/setup_new.log 2>&1 || { tail -20 $OUT/setup_new.log; exit 1; }
el "installed new"
timeout 130 python3 benchmarks/cat_linear_fused_gpu.py $SW --out $OUT/relu_mm_new.json > $OUT/relu_mm_new.log 2>&1
el "sweep new rc=$?"
(cd .ab/s34pre && python3 -m tools install --replace) > $OUT/setup_old.log 2>&1 || { tail -20 $OUT/setup_old.log; exit 1; }
el "installed old"
timeout 130 python3 benchmarks/cat_linear_fused_gpu.py $SW --out $OUT/relu_mm_old.json > $OUT/relu_mm_old.log 2>&1
el "sweep old rc=$?"
grep -E "^[0-9]+ .* relu fwd" $OUT/relu_mm_new.log | sed 's/^/new /' | cut -c1-230
grep -E "^[0-9]+ .* relu fwd" $OUT/relu_mm_old.log | sed 's/^/old /' | cut -c1-230
