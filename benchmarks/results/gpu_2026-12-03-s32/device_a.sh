#!/bin/bash
# s32 device call A (1 x H200): the held-out sweep and gnn inference at the one-loop table's
# 3-stage default (08b95d8; the README's tables ran at 4 stages), default mode, nothing pinned.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps_a.log; }
{ git rev-parse HEAD; git status --short | head; nvidia-smi -L; nproc; python3 -c 'import torch,triton,sys;print(sys.version, torch.__version__, triton.__version__)'; } > $OUT/host.txt 2>&1
python3 -m tools install --replace > $OUT/setup.log 2>&1 || { tail -20 $OUT/setup.log; exit 1; }
el installed
timeout 400 python3 benchmarks/cat_linear_fused_gpu.py --no-native --producers input,relu --modes fwd --reps 3 --out $OUT/sweep.json > $OUT/sweep.log 2>&1
el "sweep rc=$?"; grep -c "patched/stock" $OUT/sweep.log
timeout 150 python3 benchmarks/cat_linear_workloads_gpu.py --workloads gnn --modes inference --reps 2 --rounds 3 --budget-s 140 --out $OUT/wl_gnn_inf.json > $OUT/wl_gnn_inf.log 2>&1
el "wl gnn rc=$?"; grep '^\[' $OUT/wl_gnn_inf.log | tail -5
