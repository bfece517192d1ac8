#!/usr/bin/env bash
# One GPU round on the device host, from the repository root: the cuda tests that cover decode
# (GPU_TEST_FILES; kernels, attention, models, launch), the decode timeline of lightspeed
# (scripts/gpu_profile.py on GPU_PROFILE_SHAPES, PDL off so kernel durations are the kernels' own;
# empty: none), then benchmarks/gpu_decode.py beside PyTorch on GPU_DECODE_SHAPES (empty: none; more
# arguments in GPU_DECODE_ARGS), with GPU_ROUND_AB="VAR=VALUE" the decode of GPU_AB_SHAPES under an
# A/B switch, with GPU_ROUND_PREFILL="SHAPES" their 512-token prefill beside the peers, and with
# GPU_ROUND_TRACE=1 the 1B step's kernels by op (scripts/trace_summary.py); with GPU_ROUND_MMA=1
# the tensor-core tiles' GPU tests and a 512-token prefill of the 1B shape with them (the default)
# and without (LIGHTSPEED_CUDA_MMA=0) beside torch.compile's, then that prefill traced kernel by kernel
# (GPU_ROUND_PREFILL_TRACE=1 alone, =0 not); with GPU_ROUND_SERVE=1 benchmarks/gpu_serve.py (32 streams
# of the 1B shape, paged; GPU_ROUND_SERVE_AB=1 also without the pipelined step, and with a
# few-rows program beside the many-rows one, batch invariance checked); with
# GPU_ROUND_SAMPLER=1 benchmarks/gpu_sampler.py; with GPU_ROUND_ATTENTION=1
# benchmarks/gpu_attention.py (a prompt's attention beside SDPA); with GPU_ROUND_GEMV=1
# benchmarks/gpu_gemv.py, plain and streaming weight loads.  Logs under $OUT.
set -uo pipefail
source scripts/gpu_env.sh
# weight-file parts carried in this call, kept for a later call on the same warm machine
# (scripts/gpu_real_weights.sh joins them)
if [ -d .wparts ]; then mkdir -p /tmp/wparts && cp .wparts/*/* /tmp/wparts/ 2>/dev/null; fi
if [ "${GPU_ROUND_TESTS:-1}" = 1 ]; then
  step tests "${GPU_TESTS_S:-170}" python3 -m pytest -o addopts="" ${GPU_TEST_FILES:-tests/backends/test_attention.py \
    tests/backends/test_cuda.py tests/models/test_cuda_models.py tests/models/test_generate.py \
    tests/backends/test_cuda_blocks.py tests/backends/test_cuda_rows.py tests/backends/test_sampler.py} -v -p no:cacheprovider -n 8
  # -v: each failure is named as it happens (a step cut by its timeout prints no summary)
  echo "passed: $(grep -c PASSED "$OUT/tests.log")"; grep -E "FAILED|Error" "$OUT/tests.log" | head -20
fi
# cuda conformance alone (GPU_ROUND_CONFORMANCE=1), verbose, naming the tests that did not finish
# within its limit (two bool cases hung in the fourteenth session)
if [ "${GPU_ROUND_CONFORMANCE:-0}" = 1 ]; then
  python3 -m pytest -o addopts="" tests/backends/test_conformance.py -k cuda --collect-only -q -p no:cacheprovider \
    2>/dev/null | grep :: | sort > "$OUT/conf_all.txt"
  # a test still running after GPU_CONFORMANCE_DUMP_S seconds prints every thread's stack (where
  # the unfinished ones wait: ten of them did not finish in 140 s, twenty-first session)
  step conformance "${GPU_CONFORMANCE_S:-150}" python3 -m pytest -o addopts="" tests/backends/test_conformance.py -k cuda \
    -v -p no:cacheprovider -n 8 -o faulthandler_timeout="${GPU_CONFORMANCE_DUMP_S:-60}"
  grep -oE "(PASSED|FAILED|SKIPPED|ERROR) tests/[^ ]+" "$OUT/conformance.log" | awk '{print $2}' | sort > "$OUT/conf_done.txt"
  echo "passed: $(grep -c PASSED "$OUT/conformance.log")"; grep -E "FAILED tests" "$OUT/conformance.log" | head -5
  echo "not finished:"; comm -23 "$OUT/conf_all.txt" "$OUT/conf_done.txt" | head -20
  grep -A12 "Timeout" "$OUT/conformance.log" | grep -E "File|Timeout" | head -40
fi
# the token sampler alone beside PyTorch's sampling (GPU_ROUND_SAMPLER=1)
if [ "${GPU_ROUND_SAMPLER:-0}" = 1 ]; then
  step sampler "${GPU_SAMPLER_S:-90}" python3 benchmarks/gpu_sampler.py
  sed -n '/^sampler/,$p' "$OUT/sampler.log"
fi
# a prompt's attention alone beside PyTorch's SDPA (GPU_ROUND_ATTENTION=1; GPU_ATTENTION_AB="VAR=VALUE"
# also under that switch)
if [ "${GPU_ROUND_ATTENTION:-0}" = 1 ]; then
  step attention 150 python3 benchmarks/gpu_attention.py --seq "${GPU_ATTENTION_SEQ:-32,512,4096}"
  sed -n '/^ *seq/,$p' "$OUT/attention.log"
  if [ -n "${GPU_ATTENTION_AB:-}" ]; then
    step attention_ab 120 env ${GPU_ATTENTION_AB} python3 benchmarks/gpu_attention.py --no-peer \
      --seq "${GPU_ATTENTION_SEQ:-32,512,4096}"
    echo "== under ${GPU_ATTENTION_AB}"; sed -n '/^ *seq/,$p' "$OUT/attention_ab.log"
  fi
fi
# the batch-1 weight products alone against the copy bandwidth and cuBLAS (GPU_ROUND_GEMV=1), then
# the generated kernel with streaming weight loads (LIGHTSPEED_CUDA_WEIGHT_LOADS=stream)
if [ "${GPU_ROUND_GEMV:-0}" = 1 ]; then
  step gemv 90 python3 benchmarks/gpu_gemv.py --gib 1.5
  LIGHTSPEED_CUDA_WEIGHT_LOADS=stream step gemv_stream 60 python3 benchmarks/gpu_gemv.py --gib 1.5 --systems generated
  for f in gemv gemv_stream; do echo "== $f"; grep -E "^device|^\| [18]b" "$OUT/$f.log" | head -12; done
fi
if [ -n "${GPU_PROFILE_SHAPES-llama-3.2-1b}" ]; then
  LIGHTSPEED_CUDA_PDL=${GPU_PROFILE_PDL:-0} step profile "${GPU_PROFILE_S:-120}" python3 scripts/gpu_profile.py \
    ${GPU_PROFILE_SHAPES-llama-3.2-1b} --no-peer --steps 24
  grep -v Warning "$OUT/profile.log" | grep -v warn | head -${GPU_PROFILE_LINES:-40}
fi
if [ -n "${GPU_DECODE_SHAPES-smollm2-135m llama-3.2-1b}" ]; then
  step decode "${GPU_DECODE_S:-300}" python3 benchmarks/gpu_decode.py ${GPU_DECODE_SHAPES-smollm2-135m llama-3.2-1b} \
    --steps "${GPU_DECODE_STEPS:-64}" ${GPU_DECODE_ARGS:-}
  grep FAILED "$OUT/decode.log"; sed -n '/^shape/,$p' "$OUT/decode.log"
fi
# an A/B switch (GPU_ROUND_AB="NAME=VALUE ..."): the decode of GPU_AB_SHAPES under it, no peer,
# beside the decode step above (same machine, same call)
if [ -n "${GPU_ROUND_AB:-}" ]; then
  step ab "${GPU_AB_S:-120}" env ${GPU_ROUND_AB} python3 benchmarks/gpu_decode.py ${GPU_AB_SHAPES:-llama-3.2-1b} \
    --steps "${GPU_DECODE_STEPS:-64}" --no-peer
  echo "== under ${GPU_ROUND_AB}"; sed -n '/^shape/,$p' "$OUT/ab.log"
fi
# issue 28's prefill beside eager and torch.compile max-autotune (GPU_ROUND_PREFILL="SHAPES")
if [ -n "${GPU_ROUND_PREFILL:-}" ]; then
  step prefill "${GPU_PREFILL_S:-240}" python3 benchmarks/gpu_decode.py ${GPU_ROUND_PREFILL} --prefill "${GPU_PREFILL_N:-512}"
  sed -n '/^shape/,$p' "$OUT/prefill.log"
  # ... and under an A/B switch (GPU_PREFILL_AB="VAR=VALUE ..."), ours only
  if [ -n "${GPU_PREFILL_AB:-}" ]; then
    step prefill_ab "${GPU_PREFILL_S:-240}" env ${GPU_PREFILL_AB} python3 benchmarks/gpu_decode.py ${GPU_ROUND_PREFILL} \
      --prefill "${GPU_PREFILL_N:-512}" --no-peer
    echo "== under ${GPU_PREFILL_AB}"; sed -n '/^shape/,$p' "$OUT/prefill_ab.log"
  fi
fi
# the 1B step kernel by kernel with op names (LIGHTSPEED_TRACE: plain launches between events)
if [ "${GPU_ROUND_TRACE:-0}" = 1 ]; then
  LIGHTSPEED_TRACE=$OUT/trace.json step trace 60 python3 benchmarks/gpu_decode.py llama-3.2-1b --no-peer --steps 2
  python3 scripts/trace_summary.py "$OUT/trace.json" > "$OUT/trace_summary.txt" 2>&1; rm -f "$OUT/trace.json"
  head -30 "$OUT/trace_summary.txt"
fi
# the tensor-core tiles (kernels/matmul_mma.py, never run before): their tests, then prefill A/B
if [ "${GPU_ROUND_MMA:-0}" = 1 ]; then
  step mma_tests 120 python3 -m pytest -o addopts="" tests/backends/test_cuda_mma.py -q \
    -p no:cacheprovider
  tail -3 "$OUT/mma_tests.log"
  LIGHTSPEED_CUDA_MMA=0 step prefill_generic "${GPU_PREFILL_S:-150}" python3 benchmarks/gpu_decode.py llama-3.2-1b --prompt 512 --no-peer --steps 4
  step prefill_mma "${GPU_PREFILL_S:-150}" python3 benchmarks/gpu_decode.py llama-3.2-1b --prompt 512 --no-peer \
    --steps 4
  step prefill_peer "${GPU_PREFILL_S:-150}" python3 benchmarks/peer_torch_decode.py llama-3.2-1b --prefill 512
  for f in prefill_generic prefill_mma prefill_peer; do echo "== $f"; tail -6 "$OUT/$f.log"; done
fi
# where a 512-token prompt's time goes: the prefill and decode programs kernel by kernel
# (GPU_ROUND_PREFILL_TRACE=1; with GPU_ROUND_MMA=1 too unless it is 0)
if [ "${GPU_ROUND_PREFILL_TRACE:-${GPU_ROUND_MMA:-0}}" = 1 ]; then
  LIGHTSPEED_TRACE=$OUT/ptrace.json step prefill_trace 90 python3 benchmarks/gpu_decode.py \
    llama-3.2-1b --prompt 512 --no-peer --steps 2
  python3 scripts/trace_summary.py "$OUT/ptrace.json" --by-run > "$OUT/prefill_trace.txt" 2>&1
  rm -f "$OUT/ptrace.json"; head -40 "$OUT/prefill_trace.txt"
fi
# batched paged decode (issue 24's GPU figure): 1, 8, 32 streams of the 1B shape, batch invariance
if [ "${GPU_ROUND_SERVE:-0}" = 1 ]; then
  step serve "${GPU_SERVE_S:-240}" python3 benchmarks/gpu_serve.py llama-3.2-1b --streams 1,8,32 --check 4
  tail -8 "$OUT/serve.log"
  # ... and each step waiting for its ids before the next is queued (GPU_ROUND_SERVE_AB=1: the
  # pipelined paged step's A/B, same machine)
  if [ "${GPU_ROUND_SERVE_AB:-0}" = 1 ]; then
    step serve_nopipe "${GPU_SERVE_S:-240}" python3 benchmarks/gpu_serve.py llama-3.2-1b --streams 1,8,32 --check 0 \
      --no-pipeline
    echo "== without the pipeline"; grep -E "streams:" "$OUT/serve_nopipe.log"
    step serve_buckets "${GPU_SERVE_S:-240}" python3 benchmarks/gpu_serve.py llama-3.2-1b --streams 1,8,32 --check 4 \
      --buckets
    echo "== with a few-rows program"; grep -E "streams:|invariance|^sequence" "$OUT/serve_buckets.log"
  fi
fi
# long prompts (issue 28): device memory at its peak for GPU_LONG_N tokens (default 4k and 16k) of
# the 1B shape, prefilled in chunks of 2048 (the peak should grow with the KV cache only)
if [ "${GPU_ROUND_LONG:-0}" = 1 ]; then
  for n in ${GPU_LONG_N:-4096 16384}; do
    step "long_$n" "${GPU_LONG_S:-240}" python3 benchmarks/gpu_decode.py llama-3.2-1b --prompt $n --no-peer --steps 4
    grep "lightspeed {" "$OUT/long_$n.log"
  done
fi
# where a prompt's prefill time goes inside the captured graph, ours beside torch.compile
# max-autotune's (GPU_ROUND_PREFILL_PROFILE=1: scripts/gpu_profile.py --prefill, the 1B shape)
if [ "${GPU_ROUND_PREFILL_PROFILE:-0}" = 1 ]; then
  step prefill_profile "${GPU_PREFILL_PROFILE_S:-150}" python3 scripts/gpu_profile.py llama-3.2-1b \
    --prefill "${GPU_PREFILL_N:-512}" --steps 12
  grep -v -i warn "$OUT/prefill_profile.log" | grep -v "^  *[0-9.]* *[0-9.]*  " | head -70
fi
# every family on cuda beside transformers (issue 26's table): GPU_MODELS_ROWS, peer GPU_MODELS_PEER
if [ "${GPU_ROUND_MODELS:-0}" = 1 ]; then
  step models "${GPU_MODELS_S:-420}" python3 benchmarks/gpu_models.py ${GPU_MODELS_ROWS:-} --peer "${GPU_MODELS_PEER:-eager}"
  sed -n '/^cuda /,$p' "$OUT/models.log"
fi
