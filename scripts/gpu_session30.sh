#!/usr/bin/env bash
# Thirtieth session's GPU work in stages, one or more a call (each bounded by GPU_DEADLINE_S):
#   verify   the GPU tests with the prompt attention tile's new defaults (the query staged 8 elements
#            at a time, the mask packed): the tensor-core tiles, the grouped experts, the model zoo's
#            cuda logits against transformers, and the cuda conformance suite
#   memcheck compute-sanitizer's memcheck over the attention tiles' and grouped experts' GPU tests
#   rows     the GPU model table's qwen3 and gemma4_moe rows beside transformers + torch.compile
#   prefill  the 1B's and 8B's 512-token prefills beside eager and torch.compile max-autotune
#   whisper16 Whisper's programs in float16 and bfloat16 on the GPU against transformers (the small
#            random model; the real file: gpu_files.sh + gpu_issue26.sh)
#   host     the host's part of the 1B's 512-token first token, split at marks (gpu_host_profile.py)
# Usage (GPU host): bash scripts/gpu_session30.sh STAGE...   Logs under $OUT.
set -uo pipefail
source scripts/gpu_env.sh
for stage in "$@"; do
  case $stage in
    verify)
      step verify "${GPU_S30_VERIFY_S:-220}" python3 -m pytest -o addopts="" tests/backends/test_cuda_mma.py \
        tests/backends/test_gather_matmul.py tests/models/test_cuda_models.py tests/backends/test_conformance.py \
        -k "cuda or mma or attention or gather or moe or tiles or staging" -q -p no:cacheprovider -n 12
      grep -E "passed|failed|FAILED|Error" "$OUT/verify.log" | tail -8 ;;
    memcheck)
      step memcheck "${GPU_S30_MEMCHECK_S:-180}" env LIGHTSPEED_CUDA_GRAPHS=0 compute-sanitizer --tool memcheck \
        --error-exitcode 9 --print-limit 20 python3 -m pytest -o addopts="" tests/backends/test_cuda_mma.py \
        tests/backends/test_gather_matmul.py -k "attention or staging or gather" -q -p no:cacheprovider
      grep -E "ERROR SUMMARY|passed|failed" "$OUT/memcheck.log" | tail -3 ;;
    rows)
      step rows "${GPU_S30_ROWS_S:-200}" python3 benchmarks/gpu_models.py ${GPU_S30_ROWS:-qwen3 gemma4_moe} --peer compile
      sed -n '/^row /,$p' "$OUT/rows.log"; grep -E "FAILED|Error" "$OUT/rows.log" | head -5 ;;
    prefill)
      step prefill 150 python3 benchmarks/gpu_decode.py llama-3.2-1b --prefill 512
      sed -n '/^shape/,$p' "$OUT/prefill.log"
      step prefill_8b 240 python3 benchmarks/gpu_decode.py llama-3-8b --prefill 512
      sed -n '/^shape/,$p' "$OUT/prefill_8b.log" ;;
    whisper16)
      step whisper16 "${GPU_S30_WHISPER_S:-150}" python3 -m pytest -o addopts="" tests/models/test_cuda_models.py \
        -k whisper -q -p no:cacheprovider
      grep -E "passed|failed|FAILED|Error" "$OUT/whisper16.log" | tail -6 ;;
    host)
      step host 90 python3 scripts/gpu_host_profile.py llama-3.2-1b --prompt 512 --repeats 20
      sed -n '1,/^profiled/p' "$OUT/host.log" | head -24 ;;
    *) echo "unknown stage $stage (verify, memcheck, rows, prefill, whisper16, host)" ;;
  esac
done
