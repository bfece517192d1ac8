#!/usr/bin/env bash
# The decode-speed check on the GPU host (the `device` tool's machine), from the repository root:
# the cuda tests that cover the fused kernels, memcheck over them, then benchmarks/gpu_decode.py
# on every shape beside PyTorch eager and torch.compile in the same run, and one long-context run.
#   bash scripts/gpu_decode_check.sh            (results and logs under $OUT, default /tmp/gpu-out)
# GPU_DECODE_SHAPES picks the shapes; an older tree's src carried as .before/src is measured at
# the long context too (before/after in the same run).
set -uo pipefail
source scripts/gpu_env.sh
step tests "${GPU_TESTS_S:-150}" python3 -m pytest -o addopts="" tests/backends/test_attention.py tests/backends/test_cuda.py \
  tests/models/test_cuda_models.py -q -p no:cacheprovider -n 8
step memcheck "${GPU_MEMCHECK_S:-120}" env LIGHTSPEED_CUDA_GRAPHS=0 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 \
  python3 -m pytest -o addopts="" tests/backends/test_attention.py -k cuda -q -p no:cacheprovider
step decode "${GPU_DECODE_S:-330}" python3 benchmarks/gpu_decode.py ${GPU_DECODE_SHAPES:-smollm2-135m qwen3-0.6b llama-3.2-1b llama-3-8b} --steps 64
sed -n '/^shape/,$p' "$OUT/decode.log"
cp "$OUT/gpu_decode.json" "$OUT/gpu_decode_shapes.json" 2>/dev/null
step long "${GPU_LONG_S:-90}" python3 benchmarks/gpu_decode.py llama-3.2-1b --no-peer --steps 32 --prompt 1024
tail -1 "$OUT/long.log"
if [ -d .before/src ]; then
  PYTHONPATH=/tmp/site:$PWD/.before/src:$PWD step long_before 90 python3 benchmarks/gpu_decode.py llama-3.2-1b --no-peer \
    --steps 32 --prompt 1024
  tail -1 "$OUT/long_before.log"
fi
# the one-block-per-row attention kernel (LIGHTSPEED_ATTENTION_CLUSTER=0; the cluster is the default):
# correctness, then decode at a short and a long context (its own cache: search decisions are not
# keyed by the flag)
if [ "${GPU_DECODE_CLUSTER:-1}" = 1 ]; then
  export LIGHTSPEED_ATTENTION_CLUSTER=0
  LIGHTSPEED_CACHE_DIR=/tmp/ls-cache-cluster step cluster_tests "${GPU_LONG_S:-90}" python3 -m pytest -o addopts="" \
    tests/backends/test_attention.py -k cuda -q -p no:cacheprovider
  LIGHTSPEED_CACHE_DIR=/tmp/ls-cache-cluster step cluster_long "${GPU_LONG_S:-90}" python3 benchmarks/gpu_decode.py llama-3.2-1b \
    --no-peer --steps 32 --prompt 1024
  tail -1 "$OUT/cluster_long.log"
  if [ "${GPU_DECODE_CLUSTER_SHORT:-1}" = 1 ]; then
    LIGHTSPEED_CACHE_DIR=/tmp/ls-cache-cluster step cluster_short "${GPU_LONG_S:-90}" python3 benchmarks/gpu_decode.py \
      llama-3.2-1b --no-peer --steps 64
    tail -1 "$OUT/cluster_short.log"
  fi
fi
