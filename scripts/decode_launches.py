"""The launches of a decode step, op by op, without a GPU: a small Llama decode graph saturated
with a kernel backend's rules, the search's fixed candidates (default, greedy, fused) lowered
through the backend's op table with a recording executor.

    python scripts/decode_launches.py [--backend cuda|native] [--layers 1] [--dtype bfloat16] [--show fused]
                                      [--hidden 64 --ffn 128 --heads 4 --kv-heads 2] [--blocks q4_1]

Prints each candidate's launch count by (op, kind) and, for ``--show``'s candidate, every launch
with its shape and region body: where a decode layer's kernels go (the decode-speed work's map).
The search on a GPU measures these and random candidates; a decode step's pick is usually the
few-rows one (the fused one without the prompt's many-rows kernels).  ``--blocks QTYPE``: the
layers' projections declared as GGML blocks of QTYPE and the embedding as Q8_0 (a float32 model
loaded from a GGUF file, as SmolLM2's: the block decode step).  ``--prefill``: the prefill graph.
``--resources`` (cuda): each listed kernel compiled by NVRTC, with the registers a thread and the
local-memory frame ptxas gave it and the blocks a multiprocessor then holds (no GPU needed).
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", default="cuda", choices=["cuda", "native"])
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--hidden", type=int, default=64, help="2048 with --ffn 8192 --heads 32 --kv-heads 8: the 1B")
    ap.add_argument("--ffn", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--family", default="llama", choices=["llama", "gemma3"],
                    help="gemma3: Gemma 3's layer (sandwich norms, q/k norms, scaled tied embedding)")
    ap.add_argument("--blocks", default=None, metavar="QTYPE", help="projections as QTYPE blocks (float32 model)")
    ap.add_argument("--show", default="fused", help="the candidate whose launches are listed (or 'none')")
    ap.add_argument("--prefill", action="store_true", help="the prefill graph instead of the decode step's")
    ap.add_argument("--resources", action="store_true",
                    help="cuda: each listed kernel's registers, local frame and blocks a multiprocessor (NVRTC, "
                         "backends/cuda/cubin.py)")
    args = ap.parse_args()
    sys.setrecursionlimit(10000)
    from tests.backends.harness import saturate
    from tests.backends.test_cuda_codegen import _Recorder

    import lightspeed as ls
    from lightspeed.backends import get_backend
    from lightspeed.backends.codegen.program import KernelProgram
    from lightspeed.backends.cuda import CudaBackend
    from lightspeed.egraph.llir import decode_program
    from lightspeed.models import from_hf_config
    from lightspeed.search import candidates

    cfg = dict(model_type=args.family, vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.ffn,
               num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
               head_dim=args.hidden // args.heads,
               rms_norm_eps=1e-5, tie_word_embeddings=True)
    if args.family == "gemma3":
        cfg.update(query_pre_attn_scalar=args.hidden // args.heads, sliding_window=64, sliding_window_pattern=6)
    # cuda as on a GPU host (cuBLASLt offered: the host has nvmath-python; here it may not)
    backend = CudaBackend("search") if args.backend == "cuda" else get_backend(args.backend)
    model = from_hf_config(cfg, dtype="float32" if args.blocks else args.dtype)
    storage = None
    if args.blocks:
        readable = {d.name: d for d in backend.block_dtypes}
        storage = {n: readable[args.blocks if n.endswith("proj.weight") else "q8_0"]
                   for n, shape in model.param_shapes().items()
                   if len(shape) == 2 and (n.endswith("proj.weight") or n.endswith("embed_tokens.weight"))}
    graph = model.build_graph("prefill" if args.prefill else "decode", storage=storage, next_token=True)
    decls = backend.declarations()
    many = frozenset(n for n, d in decls.items() if d.many_rows)
    library = frozenset(n for n, d in decls.items() if d.library)

    def resources(spec) -> str:
        """``regs R frame F B/SM``: what ptxas gave the kernel (a library call: nothing)."""
        from lightspeed.backends.codegen.kernels import module_source
        from lightspeed.backends.cuda import nvrtc
        from lightspeed.backends.cuda.cubin import kernel_resources

        if not spec.source:
            return ""
        r = kernel_resources(nvrtc.compile_cubin(module_source([spec], "cuda"), "sm_90"))[spec.name]
        return f"regs {r.registers:3d} frame {r.frame_bytes:4d} {r.blocks_per_sm(spec.launch.threads):2d}/SM  "

    _, enc, index, ser = saturate(backend, graph)
    for origin, cand in candidates(index, ls.SearchOptions(budget=4, seed=0), many, library):
        lprog = decode_program(cand, ser, enc.constants, backend.declarations())
        rec = _Recorder()  # the NVRTC test's recorder, in this backend's dialect
        rec.dialect = backend.executor.dialect
        prog = KernelProgram(graph, lprog, rec, table=backend.op_table)
        lprog = prog.lprog  # (the program's own: a stacked product's slices read in place rewrite it)

        def name(x, ops=lprog.ops):  # a merged launch (kernels/merge.py) by its parts
            return "+".join(ops[j].op for j in x.merged or (x.op,))

        counts = collections.Counter(f"{name(x)}:{x.spec.launch.kind}" for x in prog.launches)
        print(f"{origin}: {len(prog.launches)} launches ({len(prog.launches) / args.layers:.1f} per layer "
              f"incl. prelude/epilogue): {dict(counts)}")
        if origin == args.show:
            for x in prog.launches:
                op = lprog.ops[x.op]
                body = op.args.get("body")
                print(f"   {name(x):14s} {x.spec.launch.kind:12s} {tuple(str(d) for d in op.shape)} "
                      f"{resources(x.spec) if args.resources else ''}{str(body)[:140] if body else ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
