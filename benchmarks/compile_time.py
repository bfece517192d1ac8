"""Compile time, two ways.

Per model family (the default): what ``lightspeed run FAMILY`` spends compiling, cold (a fresh,
empty compile cache: ``LIGHTSPEED_CACHE_DIR`` set to a new temporary directory) and cached (a second
process on the same cache), split by phase, each in a fresh process; plus ``lightspeed --help``.
Families: llama (SmolLM2-135M), gemma (Gemma 3 270M), whisper (tiny.en), qwen3 (the CLI's random
config).  Each measurement runs ``--rounds`` times (default 2) and the lower total is kept.

    python benchmarks/compile_time.py [--families llama gemma whisper qwen3] [--budget 3] [--rounds 2]

Phases (seconds, summed over a family's programs: prefill + decode, or whisper's encoder + prefill
+ decode): build (the graph), roll (finding and splitting the repeated layers), encode, e-graph
(saturate + serialize, or load from the cache; both include indexing it), extract (candidates or the cached choice),
profile (measuring candidates), lower (kernel preparation), persist (weights checked, converted and
made resident).  ``import`` and ``load`` (reading and dequantising the weights) are outside the
compile and shown apart.

Per layer count (``--layers``): compile time per phase for stacked SmolLM2-shaped layers on the cpu
backend (hidden 576, 9 heads, 3 KV heads, FFN 1536), with the on-disk cache turned off.  Phases and
e-nodes are summed over the compiled parts when the layers are rolled (``roll`` is finding and
splitting the repeated run; ``blocks`` is how many layers share one compiled template).

    python benchmarks/compile_time.py --layers 1 2 4 8 30 [--budget 2] [--no-roll]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))


def build(layers: int, hidden=576, heads=9, kv_heads=3, ffn=1536):
    import lightspeed as ls  # here, not at the top: a family's child process times its own imports

    g = ls.Graph()
    s, dh = "s", hidden // heads
    h = g.input("x", (s, hidden))
    for i in range(layers):
        wq, wk, wv, wo = (g.input(f"wq{i}", (hidden, hidden)), g.input(f"wk{i}", (hidden, kv_heads * dh)),
                          g.input(f"wv{i}", (hidden, kv_heads * dh)), g.input(f"wo{i}", (hidden, hidden)))
        w1, w2, w3 = (g.input(f"w1{i}", (hidden, ffn)), g.input(f"w2{i}", (ffn, hidden)),
                      g.input(f"w3{i}", (hidden, ffn)))
        n = ls.rms_norm(h, (hidden,), g.input(f"n1{i}", (hidden,)), eps=1e-5)
        q = (n @ wq).reshape(s, heads, dh).transpose(0, 1)
        k = (n @ wk).reshape(s, kv_heads, dh).transpose(0, 1).repeat_interleave(heads // kv_heads, 0)
        v = (n @ wv).reshape(s, kv_heads, dh).transpose(0, 1).repeat_interleave(heads // kv_heads, 0)
        att = ((q @ k.transpose(-1, -2)) * dh ** -0.5).softmax(-1)
        h = h + (att @ v).transpose(0, 1).reshape(s, hidden) @ wo
        n = ls.rms_norm(h, (hidden,), g.input(f"n2{i}", (hidden,)), eps=1e-5)
        h = h + ((n @ w1).silu() * (n @ w3)) @ w2
    g.output("y", h)
    return g


def layers_table(args: argparse.Namespace) -> None:
    import lightspeed as ls

    os.environ["LIGHTSPEED_CACHE"] = "0"  # measure the work, not the cache (set here: tests import build)
    cols = ["build", "roll", "encode", "saturate", "serialize", "extract", "profile", "lower"]
    print(f"{'layers':>6s} {'nodes':>6s} {'e-nodes':>8s} {'blocks':>6s} "
          + " ".join(f"{c:>10s}" for c in cols) + f" {'total':>9s}")
    for n in args.layers:
        t0 = time.perf_counter()
        g = build(n)
        t_build = time.perf_counter() - t0
        opts = ls.SearchOptions(budget=args.budget, seed=0, dims={"s": 1}, roll=not args.no_roll)
        prog = g.compile(backend="cpu", search=opts)
        rep = prog.search_report
        plan = getattr(prog, "plan", None)
        phases = {"build": t_build, **rep.phases, "lower": rep.lower}
        total = sum(phases.values())
        print(f"{n:6d} {len(g.reachable()):6d} {rep.egraph_nodes:8d} {plan.count if plan else 0:6d} "
              + " ".join(f"{phases.get(c, 0.0) * 1e3:8.1f}ms" for c in cols) + f" {total:8.2f}s")
    print("\nsaturation time per layer relative to 1 layer is the scaling to watch (sub-linear is the goal).")


# ---------------------------------------------------------------------- per family
PHASES = ["build", "roll", "encode", "e-graph", "extract", "profile", "lower", "persist"]
_GROUP = {"saturate": "e-graph", "serialize": "e-graph", "load": "e-graph"}


def _child(family: str, budget: int) -> dict:
    """One compile of ``family`` in this (fresh) process, as ``lightspeed run`` does it."""
    t0 = time.perf_counter()  # what a `lightspeed run` process imports before it loads anything
    import lightspeed.backends.cpu  # noqa: F401
    from lightspeed.models import generate, whisper  # noqa: F401
    from lightspeed.models.run import load_text_model
    from lightspeed.search import SearchOptions, session
    from lightspeed.weights import loader  # noqa: F401
    out: dict = {"import": time.perf_counter() - t0, "phases": dict.fromkeys(PHASES, 0.0)}

    def add(prog) -> None:
        rep = prog.search_report
        for k, v in {**rep.phases, "lower": rep.lower}.items():
            k = _GROUP.get(k, k)
            out["phases"][k] = out["phases"].get(k, 0.0) + v
        out["egraph_cached"] = out.get("egraph_cached", True) and rep.egraph_cached
        out["decision_cached"] = out.get("decision_cached", True) and rep.decision_cached

    if family == "whisper":
        from lightspeed.models import whisper
        from lightspeed.weights.ctranslate2 import load_whisper

        t0 = time.perf_counter()
        cfg, sd = load_whisper(whisper.find_model_dir(None))
        out["load"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        model = whisper.WhisperModel(cfg, sd, backend="cpu", search=SearchOptions(budget=budget, seed=0, repeats=1))
        out["compile"] = time.perf_counter() - t0
        for prog in (model.encoder, model.prefill, model.decode):
            add(prog)
        # WhisperModel converts its weights to contiguous float32 before compiling
        out["phases"]["persist"] = out["compile"] - model.compile_s
        out["ml_dtypes"] = "ml_dtypes" in sys.modules
        return out
    from lightspeed.models.generate import Generator, compile_model

    tm = load_text_model(family, random=family == "qwen3", progress=False)
    out["load"] = tm.load_s
    search = SearchOptions(budget=budget, seed=0)
    t_all = time.perf_counter()
    with session():
        for mode in ("prefill", "decode"):
            add(compile_model(tm.model, mode, "cpu", search))
    t0 = time.perf_counter()
    Generator(tm.model, tm.tensors, backend="cpu", search=search)  # finds both programs compiled
    out["phases"]["persist"] = time.perf_counter() - t0
    out["compile"] = time.perf_counter() - t_all
    out["ml_dtypes"] = "ml_dtypes" in sys.modules  # imported only for bf16/fp8 (~1.4 s)
    return out


def _run_child(family: str, budget: int, cache_dir: str) -> dict:
    env = {**os.environ, "LIGHTSPEED_CACHE_DIR": cache_dir}
    env.pop("LIGHTSPEED_CACHE", None)
    r = subprocess.run([sys.executable, __file__, "--child", family, "--budget", str(budget)], env=env,
                       capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise SystemExit(f"{family}: the compile failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def _help_seconds(rounds: int) -> float:
    exe = Path(sys.executable).with_name("lightspeed")
    cmd = [str(exe), "--help"] if exe.exists() else [sys.executable, "-m", "lightspeed", "--help"]
    best = float("inf")
    for _ in range(max(3, rounds)):
        t0 = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=True)
        best = min(best, time.perf_counter() - t0)
    return best


def families_table(args: argparse.Namespace) -> None:
    names = {"gemma": "gemma3"}
    print(f"{'family':8s} {'run':6s} " + " ".join(f"{c:>8s}" for c in PHASES)
          + f" {'compile':>8s} {'import':>7s} {'load':>6s}  cache")
    for fam in args.families:
        best: dict[str, dict] = {}
        for _ in range(args.rounds):
            with tempfile.TemporaryDirectory(prefix="lightspeed-cold-") as d:
                runs = {"cold": _run_child(names.get(fam, fam), args.budget, d)}
                runs["cached"] = _run_child(names.get(fam, fam), args.budget, d)
            for kind, r in runs.items():
                if kind not in best or r["compile"] < best[kind]["compile"]:
                    best[kind] = r
        for kind in ("cold", "cached"):
            r = best[kind]
            cache = ("e-graphs+decisions cached" if r["decision_cached"] else
                     "e-graphs cached" if r["egraph_cached"] else "nothing cached")
            print(f"{fam:8s} {kind:6s} " + " ".join(f"{r['phases'].get(c, 0.0):8.2f}" for c in PHASES)
                  + f" {r['compile']:8.2f} {r['import']:7.2f} {r['load']:6.2f}  {cache}", flush=True)
    print(f"\nlightspeed --help: {_help_seconds(args.rounds):.3f} s (best of {max(3, args.rounds)})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", nargs="*", default=["llama", "gemma", "whisper", "qwen3"])
    ap.add_argument("--layers", type=int, nargs="*", default=None,
                    help="instead of the families: stacked SmolLM2-shaped layers (e.g. 1 2 4 8 30)")
    ap.add_argument("--budget", type=int, default=None, help="search budget (families: 3, the CLI's; layers: 2)")
    ap.add_argument("--rounds", type=int, default=2, help="measurements per family; the lower is kept")
    ap.add_argument("--no-roll", action="store_true", help="compile the whole graph as one (no loop rolling)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, args.budget or 3)))
        return 0
    if args.layers is not None:
        args.budget = args.budget or 2
        layers_table(args)
        return 0
    args.budget = args.budget or 3
    families_table(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
