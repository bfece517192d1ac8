#!/usr/bin/env bash
# Twenty-ninth session's GPU work in stages, one or more a call (each bounded by GPU_DEADLINE_S):
#   moe     scripts/gpu_session28.sh's moe stage: a Qwen3-30B-A3B-shaped 512-token MoE prompt, dense
#           against grouped tensor-core expert products (GatherMatmulMma)
#   gemma   scripts/gpu_session28.sh's gemma stage: the Gemma 3-shaped block step and the search's report
#   ncu     Nsight Compute's every section of the 1B's 512-token prefill attention tile
#           (scripts/gpu_ncu.py detail): why the tile takes ~38 us a layer against cuDNN's ~21
#   prefill the 1B's 512-token prefill beside eager and torch.compile max-autotune
#   tests   the GPU tests of this session's changes: the attention tiles (query staging unrolled, the
#           switch set),
#           the grouped expert tiles now on by default, the model zoo (MoE prompts now gathered)
#   qstage  the 1B's 512-token prefill kernel by kernel, the query staging one element at a time
#           (LIGHTSPEED_CUDA_ATTENTION_Q_UNROLL=0, the default) against 8 at a time, and with the
#           packed mask (the mask's raw pairs kept a tile ahead, converted at use: ncu saw its
#           conversion placed right behind its load, a wait there)
#   conf    the cuda conformance suite
# Usage (GPU host): bash scripts/gpu_session29.sh STAGE...   Logs under $OUT.
set -uo pipefail
source scripts/gpu_env.sh
for stage in "$@"; do
  case $stage in
    moe|gemma) bash scripts/gpu_session28.sh "$stage" ;;
    ncu)
      step ncu 300 python3 scripts/gpu_ncu.py detail llama-3.2-1b --prompt 512 --kernel attention_mma
      grep -E "Duration|Registers|Achieved Occupancy|Theoretical Occupancy|Compute \(SM\) Throughput|Memory Throughput|Issued Ipc|Executed Instructions |Warp Cycles Per Issued|Stall|stall" \
        "$OUT/ncu_detail.txt" | head -40 ;;
    prefill)
      step prefill 200 python3 benchmarks/gpu_decode.py llama-3.2-1b --prefill 512
      sed -n '/^shape/,$p' "$OUT/prefill.log" ;;
    tests)
      LIGHTSPEED_CUDA_ATTENTION_Q_UNROLL=8 step tests "${GPU_S29_TESTS_S:-150}" python3 -m pytest -o addopts="" tests/backends/test_cuda_mma.py \
        tests/backends/test_gather_matmul.py tests/models/test_cuda_models.py -k "attention or gather or moe or tiles or staging" \
        -q -p no:cacheprovider -n 8
      grep -E "passed|failed|FAILED|Error" "$OUT/tests.log" | tail -8 ;;
    qstage)
      for v in "q0:LIGHTSPEED_CUDA_ATTENTION_Q_UNROLL=0" "q8:LIGHTSPEED_CUDA_ATTENTION_Q_UNROLL=8" \
               "q8_packed:LIGHTSPEED_CUDA_ATTENTION_Q_UNROLL=8 LIGHTSPEED_CUDA_ATTENTION_PACKED_MASK=1"; do
        (export ${v#*:}; step "profile_${v%%:*}" 60 python3 scripts/gpu_profile.py llama-3.2-1b --prefill 512 --no-peer \
          --steps 8)
        echo "${v%%:*} (${v#*:}):"; grep -E "kernels per step|period|attention_mma" "$OUT/profile_${v%%:*}.log" | head -4
      done ;;
    conf)
      step conf 240 python3 -m pytest -o addopts="" tests/backends/test_conformance.py -k cuda -q \
        -p no:cacheprovider -n 8
      tail -3 "$OUT/conf.log" ;;
    *) echo "unknown stage $stage (moe, gemma, ncu, tests, qstage, prefill, conf)" ;;
  esac
done
