"""Writing small GGUF files for tests with gguf-py's own writer (independent of lightspeed's reader)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import numpy as np


def write_gguf(path: Path, arch: str, kv: dict[str, Any], tensors: dict[str, Any]) -> Path:
    """Write a GGUF file. `kv` values: bool, int (uint32), float (float32), str, or list (array; ints as
    int32, floats as float32, strings). `tensors`: name -> float32/float16 array, or (raw uint8 bytes of
    shape (rows, row_bytes), GGMLQuantizationType)."""
    w = gguf.GGUFWriter(str(path), arch)
    for key, value in kv.items():
        if isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)
        elif isinstance(value, str):
            w.add_string(key, value)
        else:
            w.add_array(key, list(value))
    for name, t in tensors.items():
        if isinstance(t, tuple):
            raw, qtype = t
            w.add_tensor(name, raw, raw_dtype=qtype)
        else:
            w.add_tensor(name, np.ascontiguousarray(t))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def permute_like_llama_cpp(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.permute, restated here so the test does not use our own."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# HF -> GGUF tensor names, restated from llama.cpp's tensor map (gguf-py/gguf/tensor_mapping.py).
HF_TO_GGUF_BLOCK = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def gguf_name(hf: str, arch: str) -> str:
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    _, _, layer, *rest = hf.split(".")
    stem, kind = ".".join(rest[:-1]), rest[-1]
    table = dict(HF_TO_GGUF_BLOCK)
    if arch == "gemma3":
        table |= {"post_attention_layernorm": "post_attention_norm", "pre_feedforward_layernorm": "ffn_norm",
                  "post_feedforward_layernorm": "post_ffw_norm"}
    else:
        table["post_attention_layernorm"] = "ffn_norm"
    return f"blk.{layer}.{table[stem]}.{kind}"
