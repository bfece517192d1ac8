"""GGUF blocks read by cuda kernels (``BlockMatmul``/``BlockMatmulAdd``/``BlockGather`` in the
cuda dialect, codegen/blocks.py): every block type's kernels rendered and compiled by NVRTC for
sm_90 (CI, no GPU needed); on a GPU, products equal the float64 product of the blocks' exact
values and gathered rows the values bit for bit, with no float32 copy of the blocks made."""

from __future__ import annotations

import random

import numpy as np
import pytest

import lightspeed as ls
from lightspeed.backends.cuda.backend import CudaBackend
from lightspeed.egraph import Candidate
from lightspeed.egraph.llir import decode_program
from lightspeed.weights.quant import Blocks, QuantTensor
from tests.backends.harness import nvrtc_or_skip, saturate
from tests.weights.quant_ref import dequant, make_blocks

CUDA = CudaBackend()
NORMS = CudaBackend(block_norms=True)  # the norm products over blocks (on by default)
TYPES = ["q4_1", "q4_0", "q8_0", "q5_0", "q4_k", "q6_k"]
PER_BLOCK = {"q4_k": 256, "q6_k": 256}


def _weights(qtype: str, n: int, k: int, seed: int) -> tuple[QuantTensor, np.ndarray]:
    raw = make_blocks(qtype.upper(), n * k // PER_BLOCK.get(qtype, 32), np.random.default_rng(seed))
    return QuantTensor(Blocks(qtype, raw.reshape(n, -1))), dequant(qtype.upper(), raw).reshape(n, k).astype(np.float32)


def _graph(qtype: str, n: int, k: int, add: bool = False, gather: bool = False) -> ls.Graph:
    g = ls.Graph()
    w = g.input("w", (n, k), qtype).to(ls.float32)
    if gather:
        g.output("y", ls.hl.embedding(g.input("ids", ("s",), ls.int64), w))
        return g
    y = g.input("x", ("s", k)) @ w.transpose(0, 1)
    if add:
        y = y + g.input("r", ("s", n))
    g.output("y", y)
    return g


def _with_block_op(g: ls.Graph, kind: str, backend: CudaBackend = CUDA):
    """An LLIR program of ``g`` that computes it with ``kind`` (random candidates until one does)."""
    _, enc, index, ser = saturate(backend, g)
    for seed in range(200):
        lp = decode_program(Candidate.random(index, random.Random(seed)), ser, enc.constants, backend.declarations())
        if any(o.op == kind for o in lp.ops):
            return lp
    raise AssertionError(f"the blocks rules offered no candidate with {kind}")


@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("kind", ["BlockMatmul", "BlockMatmulAdd", "BlockGather"])
def test_block_kernels_render_and_compile_for_sm90(qtype, kind):
    nvrtc = nvrtc_or_skip()
    from lightspeed.backends.codegen.kernels import module_source

    k = 512 if qtype in PER_BLOCK else 96
    lp = _with_block_op(_graph(qtype, 48, k, add=kind == "BlockMatmulAdd", gather=kind == "BlockGather"), kind)
    op = next(o for o in lp.ops if o.op == kind)
    lowered = CUDA.op_table.lower(op, [lp.ops[i].dtype for i in op.inputs], "cuda")
    assert lowered.forms == {1: "packed"}  # the kernel reads the blocks, not float32 values
    spec = lowered.specs[0]
    assert "ggml_blocks" in spec.preludes
    if kind != "BlockGather":  # the block rows stream into L2 before the wait on the previous kernel
        assert "prefetch.global.L2" in spec.source
        assert spec.source.index("prefetch.global.L2") < spec.source.index("LS_KERNEL_BEGIN();")
    assert nvrtc.compile_cubin(module_source([spec], "cuda"), "sm_90")


@pytest.mark.skipif(not CUDA.available(), reason="no GPU")
@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("add", [False, True])
def test_block_products_match_float64(qtype, add):
    n, k = 48, (512 if qtype in PER_BLOCK else 96)
    q, w = _weights(qtype, n, k, seed=3)
    g = _graph(qtype, n, k, add=add)
    prog = CUDA.lower(g, _with_block_op(g, "BlockMatmulAdd" if add else "BlockMatmul")).persist(w=q)
    rng = np.random.default_rng(7)
    for rows in (1, 5, 33):
        ins = {"x": rng.standard_normal((rows, k)).astype(np.float32)}
        want = ins["x"].astype(np.float64) @ w.T.astype(np.float64)
        if add:
            ins["r"] = rng.standard_normal((rows, n)).astype(np.float32)
            want = want + ins["r"]
        got = np.asarray(prog(ins)["y"])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max(), err_msg=f"rows={rows}")
    assert not q.is_dense  # no float32 copy of the blocks was made


