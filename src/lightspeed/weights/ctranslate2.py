"""CTranslate2 ``model.bin`` reader (and a writer, for tests), plus the Whisper name mapping.

Format (little endian; what ``ctranslate2/specs/model_spec.py`` writes and ``src/models/model.cc``
reads, binary version 6)::

    u32 binary_version                 (this reader takes 4..6; 4 added dtype ids and byte counts)
    str spec_name                      ("WhisperSpec")
    u32 spec_revision
    u32 num_variables
    num_variables x:
        str name                       ("encoder/layer_0/self_attention/linear_0/weight")
        u8  rank, rank x u32 dims
        u8  dtype id                   (0 float32, 1 int8, 2 int16, 3 int32, 4 float16, 5 bfloat16)
        u32 num_bytes, then the raw row-major data
    u32 num_aliases
    num_aliases x: str alias, str variable name   ("decoder/projection/weight" -> the embedding)

where ``str`` is a u16 length that counts a trailing NUL, then the UTF-8 bytes and the NUL.  The
model's other settings live beside it in ``config.json`` (CTranslate2's, not Hugging Face's);
scalar variables (``decoder/num_heads``, ``decoder/activation``, ...) carry the architecture's
knobs.  Before version 4 a variable stored its item size instead of a dtype id and its element
count instead of a byte count; those files predate Whisper support, so they are refused.

Quantised weights (``int8``/``int16`` with a ``<name>_scale`` variable) are dequantised as
CTranslate2 quantises them: ``q = round(w * scale)``, so ``w = q / scale`` (one scale per row).
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import dtypes as ldt
from .errors import WeightError
from .safetensors_dir import read_json

__all__ = ["CT2Model", "WeightError", "read_ct2", "write_ct2", "whisper_config", "whisper_state_dict",
           "load_whisper", "DTYPES"]

# CTranslate2's DataType enum (include/ctranslate2/types.h), in order; bfloat16 as lightspeed's
# dtype, whose numpy type (ml_dtypes, ~1 s to import) is made only when a file holds one
DTYPES: dict[int, Any] = {
    0: np.dtype("<f4"), 1: np.dtype("i1"), 2: np.dtype("<i2"), 3: np.dtype("<i4"),
    4: np.dtype("<f2"), 5: ldt.bfloat16,
}


def _np(d: Any) -> np.dtype:
    return d.np if isinstance(d, ldt.DType) else d
MIN_VERSION, MAX_VERSION = 4, 6
# CTranslate2 stores the rank in a byte; no variable of a real model has more than 4 dims
MAX_RANK = 8
# ActivationType enum (include/ctranslate2/ops/activation.h)
ACTIVATIONS = {0: "relu", 1: "gelu_tanh", 2: "swish", 3: "gelu", 4: "gelu_sigmoid", 5: "tanh"}


@dataclass
class CT2Model:
    """One parsed ``model.bin``: raw arrays (views into the file's bytes, dtypes as stored)."""

    path: Path
    version: int
    spec: str
    revision: int
    variables: dict[str, np.ndarray]
    aliases: dict[str, str] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)  # config.json beside model.bin, if any

    def get(self, name: str) -> np.ndarray:
        """A variable by name or alias; a missing one raises WeightError naming file and variable."""
        target = self.aliases.get(name, name)
        try:
            return self.variables[target]
        except KeyError:
            raise WeightError(f"{self.path}: variable {name!r} is missing "
                              f"(spec {self.spec}, {len(self.variables)} variables)") from None

    def float32(self, name: str) -> np.ndarray:
        """A weight as float32, dequantised when the file stores it as int8/int16 with a scale."""
        a = self.get(name)
        if a.dtype.kind == "f" or (a.dtype.kind == "V" and a.dtype == _np(DTYPES[5])):
            return a.astype(np.float32)
        scale_name = f"{self.aliases.get(name, name)}_scale"
        if scale_name in self.variables:
            scale = self.variables[scale_name].astype(np.float32)
            if a.ndim != 2 or scale.shape not in ((a.shape[0],), ()):
                raise WeightError(f"{self.path}: variable {scale_name!r} of shape {scale.shape} does not scale "
                                  f"the rows of {name!r} of shape {a.shape}")
            return a.astype(np.float32) / (scale[:, None] if scale.ndim else scale)
        raise WeightError(f"{self.path}: variable {name!r} is {a.dtype} without a {scale_name!r}: not a float weight")

    def scalar(self, name: str) -> int:
        a = self.get(name)
        if a.size != 1:
            raise WeightError(f"{self.path}: variable {name!r} should be a scalar, has shape {a.shape}")
        v = a.reshape(())
        if a.dtype.kind != "i" and not (np.isfinite(v) and float(v) == int(v)):
            raise WeightError(f"{self.path}: variable {name!r} is {v!r}, not an integer")
        return int(v)


