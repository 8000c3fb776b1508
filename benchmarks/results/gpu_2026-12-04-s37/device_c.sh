#!/bin/bash
# s37 device call C (1 x H200) at 5ae1747: call B's multimodal training ran 846.6 -> 868.9 µs in one process each, where
# A (f1d1728, the same 3 splits) ran 848.5 -> 836.8: three processes each to tell the change from process noise; then
# dlrm training, which A and B left out for their budget.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps_c.log; }
git rev-parse HEAD > $OUT/host_c.txt
python3 -m tools install --replace > $OUT/setup_c.log 2>&1 || { tail -20 $OUT/setup_c.log; exit 1; }
el installed
timeout 260 python3 benchmarks/cat_linear_workloads_gpu.py --workloads multimodal --modes training --reps 3 --rounds 3 --budget-s 250 --out $OUT/wl_mm_train_c.json > $OUT/wl_mm_train_c.log 2>&1
el "wl mm train rc=$?"; grep '^\[' $OUT/wl_mm_train_c.log | tail -7
timeout 120 python3 benchmarks/cat_linear_workloads_gpu.py --workloads dlrm --modes training --reps 1 --rounds 3 --budget-s 110 --out $OUT/wl_dlrm_train_c.json > $OUT/wl_dlrm_train_c.log 2>&1
el "wl dlrm train rc=$?"; grep '^\[' $OUT/wl_dlrm_train_c.log | tail -3
