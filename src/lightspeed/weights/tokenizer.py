"""Tokenizers for the model zoo: text <-> token ids, streaming decode and chat templates.

A `Tokenizer` wraps a `tokenizers.Tokenizer` (the Rust library behind Hugging Face's fast
tokenizers), built either from a `tokenizer.json` (Hugging Face directories) or from the vocabulary
in a GGUF file's metadata:

* `tokenizer.ggml.model == "gpt2"`: byte-level BPE with the file's merges; the pre-tokenizer split
  follows `tokenizer.ggml.pre` as llama.cpp does (e.g. SmolLM splits digits one by one).
* `tokenizer.ggml.model == "llama"`: SentencePiece-style BPE (`▁` for spaces, `<0xNN>` byte-fallback
  tokens). Gemma files carry no merges, so they are rebuilt from the vocabulary, ranked by vocabulary
  order (Gemma's scores do not follow its merge order; its ids do).

Control tokens (type 3, e.g. `<|im_end|>`) become special tokens and user-defined ones (type 4, e.g.
Gemma's runs of newlines) plain added tokens, so both are matched whole in the input text.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import UnsupportedError
from .chat_template import ChatTemplate
from .errors import WeightError

__all__ = ["Tokenizer", "StreamDecoder"]

# Tokens that end a turn or a document in the chat formats of the zoo's models; generation stops on
# any of them (when the vocabulary has it as a special token) as well as on the declared eos token.
_END_TOKENS = ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<|endoftext|>")

# llama.cpp's `tokenizer.ggml.pre` names -> the regex splitting text before byte-level BPE (llama-vocab.cpp).
_GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_PRE_SPLITS: dict[str, tuple[str, ...]] = {
    "default": (_GPT2_SPLIT,), "gpt2": (_GPT2_SPLIT,), "gpt-2": (_GPT2_SPLIT,),
    # digits one by one, then GPT-2's split
    **{name: (r"\p{N}", _GPT2_SPLIT) for name in ("smollm", "starcoder", "refact", "command-r", "codeshell",
                                                    "exaone", "minerva")},
    **{name: (_LLAMA3_SPLIT,) for name in ("llama3", "llama-v3", "llama-bpe", "falcon3", "smaug-bpe", "dbrx")},
    **{name: (_QWEN2_SPLIT,) for name in ("qwen2", "deepseek-r1-qwen")},
}

_CONTROL, _USER_DEFINED = 3, 4  # llama.cpp token types


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map used to spell byte-level BPE tokens."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def _derived_merges(tokens: Sequence[str], priority: Sequence[float]) -> list[tuple[str, str]]:
    """Merges implied by a vocabulary without a merge list: every split of a token into two tokens,
    ranked by the merged token's priority (lower first), longer left pieces first on ties.  Kept in
    the compile cache (``lightspeed.cache``) by a digest of the vocabulary and the priorities:
    deriving Gemma's 515k merges from its 262k tokens takes seconds, reading them back a fraction."""
    import hashlib
    import struct

    from .. import cache

    h = hashlib.sha256("\0".join(tokens).encode("utf-8", "surrogatepass"))
    h.update(b"".join(struct.pack("<d", float(p)) for p in priority))
    name = f"merges-{h.hexdigest()[:32]}"
    n = len(tokens)

    def valid(data: Any) -> None:
        if not (isinstance(data, list) and len(data) % 2 == 0 and all(type(i) is int and 0 <= i < n for i in data)):
            raise ValueError("not a flat list of token id pairs")
    pairs = cache.load(name, validate=valid)
    if pairs is None:
        pairs = [i for pair in _merge_ids(tokens, priority) for i in pair]
        cache.store(name, pairs)
    return [(tokens[pairs[k]], tokens[pairs[k + 1]]) for k in range(0, len(pairs), 2)]


def _merge_ids(tokens: Sequence[str], priority: Sequence[float]) -> list[tuple[int, int]]:
    index = {t: i for i, t in enumerate(tokens)}
    get = index.get
    found = []
    for i, tok in enumerate(tokens):
        for k in range(1, len(tok)):
            li = get(tok[:k])
            if li is None:
                continue
            ri = get(tok[k:])
            if ri is not None:
                found.append((priority[i], -k, k - len(tok), li, ri))
    found.sort()
    return [(m[3], m[4]) for m in found]