class _Reader:
    """Bounds-checked cursor over the file's bytes; every failure names the file and what it read."""

    def __init__(self, data: bytes | memoryview, path: Path):
        self.data, self.path, self.pos = data, path, 0

    def take(self, n: int, what: str) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise WeightError(f"{self.path}: truncated file: {what} needs {n} bytes at offset {self.pos}, "
                              f"only {len(self.data) - self.pos} left (file size {len(self.data)})")
        out = memoryview(self.data)[self.pos:self.pos + n]
        self.pos += n
        return out

    def u(self, fmt: str, what: str) -> int:
        return struct.unpack("<" + fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str) -> str:
        n = self.u("H", f"length of {what}")
        raw = bytes(self.take(n, what))
        if n == 0 or raw[-1] != 0:
            raise WeightError(f"{self.path}: corrupt file: {what} at offset {self.pos - n} is not NUL-terminated")
        try:
            return raw[:-1].decode("utf-8")
        except UnicodeDecodeError:
            raise WeightError(f"{self.path}: corrupt file: {what} at offset {self.pos - n} is not UTF-8") from None


def read_ct2(path: str | Path) -> CT2Model:
    """Parse a CTranslate2 ``model.bin`` (or a directory holding one, with its config.json)."""
    path = Path(path)
    if path.is_dir():
        path = path / "model.bin"
    try:
        data = path.read_bytes()
    except OSError as e:
        raise WeightError(f"{path}: cannot read: {e}") from None
    r = _Reader(data, path)
    version = r.u("I", "binary version")
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise WeightError(f"{path}: binary version {version} is not supported (this reader takes "
                          f"{MIN_VERSION}..{MAX_VERSION}); is this a CTranslate2 model.bin?")
    spec = r.string("spec name")
    revision = r.u("I", "spec revision")
    count = r.u("I", "variable count")
    # each variable takes at least 9 bytes (name length and NUL, rank, dtype, byte count): a count the
    # rest of the file cannot hold is refused before the loop
    if count * 9 > len(data) - r.pos:
        raise WeightError(f"{path}: corrupt file: variable count {count} cannot fit in the "
                          f"{len(data) - r.pos} bytes left (truncated file?)")
    variables: dict[str, np.ndarray] = {}
    for i in range(count):
        name = r.string(f"name of variable #{i}")
        rank = r.u("B", f"rank of variable {name!r}")
        if rank > MAX_RANK:
            raise WeightError(f"{path}: corrupt file: variable {name!r} has rank {rank} (at most {MAX_RANK})")
        shape = tuple(r.u("I", f"dim {k} of variable {name!r}") for k in range(rank))
        type_id = r.u("B", f"dtype of variable {name!r}")
        if type_id not in DTYPES:
            raise WeightError(f"{path}: corrupt file: variable {name!r} has unknown dtype id {type_id} "
                              f"at offset {r.pos - 1}")
        dtype = _np(DTYPES[type_id])
        nbytes = r.u("I", f"byte count of variable {name!r}")
        # Python ints: a product of huge dims must not wrap around to the stored byte count
        want = math.prod(shape) * dtype.itemsize
        if nbytes != want:
            raise WeightError(f"{path}: corrupt file: variable {name!r} of shape {shape} and dtype {dtype} "
                              f"needs {want} bytes, the file says {nbytes}")
        buf = r.take(nbytes, f"data of variable {name!r} (shape {shape}, {dtype})")
        if name in variables:
            raise WeightError(f"{path}: corrupt file: variable {name!r} appears twice")
        # a read-only view of the file's bytes: no copy until a caller converts it
        variables[name] = np.frombuffer(buf, dtype=dtype).reshape(shape)
    aliases: dict[str, str] = {}
    n_aliases = r.u("I", "alias count")
    if n_aliases * 4 > len(data) - r.pos:  # two strings of at least 2 bytes each
        raise WeightError(f"{path}: corrupt file: alias count {n_aliases} cannot fit in the "
                          f"{len(data) - r.pos} bytes left")
    for i in range(n_aliases):
        alias = r.string(f"name of alias #{i}")
        aliases[alias] = r.string(f"target of alias {alias!r}")
        if aliases[alias] not in variables:
            raise WeightError(f"{path}: corrupt file: alias {alias!r} points at missing variable {aliases[alias]!r}")
        if alias in variables:
            raise WeightError(f"{path}: corrupt file: alias {alias!r} has the name of a variable")
    if r.pos != len(data):
        raise WeightError(f"{path}: corrupt file: {len(data) - r.pos} unexpected bytes after the aliases "
                          f"(offset {r.pos})")
    config: dict[str, Any] = {}
    cfg_path = path.with_name("config.json")
    if cfg_path.is_file():
        config = read_json(cfg_path)
        if not isinstance(config, dict):
            raise WeightError(f"{cfg_path}: not a JSON object")
    return CT2Model(path, version, spec, revision, variables, aliases, config)


