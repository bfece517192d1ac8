"""CTranslate2 model.bin: the reader against bytes laid out by hand, write/read round trips, corrupt and
truncated files, and the Whisper name mapping against an independent re-implementation of
CTranslate2's Transformers converter applied to a small Hugging Face model."""

from __future__ import annotations

import json
import struct

import ml_dtypes
import numpy as np
import pytest

from lightspeed.weights.ctranslate2 import (
    WeightError,
    load_whisper,
    read_ct2,
    whisper_config,
    whisper_state_dict,
    write_ct2,
)


def _s(text: str) -> bytes:
    raw = text.encode() + b"\0"
    return struct.pack("<H", len(raw)) + raw


def test_reader_parses_bytes_laid_out_by_hand(tmp_path):
    """Independent of write_ct2: u32 version, spec, revision, variables (name, rank, dims, dtype id,
    byte count, data), aliases."""
    w = np.arange(6, dtype="<f2").reshape(2, 3)
    body = b"".join([
        struct.pack("<I", 6), _s("TestSpec"), struct.pack("<I", 2), struct.pack("<I", 2),
        _s("a/weight"), struct.pack("<B", 2), struct.pack("<II", 2, 3), struct.pack("<B", 4),
        struct.pack("<I", 12), w.tobytes(),
        _s("a/flag"), struct.pack("<B", 0), struct.pack("<B", 1), struct.pack("<I", 1), b"\x03",
        struct.pack("<I", 1), _s("b/weight"), _s("a/weight"),
    ])
    path = tmp_path / "model.bin"
    path.write_bytes(body)
    m = read_ct2(tmp_path)  # a directory works too
    assert (m.version, m.spec, m.revision) == (6, "TestSpec", 2)
    assert list(m.variables) == ["a/weight", "a/flag"]
    assert m.variables["a/weight"].dtype == np.float16
    np.testing.assert_array_equal(m.get("b/weight"), w)  # through the alias
    assert m.scalar("a/flag") == 3 and m.variables["a/flag"].dtype == np.int8
    assert m.float32("a/weight").dtype == np.float32


def test_round_trip_every_dtype(tmp_path):
    rng = np.random.default_rng(0)
    v = {
        "f32": rng.standard_normal((3, 4)).astype(np.float32),
        "f16": rng.standard_normal((5,)).astype(np.float16),
        "bf16": rng.standard_normal((2, 2, 2)).astype(ml_dtypes.bfloat16),
        "i8": rng.integers(-128, 127, (4, 3)).astype(np.int8),
        "i16": np.array(-1, np.int16),
        "i32": rng.integers(-1000, 1000, (7,)).astype(np.int32),
        "empty": np.zeros((0, 3), np.float32),
    }
    path = tmp_path / "model.bin"
    write_ct2(path, "RoundTrip", v, aliases={"alias": "f32"}, revision=9)
    m = read_ct2(path)
    assert (m.spec, m.revision, m.aliases) == ("RoundTrip", 9, {"alias": "f32"})
    for k, a in v.items():
        assert m.variables[k].dtype == a.dtype and m.variables[k].shape == a.shape
        np.testing.assert_array_equal(m.variables[k], a)
    assert m.scalar("i16") == -1


def test_int8_weights_are_dequantised_with_their_row_scales(tmp_path):
    rng = np.random.default_rng(1)
    w = rng.standard_normal((4, 6)).astype(np.float32)
    scale = 127.0 / np.abs(w).max(axis=1)  # CTranslate2's int8 quantisation: q = round(w * scale) per row
    q = np.round(w * scale[:, None]).astype(np.int8)
    write_ct2(tmp_path / "model.bin", "Q", {"l/weight": q, "l/weight_scale": scale.astype(np.float32)})
    got = read_ct2(tmp_path / "model.bin").float32("l/weight")
    np.testing.assert_allclose(got, w, atol=np.abs(w).max() / 127)
    write_ct2(tmp_path / "model.bin", "Q", {"l/weight": q})
    with pytest.raises(WeightError, match="l/weight_scale"):
        read_ct2(tmp_path / "model.bin").float32("l/weight")


def _small_file(tmp_path):
    path = tmp_path / "model.bin"
    write_ct2(path, "Spec", {"first/weight": np.ones((4, 4), np.float16), "second/bias": np.zeros(8, np.float32)},
              aliases={"third": "second/bias"})
    return path, path.read_bytes()


@pytest.mark.parametrize("cut, what", [
    (2, "binary version"), (10, "spec name"), (40, "first/weight"), (60, "data of variable 'first/weight'"),
    (-40, "data of variable 'second/bias'"), (-5, "alias"),
])
def test_truncated_file_names_the_file_and_the_variable(tmp_path, cut, what):
    path, data = _small_file(tmp_path)
    path.write_bytes(data[:cut])
    with pytest.raises(WeightError, match="truncated") as e:
        read_ct2(path)
    assert str(path) in str(e.value) and what in str(e.value)


