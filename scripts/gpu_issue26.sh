#!/usr/bin/env bash
# Issue 26's real-file runs on the GPU host, fed by scripts/gpu_files.sh over back-to-back calls:
# each call gathers the parts it carried, and each file completed in this call gets its runs:
#   smol.gguf    benchmarks/gpu_blocks.py llama: native vs cuda blocks / float32 / bfloat16
#   gemma.gguf   the same for gemma3
#   whisper.tar  `lightspeed run whisper` on native and cuda (same WAV: .wparts/c0/speech.wav)
# With GPU_ISSUE26_TABLE=1 (the last call): benchmarks/gpu_models.py over every family, the file
# rows from the joined files (GPU_MODELS_PEER, default compile). Logs under $OUT.
set -uo pipefail
source scripts/gpu_env.sh
source scripts/gpu_files.sh
mkdir -p /tmp/wdone
for f in /tmp/wfiles/*; do
  name=$(basename "$f"); [ -e "/tmp/wdone/$name" ] && continue
  case $name in
    smol.gguf)
      step blocks_smol 240 python3 benchmarks/gpu_blocks.py llama "$f" \
        --configs native,cuda-blocks,cuda-blocks-bf16,cuda-float32,cuda-bfloat16
      sed -n '/greedy tokens/,$p' "$OUT/blocks_smol.log"; grep -E "FAILED|Error" "$OUT/blocks_smol.log" | head -5 ;;
    gemma.gguf)
      step blocks_gemma 240 python3 benchmarks/gpu_blocks.py gemma3 "$f" --prompt "The capital of France is" \
        --configs native,cuda-blocks,cuda-blocks-bf16,cuda-float32,cuda-bfloat16
      sed -n '/greedy tokens/,$p' "$OUT/blocks_gemma.log"; grep -E "FAILED|Error" "$OUT/blocks_gemma.log" | head -5 ;;
    whisper.tar)
      mkdir -p /tmp/wfiles/whisper && tar -C /tmp/wfiles/whisper -xf "$f"
      for b in native cuda; do
        step "whisper_$b" 120 python3 -m lightspeed run whisper /tmp/wparts/speech.wav \
          --weights /tmp/wfiles/whisper/tiny.en --backend "$b"
        grep -v -i warn "$OUT/whisper_$b.log" | tail -4
      done ;;
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
    --peer "${GPU_MODELS_PEER:-compile}"
  sed -n '/^cuda /,$p' "$OUT/models.log"; grep -E "FAILED|Error" "$OUT/models.log" | head -5
fi
