#!/usr/bin/env bash
# The GPU call after the twenty-fourth session's host-time and kernel changes (KV caches reused
# with their row views, uploads not waited for, the context made current once; RowNorm of 16-byte
# chunks; argmax positions without a modulo; element-wise 8-element items on by default):
#   (0) cuda conformance (the op table at odd sizes), the cuda tests (the norm's chunks and its
#       unaligned branch, the vector items), the attention tiles, the model zoo's greedy
#       generations (each generation reusing the last one's caches), the GGUF blocks, the
#       stacked candidate
#   (1) the 1B and 8B shapes' 512-token prefills beside eager and torch.compile max-autotune
#   (2) the first token's host path split at marks; the 1B prefill's kernels inside its graph
#   (3) compute-sanitizer memcheck over the op table, blocks and decode (what time is left)
# Logs under $OUT.
set -uo pipefail
source scripts/gpu_env.sh
step tests 150 python3 -m pytest -o addopts="" tests/backends/test_conformance.py \
  tests/backends/test_attention.py tests/backends/test_cuda_mma.py tests/backends/test_cuda_blocks.py \
  tests/backends/test_stacked.py tests/models/test_cuda_models.py -k "cuda or mma or tiles or stacked" \
  -q -p no:cacheprovider -n 12 --maxfail=30
grep -E "passed|failed|FAILED|Error" "$OUT/tests.log" | tail -12
step tests_cuda 60 python3 -m pytest -o addopts="" tests/backends/test_cuda.py \
  -k "bfloat16 or float16 or vector or row_norms" -q -p no:cacheprovider -n 12 --maxfail=30
grep -E "passed|failed|FAILED|Error" "$OUT/tests_cuda.log" | tail -8
step prefill 130 python3 benchmarks/gpu_decode.py llama-3.2-1b --prefill 512
sed -n '/^shape/,$p' "$OUT/prefill.log"
step prefill_8b 160 python3 benchmarks/gpu_decode.py llama-3-8b --prefill 512
sed -n '/^shape/,$p' "$OUT/prefill_8b.log"
step sanitizer 120 env LIGHTSPEED_CUDA_GRAPHS=0 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 \
  python3 -m pytest -o addopts="" tests/backends/test_conformance.py -k "cuda and (op_table_matches or blocks or decode)" \
  -q -p no:cacheprovider
grep -E "ERROR SUMMARY|passed|failed" "$OUT/sanitizer.log" | tail -3
step host 40 python3 scripts/gpu_host_profile.py llama-3.2-1b --prompt 512 --repeats 20
sed -n '1,/^profiled/p' "$OUT/host.log" | head -24
step profile 35 python3 scripts/gpu_profile.py llama-3.2-1b --prefill 512 --no-peer --steps 8
grep -v -i warn "$OUT/profile.log" | head -20
