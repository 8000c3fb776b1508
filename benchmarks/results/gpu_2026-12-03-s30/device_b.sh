#!/bin/bash
# s30 device call B (1 x H200): the template's one-loop configs against each other (pipeline depth), default mode.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps.log; }
python3 -m tools install --replace > $OUT/setup.log 2>&1 || { tail -20 $OUT/setup.log; exit 1; }
el installed
timeout 480 python3 benchmarks/cat_linear_stages_probe_gpu.py --reps 3 --out $OUT/stages_probe.json 2>&1 | tee $OUT/stages_probe.log | grep -v Warning
el "probe rc=$?"
