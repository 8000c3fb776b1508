#!/bin/bash
# s30 device call A (1 x H200): where gnn's training step goes (kernel breakdown, stock and patched, default mode),
# for the bound on the training target; then one more seed of generated programs on the GPU.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps.log; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/expecttest*.whl .whl/hypothesis*.whl .whl/attrs*.whl .whl/sortedcontainers*.whl > $OUT/setup.log 2>&1 || { cat $OUT/setup.log; exit 1; }
export PYTHONPATH=/tmp/site
{ git rev-parse HEAD; git status --short | head; nvidia-smi -L; python3 -c 'import torch,triton,sys;print(sys.version, torch.__version__, triton.__version__)'; } > $OUT/host.txt 2>&1
python3 -m tools install --replace >> $OUT/setup.log 2>&1 || { tail -20 $OUT/setup.log; exit 1; }
el installed
timeout 330 python3 benchmarks/cat_linear_workloads_gpu.py --workloads gnn --modes training inference --kernels 40 --rounds 3 --budget-s 300 --out $OUT/wl_gnn_kernels.json > $OUT/wl_gnn_kernels.log 2>&1
el "workloads rc=$?"
timeout 200 python3 benchmarks/cat_linear_fuzz_gpu.py --seed 12 --seconds 150 --extra-kinds take --out $OUT/gpu_fuzz_s12_take.json > $OUT/gpu_fuzz_s12.log 2>&1
el "fuzz rc=$?"
