#!/bin/bash
# s40 device call A (1 x H200), .whl and .upstream-tests carried: upstream's two test files on stock 2.11 first (the
# baseline: which of their tests pass without the series), then the series installed and `gpu-test` at HEAD with
# upstream's files changed by our hunks beside our own GPU tests.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
W=$OUT/a; mkdir -p $W; T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $W/steps_a.log; }
{ nvidia-smi -L; python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'; lscpu | grep -i 'model name\|^CPU(s)'; } > $W/host_a.txt 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
R=$(pwd); U=.upstream-tests/test
( cd /tmp && PYTHONPATH=/tmp/site timeout 200 python3 -m pytest -q -p no:cacheprovider -n 4 --junitxml=$W/stock_gbf.xml $R/$U/inductor/test_group_batch_fusion.py > $W/stock_gbf.log 2>&1; echo "stock gbf rc=$?" >> $W/stock_gbf.log ) &
( cd /tmp && PYTHONPATH=/tmp/site timeout 200 python3 -m pytest -q -p no:cacheprovider --junitxml=$W/stock_mptp.xml $R/$U/distributed/tensor/parallel/test_micro_pipeline_tp.py > $W/stock_mptp.log 2>&1; echo "stock mptp rc=$?" >> $W/stock_mptp.log ) &
wait; el "stock upstream files done"; tail -3 $W/stock_gbf.log $W/stock_mptp.log
python3 -m tools install --replace > $W/setup_a.log 2>&1 || { tail -20 $W/setup_a.log; exit 1; }
el installed
timeout 330 python3 -m tools gpu-test --wheels .whl --workers 6 --upstream-tests .upstream-tests --out /tmp/gta > $W/gpu_test_a.log 2>&1
el "gpu-test rc=$?"; grep -A12 '^suite' $W/gpu_test_a.log
tar czf $W/gta.tgz -C /tmp gta 2>/dev/null
tar czf $OUT/a.tgz -C $OUT a && rm -rf $W
