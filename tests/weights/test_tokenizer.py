"""Tokenizers built from GGUF metadata and from tokenizer.json, compared with transformers' tokenizers
built from the same GGUF file (an independent implementation of the same conversion), plus round
trips, streaming decode and chat templates. Vocabularies are small BPEs trained here with a fixed
corpus; tests/weights/test_real_models.py repeats the comparison on the real SmolLM2 and Gemma 3 files."""

from __future__ import annotations

import json

import pytest

from lightspeed.errors import UnsupportedError
from lightspeed.weights import WeightError
from lightspeed.weights.tokenizer import Tokenizer

from .gguf_helpers import write_gguf

tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")

CORPUS = [
    "The capital of France is Paris. The capital of Italy is Rome.",
    "Hello world! Hello there, how are you doing today?",
    "In 2024 there were 365 days; in 1999 the numbers were 42 and 7.",
    "naïve café résumé über straße",
    "def main(): return x + y * 2",
    "she said: don't stop, we'll see what they've done",
] * 3

SAMPLES = [
    "The capital of France is",
    "Hello world",
    "  leading and trailing spaces  ",
    "tabs\tand  double   spaces\n\nnew lines\n",
    "numbers 12345 and 3.14159",
    "unicode: naïve café 東京 😀 ünknown ẞ",
    "it's what we'll've done",
    "",
    " ",
]

SMOLLM_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
GEMMA_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% set role = 'model' if message['role'] == 'assistant' "
    "else message['role'] %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"
)
MESSAGES = [{"role": "user", "content": "What is the capital of France?"},
            {"role": "assistant", "content": "Paris."}, {"role": "user", "content": "And of Italy? "}]


def _train(pre_tokenizer, normalizer=None, specials=(), vocab_size=300, alphabet=()):
    from tokenizers import Tokenizer as Rust
    from tokenizers import models, trainers

    tok = Rust(models.BPE())
    tok.pre_tokenizer = pre_tokenizer
    if normalizer is not None:
        tok.normalizer = normalizer
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(specials), show_progress=False,
                                  initial_alphabet=list(alphabet))
    tok.train_from_iterator(CORPUS, trainer)
    model = json.loads(tok.to_str())["model"]
    vocab = model["vocab"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return sorted(vocab, key=vocab.get), merges


@pytest.fixture(scope="module")
def gpt2_gguf(tmp_path_factory):
    from tokenizers import pre_tokenizers

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tokens, merges = _train(pre_tokenizers.ByteLevel(add_prefix_space=False), specials=specials,
                            alphabet=pre_tokenizers.ByteLevel.alphabet())
    d = tmp_path_factory.mktemp("gpt2")
    kv = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "default", "tokenizer.ggml.tokens": tokens,
          "tokenizer.ggml.token_type": [3 if t in specials else 1 for t in tokens],
          "tokenizer.ggml.merges": merges, "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
          "tokenizer.ggml.add_bos_token": False, "tokenizer.chat_template": SMOLLM_TEMPLATE,
          "general.name": "tiny-gpt2"}
    return write_gguf(d / "tok.gguf", "llama", kv, {})


@pytest.fixture(scope="module", params=["gemma3", "llama"])
def spm_gguf(request, tmp_path_factory):
    from tokenizers import normalizers, pre_tokenizers

    # SentencePiece-style, laid out like Gemma's vocabulary: controls, byte tokens, user-defined whitespace
    # runs (stored with real spaces, as llama.cpp writes them), then pieces in merge order. As "gemma3" (no
    # prefix space, merges ranked by id) and as "llama" (Llama-2 style: a prefix space, ranked by score).
    arch = request.param
    controls = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"]
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    user = ["\n", "\n\n", "\n\n\n", "  ", "   ", "    "] if arch == "gemma3" else []
    pieces, _ = _train(pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never"),
                       normalizer=normalizers.Replace(" ", "▁"), vocab_size=400)
    pieces = [p for p in pieces if p not in user and p not in ("▁▁", "▁▁▁", "▁▁▁▁")]
    tokens = controls + byte_tokens + user + pieces
    types = [3] * len(controls) + [6] * 256 + [4] * len(user) + [1] * len(pieces)
    d = tmp_path_factory.mktemp("spm")
    kv = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.pre": "default", "tokenizer.ggml.tokens": tokens,
          "tokenizer.ggml.scores": [-1000.0 if t != 1 else -float(i) for i, t in enumerate(types)],
          "tokenizer.ggml.token_type": types, "tokenizer.ggml.bos_token_id": 2, "tokenizer.ggml.eos_token_id": 1,
          "tokenizer.ggml.unknown_token_id": 3, "tokenizer.ggml.padding_token_id": 0,
          "tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.add_space_prefix": arch == "llama",
          "tokenizer.chat_template": GEMMA_TEMPLATE, "general.name": "tiny-spm"}
    return write_gguf(d / "tok.gguf", arch, kv, {})


