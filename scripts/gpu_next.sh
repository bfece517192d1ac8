#!/usr/bin/env bash
# The next GPU call (twenty-fourth session, second call): the host's part of a prompt's first
# token split at marks, the 1B and 8B 512-token prefills beside the peers after the host-time
# changes (a bucket's call handed its given inputs), and why the stacked candidate loses (its
# search report: every candidate's measured time).
#   (0) the cuda model zoo's greedy generations (prefill calls through the buckets)
#   (1) scripts/gpu_host_profile.py: TTFT, before/after the graph launch, the marks
#   (2) the 1B shape's 512-token prefill beside eager and torch.compile max-autotune
#   (3) LIGHTSPEED_CUDA_STACKED=1 LIGHTSPEED_LOG=search: the prefill's search, ours alone
#   (4) with GPU_NEXT_8B=1 the 8B shape's 512-token prefill beside the peers
# Logs under $OUT.  GPU_NEXT_TESTS=0: no tests.
set -uo pipefail
source scripts/gpu_env.sh
if [ "${GPU_NEXT_TESTS:-1}" = 1 ]; then
  step tests 120 python3 -m pytest -o addopts="" tests/backends/test_cuda_models.py tests/backends/test_native.py \
    -k "cuda or bucket" -q -p no:cacheprovider -n 12
  grep -E "passed|failed|Error" "$OUT/tests.log" | tail -8
fi
step host 60 python3 scripts/gpu_host_profile.py llama-3.2-1b --prompt 512 --repeats 20
sed -n '1,/^== by tottime/p' "$OUT/host.log" | grep -v "^== by" | head -30
step prefill 150 python3 benchmarks/gpu_decode.py llama-3.2-1b --prefill 512
sed -n '/^shape/,$p' "$OUT/prefill.log"
LIGHTSPEED_CUDA_STACKED=1 LIGHTSPEED_LOG=search step stacked 90 python3 benchmarks/gpu_decode.py llama-3.2-1b \
  --prefill 512 --no-peer
grep -E -i "candidate|winner|stacked|greedy|few-rows|fused|default|^shape|lightspeed cuda" "$OUT/stacked.log" | grep -v -i warn | head -40
if [ "${GPU_NEXT_8B:-0}" = 1 ]; then
  step prefill_8b 175 python3 benchmarks/gpu_decode.py llama-3-8b --prefill 512
  sed -n '/^shape/,$p' "$OUT/prefill_8b.log"
fi
