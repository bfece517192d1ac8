#!/usr/bin/env bash
# Fifteenth session, fourth call: the split products and cluster rows on the GPU (tests), the 1B
# decode step with and without them, then decode of the four shapes beside the peers.
set -uo pipefail
source scripts/gpu_env.sh
step tests 110 python3 -m pytest -o addopts="" tests/backends/test_cuda_split.py tests/backends/test_cuda.py \
  tests/backends/test_cuda_rows.py -k "split or long_row or grouped or launch or dims" -q -p no:cacheprovider -n 8
grep -E "FAILED|Error|passed|failed" "$OUT/tests.log" | head -12
if grep -q "FAILED.*split\|FAILED.*long_row" "$OUT/tests.log"; then export LIGHTSPEED_CUDA_SPLIT=0 LIGHTSPEED_CUDA_CLUSTER_ROWS=0; echo "split/cluster rows OFF"; fi
LIGHTSPEED_CUDA_SPLIT=0 LIGHTSPEED_CUDA_CLUSTER_ROWS=0 LIGHTSPEED_CACHE_DIR=/tmp/ls-off step off 70 python3 benchmarks/gpu_decode.py llama-3.2-1b --no-peer --steps 64
tail -1 "$OUT/off.log"
step on 70 python3 benchmarks/gpu_decode.py llama-3.2-1b --no-peer --steps 64
tail -1 "$OUT/on.log"
step decode ${GPU_DECODE_S:-330} python3 benchmarks/gpu_decode.py smollm2-135m qwen3-0.6b llama-3.2-1b llama-3-8b --steps 32
sed -n '/^shape/,$p' "$OUT/decode.log"
rm -f "$OUT/pip.log"
