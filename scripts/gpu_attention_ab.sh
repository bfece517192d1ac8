#!/usr/bin/env bash
# The prompt's attention tile's variants (issue 28), on the GPU host:
#   (1) the tiles' GPU tests, the split tile's among them (test_cuda_mma.py -k "attention or split")
#   (2) the 1B's 512-token prefill kernel by kernel (scripts/gpu_profile.py): the defaults (254
#       registers, 2 blocks of 4 warps an SM, 38.1 us a layer on an H100 on 2026-12-07); a row
#       tile's keys split over a pair of blocks (LIGHTSPEED_CUDA_ATTENTION_SPLIT=1: every other key
#       tile each, merged through distributed shared memory, the longest tiles first); the split
#       with the packed mask. (3 blocks an SM lost on 2026-12-07: 45.7 us; the packed mask 37.6.)
#   (3) the 512-token prefill beside eager and torch.compile max-autotune with $GPU_AB_ENV
#       (default: the split tile)
# Locally, `python scripts/decode_launches.py --prefill --hidden 2048 --ffn 8192 --heads 32
# --kv-heads 8 --show greedy --resources` gives each kernel's registers and spills without a GPU.
# Logs under $OUT.
set -uo pipefail
source scripts/gpu_env.sh
step tests_split 150 python3 -m pytest -o addopts="" tests/backends/test_cuda_mma.py -k "attention or split" \
  -q -p no:cacheprovider -n 8
grep -E "passed|failed|FAILED|Error" "$OUT/tests_split.log" | tail -4
for v in "defaults:LIGHTSPEED_CUDA_ATTENTION_SPLIT=0" "split:LIGHTSPEED_CUDA_ATTENTION_SPLIT=1" \
         "split_packed:LIGHTSPEED_CUDA_ATTENTION_SPLIT=1 LIGHTSPEED_CUDA_ATTENTION_PACKED_MASK=1"; do
  (export ${v#*:}; step "profile_${v%%:*}" 60 python3 scripts/gpu_profile.py llama-3.2-1b --prefill 512 --no-peer --steps 8)
  echo "${v%%:*} (${v#*:}):"; grep -E "kernels per step|period|attention_mma" "$OUT/profile_${v%%:*}.log" | head -4
done
(export ${GPU_AB_ENV:-LIGHTSPEED_CUDA_ATTENTION_SPLIT=1}
 step prefill_ab 130 python3 benchmarks/gpu_decode.py llama-3.2-1b --prefill 512)
sed -n '/^shape/,$p' "$OUT/prefill_ab.log"
