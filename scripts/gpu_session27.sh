#!/usr/bin/env bash
# Twenty-seventh session's GPU call (one warm machine; GPU_DEADLINE_S bounds it): the block and
# merge tests with the new defaults (parts, norm products over blocks, weights-only values kept
# out of a step's merged launches), the Gemma 3-shaped block step with the search's report and
# its kernels, the SmolLM2-shaped one, Whisper with the encoder searched at its one length, then
# the model table's rows not yet run (GPU_S27_ROWS, default "qwen3 gemma4_moe gemma3").
set -uo pipefail
source scripts/gpu_env.sh
step tests 70 python3 -m pytest -o addopts="" tests/backends/test_cuda_blocks.py tests/backends/test_cuda_merge.py \
  -q -p no:cacheprovider -n 8
tail -1 "$OUT/tests.log"
LIGHTSPEED_LOG=search step gemma 150 python3 benchmarks/gpu_blocks.py gemma3 random:gemma3 --repeats 2 \
  --configs native,cuda-blocks,cuda-bfloat16 --profile 24
grep -E "^(native|cuda)|gives native" "$OUT/gemma.log"; grep -A10 "gemma3-cuda-blocks" "$OUT/gemma.log" | head -11
step whisper 80 python3 benchmarks/gpu_models.py whisper --peer eager
grep -E "^whisper " "$OUT/whisper.log"
step smol 60 python3 benchmarks/gpu_blocks.py llama random:smollm2 --repeats 2 --configs native,cuda-blocks
grep -E "^cuda|gives native" "$OUT/smol.log"
step rows "${GPU_S27_ROWS_S:-200}" python3 benchmarks/gpu_models.py ${GPU_S27_ROWS:-qwen3 gemma4_moe gemma3} --peer compile
sed -n '/^row /,$p' "$OUT/rows.log"; grep -E "FAILED|Error" "$OUT/rows.log" | head -5