def _hf(path):
    return transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


@pytest.mark.parametrize("which", ["gpt2", "spm"])
def test_matches_transformers_gguf_tokenizer(which, gpt2_gguf, spm_gguf):
    path = gpt2_gguf if which == "gpt2" else spm_gguf
    ours, theirs = Tokenizer.from_gguf(path), _hf(path)
    extra = ["<|im_start|>user\nhi<|im_end|>\n"] if which == "gpt2" else ["<start_of_turn>user\nhi<end_of_turn>\n"]
    for s in SAMPLES + extra:
        if which == "spm" and "Prepend" in str(ours.backend.normalizer) and (s[:1] == " " or s[:1] == "<"):
            continue  # Llama-2 style prefix space: we follow llama.cpp, transformers differs (see tokenizer.py)
        want = theirs.encode(s, add_special_tokens=False)
        assert ours.encode(s, add_bos=False) == want, s
        assert ours.decode(want) == theirs.decode(want), s
    from lightspeed.weights.gguf_file import GGUFFile

    with GGUFFile(path) as g:
        assert ours.vocab_size == len(g.metadata["tokenizer.ggml.tokens"])


@pytest.mark.parametrize("which", ["gpt2", "spm"])
def test_roundtrip_and_specials(which, gpt2_gguf, spm_gguf):
    tok = Tokenizer.from_gguf(gpt2_gguf if which == "gpt2" else spm_gguf)
    for s in SAMPLES:
        assert tok.decode(tok.encode(s, add_bos=False)) == s
    if which == "gpt2":
        assert (tok.bos_id, tok.add_bos) == (1, False)
        assert tok.eos_ids == {0, 2}  # <|im_end|> (declared) and <|endoftext|>
        assert tok.encode("<|im_start|>x")[0] == 1
    else:
        assert (tok.bos_id, tok.add_bos) == (2, True)
        assert tok.eos_ids == {1, 6}  # <eos> and <end_of_turn>
        ids = tok.encode("hi")
        assert ids[0] == 2 and tok.encode("hi", add_bos=False) == ids[1:]
        # a chat template that writes <bos> itself gets no second one, unless asked
        assert tok.encode("<bos>hi") == ids and tok.encode("<bos>hi", add_bos=True) == [2, *ids]
        prefix = "Prepend" in str(tok.backend.normalizer)  # Llama-2 style: "hi" is encoded as "▁hi"
        assert tok.decode(ids) == ("<bos> hi" if prefix else "<bos>hi") and tok.decode(ids, skip_special=True) == "hi"
        # characters outside the vocabulary fall back to UTF-8 byte tokens
        pieces = [tok.id_to_token(i) for i in tok.encode("東", add_bos=False)]
        assert pieces == ["▁"] * prefix + ["<0xE6>", "<0x9D>", "<0xB1>"]


