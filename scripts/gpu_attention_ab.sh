#!/usr/bin/env bash
# The prompt's attention tile compiled for more blocks a multiprocessor (issue 28), on the GPU host:
#   (1) the tiles' GPU tests with LIGHTSPEED_CUDA_ATTENTION_MIN_BLOCKS=3 (and the packed mask's own)
#   (2) the 1B's 512-token prefill kernel by kernel (scripts/gpu_profile.py): ptxas's register
#       choice (MIN_BLOCKS=0: 254 registers, 2 blocks of 4 warps an SM); 3 blocks with the mask
#       packed and no register pipeline of the next key tile (168 registers, 24 bytes of spills);
#       MIN_BLOCKS=3 alone (168 and 184 bytes); the packed mask alone (244, 2 blocks); 3 blocks
#       without the pipeline (168 and 104 bytes)
#   (3) the 512-token prefill beside eager and torch.compile max-autotune with $GPU_AB_ENV
#       (default: the first 3-block variant)
# Locally, `python scripts/decode_launches.py --prefill --hidden 2048 --ffn 8192 --heads 32
# --kv-heads 8 --show greedy --resources` gives each kernel's registers and spills without a GPU.
# Logs under $OUT.
set -uo pipefail
source scripts/gpu_env.sh
LIGHTSPEED_CUDA_ATTENTION_MIN_BLOCKS=3 step tests_mb3 90 python3 -m pytest -o addopts="" \
  tests/backends/test_cuda_mma.py -k "attention or packed" -q -p no:cacheprovider -n 8
grep -E "passed|failed|FAILED|Error" "$OUT/tests_mb3.log" | tail -4
for v in "mb0:LIGHTSPEED_CUDA_ATTENTION_MIN_BLOCKS=0" \
         "mb3_packed_nopipe:LIGHTSPEED_CUDA_ATTENTION_MIN_BLOCKS=3 LIGHTSPEED_CUDA_ATTENTION_PACKED_MASK=1 LIGHTSPEED_CUDA_ATTENTION_PIPELINE=0" \
         "mb3:LIGHTSPEED_CUDA_ATTENTION_MIN_BLOCKS=3" "packed:LIGHTSPEED_CUDA_ATTENTION_PACKED_MASK=1" \
         "mb3_nopipe:LIGHTSPEED_CUDA_ATTENTION_MIN_BLOCKS=3 LIGHTSPEED_CUDA_ATTENTION_PIPELINE=0"; do
  (export ${v#*:}; step "profile_${v%%:*}" 60 python3 scripts/gpu_profile.py llama-3.2-1b --prefill 512 --no-peer --steps 8)
  echo "${v%%:*} (${v#*:}):"; grep -E "kernels per step|period|attention_mma" "$OUT/profile_${v%%:*}.log" | head -4
done
(export ${GPU_AB_ENV:-LIGHTSPEED_CUDA_ATTENTION_MIN_BLOCKS=3 LIGHTSPEED_CUDA_ATTENTION_PACKED_MASK=1 LIGHTSPEED_CUDA_ATTENTION_PIPELINE=0}
 step prefill_ab 130 python3 benchmarks/gpu_decode.py llama-3.2-1b --prefill 512)
sed -n '/^shape/,$p' "$OUT/prefill_ab.log"
