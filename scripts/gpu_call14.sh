#!/usr/bin/env bash
# The fourteenth session's second GPU call (one-off; kept as the record of what ran).
source scripts/gpu_env.sh; nvidia-smi --query-gpu=name --format=csv,noheader
LIGHTSPEED_CACHE_DIR=/tmp/c3 step rowsblocks 120 python3 -m pytest -o addopts="" tests/backends/test_cuda_rows.py tests/backends/test_cuda_blocks.py tests/backends/test_cuda_codegen.py -q -p no:cacheprovider -n 8 &
LIGHTSPEED_CUDA_MMA=1 LIGHTSPEED_CACHE_DIR=/tmp/c2 step mma_tests 120 python3 -m pytest -o addopts="" tests/backends/test_cuda_mma.py -q -p no:cacheprovider -n 4 &
wait
grep -hE "^FAILED|^E  |passed|failed" $OUT/rowsblocks.log $OUT/mma_tests.log | head -20
LIGHTSPEED_CUDA_MMA=1 step prefill_mma 90 python3 benchmarks/gpu_decode.py llama-3.2-1b --prompt 512 --no-peer --steps 4
step prefill_generic 90 python3 benchmarks/gpu_decode.py llama-3.2-1b --prompt 512 --no-peer --steps 4
grep -h "lightspeed {" $OUT/prefill_mma.log $OUT/prefill_generic.log
step decode 200 python3 benchmarks/gpu_decode.py smollm2-135m qwen3-0.6b llama-3.2-1b llama-3-8b --steps 32
sed -n '/^shape/,$p' "$OUT/decode.log"
LIGHTSPEED_ATTENTION_CLUSTER=1 LIGHTSPEED_CUDA_MMA=1 step prefill_cluster 80 python3 benchmarks/gpu_decode.py llama-3.2-1b --prompt 512 --no-peer --steps 16
grep "lightspeed {" $OUT/prefill_cluster.log
python3 -m pytest -o addopts="" tests/backends/test_conformance.py -k cuda --collect-only -q -p no:cacheprovider 2>/dev/null | grep :: | sort > $OUT/conf_all.txt
step conformance 100 python3 -m pytest -o addopts="" tests/backends/test_conformance.py -k cuda -v -p no:cacheprovider -n 8
grep -oE "(PASSED|FAILED|SKIPPED|ERROR) tests/[^ ]+" $OUT/conformance.log | awk '{print $2}' | sort > $OUT/conf_done.txt
grep -c PASSED $OUT/conformance.log; grep -E "^FAILED|FAILED tests" $OUT/conformance.log | head -5
echo "== not finished:"; comm -23 $OUT/conf_all.txt $OUT/conf_done.txt | head -20
LIGHTSPEED_CUDA_MMA=1 LIGHTSPEED_TRACE=$OUT/ptrace.json step prefill_trace 60 python3 benchmarks/gpu_decode.py llama-3.2-1b --prompt 512 --no-peer --steps 2
python3 scripts/trace_summary.py "$OUT/ptrace.json" --by-run > "$OUT/prefill_trace.txt" 2>&1; rm -f "$OUT/ptrace.json"; head -16 "$OUT/prefill_trace.txt"
