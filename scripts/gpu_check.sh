#!/usr/bin/env bash
# The GPU check, run on the GPU host from the repository root (the `device` tool's machine):
#   bash scripts/gpu_check.sh [pytest args...]
# Installs what the host lacks from the carried wheelhouse (.whl, built here with
# ../shared/tools/gpu-wheelhouse.sh), then runs the cuda tests and writes logs and a summary under
# $OUT (default /tmp/gpu-out).  GPU_CHECK_PARTS picks what runs (default: all of them):
#   info conformance cuda cublaslt models torch examples sanitizer bench
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
parts=${GPU_CHECK_PARTS:-"info conformance cuda cublaslt models torch sanitizer"}
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    > "$OUT/pip.log" 2>&1 || { echo "wheel install failed"; tail -5 "$OUT/pip.log"; }
  export PYTHONPATH=/tmp/site:$PWD/src:$PWD
else
  export PYTHONPATH=$PWD/src:$PWD
fi
export PYTHONUNBUFFERED=1 LIGHTSPEED_CACHE_DIR=/tmp/ls-cache
summary="$OUT/summary.txt"
: > "$summary"
run() {  # name, command...
  local name=$1; shift
  local t0=$(date +%s)
  "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name: rc=$rc $(( $(date +%s) - t0 ))s :: $(tail -1 "$OUT/$name.log")" | tee -a "$summary"
}
jobs=${GPU_CHECK_JOBS:-8}
for p in $parts; do
  case $p in
    info) run info bash -c 'nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 -c "import cuda.bindings, torch, numpy, egglog; print(\"cuda-bindings\", cuda.bindings.__version__, \"torch\", torch.__version__, \"numpy\", numpy.__version__)"; python3 -c "import lightspeed.backends.cuda as c; b=c.CudaBackend(); print(b.available(), b.device())"' ;;
    conformance) run conformance python3 -m pytest -o addopts="" tests/backends/test_conformance.py -k cuda -q -p no:cacheprovider -n "$jobs" --maxfail=40 "$@" ;;
    cuda) run cuda python3 -m pytest -o addopts="" tests/backends/test_cuda.py tests/backends/test_attention.py -q -p no:cacheprovider -n "$jobs" --maxfail=60 "$@" ;;
    cublaslt) run cublaslt python3 -m pytest -o addopts="" tests/backends/test_cuda_cublaslt.py tests/backends/test_cublaslt_plan.py -q -p no:cacheprovider -n 4 "$@" ;;
    models) run models python3 -m pytest -o addopts="" tests/models/test_cuda_models.py -q -p no:cacheprovider -n 7 ;;
    torch) run torch python3 -m pytest -o addopts="" tests/torch_backend/test_cuda_torch.py -q -p no:cacheprovider -n 8 ;;
    examples) run examples python3 benchmarks/examples.py --only qwen3 qwen3_moe gemma4_moe --backend cuda ;;
    sanitizer) run sanitizer timeout "${GPU_SANITIZER_S:-300}" env LIGHTSPEED_CUDA_GRAPHS=0 compute-sanitizer \
        --tool memcheck --error-exitcode 9 --print-limit 20 python3 -m pytest -o addopts="" \
        tests/backends/test_conformance.py -k "cuda and (op_table_matches or blocks or decode)" -q -p no:cacheprovider ;;
    bench) run bench timeout "${GPU_BENCH_S:-360}" python3 benchmarks/gpu_decode.py ${GPU_BENCH_SHAPES:-smollm2-135m llama-3.2-1b} ;;
  esac
done
cat "$summary"
