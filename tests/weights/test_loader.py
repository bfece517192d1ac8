"""Hugging Face directories (safetensors, single file and sharded) against transformers' own
save_pretrained, corrupt safetensors files, and the config -> shapes table against real models."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest

from lightspeed.weights import LoadedWeights, WeightError, load
from lightspeed.weights.shapes import expected_shapes

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _tiny_llama(seed=0, **kw):
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, **kw)
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(cfg).eval()


@pytest.mark.parametrize("shard", [False, True])
def test_safetensors_dir_roundtrip(tmp_path, shard):
    model = _tiny_llama()
    model.save_pretrained(tmp_path, safe_serialization=True, max_shard_size="20KB" if shard else "1GB")
    assert (tmp_path / "model.safetensors.index.json").exists() == shard
    w = load(tmp_path, progress=False)
    assert isinstance(w, LoadedWeights) and w.tokenizer is None and w.path == tmp_path
    assert w.config["model_type"] == "llama" and w.config["architectures"] == ["LlamaForCausalLM"]
    sd = model.state_dict()
    assert set(w.tensors) == set(sd)
    for k, v in sd.items():
        np.testing.assert_array_equal(w.tensors[k], v.numpy(), err_msg=k)
    # and the tensors rebuild the model
    again = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**w.config)).eval()
    again.load_state_dict({k: torch.from_numpy(v) for k, v in w.tensors.items()})
    ids = torch.tensor([[1, 5, 9, 63]])
    with torch.no_grad():
        np.testing.assert_array_equal(again(ids).logits.numpy(), model(ids).logits.numpy())


def test_bfloat16_checkpoint(tmp_path):
    model = _tiny_llama(seed=1).to(torch.bfloat16)
    model.save_pretrained(tmp_path, safe_serialization=True)
    w = load(tmp_path, progress=False)
    for k, v in model.state_dict().items():
        assert w.tensors[k].dtype == np.float32
        np.testing.assert_array_equal(w.tensors[k], v.float().numpy(), err_msg=k)


def _write_safetensors(path, tensors, header_edit=None):
    header, blobs, offset = {}, [], 0
    for name, a in tensors.items():
        b = a.tobytes()
        dtype = {np.dtype("float32"): "F32", np.dtype(ml_dtypes.bfloat16): "BF16"}[a.dtype]
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    if header_edit:
        header_edit(header)
    h = json.dumps(header).encode()
    path.write_bytes(len(h).to_bytes(8, "little") + h + b"".join(blobs))


def _dir_with(tmp_path, tensors, config=None, header_edit=None):
    (tmp_path / "config.json").write_text(json.dumps(config or {"model_type": "custom"}))
    _write_safetensors(tmp_path / "model.safetensors", tensors, header_edit)
    return tmp_path


def test_safetensors_errors(tmp_path):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    d = _dir_with(tmp_path, {"x.weight": a, "y.weight": a})
    assert load(d, progress=False).tensors["y.weight"].tolist() == a.tolist()

    f = d / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-8])
    with pytest.raises(WeightError, match=r"model\.safetensors: tensor 'y\.weight' needs bytes .*truncated file"):
        load(d, progress=False)

    def shrink(header):
        header["x.weight"]["shape"] = [3, 3]

    _dir_with(tmp_path, {"x.weight": a}, header_edit=shrink)
    with pytest.raises(WeightError, match=r"tensor 'x\.weight' \(F32\[3, 3\]\) has 48 bytes of data, expected 36"):
        load(d, progress=False)

    f.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
    with pytest.raises(WeightError, match=r"model\.safetensors: not a safetensors file"):
        load(d, progress=False)


def test_hf_dir_shape_and_missing_checks(tmp_path):
    model = _tiny_llama()
    model.save_pretrained(tmp_path, safe_serialization=True)
    cfg = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(cfg | {"intermediate_size": 50}))
    with pytest.raises(WeightError, match=r"tensor 'model\.layers\.0\.mlp\.down_proj\.weight' has shape \[32, 48\], "
                                          r"but the config \(llama\) implies \[32, 50\]"):
        load(tmp_path, progress=False)
    (tmp_path / "config.json").write_text(json.dumps(cfg | {"num_hidden_layers": 3}))
    with pytest.raises(WeightError, match=r"missing tensor 'model\.layers\.2\."):
        load(tmp_path, progress=False)


def test_not_a_model_dir(tmp_path):
    with pytest.raises(WeightError, match="no config.json"):
        load(tmp_path, progress=False)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(WeightError, match="no model.safetensors"):
        load(tmp_path, progress=False)
    with pytest.raises(WeightError, match="no such file"):
        load(tmp_path / "missing.gguf", progress=False)


@pytest.mark.parametrize("model_type, extra", [
    ("llama", {"tie_word_embeddings": False}),
    ("llama", {"tie_word_embeddings": True, "attention_bias": True, "mlp_bias": True}),
    ("gemma3_text", {"head_dim": 16}),
    ("qwen2", {"tie_word_embeddings": False}),
    ("qwen3", {"head_dim": 16, "tie_word_embeddings": True}),
])
def test_expected_shapes_match_transformers(model_type, extra):
    cfg = transformers.AutoConfig.for_model(model_type, vocab_size=40, hidden_size=32, intermediate_size=24,
                                            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                            **extra)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    want = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    if cfg.tie_word_embeddings:
        want.pop("lm_head.weight")
    got = expected_shapes(cfg.to_dict() | {"model_type": model_type})
    assert got == want