def test_corrupt_files_are_refused_with_specific_errors(tmp_path):
    path, data = _small_file(tmp_path)
    path.write_bytes(struct.pack("<I", 99) + data[4:])
    with pytest.raises(WeightError, match="binary version 99"):
        read_ct2(path)
    path.write_bytes(data + b"junk")
    with pytest.raises(WeightError, match="4 unexpected bytes"):
        read_ct2(path)
    # the dtype byte of the first variable: after the header, its name, rank and two dims
    at = 4 + len(_s("Spec")) + 4 + 4 + len(_s("first/weight")) + 1 + 8
    assert data[at] == 4  # float16
    path.write_bytes(data[:at] + b"\x09" + data[at + 1:])
    with pytest.raises(WeightError, match="'first/weight' has unknown dtype id 9"):
        read_ct2(path)
    path.write_bytes(data[:at] + b"\x00" + data[at + 1:])  # says float32: 64 bytes, file says 32
    with pytest.raises(WeightError, match="'first/weight' .* needs 64 bytes, the file says 32"):
        read_ct2(path)
    write_ct2(path, "Spec", {"x": np.ones(2, np.float32)}, aliases={"y": "missing"})
    with pytest.raises(WeightError, match="alias 'y' points at missing variable 'missing'"):
        read_ct2(path)
    with pytest.raises(WeightError, match="cannot read"):
        read_ct2(tmp_path / "nope.bin")


# ---------------------------------------------------------------------------------------- Whisper
def ct2_whisper_variables(sd: dict[str, np.ndarray], cfg: dict) -> dict[str, np.ndarray]:
    """What CTranslate2's converter (python/ctranslate2/converters/transformers.py, WhisperLoader)
    writes for an HF Whisper state dict: fused self-attention [q; k; v] and cross-attention [k; v]
    projections with zero key biases, gamma/beta layer norms, scalar knobs, float16 storage."""
    v: dict[str, np.ndarray] = {"decoder/activation": np.array(3, np.int8), "decoder/alibi": np.array(0, np.int8),
                                "decoder/num_heads": np.array(cfg["decoder_attention_heads"], np.int16),
                                "encoder/num_heads": np.array(cfg["encoder_attention_heads"], np.int16),
                                "decoder/pre_norm": np.array(1, np.int8),
                                "decoder/scale_embeddings": np.array(0, np.int8)}
    d = cfg["d_model"]

    def put(name, a):
        v[name] = np.asarray(a).astype(np.float16)

    def ln(dst, src):
        put(f"{dst}/gamma", sd[f"{src}.weight"])
        put(f"{dst}/beta", sd[f"{src}.bias"])

    def lin(dst, src):
        put(f"{dst}/weight", sd[f"{src}.weight"])
        put(f"{dst}/bias", sd[f"{src}.bias"])

    def fuse(dst, src, names):
        put(f"{dst}/weight", np.concatenate([sd[f"{src}.{n}.weight"] for n in names]))
        put(f"{dst}/bias", np.concatenate([sd.get(f"{src}.{n}.bias", np.zeros(d, np.float32)) for n in names]))

    for side in ("encoder", "decoder"):
        p = f"model.{side}"
        if side == "encoder":
            lin("encoder/conv1", f"{p}.conv1")
            lin("encoder/conv2", f"{p}.conv2")
        else:
            put("decoder/embeddings/weight", sd[f"{p}.embed_tokens.weight"])
        put(f"{side}/position_encodings/encodings", sd[f"{p}.embed_positions.weight"])
        for i in range(cfg[f"{side}_layers"]):
            src, dst = f"{p}.layers.{i}", f"{side}/layer_{i}"
            ln(f"{dst}/self_attention/layer_norm", f"{src}.self_attn_layer_norm")
            fuse(f"{dst}/self_attention/linear_0", f"{src}.self_attn", ("q_proj", "k_proj", "v_proj"))
            lin(f"{dst}/self_attention/linear_1", f"{src}.self_attn.out_proj")
            if side == "decoder":
                ln(f"{dst}/attention/layer_norm", f"{src}.encoder_attn_layer_norm")
                lin(f"{dst}/attention/linear_0", f"{src}.encoder_attn.q_proj")
                fuse(f"{dst}/attention/linear_1", f"{src}.encoder_attn", ("k_proj", "v_proj"))
                lin(f"{dst}/attention/linear_2", f"{src}.encoder_attn.out_proj")
            ln(f"{dst}/ffn/layer_norm", f"{src}.final_layer_norm")
            lin(f"{dst}/ffn/linear_0", f"{src}.fc1")
            lin(f"{dst}/ffn/linear_1", f"{src}.fc2")
        ln(f"{side}/layer_norm", f"{p}.layer_norm")
    return v


