#!/bin/bash
# s40 device call B (1 x H200), right after A on the warm machine: the weight-gradient probe and the training
# workload (multimodal), stock vs patched in one run, at HEAD (s39 changed the weight-gradient rules); then the
# contiguity-hint probe (ours against upstream mm's, review's open item).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
W=$OUT/b; mkdir -p $W; T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $W/steps_b.log; }
python3 -m tools install --replace > $W/setup_b.log 2>&1 || { tail -20 $W/setup_b.log; exit 1; }
el installed
timeout 100 python3 benchmarks/cat_linear_weight_grad_probe_gpu.py --rounds 3 --out $W/wg_probe.json > $W/wg_probe.log 2>&1
el "probe rc=$?"; grep -v -i warn $W/wg_probe.log | tail -9
timeout 190 python3 benchmarks/cat_linear_workloads_gpu.py --workloads multimodal --modes training --reps 3 --rounds 3 --budget-s 180 --out $W/wl_mm_train.json > $W/wl_mm_train.log 2>&1
el "wl mm train rc=$?"; grep '^|\|^\[' $W/wl_mm_train.log | tail -6
timeout 150 python3 benchmarks/cat_linear_b_hint_probe_gpu.py --reps 3 --out $W/b_hint.json > $W/b_hint.log 2>&1
el "b_hint rc=$?"; grep -v -i warn $W/b_hint.log | tail -12
timeout 60 python3 benchmarks/cat_linear_b_hint_probe_gpu.py --reps 3 --relu --shapes 1,2,7 --out $W/b_hint_relu.json > $W/b_hint_relu.log 2>&1
el "b_hint relu rc=$?"; grep -v -i warn $W/b_hint_relu.log | tail -4
tar czf $OUT/b.tgz -C $OUT b && rm -rf $W
