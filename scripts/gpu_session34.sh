#!/usr/bin/env bash
# Thirty-fourth session's GPU work in stages, one or more a call (each bounded by GPU_DEADLINE_S):
#   verify   the tanh-GELU gated products' GPU tests (NormMatmulGeGLU over every block type with K-quant
#            parts and the unrolled loop too, MatmulGeGLUMma's tiles against the reference), RowNormAdd's
#            (its rule a relation since the 33rd session's review: not yet run on a GPU) and cuda conformance
#   time     gpu_session33.sh's `time`: the Gemma 3-shaped block step beside bf16, then the 32nd session's
#            switches (split, K-quant parts + split, float32 norm chunks, unrolled loop, all); its base now
#            runs RowNormAdd and NormMatmulGeGLU (a Gemma 3 decode layer 12 -> 9 launches, blocks and bf16)
#   fusions  the same step with the tree before both fusions (.before/src: `mkdir -p .before && git archive
#            19a8571^ src | tar -x -C .before` here) beside this one, alternated (gpu_session33.sh's `normadd`)
#   memcheck compute-sanitizer over the GeGLU block products, then gpu_session32.sh's memcheck stage
#   tests / stacked: gpu_session33.sh's stages
# Usage (GPU host): bash scripts/gpu_session34.sh STAGE...   Logs under $OUT.
set -uo pipefail
source scripts/gpu_env.sh
for stage in "$@"; do
  case $stage in
    verify)
      # (68 tests: the GeGLU kinds over every block type, the Gemma layer's launches, the tiles in
      # bfloat16 / float16, RowNormAdd's; then the 271 cuda conformance tests)
      step verify 240 python3 -m pytest -o addopts="" tests/backends/test_cuda_blocks.py tests/backends/test_cuda_mma.py \
        tests/backends/test_row_norm_add.py -k "GeGLU or geglu or gelu or gemma or row_norm" -q -p no:cacheprovider -n 8
      grep -E "passed|failed|FAILED" "$OUT/verify.log" | tail -8
      step conformance 200 python3 -m pytest -o addopts="" tests/backends/test_conformance.py -k cuda -q \
        -p no:cacheprovider -n 8
      grep -E "passed|failed|FAILED" "$OUT/conformance.log" | tail -4 ;;
    time) bash scripts/gpu_session33.sh time ;;
    fusions) bash scripts/gpu_session33.sh normadd ;;  # (the A/B now covers RowNormAdd and the GeGLU product)
    memcheck)
      step memcheck_geglu 150 env LIGHTSPEED_CUDA_GRAPHS=0 compute-sanitizer --tool memcheck --error-exitcode 9 \
        --print-limit 20 python3 -m pytest -o addopts="" tests/backends/test_cuda_blocks.py tests/backends/test_cuda_mma.py \
        -k "GeGLU or gelu" -q -p no:cacheprovider
      grep -E "ERROR SUMMARY|passed|failed" "$OUT/memcheck_geglu.log" | tail -3
      bash scripts/gpu_session32.sh memcheck ;;
    tests|stacked) bash scripts/gpu_session33.sh "$stage" ;;
    *) echo "unknown stage $stage (verify, time, fusions, memcheck, tests, stacked)" ;;
  esac
done
