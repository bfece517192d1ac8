#!/usr/bin/env bash
# Fifteenth session, last call: the split products' tests with the row-bytes threshold, then the
# four decode shapes beside the peers.
set -uo pipefail
source scripts/gpu_env.sh
step tests 60 python3 -m pytest -o addopts="" tests/backends/test_cuda_split.py tests/backends/test_cuda.py \
  -k "split or long_row" -q -p no:cacheprovider -n 8
grep -E "FAILED|Error|passed|failed" "$OUT/tests.log" | head -12
if grep -q "FAILED" "$OUT/tests.log"; then export LIGHTSPEED_CUDA_SPLIT=0 LIGHTSPEED_CUDA_CLUSTER_ROWS=0; echo "split/cluster rows OFF"; fi
step decode ${GPU_DECODE_S:-300} python3 benchmarks/gpu_decode.py smollm2-135m qwen3-0.6b llama-3.2-1b llama-3-8b --steps 32
sed -n '/^shape/,$p' "$OUT/decode.log"
step prefill 50 python3 benchmarks/gpu_decode.py llama-3.2-1b --prompt 512 --no-peer --steps 4
grep "lightspeed {" "$OUT/prefill.log"
rm -f "$OUT/pip.log"
