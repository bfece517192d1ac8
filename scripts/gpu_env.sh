# Sourced by the GPU-host scripts (gpu_round.sh, gpu_decode_check.sh): $OUT made, the carried
# wheelhouse (.whl, when there) installed under /tmp/site, the paths and caches exported, and
# `step NAME TIMEOUT COMMAND...` (the command's output in $OUT/NAME.log, a one-line summary).
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    > "$OUT/pip.log" 2>&1 || { echo "wheel install failed"; tail -5 "$OUT/pip.log"; }
fi
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PYTHONUNBUFFERED=1 LIGHTSPEED_CACHE_DIR=${LIGHTSPEED_CACHE_DIR:-/tmp/ls-cache}
step() {  # name, timeout, command...
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  echo "$name: rc=$? $(( $(date +%s) - t0 ))s :: $(tail -1 "$OUT/$name.log")"
}
