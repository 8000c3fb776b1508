#!/bin/bash
# s37 device call A (1 x H200) at f1d1728, run with .whl carried: the GPU tests at HEAD (65de670's fp32 decline and
# 3b6417f came after s36's last GPU run), then the training workloads, default mode, to confirm that ddd7251 (the
# weight gradient credits no produced piece as saved) leaves gnn's and multimodal's splits as 637e3ff had them.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps_a.log; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/host_a.txt 2>&1; git rev-parse HEAD >> $OUT/host_a.txt
python3 -m tools install --replace > $OUT/setup_a.log 2>&1 || { tail -20 $OUT/setup_a.log; exit 1; }
el installed
timeout 260 python3 -m tools gpu-test --wheels .whl --out $OUT/gta > $OUT/gpu_test_a.log 2>&1
el "gpu-test rc=$?"; grep -A8 '^suite' $OUT/gpu_test_a.log; rm -rf $OUT/gta/*.xml
timeout 150 python3 benchmarks/cat_linear_workloads_gpu.py --workloads gnn --modes training --reps 2 --rounds 3 --budget-s 140 --out $OUT/wl_gnn_train.json > $OUT/wl_gnn_train.log 2>&1
el "wl gnn train rc=$?"; grep '^\[' $OUT/wl_gnn_train.log | tail -5
timeout 140 python3 benchmarks/cat_linear_workloads_gpu.py --workloads multimodal dlrm --modes training --reps 1 --rounds 3 --budget-s 130 --out $OUT/wl_mm_dlrm_train.json > $OUT/wl_mm_dlrm_train.log 2>&1
el "wl mm dlrm train rc=$?"; grep '^\[' $OUT/wl_mm_dlrm_train.log | tail -5
