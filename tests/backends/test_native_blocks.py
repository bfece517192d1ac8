"""The native backend's block matmuls: weights dequantised from GGML blocks (Q8_0, Q4_0, Q4_1) are
read as their blocks once they are resident, dequantised in registers, with the float32 weights'
values exactly.  References: ggml's formats transcribed independently (tests/weights/quant_ref.py)
and float64 numpy products; the float32 path of the same program."""

from __future__ import annotations

import numpy as np
import pytest

import lightspeed as ls
from lightspeed.backends import get_backend
from lightspeed.weights.quant import Blocks, attach, blocks_of
from tests.weights.quant_ref import dequant, make_blocks

NATIVE = get_backend("native")
pytestmark = pytest.mark.skipif(not NATIVE.available(), reason="no C compiler")
OPTS = ls.SearchOptions(budget=2, seed=0, progress=False)


def _weights(qtype: str, n: int, k: int, seed: int) -> np.ndarray:
    raw = make_blocks(qtype.upper(), n * k // 32, np.random.default_rng(seed))
    w = dequant(qtype.upper(), raw).reshape(n, k).astype(np.float32)
    return attach(w, Blocks(qtype, raw.reshape(n, -1)))


def _matmul_program(g: ls.Graph):
    """``g`` lowered on native from the first random candidate computing its product as a
    ``Matmul``/``MatmulAdd`` (what the block kernels replace; the search may measure another
    lowering faster on a tiny product, which would leave nothing to check)."""
    import random

    from lightspeed.egraph import Candidate
    from lightspeed.egraph.llir import decode_program
    from tests.backends.harness import saturate

    _, enc, index, ser = saturate(NATIVE, g)
    for seed in range(200):
        lprog = decode_program(Candidate.random(index, random.Random(seed)), ser, enc.constants, NATIVE.declarations())
        if any(op.op in ("Matmul", "MatmulAdd") for op in lprog.ops):
            return NATIVE.lower(g, lprog)
    raise AssertionError("no candidate computes the product as a Matmul")


def _block_launches(prog) -> list[str]:
    return [launch.spec.name for launch in prog.launches if "q4_" in launch.spec.name or "q8_" in launch.spec.name]


@pytest.mark.parametrize("add", [False, True], ids=["matmul", "matmul-add"])
@pytest.mark.parametrize("rows", [1, 5])
@pytest.mark.parametrize("qtype", ["q4_1", "q4_0", "q8_0"])
def test_block_matmul_matches_float64(qtype, rows, add):
    n, k = 48, 96
    w = _weights(qtype, n, k, seed=rows)
    g = ls.Graph()
    x, wt = g.input("x", ("s", k)), g.input("w", (n, k))
    y = x @ wt.transpose(0, 1)
    if add:
        y = y + g.input("r", ("s", n))
    g.output("y", y)
    prog = _matmul_program(g)
    bound = prog.persist(w=w)
    assert len(_block_launches(bound)) == 1 and not _block_launches(prog)
    rng = np.random.default_rng(7)
    ins = {"x": rng.standard_normal((rows, k)).astype(np.float32)}
    want = ins["x"].astype(np.float64) @ w.T.astype(np.float64)
    if add:
        ins["r"] = rng.standard_normal((rows, n)).astype(np.float32)
        want = want + ins["r"]
    got = bound(ins)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    # the float32 path of the same program (weights passed per call, not resident)
    np.testing.assert_allclose(got, prog(w=w, **ins)["y"], rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_a_copy_of_the_weights_takes_the_float_path():
    w = _weights("q4_1", 32, 64, seed=1)
    assert blocks_of(w) is not None and blocks_of(w.copy()) is None and blocks_of(w[:]) is None
    g = ls.Graph()
    x, wt = g.input("x", ("s", 64)), g.input("w", (32, 64))
    g.output("y", x @ wt.transpose(0, 1))
    prog = _matmul_program(g)
    assert not _block_launches(prog.persist(w=w.copy())) and _block_launches(prog.persist(w=w))


def test_blocks_must_describe_the_matrix():
    w = np.zeros((4, 64), np.float32)
    with pytest.raises(ValueError, match="do not hold"):
        attach(w, Blocks("q8_0", np.zeros((4, 34), np.uint8)))
    with pytest.raises(ValueError, match="unknown block type"):
        Blocks("q5_0", np.zeros((4, 44), np.uint8))


def test_gguf_blocks_are_kept_and_decode_like_the_float_weights(tmp_path):
    """A tiny Llama GGUF whose matrices are Q4_1 / Q8_0 blocks (q and k rows permuted as llama.cpp
    writes them): the loader keeps each matrix's blocks, which decode to exactly the float32 tensor
    it returns; a native Generator reads the blocks and decodes the greedy tokens of the float path."""
    transformers = pytest.importorskip("transformers")
    gguf = pytest.importorskip("gguf")
    from lightspeed.models import from_hf_config
    from lightspeed.models.generate import Generator
    from lightspeed.weights import load
    from tests.weights.gguf_helpers import gguf_name, permute_like_llama_cpp, write_gguf

    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
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
          "llama.rope.freq_base": 50000.0, "llama.attention.layer_norm_rms_epsilon": 1e-5, "llama.vocab_size": 96,
          "llama.rope.dimension_count": 16, "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2}
    w = load(write_gguf(tmp_path / "q.gguf", "llama", kv, tensors), progress=False, tokenizer=False)
    for name, (qtype, raw) in raw_rows.items():
        b = blocks_of(w.tensors[name])
        assert b is not None and b.qtype == qtype.lower(), name
        np.testing.assert_array_equal(b.data, raw, err_msg=name)
        np.testing.assert_array_equal(dequant(qtype, b.data.reshape(-1)).reshape(w.tensors[name].shape),
                                      w.tensors[name], err_msg=name)
    model = from_hf_config(w.config)
    prompt = [3, 17, 5, 90, 41]
    fast = Generator(model, w.tensors, backend="native", search=OPTS)
    assert _block_launches(fast.decode) and _block_launches(fast.prefill)
    plain = Generator(model, {k: v.copy() for k, v in w.tensors.items()}, backend="native", search=OPTS)
    assert not _block_launches(plain.decode)
    a = fast.generate(prompt, 8, stop_ids=(), keep_logits=True)
    b = plain.generate(prompt, 8, stop_ids=(), keep_logits=True)
    assert a.new_ids == b.new_ids
    for la, lb in zip(a.logits, b.logits):
        np.testing.assert_allclose(la, lb, rtol=1e-5, atol=1e-5 * np.abs(lb).max())
