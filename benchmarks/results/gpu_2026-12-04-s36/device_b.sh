#!/bin/bash
# s36 device call B (1 x H200) at 637e3ff: the GPU tests after the weight-gradient change (a cat's saving counts only
# the pieces the forward decision reads in place or computes in its loads), then the training workloads, default mode,
# to see whether any split changes (s32's call D measured them at 2e1ca27).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps_b.log; }
# run with carry [".whl"] (expecttest for the tests); a fresh machine has stock torch: install the series first
python3 -m tools install --replace > $OUT/setup_b.log 2>&1 || { tail -20 $OUT/setup_b.log; exit 1; }
el installed
timeout 260 python3 -m tools gpu-test --wheels .whl --out $OUT/gtb > $OUT/gpu_test_b.log 2>&1
el "gpu-test rc=$?"; grep -A8 '^suite' $OUT/gpu_test_b.log; rm -rf $OUT/gtb/*.xml
timeout 150 python3 benchmarks/cat_linear_workloads_gpu.py --workloads gnn --modes training --reps 2 --rounds 3 --budget-s 140 --out $OUT/wl_gnn_train.json > $OUT/wl_gnn_train.log 2>&1
el "wl gnn train rc=$?"; grep '^\[' $OUT/wl_gnn_train.log | tail -5
timeout 140 python3 benchmarks/cat_linear_workloads_gpu.py --workloads multimodal dlrm --modes training --reps 1 --rounds 3 --budget-s 130 --out $OUT/wl_mm_dlrm_train.json > $OUT/wl_mm_dlrm_train.log 2>&1
el "wl mm dlrm train rc=$?"; grep '^\[' $OUT/wl_mm_dlrm_train.log | tail -5
