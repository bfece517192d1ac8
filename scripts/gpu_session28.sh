#!/usr/bin/env bash
# Twenty-eighth session's GPU work in stages, one a call, so that the calls that carry the real
# Gemma 3 file's parts (scripts/gpu_files.sh; each call then runs scripts/gpu_issue26.sh, which
# gathers the parts and runs the file once complete) do useful work too:
#   tests   the new kernels' GPU tests: grouped tensor-core expert products (GatherMatmulMma, issue
#           26), the split attention tile (issue 28), the block and merge tests at the new defaults
#   moe     a Qwen3-30B-A3B-shaped MoE prompt (GPU_MOE_PROMPT tokens, default 512): dense against
#           grouped (LIGHTSPEED_MOE_PREFILL=dense|gather), TTFT and the decode step after it
#   gemma   the Gemma 3-shaped block step (random blocks) with the search's report (which head
#           and which table read the search keeps) and its kernels; the SmolLM2-shaped one
#   attn    the 1B's 512-token prefill kernel by kernel, defaults and the split tile, then the
#           prefill beside eager and torch.compile max-autotune with the split tile
#   prefill the attn stage's prefill beside the peers alone (a short call)
#   rows    the model table's qwen3, gemma4_moe and whisper rows beside transformers + compile
# Usage (GPU host): bash scripts/gpu_session28.sh STAGE...   Logs under $OUT.
set -uo pipefail
source scripts/gpu_env.sh
for stage in "$@"; do
  case $stage in
    tests)
      step tests 170 python3 -m pytest -o addopts="" tests/backends/test_gather_matmul.py tests/backends/test_cuda_mma.py \
        tests/backends/test_cuda_blocks.py tests/backends/test_cuda_merge.py \
        -k "gather or split or blocks or merge" -q -p no:cacheprovider -n 8
      grep -E "passed|failed|FAILED|Error" "$OUT/tests.log" | tail -8 ;;
    moe)
      for mode in dense gather; do
        (export LIGHTSPEED_MOE_PREFILL=$mode LIGHTSPEED_CUDA_GROUPED_MMA=1
         step "moe_$mode" 100 python3 benchmarks/gpu_models.py qwen3_moe --prompt "${GPU_MOE_PROMPT:-512}" --steps 8 \
           --peer none)
        echo "moe $mode:"; sed -n '/^row /,$p' "$OUT/moe_$mode.log" | head -2; grep -E "Error" "$OUT/moe_$mode.log" | head -3
      done ;;
    gemma)
      LIGHTSPEED_LOG=search step gemma 150 python3 benchmarks/gpu_blocks.py gemma3 random:gemma3 --repeats 2 \
        --configs native,cuda-blocks,cuda-bfloat16 --profile 24
      grep -E "^(native|cuda)|gives native" "$OUT/gemma.log"; grep -A10 "gemma3-cuda-blocks" "$OUT/gemma.log" | head -11
      step smol 60 python3 benchmarks/gpu_blocks.py llama random:smollm2 --repeats 2 --configs native,cuda-blocks
      grep -E "^cuda|gives native" "$OUT/smol.log" ;;
    attn)
      for v in "defaults:LIGHTSPEED_CUDA_ATTENTION_SPLIT=0" "split:LIGHTSPEED_CUDA_ATTENTION_SPLIT=1"; do
        (export ${v#*:}; step "profile_${v%%:*}" 70 python3 scripts/gpu_profile.py llama-3.2-1b --prefill 512 --no-peer \
          --steps 8)
        echo "${v%%:*} (${v#*:}):"; grep -E "kernels per step|period|attention_mma" "$OUT/profile_${v%%:*}.log" | head -4
      done
      (export LIGHTSPEED_CUDA_ATTENTION_SPLIT=1
       step prefill_split 130 python3 benchmarks/gpu_decode.py llama-3.2-1b --prefill 512)
      sed -n '/^shape/,$p' "$OUT/prefill_split.log" ;;
    prefill)  # the attn stage's last step alone: the split tile's prefill beside the peers
      (export LIGHTSPEED_CUDA_ATTENTION_SPLIT=1
       step prefill_split 130 python3 benchmarks/gpu_decode.py llama-3.2-1b --prefill 512)
      sed -n '/^shape/,$p' "$OUT/prefill_split.log" ;;
    rows)
      step rows "${GPU_S28_ROWS_S:-200}" python3 benchmarks/gpu_models.py ${GPU_S28_ROWS:-qwen3 gemma4_moe} --peer compile
      sed -n '/^row /,$p' "$OUT/rows.log"; grep -E "FAILED|Error" "$OUT/rows.log" | head -5 ;;
    *) echo "unknown stage $stage (tests, moe, gemma, attn, prefill, rows)" ;;
  esac
done