def _check_gguf_metadata(md: Mapping[str, Any], source: str) -> None:
    """Refuse tokenizer metadata of the wrong type or size with a WeightError naming the key (rather than
    an AttributeError or TypeError deep inside the build)."""
    import numpy as np

    def bad(key: str, want: str) -> WeightError:
        value = md[key]
        shown = f"an array of {len(value)} {value.dtype}" if isinstance(value, np.ndarray) else repr(value)[:80]
        return WeightError(f"{source}: GGUF metadata {key!r} is {shown}, expected {want}")

    tokens = md.get("tokenizer.ggml.tokens")
    if tokens is not None and (not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens)):
        raise bad("tokenizer.ggml.tokens", "an array of strings")
    n = len(tokens or ())
    for key in ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.chat_template", "general.name",
                "general.architecture"):
        if key in md and not isinstance(md[key], str):
            raise bad(key, "a string")
    merges = md.get("tokenizer.ggml.merges")
    if merges is not None and (not isinstance(merges, list)
                               or not all(isinstance(m, str) and " " in m for m in merges)):
        raise bad("tokenizer.ggml.merges", "an array of strings of two space-separated tokens")
    for key, kinds in (("tokenizer.ggml.token_type", "iu"), ("tokenizer.ggml.scores", "iuf")):
        if key in md:
            v = md[key]
            if not isinstance(v, np.ndarray) or v.ndim != 1 or v.dtype.kind not in kinds or len(v) != n:
                raise bad(key, f"an array of {n} {'integers' if kinds == 'iu' else 'numbers'} (one per token)")
    for key in ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id",
                "tokenizer.ggml.padding_token_id"):
        if key in md:
            v = md[key]
            if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < n:
                raise bad(key, f"a token id in 0..{n - 1}")
    for key in ("tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token", "tokenizer.ggml.add_space_prefix"):
        if key in md and not isinstance(md[key], bool):
            raise bad(key, "a boolean")


def _bpe(source: str, make: Any) -> Any:
    """A tokenizers BPE tokenizer from `make()`; its construction errors (a merge of tokens not in the
    vocabulary, ...) are bare Exceptions, turned into WeightError naming the file."""
    from tokenizers import Tokenizer as RustTokenizer

    try:
        return RustTokenizer(make())
    except Exception as e:  # noqa: BLE001
        raise WeightError(f"{source}: cannot build the tokenizer from the GGUF vocabulary: {e}") from None