def test_smollm_splits_digits():
    # llama.cpp's "smollm" pre-tokenizer (like SmolLM2's tokenizer.json) splits digits one by one before
    # the byte-level BPE, even where a merged digit pair exists in the vocabulary.
    tokens = list("0123456789") + ["12", "Ġ", "a"]
    kv = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "smollm", "tokenizer.ggml.tokens": tokens,
          "tokenizer.ggml.merges": ["1 2"]}
    md = {k: v for k, v in kv.items()}
    tok = Tokenizer.from_gguf_metadata(md)
    assert [tok.id_to_token(i) for i in tok.encode("a 12")] == ["a", "Ġ", "1", "2"]
    md["tokenizer.ggml.pre"] = "default"
    assert [tok.id_to_token(i) for i in Tokenizer.from_gguf_metadata(md).encode("a 12")] == ["a", "Ġ", "12"]


@pytest.mark.parametrize("which", ["gpt2", "spm"])
def test_stream_decoder(which, gpt2_gguf, spm_gguf):
    tok = Tokenizer.from_gguf(gpt2_gguf if which == "gpt2" else spm_gguf)
    text = "Hi 東京 😀😀 naïve  café\n\nok ẞ."
    ids = tok.encode(text)
    stream = tok.stream_decoder()
    pieces = [stream.step(ids[:n]) for n in range(1, len(ids) + 1)]
    pieces.append(stream.finish(ids))
    assert "".join(pieces) == tok.decode(ids)
    assert not any("\ufffd" in p for p in pieces)
    # a multi-byte character split over byte tokens is held back until complete
    assert any(p == "" for p in pieces[:-1])


def test_stream_decoder_finish_flushes_incomplete_char(spm_gguf):
    tok = Tokenizer.from_gguf(spm_gguf)
    ids = tok.encode("a東", add_bos=False)[:-1]  # drop the last byte of 東
    stream = tok.stream_decoder()
    out = "".join(stream.step(ids[:n]) for n in range(1, len(ids) + 1))
    assert out == "a"
    rest = stream.finish(ids)
    assert rest == tok.decode(ids)[1:] and set(rest) == {"\ufffd"}  # one U+FFFD per dangling byte


@pytest.mark.parametrize("which", ["gpt2", "spm"])
def test_chat_template_matches_transformers(which, gpt2_gguf, spm_gguf):
    path = gpt2_gguf if which == "gpt2" else spm_gguf
    ours, theirs = Tokenizer.from_gguf(path), _hf(path)
    for gen in (True, False):
        for msgs in (MESSAGES, MESSAGES[:1], [{"role": "system", "content": "Be brief."}, *MESSAGES[:1]]):
            want = theirs.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen)
            assert ours.apply_chat_template(msgs, add_generation_prompt=gen) == want


def test_no_chat_template_is_a_clear_error():
    md = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a", "b"], "tokenizer.ggml.merges": []}
    with pytest.raises(UnsupportedError, match="no chat template"):
        Tokenizer.from_gguf_metadata(md).apply_chat_template(MESSAGES)


def test_from_hf_dir(tmp_path, gpt2_gguf, spm_gguf):
    for path in (gpt2_gguf, spm_gguf):
        hf = _hf(path)
        d = tmp_path / path.parent.name
        hf.save_pretrained(d)
        ours, ref = Tokenizer.from_dir(d), Tokenizer.from_gguf(path)
        for s in SAMPLES:
            assert ours.encode(s) == hf.encode(s), s
            if "Prepend" not in str(ref.backend.normalizer) or s[:1] != " ":
                assert ref.encode(s) == ours.encode(s), s
        assert (ours.bos_id, ours.eos_id, ours.add_bos, ours.eos_ids) == (ref.bos_id, ref.eos_id, ref.add_bos,
                                                                          ref.eos_ids)
        assert ours.apply_chat_template(MESSAGES) == ref.apply_chat_template(MESSAGES)


def test_bad_inputs(tmp_path):
    with pytest.raises(WeightError, match="tokenizer model 'bert' is not supported"):
        Tokenizer.from_gguf_metadata({"tokenizer.ggml.model": "bert", "tokenizer.ggml.tokens": ["a"]})
    with pytest.raises(WeightError, match="no tokenizer.ggml.tokens"):
        Tokenizer.from_gguf_metadata({"tokenizer.ggml.model": "gpt2"})
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not json")
    with pytest.raises(WeightError, match=r"tokenizer\.json: cannot read tokenizer"):
        Tokenizer.from_file(bad)


