#!/bin/bash
# s33 device call A (1 x H200): standalone Hopper (TMA) forms of the in-place cat GEMM against
# cuBLAS at the held-out compute-bound sites; then the narrow one-loop table's stages.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps_a.log; }
{ git rev-parse HEAD; git status --short | head; nvidia-smi -L; nproc; python3 -c 'import torch,triton,sys;print(sys.version, torch.__version__, triton.__version__)'; } > $OUT/host.txt 2>&1
timeout 330 python3 benchmarks/cat_linear_tma_probe_gpu.py --reps 3 --out $OUT/tma.json > $OUT/tma.log 2>&1
el "tma probe rc=$?"
grep -v '^ ' $OUT/tma.log | grep -E '^[0-9]' 
python3 -m tools install --replace > $OUT/setup.log 2>&1 || { tail -20 $OUT/setup.log; exit 1; }
el installed
timeout 150 python3 benchmarks/cat_linear_stages_probe_gpu.py --reps 3 --shapes 11,12,14 --out $OUT/stages_narrow.json > $OUT/stages_narrow.log 2>&1
el "stages rc=$?"; cat $OUT/stages_narrow.log | grep -E '^[0-9]'