def _gguf_backend(md: Mapping[str, Any], source: str) -> Any:
    from tokenizers import AddedToken, Regex, decoders, normalizers, pre_tokenizers
    from tokenizers.models import BPE

    _check_gguf_metadata(md, source)
    kind = md.get("tokenizer.ggml.model")
    tokens = list(md.get("tokenizer.ggml.tokens") or [])
    if not tokens:
        raise WeightError(f"{source}: no tokenizer.ggml.tokens in the GGUF metadata")
    types = list(md.get("tokenizer.ggml.token_type", [1] * len(tokens)))
    merges_raw = md.get("tokenizer.ggml.merges")
    merges = [tuple(m.split(" ", 1)) for m in merges_raw] if merges_raw is not None else None

    if kind == "gpt2":
        alphabet = set(_bytes_to_unicode().values())
        spell = _bytes_to_unicode()
        # Normal tokens must be spelled in the byte alphabet; a few converters store them raw.
        spelled = [t if types[i] in (_CONTROL, _USER_DEFINED) or set(t) <= alphabet
                   else "".join(spell[b] for b in t.encode("utf-8")) for i, t in enumerate(tokens)]
        if merges is None:
            raise WeightError(f"{source}: byte-level BPE vocabulary without tokenizer.ggml.merges")
        tok = _bpe(source, lambda: BPE({t: i for i, t in enumerate(spelled)}, merges, fuse_unk=False))
        pre = md.get("tokenizer.ggml.pre", "default")
        if pre not in _PRE_SPLITS:
            warnings.warn(f"{source}: unknown tokenizer.ggml.pre {pre!r}; splitting text like GPT-2", stacklevel=3)
            pre = "default"
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in _PRE_SPLITS[pre]]
            + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
    elif kind == "llama":
        # Whitespace runs are stored with real spaces (llama.cpp writes user-defined pieces unescaped);
        # SentencePiece sees them after spaces became "▁", so spell them that way.
        spelled = [t.replace(" ", "▁") if t and not t.strip() else t for t in tokens]
        if merges is None:
            is_gemma = str(md.get("general.architecture", "")).startswith("gemma")
            scores = md.get("tokenizer.ggml.scores")
            if is_gemma or scores is None:
                priority: Sequence[float] = range(len(spelled))
            else:
                priority = [-float(s) for s in scores]
            merges = _derived_merges(spelled, priority)
        unk_id = md.get("tokenizer.ggml.unknown_token_id")
        unk = spelled[unk_id] if unk_id is not None else None
        tok = _bpe(source, lambda: BPE({t: i for i, t in enumerate(spelled)}, merges, unk_token=unk, fuse_unk=True,
                                        byte_fallback=True))
        steps = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
        if md.get("tokenizer.ggml.add_space_prefix", True):
            # As llama.cpp (and SentencePiece's add_dummy_prefix) do: a space before the text and after every
            # added token, even when the text already starts with one. transformers' Llama tokenizer
            # (Metaspace, prepend_scheme="first") skips it in both cases, which loses a space in
            # decode(encode(" x")). Decoding strips the first space.
            tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
            steps.append(decoders.Strip(" ", 1, 0))
        else:
            tok.normalizer = normalizers.Replace(" ", "▁")
        tok.decoder = decoders.Sequence(steps)
    else:
        raise WeightError(f"{source}: GGUF tokenizer model {kind!r} is not supported (gpt2 and llama are)")

    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for i, t in enumerate(tokens) if types[i] == _CONTROL])
    tok.add_tokens([AddedToken(t, special=False, normalized=False)
                    for i, t in enumerate(tokens) if types[i] == _USER_DEFINED and spelled[i] == t])
    if tok.get_vocab_size(with_added_tokens=True) != len(tokens):
        raise WeightError(f"{source}: tokenizer has {tok.get_vocab_size(with_added_tokens=True)} tokens after "
                          f"building, the GGUF vocabulary {len(tokens)} (duplicate tokens?)")
    return tok