@pytest.fixture(scope="module")
def small_whisper():
    pytest.importorskip("transformers")
    from tests.models.test_whisper import small_hf_whisper

    _, cfg, sd = small_hf_whisper()
    # the file stores float16: compare against the float16-rounded weights
    sd = {k: v.astype(np.float16).astype(np.float32) for k, v in sd.items()}
    return cfg, sd


def _write_whisper(tmp_path, cfg, sd, **changes):
    v = ct2_whisper_variables(sd, cfg)
    v.update(changes)
    write_ct2(tmp_path / "model.bin", "WhisperSpec", {k: v[k] for k in sorted(v)},
              aliases={"decoder/projection/weight": "decoder/embeddings/weight"}, revision=3)
    (tmp_path / "config.json").write_text(json.dumps({"suppress_ids": [3, 4], "suppress_ids_begin": [2]}))
    return tmp_path


def test_whisper_mapping_recovers_the_hf_state_dict_and_config(tmp_path, small_whisper):
    cfg, sd = small_whisper
    got_cfg, got = load_whisper(_write_whisper(tmp_path, cfg, sd))
    assert set(got) == set(sd)  # every HF name, nothing more (proj_out tied to the embedding)
    for k in sd:
        assert got[k].dtype == np.float32
        np.testing.assert_array_equal(got[k], sd[k], err_msg=k)
    for key in ("vocab_size", "num_mel_bins", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
                "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "max_source_positions",
                "max_target_positions"):
        assert got_cfg[key] == cfg[key], key
    assert got_cfg["suppress_tokens"] == [3, 4] and got_cfg["begin_suppress_tokens"] == [2]
    assert got_cfg["tie_word_embeddings"] is True and got_cfg["is_multilingual"] is False


def test_whisper_token_ids_come_from_the_vocabulary(tmp_path, small_whisper):
    cfg, sd = small_whisper
    d = _write_whisper(tmp_path, cfg, sd)
    vocab = [f"t{i}" for i in range(cfg["vocab_size"])]
    vocab[7], vocab[8], vocab[9] = "<|endoftext|>", "<|startoftranscript|>", "<|notimestamps|>"
    (d / "vocabulary.txt").write_text("\n".join(vocab) + "\n")
    got = whisper_config(read_ct2(d))
    assert (got["eos_token_id"], got["decoder_start_token_id"], got["no_timestamps_token_id"]) == (7, 8, 9)
    (d / "vocabulary.txt").write_text("\n".join(vocab[:-1]))
    with pytest.raises(WeightError, match="vocabulary.txt: 99 tokens"):
        whisper_config(read_ct2(d))


def test_whisper_mapping_errors_name_the_file_and_variable(tmp_path, small_whisper):
    cfg, sd = small_whisper
    d = _write_whisper(tmp_path, cfg, sd)
    v = ct2_whisper_variables(sd, cfg)
    del v["decoder/layer_1/attention/linear_2/bias"]
    write_ct2(d / "model.bin", "WhisperSpec", v)
    with pytest.raises(WeightError, match="'decoder/layer_1/attention/linear_2/bias' is missing") as e:
        whisper_state_dict(read_ct2(d))
    assert str(d / "model.bin") in str(e.value)
    _write_whisper(tmp_path, cfg, sd, **{"decoder/activation": np.array(0, np.int8)})
    with pytest.raises(WeightError, match="'decoder/activation' is relu"):
        whisper_state_dict(read_ct2(d))
    bad = ct2_whisper_variables(sd, cfg)["encoder/layer_0/self_attention/linear_0/weight"][:-1]
    _write_whisper(tmp_path, cfg, sd, **{"encoder/layer_0/self_attention/linear_0/weight": bad})
    # checked against the config's shapes before any splitting
    with pytest.raises(WeightError, match=r"variable 'encoder/layer_0/self_attention/linear_0/weight' has shape "
                                          r"\(191, 64\), expected \(192, 64\)"):
        whisper_state_dict(read_ct2(d))
    write_ct2(d / "model.bin", "TransformerSpec", {"x": np.zeros(1, np.float32)})
    with pytest.raises(WeightError, match="not 'WhisperSpec'"):
        whisper_config(read_ct2(d))


def test_real_tiny_en_file_if_present():
    """The shipped tiny.en model.bin (skipped unless the weights are already on this machine)."""
    from lightspeed.weights import installed

    try:
        if not installed("whisper"):
            pytest.skip("Whisper tiny.en weights are not installed or cached")
        from lightspeed.weights import default_weights

        path = default_weights("whisper", fetch=False)
    except WeightError as e:
        pytest.skip(str(e))
    m = read_ct2(path)
    assert (m.version, m.spec, m.revision, len(m.variables)) == (6, "WhisperSpec", 3, 148)
    assert m.aliases == {"decoder/projection/weight": "decoder/embeddings/weight"}
    cfg = whisper_config(m)
    assert (cfg["d_model"], cfg["encoder_layers"], cfg["vocab_size"], cfg["decoder_start_token_id"]) == \
        (384, 4, 51864, 50257)
