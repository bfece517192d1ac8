#!/usr/bin/env bash
# Prefill on the GPU (issue 28): the tests of the prefill kernels (cuBLASLt for a prompt's
# products at any length, the attention tiles), then `gpu_decode.py --prefill N` beside PyTorch
# eager and torch.compile max-autotune in the same run, and a traced prefill (where its time goes).
#   GPU_PREFILL_SHAPES   shapes (default: llama-3.2-1b llama-3-8b)
#   GPU_PREFILL_N        prompt tokens (default 512)
#   GPU_PREFILL_TESTS=0  skip the tests;  GPU_PREFILL_TRACE=0  skip the trace
# Logs under $OUT (at most 8 files come back).
set -uo pipefail
source scripts/gpu_env.sh
if [ "${GPU_PREFILL_TESTS:-1}" = 1 ]; then
  step tests 180 python3 -m pytest -o addopts="" tests/backends/test_cuda_cublaslt.py tests/backends/test_cuda_mma.py \
    tests/backends/test_attention.py tests/backends/test_kernel_layer.py \
    tests/backends/test_cublaslt_plan.py tests/backends/test_sampler.py -q -p no:cacheprovider -n 8
  grep -E "FAILED|Error|passed|failed" "$OUT/tests.log" | head -20
  # the model zoo's prefill and greedy decode against transformers (float32: the library
  # candidate's cuBLASLt rows in whole models)
  step models 180 python3 -m pytest -o addopts="" tests/models/test_cuda_models.py -k "prefill or greedy" -q \
    -p no:cacheprovider -n 8
  grep -E "FAILED|Error|passed|failed" "$OUT/models.log" | head -10
fi
N=${GPU_PREFILL_N:-512}
step prefill 420 python3 benchmarks/gpu_decode.py ${GPU_PREFILL_SHAPES:-llama-3.2-1b llama-3-8b} --prefill "$N" ${GPU_PREFILL_PEER:-}
sed -n '/^shape/,$p' "$OUT/prefill.log"
if [ "${GPU_PREFILL_TRACE:-1}" = 1 ]; then
  LIGHTSPEED_TRACE=$OUT/ptrace.json step prefill_trace 120 python3 benchmarks/gpu_decode.py llama-3.2-1b \
    --prompt "$N" --no-peer --steps 2
  python3 scripts/trace_summary.py "$OUT/ptrace.json" --by-run > "$OUT/prefill_trace.txt" 2>&1
  rm -f "$OUT/ptrace.json"; head -16 "$OUT/prefill_trace.txt"
fi
rm -f "$OUT/pip.log"
