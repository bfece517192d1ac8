"""GPU debugging of two failures (session 21): the pipelined paged step's tokens against the
unpipelined run's, step by step, and Gemma 4 MoE's greedy decode on cuda against transformers.
Each variant runs in its own process (the env switches are read at import)."""
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.getcwd())


def paged(sync: bool) -> dict:
    from tests.models.test_batch import _prompts
    from tests.models.tiny import hf_model

    from lightspeed.models import from_hf_config
    from lightspeed.models.batch import PagedBatcher

    _, cfg, sd = hf_model("llama")
    model = from_hf_config(cfg)
    prompts = _prompts(6)[:4]
    log = {}

    def run(backend, **kw):
        b = PagedBatcher(model, sd, backend=backend, max_rows=12, chunk=5, max_context=128, pages=2, **kw)
        if sync:
            launch = b.program.launch

            def synced(*a, **k):
                p = launch(*a, **k)
                p.result()
                return p
            b.program.launch = synced
        seqs = [b.start(p, 16, stop_ids=()) for p in prompts[:3]]
        steps = []
        for k in range(80):
            if not [s for s in seqs if not s.done]:
                break
            if k == 12:
                seqs.append(b.start(prompts[3], 8, stop_ids=()))
            took = b._ahead is not None
            got = b.step([s for s in seqs if not s.done])
            steps.append((k, took, [got.get(s) for s in seqs]))
        return [s.new_ids for s in seqs], steps

    want, _ = run("reference")
    if os.environ.get("SHOW_LAUNCHES"):
        b = PagedBatcher(model, sd, backend="cuda", max_rows=12, chunk=5, max_context=128, pages=2)
        for _, prog in getattr(b.program, "buckets", [(None, b.program)]):
            launches = getattr(prog, "launches", None) or getattr(getattr(prog, "program", None), "launches", [])
            log.setdefault("launches", []).append(
                [(x.spec.launch.kind, x.spec.name.rsplit("_", 1)[0]) for x in launches])
    for name, kw in (("pipelined", {}), ("plain", {"pipeline": False})):
        got, steps = run("cuda", **kw)
        log[name] = {"equal": got == want, "got": got, "want": want,
                     "steps": [s for s in steps][:40]}
    return log


VARIANTS = {"base": {}, "no_k_eq_v": {"attention_k_eq_v": False}, "global_hd16": {"global_head_dim": 16},
            "global_kv2": {"num_global_key_value_heads": 2}, "no_softcap": {"final_logit_softcapping": None},
            "no_moe": {"enable_moe_block": False}, "all_global": {"layer_types": ["full_attention"] * 4}}


def moe() -> dict:
    from tests.models import test_moe as m
    out = {}
    for family, over in [("gemma4_moe", v) for v in VARIANTS.values()]:
        hf, cfg, sd = m.hf_model(family, **over)
        model = m.CLASSES[family].from_hf_config(cfg)
        family = family + str(over)
        res = m.Generator(model, sd, backend="cuda", search=m.SEARCH).generate(m.PROMPT, m.STEPS, stop_ids=(),
                                                                                keep_logits=True)
        want = m.hf_greedy(hf, m.PROMPT, m.STEPS)
        ref = m.hf_logits(hf, res.ids)[len(m.PROMPT) - 1:-1]
        d = np.abs(np.stack(res.logits) - ref).max(-1)
        out[family] = {"equal": res.new_ids == want, "diff": [float(x) for x in d]}
        # the same through the decode program without the Generator's next_token (logits on host)
    return out


if __name__ == "__main__":
    if len(sys.argv) > 1:
        part = sys.argv[1]
        res = paged(sync=False) if part == "paged" else paged(sync=True) if part == "paged_sync" else moe()
        print("RESULT " + json.dumps(res))
        sys.exit(0)
    variants = [("paged", {}), ("paged_sync", {}), ("paged", {"LIGHTSPEED_CUDA_GRAPHS": "0"}),
                ("paged", {"LIGHTSPEED_CUDA_MERGE": "0"}), ("moe", {})]
    variants = [("paged", {"SHOW_LAUNCHES": "1"}), ("paged", {"LIGHTSPEED_CUDA_MERGE": "0"}),
                ("paged", {"LIGHTSPEED_CUDA_MERGE": "0", "LIGHTSPEED_CUDA_GRAPHS": "0"})] + [
        ("paged", {"LIGHTSPEED_CUDA_PDL_SKIP": k}) for k in
        ("elementwise", "scatter", "warp", "row", "matmul", "attention", "merged", "region")] + [("moe", {})]
    for part, env in variants:
        p = subprocess.run([sys.executable, __file__, part], env={**os.environ, **env}, capture_output=True,
                           text=True, timeout=240)
        line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
        print(f"== {part} {env} rc={p.returncode}")
        if not line:
            print(p.stderr[-3000:])
            continue
        res = json.loads(line[0][7:])
        if part.startswith("paged"):
            for lst in res.pop("launches", []):
                print("launches", len(lst), sorted({tuple(x) for x in lst}))
            for name, r in res.items():
                print(name, "equal", r["equal"])
                if not r["equal"]:
                    print(" got ", r["got"])
                    print(" want", r["want"])
                    print(" first bad step", next((k for k, _, t in r["steps"] if any(
                        x is not None and x not in sum(r["want"], []) for x in t)), None))
        else:
            for fam, r in res.items():
                print(fam, "equal", r["equal"], "max diff per step", [round(x, 6) for x in r["diff"]])
