#!/usr/bin/env bash
# Twenty-eighth session's second GPU call (GPU_DEADLINE_S bounds it): the new kernels' GPU tests
# (the split attention tile, issue 28; the grouped tensor-core expert products, GatherMatmulMma,
# issue 26), the Qwen3-30B-A3B-shaped MoE prompt dense against grouped (LIGHTSPEED_MOE_PREFILL),
# then the attention tile's profiles (defaults / split) and the 512-token prefill beside the peers
# with the split tile (scripts/gpu_attention_ab.sh's steps).
set -uo pipefail
source scripts/gpu_env.sh
step tests 170 python3 -m pytest -o addopts="" tests/backends/test_gather_matmul.py tests/backends/test_cuda_mma.py \
  -k "gather or split or attention_tiles_match" -q -p no:cacheprovider -n 8
grep -E "passed|failed|FAILED|Error" "$OUT/tests.log" | tail -6
for mode in dense gather; do
  (export LIGHTSPEED_MOE_PREFILL=$mode
   step "moe_$mode" 90 python3 benchmarks/gpu_models.py qwen3_moe --prompt ${GPU_MOE_PROMPT:-512} --steps 8 --peer none)
  echo "moe $mode:"; sed -n '/^row /,$p' "$OUT/moe_$mode.log" | head -4
done
for v in "defaults:LIGHTSPEED_CUDA_ATTENTION_SPLIT=0" "split:LIGHTSPEED_CUDA_ATTENTION_SPLIT=1"; do
  (export ${v#*:}; step "profile_${v%%:*}" 60 python3 scripts/gpu_profile.py llama-3.2-1b --prefill 512 --no-peer --steps 8)
  echo "${v%%:*} (${v#*:}):"; grep -E "kernels per step|period|attention_mma" "$OUT/profile_${v%%:*}.log" | head -4
done
(export LIGHTSPEED_CUDA_ATTENTION_SPLIT=1
 step prefill_split 130 python3 benchmarks/gpu_decode.py llama-3.2-1b --prefill 512)
sed -n '/^shape/,$p' "$OUT/prefill_split.log"
