#!/usr/bin/env bash
# Thirty-fifth session's GPU work in stages, one or more a call (each bounded by GPU_DEADLINE_S):
#   verify   with the block defaults of the thirty-fourth session (split 4, K-quant parts, the unrolled
#            parts loop, float32 norm chunks; no switch exported): every block, tile and RowNormAdd GPU
#            test (the products.egg gate_exp refactor's first GPU run), then cuda conformance
#   memcheck compute-sanitizer over the block tests with those defaults (the GeGLU products included)
#   files    scripts/gpu_issue26.sh over the carried weight parts (the real Gemma 3 file's block step beside
#            float32 and bf16 and native's text; Whisper on both backends and in float16), then the
#            models table's rows in GPU_MODELS_ROWS (default gemma3) with the joined files
#   prefill  the 1B's 512-token TTFT beside eager and torch.compile max-autotune computing the same first
#            token (the head on the last row: the peer's fair form since this session), the stacked
#            candidates offered (LIGHTSPEED_CUDA_STACKED=1: stacked-glu is new) and their times logged; with
#            GPU_S35_ALL_LOGITS=1 again beside the peer's old every-row form
# Usage (GPU host): bash scripts/gpu_session35.sh STAGE...   Logs under $OUT.
set -uo pipefail
source scripts/gpu_env.sh
for stage in "$@"; do
  case $stage in
    verify)
      step conformance 150 python3 -m pytest -o addopts="" tests/backends/test_conformance.py -k cuda -q \
        -p no:cacheprovider -n 8
      grep -E "passed|failed|FAILED" "$OUT/conformance.log" | tail -4
      step verify "${GPU_S35_VERIFY_S:-200}" python3 -m pytest -o addopts="" tests/backends/test_cuda_blocks.py \
        tests/backends/test_row_norm_add.py -q -p no:cacheprovider -n 8
      grep -E "passed|failed|FAILED" "$OUT/verify.log" | tail -8
      step verify_tiles 90 python3 -m pytest -o addopts="" tests/backends/test_cuda_mma.py tests/backends/test_stacked.py \
        -k "GeGLU or gelu or geglu or stacked" -q -p no:cacheprovider -n 8
      grep -E "passed|failed|FAILED" "$OUT/verify_tiles.log" | tail -4 ;;
    memcheck)
      memcheck_step memcheck_blocks "${GPU_S35_MEMCHECK_S:-300}" tests/backends/test_cuda_blocks.py \
        -k "${GPU_S35_MEMCHECK_K:-test_block_products_match_float64 or test_norm_products_over_blocks_match_float64 or kquant_parts_and_unrolled or gemma_decode_layer or exactly}" ;;
    files)
      GPU_ISSUE26_TABLE=${GPU_ISSUE26_TABLE:-1} GPU_MODELS_ROWS=${GPU_MODELS_ROWS:-gemma3} \
        GPU_MODELS_S=${GPU_MODELS_S:-200} bash scripts/gpu_issue26.sh ;;
    prefill)
      # (the stacked candidates offered and timed: stacked-glu, gate and up alone, is new this session)
      LIGHTSPEED_CUDA_STACKED=1 LIGHTSPEED_LOG=search step prefill 300 python3 benchmarks/gpu_decode.py \
        llama-3.2-1b --prefill 512
      sed -n '/^shape/,$p' "$OUT/prefill.log"; grep -iE "stacked|winner" "$OUT/prefill.log" | head -12
      if [ "${GPU_S35_ALL_LOGITS:-0}" = 1 ]; then
        step prefill_all 240 python3 benchmarks/gpu_decode.py llama-3.2-1b --prefill 512 --peer-all-logits
        sed -n '/^shape/,$p' "$OUT/prefill_all.log"
      fi ;;
    *) echo "unknown stage $stage (verify, memcheck, files, prefill)" ;;
  esac
done