def write_ct2(path: str | Path, spec: str, variables: Mapping[str, np.ndarray],
              aliases: Mapping[str, str] | None = None, revision: int = 1, version: int = 6) -> None:
    """Write a ``model.bin`` in the format above (tests build small models with it)."""
    def string(s: str) -> bytes:
        raw = s.encode("utf-8") + b"\0"
        return struct.pack("<H", len(raw)) + raw

    out = [struct.pack("<I", version), string(spec), struct.pack("<I", revision),
           struct.pack("<I", len(variables))]
    for name, value in variables.items():
        a = np.asarray(value)  # not ascontiguousarray: it turns scalars into shape (1,)
        dtype = a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype
        type_id = next((k for k, v in DTYPES.items() if _np(v) == np.dtype(dtype)), None)
        if type_id is None:
            raise WeightError(f"{path}: variable {name!r}: dtype {a.dtype} has no CTranslate2 id")
        out += [string(name), struct.pack("<B", a.ndim), *(struct.pack("<I", d) for d in a.shape),
                struct.pack("<BI", type_id, a.nbytes), a.astype(dtype, copy=False).tobytes()]
    aliases = dict(aliases or {})
    out.append(struct.pack("<I", len(aliases)))
    for alias, target in aliases.items():
        out += [string(alias), string(target)]
    Path(path).write_bytes(b"".join(out))


# ---------------------------------------------------------------------------------------- Whisper
_LAYER = re.compile(r"(encoder|decoder)/layer_(\d+)/")


def _layer_count(m: CT2Model, side: str) -> int:
    idx = {int(mt.group(2)) for n in m.variables if (mt := _LAYER.match(n)) and mt.group(1) == side}
    if idx != set(range(len(idx))):
        raise WeightError(f"{m.path}: {side} layers are not numbered 0..n-1: {sorted(idx)}")
    return len(idx)


def _check_whisper(m: CT2Model) -> None:
    if m.spec != "WhisperSpec":
        raise WeightError(f"{m.path}: spec is {m.spec!r}, not 'WhisperSpec'")
    # the knobs this implementation hard-codes (HF Whisper's architecture) must hold in the file
    want = {"decoder/activation": 3, "decoder/pre_norm": 1, "decoder/scale_embeddings": 0, "decoder/alibi": 0,
            "decoder/start_from_zero_embedding": 0}
    for name, value in want.items():
        if name in m.variables and (got := m.scalar(name)) != value:
            if name.endswith("activation"):
                got, value = ACTIVATIONS.get(got, got), ACTIVATIONS[value]
            raise WeightError(f"{m.path}: variable {name!r} is {got}, this Whisper implementation needs {value}")


def _token_id(m: CT2Model, vocab: list[str] | None, token: str, default: int) -> int:
    if vocab is None:
        return default
    try:
        return vocab.index(token)
    except ValueError:
        raise WeightError(f"{m.path.with_name('vocabulary.txt')}: token {token!r} is missing") from None


def _vocabulary(m: CT2Model) -> list[str] | None:
    p = m.path.with_name("vocabulary.txt")
    if not p.is_file():
        return None
    try:
        return p.read_text(encoding="utf-8").split("\n")
    except (OSError, UnicodeDecodeError) as e:
        raise WeightError(f"{p}: cannot read the vocabulary: {e}") from None


def _rank(m: CT2Model, name: str, rank: int) -> np.ndarray:
    a = m.get(name)
    if a.ndim != rank or 0 in a.shape:
        raise WeightError(f"{m.path}: variable {name!r} has shape {a.shape}, expected {rank} non-zero dims")
    return a


