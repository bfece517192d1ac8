#!/usr/bin/env bash
# Fifteenth session, first call: untested GPU paths (blocks, rows, cluster attention, ldmatrix),
# the 1B decode timeline, cuda conformance named.
set -uo pipefail
source scripts/gpu_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
T="tests/backends/test_cuda_blocks.py tests/backends/test_cuda_rows.py tests/backends/test_attention.py"
step tests_plain 130 python3 -m pytest -o addopts="" $T -q -p no:cacheprovider -n 8 -x
grep -E "FAILED|Error|passed|failed" "$OUT/tests_plain.log" | head -12
LIGHTSPEED_ATTENTION_CLUSTER=1 step tests_cluster 100 python3 -m pytest -o addopts="" tests/backends/test_attention.py tests/backends/test_cuda_rows.py -q -p no:cacheprovider -n 8
grep -E "FAILED|Error|passed|failed" "$OUT/tests_cluster.log" | head -12
step mma 90 python3 -m pytest -o addopts="" tests/backends/test_cuda_mma.py -q -p no:cacheprovider -n 4
grep -E "FAILED|Error|passed|failed" "$OUT/mma.log" | head -12
LIGHTSPEED_CUDA_PDL=0 step profile 110 python3 scripts/gpu_profile.py llama-3.2-1b --no-peer --steps 24
grep -v -i warn "$OUT/profile.log" | head -45
GPU_ROUND_TESTS=0 GPU_PROFILE_SHAPES= GPU_DECODE_SHAPES= GPU_ROUND_CONFORMANCE=1 GPU_CONFORMANCE_S=120 bash scripts/gpu_round.sh
