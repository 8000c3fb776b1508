#!/bin/bash
# s37 device call E (1 x H200), run with .whl carried: call D showed that counting every piece (5ae1747) splits where
# plain pointwise pieces lose (1.03-1.17x stock) and that only the gathered site pays; the weight gradient now counts a
# produced piece only where it loads through a gather. The GPU tests, the probe again, gnn training.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps_e.log; }
git rev-parse HEAD > $OUT/host_e.txt; git status --short >> $OUT/host_e.txt
python3 -m tools install --replace > $OUT/setup_e.log 2>&1 || { tail -20 $OUT/setup_e.log; exit 1; }
el installed
timeout 240 python3 -m tools gpu-test --wheels .whl --out $OUT/gte > $OUT/gpu_test_e.log 2>&1
el "gpu-test rc=$?"; grep -A6 '^suite' $OUT/gpu_test_e.log; rm -rf $OUT/gte
timeout 90 python3 benchmarks/cat_linear_weight_grad_probe_gpu.py --rounds 3 --out $OUT/wg_probe_e.json > $OUT/wg_probe_e.log 2>&1
el "probe rc=$?"; grep -v -i warn $OUT/wg_probe_e.log | tail -7
timeout 110 python3 benchmarks/cat_linear_workloads_gpu.py --workloads gnn --modes training --reps 1 --rounds 3 --budget-s 100 --out $OUT/wl_gnn_train_e.json > $OUT/wl_gnn_train_e.log 2>&1
el "wl gnn train rc=$?"; grep '^\[' $OUT/wl_gnn_train_e.log | tail -3