@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("rows", [2, 4, 8])
@pytest.mark.parametrize("kind", ["BlockMatmul", "BlockMatmulAdd"])
def test_several_outputs_a_warp_render_and_compile_for_sm90(monkeypatch, qtype, rows, kind):
    """``LIGHTSPEED_CUDA_BLOCK_ROWS``: a warp's R outputs are R adjacent weight rows dotted with one
    load of x (n = 48 divides by 2, 4 and 8); n = 50 (only 2 divides it) keeps one output a warp
    for R = 4 and 8; with ``LIGHTSPEED_CUDA_BLOCK_ROWS_MIN_N`` = 49 only the 50-output product
    takes R."""
    nvrtc = nvrtc_or_skip()
    from lightspeed.backends.codegen.kernels import block_matmul, module_source

    monkeypatch.setattr(block_matmul, "BLOCK_ROWS", rows)
    k = 512 if qtype in PER_BLOCK else 96
    for n in (48, 50):
        lp = _with_block_op(_graph(qtype, n, k, add=kind == "BlockMatmulAdd"), kind)
        op = next(o for o in lp.ops if o.op == kind)
        spec = CUDA.op_table.lower(op, [lp.ops[i].dtype for i in op.inputs], "cuda").specs[0]
        r = rows if n % rows == 0 else 1
        assert (f"acc{r - 1} " in spec.source) == (r > 1) and (f"matmul_cuda_r{r}_" in spec.name) == (r > 1)
        assert "prefetch.global.L2" in spec.source
        assert nvrtc.compile_cubin(module_source([spec], "cuda"), "sm_90")
    monkeypatch.setattr(block_matmul, "BLOCK_ROWS_MIN_N", 49)  # only products of 49 outputs or more
    spec = CUDA.op_table.lower(op, [lp.ops[i].dtype for i in op.inputs], "cuda").specs[0]  # (n = 50)
    assert ("acc1 " in spec.source) == (rows == 2)
    lp = _with_block_op(_graph(qtype, 48, k, add=kind == "BlockMatmulAdd"), kind)
    op = next(o for o in lp.ops if o.op == kind)
    assert "acc1 " not in CUDA.op_table.lower(op, [lp.ops[i].dtype for i in op.inputs], "cuda").specs[0].source


@pytest.mark.skipif(not CUDA.available(), reason="no GPU")
@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("add", [False, True])
def test_several_outputs_a_warp_equal_one_output_a_warp(monkeypatch, qtype, add):
    """R outputs a warp give the one-output kernel's results bit for bit (same lanes, same order,
    same reduction per output), at 1, 5 and 33 rows of x."""
    from lightspeed.backends.codegen.kernels import block_matmul

    n, k = 64, (512 if qtype in PER_BLOCK else 96)
    q, _ = _weights(qtype, n, k, seed=4)
    g = _graph(qtype, n, k, add=add)
    lp = _with_block_op(g, "BlockMatmulAdd" if add else "BlockMatmul")
    # one output a warp: the split products (LIGHTSPEED_CUDA_BLOCK_SPLIT, never with R > 1) sum in
    # another order (an H100 run with the switch exported compared a split R = 1 with R = 4)
    monkeypatch.setattr(block_matmul, "BLOCK_SPLIT", 0)
    progs = {}
    for r in (1, 4):
        monkeypatch.setattr(block_matmul, "BLOCK_ROWS", r)
        progs[r] = CUDA.lower(g, lp).persist(w=q)
    rng = np.random.default_rng(9)
    for rows in (1, 5, 33):
        ins = {"x": rng.standard_normal((rows, k)).astype(np.float32)}
        if add:
            ins["r"] = rng.standard_normal((rows, n)).astype(np.float32)
        np.testing.assert_array_equal(np.asarray(progs[4](ins)["y"]), np.asarray(progs[1](ins)["y"]),
                                      err_msg=f"rows={rows}")


@pytest.mark.skipif(not CUDA.available(), reason="no GPU")
@pytest.mark.parametrize("qtype", TYPES)
def test_block_gather_reads_rows_exactly(qtype):
    rows, cols = 12, 512
    q, w = _weights(qtype, rows, cols, seed=6)
    g = _graph(qtype, rows, cols, gather=True)
    prog = CUDA.lower(g, _with_block_op(g, "BlockGather")).persist(w=q)
    pick = np.array([3, 0, 11, 3, 7], np.int64)
    np.testing.assert_array_equal(np.asarray(prog(ids=pick)["y"]), w[pick])