def test_derived_merges_are_cached_by_vocabulary(tmp_path, monkeypatch):
    """Merges derived from a vocabulary without a merge list (hand-ranked here) are kept in the
    compile cache: a second derivation reads them back; another vocabulary or a damaged entry
    derives them again."""
    from lightspeed.weights import tokenizer as T

    monkeypatch.setenv("LIGHTSPEED_CACHE_DIR", str(tmp_path))
    tokens = ["a", "b", "c", "ab", "bc", "abc", "ca"]
    want = [("a", "b"), ("b", "c"), ("ab", "c"), ("a", "bc"), ("c", "a")]  # by merged rank, longer left first
    assert T._derived_merges(tokens, range(len(tokens))) == want
    derived = T._merge_ids
    monkeypatch.setattr(T, "_merge_ids", lambda *a: pytest.fail("derived again"))
    assert T._derived_merges(tokens, range(len(tokens))) == want
    monkeypatch.setattr(T, "_merge_ids", derived)
    # priorities are part of the key: reversed ranks reverse the order of the merges
    assert T._derived_merges(tokens, [-float(i) for i in range(len(tokens))]) == [
        ("c", "a"), ("ab", "c"), ("a", "bc"), ("b", "c"), ("a", "b")]
    for f in tmp_path.glob("merges-*.json"):
        f.write_bytes(f.read_bytes()[:-3])
    assert T._derived_merges(tokens, range(len(tokens))) == want


# templates a weight file may carry that must end in a WeightError naming the file, within 2 s
# (the limit) plus the work of one check, never hang or raise jinja's own exceptions
BAD_TEMPLATES = {
    "a loop that writes nothing": "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}",
    "a huge string": "{{ 'x' * 10**9 }}",
    "a huge padding": "{{ 'x'.center(1000000000) }}",
    "too much output": "{% for i in range(99999) %}{{ 'y' * 99 }}{% endfor %}",
    "a syntax error": "{% for m in messages %",
    "a sandbox escape": "{{ ''.__class__.__mro__ }}",
}


def _plain(v):
    """A GGUF metadata value as the plain Python value write_gguf takes."""
    if hasattr(v, "tolist"):  # numpy scalars and arrays
        return v.tolist()
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


@pytest.mark.parametrize("source", list(BAD_TEMPLATES.values()), ids=list(BAD_TEMPLATES))
def test_a_bad_chat_template_is_a_weight_error_naming_the_file(tmp_path, gpt2_gguf, source):
    import time

    kv_path = tmp_path / "bad.gguf"
    from lightspeed.weights.gguf_file import GGUFFile

    with GGUFFile(gpt2_gguf) as g:
        kv = {k: _plain(v) for k, v in g.metadata.items() if k.startswith(("tokenizer.", "general."))}
    kv["tokenizer.chat_template"] = source
    write_gguf(kv_path, "llama", kv, {})
    t0 = time.monotonic()
    tok = Tokenizer.from_gguf(kv_path)  # loads: the template is known broken, reported when used
    assert tok.encode("hello") == Tokenizer.from_gguf(gpt2_gguf).encode("hello")
    with pytest.raises(WeightError, match=r"bad\.gguf.*chat template.*--no-chat"):
        tok.apply_chat_template([{"role": "user", "content": "hi"}])
    assert time.monotonic() - t0 < 2 * 2.0 + 2.0  # the check's limit, once per load, plus the fixtures


def test_a_template_that_refuses_a_conversation_says_so_as_a_weight_error():
    from lightspeed.weights.chat_template import ChatTemplate

    t = ChatTemplate("{% if messages[0].role == 'system' %}{{ raise_exception('no system role') }}{% endif %}ok",
                     "m.gguf")
    t.check()  # the sample conversation has no system message: not broken
    assert t.render(messages=[{"role": "user", "content": "x"}]) == "ok"
    with pytest.raises(WeightError, match="m.gguf.*no system role"):
        t.render(messages=[{"role": "system", "content": "x"}])
