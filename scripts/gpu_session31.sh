#!/usr/bin/env bash
# Thirty-first session's GPU work in stages, one or more a call (each bounded by GPU_DEADLINE_S):
#   verify   the cuBLASLt GPU tests and cuda conformance at the session's last code (the closing
#            review moved cuBLASLt's heuristic query into Library.heuristics after the last GPU call)
#   lt       cuBLASLt's first heuristic algorithm against its fastest, per product of the 1B's and
#            8B's 512-token prompts (scripts/gpu_lt_algos.py)
#   ltab     the 1B's 512-token prefill, ours alone, with cuBLASLt's first heuristic algorithm and with
#            the fastest of its first 8 timed (LIGHTSPEED_CUDA_LT_ALGOS), a process each; the
#            cuBLASLt GPU tests with the timed pick
#   blockrows the Gemma 3-shaped block step (random blocks) with one output a warp and with 4
#            (LIGHTSPEED_CUDA_BLOCK_ROWS), a process each, beside bf16 weights; their GPU tests
#   stacked  the 1B's 512-token prefill with a layer's q, k, v (and gate, up) as one product over
#            stacked weights (LIGHTSPEED_CUDA_STACKED=1) beside the peers, and without, ours alone
#            (gpu_lt_algos.py: the stacked qkv product ~29 us against ~28 for q alone)
#   gemmaprof the Gemma 3-shaped block step and the bf16 step kernel by kernel (random blocks), with
#            programmatic dependent launch off so each kernel's duration is its own
#   profile  the 1B's 512-token prefill kernel by kernel, ours only (scripts/gpu_profile.py)
#   memcheck compute-sanitizer's memcheck over the grouped experts' GPU tests (the part of the
#            thirtieth session's selection its time did not reach)
#   prefill  the 1B's and 8B's 512-token prefills beside eager and torch.compile max-autotune
# Usage (GPU host): bash scripts/gpu_session31.sh STAGE...   Logs under $OUT.
set -uo pipefail
source scripts/gpu_env.sh
for stage in "$@"; do
  case $stage in
    verify)
      step verify 240 python3 -m pytest -o addopts="" tests/backends/test_cuda_cublaslt.py tests/backends/test_cuda_blocks.py \
        tests/backends/test_conformance.py -k "cuda or cublaslt or block or several" -q -p no:cacheprovider -n 8
      grep -E "passed|failed|FAILED" "$OUT/verify.log" | tail -6 ;;
    lt)
      step lt_1b 60 python3 scripts/gpu_lt_algos.py --shape llama-3.2-1b --rows 512
      grep -E "^[a-z].*algorithms;|layer's" "$OUT/lt_1b.log"
      step lt_8b 60 python3 scripts/gpu_lt_algos.py --shape llama-3-8b --rows 512
      grep -E "^[a-z].*algorithms;|layer's" "$OUT/lt_8b.log" ;;
    ltab)
      step lttest 90 python3 -m pytest -o addopts="" tests/backends/test_cuda_cublaslt.py -q -p no:cacheprovider -n 4
      grep -E "passed|failed|FAILED" "$OUT/lttest.log" | tail -4
      # each run NAME:VAR=VALUE,VAR=VALUE (GPU_S31_LTAB, space-separated): one process each
      for run in ${GPU_S31_LTAB:-first:LIGHTSPEED_CUDA_LT_ALGOS=1 timed:LIGHTSPEED_CUDA_LT_ALGOS=8 again:LIGHTSPEED_CUDA_LT_ALGOS=1}; do
        name=${run%%:*} envs=${run#*:}
        (export ${envs//,/ }; step "ltab_$name" 90 python3 benchmarks/gpu_decode.py llama-3.2-1b --prefill 512 --no-peer)
        echo "$name (${envs}): $(grep -E '^llama-3.2-1b +lightspeed' "$OUT/ltab_$name.log")"
      done
      ls "$LIGHTSPEED_CACHE_DIR"/ltalgo-* 2>/dev/null | wc -l ;;
    blockrows)
      step rowtest 90 python3 -m pytest -o addopts="" tests/backends/test_cuda_blocks.py -k several -q -p no:cacheprovider -n 4
      grep -E "passed|failed|FAILED" "$OUT/rowtest.log" | tail -4
      for r in ${GPU_S31_ROWS:-1 4}; do
        LIGHTSPEED_CUDA_BLOCK_ROWS=$r step "rows_$r" 150 python3 benchmarks/gpu_blocks.py gemma3 random:gemma3 --repeats 2 \
          --configs native,cuda-blocks,cuda-bfloat16
        echo "BLOCK_ROWS=$r:"; sed -n '/greedy tokens/,$p' "$OUT/rows_$r.log" | grep -E "^(native|cuda)" 
      done ;;
    stacked)
      LIGHTSPEED_CUDA_STACKED=1 step stacked_on 200 python3 benchmarks/gpu_decode.py llama-3.2-1b --prefill 512
      sed -n '/^shape/,$p' "$OUT/stacked_on.log"
      step stacked_off 90 python3 benchmarks/gpu_decode.py llama-3.2-1b --prefill 512 --no-peer
      sed -n '/^shape/,$p' "$OUT/stacked_off.log"
      # the stacked prefill kernel by kernel: one qkv and one gate/up product a layer, and no
      # stacking copy of the weights at each call (they are stacked once, or read in place)
      LIGHTSPEED_CUDA_STACKED=1 step stacked_profile 150 python3 scripts/gpu_profile.py llama-3.2-1b --prefill 512 \
        --no-peer --steps 8
      grep -A30 "period" "$OUT/stacked_profile.log" | head -40 ;;
    gemmaprof)
      LIGHTSPEED_CUDA_PDL=0 step gemmaprof 200 python3 benchmarks/gpu_blocks.py gemma3 random:gemma3 --repeats 2 \
        --configs native,cuda-blocks,cuda-bfloat16 --profile 24
      sed -n '/greedy tokens/,$p' "$OUT/gemmaprof.log" | grep -E "^(native|cuda)"
      grep -A24 "kernels per step" "$OUT/gemmaprof.log" | head -60
      # variants of the block step, each profiled too: NAME:VAR=VALUE,... (GPU_S31_GEMMAPROF)
      for run in ${GPU_S31_GEMMAPROF:-head4:LIGHTSPEED_CUDA_BLOCK_ROWS=4,LIGHTSPEED_CUDA_BLOCK_ROWS_MIN_N=65536}; do
        name=${run%%:*} envs=${run#*:}
        (export LIGHTSPEED_CUDA_PDL=0 ${envs//,/ }; step "gemmaprof_$name" 120 python3 benchmarks/gpu_blocks.py gemma3 \
          random:gemma3 --repeats 2 --configs native,cuda-blocks --profile 24)
        echo "$name ($envs):"; sed -n '/greedy tokens/,$p' "$OUT/gemmaprof_$name.log" | grep -E "^cuda"
        grep -A12 "kernels per step" "$OUT/gemmaprof_$name.log" | head -14
      done ;;
    profile)
      step profile 150 python3 scripts/gpu_profile.py llama-3.2-1b --prefill 512 --no-peer --steps 8
      grep -A30 "period" "$OUT/profile.log" | head -40 ;;
    memcheck)
      step memcheck "${GPU_S31_MEMCHECK_S:-240}" env LIGHTSPEED_CUDA_GRAPHS=0 compute-sanitizer --tool memcheck \
        --error-exitcode 9 --print-limit 20 python3 -m pytest -o addopts="" tests/backends/test_gather_matmul.py \
        -k "gather or grouped" -q -p no:cacheprovider
      grep -E "ERROR SUMMARY|passed|failed" "$OUT/memcheck.log" | tail -3 ;;
    prefill)
      step prefill 150 python3 benchmarks/gpu_decode.py llama-3.2-1b --prefill 512
      sed -n '/^shape/,$p' "$OUT/prefill.log"
      step prefill_8b 240 python3 benchmarks/gpu_decode.py llama-3-8b --prefill 512
      sed -n '/^shape/,$p' "$OUT/prefill_8b.log" ;;
    *) echo "unknown stage $stage (verify, lt, ltab, blockrows, stacked, gemmaprof, profile, memcheck, prefill)" ;;
  esac
done
