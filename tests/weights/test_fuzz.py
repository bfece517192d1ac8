"""Fuzzing the three weight readers (safetensors directories, GGUF, CTranslate2 model.bin).

Each format gets a small valid original, written here (safetensors and CT2 by hand, GGUF with gguf-py's
writer), and two kinds of mutants:

* random ones, from fixed seeds: truncations anywhere, and 1-3 bytes flipped in the *header* bytes (the
  tensor data itself has no checksum in any of these formats, so a flipped data byte is a different,
  valid file);
* structured ones: huge counts and dims, overlapping, misaligned or gapped offsets, mistyped metadata,
  out-of-range config values, deep nesting, index files pointing outside their directory.

Every mutant must either load exactly the original's tensors or raise WeightError: never another
exception, never more than a few MB of allocation (tracemalloc's peak, which numpy reports to), never
more than a couple of seconds. Structured mutants must raise WeightError, naming the file."""

from __future__ import annotations

import json
import struct
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from lightspeed.weights import WeightError, load
from lightspeed.weights.ctranslate2 import load_whisper

from .gguf_helpers import write_gguf

MAX_PEAK_BYTES = 16 << 20
MAX_SECONDS = 3.0

# -------------------------------------------------------------------------------------------- originals
LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 16, "hidden_size": 8,
         "intermediate_size": 12, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
         "head_dim": 4, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True}


def _llama_tensors(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """HF names and shapes of LLAMA, stated here rather than taken from lightspeed's shape table."""
    h, f, v, q, kv = 8, 12, 16, 2 * 4, 1 * 4
    out = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,)}
    for i in range(2):
        p = f"model.layers.{i}."
        out |= {p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
                p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
                p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q),
                p + "mlp.gate_proj.weight": (f, h), p + "mlp.up_proj.weight": (f, h),
                p + "mlp.down_proj.weight": (h, f)}
    return {k: rng.standard_normal(s).astype(np.float32) for k, s in out.items()}


_ST_NAMES = {np.dtype("float32"): "F32", np.dtype("float16"): "F16", np.dtype(ml_dtypes.bfloat16): "BF16"}


def safetensors_bytes(tensors: dict[str, np.ndarray], header_text: str | None = None) -> bytes:
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        b = a.tobytes()
        header[name] = {"dtype": _ST_NAMES[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    text = (header_text if header_text is not None else json.dumps(header)).encode()
    return len(text).to_bytes(8, "little") + text + b"".join(blobs)


def make_safetensors(d: Path) -> tuple[Path, dict[str, np.ndarray]]:
    rng = np.random.default_rng(10)
    tensors = _llama_tensors(rng)
    stored = dict(tensors)
    # three storage dtypes; the loader returns float32
    stored["model.norm.weight"] = tensors["model.norm.weight"].astype(np.float16)
    up = "model.layers.1.mlp.up_proj.weight"
    stored[up] = tensors[up].astype(ml_dtypes.bfloat16)
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(LLAMA))
    (d / "model.safetensors").write_bytes(safetensors_bytes(stored))
    want = {k: v.astype(np.float32) for k, v in stored.items()}
    return d, want


GGUF_TOKENS = ["a", "b", "c", "ab", "bc", "abc"] + [f"t{i}" for i in range(10)]
GGUF_KV = {"llama.block_count": 2, "llama.embedding_length": 8, "llama.feed_forward_length": 12,
           "llama.attention.head_count": 2, "llama.attention.head_count_kv": 1, "llama.context_length": 64,
           "llama.attention.layer_norm_rms_epsilon": 1e-5, "llama.rope.freq_base": 10000.0,
           "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "default", "tokenizer.ggml.tokens": GGUF_TOKENS,
           "tokenizer.ggml.token_type": [1] * len(GGUF_TOKENS), "tokenizer.ggml.merges": ["a b", "b c", "ab c"],
           "tokenizer.ggml.bos_token_id": 0, "tokenizer.ggml.eos_token_id": 1}
_HF_TO_GGUF = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
               "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
               "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
               "mlp.down_proj": "ffn_down"}


def _gguf_name(hf: str) -> str:
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    _, _, layer, *rest = hf.split(".")
    return f"blk.{layer}.{_HF_TO_GGUF['.'.join(rest[:-1])]}.{rest[-1]}"