def test_the_backend_keeps_block_weights_for_the_program_to_place():
    """Regression (the real SmolLM2 file with ``LIGHTSPEED_CUDA_BLOCKS=1``: "every candidate
    failed ... expected q8_0 blocks, got DeviceArray"): the search moves its timing inputs with
    ``backend.to_device``, which uploaded a ``QuantTensor`` as plain bytes; blocks stay as they
    are (the program places them in the form its kernels read).  No GPU needed: nothing is moved."""
    q, _ = _weights("q8_0", 8, 64, seed=1)
    assert CUDA.to_device(q) is q


@pytest.mark.skipif(not CUDA.available(), reason="no GPU")
@pytest.mark.parametrize("static_resident", [False, True])
def test_the_search_measures_the_block_op_beside_the_cast_path(static_resident):
    """Both ways of a product against block weights are timed on the GPU (the block kernel and
    the Cast + float kernel), with the weights passed per call or resident as a model's search
    has them, and the program kept gives the float64 product of the blocks' values."""
    n, k = 256, 512
    q, w = _weights("q4_1", n, k, seed=5)
    g = _graph("q4_1", n, k)
    opts = ls.SearchOptions(budget=8, seed=0, progress=False, dims={"s": 1}, static_resident=static_resident)
    prog = g.compile(CUDA, search=opts)
    ran = [c for c in prog.search_report.candidates if c.seconds is not None]
    assert any("BlockMatmul" in c.ops for c in ran) and any("Cast" in c.ops for c in ran)
    xs = np.random.default_rng(2).standard_normal((3, k)).astype(np.float32)
    want = xs.astype(np.float64) @ w.T.astype(np.float64)
    got = np.asarray(prog.persist(w=q)(x=xs)["y"])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


# ---- a decode step's norm products over blocks (codegen/block_norms.egg): NormMatmul,
# NormMatmulGLU and NormMatmulScatter whose weights are the block inputs

EPS = 1e-6


def _norm_graph(qtype: str, n: int, k: int, kind: str) -> ls.Graph:
    """RMSNorm(x) * nw as A (nn.RMSNorm's chain), then A @ W^T (``NormMatmul``), silu(A @ G^T) *
    (A @ U^T) (``NormMatmulGLU``; gelu_tanh: ``NormMatmulGeGLU``) or A @ W^T written into rows [p,
    p + s) of a cache (``NormMatmulScatter``), the weights GGUF blocks."""
    from lightspeed.nn.mlp import gelu_tanh_mul, silu_mul

    g = ls.Graph()
    x = g.input("x", ("s", k))
    a = x * ls.hl.rsqrt((x * x).sum(-1, keepdim=True) * (1.0 / k) + EPS) * g.input("nw", (k,))
    w = g.input("w", (n, k), qtype).to(ls.float32)
    if kind in GATED:
        u = g.input("u", (n, k), qtype).to(ls.float32)
        gated = silu_mul if kind == "NormMatmulGLU" else gelu_tanh_mul
        g.output("y", gated(a @ w.transpose(0, 1), a @ u.transpose(0, 1)))
    elif kind == "NormMatmulScatter":
        cache = g.input("cache", (64, n))
        g.output("cache", ls.hl.slice_scatter(cache, a @ w.transpose(0, 1), 0, "p"), aliases="cache")
    else:
        g.output("y", a @ w.transpose(0, 1))
    return g


def _norm_want(ins: dict, ws: dict, kind: str) -> np.ndarray:
    x = ins["x"].astype(np.float64)
    a = x / np.sqrt((x * x).mean(-1, keepdims=True) + EPS) * ins["nw"]
    y = a @ ws["w"].T.astype(np.float64)
    if kind in GATED:
        y = GATED[kind](y) * (a @ ws["u"].T.astype(np.float64))
    return y


# the gated pairs' activations in float64: SiLU, tanh-GELU (Gemma's)
GATED = {"NormMatmulGLU": lambda v: v / (1.0 + np.exp(-v)),
         "NormMatmulGeGLU": lambda v: 0.5 * v * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (v + 0.044715 * v ** 3)))}
NORM_KINDS = ["NormMatmul", "NormMatmulGLU", "NormMatmulGeGLU", "NormMatmulScatter"]


@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("kind", NORM_KINDS)
def test_norm_products_over_blocks_render_and_compile_for_sm90(qtype, kind):
    """Every block type's norm products read the packed blocks of each weight operand and compile
    with NVRTC (CI: no GPU needed)."""
    nvrtc = nvrtc_or_skip()
    from lightspeed.backends.codegen.kernels import module_source

    k = 512 if qtype in PER_BLOCK else 96
    lp = _with_block_op(_norm_graph(qtype, 48, k, kind), kind, NORMS)
    op = next(o for o in lp.ops if o.op == kind)
    dtypes = [lp.ops[i].dtype for i in op.inputs]
    lowered = NORMS.op_table.lower(op, dtypes, "cuda")
    assert set(lowered.forms) == {i for i, d in enumerate(dtypes) if d.block} != set()
    assert set(lowered.forms.values()) == {"packed"}
    spec = lowered.specs[0]
    assert "ggml_blocks" in spec.preludes
    assert spec.source.index("prefetch.global.L2") < spec.source.index("LS_KERNEL_BEGIN();")
    assert nvrtc.compile_cubin(module_source([spec], "cuda"), "sm_90")


