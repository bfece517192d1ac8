#!/usr/bin/env bash
# The next GPU call (written at the end of the twenty-fourth session, which ran out of device time):
#   (0) memcheck over the op table, blocks and decode (its last run was cut 2 tests short) and
#       the stacked candidate's GPU tests (weights laid out in place, slices read through views:
#       written after the last call)
#   (1) the 1B and 8B shapes' 512-token prefills beside eager and torch.compile max-autotune
#   (2) the same with LIGHTSPEED_CUDA_STACKED=1 (ours alone, the search's report: is the stacked
#       candidate timed now, and does it win?), kernel by kernel
#   (3) the first token's host path split at marks (after this session's host-time changes)
# Logs under $OUT.
set -uo pipefail
source scripts/gpu_env.sh
step sanitizer 150 env LIGHTSPEED_CUDA_GRAPHS=0 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 \
  python3 -m pytest -o addopts="" tests/backends/test_conformance.py -k "cuda and (op_table_matches or blocks or decode)" \
  -q -p no:cacheprovider
grep -E "ERROR SUMMARY|passed|failed" "$OUT/sanitizer.log" | tail -3
step tests 90 python3 -m pytest -o addopts="" tests/backends/test_stacked.py tests/models/test_cuda_models.py \
  -q -p no:cacheprovider -n 12
grep -E "passed|failed|FAILED|Error" "$OUT/tests.log" | tail -8
step conformance 80 python3 -m pytest -o addopts="" tests/backends/test_conformance.py -k cuda -q -p no:cacheprovider -n 12
grep -E "passed|failed|FAILED" "$OUT/conformance.log" | tail -8
step prefill 130 python3 benchmarks/gpu_decode.py llama-3.2-1b --prefill 512
sed -n '/^shape/,$p' "$OUT/prefill.log"
LIGHTSPEED_CUDA_STACKED=1 LIGHTSPEED_LOG=search step stacked 60 python3 benchmarks/gpu_decode.py llama-3.2-1b \
  --prefill 512 --no-peer
grep -E "stacked|greedy|^shape|lightspeed cuda" "$OUT/stacked.log" | grep -v -i warn | head -20
LIGHTSPEED_CUDA_STACKED=1 step profile_stacked 40 python3 scripts/gpu_profile.py llama-3.2-1b --prefill 512 --no-peer --steps 8
grep -v -i warn "$OUT/profile_stacked.log" | head -14
step host 40 python3 scripts/gpu_host_profile.py llama-3.2-1b --prompt 512 --repeats 20
sed -n '1,/^profiled/p' "$OUT/host.log" | head -24
[ "${GPU_NEXT_8B:-0}" = 1 ] && step prefill_8b 160 python3 benchmarks/gpu_decode.py llama-3-8b --prefill 512
sed -n '/^shape/,$p' "$OUT/prefill_8b.log"
