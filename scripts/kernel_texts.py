"""Dump every generated kernel of a fixed corpus (both dialects) as JSON: name, text, dims,
buffers and the cuda launch shape at two sets of bounds.  Run it on two trees and diff the files
(``python scripts/kernel_texts.py OUT.json``; ``--compare A.json B.json``) to show that a change of
the kernel layer leaves the generated kernels as they were, or exactly which ones it changes.

The corpus: every op-table graph, the model blocks and a tiny Llama decode step of the conformance
suite, two bfloat16 blocks, and (native) block-dtype matmuls and gathers of every GGML type; the
default program and random candidates of each, lowered with each backend's op table."""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _block_graphs():
    import lightspeed as ls

    out = {}
    for q in ("q4_1", "q4_0", "q8_0", "q5_0", "q4_k", "q6_k"):
        g = ls.Graph()
        x, b = g.input("x", ("s", 512)), g.input("b", (64,))
        w, e = g.input("w", (64, 512), dtype=getattr(ls, q)), g.input("e", (64, 512), dtype=getattr(ls, q))
        ids = g.input("ids", ("s",), dtype=ls.int32)
        g.output("y", x @ w.cast(ls.float32).transpose(0, 1) + b)
        g.output("z", e.cast(ls.float32)[ids])
        out[f"blocks:{q}"] = g
    return out


def dump(candidates: int = 4) -> dict:
    from tests.backends.harness import saturate
    from tests.backends.test_cuda_codegen import _bf16_blocks, _graphs, _Recorder

    import lightspeed as ls
    from lightspeed.backends import get_backend
    from lightspeed.backends.codegen.kernels import module_source
    from lightspeed.backends.codegen.program import KernelProgram
    from lightspeed.egraph import Candidate
    from lightspeed.egraph.llir import decode_program

    res = {}
    for name in ("cuda", "native"):
        backend = get_backend(name)
        rec = _Recorder()  # the NVRTC test's recorder, in this backend's dialect
        rec.dialect = backend.executor.dialect
        graphs = {**_graphs(), **_bf16_blocks(), **(_block_graphs() if name == "native" else {})}
        for gname, g in graphs.items():
            _, enc, index, ser = saturate(backend, g)
            seen = set()
            for seed in range(40 if gname.startswith("blocks") else candidates):
                cand = Candidate.random(index, random.Random(seed))
                if cand.key() in seen:
                    continue
                seen.add(cand.key())
                lprog = decode_program(cand, ser, enc.constants, backend.declarations())
                try:
                    KernelProgram(g, lprog, rec, table=backend.op_table)
                except ls.LightspeedError as e:
                    assert "in place" in str(e), e
        for s in rec.specs.values():
            entry = {"dialect": rec.dialect, "source": s.source, "dims": list(s.dims),
                     "buffers": [str(b) for b in s.buffers]}
            if rec.dialect == "cuda" and s.library is None:
                entry["grid"] = [[list(s.launch.grid_at(b, 132)), list(s.launch.block)]
                                 for b in ({d: 7 for d in s.dims}, {d: 4099 for d in s.dims})]
            res[s.name] = entry
        res[f"prelude:{rec.dialect}"] = {"source": module_source([], rec.dialect)}
    return res


def compare(a: dict, b: dict) -> int:
    """Print what differs; 0 when the kernels (names, texts, launch shapes) are the same."""
    diff = 0
    for k in sorted(set(a) | set(b)):
        if k not in a or k not in b:
            print(f"{'only in B' if k not in a else 'only in A'}: {k}")
            diff += 1
        elif a[k] != b[k]:
            fields = [f for f in set(a[k]) | set(b[k]) if a[k].get(f) != b[k].get(f)]
            print(f"differs: {k} ({', '.join(sorted(fields))})")
            diff += 1
    print(f"{len(a)} / {len(b)} entries, {diff} differ")
    return 1 if diff else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", nargs="?", help="the JSON file to write")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"))
    args = ap.parse_args()
    if args.compare:
        return compare(*(json.loads(Path(p).read_text()) for p in args.compare))
    sys.setrecursionlimit(10000)
    res = dump()
    Path(args.out).write_text(json.dumps(res, indent=0, sort_keys=True))
    print(f"{len(res)} entries -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
