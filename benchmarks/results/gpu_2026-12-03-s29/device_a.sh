#!/bin/bash
# s29 device call A: the da8w4 scratch change (at::empty per call) and the input device check, tested on the AMX host.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps.log; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/torchao*.whl .whl/expecttest*.whl > $OUT/setup.log 2>&1 || { cat $OUT/setup.log; exit 1; }
export PYTHONPATH=/tmp/site
{ git rev-parse HEAD 2>/dev/null; git status --short 2>/dev/null | head; python3 -c 'import torch,sys;print(sys.version, torch.__version__)'; lscpu | grep -E "Model name|^CPU\(s\)|Thread|Core|Socket|L2"; grep -o -w 'amx_int8\|amx_tile\|avx512_vnni' /proc/cpuinfo | sort | uniq -c; g++ --version | head -1; python3 -c 'import pytest_timeout' 2>&1; } > $OUT/host.txt 2>&1
el setup done
TP=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
(cmake -G Ninja -S csrc -B /tmp/cs -DCMAKE_PREFIX_PATH=$TP && cmake --build /tmp/cs) > $OUT/build.log 2>&1 &
(cmake -G Ninja -S .ab/pre/csrc -B /tmp/cspre -DCMAKE_PREFIX_PATH=$TP && cmake --build /tmp/cspre) > $OUT/build_pre.log 2>&1 &
(BUILD_ONLY=1 bash benchmarks/da8w4_amx_breakdown.sh /tmp/bd > $OUT/breakdown_build.log 2>&1; el breakdown build rc=$?) &
wait; el builds done; ls /tmp/cs/*.so /tmp/cspre/*.so /tmp/bd >> $OUT/steps.log
LIB=/tmp/cs/libda8w4_linear_cpu.so
PT="python3 -m pytest -q -p no:cacheprovider --timeout 200 -rs"
TA=$(PYTHONPATH=csrc/test:/tmp/site python3 csrc/test/torchao_kernel_plugin.py)
PRT=upstream-prs/pytorch-ao/test_da8w4_linear_cpu_kernel.py
( DA8W4_LINEAR_CPU_LIB=$LIB timeout 400 $PT csrc/test/test_da8w4_linear_cpu.py csrc/test/test_da8w4_brgemm_tiles.py csrc/test/test_fp_contraction.py csrc/test/test_da8w4_torchao_flow.py > $OUT/csrc_head.log 2>&1; el csrc_head rc=$? ) &
( DA8W4_LINEAR_CPU_LIB=$LIB OMP_NUM_THREADS=4 PYTHONPATH=csrc/test:/tmp/site timeout 430 $PT -p torchao_kernel_plugin "$TA" $PRT > $OUT/kernel_plugin.log 2>&1; el kernel_plugin rc=$? ) &
( OMP_NUM_THREADS=4 TORCHAO_PORT_BUILD_DIR=/tmp/tp PYTHONPATH=csrc/test:/tmp/site timeout 450 $PT -p torchao_port_plugin "$TA" $PRT > $OUT/port_amx.log 2>&1; el port rc=$? ) &
( OMP_NUM_THREADS=4 TORCHAO_MAIN_SRC=.torchao-main TORCHAO_MAIN_BUILD_DIR=/tmp/tmb TORCHAO_CPU_DISPATCH_DEBUG=1 PYTHONPATH=csrc/test:/tmp/site timeout 450 $PT -p torchao_main_plugin "$TA" $PRT > $OUT/main_amx.log 2>&1; el main rc=$? ) &
wait; el all done
