#!/usr/bin/env bash
# The next GPU call (written in the twenty-third session, which had no device time left for it):
# element-wise kernels of 8-element items (16-byte loads and stores: kernels/region.py), switched
# on here by LIGHTSPEED_CUDA_VECTOR=1 (off by default until this call shows they hold).
#   (0) the GPU tests they touch: the op table in the 16-bit dtypes, the vector items' own test
#       (odd rows, unaligned torch views), the conformance suite's 16-bit cases, the stacked
#       candidate's logits on cuda (test_stacked.py)
#   (1) the 1B shape's 512-token prefill beside eager and torch.compile max-autotune, then kernel
#       by kernel inside its graph with and without the vector items (LIGHTSPEED_CUDA_VECTOR=0)
#   (2) the same kernel by kernel with the stacked candidate (LIGHTSPEED_CUDA_STACKED=1)
#   (3) the host's part of the 1B's first token (scripts/gpu_host_profile.py)
#   (4) with GPU_NEXT_8B=1 the 8B shape's 512-token prefill beside the peers
# Logs under $OUT.  GPU_NEXT_TESTS=0: no tests.
set -uo pipefail
source scripts/gpu_env.sh
export LIGHTSPEED_CUDA_VECTOR=${LIGHTSPEED_CUDA_VECTOR:-1}
if [ "${GPU_NEXT_TESTS:-1}" = 1 ]; then
  step tests 150 python3 -m pytest -o addopts="" tests/backends/test_cuda.py tests/backends/test_conformance.py \
    tests/backends/test_stacked.py -k "bfloat16 or float16 or vector or stacked" -q -p no:cacheprovider -n 12
  grep -E "passed|failed|Error" "$OUT/tests.log" | tail -8
fi
step prefill 150 python3 benchmarks/gpu_decode.py llama-3.2-1b --prefill 512
sed -n '/^shape/,$p' "$OUT/prefill.log"
step profile 45 python3 scripts/gpu_profile.py llama-3.2-1b --prefill 512 --no-peer --steps 8
grep -v -i warn "$OUT/profile.log" | head -8
LIGHTSPEED_CUDA_VECTOR=0 step profile_novec 45 python3 scripts/gpu_profile.py llama-3.2-1b --prefill 512 --no-peer --steps 8
echo "== LIGHTSPEED_CUDA_VECTOR=0"; grep -v -i warn "$OUT/profile_novec.log" | head -8
# the stacked candidate (one q+k+v and one gate+up product a layer, slices read in place where
# the readers can: fixed in the twenty-third session after its device time), ours alone
LIGHTSPEED_CUDA_STACKED=1 step profile_stacked 60 python3 scripts/gpu_profile.py llama-3.2-1b --prefill 512 --no-peer --steps 8
echo "== LIGHTSPEED_CUDA_STACKED=1"; grep -v -i warn "$OUT/profile_stacked.log" | head -12
# the host's part of the first token: before the graph launch, and from the launch to the token
step host 60 python3 scripts/gpu_host_profile.py llama-3.2-1b --prompt 512 --repeats 20
grep -E "TTFT|without the profiler" "$OUT/host.log" | head -4
if [ "${GPU_NEXT_8B:-0}" = 1 ]; then
  step prefill_8b 150 python3 benchmarks/gpu_decode.py llama-3-8b --prefill 512
  sed -n '/^shape/,$p' "$OUT/prefill_8b.log"
fi
