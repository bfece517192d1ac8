"""A GGUF file's decode on cuda with its blocks read as they are, beside the same file's weights
as float32 and as bfloat16, and beside native (which always reads the blocks) for the text: one
process, same prompt, greedy (issue 26 item 1).

    python benchmarks/gpu_blocks.py FAMILY FILE [--prompt TEXT] [--tokens 48] [--repeats 3]
                                    [--configs native,cuda-blocks,cuda-float32,cuda-bfloat16] [--profile N]
    python benchmarks/gpu_blocks.py llama random:smollm2 ...     (no file: SmolLM2's shape, random Q4_1)
    python benchmarks/gpu_blocks.py gemma3 random:gemma3 ...     (Gemma 3 270M's shape and block mix)

Per configuration: the weight bytes the decode step reads (blocks as stored, else the dtype's),
TTFT and the median TPOT over ``--repeats`` generations of ``--tokens`` tokens (no stop token:
every run the same length), and how many of the generated tokens equal native's (the first
configuration listed is the text reference).  The last line says whether every cuda configuration
reading blocks gave native's tokens.  ``--profile N``: each cuda configuration's decode steps once
more under PyTorch's profiler (N tokens), split into steps by scripts/step_timeline.py: kernels per
step, kernel time, the costliest kernels and one step in launch order (where a step's time goes).
Writes ``$OUT/gpu_blocks-FAMILY.json`` when ``$OUT`` is set.  ``random:smollm2`` for FILE: no file
(a GPU host has to be sent the real one in parts), SmolLM2-135M's shape with random float weights
quantised to Q4_1 blocks and the embedding to Q8_0 (gguf's quantiser; the real file's types), the
float configurations running those blocks' values: the same step's costs, for A/B runs of the
block kernels in one call; ``random:gemma3`` the same for Gemma 3 270M Q4_K_M's shape and mix of
block types (its K-quant blocks random bytes: gguf cannot make them).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

import numpy as np

CONFIGS = {  # name: (backend, dtype, GGUF blocks kept)
    "native": ("native", "float32", True),
    "cuda-blocks": ("cuda", "float32", True),
    "cuda-blocks-bf16": ("cuda", "bfloat16", True),
    "cuda-float32": ("cuda", "float32", False),
    "cuda-bfloat16": ("cuda", "bfloat16", False),
}


def weight_bytes(tensors: dict[str, Any]) -> int:
    """What the weights occupy as loaded: a block matrix its blocks, any other its dtype's bytes."""
    total = 0
    for v in tensors.values():
        blocks = getattr(v, "blocks", None)
        total += int(blocks.data.nbytes) if blocks is not None and not isinstance(v, np.ndarray) else int(v.nbytes)
    return total


def profile_steps(gen, ids: list[int], tokens: int, label: str) -> None:
    """One more generation under PyTorch's profiler (CUPTI sees the kernels our CUDA graphs launch),
    summarised per step by scripts/step_timeline.py."""
    import subprocess

    import torch

    path = f"/tmp/trace-blocks-{label}.json"
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        gen.generate(ids, tokens, stop_ids=set())
        torch.cuda.synchronize()
    prof.export_chrome_trace(path)
    timeline = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "step_timeline.py")
    res = subprocess.run([sys.executable, timeline, path, "--name", label, "--sequence"], capture_output=True,
                         text=True)
    print(res.stdout + res.stderr, flush=True)


# FILE = random:NAME: (family, block type by weight-name suffix as the real file has them, HF config
# keys over the family's random model)
_GEMMA3_LAYERS = (["sliding_attention"] * 5 + ["full_attention"]) * 3
RANDOM = {
    "smollm2": ("llama", {"proj.weight": "q4_1", "embed_tokens.weight": "q8_0"},
                dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                     num_key_value_heads=3, head_dim=64, vocab_size=49152, tie_word_embeddings=True,
                     max_position_embeddings=8192)),
    # gemma-3-270m Q4_K_M's mix: q, k, gate, up Q5_0; v and the embedding Q8_0; o Q4_K; down Q6_K
    "gemma3": ("gemma3", {"q_proj.weight": "q5_0", "k_proj.weight": "q5_0", "v_proj.weight": "q8_0",
                          "o_proj.weight": "q4_k", "gate_proj.weight": "q5_0", "up_proj.weight": "q5_0",
                          "down_proj.weight": "q6_k", "embed_tokens.weight": "q8_0"},
               dict(hidden_size=640, intermediate_size=2048, num_hidden_layers=18, num_attention_heads=4,
                    num_key_value_heads=1, head_dim=256, vocab_size=262144, sliding_window=512,
                    layer_types=_GEMMA3_LAYERS, query_pre_attn_scalar=256, max_position_embeddings=32768)),
}


def random_text_model(name: str, dtype: str, blocks: bool, seed: int = 0):
    """A TextModel of RANDOM[name]'s shape: random float weights, each matrix the real file keeps
    as blocks quantised to its block type by gguf's quantiser (the K-quants, which it cannot
    make: random blocks, ``weights.quant.random_quant``), kept as blocks with ``blocks``, else as
    their dequantised values (the same numbers either way)."""
    from gguf import GGMLQuantizationType
    from gguf.quants import quantize

    from lightspeed.models import get
    from lightspeed.models.run import ByteTokenizer, TextModel, random_config, random_weights
    from lightspeed.weights.quant import Blocks, QuantTensor, random_quant

    family, types, shape = RANDOM[name]
    cfg = {**random_config(family), **shape}
    model = get(family).from_hf_config(cfg, dtype)
    tensors: dict[str, Any] = random_weights(model, seed)
    for i, (key, v) in enumerate(sorted(tensors.items())):
        t = next((q for suffix, q in types.items() if key.endswith(suffix)), None) if v.ndim == 2 else None
        if t is None:
            continue
        if t in ("q4_k", "q6_k"):  # a seed of its own: every layer's matrix of one shape different bytes
            q = random_quant(t, v.shape, seed + i)
        else:
            q = QuantTensor(Blocks(t, quantize(v, getattr(GGMLQuantizationType, t.upper()))))
        tensors[key] = q if blocks else q.dense()
    return TextModel(family, model, tensors, ByteTokenizer(), f"random:{name}", True, 0.0, cfg)


