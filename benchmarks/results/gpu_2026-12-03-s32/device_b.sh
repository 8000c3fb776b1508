#!/bin/bash
# s32 device call B (1 x H200, the machine still warm): multimodal and dlrm inference at the 3-stage default;
# the 12-site model's cold compile, straight after import and with the compile workers up first.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps_b.log; }
python3 -m tools install --replace > $OUT/setup_b.log 2>&1 || { tail -20 $OUT/setup_b.log; exit 1; }
el installed
timeout 250 python3 benchmarks/cat_linear_workloads_gpu.py --workloads multimodal dlrm --modes inference --reps 2 --rounds 3 --budget-s 240 --out $OUT/wl_mm_dlrm.json > $OUT/wl_mm_dlrm.log 2>&1
el "wl mm dlrm rc=$?"; grep '^\[' $OUT/wl_mm_dlrm.log | tail -5
timeout 140 python3 benchmarks/cat_linear_fused_model_gpu.py --modes fwd --reps 3 --budget-s 130 --out $OUT/model_cold.json > $OUT/model_cold.log 2>&1
el "model cold rc=$?"
timeout 140 python3 benchmarks/cat_linear_fused_model_gpu.py --modes fwd --reps 3 --ready-pool --budget-s 130 --out $OUT/model_ready.json > $OUT/model_ready.log 2>&1
el "model ready rc=$?"; grep '^|' $OUT/model_cold.log $OUT/model_ready.log | head -8
