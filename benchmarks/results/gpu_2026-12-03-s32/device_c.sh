#!/bin/bash
# s32 device call C (1 x H200): the 12-site head's cold compile on a whole model (text and image encoders of 6
# layers, 8 tokens a sample, under the head): straight after import, forward, default mode.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps_c.log; }
{ git rev-parse HEAD; git status --short | head; nvidia-smi -L; } > $OUT/host_c.txt 2>&1
python3 -m tools install --replace > $OUT/setup_c.log 2>&1 || { tail -20 $OUT/setup_c.log; exit 1; }
el installed
timeout 470 python3 benchmarks/cat_linear_fused_model_gpu.py --modes fwd --reps 3 --encoders 6 --tokens 8 --budget-s 440 --worker-timeout-s 150 --out $OUT/model_enc6.json > $OUT/model_enc6.log 2>&1
el "model enc6 rc=$?"; grep -v -i warn $OUT/model_enc6.log | grep '^\[\|^|' | head -12
