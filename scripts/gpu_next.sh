#!/usr/bin/env bash
# The sixteenth session's first GPU call (written at the end of the fifteenth, which had no device
# time left): what was written blind, checked first, then measured against its switch.
#   (1) tests: the tiles with unrolled accumulators and the 128-row tiles (test_cuda_mma.py, both
#       fragment loads x both shapes), the split products, the cache rows/zeros hooks (cuda
#       conformance case and test_cuda.py)
#   (2) a 512-token 1B prefill (TTFT: the prefill now writes the cache in place, no host round
#       trip) with the 64 x 64 tiles and with LIGHTSPEED_CUDA_MMA_TILE=128, then the faster traced
#   (3) the Qwen3-MoE row beside transformers + torch.compile (GPU_NEXT_MOE=0: not) and, with
#       GPU_NEXT_DECODE=1, the four decode shapes beside the peers
# Logs under $OUT (at most 8 files come back: the rest are deleted).
set -uo pipefail
source scripts/gpu_env.sh
if [ "${GPU_NEXT_TESTS:-1}" = 1 ]; then
step tests 150 python3 -m pytest -o addopts="" tests/backends/test_cuda_mma.py tests/backends/test_cuda_split.py \
  tests/backends/test_cuda.py tests/backends/test_conformance.py tests/backends/test_gather_matmul.py \
  -k "mma or tiles or split or zeroed or zeros or long_row or gather" -q -p no:cacheprovider -n 8
grep -E "FAILED|Error|passed|failed" "$OUT/tests.log" | head -20
fi
for t in 64 128; do
  LIGHTSPEED_CUDA_MMA_TILE=$t LIGHTSPEED_CACHE_DIR=/tmp/ls-cache-$t step prefill_$t 90 python3 benchmarks/gpu_decode.py \
    llama-3.2-1b --prompt 512 --no-peer --steps 4
  grep "lightspeed {" "$OUT/prefill_$t.log"
done
if [ "${GPU_NEXT_TRACE:-1}" = 1 ]; then
  LIGHTSPEED_CUDA_MMA_TILE=${GPU_NEXT_TILE:-128} LIGHTSPEED_CACHE_DIR=/tmp/ls-cache-${GPU_NEXT_TILE:-128} \
    LIGHTSPEED_TRACE=$OUT/ptrace.json step prefill_trace 90 python3 benchmarks/gpu_decode.py llama-3.2-1b \
    --prompt 512 --no-peer --steps 2
  python3 scripts/trace_summary.py "$OUT/ptrace.json" --by-run > "$OUT/prefill_trace.txt" 2>&1
  rm -f "$OUT/ptrace.json"; head -30 "$OUT/prefill_trace.txt"
fi
# the mixture-of-experts row (Qwen3-30B-A3B's shape, 4 layers) beside transformers + torch.compile:
# its experts now read in place (GatherMatmul), not copied
if [ "${GPU_NEXT_MOE:-1}" = 1 ]; then
  step moe 240 python3 benchmarks/gpu_models.py qwen3_moe --peer compile
  sed -n '/^cuda /,$p' "$OUT/moe.log" | head -8; tail -3 "$OUT/moe.log"
fi
# GPU_NEXT_SPLIT_AB=1: the gated products split too (LIGHTSPEED_CUDA_SPLIT=20000: the 1B's 8192 and
# the 8B's 14336 outputs a block each) against the default, the 1B and 8B steps without peers
if [ "${GPU_NEXT_SPLIT_AB:-0}" = 1 ]; then
  for v in 1 20000; do
    LIGHTSPEED_CUDA_SPLIT=$v LIGHTSPEED_CACHE_DIR=/tmp/ls-cache-split$v step split_$v 200 python3 benchmarks/gpu_decode.py \
      llama-3.2-1b llama-3-8b --no-peer --steps 32
    grep "lightspeed {" "$OUT/split_$v.log" | cut -c1-80
  done
fi
if [ "${GPU_NEXT_DECODE:-0}" = 1 ]; then
  step decode 300 python3 benchmarks/gpu_decode.py smollm2-135m qwen3-0.6b llama-3.2-1b llama-3-8b --steps 32
  sed -n '/^shape/,$p' "$OUT/decode.log"
fi
rm -f "$OUT/pip.log"