def _token_text(value: Any) -> str | None:
    """tokenizer_config.json spells a token as a string or as {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _ids(value: Any, where: str = "config") -> list[int]:
    if value is None:
        return []
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return list(value)
    raise WeightError(f"{where}: token id {value!r} is not an integer or a list of integers")


class Tokenizer:
    """Text <-> token ids for one model, plus its special tokens and chat template.

    Build with `Tokenizer.from_gguf(path)`, `Tokenizer.from_dir(hf_dir)` or `Tokenizer.from_file(json)`;
    `lightspeed.weights.load` builds it for you."""

    def __init__(self, backend: Any, *, bos_id: int | None = None, eos_id: int | None = None,
                 eos_ids: Iterable[int] = (), add_bos: bool = False, chat_template: str | None = None,
                 name: str = "tokenizer", source: str | None = None):
        self.backend = backend
        self.source = source or name  # the file the tokenizer (and its chat template) came from
        self.bos_id = bos_id
        self.eos_id = eos_id
        self.add_bos = add_bos
        self.chat_template = chat_template
        self.name = name
        ends = set(eos_ids) | ({eos_id} if eos_id is not None else set())
        specials = {i for i, t in backend.get_added_tokens_decoder().items() if t.special}
        for t in _END_TOKENS:
            i = backend.token_to_id(t)
            if i is not None and i in specials:
                ends.add(i)
        self.eos_ids: set[int] = ends
        self._template: ChatTemplate | None = None
        self._template_error: WeightError | None = None
        if chat_template:  # compiled and dry-run at load; an error is reported when the template is used
            try:
                self._chat()
            except WeightError:
                pass

    # -- construction --------------------------------------------------------------------------------

    @classmethod
    def from_gguf(cls, path: str | os.PathLike) -> Tokenizer:
        """The tokenizer described by a GGUF file's metadata."""
        from .gguf_file import GGUFFile

        with GGUFFile(path) as g:
            return cls.from_gguf_metadata(g.metadata, source=str(path))

    @classmethod
    def from_gguf_metadata(cls, metadata: Mapping[str, Any], source: str = "GGUF") -> Tokenizer:
        """Build from GGUF metadata (`tokenizer.ggml.*`, `tokenizer.chat_template`)."""
        backend = _gguf_backend(metadata, source)
        kind = metadata.get("tokenizer.ggml.model")
        bos = metadata.get("tokenizer.ggml.bos_token_id")
        eos = metadata.get("tokenizer.ggml.eos_token_id")
        # llama.cpp adds BOS to SentencePiece vocabularies unless the file says otherwise.
        add_bos = bool(metadata.get("tokenizer.ggml.add_bos_token", kind == "llama")) and bos is not None
        return cls(backend, bos_id=None if bos is None else int(bos), eos_id=None if eos is None else int(eos),
                   add_bos=add_bos, chat_template=metadata.get("tokenizer.chat_template"),
                   name=str(metadata.get("general.name", source)), source=source)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> Tokenizer:
        """Build from a `tokenizer.json`; `tokenizer_config.json`, `chat_template.jinja`,
        `generation_config.json` and `config.json` next to it supply special tokens and the template."""
        from tokenizers import Tokenizer as RustTokenizer

        path = Path(path)
        try:
            backend = RustTokenizer.from_file(str(path))
        except Exception as e:  # tokenizers raises a bare Exception on malformed files
            raise WeightError(f"{path}: cannot read tokenizer: {e}") from e
        directory = path.parent

        def read(name: str) -> dict[str, Any]:
            p = directory / name
            if not p.exists():
                return {}
            try:
                data = json.loads(p.read_text(encoding="utf-8"))
            except ValueError as e:
                raise WeightError(f"{p}: invalid JSON: {e}") from e
            return data if isinstance(data, dict) else {}

        tcfg, gen, model_cfg = read("tokenizer_config.json"), read("generation_config.json"), read("config.json")

        def token_id(key: str) -> int | None:
            text = _token_text(tcfg.get(key))
            if text is not None and backend.token_to_id(text) is not None:
                return backend.token_to_id(text)
            ids = (_ids(gen.get(key + "_id"), f"{directory / 'generation_config.json'}: {key}_id")
                   or _ids(model_cfg.get(key + "_id"), f"{directory / 'config.json'}: {key}_id"))
            return ids[0] if ids else None

        bos, eos = token_id("bos_token"), token_id("eos_token")
        if "add_bos_token" in tcfg:
            add_bos = bool(tcfg["add_bos_token"]) and bos is not None
        else:  # a post-processor that prepends BOS says the model wants it
            add_bos = bos is not None and backend.encode("a", add_special_tokens=True).ids[:1] == [bos]
        template = tcfg.get("chat_template")
        if isinstance(template, list):  # named templates: use the default one
            template = next((t.get("template") for t in template
                             if isinstance(t, dict) and t.get("name") == "default"), None)
        if template is not None and not isinstance(template, str):
            raise WeightError(f"{directory / 'tokenizer_config.json'}: chat_template is {str(template)[:80]}, "
                              f"expected a string or a list of named templates")
        template_file = directory / "tokenizer_config.json"
        if (directory / "chat_template.jinja").exists():
            template_file = directory / "chat_template.jinja"
            template = template_file.read_text(encoding="utf-8")
        eos_ids = (_ids(gen.get("eos_token_id"), f"{directory / 'generation_config.json'}: eos_token_id")
                   + _ids(model_cfg.get("eos_token_id"), f"{directory / 'config.json'}: eos_token_id"))
        return cls(backend, bos_id=bos, eos_id=eos, eos_ids=eos_ids, add_bos=add_bos, chat_template=template,
                   name=directory.name, source=str(template_file))

    @classmethod
    def from_dir(cls, directory: str | os.PathLike) -> Tokenizer:
        """Build from a Hugging Face model directory holding tokenizer.json."""
        p = Path(directory) / "tokenizer.json"
        if not p.exists():
            raise WeightError(f"{directory}: no tokenizer.json")
        return cls.from_file(p)

    # -- encoding and decoding -------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    def id_to_token(self, i: int) -> str | None:
        return self.backend.id_to_token(i)

    def encode(self, text: str, add_bos: bool | None = None) -> list[int]:
        """Token ids of `text`. Special tokens written in the text (e.g. `<|im_start|>`) are matched.
        `add_bos=None` follows the model's convention (`self.add_bos`) but adds no second BOS when the text
        already starts with one (chat templates such as Gemma's write `<bos>` themselves)."""
        ids = self.backend.encode(text, add_special_tokens=False).ids
        if self.bos_id is not None and (add_bos or (add_bos is None and self.add_bos and ids[:1] != [self.bos_id])):
            ids = [self.bos_id, *ids]
        return ids

    def decode(self, ids: Sequence[int], skip_special: bool = False) -> str:
        """The text of `ids`; `skip_special` drops special tokens such as `<bos>` and `<|im_end|>`."""
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special)

    def stream_decoder(self, skip_special: bool = False) -> StreamDecoder:
        """A helper that turns the growing list of generated ids into newly completed text."""
        return StreamDecoder(self, skip_special=skip_special)

    # -- chat ------------------------------------------------------------------------------------------

    def apply_chat_template(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True,
                            **kwargs: Any) -> str:
        """Render `messages` ([{"role": ..., "content": ...}, ...]) with the model's jinja chat template,
        as transformers' `apply_chat_template(..., tokenize=False)` does. Extra keyword arguments
        (e.g. `tools`) are passed to the template."""
        if not self.chat_template:
            raise UnsupportedError(f"{self.name}: this model has no chat template (a base model?); "
                                   f"format the prompt yourself")
        template = self._chat()
        bos = self.id_to_token(self.bos_id) if self.bos_id is not None else ""
        eos = self.id_to_token(self.eos_id) if self.eos_id is not None else ""
        return template.render(messages=list(messages), add_generation_prompt=add_generation_prompt,
                               bos_token=bos, eos_token=eos, **kwargs)

    def _chat(self) -> ChatTemplate:
        """The compiled chat template, dry-run once (see :mod:`.chat_template`); a broken one raises
        its WeightError every time it is asked for."""
        if self._template is None and self._template_error is None:
            try:
                self._template = ChatTemplate(self.chat_template, self.source)
                self._template.check()
            except WeightError as e:
                self._template, self._template_error = None, e
        if self._template_error is not None:
            raise WeightError(f"{self._template_error} (use the prompt as raw text: lightspeed run --no-chat)")
        return self._template

    def __repr__(self) -> str:
        return (f"Tokenizer({self.name!r}, vocab={self.vocab_size}, bos={self.bos_id}, "
                f"eos={sorted(self.eos_ids)}, add_bos={self.add_bos})")


