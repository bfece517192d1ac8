#!/usr/bin/env bash
# `lightspeed run` with real weights on the GPU host, beside the cpu backend on the same host:
#   bash scripts/gpu_real_weights.sh FAMILY WEIGHTS [PROMPT]
# The weight files (97-250 MB) are larger than one device call carries: the caller brings them in
# parts (.wparts/*/, ignored by git) and this script joins them when WEIGHTS does not exist yet.
# Prints each run's text and timing line, and whether the cuda texts equal the cpu text (float32).
set -uo pipefail
family=$1; weights=$2
prompt=${3:-"Write a short story about a robot who learns to paint."}
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
# the parts: carried in this call (.wparts/*/) or copied to /tmp/wparts by an earlier call on the
# same warm machine (each call carries at most 64 MiB)
if [ ! -e "$weights" ]; then
  parts=$(for f in /tmp/wparts/"$(basename "$weights")".* .wparts/*/"$(basename "$weights")".*; do
            [ -e "$f" ] && echo "${f##*.} $f"; done | sort -u -k1,1 | cut -d' ' -f2)
  cat $parts > "$weights" || exit 1
fi
sha256sum "$weights" | cut -c1-16
export PYTHONPATH=${PYTHONPATH:-/tmp/site:$PWD/src:$PWD} LIGHTSPEED_CACHE_DIR=${LIGHTSPEED_CACHE_DIR:-/tmp/ls-cache}
# GPU_REAL_CPU_TEXT: the cpu float32 text made on another machine (the 2-core one), compared
# instead of running the cpu backend here
# The cuda float32 run goes twice: the second reuses the first's cached compile, so its TTFT is a
# cached run's (issue 28: within 1.5x of the compiling run's)
configs=("cpu float32" "cuda float32" "cuda float32 cached" "cuda bfloat16")
if [ -n "${GPU_REAL_CPU_TEXT:-}" ]; then
  cp "$GPU_REAL_CPU_TEXT" "$OUT/$family-cpu-float32.txt"; configs=("cuda float32" "cuda float32 cached" "cuda bfloat16")
fi
for cfg in "${configs[@]}"; do
  set -- $cfg
  name="$family-$1-$2${3:+-$3}"
  python3 -m lightspeed run "$family" "$prompt" --weights "$weights" --backend "$1" --dtype "$2" --max-tokens 48 \
    > "$OUT/$name.txt" 2> "$OUT/$name.err"
  echo "== $name rc=$? :: $(tail -1 "$OUT/$name.err")"
  cat "$OUT/$name.txt"
done
cmp -s "$OUT/$family-cpu-float32.txt" "$OUT/$family-cuda-float32.txt" && echo "cuda float32 text == cpu float32 text" \
  || echo "cuda float32 text DIFFERS from cpu"
cmp -s "$OUT/$family-cpu-float32.txt" "$OUT/$family-cuda-bfloat16.txt" && echo "cuda bfloat16 text == cpu float32 text" \
  || echo "cuda bfloat16 text differs from cpu float32 (bf16 weights round differently)"
