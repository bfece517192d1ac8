"""Train a tiny character-level transformer on the project's own docs (a frozen copy,
examples/data) with lightspeed, beside the
same model in PyTorch from the same initial weights and the same batches.

    python examples/train_chars.py [--backend native] [--steps 200] [--no-peer]

The whole step (forward, ``ls.grad``'s backward, AdamW) is one compiled program updating its
parameters in place.  Prints both loss curves every 20 steps, their largest relative difference
and the time per step of each (PyTorch eager, same process, same threads).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import lightspeed as ls
from lightspeed.autograd.optim import training_step

ROOT = Path(__file__).resolve().parent.parent
CONFIG = dict(batch=8, context=32, dim=64, heads=4, layers=2, lr=3e-3, weight_decay=0.01)


# the project's docs as they were on 2026-12-05, frozen so that loss curves and step times compare
# across sessions (the docs themselves change every session)
CORPUS = ROOT / "examples" / "data" / "docs-2026-12-05.txt"


def corpus(text: str | None = None) -> tuple[np.ndarray, list[str]]:
    """``text`` (default: :data:`CORPUS`) as character ids (printable ASCII and newlines), and the
    characters."""
    if text is None:
        text = CORPUS.read_text()
    text = "".join(c for c in text if c == "\n" or 32 <= ord(c) < 127)
    chars = sorted(set(text))
    table = {c: i for i, c in enumerate(chars)}
    return np.array([table[c] for c in text], np.int64), chars


def init_weights(vocab: int, c: dict, seed: int = 0, dtype=np.float32) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    d, L = c["dim"], c["layers"]

    def normal(*shape, std=0.02):
        return (rng.standard_normal(shape) * std).astype(dtype)

    def ones(n):
        return np.ones(n, dtype)

    def zeros(n):
        return np.zeros(n, dtype)

    w = {"embed": normal(vocab, d), "pos": normal(c["context"], d), "head": normal(d, vocab),
         "ln_f.w": ones(d), "ln_f.b": zeros(d)}
    for i in range(L):
        w.update({f"{i}.ln1.w": ones(d), f"{i}.ln1.b": zeros(d), f"{i}.qkv": normal(d, 3 * d),
                  f"{i}.proj": normal(d, d), f"{i}.ln2.w": ones(d), f"{i}.ln2.b": zeros(d),
                  f"{i}.fc1": normal(d, 4 * d), f"{i}.fc2": normal(4 * d, d)})
    return w


def build(vocab: int, c: dict, dtype: ls.DType = ls.float32) -> ls.Graph:
    """The training step: inputs ids [B, T], targets [B, T] (as one-hot rows), the weights and the
    optimiser state; one-hot embedding (a product, so its gradient is a product too)."""
    B, T, d, H = c["batch"], c["context"], c["dim"], c["heads"]
    g = ls.Graph()
    ids = g.input("ids", (B, T), ls.int64)
    target = g.input("target", (B, T, vocab), dtype)
    shapes = {k: v.shape for k, v in init_weights(vocab, c).items()}
    p = {k: g.input(k, s, dtype) for k, s in shapes.items()}
    onehot = ls.one_hot(ids, vocab).to(dtype)
    x = onehot @ p["embed"] + p["pos"]
    mask = g.constant(np.triu(np.full((T, T), -1e9, dtype.np), 1))
    for i in range(c["layers"]):
        h = ls.layer_norm(x, (d,), p[f"{i}.ln1.w"], p[f"{i}.ln1.b"])
        qkv = (h @ p[f"{i}.qkv"]).reshape(B, T, 3, H, d // H).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        att = ls.softmax((q @ k.transpose(-1, -2)) * (1.0 / np.sqrt(d // H)) + mask, -1)
        x = x + ((att @ v).permute(0, 2, 1, 3).reshape(B, T, d)) @ p[f"{i}.proj"]
        h = ls.layer_norm(x, (d,), p[f"{i}.ln2.w"], p[f"{i}.ln2.b"])
        x = x + ls.relu(h @ p[f"{i}.fc1"]) @ p[f"{i}.fc2"]
    logits = ls.layer_norm(x, (d,), p["ln_f.w"], p["ln_f.b"]) @ p["head"]
    loss = -(ls.log_softmax(logits, -1) * target).sum() * (1.0 / (B * T))
    training_step(g, loss, p, optimizer="adamw", lr=c["lr"], weight_decay=c["weight_decay"])
    return g


def torch_model(weights: dict[str, np.ndarray], c: dict, device: str = "cpu"):
    import torch

    def param(v: np.ndarray):  # bfloat16 through float32 (exact): torch does not take ml_dtypes' arrays
        t = torch.tensor(v.astype(np.float32) if v.dtype.name == "bfloat16" else v, device=device)
        return t.to(torch_dtype(v.dtype)).requires_grad_()

    params = {k: param(v) for k, v in weights.items()}
    B, T, d, H = c["batch"], c["context"], c["dim"], c["heads"]
    mask = torch.triu(torch.full((T, T), -1e9, dtype=params["embed"].dtype, device=device), 1)
    F = torch.nn.functional

    def loss_of(ids, targets):
        x = params["embed"][ids] + params["pos"]
        for i in range(c["layers"]):
            h = F.layer_norm(x, (d,), params[f"{i}.ln1.w"], params[f"{i}.ln1.b"])
            qkv = (h @ params[f"{i}.qkv"]).reshape(B, T, 3, H, d // H).permute(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
            att = torch.softmax(q @ k.transpose(-1, -2) / np.sqrt(d // H) + mask, -1)
            x = x + (att @ v).permute(0, 2, 1, 3).reshape(B, T, d) @ params[f"{i}.proj"]
            h = F.layer_norm(x, (d,), params[f"{i}.ln2.w"], params[f"{i}.ln2.b"])
            x = x + torch.relu(h @ params[f"{i}.fc1"]) @ params[f"{i}.fc2"]
        logits = F.layer_norm(x, (d,), params["ln_f.w"], params["ln_f.b"]) @ params["head"]
        return F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1))

    opt = torch.optim.AdamW(params.values(), lr=c["lr"], weight_decay=c["weight_decay"])
    return loss_of, opt


def torch_dtype(dtype: np.dtype):
    import torch

    return {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
            "float16": torch.float16}[np.dtype(dtype).name]


def run(backend: str = "native", steps: int = 200, peer: bool = True, seed: int = 0, verbose: bool = True,
        torch_compile: bool = False, dtype: ls.DType = ls.float32, text: str | None = None,
        torch_device: str = "cpu") -> dict:
    """Train ``steps`` steps on ``backend`` (and PyTorch eager beside it with ``peer``, plus
    torch.compile's default mode with ``torch_compile``, on ``torch_device``): the losses and the
    median step times.  On ``cuda`` the parameters and optimiser state live on the device (the
    step updates them in place); a step's time includes reading its loss back, as PyTorch's
    ``loss.item()`` does."""
    c = CONFIG
    data, chars = corpus(text)
    vocab = len(chars)
    weights = init_weights(vocab, c, seed, dtype.np)
    t0 = time.perf_counter()
    prog = build(vocab, c, dtype).compile(backend=backend)
    compile_s = time.perf_counter() - t0
    state = {k: v.copy() for k, v in weights.items()}
    for k, v in weights.items():
        state[f"{k}.m"], state[f"{k}.v"] = np.zeros_like(v), np.zeros_like(v)
    if hasattr(prog, "to_device"):  # a device backend: the state stays resident, updated in place
        state = {k: prog.to_device(v) for k, v in state.items()}
    rng = np.random.default_rng(seed + 1)
    starts = rng.integers(0, len(data) - c["context"] - 1, (steps, c["batch"]))
    eye = np.eye(vocab, dtype=dtype.np)
    ours, ours_s = [], []
    for step in range(steps):
        ids = np.stack([data[s:s + c["context"]] for s in starts[step]])
        nxt = np.stack([data[s + 1:s + c["context"] + 1] for s in starts[step]])
        t = time.perf_counter()
        out = prog({"ids": ids, "target": eye[nxt], "step": np.array(step + 1, dtype.np), **state})
        ours_s.append(time.perf_counter() - t)
        loss = out["loss"]
        ours.append(float(loss.numpy() if hasattr(loss, "numpy") else loss))
    res = {"vocab": vocab, "compile_s": compile_s, "losses": ours, "step_ms": 1e3 * float(np.median(ours_s))}
    if hasattr(prog, "arena_bytes") and hasattr(prog, "value_bytes"):  # kernel backends: the liveness plan
        res["arena_bytes"], res["value_bytes"] = prog.arena_bytes(), prog.value_bytes()
    for mode in (["eager"] if peer else []) + (["compile"] if torch_compile else []):
        import torch

        loss_of, opt = torch_model(weights, c, torch_device)
        if mode == "compile":
            loss_of = torch.compile(loss_of)
        theirs, theirs_s = [], []
        for step in range(steps):
            ids = torch.from_numpy(np.stack([data[s:s + c["context"]] for s in starts[step]])).to(torch_device)
            nxt = torch.from_numpy(np.stack([data[s + 1:s + c["context"] + 1] for s in starts[step]])).to(torch_device)
            t = time.perf_counter()
            opt.zero_grad()
            loss = loss_of(ids, nxt)
            loss.backward()
            opt.step()
            theirs_s.append(time.perf_counter() - t)
            theirs.append(loss.item())
        key = "torch" if mode == "eager" else "torch_compile"
        res.update({f"{key}_losses": theirs, f"{key}_step_ms": 1e3 * float(np.median(theirs_s[1:] or theirs_s)),
                    f"{key}_max_rel_diff": float(np.max(np.abs(np.array(ours) - theirs) / np.array(theirs)))})
    if peer:
        res["max_rel_diff"] = res["torch_max_rel_diff"]
    if verbose:
        for step in range(0, steps, 20):
            line = f"step {step + 1:4d}  loss {ours[step]:.4f}"
            if peer:
                line += f"  torch {res['torch_losses'][step]:.4f}"
            print(line)
        print(f"final loss {ours[-1]:.4f}; {backend}: {res['step_ms']:.2f} ms per step (compile {compile_s:.1f} s)"
              + (f"; PyTorch eager {res['torch_step_ms']:.2f} ms; largest relative loss difference "
                 f"{res['max_rel_diff']:.2e}" if peer else ""))
    return res


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", default="native")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--no-peer", action="store_true")
    args = ap.parse_args()
    run(args.backend, args.steps, not args.no_peer)
