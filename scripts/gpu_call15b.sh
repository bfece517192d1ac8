#!/usr/bin/env bash
# Fifteenth session, second call: the 1B decode timeline beside torch.compile's (kernel table),
# the tiles' ldmatrix A/B on a 512-token prefill, the 8B shape's decode beside the peers.
set -uo pipefail
source scripts/gpu_env.sh
LIGHTSPEED_CUDA_PDL=0 step profile 130 python3 scripts/gpu_profile.py llama-3.2-1b --steps 24
grep -v -i warn "$OUT/profile.log" | head -70
for l in 0 1; do
  LIGHTSPEED_CUDA_LDMATRIX=$l step prefill_ld$l 100 python3 benchmarks/gpu_decode.py llama-3.2-1b --prompt 512 --no-peer --steps 4
  tail -2 "$OUT/prefill_ld$l.log"
done
step decode8b ${GPU_8B_S:-300} python3 benchmarks/gpu_decode.py llama-3-8b --steps 32
tail -12 "$OUT/decode8b.log"
