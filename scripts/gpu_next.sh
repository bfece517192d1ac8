#!/usr/bin/env bash
# The twenty-third session's second GPU call: the attention tiles with the mask a tile ahead, the
# hardware bf16x2 packing and ex2.approx (kernels/attention_mma.py), and the prompt's token as the
# prefill program's own argmax (models/generate.py), then issue 28's prefill figures.
#   (0) the GPU tests these touch: the attention tiles against the reference (test_cuda_mma.py,
#       test_attention.py), the model zoo on cuda (greedy generations through the new prefill)
#   (1) the 1B shape's 512-token prefill beside eager and torch.compile max-autotune, then the
#       same prefill kernel by kernel inside its graph (gpu_profile.py --prefill)
#   (2) the 8B shape at 4096 tokens (ours: % of the FLOP floor), then at 512 beside the peers
# Logs under $OUT.  GPU_NEXT_TESTS=0: no tests.
set -uo pipefail
source scripts/gpu_env.sh
if [ "${GPU_NEXT_TESTS:-1}" = 1 ]; then
  step tests 150 python3 -m pytest -o addopts="" tests/backends/test_cuda_mma.py tests/backends/test_attention.py \
    tests/models/test_cuda_models.py -k "cuda or mma or tiles" -q -p no:cacheprovider -n 8
  grep -E "passed|failed|Error" "$OUT/tests.log" | tail -8
fi
step prefill 170 python3 benchmarks/gpu_decode.py llama-3.2-1b --prefill 512
sed -n '/^shape/,$p' "$OUT/prefill.log"
step profile 60 python3 scripts/gpu_profile.py llama-3.2-1b --prefill 512 --no-peer --steps 8
grep -v -i warn "$OUT/profile.log" | head -14
step prefill_8b_4096 120 python3 benchmarks/gpu_decode.py llama-3-8b --prefill 4096 --no-peer
sed -n '/^shape/,$p' "$OUT/prefill_8b_4096.log"
step prefill_8b 240 python3 benchmarks/gpu_decode.py llama-3-8b --prefill 512
sed -n '/^shape/,$p' "$OUT/prefill_8b.log"
