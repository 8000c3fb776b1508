#!/bin/bash
# s37 device call D (1 x H200): does the weight gradient's split pay where every piece is produced (the sites that
# counting every piece splits and counting unproduced pieces only keeps)? stock / kept (split never) / split, a
# training step's GPU time, interleaved rounds.
export PYTHONUNBUFFERED=1
git rev-parse HEAD > $OUT/host_d.txt
python3 -m tools install --replace > $OUT/setup_d.log 2>&1 || { tail -20 $OUT/setup_d.log; exit 1; }
timeout 400 python3 benchmarks/cat_linear_weight_grad_probe_gpu.py --rounds 3 --out $OUT/wg_probe.json > $OUT/wg_probe.log 2>&1
echo "probe rc=$?"; cat $OUT/wg_probe.log | grep -v Warning | tail -12
