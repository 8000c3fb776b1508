#!/bin/bash
# s37 device call B (1 x H200) at 5ae1747, run with .whl carried: the weight gradient counts every piece's trip through
# the cat as saved (call A found that ddd7251's count, unproduced pieces only, kept gnn's first EdgeConv cat: 1 split, not
# 2). The GPU tests (the CUDA test of the rule now splits at n = 576, which counting unproduced pieces would keep), then
# the training workloads with gnn's costliest kernels per step (where the split's saving comes from).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps_b.log; }
git rev-parse HEAD > $OUT/host_b.txt
python3 -m tools install --replace > $OUT/setup_b.log 2>&1 || { tail -20 $OUT/setup_b.log; exit 1; }
el installed
timeout 250 python3 -m tools gpu-test --wheels .whl --out $OUT/gtb > $OUT/gpu_test_b.log 2>&1
el "gpu-test rc=$?"; grep -A8 '^suite' $OUT/gpu_test_b.log; rm -rf $OUT/gtb
timeout 165 python3 benchmarks/cat_linear_workloads_gpu.py --workloads gnn --modes training --reps 1 --rounds 3 --kernels 12 --budget-s 155 --out $OUT/wl_gnn_train_b.json > $OUT/wl_gnn_train_b.log 2>&1
el "wl gnn train rc=$?"; grep '^\[' $OUT/wl_gnn_train_b.log | tail -4
timeout 120 python3 benchmarks/cat_linear_workloads_gpu.py --workloads multimodal --modes training --reps 1 --rounds 3 --budget-s 110 --out $OUT/wl_mm_train_b.json > $OUT/wl_mm_train_b.log 2>&1
el "wl mm train rc=$?"; grep '^\[' $OUT/wl_mm_train_b.log | tail -3
