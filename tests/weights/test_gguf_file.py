"""The GGUF reader: header parsing against gguf-py's GGUFReader, dequantisation of every supported type
against an independent block-format transcription, and errors naming the file and tensor."""

from __future__ import annotations

import gguf
import ml_dtypes
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from lightspeed.weights import WeightError
from lightspeed.weights.gguf_file import SUPPORTED_TYPES, GGUFFile

from .gguf_helpers import write_gguf
from .quant_ref import BLOCK, LAYOUTS, dequant, make_blocks


@pytest.mark.parametrize("qtype", sorted(LAYOUTS))
def test_dequant_matches_reference(tmp_path, qtype):
    rng = np.random.default_rng(0)
    rows, blocks_per_row = 3, 2
    raw = make_blocks(qtype, rows * blocks_per_row, rng)
    path = write_gguf(tmp_path / "q.gguf", "llama", {}, {"t": (raw.reshape(rows, -1), Q[qtype])})
    with GGUFFile(path) as g:
        assert g.tensors["t"].shape == (rows, blocks_per_row * BLOCK[qtype])
        got = g.read("t")
    assert got.dtype == np.float32
    want = dequant(qtype, raw).reshape(rows, -1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * np.abs(want).max())


@pytest.mark.parametrize("qtype", ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"])
def test_quantize_roundtrip(tmp_path, qtype):
    # gguf-py's quantizer on random data, then our loader: values come back within one quantisation step.
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    raw = gguf.quants.quantize(x, Q[qtype])
    path = write_gguf(tmp_path / "q.gguf", "llama", {}, {"t": (raw, Q[qtype])})
    with GGUFFile(path) as g:
        got = g.read("t")
    levels = {"Q4_0": 16, "Q4_1": 16, "Q5_0": 32, "Q5_1": 32, "Q8_0": 256}[qtype]
    step = (x.reshape(-1, 32).max(1) - x.reshape(-1, 32).min(1)) / (levels - 1)
    err = np.abs(got - x).reshape(-1, 32).max(1)
    assert np.all(err <= 1.01 * step + 1e-3), (err, step)


def test_float_types(tmp_path):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 8)).astype(np.float32)
    bf16_bits = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    path = write_gguf(tmp_path / "f.gguf", "llama", {}, {
        "f32": x, "f16": x.astype(np.float16),
        "bf16": (bf16_bits.view(np.uint8).reshape(3, -1), Q.BF16),
    })
    with GGUFFile(path) as g:
        np.testing.assert_array_equal(g.read("f32"), x)
        np.testing.assert_array_equal(g.read("f16"), x.astype(np.float16).astype(np.float32))
        np.testing.assert_array_equal(g.read("bf16"), x.astype(ml_dtypes.bfloat16).astype(np.float32))
        assert {g.tensors[n].qtype for n in ("f32", "f16", "bf16")} == {Q.F32, Q.F16, Q.BF16}


def test_header_matches_gguf_reader(tmp_path):
    rng = np.random.default_rng(3)
    kv = {"llama.block_count": 2, "llama.rope.freq_base": 10000.5, "general.name": "tiny ünïcode",
          "tokenizer.ggml.tokens": ["a", "b", "<0x0A>", "▁x"], "tokenizer.ggml.scores": [0.0, -1.5, 2.0, 3.0],
          "tokenizer.ggml.token_type": [1, 1, 6, 1], "flag": True}
    tensors = {"a.weight": rng.standard_normal((5, 32)).astype(np.float32),
               "b.weight": (make_blocks("Q4_K", 2, rng).reshape(1, -1), Q.Q4_K)}
    path = write_gguf(tmp_path / "h.gguf", "llama", kv, tensors)
    reader = gguf.GGUFReader(path)
    with GGUFFile(path) as g:
        for key, field in reader.fields.items():
            if key.startswith("GGUF."):
                continue
            ours = g.metadata[key]
            theirs = field.contents()
            if isinstance(ours, np.ndarray):
                np.testing.assert_array_equal(ours, theirs)
            elif isinstance(ours, float):
                assert np.float32(ours) == np.float32(theirs)
            else:
                assert ours == theirs, key
        assert g.metadata["llama.rope.freq_base"] == 10000.5
        for t in reader.tensors:
            info = g.tensors[t.name]
            assert info.offset == t.data_offset and info.qtype == t.tensor_type and info.nbytes == t.n_bytes
            assert info.shape == tuple(reversed([int(d) for d in t.shape]))
            np.testing.assert_array_equal(g.raw(t.name), np.asarray(t.data).reshape(-1).view(np.uint8))


def test_float32_metadata_reads_as_short_decimal(tmp_path):
    path = write_gguf(tmp_path / "e.gguf", "llama", {"llama.attention.layer_norm_rms_epsilon": 1e-5}, {})
    with GGUFFile(path) as g:
        assert g.metadata["llama.attention.layer_norm_rms_epsilon"] == 1e-5


def _file_with_tensor(tmp_path):
    x = np.arange(64, dtype=np.float32).reshape(2, 32)
    return write_gguf(tmp_path / "m.gguf", "llama", {"general.name": "m"}, {"first.weight": x, "last.weight": x})


def test_truncated_file_names_tensor(tmp_path):
    path = _file_with_tensor(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[:-10])
    with pytest.raises(WeightError, match=r"m\.gguf.*'last\.weight'.*truncated"):
        GGUFFile(path)


def test_truncated_header(tmp_path):
    path = _file_with_tensor(tmp_path)
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(WeightError, match=r"m\.gguf: truncated GGUF file \(it ends inside"):
        GGUFFile(path)


def test_bad_magic_and_empty(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"PK\x03\x04" + bytes(100))
    with pytest.raises(WeightError, match=r"model\.gguf: not a GGUF file"):
        GGUFFile(bad)
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(WeightError, match=r"empty\.gguf: empty file"):
        GGUFFile(empty)


def test_unknown_and_unsupported_quant_types(tmp_path):
    path = _file_with_tensor(tmp_path)
    data = bytearray(path.read_bytes())
    # The type field (uint32 0 = F32) follows the dims of the tensor's table entry.
    entry = data.index(b"last.weight") + len(b"last.weight") + 4 + 2 * 8
    assert data[entry:entry + 4] == bytes(4)
    data[entry:entry + 4] = (999).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(WeightError, match=r"m\.gguf: tensor 'last\.weight' has unknown quant type 999"):
        GGUFFile(path)

    rng = np.random.default_rng(4)
    raw = rng.integers(0, 256, (1, 84), dtype=np.uint8)  # one Q2_K block: known to GGML, not supported here
    p2 = write_gguf(tmp_path / "q2.gguf", "llama", {}, {"q2.weight": (raw, Q.Q2_K)})
    assert Q.Q2_K not in SUPPORTED_TYPES
    with GGUFFile(p2) as g, pytest.raises(WeightError, match=r"q2\.gguf: tensor 'q2\.weight' is stored as Q2_K"):
        g.read("q2.weight")


def test_missing_file():
    with pytest.raises(WeightError, match="nope.gguf"):
        GGUFFile("/nonexistent/nope.gguf")
