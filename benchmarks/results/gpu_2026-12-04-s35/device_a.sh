#!/bin/bash
# s35 device call A (1 x H200), stock torch (nothing installed): the one loop with a relu'd piece computed in its
# loads (cat_linear_fold_probe_gpu.py), then the AMX in-register TDPBUSD rate at 1-16 threads on the host's vCPUs.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps_a.log; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/host_a.txt 2>&1
timeout 330 python3 benchmarks/cat_linear_fold_probe_gpu.py --reps 3 --out $OUT/fold.json > $OUT/fold.log 2>&1
el "fold probe rc=$?"; grep -v "^ " $OUT/fold.log | cut -c1-260
{ lscpu | grep -E "Model name|Thread|Core|Socket|NUMA|MHz|L2|L3"; echo "siblings:"; cat /sys/devices/system/cpu/cpu*/topology/thread_siblings_list | sort | uniq -c | head; } >> $OUT/host_a.txt 2>&1
timeout 150 bash benchmarks/da8w4_amx_breakdown.sh /tmp/bd -- --threads 16 8 4 2 1 --m 512 --shapes qkv:4096x6144 --min-time 0.05 --reps 3 > $OUT/amx_threads.md 2>&1
el "amx threads rc=$?"; grep "^#" $OUT/amx_threads.md
