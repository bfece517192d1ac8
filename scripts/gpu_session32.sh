#!/usr/bin/env bash
# Thirty-second session's GPU work in stages, one or more a call (each bounded by GPU_DEADLINE_S):
#   verify   the cuBLASLt GPU tests and cuda conformance (the closing review made the library's lock
#            re-entrant and moved its plan preparation under it, after the last GPU call)
#   kq       the block tests with K-quant parts, the parts loop unrolled 4 times and split block
#            products exported (LIGHTSPEED_CUDA_KQUANT_PARTS=1, LIGHTSPEED_CUDA_BLOCK_UNROLL=4,
#            LIGHTSPEED_CUDA_BLOCK_SPLIT=4: every block product and norm product against float64),
#            then the Gemma 3-shaped block step (random blocks) in variants, a process each,
#            profiled: the default beside bf16 weights, then GPU_S32_KQ's (NAME:VAR=VALUE,... each:
#            all four below together first, then split block and norm products, the unrolled parts
#            loop with its alignment tested once (LIGHTSPEED_CUDA_BLOCK_UNROLL=4), float32 row
#            norms in 16-byte chunks (LIGHTSPEED_CUDA_NORM_F32_CHUNKS=1), split + K-quant parts);
#            then the SmolLM2-shaped one (random Q4_1) by default and with GPU_S32_SMOL's variants
#            (the float32 row norms' GPU tests run after the block tests: test_cuda.py -k row_norm)
#   stacked  the 1B's 512-token prefill with stacked products (LIGHTSPEED_CUDA_STACKED=1; the search
#            now times the stacked candidate, which a budget of 3 had never reached) beside the
#            peers, with the search's log, then without, ours alone
#   memcheck compute-sanitizer's memcheck over the grouped experts' GPU tests (the part of the
#            thirtieth and thirty-first sessions' selection their time did not reach) and the
#            K-quant parts' tests
# Usage (GPU host): bash scripts/gpu_session32.sh STAGE...   Logs under $OUT.
set -uo pipefail
source scripts/gpu_env.sh
for stage in "$@"; do
  case $stage in
    verify)
      step verify 150 python3 -m pytest -o addopts="" tests/backends/test_cuda_cublaslt.py \
        tests/backends/test_conformance.py -k "cuda or cublaslt" -q -p no:cacheprovider -n 8
      grep -E "passed|failed|FAILED" "$OUT/verify.log" | tail -6 ;;
    kq)
      LIGHTSPEED_CUDA_KQUANT_PARTS=1 LIGHTSPEED_CUDA_BLOCK_UNROLL=4 LIGHTSPEED_CUDA_BLOCK_SPLIT=4 step kqtest 120 python3 -m pytest -o addopts="" \
        tests/backends/test_cuda_blocks.py -q -p no:cacheprovider -n 8
      grep -E "passed|failed|FAILED" "$OUT/kqtest.log" | tail -6
      step normtest 90 python3 -m pytest -o addopts="" tests/backends/test_cuda.py tests/backends/test_cuda_codegen.py \
        -k row_norm -q -p no:cacheprovider -n 4
      grep -E "passed|failed|FAILED" "$OUT/normtest.log" | tail -4
      for run in base:LIGHTSPEED_CUDA_KQUANT_PARTS=0 ${GPU_S32_KQ:-all:LIGHTSPEED_CUDA_KQUANT_PARTS=1,LIGHTSPEED_CUDA_BLOCK_SPLIT=4,LIGHTSPEED_CUDA_NORM_F32_CHUNKS=1,LIGHTSPEED_CUDA_BLOCK_UNROLL=4 split4:LIGHTSPEED_CUDA_BLOCK_SPLIT=4 u4:LIGHTSPEED_CUDA_BLOCK_UNROLL=4 f32norm:LIGHTSPEED_CUDA_NORM_F32_CHUNKS=1 kparts_split4:LIGHTSPEED_CUDA_KQUANT_PARTS=1,LIGHTSPEED_CUDA_BLOCK_SPLIT=4}; do
        name=${run%%:*} envs=${run#*:}
        configs=native,cuda-blocks
        [ "$name" = base ] && configs=native,cuda-blocks,cuda-bfloat16
        limit=120; [ "$name" = base ] && limit=240  # the first run compiles every kernel on a fresh machine
        (export ${envs//,/ }; step "kq_$name" $limit python3 benchmarks/gpu_blocks.py gemma3 random:gemma3 --repeats 2 \
          --configs $configs --profile 24)
        echo "$name ($envs):"; sed -n '/greedy tokens/,$p' "$OUT/kq_$name.log" | grep -E "^(native|cuda)"
        grep -A14 "kernels per step" "$OUT/kq_$name.log" | grep -E "period|q[0-9]_|nvjet" | head -8
      done
      for run in base:LIGHTSPEED_CUDA_BLOCK_SPLIT=0 ${GPU_S32_SMOL:-split4:LIGHTSPEED_CUDA_BLOCK_SPLIT=4 u4:LIGHTSPEED_CUDA_BLOCK_UNROLL=4}; do
        name=${run%%:*} envs=${run#*:}
        (export ${envs//,/ }; step "smol_$name" 90 python3 benchmarks/gpu_blocks.py llama random:smollm2 --repeats 2 \
          --configs native,cuda-blocks)
        echo "smollm2 $name ($envs):"; sed -n '/greedy tokens/,$p' "$OUT/smol_$name.log" | grep -E "^(native|cuda)"
      done ;;
    stacked)
      LIGHTSPEED_CUDA_STACKED=1 LIGHTSPEED_LOG=search step stacked_on 200 python3 benchmarks/gpu_decode.py \
        llama-3.2-1b --prefill 512
      sed -n '/^shape/,$p' "$OUT/stacked_on.log"; grep -iE "stacked" "$OUT/stacked_on.log" | head -8
      step stacked_off 90 python3 benchmarks/gpu_decode.py llama-3.2-1b --prefill 512 --no-peer
      sed -n '/^shape/,$p' "$OUT/stacked_off.log" ;;
    memcheck)
      LIGHTSPEED_CUDA_KQUANT_PARTS=1 LIGHTSPEED_CUDA_BLOCK_UNROLL=4 LIGHTSPEED_CUDA_BLOCK_SPLIT=4 step memcheck_kq 120 env LIGHTSPEED_CUDA_GRAPHS=0 \
        compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 python3 -m pytest -o addopts="" \
        tests/backends/test_cuda_blocks.py -k "kquant or split or match_float64" -q -p no:cacheprovider
      grep -E "ERROR SUMMARY|passed|failed" "$OUT/memcheck_kq.log" | tail -3
      step memcheck "${GPU_S32_MEMCHECK_S:-400}" env LIGHTSPEED_CUDA_GRAPHS=0 compute-sanitizer --tool memcheck \
        --error-exitcode 9 --print-limit 20 python3 -m pytest -o addopts="" tests/backends/test_gather_matmul.py \
        -k "gather or grouped" -q -p no:cacheprovider
      grep -E "ERROR SUMMARY|passed|failed" "$OUT/memcheck.log" | tail -3 ;;
    *) echo "unknown stage $stage (verify, kq, stacked, memcheck)" ;;
  esac
done