def _token_list(m: CT2Model, key: str, vocab_size: int) -> list[int]:
    """A list of token ids from config.json (e.g. ``suppress_ids``), each checked against the vocabulary."""
    v = m.config.get(key, [])
    if not isinstance(v, list) or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < vocab_size
                                          for i in v):
        raise WeightError(f"{m.path.with_name('config.json')}: {key} is {str(v)[:80]}, expected a list of token "
                          f"ids in 0..{vocab_size - 1}")
    return list(v)


def whisper_config(m: CT2Model) -> dict[str, Any]:
    """Hugging Face ``WhisperConfig`` fields, read off the variables' shapes and the scalar knobs."""
    _check_whisper(m)
    emb = _rank(m, "decoder/embeddings/weight", 2)
    conv1 = _rank(m, "encoder/conv1/weight", 3)
    for name in ("encoder/position_encodings/encodings", "decoder/position_encodings/encodings",
                 "encoder/layer_0/ffn/linear_0/weight", "decoder/layer_0/ffn/linear_0/weight"):
        _rank(m, name, 2)
    vocab = _vocabulary(m)
    if vocab is not None and vocab and vocab[-1] == "":
        vocab = vocab[:-1]
    if vocab is not None and len(vocab) != emb.shape[0]:
        raise WeightError(f"{m.path.with_name('vocabulary.txt')}: {len(vocab)} tokens, but "
                          f"'decoder/embeddings/weight' has {emb.shape[0]} rows")
    # defaults: the English-only GPT-2 layout (tiny.en ... medium.en)
    eos = _token_id(m, vocab, "<|endoftext|>", 50256)
    sot = _token_id(m, vocab, "<|startoftranscript|>", 50257)
    no_ts = _token_id(m, vocab, "<|notimestamps|>", 50362)
    cfg: dict[str, Any] = {
        "model_type": "whisper",
        "vocab_size": int(emb.shape[0]),
        "num_mel_bins": int(conv1.shape[1]),
        "d_model": int(emb.shape[1]),
        "encoder_layers": _layer_count(m, "encoder"),
        "decoder_layers": _layer_count(m, "decoder"),
        "encoder_attention_heads": m.scalar("encoder/num_heads"),
        "decoder_attention_heads": m.scalar("decoder/num_heads"),
        "encoder_ffn_dim": int(m.get("encoder/layer_0/ffn/linear_0/weight").shape[0]),
        "decoder_ffn_dim": int(m.get("decoder/layer_0/ffn/linear_0/weight").shape[0]),
        "max_source_positions": int(m.get("encoder/position_encodings/encodings").shape[0]),
        "max_target_positions": int(m.get("decoder/position_encodings/encodings").shape[0]),
        "activation_function": "gelu",
        "scale_embedding": False,
        "tie_word_embeddings": m.aliases.get("decoder/projection/weight") == "decoder/embeddings/weight"
        or "decoder/projection/weight" not in m.variables,
        "bos_token_id": sot,
        "decoder_start_token_id": sot,
        "eos_token_id": eos,
        "pad_token_id": eos,
        "no_timestamps_token_id": no_ts,
        "suppress_tokens": _token_list(m, "suppress_ids", int(emb.shape[0])),
        "begin_suppress_tokens": _token_list(m, "suppress_ids_begin", int(emb.shape[0])),
    }
    for side in ("encoder", "decoder"):
        heads = cfg[f"{side}_attention_heads"]
        if not 0 < heads <= cfg["d_model"] or cfg["d_model"] % heads:
            raise WeightError(f"{m.path}: variable '{side}/num_heads' is {heads}, which does not divide d_model "
                              f"{cfg['d_model']} (from 'decoder/embeddings/weight')")
        if cfg[f"{side}_layers"] == 0:
            raise WeightError(f"{m.path}: no {side} layers ('{side}/layer_0/...' variables)")
    if "alignment_heads" in m.config:
        heads = m.config["alignment_heads"]
        if not isinstance(heads, list) or not all(
                isinstance(h, list) and len(h) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in h)
                and 0 <= h[0] < cfg["decoder_layers"] and 0 <= h[1] < cfg["decoder_attention_heads"] for h in heads):
            raise WeightError(f"{m.path.with_name('config.json')}: alignment_heads is {str(heads)[:80]}, expected "
                              f"[layer, head] pairs within {cfg['decoder_layers']} layers and "
                              f"{cfg['decoder_attention_heads']} heads")
        cfg["alignment_heads"] = heads
    _check_variables(m, cfg)
    # multilingual vocabularies (51865 rows) hold a language token after <|startoftranscript|>
    cfg["is_multilingual"] = cfg["vocab_size"] >= 51865
    return cfg


