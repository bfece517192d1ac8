"""Independent kernels of one block shape merged into one launch (``kernels/merge.py``) and the
op order that makes them adjacent (``program.grouped_order``): the order is a topological one
that keeps the program's order otherwise; a decode layer's k, v and q products become one launch
whose parts read nothing another part writes; the merged kernels compile with NVRTC for sm_90;
``LIGHTSPEED_CUDA_MERGE=0`` (``program.MERGE``) keeps every launch.  On a GPU, a decode step's
logits with merged launches are bit for bit those without."""

from __future__ import annotations

import random

import numpy as np
import pytest

import lightspeed as ls
from lightspeed.backends import get_backend
from lightspeed.backends.codegen import program as program_module
from lightspeed.backends.codegen.kernels import module_source, render
from lightspeed.backends.codegen.kernels.merge import PART_BLOCKS, merge_kernels, merge_key
from lightspeed.backends.codegen.program import KernelProgram, grouped_order
from lightspeed.backends.cuda.backend import CudaBackend
from lightspeed.egraph.llir import decode_program
from lightspeed.errors import LightspeedError
from lightspeed.models import from_hf_config
from lightspeed.search import candidates
from tests.backends.harness import memory_hazards, nvrtc_or_skip, saturate
from tests.backends.test_conformance import TINY

CUDA = get_backend("cuda")
RENDER = CudaBackend(cublaslt="off")
# a 1B-like layer (rows of 4 KiB: the products run a block per output, kind matmul_split)
WIDE = {**TINY, "hidden_size": 2048, "intermediate_size": 4096, "num_attention_heads": 16,
        "num_key_value_heads": 4, "head_dim": 128, "num_hidden_layers": 2}


def _is_topological(order, deps):
    placed = set()
    for i in order:
        if deps[i] - placed:
            return False
        placed.add(i)
    return True


def test_grouped_order_is_topological_and_groups_independent_ops_of_a_key():
    # 0 -> (1, 2, 3 read 0); 4 reads 1; keys: 1, 2, 3 "a", 4 "a" but it reads 1
    deps = {0: set(), 1: {0}, 4: {1}, 2: {0}, 3: {0}, 5: {2, 3, 4}}
    order = [0, 1, 4, 2, 3, 5]
    key = {0: None, 1: "a", 2: "a", 3: "a", 4: "a", 5: None}
    runs = grouped_order(order, deps, key)
    assert runs == [[0], [1, 2, 3], [4], [5]]  # 2 and 3 join 1's run; 4 reads 1, so it starts the next
    assert _is_topological([i for r in runs for i in r], deps)
    # no keys: the order itself, an op a run
    assert grouped_order(order, deps, {i: None for i in order}) == [[i] for i in order]
    # random DAGs with random keys: always a permutation in topological order
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 30)
        deps = {i: {j for j in range(i) if rng.random() < 0.15} for i in range(n)}
        key = {i: rng.choice([None, "a", "b"]) for i in range(n)}
        runs = grouped_order(list(range(n)), deps, key)
        out = [i for r in runs for i in r]
        assert sorted(out) == list(range(n)) and _is_topological(out, deps)
        for r in runs:  # a run: one key, none of its ops reading another
            assert len(r) == 1 or (len({key[i] for i in r}) == 1 and key[r[0]] is not None
                                   and not any(deps[i] & set(r) for i in r))
    with pytest.raises(LightspeedError, match="cycle"):
        grouped_order([0, 1], {0: {1}, 1: {0}}, {0: None, 1: None})


def _program(cfg: dict, merge: bool, monkeypatch, origin: str = "few-rows") -> KernelProgram:
    from tests.backends.test_cuda_codegen import _Recorder

    monkeypatch.setattr(program_module, "MERGE", merge)
    g = from_hf_config(cfg, dtype="bfloat16").decode_graph()
    _, enc, index, ser = saturate(RENDER, g)
    decls = RENDER.declarations()
    many = frozenset(n for n, d in decls.items() if d.many_rows)
    for name, cand in candidates(index, ls.SearchOptions(budget=3, seed=0), many):
        if name == origin:
            return KernelProgram(g, decode_program(cand, ser, enc.constants, decls), _Recorder(), table=RENDER.op_table)
    raise AssertionError(f"no {origin} candidate")


