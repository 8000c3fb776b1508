#!/bin/bash
# s30 device call B (1 x H200): the template's one-loop configs against each other (pipeline depth), default mode;
# then gnn training stock vs patched, as the table is and with 128x128x64, 8 warps, 3 stages first.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps.log; }
python3 -m tools install --replace > $OUT/setup.log 2>&1 || { tail -20 $OUT/setup.log; exit 1; }
el installed
timeout 250 python3 benchmarks/cat_linear_stages_probe_gpu.py --reps 2 --shapes 0,1,2,3,4,5,7,9,11,13 --out $OUT/stages_probe.json > $OUT/stages_probe.log 2>&1
el "probe rc=$?"; grep -v -i warn $OUT/stages_probe.log | tail -12
timeout 170 python3 benchmarks/cat_linear_workloads_gpu.py --workloads gnn --modes training --rounds 3 --budget-s 160 --out $OUT/wl_table.json > $OUT/wl_table.log 2>&1
el "wl table rc=$?"
CAT_LINEAR_ONE_LOOP_FIRST=128,128,64,8,3 timeout 170 python3 benchmarks/cat_linear_workloads_gpu.py --workloads gnn --modes training --rounds 3 --budget-s 160 --out $OUT/wl_s3.json > $OUT/wl_s3.log 2>&1
el "wl s3 rc=$?"; grep '^\[' $OUT/wl_table.log $OUT/wl_s3.log
