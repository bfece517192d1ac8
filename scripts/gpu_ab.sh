#!/usr/bin/env bash
# A refactor's GPU check on the `device` tool's machine, from the repository root: the cuda tests
# of this tree (scripts/gpu_check.sh parts), then decode speed of an older tree's src (carried as
# .before/, e.g. `git worktree add` of the old commit, copied) beside this one in the same run
# (benchmarks/ab_trees.py).  Results under $OUT.
#   bash scripts/gpu_ab.sh [shape ...]        (default: smollm2-135m llama-3.2-1b)
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  > "$OUT/pip.log" 2>&1 || { echo "wheel install failed"; tail -5 "$OUT/pip.log"; }
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PYTHONUNBUFFERED=1
shapes=${*:-smollm2-135m llama-3.2-1b}
timeout "${GPU_AB_S:-420}" python3 benchmarks/ab_trees.py /tmp/site:$PWD/.before/src /tmp/site:$PWD/src \
  --backend cuda --shape $shapes --rounds "${GPU_AB_ROUNDS:-3}" 2>&1 | tee "$OUT/ab_trees.log"
