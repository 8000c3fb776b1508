#!/bin/bash
# s35 device call B (the H200 machine's 16 AMX vCPUs): the da8w4 AMX breakdown at HEAD, every stage, three shapes,
# M = 256 and 1024, at 16, 8 and 2 threads (call A: from 4 threads on each thread gets half the TDPBUSD rate):
# does the vector epilogue's time per thread grow the same way, i.e. do vCPU pairs share a core?
T0=$(date +%s); el() { echo "[t+$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps_b.log; }
timeout 400 bash benchmarks/da8w4_amx_breakdown.sh /tmp/bd -- --threads 16 8 2 --m 256 1024 --min-time 0.1 --reps 5 > $OUT/amx_stages.md 2>&1
el "amx stages rc=$?"; grep "^#" $OUT/amx_stages.md
grep -E "^\| (16|8|2) \|" $OUT/amx_stages.md | awk -F'|' '{print $2,$3,$4,$5,$6,$10,$11,$12}' | grep -E "full|epi_only|valu_only|tmul |tmul_epi|tmul_valu|unpack"
