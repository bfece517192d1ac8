"""The native backend's block matmuls: weights stored as GGML blocks (a graph input of a block
dtype, ``ls.q4_1`` ..., cast to float32 where used) are read as their blocks by the ops
``blocks.egg`` offers (BlockMatmul, BlockMatmulAdd, BlockGather), dequantised in registers, with
the float32 weights' values exactly; the Cast + float kernel alternative of the same e-graph
gives the same results.  A decode row of activations is used as floats (exact), or quantised to 16- or
8-bit integers per block of 32 and dotted in integers (``LIGHTSPEED_NATIVE_ACTIVATIONS``).
References: ggml's formats transcribed independently (tests/weights/quant_ref.py), the
activations' quantisation written out in numpy, float64 products, the contract's error bound; the
float32 path of the same program; the portable C kernels built without AVX2."""

from __future__ import annotations

import numpy as np
import pytest

import lightspeed as ls
from lightspeed.backends import get_backend
from lightspeed.weights.quant import Blocks, QuantTensor, attach, blocks_of, random_quant
from tests.weights.quant_ref import dequant, make_blocks

NATIVE = get_backend("native")
pytestmark = pytest.mark.skipif(not NATIVE.available(), reason="no C compiler")
OPTS = ls.SearchOptions(budget=2, seed=0, progress=False)


TYPES = ["q4_1", "q4_0", "q8_0", "q5_0", "q4_k", "q6_k"]
LANE_TYPES = ("q4_0", "q4_1", "q8_0", "q5_0")  # the lane dots' types (q5_0: read as the q8_0 blocks of its values)
PER_BLOCK = {"q4_k": 256, "q6_k": 256}  # weights per block (others: 32)
KERNEL_TYPE = {"q5_0": "q8_0"}  # Q5_0 weights are read as the Q8_0 blocks of their values (Blocks.widened)