def test_a_block_decode_step_takes_its_norms_into_its_products():
    """With the norm products over blocks (the default), the fused candidate of a tiny Llama
    decode step over Q4_1 weights launches as many kernels as over float weights: the input norms
    in the q/k/v and gate/up products, SiLU·mul in the gated pair (``block_norms=False`` keeps
    the RowNorm kernels: three launches a layer more)."""
    from lightspeed.backends.codegen.program import KernelProgram
    from lightspeed.models import from_hf_config
    from lightspeed.search import candidates
    from tests.backends.test_conformance import TINY
    from tests.backends.test_cuda_codegen import _Recorder

    config = {**TINY, "hidden_size": 64, "intermediate_size": 128}  # every product's k whole groups of 32

    def fused_ops(backend: CudaBackend, blocks: bool) -> tuple[set[str], int]:
        """The fused candidate's ops (a ``+`` after those reading a block input) and its launches."""
        model = from_hf_config(config)
        storage = {n: ls.q4_1 for n, shp in model.param_shapes().items()
                   if blocks and len(shp) == 2 and "embed" not in n}
        g = model.build_graph("decode", storage=storage)
        _, enc, index, ser = saturate(backend, g)
        fused = dict(candidates(index, ls.SearchOptions(budget=3, seed=0)))["fused"]
        lp = decode_program(fused, ser, enc.constants, backend.declarations())
        launches = KernelProgram(g, lp, _Recorder(), table=backend.op_table).launches
        ops = [lp.ops[i] for launch in launches for i in (launch.merged or (launch.op,))]
        return {o.op + "+" * any(lp.ops[j].dtype.block for j in o.inputs) for o in ops}, len(launches)

    ops, with_norms = fused_ops(NORMS, True)
    assert "RowNorm" not in ops and {"NormMatmul+", "NormMatmulGLU+"} <= ops, sorted(ops)
    _, floats = fused_ops(NORMS, False)
    assert with_norms <= floats + 1, (with_norms, floats)
    ops, without = fused_ops(CudaBackend(block_norms=False), True)
    assert "RowNorm" in ops and "NormMatmulGLU+" not in ops and "BlockMatmul+" in ops, sorted(ops)
    assert without >= with_norms + 2 * config["num_hidden_layers"], (without, with_norms)


@pytest.mark.parametrize("blocks", [True, False], ids=["q8_0-blocks", "float"])
def test_a_gemma_decode_layer_runs_its_gelu_gated_pair_as_one_product(blocks):
    """Gemma's MLP (tanh-GELU·mul) is one NormMatmulGeGLU in the few-rows (fused) candidate of a
    decode step, over Q8_0 blocks and over float weights alike: the pre-feed-forward norm and the gate go
    into the gated pair's product (before, a NormMatmul pair and an element-wise region: one launch
    a layer more), and no launch but it computes an Exp2 over the [s, intermediate] rows."""
    from lightspeed.backends.codegen.program import KernelProgram
    from lightspeed.models import from_hf_config
    from lightspeed.search import candidates
    from tests.backends.test_conformance import TINY
    from tests.backends.test_cuda_codegen import _Recorder

    ffn = 128
    config = {**TINY, "model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": ffn, "head_dim": 32,
              "num_attention_heads": 2, "query_pre_attn_scalar": 32, "sliding_window": 64,
              "sliding_window_pattern": 6, "hidden_activation": "gelu_pytorch_tanh"}
    model = from_hf_config(config)
    storage = {n: ls.q8_0 for n, shp in model.param_shapes().items()
               if blocks and len(shp) == 2 and n.endswith("proj.weight")}
    g = model.build_graph("decode", storage=storage)
    decls = NORMS.declarations()
    _, enc, index, ser = saturate(NORMS, g)
    many = frozenset(n for n, d in decls.items() if d.many_rows)
    cands = dict(candidates(index, ls.SearchOptions(budget=3, seed=0), many))
    # (float32 without cuBLASLt: no many-rows ops, so no few-rows candidate; with it, few-rows
    # comes before fused and a budget of 3 stops there)
    few = cands["few-rows"] if "few-rows" in cands else cands["fused"]
    lp = decode_program(few, ser, enc.constants, decls)
    launches = KernelProgram(g, lp, _Recorder(), table=NORMS.op_table).launches
    parts = [[lp.ops[i] for i in (x.merged or (x.op,))] for x in launches]
    gated = [o for ops in parts for o in ops if o.op == "NormMatmulGeGLU"]
    assert len(gated) == config["num_hidden_layers"], sorted({o.op for ops in parts for o in ops})
    assert all(any(lp.ops[i].dtype.block for i in o.inputs) == blocks for o in gated)
    wide = [ops for ops in parts if any(o.op != "NormMatmulGeGLU" and o.shape and str(o.shape[-1]) == str(ffn)
                                        for o in ops)]
    assert not wide, [[o.op for o in ops] for ops in wide]


