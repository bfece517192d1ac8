"""Train a small MLP on scikit-learn's bundled digits (8x8 images, 10 classes) with lightspeed: the
forward pass, ``ls.grad``'s backward pass and AdamW compiled as one training-step program that
updates its parameters in place (``lightspeed.autograd.optim.training_step``).

    python examples/train_digits.py [--backend native] [--steps 300] [--batch 128]

Prints the loss every 50 steps and the test accuracy (a held-out fifth of the data).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import lightspeed as ls
from lightspeed.autograd.optim import training_step


def mlp(g: ls.Graph, batch, hidden: int):
    x = g.input("x", (batch, 64))
    params = {"w1": g.input("w1", (64, hidden)), "b1": g.input("b1", (hidden,)),
              "w2": g.input("w2", (hidden, 10)), "b2": g.input("b2", (10,))}
    logits = ls.relu(x @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]
    return x, params, logits


def train(backend: str = "native", steps: int = 300, batch: int = 128, hidden: int = 64, lr: float = 1e-2,
          seed: int = 0, verbose: bool = True) -> float:
    """Train and return the test accuracy."""
    from sklearn.datasets import load_digits

    data = load_digits()
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(data.target))
    xs = (data.data[order] / 16.0).astype(np.float32)
    ys = data.target[order]
    n_test = len(ys) // 5
    x_test, y_test, x_train, y_train = xs[:n_test], ys[:n_test], xs[n_test:], ys[n_test:]

    g = ls.Graph()
    x, params, logits = mlp(g, batch, hidden)
    y = g.input("y", (batch, 10))
    loss = -(ls.log_softmax(logits, -1) * y).sum() * (1.0 / batch)
    training_step(g, loss, params, optimizer="adamw", lr=lr, weight_decay=1e-4)
    t0 = time.perf_counter()
    step_prog = g.compile(backend=backend)
    compile_s = time.perf_counter() - t0

    state = {"w1": rng.standard_normal((64, hidden)).astype(np.float32) * np.float32(1 / 8),
             "b1": np.zeros(hidden, np.float32),
             "w2": rng.standard_normal((hidden, 10)).astype(np.float32) * np.float32(1 / np.sqrt(hidden)),
             "b2": np.zeros(10, np.float32)}
    for k in list(state):
        state[f"{k}.m"], state[f"{k}.v"] = np.zeros_like(state[k]), np.zeros_like(state[k])
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        pick = rng.integers(0, len(y_train), batch)
        out = step_prog({"x": x_train[pick], "y": np.eye(10, dtype=np.float32)[y_train[pick]],
                         "step": np.array(step, np.float32), **state})
        if verbose and (step % 50 == 0 or step == 1):
            print(f"step {step:4d}  loss {float(out['loss']):.4f}")
    train_s = time.perf_counter() - t0

    ge = ls.Graph()
    _, _, test_logits = mlp(ge, "n", hidden)
    ge.output("logits", test_logits)
    evaluate = ge.compile(backend=backend)
    pred = np.asarray(evaluate({"x": x_test, **{k: state[k] for k in ("w1", "b1", "w2", "b2")}})["logits"]).argmax(-1)
    acc = float((pred == y_test).mean())
    if verbose:
        print(f"test accuracy {acc:.4f} ({n_test} images); compile {compile_s:.1f} s, {steps} steps in "
              f"{train_s:.2f} s ({1e3 * train_s / steps:.2f} ms per step) on {backend}")
    return acc


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", default="native")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=128)
    args = ap.parse_args()
    train(args.backend, args.steps, args.batch)
