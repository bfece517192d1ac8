# Sourced by the GPU-host scripts (gpu_round.sh, gpu_decode_check.sh): $OUT made, the carried
# wheelhouse (.whl, when there) installed under /tmp/site, the paths and caches exported, and
# `step NAME TIMEOUT COMMAND...` (the command's output in $OUT/NAME.log, a one-line summary).
export GPU_T0=${GPU_T0:-$(date +%s)}  # the call's start (step's deadline below; a script this one runs keeps it)
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
# (once per warm machine: a later call on it finds the same wheels installed)
if ls .whl/*.whl >/dev/null 2>&1 && [ "$(ls .whl)" != "$(cat /tmp/site/.installed 2>/dev/null)" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    > "$OUT/pip.log" 2>&1 && ls .whl > /tmp/site/.installed || { echo "wheel install failed"; tail -5 "$OUT/pip.log"; }
fi
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PYTHONUNBUFFERED=1 LIGHTSPEED_CACHE_DIR=${LIGHTSPEED_CACHE_DIR:-/tmp/ls-cache}
# every step ends by GPU_DEADLINE_S seconds after this file was sourced (default 585: a device call
# is limited to 600 s, and what a step leaves in $OUT comes back only if the call ends in time);
# a step with less than 20 s left is skipped
step() {  # name, timeout, command...
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  local left=$(( GPU_T0 + ${GPU_DEADLINE_S:-585} - t0 ))
  if [ "$left" -lt 20 ]; then echo "$name: skipped (${left}s left)"; return; fi
  [ "$limit" -gt "$left" ] && limit=$left
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  echo "$name: rc=$? $(( $(date +%s) - t0 ))s :: $(tail -1 "$OUT/$name.log")"
}
# `memcheck_step NAME TIMEOUT PYTEST_ARGS...`: the pytest run under compute-sanitizer's memcheck
# (graphs off: the sanitizer checks each launch), its error summary and counts printed
memcheck_step() {
  local name=$1 limit=$2; shift 2
  step "$name" "$limit" env LIGHTSPEED_CUDA_GRAPHS=0 compute-sanitizer --tool memcheck --error-exitcode 9 \
    --print-limit 20 python3 -m pytest -o addopts="" "$@" -q -p no:cacheprovider
  grep -E "ERROR SUMMARY|passed|failed" "$OUT/$name.log" | tail -3
}
