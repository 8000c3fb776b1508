#!/bin/bash
# s29 device call C: the block products from ATen's brgemm (DA8W4_AMX_BLOCKS=brgemm, torchao main's route) under the
# kernel's own blocking, unpack and epilogue: same bits (test), and its time against the kernel's tiles in one run.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps.log; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/torchao*.whl .whl/expecttest*.whl > /dev/null 2>&1 || exit 1
export PYTHONPATH=/tmp/site
git status --short > $OUT/tree.txt 2>&1
TP=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
rm -rf /tmp/cs; (cmake -G Ninja -S csrc -B /tmp/cs -DCMAKE_PREFIX_PATH=$TP && cmake --build /tmp/cs) > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
el build done
LIB=/tmp/cs/libda8w4_linear_cpu.so
DA8W4_LINEAR_CPU_LIB=$LIB timeout 200 python3 -m pytest -q -p no:cacheprovider -rs csrc/test/test_da8w4_linear_cpu.py -k "brgemm or amx_tiling or beyond_int32" > $OUT/brgemm_blocks_test.log 2>&1; el test rc=$?
DA8W4_LINEAR_CPU_LIB=$LIB timeout ${AB_S:-330} python3 benchmarks/da8w4_vs_torchao_cpu.py --torchao-src .ab/torchao_da8w4 --variant brgemm:DA8W4_AMX_BLOCKS=brgemm --variant tiles2:DA8W4_AMX_BLOCKS=tiles --threads 16 --shapes qkv gate_up down --ms 16 64 256 1024 --rounds ${ROUNDS:-3} --json $OUT/blocks_ab_t16.json > $OUT/blocks_ab_t16.log 2>&1; el ab rc=$?
cp $OUT/blocks_ab_t16.json.partial $OUT/blocks_ab_partial.json 2>/dev/null; rm -f $OUT/blocks_ab_t16.json.partial
el all done
