#!/bin/bash
# s32 device call D (1 x H200): training at the 3-stage default, default mode, nothing set (the README's gnn
# training figure at 3 stages came from CAT_LINEAR_ONE_LOOP_FIRST before 08b95d8 made it the default).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps_d.log; }
python3 -m tools install --replace > $OUT/setup_d.log 2>&1 || { tail -20 $OUT/setup_d.log; exit 1; }
el installed
timeout 250 python3 benchmarks/cat_linear_workloads_gpu.py --workloads gnn --modes training --reps 2 --rounds 3 --budget-s 240 --out $OUT/wl_gnn_train.json > $OUT/wl_gnn_train.log 2>&1
el "wl gnn train rc=$?"; grep '^\[' $OUT/wl_gnn_train.log | tail -5
timeout 200 python3 benchmarks/cat_linear_workloads_gpu.py --workloads multimodal dlrm --modes training --reps 1 --rounds 3 --budget-s 190 --out $OUT/wl_mm_dlrm_train.json > $OUT/wl_mm_dlrm_train.log 2>&1
el "wl mm dlrm train rc=$?"; grep '^\[' $OUT/wl_mm_dlrm_train.log | tail -5
