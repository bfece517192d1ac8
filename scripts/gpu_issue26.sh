#!/usr/bin/env bash
# Issue 26's real-file runs on the GPU host, fed by scripts/gpu_files.sh over back-to-back calls:
# each call gathers the parts it carried, and each file completed in this call gets its runs:
#   smol.gguf    benchmarks/gpu_blocks.py llama: native vs cuda blocks / float32 / bfloat16, then the
#                block step again with LIGHTSPEED_CUDA_BLOCK_NORMS=1 (each cuda step profiled: --profile)
#   gemma.gguf   the same for gemma3
#   whisper.tar  `lightspeed run whisper` on native and cuda (same WAV: .wparts/c0/speech.wav), and on
#                cuda in GPU_ISSUE26_WHISPER_DTYPES (default float16); gpu_models.py's whisper row in each
# GPU_ISSUE26_RANDOM=1: the block step A/B at SmolLM2's and Gemma 3's shapes with random blocks (no
# file needed).
# GPU_ISSUE26_TESTS=1: first the GPU tests of the block kernels, the model zoo (Whisper included)
# and cuda conformance. GPU_ISSUE26_TABLE=1: benchmarks/gpu_models.py over GPU_MODELS_ROWS (default
# every family; the file rows from the joined files; peer GPU_MODELS_PEER, default compile; more
# options in GPU_MODELS_ARGS, e.g. "--dtype float32 --layers 2"), after the files' runs. Logs
# under $OUT.
set -uo pipefail
source scripts/gpu_env.sh
source scripts/gpu_files.sh
mkdir -p /tmp/wdone
if [ "${GPU_ISSUE26_RANDOM:-0}" = 1 ]; then
  # the block kernels' GPU tests with lanes on parts of groups (LIGHTSPEED_CUDA_BLOCK_PARTS=4)
  LIGHTSPEED_CUDA_BLOCK_PARTS=4 step tests_parts 90 python3 -m pytest -o addopts="" tests/backends/test_cuda_blocks.py \
    -q -p no:cacheprovider -n 8
  grep -E "passed|failed|FAILED|Error" "$OUT/tests_parts.log" | tail -4
  # the block step at SmolLM2's shape without the file (random Q4_1 blocks; the float steps run their
  # values), each cuda step profiled; then the block step's variants, each beside native's tokens
  step blocks_random 200 python3 benchmarks/gpu_blocks.py llama random:smollm2 --repeats 2 \
    --configs native,cuda-blocks,cuda-float32,cuda-bfloat16 --profile 24
  sed -n '/greedy tokens/,$p' "$OUT/blocks_random.log"; grep -A3 "kernels per step" "$OUT/blocks_random.log"
  for v in "parts_norms:LIGHTSPEED_CUDA_BLOCK_PARTS=4 LIGHTSPEED_CUDA_BLOCK_NORMS=1" "norms:LIGHTSPEED_CUDA_BLOCK_NORMS=1" \
           "parts:LIGHTSPEED_CUDA_BLOCK_PARTS=4" "noprefetch:LIGHTSPEED_CUDA_PREFETCH=0"; do
    (export ${v#*:}; step "blocks_random_${v%%:*}" 80 python3 benchmarks/gpu_blocks.py llama random:smollm2 \
      --repeats 2 --configs native,cuda-blocks --profile 24)
    echo "${v%%:*} (${v#*:}):"; grep -E "^cuda-blocks|FAILED" "$OUT/blocks_random_${v%%:*}.log"
    grep -A2 "kernels per step" "$OUT/blocks_random_${v%%:*}.log"
  done
  # Gemma 3 270M's shape and block mix (Q5_0 read as Q8_0 blocks, Q8_0, Q4_K, Q6_K), without the file
  step blocks_random_gemma 150 python3 benchmarks/gpu_blocks.py gemma3 random:gemma3 --repeats 2 \
    --configs native,cuda-blocks,cuda-float32,cuda-bfloat16
  sed -n '/greedy tokens/,$p' "$OUT/blocks_random_gemma.log"
  (export LIGHTSPEED_CUDA_BLOCK_PARTS=4 LIGHTSPEED_CUDA_BLOCK_NORMS=1; step blocks_random_gemma_parts_norms 80 \
    python3 benchmarks/gpu_blocks.py gemma3 random:gemma3 --repeats 2 --configs native,cuda-blocks)
  grep -E "^cuda-blocks|FAILED" "$OUT/blocks_random_gemma_parts_norms.log"
fi
if [ "${GPU_ISSUE26_TESTS:-0}" = 1 ]; then
  step tests 150 python3 -m pytest -o addopts="" tests/backends/test_cuda_blocks.py tests/models/test_cuda_models.py tests/backends/test_layer_norm.py \
    -q -p no:cacheprovider -n 8
  grep -E "passed|failed|FAILED|Error" "$OUT/tests.log" | tail -8
  step conformance 80 python3 -m pytest -o addopts="" tests/backends/test_conformance.py -k cuda -q -p no:cacheprovider -n 12
  grep -E "passed|failed|FAILED" "$OUT/conformance.log" | tail -6
fi
for f in /tmp/wfiles/*; do
  name=$(basename "$f"); [ -e "/tmp/wdone/$name" ] && continue
  case $name in
    smol.gguf)
      step blocks_smol 240 python3 benchmarks/gpu_blocks.py llama "$f" \
        --configs native,cuda-blocks,cuda-float32,cuda-bfloat16 --profile 24
      sed -n '/greedy tokens/,$p' "$OUT/blocks_smol.log"; grep -A3 "kernels per step" "$OUT/blocks_smol.log"; grep -E "FAILED|Error" "$OUT/blocks_smol.log" | head -5
      # the norm products over blocks (off by default): the same block step with them
      [ "${GPU_ISSUE26_NORMS_RUN:-1}" = 1 ] && LIGHTSPEED_CUDA_BLOCK_NORMS=1 step blocks_smol_norms 120 python3 benchmarks/gpu_blocks.py llama "$f" \
        --configs native,cuda-blocks --profile 24
      grep -E "^cuda-blocks|FAILED|gives native" "$OUT/blocks_smol_norms.log"
      grep -A3 "kernels per step" "$OUT/blocks_smol_norms.log" ;;
    gemma.gguf)
      step blocks_gemma 200 python3 benchmarks/gpu_blocks.py gemma3 "$f" --prompt "The capital of France is" \
        --configs native,cuda-blocks,cuda-float32,cuda-bfloat16 --profile 24
      sed -n '/greedy tokens/,$p' "$OUT/blocks_gemma.log"; grep -E "FAILED|Error" "$OUT/blocks_gemma.log" | head -5 ;;
    whisper.tar)
      mkdir -p /tmp/wfiles/whisper && tar -C /tmp/wfiles/whisper -xf "$f"
      # the transcript and timings on native and cuda in float32, then cuda in each 16-bit dtype of
      # GPU_ISSUE26_WHISPER_DTYPES (default float16: its products on the tensor cores)
      for bd in native:float32 cuda:float32 $(for d in ${GPU_ISSUE26_WHISPER_DTYPES:-float16}; do echo "cuda:$d"; done); do
        b=${bd%%:*} d=${bd#*:}
        step "whisper_${b}_$d" 120 python3 -m lightspeed run whisper /tmp/wparts/speech.wav \
          --weights /tmp/wfiles/whisper/tiny.en --backend "$b" --dtype "$d"
        grep -v -i warn "$OUT/whisper_${b}_$d.log" | tail -4
      done
      # the median decode step after a warm-up (gpu_models.py's whisper row), both backends, the
      # peer (transformers eager) in the same dtype
      step whisper_steps_native 90 python3 benchmarks/gpu_models.py whisper --backend native --peer none \
        --file whisper=/tmp/wfiles/whisper/tiny.en
      step whisper_steps_cuda 90 python3 benchmarks/gpu_models.py whisper --backend cuda --peer eager \
        --file whisper=/tmp/wfiles/whisper/tiny.en
      for d in ${GPU_ISSUE26_WHISPER_DTYPES:-float16}; do
        step "whisper_steps_cuda_$d" 90 python3 benchmarks/gpu_models.py whisper --backend cuda --peer eager \
          --dtype "$d" --file whisper=/tmp/wfiles/whisper/tiny.en
      done
      grep -h "^whisper " "$OUT"/whisper_steps_*.log ;;
    *) continue ;;
  esac
  touch "/tmp/wdone/$name"
done
if [ "${GPU_ISSUE26_TABLE:-0}" = 1 ]; then
  files=()
  [ -e /tmp/wfiles/smol.gguf ] && files+=(--file smollm2=/tmp/wfiles/smol.gguf)
  [ -e /tmp/wfiles/gemma.gguf ] && files+=(--file gemma3=/tmp/wfiles/gemma.gguf)
  [ -d /tmp/wfiles/whisper/tiny.en ] && files+=(--file whisper=/tmp/wfiles/whisper/tiny.en)
  step models "${GPU_MODELS_S:-420}" python3 benchmarks/gpu_models.py ${GPU_MODELS_ROWS:-} "${files[@]}" \
    --peer "${GPU_MODELS_PEER:-compile}" ${GPU_MODELS_ARGS:-}
  sed -n '/^cuda /,$p' "$OUT/models.log"; grep -E "FAILED|Error" "$OUT/models.log" | head -5
fi
