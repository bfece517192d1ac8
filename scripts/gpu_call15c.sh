#!/usr/bin/env bash
# Fifteenth session, third call: our 1B decode step kernel by kernel in launch order (PDL off),
# then decode of the small shapes beside the peers with the cluster attention on by default.
set -uo pipefail
source scripts/gpu_env.sh
LIGHTSPEED_CUDA_PDL=0 step profile 100 python3 scripts/gpu_profile.py llama-3.2-1b --no-peer --steps 24
grep -v -i warn "$OUT/profile.log" | head -220
step decode ${GPU_DECODE_S:-280} python3 benchmarks/gpu_decode.py smollm2-135m qwen3-0.6b llama-3.2-1b --steps 64
sed -n '/^shape/,$p' "$OUT/decode.log"
rm -f "$OUT/pip.log" "$OUT"/trace-*.gz