def _expected_variables(cfg: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """CTranslate2 variable name -> shape for a Whisper model of HF config `cfg` (what its converter writes)."""
    d, nm = cfg["d_model"], cfg["num_mel_bins"]
    want: dict[str, tuple[int, ...]] = {
        "encoder/conv1/weight": (d, nm, 3), "encoder/conv1/bias": (d,),
        "encoder/conv2/weight": (d, d, 3), "encoder/conv2/bias": (d,),
        "encoder/position_encodings/encodings": (cfg["max_source_positions"], d),
        "decoder/position_encodings/encodings": (cfg["max_target_positions"], d),
        "decoder/embeddings/weight": (cfg["vocab_size"], d),
    }
    if not cfg["tie_word_embeddings"]:
        want["decoder/projection/weight"] = (cfg["vocab_size"], d)

    def ln(p: str) -> None:
        want[f"{p}/gamma"] = want[f"{p}/beta"] = (d,)

    def lin(p: str, rows: int, cols: int) -> None:
        want[f"{p}/weight"], want[f"{p}/bias"] = (rows, cols), (rows,)

    for side in ("encoder", "decoder"):
        f = cfg[f"{side}_ffn_dim"]
        ln(f"{side}/layer_norm")
        for i in range(cfg[f"{side}_layers"]):
            p = f"{side}/layer_{i}"
            ln(f"{p}/self_attention/layer_norm")
            lin(f"{p}/self_attention/linear_0", 3 * d, d)
            lin(f"{p}/self_attention/linear_1", d, d)
            if side == "decoder":
                ln(f"{p}/attention/layer_norm")
                lin(f"{p}/attention/linear_0", d, d)
                lin(f"{p}/attention/linear_1", 2 * d, d)
                lin(f"{p}/attention/linear_2", d, d)
            ln(f"{p}/ffn/layer_norm")
            lin(f"{p}/ffn/linear_0", f, d)
            lin(f"{p}/ffn/linear_1", d, f)
    return want


def _check_variables(m: CT2Model, cfg: dict[str, Any]) -> None:
    """Every variable the mapping reads (weights, biases, norms, and their int8 scales) against the shape
    the config implies, before any is converted."""
    for name, shape in _expected_variables(cfg).items():
        target = m.aliases.get(name, name)
        if target not in m.variables:
            continue  # reported by name when the mapping asks for it
        got = m.variables[target].shape
        if got != shape:
            raise WeightError(f"{m.path}: variable {name!r} has shape {got}, expected {shape} (d_model "
                              f"{cfg['d_model']}, from 'decoder/embeddings/weight')")
        scale = m.variables.get(f"{target}_scale")
        if scale is not None and scale.shape not in ((shape[0],), ()):
            raise WeightError(f"{m.path}: variable '{target}_scale' has shape {scale.shape}, expected "
                              f"{(shape[0],)} or a scalar")


def _split_rows(m: CT2Model, name: str, parts: int) -> list[np.ndarray]:
    a = m.float32(name)
    if a.shape[0] % parts:
        raise WeightError(f"{m.path}: variable {name!r} of shape {a.shape} does not split into {parts} fused parts")
    return np.split(a, parts, axis=0)


def whisper_state_dict(m: CT2Model) -> dict[str, np.ndarray]:
    """Hugging Face ``WhisperForConditionalGeneration`` state-dict names -> float32 arrays.

    CTranslate2 fuses projections: self-attention ``linear_0`` is [q; k; v] and cross-attention
    ``linear_1`` is [k; v].  HF's ``k_proj`` has no bias (the converter fused zeros in); a nonzero
    key bias would not change the output anyway (it adds ``q . b`` to every score of a query row,
    which softmax cancels), so it is dropped."""
    cfg = whisper_config(m)
    sd: dict[str, np.ndarray] = {}

    def ln(dst: str, src: str) -> None:
        sd[f"{dst}.weight"] = m.float32(f"{src}/gamma")
        sd[f"{dst}.bias"] = m.float32(f"{src}/beta")

    def lin(dst: str, src: str) -> None:
        sd[f"{dst}.weight"] = m.float32(f"{src}/weight")
        sd[f"{dst}.bias"] = m.float32(f"{src}/bias")

    def fused(dst: str, src: str, names: tuple[str, ...]) -> None:
        ws = _split_rows(m, f"{src}/weight", len(names))
        bs = _split_rows(m, f"{src}/bias", len(names))
        for n, w, b in zip(names, ws, bs):
            sd[f"{dst}.{n}.weight"] = np.ascontiguousarray(w)
            if n != "k_proj":
                sd[f"{dst}.{n}.bias"] = np.ascontiguousarray(b)

    for side in ("encoder", "decoder"):
        p = f"model.{side}"
        if side == "encoder":
            lin(f"{p}.conv1", "encoder/conv1")
            lin(f"{p}.conv2", "encoder/conv2")
        else:
            sd[f"{p}.embed_tokens.weight"] = m.float32("decoder/embeddings/weight")
        sd[f"{p}.embed_positions.weight"] = m.float32(f"{side}/position_encodings/encodings")
        for i in range(cfg[f"{side}_layers"]):
            src, dst = f"{side}/layer_{i}", f"{p}.layers.{i}"
            ln(f"{dst}.self_attn_layer_norm", f"{src}/self_attention/layer_norm")
            fused(f"{dst}.self_attn", f"{src}/self_attention/linear_0", ("q_proj", "k_proj", "v_proj"))
            lin(f"{dst}.self_attn.out_proj", f"{src}/self_attention/linear_1")
            if side == "decoder":
                ln(f"{dst}.encoder_attn_layer_norm", f"{src}/attention/layer_norm")
                lin(f"{dst}.encoder_attn.q_proj", f"{src}/attention/linear_0")
                fused(f"{dst}.encoder_attn", f"{src}/attention/linear_1", ("k_proj", "v_proj"))
                lin(f"{dst}.encoder_attn.out_proj", f"{src}/attention/linear_2")
            ln(f"{dst}.final_layer_norm", f"{src}/ffn/layer_norm")
            lin(f"{dst}.fc1", f"{src}/ffn/linear_0")
            lin(f"{dst}.fc2", f"{src}/ffn/linear_1")
        ln(f"{p}.layer_norm", f"{side}/layer_norm")
    # logits: tied to the token embedding unless the file carries its own projection
    if cfg["tie_word_embeddings"]:
        sd["proj_out.weight"] = sd["model.decoder.embed_tokens.weight"]
    else:
        sd["proj_out.weight"] = m.float32("decoder/projection/weight")
    _check_shapes(m, cfg, sd)
    return sd


def _check_shapes(m: CT2Model, cfg: dict[str, Any], sd: dict[str, np.ndarray]) -> None:
    d, nm = cfg["d_model"], cfg["num_mel_bins"]
    expect = {"model.encoder.conv1.weight": (d, nm, 3), "model.encoder.conv2.weight": (d, d, 3),
              "model.decoder.embed_positions.weight": (cfg["max_target_positions"], d),
              "model.encoder.embed_positions.weight": (cfg["max_source_positions"], d)}
    for side in ("encoder", "decoder"):
        f = cfg[f"{side}_ffn_dim"]
        for i in range(cfg[f"{side}_layers"]):
            p = f"model.{side}.layers.{i}"
            expect |= {f"{p}.fc1.weight": (f, d), f"{p}.fc2.weight": (d, f),
                       f"{p}.fc1.bias": (f,), f"{p}.fc2.bias": (d,)}
            for att in ("self_attn", "encoder_attn") if side == "decoder" else ("self_attn",):
                for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
                    expect[f"{p}.{att}.{proj}.weight"] = (d, d)
    for side in ("encoder", "decoder"):
        if d % cfg[f"{side}_attention_heads"]:
            raise WeightError(f"{m.path}: d_model {d} is not divisible by {side}/num_heads "
                              f"{cfg[f'{side}_attention_heads']}")
    for name, shape in expect.items():
        if sd[name].shape != shape:
            raise WeightError(f"{m.path}: {name} has shape {sd[name].shape}, expected {shape} "
                              f"(d_model {d}, from 'decoder/embeddings/weight')")


def load_whisper(path: str | Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(HF-style config dict, HF state dict in float32) from a CTranslate2 Whisper model."""
    m = read_ct2(path)
    return whisper_config(m), whisper_state_dict(m)