def test_a_decode_layers_products_merge_into_one_launch_and_compile(monkeypatch):
    nvrtc = nvrtc_or_skip()
    merged = _program(WIDE, True, monkeypatch)
    plain = _program(WIDE, False, monkeypatch)
    ops = merged.lprog.ops
    names = lambda launch: sorted(ops[j].op for j in launch.merged)  # noqa: E731
    groups = [names(x) for x in merged.launches if x.merged]
    # each layer's q, k (NormMatmul) and v (NormMatmulScatter: into the cache) as one launch
    assert groups.count(["NormMatmul", "NormMatmul", "NormMatmulScatter"]) == WIDE["num_hidden_layers"]
    assert len(merged.launches) < len(plain.launches)
    assert sum(len(x.merged) or 1 for x in merged.launches) == len(plain.launches)
    # the order: every op's operands computed by an earlier launch, a merged launch's parts
    # reading nothing another part writes
    done = {i for i, op in enumerate(ops) if op.op in ("Input", "Constant")}
    for x in merged.launches:
        parts = set(x.merged or (x.op,))
        for j in parts:
            assert set(ops[j].inputs) <= done, (ops[j].op, ops[j].inputs)
        done |= parts
    # arguments: the parts' dims, then their buffers, as the merged kernel's parameters
    for x in merged.launches:
        if x.merged:
            assert x.spec.launch.kind == "merged" and len(x.args) == len(x.spec.dims) + len(x.spec.buffers)
            assert x.spec.source.count("__global__") == 1 and "_ls_bx" in x.spec.source
    specs = {x.spec.name: x.spec for x in merged.launches if x.spec.library is None}
    ptx = nvrtc.compile_ptx(module_source(list(specs.values()), "cuda"))  # every kernel, one module
    assert len(ptx) > 1000


def test_merge_key_refuses_what_cannot_share_a_launch(monkeypatch):
    prog = _program(WIDE, False, monkeypatch)
    specs = [x.spec for x in prog.launches]
    kinds = {s.launch.kind: merge_key(s) for s in specs}
    split_key = kinds["matmul_split"]  # a block of 2 or 4 warps by the row's length (writer.split_products)
    assert split_key[1] and split_key[0][0] == 32 and split_key[0][1] in (2, 4) and split_key[0][2] == 1
    assert kinds["attention_cluster"] is None  # a cluster
    split = [s for s in specs if s.launch.kind == "matmul_split"]
    other = next(s for s in specs if merge_key(s) is not None and merge_key(s) != merge_key(split[0]))
    with pytest.raises(ValueError):
        merge_kernels([split[0], other])  # different blocks
    with pytest.raises(ValueError):
        merge_kernels([split[0]])
    both = merge_kernels(split[:2])
    # each part's extent capped; the grid their sum
    assert str(PART_BLOCKS) in str(both.launch.grid[0])
    assert both.dims == split[0].dims + split[1].dims
    # a c-dialect kernel never merges (the host runs kernels one by one anyway)
    ops = prog.lprog.ops
    fused = next(op for op in ops if op.op == "Fused")
    c_specs = render(fused, [ops[j].dtype for j in fused.inputs], "c")
    assert c_specs and all(merge_key(s) is None for s in c_specs)


@pytest.mark.skipif(not CUDA.available(), reason="no CUDA GPU here")
def test_merged_launches_give_the_same_logits_bit_for_bit(monkeypatch):
    model = from_hf_config(WIDE, dtype="bfloat16")
    g = model.build_graph("prefill", all_logits=True)
    rng = np.random.default_rng(0)
    weights = model.check_weights({n: (rng.standard_normal(s) * 0.05 + (1.0 if "norm" in n else 0.0)).astype(np.float32)
                                   for n, s in model.param_shapes().items()})
    inputs = {**weights, "input_ids": rng.integers(3, TINY["vocab_size"], 3).astype(np.int64)}
    if "positions" in g.inputs:
        inputs["positions"] = np.arange(3, dtype=np.int64)
    want = np.asarray(g.compile(backend="reference")(inputs)["logits"], np.float32)
    out, merged = {}, {}
    for merge in (True, False):
        monkeypatch.setattr(program_module, "MERGE", merge)
        # few rows: the decode's kernels (the products a block per output)
        prog = g.compile(backend="cuda", search=ls.SearchOptions(budget=3, seed=0, dims={"s": 4}, roll=False))
        out[merge] = np.asarray(prog(inputs)["logits"], np.float32)
        merged[merge] = sum(1 for x in getattr(prog, "launches", ()) if x.merged)
        # bfloat16 through a layer of hidden 2048: the kernels round where the reference's
        # primitives do not (H100, twentieth session: max |d| / max |want| 2.55% with the
        # generated products, 2.09% with cuBLASLt's), so 3% of the largest logit
        np.testing.assert_allclose(out[merge], want, rtol=2e-2, atol=3e-2 * np.abs(want).max())
    assert merged[False] == 0
    assert np.array_equal(out[True], out[False])