@pytest.mark.skipif(not CUDA.available(), reason="no GPU")
@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("kind", NORM_KINDS)
def test_norm_products_over_blocks_match_float64(qtype, kind):
    _norm_products_match_float64(qtype, kind, 48, 512 if qtype in PER_BLOCK else 96, seed=3)


def _norm_products_match_float64(qtype: str, kind: str, n: int, k: int, seed: int, check=None) -> None:
    """``kind`` over random ``qtype`` blocks [n, k] (a second weight for the gated pair) against the
    float64 norm and product at 1, 5 and 17 rows (the scatter's rows written at row 3 of a cache,
    the others left zero); ``check(specs)``: asserts on the candidate's kernels of ``kind``."""
    q, w = _weights(qtype, n, k, seed=seed)
    ws, placed = {"w": w}, {"w": q}
    if kind in GATED:
        placed["u"], ws["u"] = _weights(qtype, n, k, seed=seed + 1)
    g = _norm_graph(qtype, n, k, kind)
    lp = _with_block_op(g, kind, NORMS)
    if check is not None:
        check([s for o in lp.ops if o.op == kind for s in NORMS.op_table.lower(
            o, [lp.ops[i].dtype for i in o.inputs], "cuda").specs])
    prog = NORMS.lower(g, lp).persist(**placed)
    rng = np.random.default_rng(seed + 4)
    for rows in (1, 5, 17):
        ins = {"x": rng.standard_normal((rows, k)).astype(np.float32),
               "nw": (1 + 0.1 * rng.standard_normal(k)).astype(np.float32)}
        want = _norm_want(ins, ws, kind)
        if kind == "NormMatmulScatter":
            cache = np.zeros((64, n), np.float32)
            out = np.asarray(prog({**ins, "cache": cache}, dims={"p": 3})["cache"])
            got, rest = out[3:3 + rows], np.delete(out, range(3, 3 + rows), axis=0)
            assert not rest.any()
        else:
            got = np.asarray(prog(ins)["y"])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max(), err_msg=f"rows={rows}")
    assert not q.is_dense


@pytest.mark.parametrize("value", ["3", "0", "rows"])
def test_a_bad_rows_count_is_refused_by_name(value):
    """``LIGHTSPEED_CUDA_BLOCK_ROWS`` is 1, 2, 4 or 8; anything else stops the import naming it."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, LIGHTSPEED_CUDA_BLOCK_ROWS=value)
    proc = subprocess.run([sys.executable, "-c", "import lightspeed.backends.codegen.kernels.block_matmul"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "LIGHTSPEED_CUDA_BLOCK_ROWS" in proc.stderr


@pytest.mark.parametrize("qtype", ["q4_k", "q6_k"])
def test_kquant_parts_decode_the_blocks_exactly(qtype):
    """``ls_kpart`` (the K-quant part decoder of ``LIGHTSPEED_CUDA_KQUANT_PARTS``, plain C in the
    blocks prelude) compiled for this CPU: every part of every group of rows whose super-blocks
    sit at every 2-byte alignment (a Q6_K super-block is 210 bytes) gives the reference's float32
    weights (``tests/weights/quant_ref.dequant``)."""
    import ctypes

    from lightspeed.backends import get_backend
    from lightspeed.backends.codegen.kernels.source import prelude, prelude_part
    from lightspeed.backends.native import executor

    if not get_backend("native").available():
        pytest.skip("no C compiler")
    code = {"q4_k": 4, "q6_k": 5}[qtype]
    probe = f"""