class StreamDecoder:
    """Incremental detokenisation for streaming generation.

    Call `step(ids)` with *all* ids generated so far after each new token; it returns the text that
    became complete since the last call. Text is held back while it ends in an incomplete UTF-8
    sequence (a multi-byte character split across byte tokens) and decoding works on a short window of
    ids, so each step costs O(1) in the sequence length. `finish(ids)` returns whatever is left.
    Concatenating every step's output and `finish` equals `decode(ids)`."""

    def __init__(self, tokenizer: Tokenizer, skip_special: bool = False):
        self.tokenizer = tokenizer
        self.skip_special = skip_special
        self._prefix = 0  # start of the window: decoding context already emitted
        self._read = 0  # ids before this are emitted

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(ids, skip_special=self.skip_special)

    def step(self, ids: Sequence[int]) -> str:
        # Decode the window with and without the new ids: the difference is the new text. Decoding with
        # some context keeps SentencePiece's leading-space handling and byte merging right.
        before = self._decode(ids[self._prefix:self._read])
        after = self._decode(ids[self._prefix:])
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self._prefix, self._read = self._read, len(ids)
            return after[len(before):]
        return ""

    def finish(self, ids: Sequence[int]) -> str:
        """The rest of the text, including an incomplete trailing character (as U+FFFD)."""
        before = self._decode(ids[self._prefix:self._read])
        after = self._decode(ids[self._prefix:])
        self._prefix = self._read = len(ids)
        return after[len(before):]