def make_gguf(d: Path, kv_edit: dict | None = None) -> tuple[Path, dict[str, np.ndarray]]:
    rng = np.random.default_rng(11)
    tensors = _llama_tensors(rng)
    # the loader undoes llama.cpp's Q/K row permutation; norms and the rest load as stored. Compare
    # against a load of the original rather than restating the permutation here.
    kv = dict(GGUF_KV)
    for k, v in (kv_edit or {}).items():
        if v is None:
            kv.pop(k, None)
        else:
            kv[k] = v
    d.mkdir(parents=True, exist_ok=True)
    path = write_gguf(d / "m.gguf", "llama", kv, {_gguf_name(k): v for k, v in tensors.items()})
    return path, load(path, progress=False).tensors if kv_edit is None else {}


CT2_CFG = {"d": 8, "mel": 4, "vocab": 12, "ffn": 16, "src": 6, "tgt": 5, "heads": 2}


def ct2_variables(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """What CTranslate2's Whisper converter writes, for a 1+1-layer model (names from its WhisperSpec)."""
    d, mel, v, f = CT2_CFG["d"], CT2_CFG["mel"], CT2_CFG["vocab"], CT2_CFG["ffn"]
    shapes = {"encoder/conv1/weight": (d, mel, 3), "encoder/conv1/bias": (d,), "encoder/conv2/weight": (d, d, 3),
              "encoder/conv2/bias": (d,), "encoder/position_encodings/encodings": (CT2_CFG["src"], d),
              "decoder/position_encodings/encodings": (CT2_CFG["tgt"], d), "decoder/embeddings/weight": (v, d)}
    for side in ("encoder", "decoder"):
        shapes |= {f"{side}/layer_norm/gamma": (d,), f"{side}/layer_norm/beta": (d,)}
        p = f"{side}/layer_0"
        blocks = [("self_attention/layer_norm", None), ("self_attention/linear_0", 3 * d),
                  ("self_attention/linear_1", d), ("ffn/layer_norm", None), ("ffn/linear_0", f), ("ffn/linear_1", d)]
        if side == "decoder":
            blocks += [("attention/layer_norm", None), ("attention/linear_0", d), ("attention/linear_1", 2 * d),
                       ("attention/linear_2", d)]
        for name, rows in blocks:
            if rows is None:
                shapes |= {f"{p}/{name}/gamma": (d,), f"{p}/{name}/beta": (d,)}
            else:
                cols = f if name == "ffn/linear_1" else d
                shapes |= {f"{p}/{name}/weight": (rows, cols), f"{p}/{name}/bias": (rows,)}
    out = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    out |= {"decoder/activation": np.array(3, np.int8), "decoder/alibi": np.array(0, np.int8),
            "decoder/num_heads": np.array(CT2_CFG["heads"], np.int16),
            "encoder/num_heads": np.array(CT2_CFG["heads"], np.int16), "decoder/pre_norm": np.array(1, np.int8),
            "decoder/scale_embeddings": np.array(0, np.int8)}
    return out


def ct2_bytes(variables: dict[str, np.ndarray], aliases: dict[str, str] | None = None,
              count: int | None = None) -> tuple[bytes, list[tuple[int, int]]]:
    """A model.bin laid out by hand (version 6), and the byte ranges of the variables' data."""
    def s(text: str) -> bytes:
        raw = text.encode() + b"\0"
        return struct.pack("<H", len(raw)) + raw

    ids = {np.dtype("float32"): 0, np.dtype("int8"): 1, np.dtype("int16"): 2}
    out = bytearray(struct.pack("<I", 6) + s("WhisperSpec") + struct.pack("<I", 3)
                    + struct.pack("<I", len(variables) if count is None else count))
    data_ranges = []
    for name, a in variables.items():
        out += s(name) + struct.pack("<B", a.ndim) + b"".join(struct.pack("<I", n) for n in a.shape)
        out += struct.pack("<BI", ids[a.dtype], a.nbytes)
        data_ranges.append((len(out), len(out) + a.nbytes))
        out += a.tobytes()
    aliases = aliases if aliases is not None else {"decoder/projection/weight": "decoder/embeddings/weight"}
    out += struct.pack("<I", len(aliases))
    for k, v in aliases.items():
        out += s(k) + s(v)
    return bytes(out), data_ranges


CT2_VOCAB = ["<|endoftext|>", "<|startoftranscript|>", "<|notimestamps|>"] + [f"w{i}" for i in range(9)]


def make_ct2(d: Path) -> tuple[Path, dict[str, np.ndarray], list[tuple[int, int]]]:
    d.mkdir(parents=True, exist_ok=True)
    raw, ranges = ct2_bytes(ct2_variables(np.random.default_rng(12)))
    (d / "model.bin").write_bytes(raw)
    (d / "config.json").write_text(json.dumps({"suppress_ids": [3, 4], "suppress_ids_begin": [5],
                                               "alignment_heads": [[0, 1]]}))
    (d / "vocabulary.txt").write_text("\n".join(CT2_VOCAB) + "\n")
    return d / "model.bin", load_whisper(d)[1], ranges


# ---------------------------------------------------------------------------------------- the property
def _same(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> bool:
    return set(got) == set(want) and all(got[k].shape == want[k].shape and got[k].dtype == want[k].dtype
                                         and np.array_equal(got[k], want[k], equal_nan=True) for k in want)


def check_mutant(loader: Callable[[], dict[str, np.ndarray]], want: dict[str, np.ndarray], label: str,
                 must_fail: bool = False, match: str | None = None) -> str:
    """Run one mutant: 'same' or 'error' (and the property's checks), else the test fails."""
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        got = loader()
        outcome = "same"
    except WeightError as e:
        outcome, got = "error", None
        if match is not None and match not in str(e):
            pytest.fail(f"{label}: WeightError without {match!r}: {e}")
    except Exception as e:  # noqa: BLE001  (the property: nothing but WeightError escapes)
        pytest.fail(f"{label}: {type(e).__name__} instead of WeightError: {e}")
    finally:
        seconds = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < MAX_PEAK_BYTES, f"{label}: allocated {peak} bytes"
    assert seconds < MAX_SECONDS, f"{label}: took {seconds:.2f} s"
    if outcome == "same":
        assert not must_fail, f"{label}: loaded without an error"
        assert _same(got, want), f"{label}: loaded different tensors without an error"
    return outcome


def _random_mutants(original: bytes, header: list[tuple[int, int]], n: int, seed: int):
    """(label, bytes): truncations anywhere and flips of 1-3 bytes inside the `header` ranges."""
    rng = np.random.default_rng(seed)
    positions = np.concatenate([np.arange(a, b) for a, b in header])
    for i in range(n):
        if i % 3 == 0:
            cut = int(rng.integers(0, len(original)))
            yield f"truncated at {cut}", original[:cut]
        else:
            data = bytearray(original)
            where = rng.choice(positions, size=int(rng.integers(1, 4)), replace=False)
            for p in where:
                data[p] = (data[p] + int(rng.integers(1, 256))) % 256  # always a different byte
            yield f"bytes {sorted(int(p) for p in where)} changed", bytes(data)


# ------------------------------------------------------------------------------------------ safetensors
def _st_header_ranges(raw: bytes) -> list[tuple[int, int]]:
    return [(0, 8 + int.from_bytes(raw[:8], "little"))]


def _fuzz_safetensors(tmp_path: Path, n: int, seed: int) -> dict[str, int]:
    d, want = make_safetensors(tmp_path / "st")
    f = d / "model.safetensors"
    original = f.read_bytes()
    counts = {"same": 0, "error": 0}
    for label, data in _random_mutants(original, _st_header_ranges(original), n, seed):
        f.write_bytes(data)
        counts[check_mutant(lambda: load(d, progress=False).tensors, want, f"safetensors {label}")] += 1
    f.write_bytes(original)
    assert _same(load(d, progress=False).tensors, want)
    return counts


def _st_structured(base: dict[str, np.ndarray]) -> list[tuple[str, bytes, str]]:
    """(label, file bytes, expected message fragment) of hand-made bad safetensors files."""
    names = list(base)
    good = json.loads(safetensors_bytes(base)[8:8 + int.from_bytes(safetensors_bytes(base)[:8], "little")])
    blob = b"".join(a.tobytes() for a in base.values())

    def with_header(edit: Callable[[dict], None], data: bytes = blob) -> bytes:
        h = json.loads(json.dumps(good))
        edit(h)
        text = json.dumps(h).encode()
        return len(text).to_bytes(8, "little") + text + data

    def set_(name: str, key: str, value) -> Callable[[dict], None]:
        return lambda h: h[name].__setitem__(key, value)

    first, second = names[0], names[1]
    e0, e1 = good[first]["data_offsets"], good[second]["data_offsets"]
    dup_text = json.dumps(good)[:-1] + ", " + json.dumps(first) + ": " + json.dumps(good[first]) + "}"
    deep = "{" + json.dumps(first) + ": " + "[" * 50_000 + "]" * 50_000 + "}"
    return [
        ("huge header length", (1 << 63).to_bytes(8, "little") + b"{}", "header length"),
        ("header length past the end", (10_000).to_bytes(8, "little") + b"{}", "truncated"),
        ("empty header", (0).to_bytes(8, "little") + blob, "not a safetensors file"),
        ("header is a list", (2).to_bytes(8, "little") + b"[]" + blob, "not a safetensors file"),
        ("duplicate key", len(dup_text).to_bytes(8, "little") + dup_text.encode() + blob, "duplicate key"),
        ("deep nesting", len(deep).to_bytes(8, "little") + deep.encode() + blob, "nested deeper"),
        ("overlapping offsets", with_header(set_(second, "data_offsets", [e0[0], e0[0] + e1[1] - e1[0]])),
         "overlaps the previous tensor"),
        ("gap between tensors", with_header(lambda h: [h[n].__setitem__("data_offsets", [o + 4 * (n != first),
                                                                                         c + 4 * (n != first)])
                                                       for n in names for o, c in [h[n]["data_offsets"]]],
                                            blob[:e0[1]] + bytes(4) + blob[e0[1]:]), "gap"),
        ("unaccounted trailing bytes", with_header(lambda h: None, blob + bytes(16)), "unaccounted"),
        ("huge dims", with_header(set_(first, "shape", [1 << 40, 1 << 40])), "expected"),
        ("negative dim", with_header(set_(first, "shape", [-8, -12])), "invalid shape"),
        ("float dim", with_header(set_(first, "shape", [16.0, 8])), "invalid shape"),
        ("bool dim", with_header(set_(first, "shape", [True, 8])), "invalid shape"),
        ("string dtype unknown", with_header(set_(first, "dtype", "Q4")), "unsupported dtype"),
        ("dtype not a string", with_header(set_(first, "dtype", 7)), "unsupported dtype"),
        ("three offsets", with_header(set_(first, "data_offsets", [0, 4, 8])), "invalid data_offsets"),
        ("offsets reversed", with_header(set_(first, "data_offsets", [e0[1], e0[0]])), "end before"),
        ("extra entry key", with_header(set_(first, "extra", 1)), "malformed header entry"),
        ("metadata not strings", with_header(lambda h: h.__setitem__("__metadata__", {"a": {"b": 1}})),
         "__metadata__"),
        ("integer weights", with_header(set_(first, "dtype", "I32")), "integer"),
    ]


def _configs_bad() -> list[tuple[str, dict, str]]:
    return [
        ("a billion layers", {"num_hidden_layers": 10**9}, "num_hidden_layers"),
        ("zero heads", {"num_attention_heads": 0}, "num_attention_heads"),
        ("hidden as text", {"hidden_size": "8"}, "hidden_size"),
        ("negative vocabulary", {"vocab_size": -1}, "vocab_size"),
        ("huge intermediate", {"intermediate_size": 1 << 40}, "intermediate_size"),
        ("negative rope theta", {"rope_theta": -1.0}, "rope_theta"),
        ("rope theta as text", {"rope_theta": "1e4"}, "rope_theta"),
        ("zero epsilon", {"rms_norm_eps": 0.0}, "rms_norm_eps"),
        ("kv heads not dividing", {"num_key_value_heads": 3, "num_attention_heads": 2}, "num_key_value_heads"),
        ("odd head_dim", {"head_dim": 3}, "head_dim"),
        ("tie as text", {"tie_word_embeddings": "yes"}, "tie_word_embeddings"),
        ("rope scaling as list", {"rope_scaling": [1, 2]}, "rope_scaling"),
        ("rope factor negative", {"rope_scaling": {"rope_type": "linear", "factor": -2.0}}, "factor"),
    ]


def test_safetensors_structured_mutants(tmp_path):
    d, want = make_safetensors(tmp_path / "st")
    f = d / "model.safetensors"
    original = f.read_bytes()
    base = {k: (v.astype(np.float32)) for k, v in want.items()}
    for label, data, match in _st_structured(base):
        f.write_bytes(data)
        check_mutant(lambda: load(d, progress=False).tensors, want, f"safetensors {label}", must_fail=True,
                     match=match)
    f.write_bytes(original)
    for label, edit, match in _configs_bad():
        (d / "config.json").write_text(json.dumps(LLAMA | edit))
        check_mutant(lambda: load(d, progress=False).tensors, want, f"config {label}", must_fail=True,
                     match=match)
    (d / "config.json").write_text('{"model_type": "llama", "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    check_mutant(lambda: load(d, progress=False).tensors, want, "config deep nesting", must_fail=True,
                 match="nested deeper")
    (d / "config.json").write_text(json.dumps(LLAMA))
    assert _same(load(d, progress=False).tensors, want)


def test_safetensors_index_cannot_leave_its_directory(tmp_path):
    d, want = make_safetensors(tmp_path / "model")
    outside = tmp_path / "outside.safetensors"
    outside.write_bytes((d / "model.safetensors").read_bytes())
    (d / "model.safetensors").rename(d / "shard-1.safetensors")
    index = d / "model.safetensors.index.json"

    def write_index(target) -> None:
        index.write_text(json.dumps({"weight_map": {name: target for name in want}}))

    write_index("shard-1.safetensors")
    assert _same(load(d, progress=False).tensors, want)
    (d / "link.safetensors").symlink_to(outside)
    for target in ("../outside.safetensors", str(outside), "sub/../../outside.safetensors", "link.safetensors"):
        write_index(target)
        check_mutant(lambda: load(d, progress=False).tensors, want, f"index -> {target}", must_fail=True,
                     match="points outside")
    for target, match in ((7, "not a file name"), ("", "not a file name")):
        write_index(target)
        check_mutant(lambda: load(d, progress=False).tensors, want, f"index -> {target!r}", must_fail=True,
                     match=match)
    index.write_text('{"weight_map": {"a": "shard-1.safetensors", "a": "shard-1.safetensors"}}')
    check_mutant(lambda: load(d, progress=False).tensors, want, "index duplicate key", must_fail=True,
                 match="duplicate key")


# ------------------------------------------------------------------------------------------------- GGUF
def _gguf_header_end(path: Path) -> int:
    """The start of the data section, as gguf-py's own reader sees it."""
    import gguf

    return min(t.data_offset for t in gguf.GGUFReader(path).tensors)


def _fuzz_gguf(tmp_path: Path, n: int, seed: int) -> dict[str, int]:
    path, want = make_gguf(tmp_path / "gguf")
    original = path.read_bytes()
    counts = {"same": 0, "error": 0}
    for label, data in _random_mutants(original, [(0, _gguf_header_end(path))], n, seed):
        path.write_bytes(data)
        counts[check_mutant(lambda: load(path, progress=False).tensors, want, f"gguf {label}")] += 1
    path.write_bytes(original)
    return counts


def _u64_after(raw: bytes, marker: bytes, skip: int = 0) -> int:
    """Offset of the u64 `skip` bytes after `marker` (a key or tensor name in the header)."""
    return raw.index(marker) + len(marker) + skip


def _patched(raw: bytes, at: int, fmt: str, value: int) -> bytes:
    out = bytearray(raw)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


def test_gguf_structured_mutants(tmp_path):
    path, want = make_gguf(tmp_path / "gguf")
    raw = path.read_bytes()
    q_entry = b"blk.0.attn_q.weight"
    k_entry = b"blk.0.attn_k.weight"
    last = b"blk.1.ffn_down.weight"  # the table's last entry (gguf-py keeps the order tensors were added)
    # tensor table entry: name, n_dims u32, dims u64 x n_dims, type u32, offset u64 (all tensors here are 2-d)
    q_dims, q_type, q_off = _u64_after(raw, q_entry, 4), _u64_after(raw, q_entry, 20), _u64_after(raw, q_entry, 24)
    k_off = _u64_after(raw, k_entry, 24)
    (k_offset,) = struct.unpack_from("<Q", raw, k_off)
    (q_offset,) = struct.unpack_from("<Q", raw, q_off)
    tokens_count = _u64_after(raw, b"tokenizer.ggml.tokens", 8)
    first_token_len = tokens_count + 8
    pre_len = raw.index(b"tokenizer.ggml.pre") - 8
    mutants = [
        ("huge tensor count", _patched(raw, 8, "<Q", 1 << 60), "tensor entries need"),
        ("huge key/value count", _patched(raw, 16, "<Q", 1 << 60), "key/values need"),
        ("huge key length", _patched(raw, pre_len, "<Q", 1 << 62), "truncated"),
        ("huge token count", _patched(raw, tokens_count, "<Q", 1 << 60), "strings"),
        ("huge token length", _patched(raw, first_token_len, "<Q", 1 << 62), "truncated"),
        ("huge dims", _patched(_patched(raw, q_dims, "<Q", 1 << 30), q_dims + 8, "<Q", 1 << 30), "needs bytes"),
        ("dims overflowing int64", _patched(_patched(raw, q_dims, "<Q", (1 << 64) - 1), q_dims + 8, "<Q", 1 << 40),
         "2^63"),
        ("five dims", _patched(raw, q_dims - 4, "<I", 5), "5 dims"),
        ("misaligned offset", _patched(raw, q_off, "<Q", q_offset + 4), "alignment"),
        ("overlapping offsets", _patched(raw, k_off, "<Q", q_offset), "overlaps"),
        ("offset leaving a gap", _patched(raw, k_off, "<Q", k_offset + 64), "gap"),
        ("type shrinking the last tensor", _patched(raw, _u64_after(raw, last, 20), "<I", int(Q.F16)),
         "after the last"),
        ("offset past the end", _patched(raw, q_off, "<Q", 1 << 50), "truncated"),
        ("unknown quant type", _patched(raw, q_type, "<I", 999), "unknown quant type"),
        ("unsupported int type", _patched(raw, q_type, "<I", int(Q.I32)), "I32"),
    ]
    for label, data, match in mutants:
        path.write_bytes(data)
        check_mutant(lambda: load(path, progress=False).tensors, want, f"gguf {label}", must_fail=True,
                     match=match)

    bad_kv = [
        ("block count as text", {"llama.block_count": "2"}, "llama.block_count"),
        ("block count as float", {"llama.block_count": 2.0}, "llama.block_count"),
        ("a billion layers", {"llama.block_count": 10**9}, "llama.block_count"),
        ("zero heads", {"llama.attention.head_count": 0}, "llama.attention.head_count"),
        ("heads as array", {"llama.attention.head_count": [2, 2]}, "is an array"),
        ("zero width", {"llama.embedding_length": 0}, "llama.embedding_length"),
        ("zero ffn", {"llama.feed_forward_length": 0}, "llama.feed_forward_length"),
        ("huge context", {"llama.context_length": 1 << 31 | 1}, "llama.context_length"),
        ("negative rope base", {"llama.rope.freq_base": -1.0}, "freq_base"),
        ("zero epsilon", {"llama.attention.layer_norm_rms_epsilon": 0.0}, "rms_norm_eps"),
        ("epsilon as text", {"llama.attention.layer_norm_rms_epsilon": "1e-5"}, "layer_norm_rms_epsilon"),
        ("alignment as text", {"general.alignment": "32"}, "general.alignment"),
        ("alignment not a power of two", {"general.alignment": 48}, "general.alignment"),
        ("tokens as text", {"tokenizer.ggml.tokens": "abc"}, "tokenizer.ggml.tokens"),
        ("merges as numbers", {"tokenizer.ggml.merges": [1, 2]}, "tokenizer.ggml.merges"),
        ("merge without a space", {"tokenizer.ggml.merges": ["ab"]}, "tokenizer.ggml.merges"),
        ("token types as text", {"tokenizer.ggml.token_type": ["x"] * len(GGUF_TOKENS)}, "token_type"),
        ("token types too short", {"tokenizer.ggml.token_type": [1]}, "token_type"),
        ("bos past the vocabulary", {"tokenizer.ggml.bos_token_id": 999}, "bos_token_id"),
        ("eos as text", {"tokenizer.ggml.eos_token_id": "1"}, "eos_token_id"),
        ("tokenizer model as number", {"tokenizer.ggml.model": 3}, "tokenizer.ggml.model"),
        ("pre as number", {"tokenizer.ggml.pre": 3}, "tokenizer.ggml.pre"),
        ("template as number", {"tokenizer.chat_template": 3}, "tokenizer.chat_template"),
        ("merge of unknown tokens", {"tokenizer.ggml.merges": ["x y"]}, "tokenizer"),
    ]
    for label, edit, match in bad_kv:
        p, _ = make_gguf(tmp_path / label.replace(" ", "-"), edit)
        check_mutant(lambda p=p: load(p, progress=False).tensors, want, f"gguf {label}", must_fail=True,
                     match=match)


# ------------------------------------------------------------------------------------------- CTranslate2
def _fuzz_ct2(tmp_path: Path, n: int, seed: int) -> dict[str, int]:
    path, want, data_ranges = make_ct2(tmp_path / "ct2")
    original = path.read_bytes()
    header, pos = [], 0
    for a, b in data_ranges:
        header.append((pos, a))
        pos = b
    header.append((pos, len(original)))
    counts = {"same": 0, "error": 0}
    for label, data in _random_mutants(original, header, n, seed):
        path.write_bytes(data)
        counts[check_mutant(lambda: load_whisper(path.parent)[1], want, f"ct2 {label}")] += 1
    path.write_bytes(original)
    return counts


def test_ct2_structured_mutants(tmp_path):
    path, want, _ = make_ct2(tmp_path / "ct2")
    d = path.parent
    good = ct2_variables(np.random.default_rng(12))
    raw = path.read_bytes()
    name = b"encoder/conv1/bias\0"
    rank_at = raw.index(name) + len(name)
    mutants = [
        ("huge variable count", ct2_bytes(good, count=(1 << 32) - 1)[0], "variable count"),
        ("rank 200", _patched(raw, rank_at, "<B", 200), "rank 200"),
        ("huge dim", _patched(raw, rank_at + 1, "<I", (1 << 32) - 1), "needs"),
        ("wrong byte count", _patched(raw, rank_at + 6, "<I", 4), "needs 32 bytes"),
        ("zero heads", ct2_bytes(good | {"decoder/num_heads": np.array(0, np.int16)})[0], "decoder/num_heads"),
        ("heads not dividing", ct2_bytes(good | {"encoder/num_heads": np.array(3, np.int16)})[0], "encoder/num_heads"),
        ("bias too long", ct2_bytes(good | {"decoder/layer_0/ffn/linear_0/bias": np.zeros(17, np.float32)})[0],
         "decoder/layer_0/ffn/linear_0/bias"),
        ("norm too short", ct2_bytes(good | {"encoder/layer_0/ffn/layer_norm/gamma": np.zeros(7, np.float32)})[0],
         "encoder/layer_0/ffn/layer_norm/gamma"),
        ("cross-attention bias missing rows", ct2_bytes(
            good | {"decoder/layer_0/attention/linear_1/bias": np.zeros(8, np.float32)})[0], "linear_1/bias"),
        ("conv as a vector", ct2_bytes(good | {"encoder/conv1/weight": np.zeros(8, np.float32)})[0],
         "encoder/conv1/weight"),
        ("layer one billion", ct2_bytes(good | {"decoder/layer_999999999/ffn/layer_norm/gamma":
                                                np.zeros(8, np.float32)})[0], "numbered"),
        ("alias to nothing", ct2_bytes(good, aliases={"x": "missing"})[0], "missing variable"),
        ("huge alias count", ct2_bytes(good, aliases={})[0][:-4] + struct.pack("<I", (1 << 32) - 1), "alias count"),
    ]
    for label, data, match in mutants:
        path.write_bytes(data)
        check_mutant(lambda: load_whisper(d)[1], want, f"ct2 {label}", must_fail=True, match=match)
    path.write_bytes(raw)
    cfg_good = (d / "config.json").read_text()
    for label, text, match in [
        ("suppress_ids as text", '{"suppress_ids": "3"}', "suppress_ids"),
        ("suppress_ids past the vocabulary", '{"suppress_ids": [1000000000]}', "suppress_ids"),
        ("alignment heads past the layers", '{"alignment_heads": [[5, 0]]}', "alignment_heads"),
        ("alignment heads flat", '{"alignment_heads": [0, 1]}', "alignment_heads"),
        ("config a list", "[1]", "not a JSON object"),
        ("config deep", '{"suppress_ids": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested deeper"),
        ("config duplicate key", '{"suppress_ids": [1], "suppress_ids": [2]}', "duplicate key"),
    ]:
        (d / "config.json").write_text(text)
        check_mutant(lambda: load_whisper(d)[1], want, f"ct2 {label}", must_fail=True, match=match)
    (d / "config.json").write_text(cfg_good)
    (d / "vocabulary.txt").write_bytes(b"\xff\xfe" + "\n".join(CT2_VOCAB).encode())
    check_mutant(lambda: load_whisper(d)[1], want, "ct2 vocabulary not UTF-8", must_fail=True,
                 match="vocabulary")


# ----------------------------------------------------------------------------------------- random fuzz
FUZZERS = {"safetensors": _fuzz_safetensors, "gguf": _fuzz_gguf, "ct2": _fuzz_ct2}


@pytest.mark.parametrize("fmt", sorted(FUZZERS))
def test_random_mutants(tmp_path, fmt):
    counts = FUZZERS[fmt](tmp_path, 150, seed=1)
    # nearly every header mutant is refused; the few that load (a byte of JSON whitespace, a value
    # nothing reads) were checked to give the original's tensors
    assert counts["error"] > 100, counts


@pytest.mark.slow
@pytest.mark.parametrize("fmt", sorted(FUZZERS))
@pytest.mark.parametrize("seed", [2, 3, 4])
def test_random_mutants_many(tmp_path, fmt, seed):
    counts = FUZZERS[fmt](tmp_path, 1500, seed=seed)
    assert counts["error"] > 500, counts


def test_a_layer_count_below_the_file_layers_is_refused(tmp_path):
    """A GGUF whose block_count, or an HF config whose num_hidden_layers, counts fewer layers than
    the file holds must not load with the extra layers silently dropped."""
    path, _ = make_gguf(tmp_path / "gguf", {"llama.block_count": 1})
    with pytest.raises(WeightError, match=r"blk\.1\..*layer 1.*1 layers"):
        load(path, progress=False)
    d, _ = make_safetensors(tmp_path / "hf")
    (d / "config.json").write_text(json.dumps({**LLAMA, "num_hidden_layers": 1}))
    with pytest.raises(WeightError, match=r"model\.layers\.1\..*layer 1.*1 layers"):
        load(d, progress=False)


def test_a_tensor_the_config_does_not_use_is_refused(tmp_path):
    """An HF directory with a tensor no weight of its config is (a stray head of another model,
    say) does not load with it silently dropped; a rotary buffer some checkpoints carry is fine."""
    d, _ = make_safetensors(tmp_path / "hf")
    stored = _llama_tensors(np.random.default_rng(10))
    extra = {**stored, "model.layers.0.self_attn.rotary_emb.inv_freq": np.ones(2, np.float32)}
    (d / "model.safetensors").write_bytes(safetensors_bytes(extra))
    assert "model.layers.0.self_attn.rotary_emb.inv_freq" in load(d, progress=False).tensors
    stray = {**stored, "model.vision_tower.proj.weight": np.ones((4, 4), np.float32)}
    (d / "model.safetensors").write_bytes(safetensors_bytes(stray))
    with pytest.raises(WeightError, match=r"model\.vision_tower\.proj\.weight.*not a weight of llama"):
        load(d, progress=False)
