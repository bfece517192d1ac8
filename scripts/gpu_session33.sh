#!/usr/bin/env bash
# Thirty-third session's GPU work in stages, one or more a call (each bounded by GPU_DEADLINE_S):
#   verify   the cuBLASLt GPU tests, RowNormAdd's and cuda conformance (the 32nd session's closing review made the
#            library's lock re-entrant and moved its plan preparation under it; 332 passed, 33rd session)
#   time     the Gemma 3-shaped block step (random blocks; TPOT, PDL on) by default beside bf16, then
#            GPU_S33_TIME's variants (NAME:VAR=VALUE,..., a process each): split block and norm
#            products (LIGHTSPEED_CUDA_BLOCK_SPLIT=4; with K-quant parts, 4 warps over the Q6_K
#            down product's 256 parts instead of 2 over its 64 groups), the parts loop unrolled with its alignment
#            tested once (LIGHTSPEED_CUDA_BLOCK_UNROLL=4), float32 row norms in 16-byte chunks
#            (LIGHTSPEED_CUDA_NORM_F32_CHUNKS=1), all four; then SmolLM2's shape by default and
#            with GPU_S33_SMOL's variants
#   tests    the block tests and the float32 row-norm tests with GPU_S33_ON's switches exported
#            (the winners of `time`, before they become defaults)
#   stacked  the 1B's 512-token prefill with stacked products (LIGHTSPEED_CUDA_STACKED=1: the search
#            times `stacked` and `stacked-qkv` beside its budget) beside the peers, with the search's
#            log, then without, ours alone (gpu_session32.sh's stage)
#   memcheck compute-sanitizer's memcheck over the block kernels' tests with K-quant parts, the
#            unrolled loop and the split on, and the grouped experts' GPU tests (gpu_session32.sh's stage)
#   normadd  RowNormAdd (a residual added by the norm's kernel) timed: the Gemma 3-shaped step with
#            the tree before it (.before/src) beside this one, alternated
# Usage (GPU host): bash scripts/gpu_session33.sh STAGE...   Logs under $OUT.
set -uo pipefail
source scripts/gpu_env.sh
SWITCHES=${GPU_S33_ON:-LIGHTSPEED_CUDA_BLOCK_SPLIT=4,LIGHTSPEED_CUDA_BLOCK_UNROLL=4,LIGHTSPEED_CUDA_NORM_F32_CHUNKS=1}
for stage in "$@"; do
  case $stage in
    verify)
      step verify 200 python3 -m pytest -o addopts="" tests/backends/test_cuda_cublaslt.py tests/backends/test_row_norm_add.py \
        tests/backends/test_conformance.py -k "cuda or cublaslt or row_norm" -q -p no:cacheprovider -n 8
      grep -E "passed|failed|FAILED" "$OUT/verify.log" | tail -6 ;;
    time)
      for run in base:LIGHTSPEED_CUDA_BLOCK_SPLIT=0 ${GPU_S33_TIME:-split4:LIGHTSPEED_CUDA_BLOCK_SPLIT=4 kparts_split4:LIGHTSPEED_CUDA_BLOCK_SPLIT=4,LIGHTSPEED_CUDA_KQUANT_PARTS=1 f32norm:LIGHTSPEED_CUDA_NORM_F32_CHUNKS=1 u4:LIGHTSPEED_CUDA_BLOCK_UNROLL=4 all:$SWITCHES,LIGHTSPEED_CUDA_KQUANT_PARTS=1}; do
        name=${run%%:*} envs=${run#*:}
        configs=native,cuda-blocks
        [ "$name" = base ] && configs=native,cuda-blocks,cuda-bfloat16
        limit=90; [ "$name" = base ] && limit=240  # the first run compiles every kernel on a fresh machine
        (export ${envs//,/ }; step "t_$name" $limit python3 benchmarks/gpu_blocks.py gemma3 random:gemma3 --repeats 3 \
          --configs $configs)
        echo "$name ($envs):"; sed -n '/greedy tokens/,$p' "$OUT/t_$name.log" | grep -E "^(native|cuda)"
      done
      for run in base:LIGHTSPEED_CUDA_BLOCK_SPLIT=0 ${GPU_S33_SMOL:-all:$SWITCHES}; do
        name=${run%%:*} envs=${run#*:}
        (export ${envs//,/ }; step "smol_$name" 90 python3 benchmarks/gpu_blocks.py llama random:smollm2 --repeats 3 \
          --configs native,cuda-blocks)
        echo "smollm2 $name ($envs):"; sed -n '/greedy tokens/,$p' "$OUT/smol_$name.log" | grep -E "^(native|cuda)"
      done ;;
    tests)
      (export ${SWITCHES//,/ }; step tests 200 python3 -m pytest -o addopts="" tests/backends/test_cuda_blocks.py \
        tests/backends/test_cuda.py tests/backends/test_cuda_codegen.py -k "block or row_norm" -q -p no:cacheprovider -n 8)
      grep -E "passed|failed|FAILED" "$OUT/tests.log" | tail -8 ;;
    stacked) bash scripts/gpu_session32.sh stacked ;;  # (the same stage; the search now offers stacked-qkv too)
    memcheck) bash scripts/gpu_session32.sh memcheck ;;  # (the block tests with parts, unroll and split on; the grouped experts)
    normadd)
      # RowNormAdd's A/B: the Gemma 3-shaped step (blocks and bf16) with the tree before it, carried as
      # .before/src (here: mkdir -p .before && git archive 19a8571^ src | tar -x -C .before), beside
      # this tree's, alternated, each with its own compile cache
      [ -d .before/src ] || { echo "normadd: no .before/src"; continue; }
      for round in 1 2; do
        for tree in before:$PWD/.before/src now:$PWD/src; do
          name=${tree%%:*}
          (export PYTHONPATH=/tmp/site:${tree#*:}:$PWD LIGHTSPEED_CACHE_DIR=/tmp/ls-cache-$name
           step "na_${name}_$round" 150 python3 benchmarks/gpu_blocks.py gemma3 random:gemma3 --repeats 3 \
             --configs cuda-blocks,cuda-bfloat16)
          echo "$name round $round:"; grep -E "^cuda" "$OUT/na_${name}_$round.log"
        done
      done ;;
    *) echo "unknown stage $stage (verify, time, tests, stacked, memcheck, normadd)" ;;
  esac
done