def _weights(qtype: str, n: int, k: int, seed: int) -> tuple[QuantTensor, np.ndarray]:
    """Random ``qtype`` blocks of an [n, k] matrix, and their float32 values (ggml's formats
    transcribed independently)."""
    raw = make_blocks(qtype.upper(), n * k // PER_BLOCK.get(qtype, 32), np.random.default_rng(seed))
    return QuantTensor(Blocks(qtype, raw.reshape(n, -1))), dequant(qtype.upper(), raw).reshape(n, k).astype(np.float32)


def _matmul_program(g: ls.Graph, side: int | None = None, block: bool = True, kinds: tuple[str, ...] = ()):
    """``g`` lowered on native from the first random candidate computing its product with a block
    op (``block``; the search may measure the Cast path faster on a tiny product, which would
    leave nothing to check) or, without, as a float ``Matmul``/``MatmulAdd`` of the Cast weights;
    with ``side``, one whose weights (input ``w``) are that operand (1: B, 0: A); ``kinds``: other ops."""
    import random

    from lightspeed.egraph import Candidate
    from lightspeed.egraph.llir import decode_program
    from tests.backends.harness import saturate

    _, enc, index, ser = saturate(NATIVE, g)
    kinds = kinds or (("BlockMatmul", "BlockMatmulAdd") if block else ("Matmul", "MatmulAdd"))
    for seed in range(200):
        lprog = decode_program(Candidate.random(index, random.Random(seed)), ser, enc.constants, NATIVE.declarations())
        ops = lprog.ops

        def weights(j: int, ops=ops) -> bool:  # input w, or (the float path) its Cast
            o = ops[j] if block or ops[j].op != "Cast" else ops[ops[j].inputs[0]]
            return o.op == "Input" and o.args["name"] == "w"
        for op in ops:
            if op.op in kinds and (weights(op.inputs[side]) if side is not None else
                                   any(weights(j) for j in op.inputs[:2])):
                return NATIVE.lower(g, lprog)
    raise AssertionError(f"no candidate computes the product with {kinds}")


def _block_input(g: ls.Graph, qtype: str, n: int, k: int):
    """Input ``w`` of block dtype ``qtype``, as float32 values."""
    return g.input("w", (n, k), qtype).to(ls.float32)


def _float_reads(prog) -> set[str]:
    """The inputs whose float values a kernel program's launches read (its own slots, not a
    block form's), over a bucketed program's buckets."""
    progs = [p for _, p in prog.buckets] if hasattr(prog, "buckets") else [prog]
    return {name for p in progs for slot, name in p.inputs_at.items() if slot not in p.unread}


def _block_launches(prog) -> list[str]:
    return [launch.spec.name for launch in prog.launches
            if launch.spec.name.startswith(tuple(f"ls_{q}" for q in ("q4_0", "q4_1", "q8_0", "q5_0", "q4_k", "q6_k")))]


@pytest.fixture
def exact(monkeypatch):
    monkeypatch.setenv("LIGHTSPEED_NATIVE_ACTIVATIONS", "float")


@pytest.mark.parametrize("add", [False, True], ids=["matmul", "matmul-add"])
# decode; prefill tiles of 8 rows: partial, full, both; items of 64 rows (PROMPT_CHUNK): two, three
@pytest.mark.parametrize("rows", [1, 5, 8, 19, 70, 130])
@pytest.mark.parametrize("qtype", TYPES)
def test_block_matmul_matches_float64(qtype, rows, add, exact):
    n, k = 48, (512 if qtype in PER_BLOCK else 96)
    q, w = _weights(qtype, n, k, seed=rows)
    g = ls.Graph()
    x, wt = g.input("x", ("s", k)), _block_input(g, qtype, n, k)
    y = x @ wt.transpose(0, 1)
    if add:
        y = y + g.input("r", ("s", n))
    g.output("y", y)
    prog = _matmul_program(g)
    bound = prog.persist(w=q)
    assert len(_block_launches(bound)) == 1 and not q.is_dense
    rng = np.random.default_rng(7)
    ins = {"x": rng.standard_normal((rows, k)).astype(np.float32)}
    want = ins["x"].astype(np.float64) @ w.T.astype(np.float64)
    if add:
        ins["r"] = rng.standard_normal((rows, n)).astype(np.float32)
        want = want + ins["r"]
    got = bound(ins)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    # passed per call, not resident; and the Cast + float kernel alternative of the same e-graph
    np.testing.assert_allclose(prog(w=q, **ins)["y"], got, rtol=1e-6, atol=1e-6 * np.abs(want).max())
    plain = _matmul_program(g, block=False)
    assert not _block_launches(plain)
    np.testing.assert_allclose(got, plain(w=q, **ins)["y"], rtol=1e-5, atol=1e-5 * np.abs(want).max())


def _quantised_rows(x: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """x's rows as the kernels quantise them, written out: per block of 32, d = amax / top (top =
    127 or 32767) and q = nearest(x * (top / amax)), all in float32.  Returns (d * q in float64,
    each element's block amax)."""
    top = np.float32(127 if bits == 8 else 32767)
    xb = x.astype(np.float32).reshape(x.shape[0], -1, 32)
    amax = np.abs(xb).max(-1, keepdims=True)
    d = (amax / top).astype(np.float32)
    inv = np.where(amax > 0, top / np.where(amax > 0, amax, 1), 0).astype(np.float32)
    q = np.rint((xb * inv).astype(np.float32))
    return (q.astype(np.float64) * d).reshape(x.shape), np.broadcast_to(amax, xb.shape).reshape(x.shape)


# groups of 32: 3 (no group of 8), 8 (one), 19 (groups and a rest), 34 (two lane groups of 16 and a rest)
@pytest.mark.parametrize("k", [96, 256, 608, 1088])
@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("activations", ["q16", "q8"])
def test_quantised_activations(activations, qtype, k, monkeypatch):
    """A decode row quantised to 8/16-bit integers: the kernel's result is the float64 product of
    the quantised row (written out in numpy) within float32 rounding, and within the contract's
    bound of the exact product: |error| <= sum over elements of |w| * amax / (2 top)."""
    monkeypatch.setenv("LIGHTSPEED_NATIVE_ACTIVATIONS", activations)
    if qtype in PER_BLOCK:
        k = {96: 256, 256: 512, 608: 768, 1088: 1280}[k]  # whole 256-weight blocks: 1, 2, 3, 5
    n = 41  # odd: weight rows in pairs (16-bit x) and a last one alone
    q, w = _weights(qtype, n, k, seed=k)
    g = ls.Graph()
    x, wt = g.input("x", ("s", k)), _block_input(g, qtype, n, k)
    g.output("y", x @ wt.transpose(0, 1) + g.input("r", ("s", n)))
    bound = _matmul_program(g).persist(w=q)
    kernel = KERNEL_TYPE.get(qtype, qtype)
    assert all(name.startswith(f"ls_{kernel}matmul_{activations}_") for name in _block_launches(bound))
    rng = np.random.default_rng(k)
    xs = rng.standard_normal((1, k)).astype(np.float32) * np.exp(rng.standard_normal((1, k))).astype(np.float32)
    r = rng.standard_normal((1, n)).astype(np.float32)
    got = bound(x=xs, r=r)["y"][0].astype(np.float64)
    xq, amax = _quantised_rows(xs, 8 if activations == "q8" else 16)
    w64 = w.astype(np.float64)
    want = w64 @ xq[0] + r[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    top = 127 if activations == "q8" else 32767
    limit = np.abs(w64) @ (amax[0] / (2 * top)) * (1 + 1e-4) + 1e-5 * np.abs(want).max()
    exact = w64 @ xs[0].astype(np.float64) + r[0]
    assert np.all(np.abs(got - exact) <= limit), np.abs(got - exact) / limit
    # up to 64 rows (a batch of decode rows, a short prompt) are each quantised and dotted as a
    # decode row: bit for bit each row's own result, whatever rows share the call (batch
    # invariance); the 8- and 4-row groups and the rest all checked (13 = 8 + 4 + 1)
    for rows in (2, 5, 13, 64):
        xs2 = np.concatenate([xs, rng.standard_normal((rows - 1, k)).astype(np.float32)])
        r2 = rng.standard_normal((rows, n)).astype(np.float32)
        got2 = bound(x=xs2, r=r2)["y"]
        assert np.array_equal(got2[0], bound(x=xs, r=r2[:1])["y"][0])
        for i in range(1, rows, 1 if rows == 13 else 7):
            assert np.array_equal(got2[i], bound(x=xs2[i:i + 1], r=r2[i:i + 1])["y"][0]), i
    # more rows (a long prompt): with the lane dots (q4_0, q4_1, q8_0 on AVX-512 VNNI) each row is
    # still quantised as a decode row, in chunks of 64 rows (each row bit for bit its own result,
    # across the chunks); otherwise they keep float activations: the exact product
    xs3 = rng.standard_normal((130, k)).astype(np.float32)
    r3 = rng.standard_normal((130, n)).astype(np.float32)
    got3 = bound(x=xs3, r=r3)["y"]
    if qtype in LANE_TYPES and lane_dots():
        for i in (0, 63, 64, 127, 128, 129):
            assert np.array_equal(got3[i], bound(x=xs3[i:i + 1], r=r3[i:i + 1])["y"][0]), i
    else:
        want3 = xs3.astype(np.float64) @ w64.T + r3
        np.testing.assert_allclose(got3, want3, rtol=1e-5, atol=1e-5 * np.abs(want3).max())


def lane_dots() -> bool:
    """Whether this machine's native kernels have the lane-per-block dots (``LS_TDOT``: the
    prelude compiled for this CPU defines it)."""
    from lightspeed.backends.codegen.kernels.source import prelude, prelude_part
    from lightspeed.backends.native import executor

    probe = "\nint ls_has_lanes(void) {\n#ifdef LS_TDOT\n  return 1;\n#else\n  return 0;\n#endif\n}\n"
    lib, _ = executor._build(prelude("c") + prelude_part("ggml_blocks") + probe)
    return bool(lib.ls_has_lanes())


@pytest.mark.parametrize("build", ["portable", "narrow"])
def test_portable_kernels_without_avx2(tmp_path, build):
    """The plain C decoders and integer dots (built without AVX2, as for a CPU without it) and
    the 128-bit AVX2 ones (``-DLS_NARROW``, what Zen 1 gets; elsewhere the 256-bit ones run): the
    same results as the float64 products, for each block type and activation kind."""
    if build == "narrow" and not _has_avx2():
        pytest.skip("needs an AVX2 CPU")
    guard, extra = (("#ifdef __AVX2__\n#error built with AVX2\n#endif\n", ["-mno-avx2"]) if build == "portable"
                    else ("#ifndef __AVX2__\n#error built without AVX2\n#endif\n", ["-DLS_NARROW"]))
    import ctypes
    import subprocess

    from lightspeed.backends.codegen.kernels import module_source
    from lightspeed.backends.codegen.kernels.block_matmul import render_block_matmul
    from lightspeed.backends.native.executor import compiler

    if compiler() is None or not __import__("platform").machine().startswith("x86"):
        pytest.skip("needs an x86-64 C compiler")
    k, n = 768, 24
    g = ls.Graph()
    x, wt = g.input("x", ("s", k)), g.input("w", (n, k))
    g.output("y", x @ wt.transpose(0, 1))
    prog = _matmul_program(g, block=False)
    op = next(o for o in prog.lprog.ops if o.op == "Matmul")
    in_dtypes = [prog.lprog.ops[j].dtype for j in op.inputs]
    rng = np.random.default_rng(5)
    for qtype in TYPES:
        q, w = _weights(qtype, n, k, seed=3)
        packed = q.blocks.packed
        for activations in ("float", "q16", "q8"):
            spec = render_block_matmul(op, in_dtypes, qtype, activations)
            src = tmp_path / f"{spec.name}.c"
            src.write_text(guard + module_source([spec], "c"))
            lib = tmp_path / f"{spec.name}.so"
            subprocess.run([*compiler(), "-O2", "-march=native", *extra, "-fPIC", "-shared",
                            "-std=gnu11", "-o", str(lib), str(src), "-lm"], check=True, capture_output=True)
            fn = getattr(ctypes.CDLL(str(lib)), spec.name)
            for rows in (1, 3, 6):  # a decode row; rows quantised each (up to 64), 4 at a time and alone
                xs = rng.standard_normal((rows, k)).astype(np.float32)
                out = np.zeros((rows, n), np.float32)
                arrays = {"out": out, 0: xs, 1: packed}
                table = np.array([rows] * len(spec.dims) + [arrays[b].ctypes.data for b in spec.buffers], np.int64)
                fn(ctypes.c_void_p(table.ctypes.data), *range(len(table)))
                xq = xs.astype(np.float64)
                if activations != "float":
                    xq = _quantised_rows(xs, 8 if activations == "q8" else 16)[0]
                want = xq @ w.astype(np.float64).T
                np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * np.abs(want).max(),
                                           err_msg=f"{qtype} {activations} rows={rows}")


def _has_avx2() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return " avx2" in f.read()
    except OSError:
        return False


def test_packed_layout_holds_the_same_bytes():
    """Blocks keep the packed layout (per row the scales, q4_1's mins, then the integers) and give
    GGUF's layout back unchanged."""
    for qtype, heads in (("q4_1", 4), ("q4_0", 2), ("q8_0", 2)):
        raw = make_blocks(qtype.upper(), 6 * 3, np.random.default_rng(2)).reshape(6, -1)
        b = Blocks(qtype, raw)
        blocks = raw.reshape(6, 3, -1)
        p = b.packed
        assert p.shape == raw.shape and p.flags.c_contiguous
        np.testing.assert_array_equal(p[:, :6], blocks[:, :, 0:2].reshape(6, -1))
        if heads == 4:
            np.testing.assert_array_equal(p[:, 6:12], blocks[:, :, 2:4].reshape(6, -1))
        np.testing.assert_array_equal(p[:, heads * 3:], blocks[:, :, heads:].reshape(6, -1))
        np.testing.assert_array_equal(b.data, raw)


def test_lazy_weights_make_no_float32_copy(tmp_path, exact):
    """QuantTensor: the float32 values appear only when asked (and equal the blocks' dequantisation);
    a native program whose block matmuls read all of a weight's uses never asks."""
    raw = make_blocks("Q4_1", 32 * 64 // 32, np.random.default_rng(4)).reshape(32, -1)
    q = QuantTensor(Blocks("q4_1", raw))
    assert q.shape == (32, 64) and q.dtype == np.float32 and q.qtype == "q4_1" and not q.is_dense
    g = ls.Graph()
    x, wt = g.input("x", ("s", 64)), _block_input(g, "q4_1", 32, 64)
    g.output("y", x @ wt.transpose(0, 1))
    prog = _matmul_program(g)
    bound = prog.persist(w=q)
    assert _block_launches(bound) and not q.is_dense
    xs = np.random.default_rng(1).standard_normal((3, 64)).astype(np.float32)
    want = xs.astype(np.float64) @ dequant("Q4_1", raw.reshape(-1)).reshape(32, 64).T.astype(np.float64)
    np.testing.assert_allclose(bound(x=xs)["y"], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    assert not q.is_dense
    # another use of the weight (here its sum) needs the values: they are made, once, when the
    # program that reads them is persisted (it computes what the weights alone decide then)
    g2 = ls.Graph()
    x2, w2 = g2.input("x", ("s", 64)), _block_input(g2, "q4_1", 32, 64)
    g2.output("y", x2 @ w2.transpose(0, 1))
    g2.output("t", w2.sum())
    prog2 = _matmul_program(g2)
    assert not q.is_dense
    bound2 = prog2.persist(w=q)
    assert q.is_dense
    bound2(x=xs)
    np.testing.assert_array_equal(np.asarray(q), dequant("Q4_1", raw.reshape(-1)).reshape(32, 64))
    np.testing.assert_allclose(bound2(x=xs)["t"], np.asarray(q, np.float64).sum(), rtol=1e-5)


@pytest.mark.parametrize("qtype", TYPES)
def test_block_gather_reads_rows_exactly(qtype):
    """An embedding lookup from a table held as blocks only: the rows decoded from the blocks are
    the float32 weights bit for bit, and no float32 table is made."""
    rows, cols = 12, 512
    per = PER_BLOCK.get(qtype, 32)
    raw = make_blocks(qtype.upper(), rows * cols // per, np.random.default_rng(6)).reshape(rows, -1)
    table = QuantTensor(Blocks(qtype, raw))
    g = ls.Graph()
    ids, w = g.input("ids", ("s",), ls.int64), _block_input(g, qtype, rows, cols)
    g.output("y", ls.hl.embedding(ids, w))
    bound = _matmul_program(g, kinds=("BlockGather",)).persist(w=table)
    assert any("gather" in name for name in _block_launches(bound)) and not table.is_dense
    pick = np.array([3, 0, 11, 3, 7], np.int64)
    want = dequant(qtype.upper(), raw.reshape(-1)).reshape(rows, cols).astype(np.float32)[pick]
    np.testing.assert_array_equal(bound(ids=pick)["y"], want)
    assert not table.is_dense


def test_bad_activations_setting_is_refused(monkeypatch):
    g = ls.Graph()
    x, wt = g.input("x", ("s", 64)), _block_input(g, "q4_1", 32, 64)
    g.output("y", x @ wt.transpose(0, 1))
    monkeypatch.setenv("LIGHTSPEED_NATIVE_ACTIVATIONS", "int4")
    with pytest.raises(ls.LightspeedError, match="LIGHTSPEED_NATIVE_ACTIVATIONS must be one of q16, q8, float"):
        _matmul_program(g)


@pytest.mark.parametrize("activations", ["float", "q16", "q8"])
@pytest.mark.parametrize("qtype", ["q4_1", "q8_0", "q4_k"])
def test_weights_as_either_operand(qtype, activations, monkeypatch):
    """The product the other way round (W x^T, the weights as A) reads the blocks too, with the
    same results as the float64 product (of the quantised rows of x, up to 64 of them)."""
    monkeypatch.setenv("LIGHTSPEED_NATIVE_ACTIVATIONS", activations)
    n, k = 24, 256
    q, w = _weights(qtype, n, k, seed=9)
    g = ls.Graph()
    x, wt = g.input("x", ("s", k)), _block_input(g, qtype, n, k)
    g.output("y", wt @ x.transpose(0, 1) + g.input("r", (n, "s")))
    bound = _matmul_program(g, side=0).persist(w=q)
    assert _block_launches(bound)
    rng = np.random.default_rng(0)
    lanes = qtype in LANE_TYPES and lane_dots()
    for rows in (1, 6, 65, 130):  # a decode row; rows quantised each (up to 64, any number with the lane dots)
        xs = rng.standard_normal((rows, k)).astype(np.float32)
        r = rng.standard_normal((n, rows)).astype(np.float32)
        quantised = activations != "float" and (rows <= 64 or lanes)
        xq = _quantised_rows(xs, 16 if activations == "q16" else 8)[0] if quantised else xs.astype(np.float64)
        want = w.astype(np.float64) @ xq.T + r
        np.testing.assert_allclose(bound(x=xs, r=r)["y"], want, rtol=1e-5, atol=1e-5 * np.abs(want).max(),
                                   err_msg=f"{rows} rows")


def test_a_block_input_takes_blocks_of_its_type_only():
    """A block input refuses float values and blocks of another type, naming the input; blocks
    of another shape are refused like any input of the wrong shape."""
    q, w = _weights("q4_1", 32, 64, seed=1)
    g = ls.Graph()
    x, wt = g.input("x", ("s", 64)), _block_input(g, "q4_1", 32, 64)
    g.output("y", x @ wt.transpose(0, 1))
    prog = _matmul_program(g)
    with pytest.raises(ls.InputError, match=r"input 'w': expected q4_1 blocks .* got ndarray"):
        prog.persist(w=w)
    with pytest.raises(ls.InputError, match="input 'w': expected q4_1 blocks .* got q8_0"):
        prog(x=np.zeros((1, 64), np.float32), w=random_quant("q8_0", (32, 64), 0))
    with pytest.raises(ls.InputError, match="input 'w': axis 0 must have size 32"):
        prog.persist(w=random_quant("q4_1", (16, 64), 0))


def test_attached_blocks_follow_the_array():
    w = _weights("q4_1", 32, 64, seed=1)[1]
    w = attach(w, Blocks("q4_1", make_blocks("Q4_1", 64, np.random.default_rng(1)).reshape(32, -1)))
    assert blocks_of(w) is not None and blocks_of(w.copy()) is None and blocks_of(w[:]) is None


def test_blocks_must_describe_the_matrix():
    w = np.zeros((4, 64), np.float32)
    with pytest.raises(ValueError, match="do not hold"):
        attach(w, Blocks("q8_0", np.zeros((4, 34), np.uint8)))
    with pytest.raises(ValueError, match="unknown block type"):
        Blocks("q5_1", np.zeros((4, 48), np.uint8))


@pytest.mark.parametrize("activations", ["float", "q16"])
def test_gguf_blocks_are_kept_and_decode_like_the_float_weights(tmp_path, activations, monkeypatch):
    """A tiny Llama GGUF whose matrices are Q4_1 / Q8_0 blocks (q and k rows permuted as llama.cpp
    writes them): the loader keeps each matrix's blocks, which decode to exactly the float32 tensor
    it returns; a native Generator reads the blocks and decodes the greedy tokens of the float path
    (float activations: logits within float32 rounding; 16-bit ones: within 1e-4 of the largest)."""
    monkeypatch.setenv("LIGHTSPEED_NATIVE_ACTIVATIONS", activations)
    transformers = pytest.importorskip("transformers")
    gguf = pytest.importorskip("gguf")
    from lightspeed.models import from_hf_config
    from lightspeed.models.generate import Generator
    from lightspeed.weights import load
    from tests.weights.gguf_helpers import gguf_name, permute_like_llama_cpp, write_gguf

    # a vocabulary large enough that the search does not time the tied table's Cast (its float32
    # copy per step) as fast as gathering a row from the blocks
    cfg = transformers.LlamaConfig(vocab_size=2048, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                   rope_theta=50000.0, rms_norm_eps=1e-5, tie_word_embeddings=True)
    shapes = from_hf_config({**cfg.to_dict(), "model_type": "llama"}).param_shapes()
    rng = np.random.default_rng(0)
    tensors, raw_rows = {}, {}
    for name, shape in sorted(shapes.items()):
        if len(shape) == 1:
            tensors[gguf_name(name, "llama")] = (rng.standard_normal(shape) * 0.1 + 1).astype(np.float32)
            continue
        qtype = "Q8_0" if "embed" in name else "Q4_1"
        raw = make_blocks(qtype, shape[0] * shape[1] // 32, rng).reshape(shape[0], -1)
        raw_rows[name] = (qtype, raw)
        stored = raw
        if name.endswith("q_proj.weight"):
            stored = permute_like_llama_cpp(raw, cfg.num_attention_heads)
        elif name.endswith("k_proj.weight"):
            stored = permute_like_llama_cpp(raw, cfg.num_key_value_heads)
        tensors[gguf_name(name, "llama")] = (np.ascontiguousarray(stored), getattr(gguf.GGMLQuantizationType, qtype))
    kv = {"llama.block_count": 2, "llama.context_length": 128, "llama.embedding_length": 64,
          "llama.feed_forward_length": 96, "llama.attention.head_count": 4, "llama.attention.head_count_kv": 2,
          "llama.rope.freq_base": 50000.0, "llama.attention.layer_norm_rms_epsilon": 1e-5, "llama.vocab_size": 2048,
          "llama.rope.dimension_count": 16, "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2}
    path = write_gguf(tmp_path / "q.gguf", "llama", kv, tensors)
    w = load(path, progress=False, tokenizer=False)
    for name, (qtype, raw) in raw_rows.items():
        b = blocks_of(w.tensors[name])
        assert b is not None and b.qtype == qtype.lower(), name
        np.testing.assert_array_equal(b.data, raw, err_msg=name)
        np.testing.assert_array_equal(dequant(qtype, b.data.reshape(-1)).reshape(w.tensors[name].shape),
                                      w.tensors[name], err_msg=name)
    model = from_hf_config(w.config)
    prompt = [3, 17, 5, 90, 41]
    # loaded lazily, the matrices stay blocks: the graphs declare them with their block dtypes
    # and the native programs read the blocks (the tied embedding's rows are gathered from its
    # blocks too); no float32 copy is ever made
    lz = load(path, progress=False, tokenizer=False, lazy=True)
    for name in raw_rows:
        assert isinstance(lz.tensors[name], QuantTensor), name
        np.testing.assert_array_equal(lz.tensors[name].blocks.data, raw_rows[name][1])
    fast = Generator(model, lz.tensors, backend="native", search=OPTS)
    assert model.block_storage(fast.weights, "native") == {n: getattr(ls, q.lower()) for n, (q, _) in raw_rows.items()}
    assert _block_launches(fast.decode) and _block_launches(fast.prefill)
    # one placing of the weights for both programs: the decode program holds the prefill's
    # placed blocks, not a second copy (on a GPU every program had uploaded its own weights)
    assert fast.decode.resident.keys() == fast.prefill.resident.keys()
    assert all(fast.decode.resident[n] is fast.prefill.resident[n] for n in fast.decode.resident)
    assert any("gather" in name for name in _block_launches(fast.decode))
    # the eager load's float32 arrays: the float path
    plain = Generator(model, w.tensors, backend="native", search=OPTS)
    assert not _block_launches(plain.decode) and not model.block_storage(plain.weights, "native")
    a = fast.generate(prompt, 8, stop_ids=(), keep_logits=True)
    b = plain.generate(prompt, 8, stop_ids=(), keep_logits=True)
    assert a.new_ids == b.new_ids
    tol = 1e-5 if activations == "float" else 1e-4
    for la, lb in zip(a.logits, b.logits):
        np.testing.assert_allclose(la, lb, rtol=tol, atol=tol * np.abs(lb).max())
    # a matrix's float32 copy is made only where a chosen program reads it: none where the
    # search took the block kernels (a timing decision: under load it once took the float path
    # for the tied embedding's table, and in a busy CI run for every matrix of a program)
    floats = _float_reads(fast.decode) | _float_reads(fast.prefill)
    assert {name for name in raw_rows if lz.tensors[name].is_dense} == floats & set(raw_rows)
    # and they equal the eager load's float32 values when asked for
    for name in raw_rows:
        np.testing.assert_array_equal(np.asarray(lz.tensors[name]), w.tensors[name], err_msg=name)
    # a backend without block kernels (cpu) gets float32 weights from the same lazy tensors
    assert not model.block_storage(fast.weights, "cpu")


@pytest.mark.parametrize("cols", [32, 96, 640])
def test_q5_0_widens_to_the_q8_0_blocks_of_the_same_values(cols):
    """Blocks.widened: every Q5_0 weight (5-bit u, d * (u - 16)) is the Q8_0 weight (d, u - 16) of
    the widened blocks, bit for bit, as gguf dequantises both; other types are left as they are."""
    from gguf import GGMLQuantizationType as T
    from gguf.quants import dequantize, quantize

    x = np.random.default_rng(cols).standard_normal((7, cols)).astype(np.float32) * 3
    b = Blocks("q5_0", np.ascontiguousarray(quantize(x, T.Q5_0)))
    wide = b.widened()
    assert wide.qtype == "q8_0" and wide.matches((7, cols)) and b.widened() is wide
    np.testing.assert_array_equal(dequantize(wide.data, T.Q8_0), dequantize(b.data, T.Q5_0))
    q8 = Blocks("q8_0", np.ascontiguousarray(quantize(x, T.Q8_0)))
    assert q8.widened() is q8


def test_the_search_measures_the_block_op_beside_the_cast_path():
    """Both ways of a product against block weights are in the e-graph and measured: the block
    kernel (BlockMatmul reads a 1024 x 1024 Q4_1 matrix's 0.6 MB) and the Cast + float kernel
    (a 4 MB float32 copy, then the product), and the program the search keeps (the block kernel
    on an idle machine: which one wins is timing, so not asserted here; benchmarks/ measure it)
    gives the float64 product of the dequantised weights."""
    n = k = 1024
    q = random_quant("q4_1", (n, k), 3)
    g = ls.Graph()
    x = g.input("x", ("s", k))
    g.output("y", x @ _block_input(g, "q4_1", n, k).transpose(0, 1))
    prog = g.compile(NATIVE, search=ls.SearchOptions(budget=8, seed=0, progress=False, dims={"s": 1}))
    rep = prog.search_report
    ran = [c for c in rep.candidates if c.seconds is not None]
    assert any("BlockMatmul" in c.ops for c in ran) and any("Cast" in c.ops and "Matmul" in c.ops for c in ran)
    xs = np.random.default_rng(2).standard_normal((1, k)).astype(np.float32)
    got = prog.persist(w=q)(x=xs)["y"]
    if "BlockMatmul" in next(c for c in rep.candidates if c.index == rep.winner).ops:
        assert not q.is_dense  # the blocks are read as they are: no float32 copy was made
    want = xs.astype(np.float64) @ np.asarray(q).T.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())  # q16 activations


@pytest.mark.parametrize("names", [("t", "r"), ("j", "i"), ("q", "j0"), ("r3", "t")])
def test_dims_named_like_kernel_loop_variables(names):
    """A graph dim may be named like a kernel's loop variable (Whisper's "t", a row count "r"):
    the kernels' own names start with _ls_, so the block and generic matmul kernels still compile
    (a collision had made them fail to compile, and the search fell back to primitives silently)
    and compute the product."""
    n, k = 48, 96
    q, w = _weights("q4_1", n, k, seed=2)
    g = ls.Graph()
    x = g.input("x", (names[0], k))
    g.output("y", x @ _block_input(g, "q4_1", n, k).transpose(0, 1))
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((6, k)).astype(np.float32)
    for prog in (_matmul_program(g), _matmul_program(g, block=False)):
        np.testing.assert_allclose(prog(x=xs, w=q)["y"], xs.astype(np.float64) @ w.T.astype(np.float64),
                                   rtol=1e-3, atol=1e-2)
    g2 = ls.Graph()
    a = g2.input("a", (names[0], k))
    g2.output("z", a.narrow(0, 0, names[1]) @ g2.input("w", (k, names[0])))
    prog = _matmul_program(g2, block=False)  # a candidate computing it with the generic Matmul kernel
    b6 = rng.standard_normal((k, 6)).astype(np.float32)
    out = prog(a=xs, w=b6, dims={names[1]: 4})["z"]
    np.testing.assert_allclose(out, xs[:4].astype(np.float64) @ b6, rtol=1e-5, atol=1e-4)
