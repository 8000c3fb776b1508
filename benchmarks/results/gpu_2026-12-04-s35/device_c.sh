#!/bin/bash
# s35 device call C (the H200 machine's 16 AMX vCPUs): full m tiles in pairs (the second reads each B tile from L1),
# against HEAD's kernel (.ab/old, 75321b4's csrc) and torchao 0.18.0's (.torchao-src), one run; then the AMX tests.
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps_c.log; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl > $OUT/setup_c.log 2>&1 || { cat $OUT/setup_c.log; exit 1; }
export PYTHONPATH=/tmp/site
TP=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
(cmake -G Ninja -S csrc -B /tmp/cs -DCMAKE_PREFIX_PATH=$TP && cmake --build /tmp/cs) > $OUT/build_c.log 2>&1 &
(cmake -G Ninja -S .ab/old/csrc -B /tmp/csold -DCMAKE_PREFIX_PATH=$TP && cmake --build /tmp/csold) > $OUT/build_old.log 2>&1 &
wait; el "builds done"; ls /tmp/cs/*.so /tmp/csold/*.so >> $OUT/steps_c.log || exit 1
LIB=/tmp/cs/libda8w4_linear_cpu.so; OLD=/tmp/csold/libda8w4_linear_cpu.so
DA8W4_LINEAR_CPU_LIB=$LIB timeout 270 python3 benchmarks/da8w4_vs_torchao_cpu.py --torchao-src .torchao-src/da8w4_linear.cpp \
  --threads 16 --shapes qkv gate_up down --ms 256 1024 2048 --rounds 2 --variant head:DA8W4_LINEAR_CPU_LIB=$OLD \
  --json $OUT/pairs_t16.json > $OUT/pairs_t16.log 2>&1; el "bench rc=$?"
grep -E "^\|" $OUT/pairs_t16.log | head -14
rm -f $OUT/pairs_t16.json.partial
PT="python3 -m pytest -q -p no:cacheprovider --timeout 200 -rs"
TA=$(PYTHONPATH=csrc/test:/tmp/site python3 csrc/test/torchao_kernel_plugin.py)
PRT=upstream-prs/pytorch-ao/test_da8w4_linear_cpu_kernel.py
( DA8W4_LINEAR_CPU_LIB=$LIB OMP_NUM_THREADS=8 timeout 230 $PT csrc/test/test_da8w4_linear_cpu.py csrc/test/test_da8w4_brgemm_tiles.py > $OUT/csrc_c.log 2>&1; el "csrc rc=$?" ) &
( DA8W4_LINEAR_CPU_LIB=$LIB OMP_NUM_THREADS=4 PYTHONPATH=csrc/test:/tmp/site timeout 230 $PT -p torchao_kernel_plugin "$TA" $PRT > $OUT/kernel_plugin_c.log 2>&1; el "torchao tests (ours) rc=$?" ) &
( OMP_NUM_THREADS=4 TORCHAO_PORT_BUILD_DIR=/tmp/tp PYTHONPATH=csrc/test:/tmp/site timeout 230 $PT -p torchao_port_plugin "$TA" $PRT > $OUT/port_c.log 2>&1; el "torchao tests (PR file) rc=$?" ) &
wait; for f in csrc_c kernel_plugin_c port_c; do echo "$f: $(tail -1 $OUT/$f.log)"; done