def run_config(name: str, family: str, path: str, prompt: str, tokens: int, repeats: int,
               profile: int = 0) -> dict:
    from lightspeed.models.run import compile_generator, encode_prompt, load_text_model
    from lightspeed.search import SearchOptions

    backend, dtype, blocks = CONFIGS[name]
    if path.startswith("random:"):
        tm = random_text_model(path.removeprefix("random:"), dtype, blocks)
    else:
        tm = load_text_model(family, path, dtype=dtype, progress=False, lazy=blocks)
    ids = encode_prompt(tm, prompt)
    t0 = time.perf_counter()
    gen = compile_generator(tm, backend, SearchOptions(seed=0), say=None)
    if backend == "cuda":
        gen.warm_up(len(ids))
    compile_s = time.perf_counter() - t0
    runs = [gen.generate(ids, tokens, stop_ids=set()) for _ in range(repeats)]
    new = [int(t) for t in runs[0].new_ids]
    same_each_run = all([int(t) for t in r.new_ids] == new for r in runs)
    text = tm.tokenizer.decode(new, skip_special=True) if hasattr(tm.tokenizer, "decode") else ""
    if profile and backend == "cuda":
        profile_steps(gen, ids, profile, f"{family}-{name}")
    gen.close()
    return dict(config=name, backend=backend, dtype=dtype, blocks=blocks, weight_MB=weight_bytes(tm.tensors) / 1e6,
                compile_s=compile_s, prompt_tokens=len(ids), ttft_ms=min(r.ttft_s for r in runs) * 1e3,
                tpot_ms=statistics.median(r.tpot_s for r in runs) * 1e3, tokens=new,
                repeatable=same_each_run, text=text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("family")
    ap.add_argument("file")
    ap.add_argument("--prompt", default="Write a short story about a robot who learns to paint.")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--configs", default="native,cuda-blocks,cuda-float32,cuda-bfloat16")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="profile N more tokens of each cuda configuration (per-step kernel table)")
    args = ap.parse_args(argv)
    names = [c for c in args.configs.split(",") if c]
    unknown = set(names) - set(CONFIGS)
    if unknown:
        ap.error(f"--configs: unknown {sorted(unknown)}; known: {', '.join(CONFIGS)}")
    if args.file.startswith("random:"):
        known = [f"{f} random:{n}" for n, (f, _, _) in RANDOM.items()]
        if f"{args.family} {args.file}" not in known:
            ap.error(f"{args.family} {args.file}: the random models are {', '.join(known)}")
    elif not os.path.isfile(args.file):
        ap.error(f"no such file: {args.file}")
    rows = []
    for name in names:
        try:
            rows.append(run_config(name, args.family, args.file, args.prompt, args.tokens, args.repeats,
                                   args.profile))
        except Exception as e:  # one configuration failing must not hide the others' figures
            print(f"{name}: FAILED {type(e).__name__}: {e}", file=sys.stderr)
            rows.append(dict(config=name, error=f"{type(e).__name__}: {e}"))
    ref = next((r for r in rows if "tokens" in r), None)
    print(f"{args.family} {os.path.basename(args.file)}: {args.tokens} greedy tokens, median of {args.repeats}; "
          f"text reference: {ref['config'] if ref else 'none'}")
    print(f"{'config':18} {'weights MB':>10} {'compile s':>9} {'TTFT ms':>8} {'TPOT ms':>8} {'same tokens':>12}")
    for r in rows:
        if "error" in r:
            print(f"{r['config']:18} FAILED {r['error'][:90]}")
            continue
        same = sum(1 for _ in iter_same(r["tokens"], ref["tokens"]))
        r["same_as_reference"] = same
        print(f"{r['config']:18} {r['weight_MB']:10.1f} {r['compile_s']:9.1f} {r['ttft_ms']:8.2f} {r['tpot_ms']:8.3f} "
              f"{same:>5}/{len(ref['tokens'])}{'' if r['repeatable'] else ' (runs differ)'}")
    if ref is not None:
        print(f"reference text: {ref['text']!r}")
    # (a 16-bit dtype takes the weights as bfloat16 values, not blocks: weight_MB says which ran)
    block_rows = [r for r in rows if r.get("blocks") and r.get("backend") == "cuda" and r.get("dtype") == "float32"
                  and "tokens" in r]
    if ref is not None and ref["config"] == "native" and block_rows:
        ok = all(r["tokens"] == ref["tokens"] for r in block_rows)
        print(f"cuda reading blocks gives native's tokens: {'YES' if ok else 'NO'}")
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], f"gpu_blocks-{args.family}.json"), "w") as f:
            json.dump(rows, f, indent=1)
    return 0


def iter_same(a: list[int], b: list[int]):
    """The leading tokens two generations share."""
    for x, y in zip(a, b):
        if x != y:
            return
        yield x


if __name__ == "__main__":
    sys.exit(main())
