"""A training step of the tiny character-level transformer (examples/train_chars.py) on a
lightspeed backend beside PyTorch eager and torch.compile, same weights, same batches, same
process and threads; also how far apart the loss curves are.

    python benchmarks/train.py [--backend native] [--steps 200] [--dtype float32] [--no-compile] [--no-f64]

With ``--backend cuda`` PyTorch runs on the GPU too; ``--dtype bfloat16`` trains both in bf16.

Prints one row per system: median step time (ms), its ratio to PyTorch eager, the final loss and
the largest relative difference of its loss curve from lightspeed's; then (unless ``--no-f64``)
each float32 curve's largest relative difference from the float64 one.  Writes
``$OUT/train.json`` when ``$OUT`` is set.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))


def main() -> None:
    import torch
    from train_chars import run

    args = sys.argv[1:]
    backend = args[args.index("--backend") + 1] if "--backend" in args else "native"
    steps = int(args[args.index("--steps") + 1]) if "--steps" in args else 200
    import lightspeed as ls

    dtype = ls.dtypes.as_dtype(args[args.index("--dtype") + 1]) if "--dtype" in args else ls.float32
    device = "cuda" if backend == "cuda" else "cpu"
    torch.set_num_threads(os.cpu_count() or 1)
    res = run(backend, steps, peer=True, verbose=False, torch_compile="--no-compile" not in args, dtype=dtype,
              torch_device=device)
    eager = res["torch_step_ms"]
    rows = [(f"lightspeed {backend}", res["step_ms"], res["losses"][-1], 0.0),
            ("PyTorch eager", eager, res["torch_losses"][-1], res["torch_max_rel_diff"])]
    if "torch_compile_step_ms" in res:
        rows.append(("torch.compile", res["torch_compile_step_ms"], res["torch_compile_losses"][-1],
                     res["torch_compile_max_rel_diff"]))
    print(f"tiny char transformer (vocab {res['vocab']}), {steps} AdamW steps, {torch.get_num_threads()} threads; "
          f"lightspeed compile {res['compile_s']:.1f} s")
    if "arena_bytes" in res:
        print(f"lightspeed's intermediates: {res['arena_bytes'] / 2**20:.2f} MiB in the arena, "
              f"{res['value_bytes'] / 2**20:.2f} MiB if no two values shared a place (forward and backward liveness)")
    print(f"{'system':<22} {'step ms':>9} {'x eager':>8} {'final loss':>11} {'max rel diff vs ours':>21}")
    for name, ms, final, diff in rows:
        print(f"{name:<22} {ms:>9.2f} {ms / eager:>7.2f}x {final:>11.4f} {diff:>21.2e}")
    if "--no-f64" not in args:
        # the float32 curves drift apart chaotically (summation orders differ); how far each is from
        # the float64 curve (PyTorch's, and ours equal to it to 1e-9: tests/autograd) says which is
        # nearer the exact training
        import numpy as np

        exact = np.array(run("native", steps, peer=True, verbose=False, dtype=ls.float64)["torch_losses"])
        print("largest relative difference from the float64 curve:")
        for name, key in ((f"lightspeed {backend}", "losses"), ("PyTorch eager", "torch_losses"),
                          ("torch.compile", "torch_compile_losses")):
            if key in res:
                print(f"  {name:<22} {float(np.max(np.abs(np.array(res[key]) - exact) / exact)):.2e}")
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "train.json"), "w") as f:
            json.dump({"date": time.strftime("%Y-%m-%d"), "backend": backend, "steps": steps, "dtype": dtype.name,
                       **{k: v for k, v in res.items() if not k.endswith("losses")}}, f, indent=1)


if __name__ == "__main__":
    main()