def _gemma4_moe_decode() -> ls.Graph:
    from tests.models import test_moe

    _, cfg, _ = test_moe.hf_model("gemma4_moe")
    return test_moe.CLASSES["gemma4_moe"].from_hf_config(cfg).build_graph("decode", next_token=True)


@pytest.mark.parametrize("name", ["paged", "gemma4-moe-decode"])
def test_merged_parts_never_overwrite_what_another_part_reads(name, monkeypatch):
    """Regression (twenty-first session, H100): the arena was planned op by op, so a value whose
    last reader was one part of a merged launch was freed before the next part's output was
    placed, which could land on it while the first part still read it (the parts run at once):
    the paged step's tokens and Gemma 4 MoE's decode differed from the reference on the GPU.
    Every candidate's launches, simulated over the plan, read what they expect; planned with
    the frees op by op again, the same programs do not."""
    from tests.backends.test_cuda_codegen import _Recorder

    monkeypatch.setattr(program_module, "MERGE", True)
    if name == "paged":
        g, bounds = from_hf_config(TINY).paged_graph(next_token=True), {"s": 12, "NP": 4, "N": 8, "r": 12}
    else:
        g, bounds = _gemma4_moe_decode(), {}
    _, enc, index, ser = saturate(RENDER, g)
    decls = RENDER.declarations()
    many = frozenset(n for n, d in decls.items() if d.many_rows)
    racy = 0
    for _, cand in candidates(index, ls.SearchOptions(budget=3, seed=0), many):
        prog = KernelProgram(g, decode_program(cand, ser, enc.constants, decls), _Recorder(), table=RENDER.op_table)
        at = {s: bounds.get(s, 64) for s in prog.dim_names}
        assert sum(1 for x in prog.launches if x.merged) > 0
        assert memory_hazards(prog, at) == []
        prog._run_end = {}  # the frees after each op, as before the fix
        racy += bool([h for h in memory_hazards(prog, at) if h[0] == "merged"])
    assert racy > 0


def test_values_of_the_weights_alone_never_merge_with_a_steps_kernels(monkeypatch):
    """A value of the weights alone (here w * 2 + 1; a Cast of GGUF blocks, Gemma's scaled
    embedding table) is computed once by a persisted program (``KernelProgram._hoist``), which
    takes whole launches: merged with a kernel of the step's inputs it ran every step (a Gemma 3
    step dequantised and scaled its 262k-row table, ~0.8 ms of a 1.5 ms step on an H100)."""
    from tests.backends.test_cuda_codegen import _Recorder

    monkeypatch.setattr(program_module, "MERGE", True)
    g = ls.Graph()
    x, w = g.input("x", ("s", 64)), g.input("w", (64, 64))
    g.output("y", (x * 3.0).exp() @ (w * 2.0 + 1.0))
    _, enc, index, ser = saturate(RENDER, g)
    decls = RENDER.declarations()
    programs = [KernelProgram(g, decode_program(cand, ser, enc.constants, decls), _Recorder(), table=RENDER.op_table)
                for _, cand in candidates(index, ls.SearchOptions(budget=4, seed=0))]
    for prog in programs:
        ops = prog.lprog.ops
        weights_only = prog._weights_only(list(range(len(ops))))
        assert any(ops[i].op not in ("Input", "Constant") for i in weights_only)  # w's value is one
        assert not any(ops[i].args.get("name") == "x" for i in weights_only)
        for launch in prog.launches:
            parts = set(launch.merged or (launch.op,))
            assert parts <= weights_only or not parts & weights_only, [ops[p].op for p in parts]
    assert programs
