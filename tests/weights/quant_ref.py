"""An independent reference for GGML block formats: random blocks, and a plain per-block transcription
of ggml's `dequantize_row_*` (ggml-quants.c), written without looking at gguf-py's numpy kernels.

`make_blocks(qtype, n_blocks, rng)` returns raw block bytes with finite scales; `dequant(qtype, raw)`
decodes them with scalar loops, one element at a time where ggml does."""

from __future__ import annotations

import numpy as np

QK = 32
QK_K = 256

# block layouts: (field, numpy dtype, count)
LAYOUTS = {
    "Q4_0": [("d", "<f2", 1), ("qs", "u1", 16)],
    "Q4_1": [("d", "<f2", 1), ("m", "<f2", 1), ("qs", "u1", 16)],
    "Q5_0": [("d", "<f2", 1), ("qh", "u1", 4), ("qs", "u1", 16)],
    "Q5_1": [("d", "<f2", 1), ("m", "<f2", 1), ("qh", "u1", 4), ("qs", "u1", 16)],
    "Q8_0": [("d", "<f2", 1), ("qs", "i1", 32)],
    "Q4_K": [("d", "<f2", 1), ("dmin", "<f2", 1), ("scales", "u1", 12), ("qs", "u1", 128)],
    "Q5_K": [("d", "<f2", 1), ("dmin", "<f2", 1), ("scales", "u1", 12), ("qh", "u1", 32), ("qs", "u1", 128)],
    "Q6_K": [("ql", "u1", 128), ("qh", "u1", 64), ("scales", "i1", 16), ("d", "<f2", 1)],
}
BLOCK = {k: (QK_K if k.endswith("_K") else QK) for k in LAYOUTS}


def block_dtype(qtype: str) -> np.dtype:
    return np.dtype([(n, t, (c,)) if c > 1 else (n, t) for n, t, c in LAYOUTS[qtype]])


def make_blocks(qtype: str, n_blocks: int, rng: np.random.Generator) -> np.ndarray:
    """Random blocks as a flat uint8 array: random quant bits, finite half-precision scales."""
    dt = block_dtype(qtype)
    blocks = np.zeros(n_blocks, dtype=dt)
    for name, t, c in LAYOUTS[qtype]:
        shape = (n_blocks, c) if c > 1 else (n_blocks,)
        if t == "<f2":
            blocks[name] = (rng.standard_normal(shape) * 0.05).astype(np.float16)
        elif t == "u1":
            blocks[name] = rng.integers(0, 256, shape, dtype=np.uint8)
        else:
            blocks[name] = rng.integers(-128, 128, shape, dtype=np.int8)
    return blocks.view(np.uint8).copy()


def _scale_min_k4(j: int, q: np.ndarray) -> tuple[int, int]:
    """ggml's get_scale_min_k4: 6-bit scale and min number j of a K-quant block's 12 scale bytes."""
    q = [int(x) for x in q]
    if j < 4:
        return q[j] & 63, q[j + 4] & 63
    return (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4)


def _one_block(qtype: str, b: np.void) -> list[float]:
    f = float
    y: list[float] = []
    if qtype == "Q4_0":
        d = f(b["d"])
        lo = [((int(q) & 0xF) - 8) * d for q in b["qs"]]
        hi = [((int(q) >> 4) - 8) * d for q in b["qs"]]
        return lo + hi
    if qtype == "Q4_1":
        d, m = f(b["d"]), f(b["m"])
        return [(int(q) & 0xF) * d + m for q in b["qs"]] + [(int(q) >> 4) * d + m for q in b["qs"]]
    if qtype in ("Q5_0", "Q5_1"):
        d = f(b["d"])
        qh = int.from_bytes(bytes(b["qh"]), "little")
        lo, hi = [], []
        for j in range(16):
            xh0 = ((qh >> j) << 4) & 0x10
            xh1 = (qh >> (j + 12)) & 0x10
            x0 = (int(b["qs"][j]) & 0x0F) | xh0
            x1 = (int(b["qs"][j]) >> 4) | xh1
            if qtype == "Q5_0":
                lo.append((x0 - 16) * d)
                hi.append((x1 - 16) * d)
            else:
                m = f(b["m"])
                lo.append(x0 * d + m)
                hi.append(x1 * d + m)
        return lo + hi
    if qtype == "Q8_0":
        return [int(q) * f(b["d"]) for q in b["qs"]]
    if qtype in ("Q4_K", "Q5_K"):
        d, dmin = f(b["d"]), f(b["dmin"])
        qs = [int(x) for x in b["qs"]]
        qh = [int(x) for x in b["qh"]] if qtype == "Q5_K" else None
        is_, u1, u2, off = 0, 1, 2, 0
        for _ in range(0, QK_K, 64):
            sc, m = _scale_min_k4(is_, b["scales"])
            d1, m1 = d * sc, dmin * m
            sc, m = _scale_min_k4(is_ + 1, b["scales"])
            d2, m2 = d * sc, dmin * m
            for l in range(32):
                extra = (16 if qh[l] & u1 else 0) if qh else 0
                y.append(d1 * ((qs[off + l] & 0xF) + extra) - m1)
            for l in range(32):
                extra = (16 if qh[l] & u2 else 0) if qh else 0
                y.append(d2 * ((qs[off + l] >> 4) + extra) - m2)
            off += 32
            is_ += 2
            u1 <<= 2
            u2 <<= 2
        return y
    if qtype == "Q6_K":
        d = f(b["d"])
        ql = [int(x) for x in b["ql"]]
        qh = [int(x) for x in b["qh"]]
        sc = [int(x) for x in b["scales"]]
        out = [0.0] * QK_K
        for n in range(2):  # two halves of 128
            o, lo, ho, so = 128 * n, 64 * n, 32 * n, 8 * n
            for l in range(32):
                is_ = l // 16
                q1 = ((ql[lo + l] & 0xF) | (((qh[ho + l] >> 0) & 3) << 4)) - 32
                q2 = ((ql[lo + l + 32] & 0xF) | (((qh[ho + l] >> 2) & 3) << 4)) - 32
                q3 = ((ql[lo + l] >> 4) | (((qh[ho + l] >> 4) & 3) << 4)) - 32
                q4 = ((ql[lo + l + 32] >> 4) | (((qh[ho + l] >> 6) & 3) << 4)) - 32
                out[o + l] = d * sc[so + is_] * q1
                out[o + l + 32] = d * sc[so + is_ + 2] * q2
                out[o + l + 64] = d * sc[so + is_ + 4] * q3
                out[o + l + 96] = d * sc[so + is_ + 6] * q4
        return out
    raise ValueError(qtype)


def dequant(qtype: str, raw: np.ndarray) -> np.ndarray:
    """Decode flat block bytes to a flat float64 array."""
    blocks = raw.view(block_dtype(qtype))
    return np.array([v for b in blocks for v in _one_block(qtype, b)], dtype=np.float64)
