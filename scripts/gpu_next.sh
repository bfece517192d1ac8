#!/usr/bin/env bash
# The twenty-third session's first GPU call (written at the end of the twenty-second, which had no
# device time left for it): issue 28's prefill, where its time goes and what the blind work gives.
#   (0) cuda conformance (the one-allocation caches have not run on a GPU; LIGHTSPEED_CUDA_UNROLL=4
#       for the unrolled element-wise loops, which then need it too: GPU_NEXT_UNROLL_CONFORMANCE=1)
#   (1) the host's part of a 512-token TTFT (~1.3 ms of 4.9 on an H100: the kernels were 3.55 ms):
#       cProfile of the first token's path, and how many graphs were captured while timed
#       (scripts/gpu_host_profile.py; the KV caches are now one allocation, cleared once)
#   (2) the prefill beside eager and torch.compile max-autotune, then with element-wise kernels
#       unrolled (LIGHTSPEED_CUDA_UNROLL=4, 4 items a trip: the A/B), then with the stacked products
#       (LIGHTSPEED_CUDA_STACKED=1: the search now has a fixed "stacked" candidate) inside the graph
#   (3) Nsight Compute over the prefill (the attention tile: 59 us a layer against cuDNN's 21)
#       where the host runs ncu (GPU_NEXT_NCU=0: not)
#   (4) the mixture-of-experts row beside transformers + torch.compile (GPU_NEXT_MOE=1)
# Logs under $OUT.
set -uo pipefail
source scripts/gpu_env.sh
step conformance 150 python3 -m pytest -o addopts="" tests/backends/test_conformance.py tests/models/test_cuda_models.py \
  tests/backends/test_cuda_blocks.py -k cuda -q -p no:cacheprovider -n 8
tail -3 "$OUT/conformance.log"
if [ "${GPU_NEXT_UNROLL_CONFORMANCE:-1}" = 1 ]; then
  LIGHTSPEED_CUDA_UNROLL=4 step conformance_unroll4 150 python3 -m pytest -o addopts="" \
    tests/backends/test_conformance.py -k cuda -q -p no:cacheprovider -n 8
  tail -2 "$OUT/conformance_unroll4.log"
fi
step host 120 python3 scripts/gpu_host_profile.py llama-3.2-1b --prompt 512 --repeats 20
grep -v -i warn "$OUT/host.log" | head -50
step prefill 150 python3 benchmarks/gpu_decode.py llama-3.2-1b --prefill 512
sed -n '/^shape/,$p' "$OUT/prefill.log"
LIGHTSPEED_CUDA_UNROLL=4 step prefill_unroll4 120 python3 benchmarks/gpu_decode.py llama-3.2-1b --prefill 512 --no-peer
echo "== LIGHTSPEED_CUDA_UNROLL=4"; sed -n '/^shape/,$p' "$OUT/prefill_unroll4.log"
LIGHTSPEED_CUDA_STACKED=1 step stacked 120 python3 scripts/gpu_profile.py llama-3.2-1b --prefill 512 --no-peer --steps 8
grep -v -i warn "$OUT/stacked.log" | head -24
if [ "${GPU_NEXT_NCU:-1}" = 1 ]; then
  step ncu 150 python3 scripts/gpu_ncu.py run llama-3.2-1b --prompt 512
  tail -30 "$OUT/ncu.log"
fi
if [ "${GPU_NEXT_MOE:-0}" = 1 ]; then
  step moe 240 python3 benchmarks/gpu_models.py qwen3_moe --peer compile
  sed -n '/^cuda /,$p' "$OUT/moe.log" | head -8
fi
