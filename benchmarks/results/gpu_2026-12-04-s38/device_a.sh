#!/bin/bash
# s38 device call A (1 x H200), .whl carried: the GPU tests at HEAD (2d42b74's CUDA weight-gradient test never ran on a
# GPU), then two fresh seeds of the generated-program fuzzer (seeds 0-13 ran in s16-s34).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps_a.log; }
{ git rev-parse HEAD; git status --short | head; nvidia-smi -L; } > $OUT/host_a.txt 2>&1
python3 -m tools install --replace > $OUT/setup_a.log 2>&1 || { tail -20 $OUT/setup_a.log; exit 1; }
el installed
timeout 240 python3 -m tools gpu-test --wheels .whl --out $OUT/gta > $OUT/gpu_test_a.log 2>&1
el "gpu-test rc=$?"; grep -A6 '^suite' $OUT/gpu_test_a.log; rm -rf $OUT/gta
for s in 14 15; do
  timeout 160 python3 benchmarks/cat_linear_fuzz_gpu.py --seconds 140 --seed $s --out $OUT/fuzz_s$s.json > $OUT/fuzz_s$s.log 2>&1
  el "fuzz seed $s rc=$?"; tail -5 $OUT/fuzz_s$s.log
done
