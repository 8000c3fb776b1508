#!/bin/bash
# s33 device call C (1 x H200), tree as call B's (048ddfe's library code): multimodal inference and
# training (two sites more taken there: compute-bound at <= 2 waves), then compile of the 12-site head
# on 6-layer encoders (both of its newly taken sites too).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps_c.log; }
git rev-parse HEAD > $OUT/host_c.txt
python3 -m tools install --replace > $OUT/setup_c.log 2>&1 || { tail -20 $OUT/setup_c.log; exit 1; }
el installed
timeout 120 python3 benchmarks/cat_linear_workloads_gpu.py --workloads multimodal --modes inference --reps 2 --rounds 3 --budget-s 110 --out $OUT/wl_mm_inf.json > $OUT/wl_mm_inf.log 2>&1
el "wl mm inf rc=$?"; grep '^|' $OUT/wl_mm_inf.log | tail -2
timeout 140 python3 benchmarks/cat_linear_workloads_gpu.py --workloads multimodal --modes training --reps 2 --rounds 3 --budget-s 130 --out $OUT/wl_mm_train.json > $OUT/wl_mm_train.log 2>&1
el "wl mm train rc=$?"; grep '^|' $OUT/wl_mm_train.log | tail -2
timeout 290 python3 benchmarks/cat_linear_fused_model_gpu.py --modes fwd --reps 2 --encoders 6 --tokens 8 --budget-s 280 --worker-timeout-s 150 --out $OUT/model_enc6.json > $OUT/model_enc6.log 2>&1
el "model enc6 rc=$?"; grep -v -i warn $OUT/model_enc6.log | grep '^\[\|^|' | head -12
