#!/bin/bash
# s38 device call B (1 x H200): replay fuzz seed 14 case 47 (counted taken, no template in the code) with the
# lowering's debug log and the output code; probe_b.py for review's 1b and 1d. Everything in one tarball.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
R=benchmarks/results/gpu_2026-12-04-s38; W=$OUT/b; mkdir -p $W
{ git rev-parse HEAD; git status --short | head; } > $W/host_b.txt 2>&1
python3 -m tools install --replace > $W/setup_b.log 2>&1 || { tail -20 $W/setup_b.log; exit 1; }
TORCH_LOGS="+torch._inductor.fx_passes.cat_linear_lowering,+torch._inductor.kernel.cat_linear,output_code" \
  timeout 120 python3 benchmarks/cat_linear_fuzz_gpu.py --replay "$(cat $R/case_s14_47.json)" --out $W/replay47.json > $W/replay47.log 2>&1
echo "replay rc=$?"; grep -h "cat_linear" $W/replay47.json.worker.log | grep -v "^ *#" | head -20
timeout 300 python3 $R/probe_b.py > $W/probe_b.log 2>&1; echo "probe rc=$?"; grep -v -i warn $W/probe_b.log | tail -12
tar czf $OUT/b.tgz -C $OUT b && rm -rf $W
