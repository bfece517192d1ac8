"""Decode speed of two source trees of lightspeed in the same run (a refactor's before and after).

    python benchmarks/ab_trees.py A_SRC B_SRC [--backend native|cuda] [--shape NAME ...] [--rounds 3]

A_SRC and B_SRC are ``src`` folders (e.g. a ``git worktree`` of the old commit's ``src`` and this
one's).  Each round runs one child process per tree and shape, alternating A, B, A, B ..., each
compiling (cached after the first round) and timing ``--steps`` decode steps of a Llama-shaped
model with random weights (``--dtype``; bf16 on cuda) through ``Generator`` (the same public
API in both trees); the table gives each tree's median TPOT over the rounds and the B/A ratio, and
the spread of each tree's rounds (the noise a ratio should be read against).  Shapes are
``benchmarks/peer_torch_decode.py``'s (``SHAPES``), with fewer layers via ``--layers``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = r"""
import json, sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
from peer_torch_decode import SHAPES
import lightspeed as ls
from lightspeed.models import from_hf_config
from lightspeed.models.generate import Generator

shape, backend, dtype, steps, layers = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
c = SHAPES[shape]
cfg = dict(model_type="llama", vocab_size=c["vocab"], hidden_size=c["dim"], intermediate_size=c["inter"],
           num_hidden_layers=layers or c["layers"], num_attention_heads=c["nh"], num_key_value_heads=c["nkv"],
           head_dim=c["hd"], rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=c["tied"],
           bos_token_id=1, eos_token_id=-1, max_position_embeddings=4096)
model = from_hf_config(cfg, dtype=dtype)
rng = np.random.default_rng(0)
npd = np.float32
if dtype == "bfloat16":
    import ml_dtypes
    npd = ml_dtypes.bfloat16
weights = {n: (rng.standard_normal(s, dtype=np.float32) * 0.02).astype(npd) for n, s in model.param_shapes().items()}
t0 = time.perf_counter()
gen = Generator(model, weights, backend=backend, search=ls.SearchOptions(budget=3, seed=0))
compile_s = time.perf_counter() - t0
prompt = list(range(1, 33))
gen.generate(prompt, max_new_tokens=4, stop_ids=())
res = gen.generate(prompt, max_new_tokens=steps, stop_ids=())
print("RESULT " + json.dumps({"tpot_ms": 1000 * float(np.median(res.step_s)), "compile_s": compile_s,
                              "tokens": res.new_ids[:8]}))
"""


def run_child(src: str, shape: str, args, cache: str) -> dict:
    env = dict(os.environ, PYTHONPATH=src, LIGHTSPEED_CACHE_DIR=cache, PYTHONUNBUFFERED="1")
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(CHILD)
    try:
        out = subprocess.run([sys.executable, f.name, str(HERE), shape, args.backend, args.dtype, str(args.steps),
                              str(args.layers)], env=env, capture_output=True, text=True, timeout=args.timeout)
    finally:
        os.unlink(f.name)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"child failed ({src}, {shape}):\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")
    return json.loads(line[7:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a_src")
    ap.add_argument("b_src")
    ap.add_argument("--backend", default="native", choices=["native", "cuda", "cpu"])
    ap.add_argument("--shape", nargs="+", default=["smollm2-135m"])
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--layers", type=int, default=0, help="layers (0: the shape's own)")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=900)
    args = ap.parse_args()
    args.dtype = args.dtype or ("bfloat16" if args.backend == "cuda" else "float32")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for shape in args.shape:
            times: dict[str, list[float]] = {"A": [], "B": []}
            tokens = {}
            for r in range(args.rounds):
                for tag, src in (("A", args.a_src), ("B", args.b_src)):
                    res = run_child(src, shape, args, os.path.join(tmp, tag))
                    times[tag].append(res["tpot_ms"])
                    tokens[tag] = res["tokens"]
                    print(f"round {r} {shape} {tag}: {res['tpot_ms']:.3f} ms (compile {res['compile_s']:.1f} s)",
                          flush=True)
            a, b = statistics.median(times["A"]), statistics.median(times["B"])
            spread = {t: (max(v) - min(v)) / statistics.median(v) for t, v in times.items()}
            rows.append((shape, a, b, b / a, spread["A"], spread["B"], tokens["A"] == tokens["B"]))
    print(f"\n{args.backend} decode, {args.dtype}, {args.steps} steps x {args.rounds} rounds, A = {args.a_src}, "
          f"B = {args.b_src}")
    print("| shape | A TPOT ms | B TPOT ms | B / A | A spread | B spread | same tokens |")
    print("|---|---|---|---|---|---|---|")
    for shape, a, b, ratio, sa, sb, same in rows:
        print(f"| {shape} | {a:.3f} | {b:.3f} | {ratio:.3f} | {sa:.1%} | {sb:.1%} | {same} |")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "ab_trees.json").write_text(json.dumps(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
