#!/bin/bash
# s40 device call D (1 x H200): the generated-program fuzzer at 44d0180 (s39's weight-gradient and decline changes had
# run only on CPU), two seeds side by side.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
W=$OUT/d; mkdir -p $W; T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $W/steps_d.log; }
python3 -m tools install --replace > $W/setup_d.log 2>&1 || { tail -20 $W/setup_d.log; exit 1; }
el installed
for s in 16 17; do
  ( timeout 170 python3 benchmarks/cat_linear_fuzz_gpu.py --seconds 150 --seed $s --out $W/fuzz_s$s.json > $W/fuzz_s$s.log 2>&1; echo "rc=$?" >> $W/fuzz_s$s.log ) &
done
wait; el "fuzz done"; for s in 16 17; do tail -6 $W/fuzz_s$s.log; done
tar czf $OUT/d.tgz -C $OUT d && rm -rf $W
