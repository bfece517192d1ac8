"""The ``lightspeed`` command.

    lightspeed demo      build a small graph, run it on the reference runtime, check it against numpy
    lightspeed ops       list the high-level ops and their PyTorch counterparts
    lightspeed version
"""

from __future__ import annotations

import argparse
import sys

import numpy as np


def _demo(args: argparse.Namespace) -> int:
    import lightspeed as ls

    g = ls.Graph()
    x = g.input("x", ("batch", 16), ls.float32)
    w = g.input("w", (16, 8))
    y = (x @ w).relu().softmax(-1)
    g.output("y", y)
    print("graph (HLIR, primitives only):")
    print(g)
    prog = g.compile(backend=args.backend)
    rng = np.random.default_rng(0)
    print(f"\ncompiled for backend {args.backend!r}: {prog}")
    ok = True
    for batch in (1, 3, 7):  # one program serves every value of the symbolic dim
        xa = rng.standard_normal((batch, 16)).astype(np.float32)
        wa = rng.standard_normal((16, 8)).astype(np.float32)
        out = prog(x=xa, w=wa)["y"]
        logits = np.maximum(xa.astype(np.float64) @ wa, 0)
        ref = np.exp(logits - logits.max(-1, keepdims=True))
        ref /= ref.sum(-1, keepdims=True)
        err = float(np.abs(out - ref).max())
        ok &= err < 1e-5
        print(f"batch={batch}: y{out.shape} max |error| vs numpy float64 = {err:.2e}")
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


def _ops(args: argparse.Namespace) -> int:
    from lightspeed.hl import HL_OPS

    for name, op in sorted(HL_OPS.items()):
        print(f"{name:20s} {op.category:12s} {op.torch or ''}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="lightspeed", description="lightspeed deep-learning inference compiler")
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="run a small graph and check it against numpy")
    d.add_argument("--backend", default="reference")
    d.set_defaults(fn=_demo)
    sub.add_parser("ops", help="list high-level ops").set_defaults(fn=_ops)
    sub.add_parser("version", help="print the version").set_defaults(
        fn=lambda a: print(__import__("lightspeed").__version__) or 0)
    args = ap.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