void ls_parts(const unsigned char* rows, long long row_bytes, long long n, long long nb, float* out) {{
  for (long long r = 0; r < n; r++)
    for (long long g = 0; g < nb; g++)
      for (int p = 0; p < 4; p++) {{
        unsigned int u0, u1; float s, o;
        ls_kpart(rows + r * row_bytes, {code}, g, p, &u0, &u1, &s, &o);
        for (int t = 0; t < 8; t++) {{
          const unsigned int u = ((t < 4 ? u0 : u1) >> (8 * (t & 3))) & 255u;
          out[(r * nb + g) * 32 + 8 * p + t] = {code} == 5 ? s * (float)((int)u - 32) : (float)u * s + o;
        }}
      }}
}}
"""
    lib, _ = executor._build(prelude("c") + prelude_part("ggml_blocks") + probe)
    n, k = 5, 768  # 3 super-blocks a row: Q6_K's at offsets 0, 210, 420 (+ 630 a row)
    raw = make_blocks(qtype.upper(), n * k // 256, np.random.default_rng(11))
    want = dequant(qtype.upper(), raw).reshape(n, k).astype(np.float32)
    buf = np.zeros(raw.size + 8, np.uint8)  # an 8-aligned start, and one 2 bytes past it
    for shift in (0, 2):
        buf[shift:shift + raw.size] = raw
        got = np.zeros((n, k), np.float32)
        lib.ls_parts(ctypes.c_void_p(buf.ctypes.data + shift), ctypes.c_longlong(raw.size // n),
                     ctypes.c_longlong(n), ctypes.c_longlong(k // 32), ctypes.c_void_p(got.ctypes.data))
        np.testing.assert_array_equal(got, want, err_msg=f"shift={shift}")


@pytest.mark.parametrize("qtype", ["q4_k", "q6_k"])
@pytest.mark.parametrize("kind", ["BlockMatmul", "BlockMatmulAdd", "NormMatmul"])
def test_kquant_parts_render_and_compile_for_sm90(monkeypatch, qtype, kind):
    """With ``LIGHTSPEED_CUDA_KQUANT_PARTS`` (and the parts loop unrolled,
    ``LIGHTSPEED_CUDA_BLOCK_UNROLL``) the K-quant products and norm products take parts through
    ``ls_kpart``; without, whole groups through ``ls_kgroup`` (the default kernels unchanged)."""
    nvrtc = nvrtc_or_skip()
    from lightspeed.backends.codegen.kernels import block_matmul, module_source

    k = 512
    for on in (False, True):
        monkeypatch.setattr(block_matmul, "PART_CODES", (0, 1, 2, 4, 5) if on else (0, 1, 2))
        monkeypatch.setattr(block_matmul, "BLOCK_UNROLL", 4 if on else 1)
        if kind == "NormMatmul":
            backend, g = NORMS, _norm_graph(qtype, 48, k, kind)
        else:
            backend, g = CUDA, _graph(qtype, 48, k, add=kind == "BlockMatmulAdd")
        lp = _with_block_op(g, kind, backend)
        op = next(o for o in lp.ops if o.op == kind)
        spec = backend.op_table.lower(op, [lp.ops[i].dtype for i in op.inputs], "cuda").specs[0]
        assert ("ls_kpart(" in spec.source) == on and ("ls_kgroup(" in spec.source) != on
        assert ("#pragma unroll 4" in spec.source) == on
        assert nvrtc.compile_cubin(module_source([spec], "cuda"), "sm_90")


@pytest.mark.skipif(not CUDA.available(), reason="no GPU")
@pytest.mark.parametrize("qtype", ["q4_k", "q6_k", "q8_0", "q4_1", "q4_0"])
@pytest.mark.parametrize("kind", ["BlockMatmul", "BlockMatmulAdd", "NormMatmul", "NormMatmulGLU", "NormMatmulGeGLU"])
def test_kquant_parts_and_unrolled_loops_match_float64(monkeypatch, qtype, kind):
    """The products with K-quant parts and the parts loop unrolled 4 times (its loads' alignment
    tested once before the loop) equal the float64 product of the blocks' exact values at 1, 5
    and 17 rows: k = 768 for the K-quants (Q6_K super-blocks at every alignment); k = 1056 for the
    others (33 groups: 4 passes and a partial one; Q8_0's and Q4_0's rows of 1122 and 594 bytes put
    every other row's integers off their load's alignment, so both loops run)."""
    from lightspeed.backends.codegen.kernels import block_matmul

    monkeypatch.setattr(block_matmul, "PART_CODES", (0, 1, 2, 4, 5))
    monkeypatch.setattr(block_matmul, "BLOCK_UNROLL", 4)
    n, k = 48, (768 if qtype in PER_BLOCK else 1056)
    if kind.startswith("Norm"):
        def kparts(specs):  # the K-quants decoded in parts
            assert any("ls_kpart(" in s.source for s in specs) == (qtype in PER_BLOCK)
        _norm_products_match_float64(qtype, kind, n, k, seed=5, check=kparts)
        return
    q, w = _weights(qtype, n, k, seed=5)
    rng = np.random.default_rng(8)
    add = kind == "BlockMatmulAdd"
    g = _graph(qtype, n, k, add=add)
    prog = CUDA.lower(g, _with_block_op(g, kind)).persist(w=q)
    for rows in (1, 5, 17):
        x = rng.standard_normal((rows, k)).astype(np.float32)
        ins = {"x": x}
        want = x.astype(np.float64) @ w.astype(np.float64).T
        if add:
            ins["r"] = rng.standard_normal((rows, n)).astype(np.float32)
            want = want + ins["r"]
        np.testing.assert_allclose(np.asarray(prog(ins)["y"]), want, rtol=1e-5, atol=1e-5 * np.abs(want).max(),
                                   err_msg=f"rows={rows}")
    assert not q.is_dense


@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("kind", ["BlockMatmul", "BlockMatmulAdd"])
def test_split_block_products_render_and_compile_for_sm90(monkeypatch, qtype, kind):
    """``LIGHTSPEED_CUDA_BLOCK_SPLIT``: a block of warps per output (kind ``matmul_split``), as
    many as the row has passes of 32 items up to the setting; none for rows of fewer than 64
    items or products of SPLIT_BELOW outputs or more; the default a warp per output."""
    nvrtc = nvrtc_or_skip()
    from lightspeed.backends.codegen.kernels import block_matmul, module_source

    monkeypatch.setattr(block_matmul, "PART_CODES", (0, 1, 2, 4, 5))
    n, k = 48, 1024  # 32 groups a row: 128 parts, 4 passes of 32
    lp = _with_block_op(_graph(qtype, n, k, add=kind == "BlockMatmulAdd"), kind)
    op = next(o for o in lp.ops if o.op == kind)

    def spec():
        return CUDA.op_table.lower(op, [lp.ops[i].dtype for i in op.inputs], "cuda").specs[0]

    monkeypatch.setattr(block_matmul, "BLOCK_SPLIT", 0)
    assert spec().launch.kind == "matmul_dot"  # BLOCK_SPLIT 0: a warp an output
    for setting, warps in ((2, 2), (4, 4), (8, 4)):  # 128 items a row: at most 4 passes of 32
        monkeypatch.setattr(block_matmul, "BLOCK_SPLIT", setting)
        s = spec()
        assert s.launch.kind == "matmul_split" and s.launch.block == (32, warps, 1), setting
        assert f"_s{warps}_" in s.name and "_ls_bsum" in s.source and "prefetch.global.L2" in s.source
        assert nvrtc.compile_cubin(module_source([s], "cuda"), "sm_90")
    monkeypatch.setattr(block_matmul, "SPLIT_BELOW", 48)  # 48 outputs: no longer few
    assert spec().launch.kind == "matmul_dot"
    # 96 items a row (k = 768): 3 passes, so 2 warps (a power of two: the sums' balanced tree; an
    # H100 run with 3 failed to render)
    monkeypatch.setattr(block_matmul, "SPLIT_BELOW", 8192)
    monkeypatch.setattr(block_matmul, "BLOCK_SPLIT", 4)
    lp = _with_block_op(_graph(qtype, n, 768, add=kind == "BlockMatmulAdd"), kind)
    op = next(o for o in lp.ops if o.op == kind)
    s = spec()
    assert s.launch.block == (32, 2, 1) and nvrtc.compile_cubin(module_source([s], "cuda"), "sm_90")


@pytest.mark.skipif(not CUDA.available(), reason="no GPU")
@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("add", [False, True])
@pytest.mark.parametrize("kparts", [False, True])
def test_split_block_products_match_float64(monkeypatch, qtype, add, kparts):
    """Split block products (k = 2048: 4 warps an output of 256 parts, 2 of 64 whole K-quant
    groups) equal the float64 product of the blocks' exact values at 1, 5 and 17 rows, and give every row the same
    sums whatever the row count (row 0 alone and among 17)."""
    from lightspeed.backends.codegen.kernels import block_matmul

    monkeypatch.setattr(block_matmul, "PART_CODES", (0, 1, 2, 4, 5) if kparts else (0, 1, 2))
    monkeypatch.setattr(block_matmul, "BLOCK_SPLIT", 4)
    n, k = 48, 2048
    q, w = _weights(qtype, n, k, seed=12)
    g = _graph(qtype, n, k, add=add)
    lp = _with_block_op(g, "BlockMatmulAdd" if add else "BlockMatmul")
    prog = CUDA.lower(g, lp).persist(w=q)
    rng = np.random.default_rng(13)
    x = rng.standard_normal((17, k)).astype(np.float32)
    r = rng.standard_normal((17, n)).astype(np.float32)
    outs = {}
    for rows in (1, 5, 17):
        ins = {"x": x[:rows], **({"r": r[:rows]} if add else {})}
        outs[rows] = np.asarray(prog(ins)["y"])
        want = x[:rows].astype(np.float64) @ w.astype(np.float64).T + (r[:rows] if add else 0)
        np.testing.assert_allclose(outs[rows], want, rtol=1e-5, atol=1e-5 * np.abs(want).max(), err_msg=f"rows={rows}")
    np.testing.assert_array_equal(outs[1][0], outs[17][0])
    assert not q.is_dense


@pytest.mark.parametrize("qtype", TYPES)
def test_unrolled_parts_loops_test_alignment_once_and_compile_for_sm90(monkeypatch, qtype):
    """``LIGHTSPEED_CUDA_BLOCK_UNROLL``: the parts loop's loads are tested for alignment once, before
    the loop (x's 16-byte loads; Q8_0's 8-byte and Q4_0 / Q4_1's 4-byte integer loads), the unrolled
    loop then loads unbranched, the other loop keeps the per-item branches; the default has one loop."""
    nvrtc = nvrtc_or_skip()
    from lightspeed.backends.codegen.kernels import block_matmul, module_source

    monkeypatch.setattr(block_matmul, "PART_CODES", (0, 1, 2, 4, 5))
    k = 512 if qtype in PER_BLOCK else 1056
    lp = _with_block_op(_graph(qtype, 48, k), "BlockMatmul")
    op = next(o for o in lp.ops if o.op == "BlockMatmul")
    code = block_matmul.BLOCK_CODE[block_matmul.KERNEL_QTYPE.get(qtype, qtype)]
    weights_test = block_matmul.weight_alignment(code, k // 32, "rb")  # None for the K-quants
    assert (weights_test is None) == (code > 2)
    for unroll in (1, 4):
        monkeypatch.setattr(block_matmul, "BLOCK_UNROLL", unroll)
        spec = CUDA.op_table.lower(op, [lp.ops[i].dtype for i in op.inputs], "cuda").specs[0]
        hoisted = "if ((((unsigned long long)xr) & 15) == 0" in spec.source
        assert hoisted == (unroll > 1) and ("#pragma unroll 4" in spec.source) == (unroll > 1)
        assert ("*(const uint2*)q" in spec.source) == (unroll > 1 and code == 2)
        if weights_test is not None:
            assert (weights_test in spec.source) == (unroll > 1)
        assert nvrtc.compile_cubin(module_source([spec], "cuda"), "sm_90")


@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("kind", NORM_KINDS)
def test_split_norm_products_over_blocks_render_and_compile_for_sm90(monkeypatch, qtype, kind):
    """``LIGHTSPEED_CUDA_BLOCK_SPLIT`` splits the norm products over blocks too (the decode's q, k,
    v and gated pair): a block of warps per output, each a slice of the row's parts (whole groups
    for the K-quants), the squares and sums added over the block; by default a warp an output."""
    nvrtc = nvrtc_or_skip()
    from lightspeed.backends.codegen.kernels import block_matmul, module_source

    monkeypatch.setattr(block_matmul, "PART_CODES", (0, 1, 2))  # the K-quants in whole groups
    k = 2048  # 64 groups: 256 parts (4 warps) or 64 whole K-quant groups (2 warps)
    lp = _with_block_op(_norm_graph(qtype, 48, k, kind), kind, NORMS)
    op = next(o for o in lp.ops if o.op == kind)
    for setting in (0, 4):
        monkeypatch.setattr(block_matmul, "BLOCK_SPLIT", setting)
        spec = NORMS.op_table.lower(op, [lp.ops[i].dtype for i in op.inputs], "cuda").specs[0]
        want = 0 if not setting else 2 if qtype in PER_BLOCK else 4
        assert spec.launch.kind == ("matmul_split" if want else "matmul_dot")
        assert not want or (spec.launch.block == (32, want, 1) and "_ls_bsum" in spec.source)
        assert nvrtc.compile_cubin(module_source([spec], "cuda"), "sm_90")


@pytest.mark.skipif(not CUDA.available(), reason="no GPU")
@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("kind", NORM_KINDS)
def test_split_norm_products_over_blocks_match_float64(monkeypatch, qtype, kind):
    """Split norm products over blocks (4 warps an output over parts, 2 over whole K-quant groups,
    k = 2048) equal the float64 norm and product at 1, 5 and 17 rows."""
    from lightspeed.backends.codegen.kernels import block_matmul

    monkeypatch.setattr(block_matmul, "BLOCK_SPLIT", 4)

    def split(specs):
        assert specs and all(s.launch.kind == "matmul_split" for s in specs)
    _norm_products_match_float64(qtype, kind, 48, 2048, seed=14, check=split)
