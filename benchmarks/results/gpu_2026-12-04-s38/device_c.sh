#!/bin/bash
# s38 device call C (1 x H200), .whl carried: the GPU tests after the counting change (a site counted where it is
# lowered; cat_linear_no_choice) and the shared-cat rule (a cat read in place by several GEMMs computes no piece in
# their loads, and the second site sees the pieces the first predicted); multimodal inference and training (3 heads
# read one cat), stock vs patched.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
W=$OUT/c; mkdir -p $W; T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $W/steps_c.log; }
{ git rev-parse HEAD; git status --short | head; nvidia-smi -L; } > $W/host_c.txt 2>&1
python3 -m tools install --replace > $W/setup_c.log 2>&1 || { tail -20 $W/setup_c.log; exit 1; }
el installed
timeout 300 python3 -m tools gpu-test --wheels .whl --out /tmp/gtc > $W/gpu_test_c.log 2>&1
el "gpu-test rc=$?"; grep -A6 '^suite' $W/gpu_test_c.log; tar czf $W/gtc.tgz -C /tmp gtc
timeout 120 python3 benchmarks/cat_linear_workloads_gpu.py --workloads multimodal --modes inference --reps 2 --rounds 3 --budget-s 110 --out $W/wl_mm_inf.json > $W/wl_mm_inf.log 2>&1
el "wl mm inf rc=$?"; grep '^|\|^\[' $W/wl_mm_inf.log | tail -6
timeout 130 python3 benchmarks/cat_linear_workloads_gpu.py --workloads multimodal --modes training --reps 2 --rounds 3 --budget-s 120 --out $W/wl_mm_train.json > $W/wl_mm_train.log 2>&1
el "wl mm train rc=$?"; grep '^|\|^\[' $W/wl_mm_train.log | tail -6
tar czf $OUT/c.tgz -C $OUT c && rm -rf $W
