"""One C-like renderer for LLIR ops, in two dialects: ``cuda`` (NVRTC) and ``c`` (the host C compiler).

Every op that runs as a generated kernel becomes a :class:`KernelSpec`: a function whose text
depends only on the op's structure (never on dim values or on where its buffers live), so one
compiled kernel serves every length and every program that contains the same op.

*The calling convention.*  A kernel takes the program's **table** ``T`` (an array of 64-bit
words: dim values and buffer addresses, filled by the runtime before each run) and one ``int``
per dim it reads and per buffer it touches, giving that item's slot in ``T``::

    k_<hash>(const long long* T, int dim_0, ..., int buf_out, int buf_in_0, ...)

so a captured CUDA graph stays valid when dims change or a call passes other input buffers: only
the table's contents change.

*Work.*  ``KernelSpec.count`` (an expression of the dims) is the number of work items; the
``cuda`` dialect runs them in a grid-stride loop (so the grid may be sized once, at the dims'
upper bounds), the ``c`` dialect in a plain loop.  Modes: ``elementwise`` (one item per output
element), ``warp`` (one warp per output element; the region's top-level reductions are split
across the warp's lanes and combined with shuffles), ``scatter`` (one item per written element),
``matmul_dot`` (one warp per output element, the k loop split across lanes: operands contiguous
along k) and ``matmul_tile`` (a block of 32 outputs of one row, k split across 8 thread rows).

*Numerics.*  Values are computed in a compute type per dtype (float for float32/bfloat16/float16,
double for float64, int/long long for integers, wrapping like two's complement); float8 and the
16-bit floats are converted in software / PTX with round-to-nearest-even, so both dialects give the
same bits.  A region computes bfloat16/float16 in float and rounds once when it stores (the
reference rounds after every primitive: a fused low-precision region is at least as accurate,
within the dtype's tolerance); a single primitive rounds exactly like the reference.  Reductions
accumulate float16/bfloat16 in float, like the reference; their summation order differs from
numpy's pairwise sums (float32 results agree to ~1e-6 relative).  An index outside a gathered
tensor reads 0 (the reference raises).

Bounds safety: every load goes through its view's index expression and is guarded by the view's
validity expression; scatters skip indexes outside the destination.  The conformance suite and
``compute-sanitizer`` on the GPU check that nothing reads or writes outside a buffer.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np

from ... import dtypes as dt
from ...dtypes import DType
from ...egraph.llir import LOp, RegionSpace
from ...errors import LightspeedError
from ...primitives import PRIMITIVES
from ...shape import ShapeTracker, contiguous_strides, unflatten_index
from ...symbolic import INDEX_VAR, Expr, const, prod, sym

__all__ = ["KernelSpec", "render_op", "render_block_matmul", "block_matmul_ok", "render_block_gather",
           "block_gather_ok", "prelude", "module_source",
           "storage_type", "compute_type", "DIALECTS"]

DIALECTS = ("cuda", "c")
WARP = 32
TILE_N, TILE_K = 32, 8  # matmul_tile: outputs per block row, k slices per block

# ---------------------------------------------------------------------------- types
_STORAGE = {"float32": "float", "float64": "double", "float16": "unsigned short", "bfloat16": "unsigned short",
            "float8_e4m3": "unsigned char", "float8_e5m2": "unsigned char", "int8": "signed char",
            "uint8": "unsigned char", "int16": "short", "int32": "int", "int64": "long long",
            "bool": "unsigned char"}
_COMPUTE = {"float32": "float", "float64": "double", "float16": "float", "bfloat16": "float",
            "float8_e4m3": "float", "float8_e5m2": "float", "int8": "int", "uint8": "unsigned int",
            "int16": "int", "int32": "int", "int64": "long long", "bool": "int"}


def storage_type(d: DType) -> str:
    return _STORAGE[d.name]


def compute_type(d: DType) -> str:
    return _COMPUTE[d.name]


def _load(d: DType, ref: str) -> str:
    """A stored element as a compute value."""
    conv = {"float16": "ls_h2f", "bfloat16": "ls_bf2f", "float8_e4m3": "ls_e4m3_to_f",
            "float8_e5m2": "ls_e5m2_to_f"}.get(d.name)
    return f"{conv}({ref})" if conv else f"(({compute_type(d)}){ref})"


def _store(d: DType, v: str) -> str:
    """A compute value as the stored element."""
    if d.name == "float16":
        return f"ls_f2h((float)({v}))"
    if d.name == "bfloat16":
        return f"ls_f2bf((float)({v}))"
    if d.name == "float8_e4m3":
        return f"ls_f_to_e4m3((float)({v}))"
    if d.name == "float8_e5m2":
        return f"ls_f_to_e5m2((float)({v}))"
    if d.is_bool:
        return f"(unsigned char)(({v}) != 0)"
    return f"({storage_type(d)})({v})"


def _cast(v: str, src: DType, to: DType) -> str:
    """A compute value of ``src`` as a compute value of ``to``, with the reference's semantics."""
    if src == to:
        return v
    if to.is_bool:
        return f"(int)(({v}) != 0)"
    if to.is_float:
        if to.name in ("float16", "bfloat16", "float8_e4m3", "float8_e5m2"):
            return _load(to, _store(to, f"(float)({v})"))
        return f"(({compute_type(to)})({v}))"
    if src.is_float:  # float -> int truncates; NaN gives 0, out-of-range values saturate
        info = np.iinfo(to.np)
        lo, hi = _int_literal(int(info.min)), _int_literal(int(info.max))
        return f"(({compute_type(to)})ls_ftoi((double)({v}), {lo}, {hi}))"
    return f"(({compute_type(to)})({storage_type(to)})({v}))"  # int -> int wraps


def _int_literal(v: int) -> str:
    if v == -(2 ** 63):
        return "(-9223372036854775807LL - 1)"
    if v >= 2 ** 63:
        return f"{v}ULL"
    return f"{v}LL"


def _literal(value, d: DType) -> str:
    """A constant as a compute-type literal (bit-exact: floats as hexadecimal literals)."""
    if d.is_bool:
        return "1" if bool(value) else "0"
    if d.is_int:
        return f"(({compute_type(d)}){_int_literal(int(value))})"
    f = float(np.asarray(value, dtype=d.np).astype(np.float64))
    suffix = "" if d.name == "float64" else "f"
    if math.isnan(f):
        return "ls_nan()" if suffix else "((double)ls_nan())"
    if math.isinf(f):
        s = "ls_inf()" if suffix else "((double)ls_inf())"
        return s if f > 0 else f"(-{s})"
    return f"({f.hex()}{suffix})"


def _min_value(d: DType) -> str:
    if d.is_float:
        return "(-ls_inf())" if d.name != "float64" else "(-(double)ls_inf())"
    if d.is_bool:
        return "0"
    return _literal(int(np.iinfo(d.np).min), d)


# ---------------------------------------------------------------------------- the prelude
_PRELUDE_COMMON = r"""
#define LS_RESTRICT __restrict__
static LS_INLINE float ls_inf(void) { return ls_bits_f(0x7f800000u); }
static LS_INLINE float ls_nan(void) { return ls_bits_f(0x7fc00000u); }
static LS_INLINE float ls_bf2f(unsigned short h) { return ls_bits_f(((unsigned int)h) << 16); }
static LS_INLINE unsigned short ls_f2bf(float f) {
  unsigned int u = ls_f_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);  /* NaN stays NaN */
  u += 0x7fffu + ((u >> 16) & 1u);  /* round to nearest even */
  return (unsigned short)(u >> 16);
}
/* float8: decode and round-to-nearest-even encode (e4m3fn: no infinity, NaN 0x7f, max 448, values
   beyond saturate; e5m2: IEEE-like, overflow to infinity) */
static LS_INLINE float ls_f8_decode(unsigned int b, int mbits, int bias, int ieee) {
  unsigned int sign = b & 0x80u, e = (b & 0x7fu) >> mbits, m = b & ((1u << mbits) - 1u);
  float v;
  if (ieee && e == (0x7fu >> mbits)) v = m ? ls_nan() : ls_inf();
  else if (!ieee && (b & 0x7fu) == 0x7fu) v = ls_nan();
  else if (e == 0) v = ldexpf((float)m, 1 - bias - mbits);
  else v = ldexpf((float)(m + (1u << mbits)), (int)e - bias - mbits);
  return sign ? -v : v;
}
static LS_INLINE unsigned char ls_f8_encode(float f, int mbits, int bias, int ieee, float maxv) {
  unsigned int sign = (ls_f_bits(f) >> 24) & 0x80u;
  float a = fabsf(f);
  if (a != a) return (unsigned char)(sign | (ieee ? 0x7eu : 0x7fu));
  if (!ieee && a > maxv) a = maxv;
  if (a == 0.0f) return (unsigned char)sign;
  int e; frexpf(a, &e); e -= 1;                       /* a = 1.m * 2^e */
  if (e < 1 - bias) e = 1 - bias;                     /* subnormal quantum */
  float r = ldexpf(rintf(ldexpf(a, mbits - e)), e - mbits);
  if (r > maxv) return (unsigned char)(sign | (ieee ? (0x7fu >> mbits) << mbits : 0x7eu));
  if (r == 0.0f) return (unsigned char)sign;
  int e2; frexpf(r, &e2); e2 -= 1;
  if (e2 < 1 - bias) return (unsigned char)(sign | (unsigned int)ldexpf(r, bias - 1 + mbits));
  unsigned int m = (unsigned int)ldexpf(r, mbits - e2) - (1u << mbits);
  return (unsigned char)(sign | ((unsigned int)(e2 + bias) << mbits) | m);
}
static LS_INLINE float ls_e4m3_to_f(unsigned char b) { return ls_f8_decode(b, 3, 7, 0); }
static LS_INLINE float ls_e5m2_to_f(unsigned char b) { return ls_f8_decode(b, 2, 15, 1); }
static LS_INLINE unsigned char ls_f_to_e4m3(float f) { return ls_f8_encode(f, 3, 7, 0, 448.0f); }
static LS_INLINE unsigned char ls_f_to_e5m2(float f) { return ls_f8_encode(f, 2, 15, 1, 57344.0f); }
static LS_INLINE long long ls_ftoi(double v, long long lo, long long hi) {
  if (v != v) return 0;
  v = trunc(v);
  if (v <= (double)lo) return lo;
  if (v >= (double)hi) return hi;
  return (long long)v;
}
/* Python's floor division and modulo (a divisor of 0 gives 0: only reached for empty shapes) */
static LS_INLINE long long ls_fdiv(long long a, long long b) {
  if (b == 0) return 0;
  long long q = a / b;
  return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static LS_INLINE long long ls_fmod(long long a, long long b) {
  if (b == 0) return 0;
  long long r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
static LS_INLINE long long ls_min(long long a, long long b) { return a < b ? a : b; }
static LS_INLINE long long ls_max(long long a, long long b) { return a > b ? a : b; }
static LS_INLINE float ls_fmaxn(float a, float b) { return (a != a || a > b) ? a : b; }    /* NaN wins */
static LS_INLINE double ls_dmaxn(double a, double b) { return (a != a || a > b) ? a : b; }
"""

_PRELUDE = {
    "cuda": r"""
#define LS_INLINE __device__ __forceinline__
static LS_INLINE float ls_bits_f(unsigned int u) { return __uint_as_float(u); }
static LS_INLINE unsigned int ls_f_bits(float f) { return __float_as_uint(f); }
static LS_INLINE float ls_h2f(unsigned short h) {
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}
static LS_INLINE unsigned short ls_f2h(float f) {
  unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}
static LS_INLINE float ls_dot8_bf16(uint4 a, uint4 b) {
  const unsigned int x[4] = {a.x, a.y, a.z, a.w}, y[4] = {b.x, b.y, b.z, b.w};
  float s = 0.0f;
  #pragma unroll
  for (int q = 0; q < 4; q++)
    s += __uint_as_float(x[q] << 16) * __uint_as_float(y[q] << 16)
       + __uint_as_float(x[q] & 0xffff0000u) * __uint_as_float(y[q] & 0xffff0000u);
  return s;
}
static LS_INLINE float ls_dot8_f16(uint4 a, uint4 b) {
  const unsigned int x[4] = {a.x, a.y, a.z, a.w}, y[4] = {b.x, b.y, b.z, b.w};
  float s = 0.0f;
  #pragma unroll
  for (int q = 0; q < 4; q++)
    s += ls_h2f((unsigned short)(x[q] & 0xffffu)) * ls_h2f((unsigned short)(y[q] & 0xffffu))
       + ls_h2f((unsigned short)(x[q] >> 16)) * ls_h2f((unsigned short)(y[q] >> 16));
  return s;
}
static LS_INLINE float ls_exp2f(float x) { return exp2f(x); }
static LS_INLINE float ls_dot4_f32(uint4 a, uint4 b) {
  return __uint_as_float(a.x) * __uint_as_float(b.x) + __uint_as_float(a.y) * __uint_as_float(b.y)
       + __uint_as_float(a.z) * __uint_as_float(b.z) + __uint_as_float(a.w) * __uint_as_float(b.w);
}
""" + _PRELUDE_COMMON,
    "c": r"""
#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#define __restrict__ restrict
#define LS_INLINE inline __attribute__((always_inline))
static LS_INLINE float ls_bits_f(unsigned int u) { float f; memcpy(&f, &u, 4); return f; }
static LS_INLINE unsigned int ls_f_bits(float f) { unsigned int u; memcpy(&u, &f, 4); return u; }
static LS_INLINE float ls_h2f(unsigned short h) { _Float16 x; memcpy(&x, &h, 2); return (float)x; }
static LS_INLINE unsigned short ls_f2h(float f) {
  _Float16 x = (_Float16)f; unsigned short h; memcpy(&h, &x, 2); return h;
}
/* 2^x within 1 ulp of libm's exp2f, in plain arithmetic the compiler vectorises (a libm call per
   element cannot be): 2^x = 2^n * 2^f with n = round(x), |f| <= 1/2 (exact), 2^f by its degree-7
   Taylor polynomial (truncation < 0.1 ulp), 2^n as two normal factors so that subnormal results
   round once; x is clamped to [-150, 128] (0 and infinity beyond), NaN stays NaN */
static LS_INLINE float ls_exp2f(float x) {
  const float xc = x < -150.0f ? -150.0f : (x > 128.0f ? 128.0f : x);
  const float n = (xc + 12582912.0f) - 12582912.0f;
  const float f = xc - n;
  float p = 1.5252733804059840e-5f;
  p = p * f + 1.5403530393381609e-4f;
  p = p * f + 1.3333558146428443e-3f;
  p = p * f + 9.6181291076284772e-3f;
  p = p * f + 5.5504108664821580e-2f;
  p = p * f + 2.4022650695910071e-1f;
  p = p * f + 6.9314718055994531e-1f;
  p = p * f + 1.0f;
  const int ni = (int)(xc == xc ? n : 0.0f), n1 = ni >> 1, n2 = ni - n1;
  const float r = (p * ls_bits_f((unsigned int)(n1 + 127) << 23)) * ls_bits_f((unsigned int)(n2 + 127) << 23);
  return xc == xc ? r : x;
}
typedef float ls_v8 __attribute__((vector_size(32)));  /* GCC/clang vector extension */
static LS_INLINE ls_v8 ls_ld8(const float* p) { ls_v8 v; memcpy(&v, p, 32); return v; }
typedef unsigned short ls_u16x8 __attribute__((vector_size(16)));
typedef unsigned int ls_u32x8 __attribute__((vector_size(32)));
typedef _Float16 ls_h16x8 __attribute__((vector_size(16)));
static LS_INLINE ls_v8 ls_ld8_bf16(const unsigned short* p) {
  ls_u16x8 h; memcpy(&h, p, 16);
  const ls_u32x8 u = __builtin_convertvector(h, ls_u32x8) << 16;
  ls_v8 v; memcpy(&v, &u, 32); return v;
}
#if defined(__F16C__) && !defined(__clang__)
/* gcc converts a _Float16 vector one element at a time (~4x slower): its F16C builtin instead */
typedef short ls_i16x8 __attribute__((vector_size(16)));
static LS_INLINE ls_v8 ls_ld8_f16(const unsigned short* p) {
  ls_i16x8 h; memcpy(&h, p, 16); return (ls_v8)__builtin_ia32_vcvtph2ps256(h);
}
#else
static LS_INLINE ls_v8 ls_ld8_f16(const unsigned short* p) {
  ls_h16x8 h; memcpy(&h, p, 16); return __builtin_convertvector(h, ls_v8);
}
#endif
""" + _PRELUDE_COMMON,
}


# Included only by programs with block matmuls (``module_source``): <immintrin.h> alone costs ~0.6 s
# per compile.  Weight rows in the packed block layout (``weights.quant.Blocks.packed``).  The float
# decoders (``ls_blk_*``) give the scalar values exactly: d * q is exact in float32, and q * d + m
# rounds once either way.  The q8/q16 dots (``ls_quant_x`` + ``ls_qdot``) multiply in integers
# (``maddubs`` / ``madd``); their only rounding beyond the float path's is x's to 8 or 16 bits.  AVX2 + FMA +
# F16C intrinsics where the compiler targets them, else plain C (slower, the same results up to
# summation order).
_BLOCK_PRELUDE = r"""
static LS_INLINE float ls_half(const unsigned char* p) { return ls_h2f((unsigned short)(p[0] | p[1] << 8)); }
/* Packed block rows (weights.quant.Blocks.packed): per weight row, the nb float16 scales d, then
   (q4_1) the nb float16 mins m, then the integers, 16 bytes of nibbles (q4_*: low nibbles are
   weights 0-15) or 32 signed bytes (q8_0) per block.  Scales side by side convert 8 at a time. */
static LS_INLINE float ls_hx(const unsigned char* p, long long b) { return ls_half(p + 2 * b); }
/* Q5_0, Q4_K and Q6_K rows stay in GGUF's layout (type codes 3, 4, 5).  Their weights go by
   groups of 32 (a Q5_0 block, a K-quant sub-block): ls_kgroup gives a group's weights as
   unsigned integers u (bytes, weights 0-31) and each half's (weights 0-15, 16-31) affine map
   value = s * u + o, exactly the float32 weight for Q5_0 and Q4_K; Q6_K's float32 weight is
   s * (u - 32), which ls_dec32 computes as the reference does. */
static LS_INLINE long long ls_kbytes(int code) { return code == 3 ? 22 : code == 4 ? 144 : 210; }
static LS_INLINE void ls_scale_min_k4(int j, const unsigned char* q, int* sc, int* m) {
  if (j < 4) { *sc = q[j] & 63; *m = q[j + 4] & 63; }
  else { *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4); *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4); }
}
/* group g of a row: the 32 unsigned weights into u, the halves' maps into s[2], o[2] */
static LS_INLINE void ls_kgroup(const unsigned char* row, int code, long long g, unsigned char* u, float* s, float* o) {
  if (code == 3) {  /* Q5_0: d, 32 high bits, 16 bytes of nibbles; value = d * (u - 16) */
    const unsigned char* p = row + 22 * g;
    const float d = ls_hx(p, 0);
    const unsigned int h = (unsigned int)p[2] | (unsigned int)p[3] << 8 | (unsigned int)p[4] << 16
                           | (unsigned int)p[5] << 24;
    for (int t = 0; t < 16; t++) {
      u[t] = (unsigned char)((p[6 + t] & 15) | ((h >> t) & 1) << 4);
      u[16 + t] = (unsigned char)((p[6 + t] >> 4) | ((h >> (t + 16)) & 1) << 4);
    }
    s[0] = s[1] = d; o[0] = o[1] = -16.0f * d;
  } else if (code == 4) {  /* Q4_K: d, dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles */
    const unsigned char* p = row + 144 * (g / 8);
    const int sub = (int)(g % 8);
    int sc, m;
    ls_scale_min_k4(sub, p + 4, &sc, &m);
    const unsigned char* q = p + 16 + 32 * (sub / 2);
    for (int t = 0; t < 32; t++) u[t] = (unsigned char)(sub & 1 ? q[t] >> 4 : q[t] & 15);
    s[0] = s[1] = ls_hx(p, 0) * (float)sc; o[0] = o[1] = -(ls_hx(p, 1) * (float)m);
  } else {  /* Q6_K: 128 bytes of low nibbles, 64 of 2-bit highs, 16 int8 scales, d */
    const unsigned char* p = row + 210 * (g / 8);
    const int sub = (int)(g % 8), half = sub / 4, k = sub % 4;
    const unsigned char* ql = p + 64 * half + 32 * (k & 1);
    const unsigned char* qh = p + 128 + 32 * half;
    const signed char* sc = (const signed char*)(p + 192 + 8 * half);
    for (int t = 0; t < 32; t++)
      u[t] = (unsigned char)((k < 2 ? ql[t] & 15 : ql[t] >> 4) | ((qh[t] >> (2 * k)) & 3) << 4);
    const float d = ls_hx(p + 208, 0);
    s[0] = d * (float)sc[2 * k]; s[1] = d * (float)sc[2 * k + 1];
    o[0] = -32.0f * s[0]; o[1] = -32.0f * s[1];
  }
}
/* group g as 32 float32 weights, computed as ggml computes them */
static LS_INLINE void ls_dec32(const unsigned char* row, int code, long long g, float* w) {
  unsigned char u[32]; float s[2], o[2];
  ls_kgroup(row, code, g, u, s, o);
  for (int t = 0; t < 32; t++)
    w[t] = code == 5 ? s[t / 16] * (float)((int)u[t] - 32) : code == 3 ? (float)((int)u[t] - 16) * s[0]
         : (float)u[t] * s[0] + o[0];
}
/* element (r, c) of a packed [rows, 32 nb] matrix (qtype 0: q4_0, 1: q4_1, 2: q8_0, 3-5: q5_0,
   q4_k, q6_k), exactly */
static LS_INLINE float ls_blk_at(const unsigned char* packed, long long nb, int qtype, long long r, long long c) {
  const long long b = c / 32, t = c % 32;
  if (qtype >= 3) {
    float f[32];
    ls_dec32(packed + r * (qtype == 3 ? nb : nb / 8) * ls_kbytes(qtype), qtype, b, f);
    return f[t];
  }
  const unsigned char* row = packed + r * nb * (qtype == 2 ? 34 : qtype == 1 ? 20 : 18);
  const float d = ls_hx(row, b);
  if (qtype == 2) return d * (float)(signed char)row[2 * nb + 32 * b + t];
  const unsigned char q = row[(qtype == 1 ? 4 : 2) * nb + 16 * b + (t & 15)];
  const int v = t < 16 ? q & 15 : q >> 4;
  return qtype == 1 ? (float)v * d + ls_hx(row, nb + b) : (float)(v - 8) * d;
}
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
typedef __m256 ls_f8;
static LS_INLINE ls_f8 ls_ldf8(const float* p) { return _mm256_loadu_ps(p); }
static LS_INLINE ls_f8 ls_zero8(void) { return _mm256_setzero_ps(); }
static LS_INLINE ls_f8 ls_fma8(ls_f8 a, ls_f8 b, ls_f8 c) { return _mm256_fmadd_ps(a, b, c); }
static LS_INLINE ls_f8 ls_add8(ls_f8 a, ls_f8 b) { return _mm256_add_ps(a, b); }
static LS_INLINE ls_f8 ls_u8x8(__m128i b) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b)); }
static LS_INLINE ls_f8 ls_i8x8(__m128i b) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)); }
static LS_INLINE float ls_hsum8(ls_f8 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}
/* block b of a packed row decoded into 4 vectors of 8 floats (weights 0-7, ..., 24-31) */
static LS_INLINE void ls_blk_q4_1(const unsigned char* row, long long nb, long long b, ls_f8* w) {
  const ls_f8 d = _mm256_set1_ps(ls_hx(row, b)), m = _mm256_set1_ps(ls_hx(row, nb + b));
  const __m128i q = _mm_loadu_si128((const __m128i*)(row + 4 * nb + 16 * b)), f = _mm_set1_epi8(15);
  const __m128i lo = _mm_and_si128(q, f), hi = _mm_and_si128(_mm_srli_epi16(q, 4), f);
  w[0] = _mm256_fmadd_ps(ls_u8x8(lo), d, m); w[1] = _mm256_fmadd_ps(ls_u8x8(_mm_srli_si128(lo, 8)), d, m);
  w[2] = _mm256_fmadd_ps(ls_u8x8(hi), d, m); w[3] = _mm256_fmadd_ps(ls_u8x8(_mm_srli_si128(hi, 8)), d, m);
}
static LS_INLINE void ls_blk_q4_0(const unsigned char* row, long long nb, long long b, ls_f8* w) {
  const ls_f8 d = _mm256_set1_ps(ls_hx(row, b));
  const __m128i q = _mm_loadu_si128((const __m128i*)(row + 2 * nb + 16 * b));
  const __m128i f = _mm_set1_epi8(15), e = _mm_set1_epi8(8);
  const __m128i lo = _mm_sub_epi8(_mm_and_si128(q, f), e), hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), f), e);
  w[0] = _mm256_mul_ps(ls_i8x8(lo), d); w[1] = _mm256_mul_ps(ls_i8x8(_mm_srli_si128(lo, 8)), d);
  w[2] = _mm256_mul_ps(ls_i8x8(hi), d); w[3] = _mm256_mul_ps(ls_i8x8(_mm_srli_si128(hi, 8)), d);
}
static LS_INLINE void ls_blk_q8_0(const unsigned char* row, long long nb, long long b, ls_f8* w) {
  const ls_f8 d = _mm256_set1_ps(ls_hx(row, b));
  const unsigned char* q = row + 2 * nb + 32 * b;
  const __m128i b0 = _mm_loadu_si128((const __m128i*)q), b1 = _mm_loadu_si128((const __m128i*)(q + 16));
  w[0] = _mm256_mul_ps(ls_i8x8(b0), d); w[1] = _mm256_mul_ps(ls_i8x8(_mm_srli_si128(b0, 8)), d);
  w[2] = _mm256_mul_ps(ls_i8x8(b1), d); w[3] = _mm256_mul_ps(ls_i8x8(_mm_srli_si128(b1, 8)), d);
}
/* x quantised per block of 32 to ``bits`` 8 (as llama.cpp's q8_1: d = amax / 127) or 16 (int16,
   d = amax / 32767) bit integers q = nearest(x / d); s = d * sum(q) for the q4 offsets */
static LS_INLINE void ls_quant_x(const float* x, long long nb, int bits, void* y, float* d, float* s) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const float top = bits == 8 ? 127.0f : 32767.0f;
  for (long long b = 0; b < nb; b++, x += 32) {
    __m256 v[4];
    for (int t = 0; t < 4; t++) v[t] = _mm256_loadu_ps(x + 8 * t);
    const __m256 a = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                                   _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    const float amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
    const float db = amax / top, id = amax != 0.0f ? top / amax : 0.0f;
    const __m256 mul = _mm256_set1_ps(id);
    __m256i q[4];
    for (int t = 0; t < 4; t++)  /* the rounding mode must be a constant expression (clang) */
      q[t] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[t], mul),
                                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    const __m256i t4 = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    __m128i u = _mm_add_epi32(_mm256_castsi256_si128(t4), _mm256_extracti128_si256(t4, 1));
    u = _mm_add_epi32(u, _mm_shuffle_epi32(u, 0x4e));
    u = _mm_add_epi32(u, _mm_shuffle_epi32(u, 0xb1));
    d[b] = db; s[b] = db * (float)_mm_cvtsi128_si32(u);
    /* packing interleaves the 128-bit lanes: the permutation puts the values back in order */
    const __m256i w01 = _mm256_permute4x64_epi64(_mm256_packs_epi32(q[0], q[1]), 0xd8);
    const __m256i w23 = _mm256_permute4x64_epi64(_mm256_packs_epi32(q[2], q[3]), 0xd8);
    if (bits == 16) {
      _mm256_storeu_si256((__m256i*)((short*)y + 32 * b), w01);
      _mm256_storeu_si256((__m256i*)((short*)y + 32 * b + 16), w23);
    } else {
      _mm256_storeu_si256((__m256i*)((signed char*)y + 32 * b),
                          _mm256_permute4x64_epi64(_mm256_packs_epi16(w01, w23), 0xd8));
    }
  }
}
/* one block's integer dot, as 4 partial sums: a q4 block's 16 bytes of nibbles (low nibbles are
   weights 0-15) or a q8_0 block's 32 signed bytes, against x's 32 integers of ``bits`` bits.
   128-bit operations: the widest this target (znver1) executes without splitting. */
static LS_INLINE __m128 ls_block_dot(const unsigned char* q, int q8, const void* y, int bits) {
  const __m128i ones = _mm_set1_epi16(1);
  if (!q8) {
    const __m128i nib = _mm_loadu_si128((const __m128i*)q), low = _mm_set1_epi8(15);
    const __m128i n0 = _mm_and_si128(nib, low), n1 = _mm_and_si128(_mm_srli_epi16(nib, 4), low);
    if (bits == 8) {
      const __m128i* yy = (const __m128i*)y;
      const __m128i p = _mm_add_epi16(_mm_maddubs_epi16(n0, _mm_loadu_si128(yy)),
                                      _mm_maddubs_epi16(n1, _mm_loadu_si128(yy + 1)));
      return _mm_cvtepi32_ps(_mm_madd_epi16(p, ones));
    }
    const __m128i z = _mm_setzero_si128();
    const __m128i* yy = (const __m128i*)y;
    __m128i p = _mm_madd_epi16(_mm_unpacklo_epi8(n0, z), _mm_loadu_si128(yy));
    p = _mm_add_epi32(p, _mm_madd_epi16(_mm_unpackhi_epi8(n0, z), _mm_loadu_si128(yy + 1)));
    p = _mm_add_epi32(p, _mm_madd_epi16(_mm_unpacklo_epi8(n1, z), _mm_loadu_si128(yy + 2)));
    p = _mm_add_epi32(p, _mm_madd_epi16(_mm_unpackhi_epi8(n1, z), _mm_loadu_si128(yy + 3)));
    return _mm_cvtepi32_ps(p);
  }
  const __m128i w0 = _mm_loadu_si128((const __m128i*)q), w1 = _mm_loadu_si128((const __m128i*)(q + 16));
  if (bits == 8) {  /* signed times signed: |w| times y with w's sign; pairs of 128 * 127 fit 16 bits */
    const __m128i* yy = (const __m128i*)y;
    const __m128i p0 = _mm_maddubs_epi16(_mm_sign_epi8(w0, w0), _mm_sign_epi8(_mm_loadu_si128(yy), w0));
    const __m128i p1 = _mm_maddubs_epi16(_mm_sign_epi8(w1, w1), _mm_sign_epi8(_mm_loadu_si128(yy + 1), w1));
    return _mm_cvtepi32_ps(_mm_add_epi32(_mm_madd_epi16(p0, ones), _mm_madd_epi16(p1, ones)));
  }
  const __m128i* yy = (const __m128i*)y;
  __m128i p = _mm_madd_epi16(_mm_cvtepi8_epi16(w0), _mm_loadu_si128(yy));
  p = _mm_add_epi32(p, _mm_madd_epi16(_mm_cvtepi8_epi16(_mm_srli_si128(w0, 8)), _mm_loadu_si128(yy + 1)));
  p = _mm_add_epi32(p, _mm_madd_epi16(_mm_cvtepi8_epi16(w1), _mm_loadu_si128(yy + 2)));
  p = _mm_add_epi32(p, _mm_madd_epi16(_mm_cvtepi8_epi16(_mm_srli_si128(w1, 8)), _mm_loadu_si128(yy + 3)));
  return _mm_cvtepi32_ps(p);
}
/* 256-bit integer dots where the CPU runs them at full width (everything with AVX2 but Zen 1,
   which splits them: there, or with -DLS_NARROW, the 128-bit ones above): a block's 32 products
   in one register pass, 8 partial sums; AVX-512 VNNI's dpbusd / dpwssd where present. */
#if !defined(__znver1__) && !defined(LS_NARROW)
#define LS_WIDE 1
static LS_INLINE __m256 ls_block_dot256(const unsigned char* q, int q8, const void* y, int bits) {
  const __m256i* yy = (const __m256i*)y;
  __m256i w0, w1;  /* weights 0-15 and 16-31: bytes (bits 8, in one register w0) or 16-bit */
  if (!q8) {
    const __m128i nib = _mm_loadu_si128((const __m128i*)q), low = _mm_set1_epi8(15);
    const __m128i n0 = _mm_and_si128(nib, low), n1 = _mm_and_si128(_mm_srli_epi16(nib, 4), low);
    if (bits == 8) {
      const __m256i u = _mm256_set_m128i(n1, n0), v = _mm256_loadu_si256(yy);
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
      return _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), u, v));
#else
      return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(u, v), _mm256_set1_epi16(1)));
#endif
    }
    w0 = _mm256_cvtepu8_epi16(n0); w1 = _mm256_cvtepu8_epi16(n1);
  } else {
    if (bits == 8) {  /* signed times signed: |w| times y with w's sign */
      const __m256i w = _mm256_loadu_si256((const __m256i*)q), v = _mm256_loadu_si256(yy);
      const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(v, w));
      return _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
    }
    w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)q));
    w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(q + 16)));
  }
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_cvtepi32_ps(_mm256_dpwssd_epi32(_mm256_madd_epi16(w0, _mm256_loadu_si256(yy)), w1,
                                                _mm256_loadu_si256(yy + 1)));
#else
  return _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_madd_epi16(w0, _mm256_loadu_si256(yy)),
                                             _mm256_madd_epi16(w1, _mm256_loadu_si256(yy + 1))));
#endif
}
#endif
/* the integer dots' float accumulators: 8 lanes where the dots are 256-bit (LS_WIDE), else 4 */
#ifdef LS_WIDE
typedef __m256 ls_acc;
#define ls_acc_zero _mm256_setzero_ps
#define ls_acc_add _mm256_add_ps
#define ls_acc_fma _mm256_fmadd_ps
#define ls_acc_set1 _mm256_set1_ps
#define ls_acc_bcast _mm256_broadcast_ss
#define ls_acc_cvt _mm256_cvtepi32_ps
#define ls_bdot ls_block_dot256
static LS_INLINE __m128 ls_acc_half(ls_acc a) {
  return _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
}
#else
typedef __m128 ls_acc;
#define ls_acc_zero _mm_setzero_ps
#define ls_acc_add _mm_add_ps
#define ls_acc_fma _mm_fmadd_ps
#define ls_acc_set1 _mm_set1_ps
#define ls_acc_bcast _mm_broadcast_ss
#define ls_acc_cvt _mm_cvtepi32_ps
#define ls_bdot ls_block_dot
static LS_INLINE __m128 ls_acc_half(ls_acc a) { return a; }
#endif
static LS_INLINE float ls_hsum4(__m128 a) {
  a = _mm_add_ps(a, _mm_movehl_ps(a, a));
  return _mm_cvtss_f32(_mm_add_ss(a, _mm_shuffle_ps(a, a, 1)));
}
/* a packed row (qtype 0: q4_0, 1: q4_1, 2: q8_0) dotted with quantised x (y, d, s):
   sum over blocks of dw * dx * (integer dot) + the q4 offsets (q4_1: m, q4_0: -8 dw) * s.
   Blocks go in groups of 8 whose scales convert at once. */
static LS_INLINE float ls_qdot(const unsigned char* row, long long nb, int qtype, int bits, const void* y,
                               const float* xd, const float* xs) {
  const int q8 = qtype == 2, bsize = q8 ? 32 : 16, ysize = bits / 8 * 32;
  const unsigned char* qs = row + (qtype == 1 ? 4 : 2) * nb;
  const unsigned char* yb = (const unsigned char*)y;
  ls_acc acc0 = ls_acc_zero(), acc1 = acc0;
  __m256 offv = _mm256_setzero_ps();
  float sc[8] __attribute__((aligned(32)));
  long long b = 0;
  for (; b + 8 <= nb; b += 8) {
    const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(row + 2 * b)));
    _mm256_store_ps(sc, _mm256_mul_ps(dv, _mm256_loadu_ps(xd + b)));
    if (!q8)
      offv = _mm256_fmadd_ps(qtype == 1 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(row + 2 * (nb + b)))) : dv,
                             _mm256_loadu_ps(xs + b), offv);
    for (int t = 0; t < 8; t += 2) {
      acc0 = ls_acc_fma(ls_acc_bcast(sc + t), ls_bdot(qs + (b + t) * bsize, q8, yb + (b + t) * ysize, bits), acc0);
      acc1 = ls_acc_fma(ls_acc_bcast(sc + t + 1), ls_bdot(qs + (b + t + 1) * bsize, q8, yb + (b + t + 1) * ysize, bits),
                        acc1);
    }
  }
  float off = 0.0f;
  for (; b < nb; b++) {
    acc0 = ls_acc_fma(ls_acc_set1(ls_hx(row, b) * xd[b]), ls_bdot(qs + b * bsize, q8, yb + b * ysize, bits), acc0);
    if (!q8) off += ls_hx(row, qtype == 1 ? nb + b : b) * xs[b];
  }
  const float dot = ls_hsum4(ls_acc_half(ls_acc_add(acc0, acc1)));
  off += ls_hsum8(offv);
  return q8 ? dot : dot + (qtype == 1 ? off : -8.0f * off);
}
/* 16 weights (bytes: unsigned u, or signed q) times 16 of x's integers (``bits`` 8 or 16, half h
   of a group's 32): 4 partial sums */
static LS_INLINE __m128i ls_udot16(__m128i u, const void* y, int bits, int h) {
  if (bits == 8)
    return _mm_madd_epi16(_mm_maddubs_epi16(u, _mm_loadu_si128((const __m128i*)y + h)), _mm_set1_epi16(1));
  const __m128i* yy = (const __m128i*)y + 2 * h;
  const __m128i z = _mm_setzero_si128();
  return _mm_add_epi32(_mm_madd_epi16(_mm_unpacklo_epi8(u, z), _mm_loadu_si128(yy)),
                       _mm_madd_epi16(_mm_unpackhi_epi8(u, z), _mm_loadu_si128(yy + 1)));
}
static LS_INLINE __m128i ls_sdot16(__m128i q, const void* y, int bits, int h) {
  if (bits == 8) {
    const __m128i v = _mm_loadu_si128((const __m128i*)y + h);
    return _mm_madd_epi16(_mm_maddubs_epi16(_mm_sign_epi8(q, q), _mm_sign_epi8(v, q)), _mm_set1_epi16(1));
  }
  const __m128i* yy = (const __m128i*)y + 2 * h;
  return _mm_add_epi32(_mm_madd_epi16(_mm_cvtepi8_epi16(q), _mm_loadu_si128(yy)),
                       _mm_madd_epi16(_mm_cvtepi8_epi16(_mm_srli_si128(q, 8)), _mm_loadu_si128(yy + 1)));
}
/* group g's dot with x's group (integers y, scale dx, dx * sum s): 4 partial sums; its offset
   term (value = s * u + o) added to *off */
static LS_INLINE __m128 ls_kdot_group(const unsigned char* row, int code, long long g, int bits, const void* y,
                                      float dx, float sx, float* off) {
  const __m128i low = _mm_set1_epi8(15);
  if (code == 3) {
    const unsigned char* p = row + 22 * g;
    const float d = ls_hx(p, 0);
    unsigned int h;
    memcpy(&h, p + 2, 4);
    const __m128i hv = _mm_set1_epi32((int)h), bit = _mm_set1_epi64x((long long)0x8040201008040201ULL);
    /* byte t of each half: the bit of h that is its fifth bit, as 0xff or 0 */
    const __m128i pick_lo = _mm_set_epi64x(0x0101010101010101LL, 0);
    const __m128i pick_hi = _mm_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL);
    const __m128i hl = _mm_cmpeq_epi8(_mm_and_si128(_mm_shuffle_epi8(hv, pick_lo), bit), bit);
    const __m128i hh = _mm_cmpeq_epi8(_mm_and_si128(_mm_shuffle_epi8(hv, pick_hi), bit), bit);
    const __m128i nib = _mm_loadu_si128((const __m128i*)(p + 6)), sixteen = _mm_set1_epi8(16);
    const __m128i lo = _mm_or_si128(_mm_and_si128(nib, low), _mm_and_si128(hl, sixteen));
    const __m128i hi = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(nib, 4), low), _mm_and_si128(hh, sixteen));
    *off -= 16.0f * d * sx;
    return _mm_mul_ps(_mm_cvtepi32_ps(_mm_add_epi32(ls_udot16(lo, y, bits, 0), ls_udot16(hi, y, bits, 1))),
                      _mm_set1_ps(d * dx));
  }
  if (code == 4) {
    const unsigned char* p = row + 144 * (g / 8);
    const int sub = (int)(g % 8);
    int sc, m;
    ls_scale_min_k4(sub, p + 4, &sc, &m);
    const __m128i* q = (const __m128i*)(p + 16 + 32 * (sub / 2));
    __m128i lo = _mm_loadu_si128(q), hi = _mm_loadu_si128(q + 1);
    if (sub & 1) { lo = _mm_srli_epi16(lo, 4); hi = _mm_srli_epi16(hi, 4); }
    lo = _mm_and_si128(lo, low); hi = _mm_and_si128(hi, low);
    *off -= ls_hx(p, 1) * (float)m * sx;
    return _mm_mul_ps(_mm_cvtepi32_ps(_mm_add_epi32(ls_udot16(lo, y, bits, 0), ls_udot16(hi, y, bits, 1))),
                      _mm_set1_ps(ls_hx(p, 0) * (float)sc * dx));
  }
  const unsigned char* p = row + 210 * (g / 8);
  const int sub = (int)(g % 8), half = sub / 4, k = sub % 4;
  const __m128i* ql = (const __m128i*)(p + 64 * half + 32 * (k & 1));
  const __m128i* qh = (const __m128i*)(p + 128 + 32 * half);
  const signed char* sc = (const signed char*)(p + 192 + 8 * half);
  __m128i l0 = _mm_loadu_si128(ql), l1 = _mm_loadu_si128(ql + 1);
  if (k >= 2) { l0 = _mm_srli_epi16(l0, 4); l1 = _mm_srli_epi16(l1, 4); }
  const __m128i sh = _mm_cvtsi32_si128(2 * k), three = _mm_set1_epi8(3), c32 = _mm_set1_epi8(32);
  const __m128i h0 = _mm_and_si128(_mm_srl_epi16(_mm_loadu_si128(qh), sh), three);
  const __m128i h1 = _mm_and_si128(_mm_srl_epi16(_mm_loadu_si128(qh + 1), sh), three);
  /* signed weights q - 32, in [-32, 31] */
  const __m128i q0 = _mm_sub_epi8(_mm_or_si128(_mm_and_si128(l0, low), _mm_slli_epi16(h0, 4)), c32);
  const __m128i q1 = _mm_sub_epi8(_mm_or_si128(_mm_and_si128(l1, low), _mm_slli_epi16(h1, 4)), c32);
  const float d = ls_hx(p + 208, 0);
  (void)sx; (void)off;
  const __m128 s0 = _mm_set1_ps(d * (float)sc[2 * k] * dx), s1 = _mm_set1_ps(d * (float)sc[2 * k + 1] * dx);
  return _mm_fmadd_ps(_mm_cvtepi32_ps(ls_sdot16(q0, y, bits, 0)), s0,
                      _mm_mul_ps(_mm_cvtepi32_ps(ls_sdot16(q1, y, bits, 1)), s1));
}
/* a group's 32 unsigned weights (0-15 in lo, 16-31 in hi) times x's 32 integers, and 32 signed
   ones whose halves have scales s0 (q0: weights 0-15) and s1 (q1), as ls_acc partial sums */
#ifdef LS_WIDE
static LS_INLINE __m256i ls_udot32(__m128i lo, __m128i hi, const unsigned char* y, int bits) {
  const __m256i* yy = (const __m256i*)y;
  if (bits == 8) {
    const __m256i u = _mm256_set_m128i(hi, lo), v = _mm256_loadu_si256(yy);
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, v);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, v), _mm256_set1_epi16(1));
#endif
  }
  return _mm256_add_epi32(_mm256_madd_epi16(_mm256_cvtepu8_epi16(lo), _mm256_loadu_si256(yy)),
                          _mm256_madd_epi16(_mm256_cvtepu8_epi16(hi), _mm256_loadu_si256(yy + 1)));
}
static LS_INLINE __m256 ls_sdot32(__m128i q0, __m128i q1, const unsigned char* y, int bits, float s0, float s1) {
  const __m256i* yy = (const __m256i*)y;
  if (bits == 8) {  /* lanes 0-3 hold q0's sums, 4-7 q1's */
    const __m256i w = _mm256_set_m128i(q1, q0), v = _mm256_loadu_si256(yy);
    const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(v, w)),
                                        _mm256_set1_epi16(1));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(p), _mm256_set_m128(_mm_set1_ps(s1), _mm_set1_ps(s0)));
  }
  const __m256 a = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_cvtepi8_epi16(q0), _mm256_loadu_si256(yy)));
  const __m256 b = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_cvtepi8_epi16(q1), _mm256_loadu_si256(yy + 1)));
  return _mm256_fmadd_ps(a, _mm256_set1_ps(s0), _mm256_mul_ps(b, _mm256_set1_ps(s1)));
}
#else
static LS_INLINE __m128i ls_udot32(__m128i lo, __m128i hi, const unsigned char* y, int bits) {
  return _mm_add_epi32(ls_udot16(lo, y, bits, 0), ls_udot16(hi, y, bits, 1));
}
static LS_INLINE __m128 ls_sdot32(__m128i q0, __m128i q1, const unsigned char* y, int bits, float s0, float s1) {
  return _mm_fmadd_ps(_mm_cvtepi32_ps(ls_sdot16(q0, y, bits, 0)), _mm_set1_ps(s0),
                      _mm_mul_ps(_mm_cvtepi32_ps(ls_sdot16(q1, y, bits, 1)), _mm_set1_ps(s1)));
}
#endif
/* one 256-weight K-quant block (8 groups) dotted with x's 8 groups: the block's header (float16
   d / dmin, the scales) read once and each byte of integers loaded once for the groups sharing
   it (Q4_K: a byte's two nibbles; Q6_K: a high-bits byte's four pairs); the same sums as
   ls_kdot_group's.  Q4_K's offsets go to *off. */
static LS_INLINE ls_acc ls_kdot_super(const unsigned char* p, int code, int bits, const unsigned char* y,
                                      long long ystep, const float* xd, const float* xs, float* off) {
  const __m128i low = _mm_set1_epi8(15);
  ls_acc acc = ls_acc_zero();
  if (code == 4) {
    const float d = ls_hx(p, 0), dmin = ls_hx(p, 1);
    float o = 0.0f;
    for (int j = 0; j < 4; j++) {
      int sc0, m0, sc1, m1;
      ls_scale_min_k4(2 * j, p + 4, &sc0, &m0);
      ls_scale_min_k4(2 * j + 1, p + 4, &sc1, &m1);
      const __m128i* q = (const __m128i*)(p + 16 + 32 * j);
      const __m128i b0 = _mm_loadu_si128(q), b1 = _mm_loadu_si128(q + 1);
      const __m128i l0 = _mm_and_si128(b0, low), l1 = _mm_and_si128(b1, low);
      const __m128i h0 = _mm_and_si128(_mm_srli_epi16(b0, 4), low), h1 = _mm_and_si128(_mm_srli_epi16(b1, 4), low);
      const unsigned char* y0 = y + 2 * j * ystep;
      acc = ls_acc_fma(ls_acc_cvt(ls_udot32(l0, l1, y0, bits)), ls_acc_set1(d * (float)sc0 * xd[2 * j]), acc);
      acc = ls_acc_fma(ls_acc_cvt(ls_udot32(h0, h1, y0 + ystep, bits)), ls_acc_set1(d * (float)sc1 * xd[2 * j + 1]),
                       acc);
      o += dmin * (float)m0 * xs[2 * j] + dmin * (float)m1 * xs[2 * j + 1];
    }
    *off -= o;
    return acc;
  }
  const float d = ls_hx(p + 208, 0);
  const __m128i three = _mm_set1_epi8(3), c32 = _mm_set1_epi8(32);
  for (int half = 0; half < 2; half++) {
    const __m128i* ql = (const __m128i*)(p + 64 * half);
    const __m128i* qh = (const __m128i*)(p + 128 + 32 * half);
    const signed char* sc = (const signed char*)(p + 192 + 8 * half);
    const __m128i a0 = _mm_loadu_si128(ql), a1 = _mm_loadu_si128(ql + 1);  /* groups k = 0, 2 */
    const __m128i c0 = _mm_loadu_si128(ql + 2), c1 = _mm_loadu_si128(ql + 3);  /* k = 1, 3 */
    const __m128i e0 = _mm_loadu_si128(qh), e1 = _mm_loadu_si128(qh + 1);
    for (int k = 0; k < 4; k++) {
      __m128i l0 = k & 1 ? c0 : a0, l1 = k & 1 ? c1 : a1;
      if (k >= 2) { l0 = _mm_srli_epi16(l0, 4); l1 = _mm_srli_epi16(l1, 4); }
      const __m128i sh = _mm_cvtsi32_si128(2 * k);
      const __m128i h0 = _mm_and_si128(_mm_srl_epi16(e0, sh), three), h1 = _mm_and_si128(_mm_srl_epi16(e1, sh), three);
      /* signed weights q - 32, in [-32, 31] */
      const __m128i q0 = _mm_sub_epi8(_mm_or_si128(_mm_and_si128(l0, low), _mm_slli_epi16(h0, 4)), c32);
      const __m128i q1 = _mm_sub_epi8(_mm_or_si128(_mm_and_si128(l1, low), _mm_slli_epi16(h1, 4)), c32);
      const float dx = xd[4 * half + k];
      acc = ls_acc_add(acc, ls_sdot32(q0, q1, y + (4 * half + k) * ystep, bits, d * (float)sc[2 * k] * dx,
                                      d * (float)sc[2 * k + 1] * dx));
    }
  }
  (void)xs; (void)off;
  return acc;
}
/* a Q5_0 / Q4_K / Q6_K row (ng groups of 32) dotted with quantised x */
static LS_INLINE float ls_kdot(const unsigned char* row, long long ng, int code, int bits, const void* y,
                               const float* xd, const float* xs) {
  const unsigned char* yb = (const unsigned char*)y;
  const long long ystep = bits / 8 * 32;
  __m128 acc0 = _mm_setzero_ps(), acc1 = acc0;
  float off = 0.0f;
  long long g = 0;
  if (code >= 4) {  /* K-quant rows are whole 256-weight blocks: two of them in flight */
    ls_acc w0 = ls_acc_zero(), w1 = w0;
    for (; g + 16 <= ng; g += 16) {
      w0 = ls_acc_add(w0, ls_kdot_super(row + ls_kbytes(code) * (g / 8), code, bits, yb + g * ystep, ystep,
                                        xd + g, xs + g, &off));
      w1 = ls_acc_add(w1, ls_kdot_super(row + ls_kbytes(code) * (g / 8 + 1), code, bits, yb + (g + 8) * ystep,
                                        ystep, xd + g + 8, xs + g + 8, &off));
    }
    for (; g + 8 <= ng; g += 8)
      w0 = ls_acc_add(w0, ls_kdot_super(row + ls_kbytes(code) * (g / 8), code, bits, yb + g * ystep, ystep,
                                        xd + g, xs + g, &off));
    acc0 = ls_acc_half(ls_acc_add(w0, w1));
  }
  for (; g + 2 <= ng; g += 2) {
    acc0 = _mm_add_ps(acc0, ls_kdot_group(row, code, g, bits, yb + g * ystep, xd[g], xs[g], &off));
    acc1 = _mm_add_ps(acc1, ls_kdot_group(row, code, g + 1, bits, yb + (g + 1) * ystep, xd[g + 1], xs[g + 1], &off));
  }
  if (g < ng) acc0 = _mm_add_ps(acc0, ls_kdot_group(row, code, g, bits, yb + g * ystep, xd[g], xs[g], &off));
  return ls_hsum4(_mm_add_ps(acc0, acc1)) + off;
}
static LS_INLINE void ls_blk_k(const unsigned char* row, int code, long long g, ls_f8* w) {
  float f[32];
  ls_dec32(row, code, g, f);
  for (int q = 0; q < 4; q++) w[q] = ls_ldf8(f + 8 * q);
}
#else
typedef float ls_f8 __attribute__((vector_size(32)));
static LS_INLINE ls_f8 ls_ldf8(const float* p) { ls_f8 v; memcpy(&v, p, sizeof v); return v; }
static LS_INLINE ls_f8 ls_zero8(void) { ls_f8 z = {0, 0, 0, 0, 0, 0, 0, 0}; return z; }
static LS_INLINE ls_f8 ls_fma8(ls_f8 a, ls_f8 b, ls_f8 c) { return a * b + c; }
static LS_INLINE ls_f8 ls_add8(ls_f8 a, ls_f8 b) { return a + b; }
static LS_INLINE float ls_hsum8(ls_f8 v) { return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7])); }
static LS_INLINE void ls_blk_q4_1(const unsigned char* row, long long nb, long long b, ls_f8* w) {
  const float d = ls_hx(row, b), m = ls_hx(row, nb + b);
  const unsigned char* q = row + 4 * nb + 16 * b;
  for (int t = 0; t < 16; t++) {
    w[t / 8][t % 8] = (float)(q[t] & 15) * d + m;
    w[2 + t / 8][t % 8] = (float)(q[t] >> 4) * d + m;
  }
}
static LS_INLINE void ls_blk_q4_0(const unsigned char* row, long long nb, long long b, ls_f8* w) {
  const float d = ls_hx(row, b);
  const unsigned char* q = row + 2 * nb + 16 * b;
  for (int t = 0; t < 16; t++) {
    w[t / 8][t % 8] = (float)((q[t] & 15) - 8) * d;
    w[2 + t / 8][t % 8] = (float)((q[t] >> 4) - 8) * d;
  }
}
static LS_INLINE void ls_blk_q8_0(const unsigned char* row, long long nb, long long b, ls_f8* w) {
  const float d = ls_hx(row, b);
  const signed char* q = (const signed char*)(row + 2 * nb + 32 * b);
  for (int t = 0; t < 32; t++) w[t / 8][t % 8] = (float)q[t] * d;
}
static LS_INLINE void ls_quant_x(const float* x, long long nb, int bits, void* y, float* d, float* s) {
  const float top = bits == 8 ? 127.0f : 32767.0f;
  for (long long b = 0; b < nb; b++, x += 32) {
    float amax = 0.0f;
    for (int t = 0; t < 32; t++) amax = fmaxf(amax, fabsf(x[t]));
    const float db = amax / top, id = amax != 0.0f ? top / amax : 0.0f;
    int sum = 0;
    for (int t = 0; t < 32; t++) {
      const int q = (int)nearbyintf(x[t] * id);
      if (bits == 8) ((signed char*)y)[32 * b + t] = (signed char)q;
      else ((short*)y)[32 * b + t] = (short)q;
      sum += q;
    }
    d[b] = db; s[b] = db * (float)sum;
  }
}
static LS_INLINE float ls_qdot(const unsigned char* row, long long nb, int qtype, int bits, const void* y,
                               const float* xd, const float* xs) {
  const unsigned char* qs = row + (qtype == 1 ? 4 : 2) * nb;
  float acc = 0.0f, off = 0.0f;
  for (long long b = 0; b < nb; b++) {
    int sum = 0;
    for (int t = 0; t < 32; t++) {
      const int w = qtype == 2 ? (int)(signed char)qs[32 * b + t]
                  : t < 16 ? qs[16 * b + t] & 15 : qs[16 * b + t - 16] >> 4;
      sum += w * (bits == 8 ? (int)((const signed char*)y)[32 * b + t] : (int)((const short*)y)[32 * b + t]);
    }
    acc += ls_hx(row, b) * xd[b] * (float)sum;
    if (qtype != 2) off += ls_hx(row, qtype == 1 ? nb + b : b) * xs[b];
  }
  return qtype == 2 ? acc : acc + (qtype == 1 ? off : -8.0f * off);
}
static LS_INLINE float ls_kdot(const unsigned char* row, long long ng, int code, int bits, const void* y,
                               const float* xd, const float* xs) {
  float acc = 0.0f, off = 0.0f;
  for (long long g = 0; g < ng; g++) {
    unsigned char u[32]; float s[2], o[2];
    ls_kgroup(row, code, g, u, s, o);
    int sum[2] = {0, 0}, qs[2] = {0, 0};
    for (int t = 0; t < 32; t++) {
      const int q = bits == 8 ? (int)((const signed char*)y)[32 * g + t] : (int)((const short*)y)[32 * g + t];
      sum[t / 16] += (code == 5 ? (int)u[t] - 32 : (int)u[t]) * q;
      qs[t / 16] += q;
    }
    for (int h = 0; h < 2; h++) {
      acc += s[h] * xd[g] * (float)sum[h];
      if (code != 5) off += o[h] * xd[g] * (float)qs[h];
    }
  }
  (void)xs;
  return acc + off;
}
static LS_INLINE void ls_blk_k(const unsigned char* row, int code, long long g, ls_f8* w) {
  float f[32];
  ls_dec32(row, code, g, f);
  for (int q = 0; q < 4; q++) w[q] = ls_ldf8(f + 8 * q);
}
#endif
"""


def prelude(dialect: str) -> str:
    return _PRELUDE[dialect]


# ---------------------------------------------------------------------------- kernels
@dataclass(frozen=True)
class KernelSpec:
    """A generated kernel: its name (a hash of its text), its text in one dialect, the dims and
    buffers it takes in parameter order (``buffers``: ``"out"`` for the op's value, an int k for
    the op's k-th operand), its mode and its work-item count (an expression of the dims)."""

    name: str
    source: str
    dims: tuple[str, ...]
    buffers: tuple[str | int, ...]
    mode: str
    count: Expr


class _Scope:
    def __init__(self, parent: _Scope | None):
        self.parent = parent
        self.lines: list[str] = []
        self.memo: dict = {}

    def find(self, key):
        s = self
        while s is not None:
            if key in s.memo:
                return s.memo[key]
            s = s.parent
        return None


class _Writer:
    """Statements of one kernel: dims read from the table, integer expressions with shared
    temporaries (dims-only ones hoisted into the prologue), and the region's value tree."""

    def __init__(self, dialect: str):
        self.dialect = dialect
        self.dims: list[str] = []
        self.prologue = _Scope(None)
        self.scope = self.prologue
        self.index_vars: set[str] = set()
        # index variables holding data (a gather's index): any value, so no plain division by
        # the gathered tensor's dims (which may be zero while there is work)
        self.data_vars: set[str] = set()
        self.n = 0

    def tmp(self, prefix: str = "t") -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def push(self) -> _Scope:
        self.scope = _Scope(self.scope)
        return self.scope

    def pop(self) -> list[str]:
        s = self.scope
        self.scope = s.parent
        return s.lines

    def line(self, text: str) -> None:
        self.scope.lines.append(text)

    def dim(self, name: str) -> str:
        if name not in self.dims:
            self.dims.append(name)
        return f"D{self.dims.index(name)}"

    # integer expressions ------------------------------------------------
    def expr(self, e: Expr) -> str:
        kind = e.kind
        if kind == "const":
            return _int_literal(e.value)
        if kind == "var":
            return e.name if e.name in self.index_vars else self.dim(e.name)
        hit = self.scope.find(e)
        if hit is not None:
            return hit
        target = self.scope
        if not (e.free_vars() & self.index_vars):  # depends on dims only: compute once, up front
            target = self.prologue
        saved, self.scope = self.scope, target
        a = [self.expr(x) for x in e.args]
        self.scope = saved
        if kind in ("floordiv", "mod"):
            (alo, _), (blo, _) = e.args[0].bounds(), e.args[1].bounds()
            # inside the work loop a divisor built from dims is >= 1 (a zero dim means no work at
            # all); a dims-only expression runs up front, maybe with a zero dim: the safe helper
            if target is not self.prologue and not (e.free_vars() & self.data_vars):
                plain = _nonneg(e.args[0]) and _nonneg(e.args[1])
            else:
                plain = alo is not None and alo >= 0 and blo is not None and blo >= 1
            if plain:
                text = f"{a[0]} {'/' if kind == 'floordiv' else '%'} {a[1]}"
            else:
                text = f"{'ls_fdiv' if kind == 'floordiv' else 'ls_fmod'}({a[0]}, {a[1]})"
        elif kind in ("min", "max"):
            fn = "ls_" + kind
            text = a[0]
            for x in a[1:]:
                text = f"{fn}({text}, {x})"
        elif kind == "lt":
            text = f"(long long)({a[0]} < {a[1]})"
        elif kind in ("add", "mul"):
            text = (" + " if kind == "add" else " * ").join(a)
        else:
            raise LightspeedError(f"kernel renderer: unknown expression kind {kind!r}")
        name = self.tmp("i")
        target.lines.append(f"const long long {name} = {text};")
        target.memo[e] = name
        return name


@dataclass(frozen=True)
class _Point:
    """Where a region value is computed: the flat row-major index ``flat`` into ``shape`` and, when
    the kernel's loops provide them (the c dialect's loop nests), the per-axis indexes ``coords``.
    A view whose shape is ``shape`` is then indexed from the coordinates directly: no division or
    modulo of the flat index per element (64-bit divisions cost tens of cycles on a CPU)."""

    key: str  # names the point in the writer's memo
    flat: Expr
    shape: tuple[Expr, ...] = ()
    coords: tuple[Expr, ...] | None = None

    @staticmethod
    def flat_var(name: str) -> _Point:
        return _Point(name, sym(name))


def _index_at(st: ShapeTracker, coords: tuple[Expr, ...]) -> tuple[Expr, Expr]:
    """(physical index, validity) of the element at per-axis ``coords`` of ``st``'s last view."""
    idx, valid = st.views[-1].index_and_valid(coords)
    for v in reversed(st.views[:-1]):
        idx, vv = v.index_and_valid(unflatten_index(idx, v.shape))
        valid = valid * vv
    return idx, valid


def _flat_of(coords: list[Expr], shape: tuple[Expr, ...]) -> Expr:
    out: Expr = const(0)
    for c, s in zip(coords, contiguous_strides(tuple(shape))):
        out = out + c * s
    return out


def _nonneg(e: Expr) -> bool:
    """Whether ``e`` is >= 0 for any non-negative values of its variables (dims and indexes)."""
    kind = e.kind
    if kind == "const":
        return e.value >= 0
    if kind in ("var", "lt"):
        return True
    return all(_nonneg(a) for a in e.args)


def _index_in(e: Expr, at: str | Expr) -> Expr:
    return e.substitute({INDEX_VAR: sym(at) if isinstance(at, str) else at}) if INDEX_VAR in e.free_vars() else e


def _node_dtype(node: tuple, leaf_dtypes: list[DType]) -> DType:
    tag = node[0]
    if tag == "leaf":
        return leaf_dtypes[node[1]]
    if tag in ("const", "iota"):
        return node[2]
    if tag == "Cast":
        return node[1]
    if tag == "LessThan":
        return dt.bool_
    if tag == "gather":
        return leaf_dtypes[node[2]]
    if tag in ("SumReduce", "MaxReduce"):
        return _node_dtype(node[3], leaf_dtypes)
    return _node_dtype(node[1], leaf_dtypes)


_FLOAT_FN = {"Log2": "log2", "Exp2": "exp2", "Sin": "sin", "Sqrt": "sqrt"}


def _apply(tag: str, args: list[str], d: DType) -> str:
    """An element-wise primitive on compute values of dtype ``d`` (operand dtype)."""
    ct = compute_type(d)
    single = ct == "float"
    if tag == "Exp2" and single:
        return f"ls_exp2f({args[0]})"  # the prelude's: libm's in cuda, a vectorisable one in c
    if tag in _FLOAT_FN:
        return f"{_FLOAT_FN[tag]}{'f' if single else ''}({args[0]})"
    if tag == "Recip":
        return f"({'1.0f' if single else '1.0'} / {args[0]})"
    a, b = args if len(args) == 2 else (args[0], None)
    if tag == "LessThan":
        return f"(int)({a} < {b})"
    if d.is_bool:
        return f"(int)({a} {'||' if tag == 'Add' else '&&'} {b})" if tag in ("Add", "Mul") else _bad(tag, d)
    if tag in ("Add", "Mul"):
        sym_ = "+" if tag == "Add" else "*"
        if d.is_float:
            return f"({a} {sym_} {b})"
        unsigned = {"int": "unsigned int", "long long": "unsigned long long"}.get(ct, ct)
        return f"(({ct})(({unsigned}){a} {sym_} ({unsigned}){b}))"
    if tag == "Mod":
        if d.is_float:
            return f"fmod{'f' if single else ''}({a}, {b})"
        if d.is_signed:
            return f"(({b}) == 0 || ({b}) == -1 ? ({ct})0 : ({ct})(({a}) % ({b})))"
        return f"(({b}) == 0 ? ({ct})0 : ({ct})(({a}) % ({b})))"
    return _bad(tag, d)


def _bad(tag: str, d: DType) -> str:
    raise LightspeedError(f"kernel renderer: {tag} is not defined for {d.name}")


class _Region:
    """Renders a region tree (the fusion language of ``egraph.llir``) into statements."""

    def __init__(self, w: _Writer, views: list[ShapeTracker], leaf_dtypes: list[DType], cooperative: bool,
                 names: list[str] | None = None):
        self.w = w
        self.names = names or [f"in{k}" for k in range(len(views))]  # each leaf's buffer parameter
        self.views = views
        self.leaf_dtypes = leaf_dtypes
        self.cooperative = cooperative  # top-level reductions split across a warp's lanes
        self.depth = 0  # reductions entered
        # gathered leaves held as packed GGML blocks (c dialect): leaf -> (block type code, columns)
        self.block_data: dict[int, tuple[int, int]] = {}

    def leaf(self, k: int, at: _Point | str) -> str:
        pt = _Point.flat_var(at) if isinstance(at, str) else at
        key = ("leaf", k, pt.key)
        hit = self.w.scope.find(key)
        if hit is not None:
            return hit
        st = self.views[k]
        if st.is_contiguous:  # a row-major prefix: element z is at z (no unflatten and re-flatten)
            idx, valid = self.w.expr(pt.flat), const(1)
        elif pt.coords is not None and tuple(st.shape) == pt.shape:
            index, valid = _index_at(st, pt.coords)
            idx = self.w.expr(index)
        else:
            idx = self.w.expr(_index_in(st.index_expr(), pt.flat))
            valid = _index_in(st.valid_expr(), pt.flat)
        d = self.leaf_dtypes[k]
        ref = f"{self.names[k]}[{idx}]"
        v = self.w.tmp("v")
        if valid == 1:
            text = _load(d, ref)
        elif valid == 0:
            text = f"(({compute_type(d)})0)"
        else:
            text = f"({self.w.expr(valid)} ? {_load(d, ref)} : ({compute_type(d)})0)"
        self.w.line(f"const {compute_type(d)} {v} = {text};")
        self.w.scope.memo[key] = v
        return v

    def value(self, node: tuple, at: _Point | str) -> str:
        pt = _Point.flat_var(at) if isinstance(at, str) else at
        tag = node[0]
        if tag == "leaf":
            return self.leaf(node[1], pt)
        if tag == "const":
            return _literal(node[1], node[2])
        if tag == "iota":
            v = self.w.expr(_index_in(node[1], pt.flat))
            return _cast(v, dt.int64, node[2])
        if tag == "gather":  # out[z] = data[data_view(idx[z])]; an index outside data reads 0
            idx = self.value(node[1], pt)
            k = node[2]
            st = self.views[k]
            iv = self.w.tmp("_ls_g")
            self.w.line(f"const long long {iv} = (long long){idx};")
            self.w.index_vars.add(iv)
            self.w.data_vars.add(iv)
            n = self.w.expr(prod(st.shape))
            at = self.w.expr(_index_in(st.index_expr(), iv))
            valid = _index_in(st.valid_expr(), iv)
            ok = f"{iv} >= 0 && {iv} < {n}" + ("" if valid == 1 else f" && {self.w.expr(valid)}")
            d = self.leaf_dtypes[k]
            v = self.w.tmp("v")
            self.w.line(f"{compute_type(d)} {v} = ({compute_type(d)})0;")
            if k in self.block_data:  # element at of a [rows, cols] matrix held as blocks
                code, cols = self.block_data[k]
                load = (f"ls_blk_at((const unsigned char*){self.names[k]}, {cols // 32}, {code}, "
                        f"({at}) / {cols}, ({at}) % {cols})")
            else:
                load = _load(d, f"{self.names[k]}[{at}]")
            self.w.line(f"if ({ok}) {v} = {load};")
            return v
        if tag == "Cast":
            src = self.value(node[2], pt)
            return self._bind(_cast(src, _node_dtype(node[2], self.leaf_dtypes), node[1]), node[1])
        if tag in ("SumReduce", "MaxReduce"):
            return self.reduce(node, pt)
        d = _node_dtype(node[1], self.leaf_dtypes)
        args = [self.value(c, pt) for c in node[1:]]
        out = dt.bool_ if tag == "LessThan" else d
        return self._bind(_apply(tag, args, d), out)

    def _bind(self, text: str, d: DType) -> str:
        v = self.w.tmp("v")
        self.w.line(f"const {compute_type(d)} {v} = {text};")
        return v

    def reduce(self, node: tuple, pt: _Point) -> str:
        tag, axis, space, child = node
        assert isinstance(space, RegionSpace)
        shape = space.shape
        d = _node_dtype(child, self.leaf_dtypes)
        ct = compute_type(d)
        w = self.w
        size = w.expr(shape[axis])
        post = w.expr(prod(shape[axis + 1:]))
        acc = w.tmp("acc")
        init = "(" + ct + ")0" if tag == "SumReduce" else _min_value(d)
        w.line(f"{ct} {acc} = {init};")
        lanes = self.cooperative and self.depth == 0 and w.dialect == "cuda"
        r = w.tmp("r")
        start, step = ("lane", WARP) if lanes else ("0", 1)
        if w.dialect == "c" and d.is_float:
            # 8 interleaved partial results (the compiler keeps them in one vector register; one
            # chain of dependent adds waits on each add's latency), then the rest, then the 8
            part, q = w.tmp("part"), w.tmp("_ls_q")
            w.line(f"{ct} {part}[8]; for (int {q} = 0; {q} < 8; {q}++) {part}[{q}] = {init};")
            w.line(f"long long {r} = 0;")
            w.line(f"for (; {r} + 8 <= {size}; {r} += 8) {{")
            w.line(f"  for (int {q} = 0; {q} < 8; {q}++) {{")
            rx = w.tmp("r")
            w.index_vars.add(rx)
            self._reduce_step(tag, d, axis, shape, size, post, child, pt, f"{part}[{q}]",
                              f"const long long {rx} = {r} + {q};", rx, "    ")
            w.line("  }")
            w.line("}")
            w.line(f"for (; {r} < {size}; {r}++) {{")
            self._reduce_step(tag, d, axis, shape, size, post, child, pt, acc, None, r, "  ")
            w.line("}")
            tree = _pairwise([f"{part}[{k}]" for k in range(8)], lambda x, y: _combine(tag, d, x, y))
            w.line(f"{acc} = {_combine(tag, d, acc, tree)};")
            return acc
        w.line(f"for (long long {r} = {start}; {r} < {size}; {r} += {step}) {{")
        self._reduce_step(tag, d, axis, shape, size, post, child, pt, acc, None, r, "  ")
        w.line("}")
        if lanes:
            w.line(f"for (int o = {WARP // 2}; o > 0; o >>= 1) {{ {ct} other = __shfl_xor_sync(0xffffffffu, {acc}, o);"
                   f" {acc} = {_combine(tag, d, acc, 'other')}; }}")
        return acc

    def _reduce_step(self, tag: str, d: DType, axis: int, shape, size: str, post: str, child: tuple, pt: _Point,
                     acc: str, head: str | None, r: str, indent: str) -> None:
        """One element of a reduction (the body of its loop, at reduced coordinate ``r``):
        the child's value combined into ``acc``."""
        w = self.w
        w.push()
        if head:
            w.line(head)
        zc = w.tmp("_ls_zc")
        coords = _reduced_coords(pt, shape, axis, r)
        if coords is not None:  # the child's coordinates: the parent's with the reduced axis running
            w.index_vars.add(r)
            at = _Point(zc, _flat_of(coords, shape), tuple(shape), tuple(coords))
        else:
            w.index_vars.add(zc)
            zvar = w.expr(pt.flat)
            w.line(f"const long long {zc} = ({zvar} / {post}) * {size} * {post} + {r} * {post} + {zvar} % {post};")
            at = _Point.flat_var(zc)
        self.depth += 1
        v = self.value(child, at)
        self.depth -= 1
        w.line(f"{acc} = {_combine(tag, d, acc, v)};")
        body = w.pop()
        w.scope.lines.extend(indent + ln for ln in body)


def _reduced_coords(pt: _Point, shape: tuple[Expr, ...], axis: int, r: str) -> list[Expr] | None:
    """The coordinates in a reduction's space ``shape`` of element ``r`` along ``axis`` of the
    parent point, when the parent has coordinates in that space reduced (axis kept as 1 or dropped)."""
    if pt.coords is None:
        return None
    shape = tuple(shape)
    if pt.shape == shape[:axis] + (const(1),) + shape[axis + 1:]:
        return [*pt.coords[:axis], sym(r), *pt.coords[axis + 1:]]
    if pt.shape == shape[:axis] + shape[axis + 1:]:
        return [*pt.coords[:axis], sym(r), *pt.coords[axis:]]
    return None


def _combine(tag: str, d: DType, acc: str, v: str) -> str:
    ct = compute_type(d)
    if tag == "SumReduce":
        if d.is_float:
            return f"{acc} + {v}"
        unsigned = {"int": "unsigned int", "long long": "unsigned long long"}.get(ct, ct)
        return f"({ct})(({unsigned}){acc} + ({unsigned}){v})"
    if d.is_float:
        return f"{'ls_dmaxn' if ct == 'double' else 'ls_fmaxn'}({acc}, {v})"
    return f"({acc} > {v} ? {acc} : {v})"


def _pairwise(terms: list[str], combine) -> str:
    """``terms`` (a power of two of them) combined as a balanced tree, neighbours first."""
    while len(terms) > 1:
        terms = [combine(terms[k], terms[k + 1]) for k in range(0, len(terms), 2)]
    return terms[0]


def _has_top_reduction(node: tuple) -> bool:
    if not isinstance(node, tuple) or not node:
        return False
    if node[0] in ("SumReduce", "MaxReduce"):
        return True
    if node[0] in ("leaf", "const", "iota"):
        return False
    return any(_has_top_reduction(c) for c in node[1:] if isinstance(c, tuple))


def _c_nest(n: str, work: str, axes: list[tuple[str, str]], threshold: int, extra: list[str]
            ) -> tuple[list[str], list[str], str]:
    """The c dialect's work loop over ``axes`` ((coordinate name, extent), outermost first; their
    product is ``n``): each thread takes a contiguous range of items, unflattens its first item
    once, then walks rows of the innermost axis with an odometer, so coordinates cost no division
    per item.  The body sees ``_ls_item`` (the flat index) and every coordinate.  Returns (opening
    lines, closing lines, indent of the body)."""
    names = [a for a, _ in axes]
    ext = [e for _, e in axes]
    last, elast = names[-1], ext[-1]
    open_ = [f"#pragma omp parallel if ({work} >= {threshold})", "{", *extra,
             f"  long long _ls_lo = 0, _ls_hi = {n};",
             "  #ifdef _OPENMP",
             "  { const long long nt = omp_get_num_threads(), t = omp_get_thread_num();",
             f"    const long long per = {n} / nt, more = {n} % nt;",
             "    _ls_lo = per * t + (t < more ? t : more); _ls_hi = _ls_lo + per + (t < more); }",
             "  #endif",
             "  if (_ls_lo < _ls_hi) {",
             "  long long _ls_rest = _ls_lo;",
             f"  long long _ls_cl = _ls_rest % {elast}; _ls_rest /= {elast};"]
    for name, e in zip(reversed(names[:-1]), reversed(ext[:-1])):
        open_.append(f"  long long {name} = _ls_rest % {e}; _ls_rest /= {e};")
    open_ += ["  for (long long _ls_base = _ls_lo; _ls_base < _ls_hi; ) {",
              f"    const long long _ls_run = ls_min(_ls_hi - _ls_base, {elast} - _ls_cl);",
              "    for (long long _ls_j = 0; _ls_j < _ls_run; _ls_j++) {",
              "      const long long _ls_item = _ls_base + _ls_j;",
              f"      const long long {last} = _ls_cl + _ls_j;"]
    close = ["    }", "    _ls_base += _ls_run; _ls_cl = 0;"]
    if len(names) > 1:  # the odometer's carry, built outermost first (the outermost never wraps)
        carry = ""
        for name, e in zip(names[:-1], ext[:-1]):
            carry = f"if (++{name} == {e}) {{ {name} = 0; {carry} }}" if carry else f"++{name};"
        close.append("    " + carry)
    close += ["  }", "  }", "}"]
    return open_, close, "      "


def _finish(w: _Writer, dialect: str, mode: str, buffers: list[tuple[str, str, bool, str | int]], count: Expr,
            body: list[str], label: str, axes: list[tuple[str, Expr]] | None = None,
            item_cost: Expr | int = 1, setup: list[str] | None = None,
            early: list[str] | None = None) -> KernelSpec:
    """Wrap a work-item body into a kernel function of the dialect.  ``buffers``: (param name,
    storage type, written, what it is: "out" or the op's operand index).  ``axes``: the c dialect
    walks the items as this loop nest ((coordinate name, extent), product ``count``); it splits
    the items over the cores when ``count * item_cost`` (multiply-adds, say) is worth a fork.
    ``setup``: c dialect lines each thread runs once before its items (with ``axes``).  ``early``:
    lines run before the items (a run-time alternative that returns when it applies)."""
    n = w.expr(count)  # into the prologue
    work = w.expr(count * item_cost) if dialect == "c" else n
    nest = [(name, w.expr(e)) for name, e in axes] if axes and dialect == "c" else None
    dims = list(w.dims)
    head = [f"const long long D{i} = T[dim_{i}];" for i in range(len(dims))]
    for name, ctype, written, _ in buffers:
        const_ = "" if written else "const "
        head.append(f"{const_}{ctype}* LS_RESTRICT {name} = ({const_}{ctype}*)T[buf_{name}];")
    params = ["const long long* LS_RESTRICT T", *(f"int dim_{i}" for i in range(len(dims))),
              *(f"int buf_{name}" for name, _, _, _ in buffers)]
    ind = "    "
    close, inner = [ind + "}"], ind + "  "
    if dialect == "cuda":
        if mode in ("warp", "matmul_dot"):
            loop = [f"const int lane = threadIdx.x & {WARP - 1};",
                    f"const long long first = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / {WARP};",
                    f"const long long stride = ((long long)gridDim.x * blockDim.x) / {WARP};",
                    f"for (long long _ls_item = first; _ls_item < {n}; _ls_item += stride) {{"]
        elif mode == "matmul_tile":
            loop = ["const int lane = threadIdx.x, slice = threadIdx.y;",
                    f"for (long long _ls_item = blockIdx.x; _ls_item < {n}; _ls_item += gridDim.x) {{"]
        else:
            loop = ["const long long first = blockIdx.x * (long long)blockDim.x + threadIdx.x;",
                    "const long long stride = (long long)gridDim.x * blockDim.x;",
                    f"for (long long _ls_item = first; _ls_item < {n}; _ls_item += stride) {{"]
        sig = f'extern "C" __global__ void __launch_bounds__(256) KNAME({", ".join(params)})'
    else:
        # items split over the cores (OpenMP) when there is enough work: a matmul item is a whole
        # dot product, an element-wise one a few operations
        threshold = 32768
        lanes = ["const int lane = 0, slice = 0; (void)lane; (void)slice;"] if mode.startswith("matmul") else []
        if setup and not nest:
            raise LightspeedError("kernel renderer: per-thread setup needs a loop nest")
        if nest:
            opening, closing, body_ind = _c_nest(n, work, nest, threshold, ["  " + x for x in lanes] + (setup or []))
            loop, close, inner = opening, [ind + x for x in closing], ind + body_ind
        else:
            loop = lanes + [f"#pragma omp parallel for schedule(static) if ({work} >= {threshold})",
                            f"for (long long _ls_item = 0; _ls_item < {n}; _ls_item++) {{"]
        sig = f"void KNAME({', '.join(params)})"
    lines = [sig + " {", *(ind + ln for ln in head), *(ind + ln for ln in w.prologue.lines),
             *(ind + ln for ln in early or []), *(ind + ln for ln in loop), *(inner + ln for ln in body), *close, "}"]
    text = "\n".join(lines) + "\n"
    digest = hashlib.sha256(f"{dialect}\n{mode}\n{text}".encode()).hexdigest()[:16]
    name = f"ls_{label}_{digest}"
    return KernelSpec(name, text.replace("KNAME", name), tuple(dims), tuple(b[3] for b in buffers), mode, count)


def _loop_axes(shape, prefix: str) -> tuple[list[tuple[str, Expr]], list[Expr]]:
    """A c-dialect loop nest over ``shape``: (the loop axes, named ``prefix`` + axis number, and
    each axis's coordinate); size-1 axes are no loop (coordinate 0).  An empty shape is one item."""
    axes, coords = [], []
    for k, d in enumerate(shape):
        if d == 1:
            coords.append(const(0))
        else:
            axes.append((f"{prefix}{k}", d))
            coords.append(sym(f"{prefix}{k}"))
    return axes, coords


def _region_kernel(dialect: str, tree: tuple, views: list[ShapeTracker], leaf_dtypes: list[DType],
                   out_dtype: DType, shape, label: str, operands: list[int] | None = None,
                   block_data: dict[int, tuple[int, int]] | None = None) -> KernelSpec:
    """A kernel computing ``tree`` at every element of ``shape`` into a row-major ``out``; leaf k
    reads the op's operand ``operands[k]`` (default k); ``block_data``: gathered leaves held as
    packed blocks (see :func:`render_block_gather`)."""
    w = _Writer(dialect)
    cooperative = _has_top_reduction(tree)
    mode = "warp" if cooperative and dialect == "cuda" else "elementwise"
    w.index_vars.add("_ls_item")
    w.push()
    region = _Region(w, views, leaf_dtypes, cooperative)
    region.block_data = dict(block_data or {})
    shape = tuple(shape)
    axes = None
    at = _Point.flat_var("_ls_item")
    if dialect == "c":
        axes, coords = _loop_axes(shape, "_ls_c")
        w.index_vars |= {name for name, _ in axes}
        if axes:
            at = _Point("_ls_item", sym("_ls_item"), shape, tuple(coords))
    v = region.value(tree, at)
    store = f"out[_ls_item] = {_store(out_dtype, v)};"
    w.line(f"if (lane == 0) {store}" if mode == "warp" else store)
    body = w.pop()
    operands = operands if operands is not None else list(range(len(leaf_dtypes)))
    bufs = [("out", storage_type(out_dtype), True, "out")] + [(f"in{k}", storage_type(d), False, operands[k])
                                                               for k, d in enumerate(leaf_dtypes)]
    return _finish(w, dialect, mode, bufs, prod(shape), body, label, axes)


def _scatter_kernel(dialect: str, op: LOp, in_dtypes: list[DType]) -> KernelSpec:
    """``out_flat[idx[i]] = src[i]`` over the src elements; indexes outside ``out`` are skipped.
    (Out of place, the dest is copied into ``out`` first by a region kernel.)"""
    w = _Writer(dialect)
    w.index_vars.add("_ls_item")
    w.push()
    iv, sv = op.args["indexes_view"], op.args["src_view"]
    # the scatter's own inputs: indexes and src (dest is ``out``)
    views = [iv, sv]
    dts = [in_dtypes[1], in_dtypes[2]]
    region = _Region(w, views, dts, False)
    idx = region.leaf(0, "_ls_item")
    src = region.leaf(1, "_ls_item")
    n_out = w.expr(prod(op.shape))
    w.line(f"const long long at = (long long){idx};")
    w.line(f"if (at >= 0 && at < {n_out}) out[at] = {_store(op.dtype, src)};")
    body = w.pop()
    bufs = [("out", storage_type(op.dtype), True, "out"), ("in0", storage_type(dts[0]), False, 1),
            ("in1", storage_type(dts[1]), False, 2)]
    return _finish(w, dialect, "scatter", bufs, prod(iv.shape), body, "scatter")


def block_matmul_ok(op: LOp, in_dtypes: list[DType], side: int = 1) -> bool:
    """Whether the c dialect's block kernel (:func:`render_block_matmul`) computes ``op`` when its
    operand ``side`` (1: B, 0: A) is a float32 matrix [rows, k] kept as GGML blocks: read with its
    rows contiguous along k from its start (B as that matrix transposed), the other operand
    contiguous along k, static k a multiple of 32, no batch, float32 throughout."""
    a = op.args
    k = a["k"]
    if side == 1:
        weights = a["b_stride_k"] == 1 and a["b_stride_n"] == k and a["b_offset"] == 0 and a["a_stride_k"] == 1
    else:
        weights = a["a_stride_k"] == 1 and a["a_stride_m"] == k and a["a_offset"] == 0 and a["b_stride_k"] == 1
    return (op.op in ("Matmul", "MatmulAdd") and not a["batch"] and op.dtype.name == "float32"
            and all(d.name == "float32" for d in in_dtypes[:3]) and not k.free_vars() and k.value % 32 == 0
            and weights)


# the block types the prelude decodes, by the code its functions take
_BLOCK_CODE = {"q4_0": 0, "q4_1": 1, "q8_0": 2, "q5_0": 3, "q4_k": 4, "q6_k": 5}
_BLOCK_TYPES = tuple(_BLOCK_CODE)


BLOCK_ACTIVATIONS = ("q16", "q8", "float")


def render_block_matmul(op: LOp, in_dtypes: list[DType], qtype: str, activations: str = "float",
                        side: int = 1) -> KernelSpec:
    """The c dialect's ``Matmul``/``MatmulAdd`` whose B operand (buffer ``in1``) is a weight matrix
    kept as GGML ``qtype`` blocks in the packed layout (``weights.quant.Blocks.packed``: a row's
    scales, then its integers), dequantised in registers: an item is one weight row j; each of its
    blocks is read once from memory (a quarter of its float32 bytes), decoded once into 32 floats
    and dotted with every row of A.  ``side`` 0: the weights are A instead (C = W x^T, the product
    the other way round), an item one row of C.  Requires :func:`block_matmul_ok`.

    ``activations`` (decode, a single row of A; more rows keep floats): ``"float"`` is exact (the
    float32 weights' result up to summation order); ``"q8"`` quantises the row to 8-bit integers
    per block of 32, as llama.cpp does, ``"q16"`` to 16-bit ones (each thread once per call:
    ``ls_quant_x``), and each weight block is dotted with them in integers (``maddubs`` /
    ``madd``).  x moves by at most amax / 254 (q8) or amax / 65534 (q16), amax its block's largest
    magnitude; docs/kernels.md states the contract."""
    from ...weights.quant import BLOCK_BYTES, BLOCK_WEIGHTS, QK

    if not block_matmul_ok(op, in_dtypes, side) or qtype not in _BLOCK_TYPES:
        raise LightspeedError(f"kernel renderer: no {qtype} block kernel for this {op.op}")
    if activations not in BLOCK_ACTIVATIONS:
        raise LightspeedError(f"kernel renderer: block activations must be one of {BLOCK_ACTIVATIONS}, "
                              f"got {activations!r}")
    a = op.args
    m, n, k = a["m"], a["n"], a["k"]
    nbytes = BLOCK_BYTES[qtype]
    w = _Writer("c")
    w.index_vars |= {"j", "r", "r0", "rn", "t", "_ls_item"}
    nn = w.expr(n)
    # j: the item, a weight row; r: a row of the activations x (rows: xn of them)
    if side == 1:
        xn, wn = m, n
        xrow = f"in0 + {w.expr(a['a_offset'])} + r * {w.expr(a['a_stride_m'])}"
        at, coords = f"r * {nn} + j", (sym("r"), sym("j"))
    else:
        xn, wn = n, m
        xrow = f"in1 + {w.expr(a['b_offset'])} + r * {w.expr(a['b_stride_n'])}"
        at, coords = f"j * {nn} + r", (sym("j"), sym("r"))
    xx = w.expr(xn)
    nb = int(k.value) // QK  # groups of 32 weights
    code = _BLOCK_CODE[qtype]
    row_bytes = int(k.value) // BLOCK_WEIGHTS.get(qtype, QK) * nbytes

    def decode(g: str) -> str:  # a group of 32 weights decoded into 4 vectors of 8 floats
        return f"ls_blk_{qtype}(rb, {nb}, {g}, wv)" if code < 3 else f"ls_blk_k(rb, {code}, {g}, wv)"

    w.push()
    w.line(f"const unsigned char* rb = (const unsigned char*)in{side} + j * {row_bytes}LL;")
    setup = []
    w.line(f"if ({xx} == 1) {{")
    w.line("  const long long r = 0;")
    if activations != "float":
        # the one row of x quantised once per thread, before its items
        bits = 16 if activations == "q16" else 8
        setup = [f"  {'short' if bits == 16 else 'signed char'} _ls_xq[{nb * QK}]; float _ls_xd[{nb}], _ls_xs[{nb}];",
                 f"  if ({xx} == 1) {{ const long long r = 0; "
                 f"ls_quant_x({xrow}, {nb}, {bits}, _ls_xq, _ls_xd, _ls_xs); }}"]
        dot = "ls_qdot" if code < 3 else "ls_kdot"
        w.line(f"  out[{at}] = {dot}(rb, {nb}, {code}, {bits}, _ls_xq, _ls_xd, _ls_xs);")
    else:  # one row of x keeps 4 accumulators across the blocks
        w.line(f"  const float* xa = {xrow};")
        w.line("  ls_f8 a0 = ls_zero8(), a1 = a0, a2 = a0, a3 = a0, wv[4];")
        w.line(f"  for (long long blk = 0; blk < {nb}; blk++) {{")
        w.line(f"    {decode('blk')};")
        w.line(f"    const float* xb = xa + blk * {QK};")
        for q in range(4):
            w.line(f"    a{q} = ls_fma8(ls_ldf8(xb + {8 * q}), wv[{q}], a{q});")
        w.line("  }")
        w.line(f"  out[{at}] = ls_hsum8(ls_add8(ls_add8(a0, a1), ls_add8(a2, a3)));")
    # more rows of x (prefill): tiles of 8 rows, each with its vector accumulator (in registers:
    # a full tile's loop is unrolled), each block decoded once per tile into floats and dotted
    # with the tile's rows; one horizontal sum per output
    w.line("} else {")
    w.line(f"  for (long long r0 = 0; r0 < {xx}; r0 += 8) {{")
    w.line(f"    const long long rn = {xx} - r0 < 8 ? {xx} - r0 : 8;")
    w.line("    ls_f8 acc[8];")
    w.line("    for (int t = 0; t < 8; t++) acc[t] = ls_zero8();")
    w.line(f"    for (long long blk = 0; blk < {nb}; blk++) {{")
    w.line("      ls_f8 wv[4];")
    w.line(f"      {decode('blk')};")
    for full in (True, False):
        w.line("      if (rn == 8) {" if full else "      } else {")
        if full:
            w.line("        _Pragma(\"GCC unroll 8\")")
        w.line(f"        for (int t = 0; t < {'8' if full else 'rn'}; t++) {{")
        w.line("          const long long r = r0 + t;")
        w.line(f"          const float* xb = {xrow} + blk * {QK};")
        w.line("          acc[t] = ls_fma8(ls_ldf8(xb + 24), wv[3], ls_fma8(ls_ldf8(xb + 16), wv[2], "
               "ls_fma8(ls_ldf8(xb + 8), wv[1], ls_fma8(ls_ldf8(xb), wv[0], acc[t]))));")
        w.line("        }")
    w.line("      }")
    w.line("    }")
    w.line("    for (int t = 0; t < rn; t++) {")
    w.line("      const long long r = r0 + t;")
    w.line(f"      out[{at}] = ls_hsum8(acc[t]);")
    w.line("    }")
    w.line("  }")
    w.line("}")
    bufs = [("out", "float", True, "out"), ("in0", "float", False, 0), ("in1", "float", False, 1)]
    if op.op == "MatmulAdd":
        region = _Region(w, [a["r_view"]], [in_dtypes[2]], False, names=["in2"])
        w.index_vars.add("_ls_oz")
        w.line(f"for (long long r = 0; r < {xx}; r++) {{")
        w.line(f"  const long long _ls_oz = {at};")
        w.push()
        rv = region.leaf(0, _Point("_ls_oz", sym("_ls_oz"), (m, n), coords))
        inner = w.pop()
        w.scope.lines.extend("  " + ln for ln in inner)
        w.line(f"  out[_ls_oz] = out[_ls_oz] + {rv};")
        w.line("}")
        bufs.append(("in2", storage_type(in_dtypes[2]), False, 2))
    body = w.pop()
    label = f"{qtype}matmul" + ("" if activations == "float" else f"_{activations}")
    return _finish(w, "c", "matmul_dot", bufs, wn, body, label, [("j", wn)], xn * k, setup)


def block_gather_ok(op: LOp, in_dtypes: list[DType]) -> bool:
    """Whether :func:`render_block_gather` computes ``op``: a ``Gather`` of float32 values from a
    static [rows, cols] matrix read through its plain row-major view, cols a multiple of 32."""
    st = op.args["data_view"] if op.op == "Gather" else None
    return (st is not None and op.dtype.name == "float32" and in_dtypes[1].name == "float32" and st.is_contiguous
            and len(st.shape) == 2 and not any(d.free_vars() for d in st.shape) and st.shape[1].value % 32 == 0)


def render_block_gather(op: LOp, in_dtypes: list[DType], qtype: str) -> KernelSpec:
    """The c dialect's ``Gather`` whose data (buffer ``in1``) is a matrix kept as packed GGML
    ``qtype`` blocks (an embedding table): each gathered element decoded from its block, the
    float32 weight exactly.  Requires :func:`block_gather_ok`."""
    if not block_gather_ok(op, in_dtypes) or qtype not in _BLOCK_TYPES:
        raise LightspeedError(f"kernel renderer: no {qtype} block gather for this {op.op}")
    cols = int(op.args["data_view"].shape[1].value)
    code = _BLOCK_CODE[qtype]
    return _region_kernel("c", ("gather", ("leaf", 0), 1), [op.args["indexes_view"], op.args["data_view"]],
                          in_dtypes, op.dtype, op.shape, f"{qtype}gather", block_data={1: (code, cols)})


def _matmul_kernel(dialect: str, op: LOp, in_dtypes: list[DType]) -> KernelSpec:
    """``Matmul``/``MatmulAdd``: C[*batch, i, j] = sum_l A[..] * B[..] (+ R), accumulated in the
    compute type (float for float32/bfloat16/float16)."""
    a = op.args
    w = _Writer(dialect)
    da, db = in_dtypes[0], in_dtypes[1]
    ct = "double" if op.dtype.name == "float64" else "float"
    batch = list(a["batch"])
    m, n, k = a["m"], a["n"], a["k"]
    dot = (a["a_stride_k"] == 1 and a["b_stride_k"] == 1)
    if dialect == "c" and not dot and a["b_stride_n"] == 1:
        return _matmul_rows_c(op, in_dtypes)
    mode = "matmul_dot" if dot else "matmul_tile"
    if dialect == "c":
        mode = "matmul_dot"
    w.index_vars |= {"_ls_item"}
    nn, mm, kk = w.expr(n), w.expr(m), w.expr(k)
    w.push()
    axes: list[tuple[str, Expr]] | None = None
    if mode == "matmul_tile":  # _ls_item = (batch, row, column tile)
        tiles = w.expr((n + (TILE_N - 1)) // TILE_N)
        w.line(f"const long long j = (_ls_item % {tiles}) * {TILE_N} + lane;")
        w.line(f"const long long i = (_ls_item / {tiles}) % {mm};")
        w.line(f"const long long bi = _ls_item / ({tiles} * {mm});")
        count = prod(batch) * m * ((n + (TILE_N - 1)) // TILE_N)
    elif dialect == "c":
        # a loop nest over (batch, j, i): coordinates without divisions, and the rows of A (few in
        # decode, cache-resident in prefill) met again for each row of B (the weights, or the
        # cached keys), which is read once from memory
        count = prod(batch) * m * n
        axes, bcoords = _loop_axes(batch, "_ls_b")
        axes = _stream_order(axes + [("j", n)], [*a["b_batch_strides"], a["b_stride_n"]]) + [("i", m)]
        w.index_vars |= {name for name, _ in axes}
    else:
        w.line(f"const long long j = _ls_item % {nn};")
        w.line(f"const long long i = (_ls_item / {nn}) % {mm};")
        w.line(f"const long long bi = _ls_item / ({nn} * {mm});")
        count = prod(batch) * m * n
    off_a, off_b = w.expr(a["a_offset"]), w.expr(a["b_offset"])
    if axes is not None:
        w.line(f"const long long oa = {w.expr(_batch_offset(a['a_offset'], bcoords, a['a_batch_strides']))}, "
               f"ob = {w.expr(_batch_offset(a['b_offset'], bcoords, a['b_batch_strides']))};")
    else:  # batch offsets: unflatten bi over the batch dims
        w.line(f"long long oa = {off_a}, ob = {off_b}, rest = bi;")
        for size, sa, sb in reversed(list(zip(batch, a["a_batch_strides"], a["b_batch_strides"]))):
            s = w.expr(size)
            w.line(f"{{ const long long q = rest % {s}; rest /= {s}; "
                   f"oa += q * {w.expr(sa)}; ob += q * {w.expr(sb)}; }}")
    sam, sak, sbk, sbn = (w.expr(a[f]) for f in ("a_stride_m", "a_stride_k", "b_stride_k", "b_stride_n"))
    w.line(f"{ct} acc = 0;")
    valid_j = "j < " + nn if mode == "matmul_tile" else "1"
    if mode == "matmul_tile":
        first, step = "slice", str(TILE_K)
    elif dialect == "cuda":
        first, step = "lane", str(WARP)
    else:
        first, step = "0", "1"
    scalar = (f"for (long long l = {first}; l < {kk}; l += {step})\n"
              f"    acc += ({ct}){_load(da, f'in0[oa + i * {sam} + l * {sak}]')} * "
              f"({ct}){_load(db, f'in1[ob + l * {sbk} + j * {sbn}]')};")
    vec = _VECTOR_DOT.get(da.name) if da == db and ct == "float" else None
    if dialect == "c" and dot and ct == "float":
        # 32 partial sums: the compiler keeps them in 4 SIMD registers, 4 independent chains of
        # fused multiply-adds (a float sum cannot be vectorised otherwise without reassociating
        # it; one chain waits on the multiply-add's latency), then 8 for the rest
        ra, rb = f"in0 + oa + i * {sam}", f"in1 + ob + j * {sbn}"
        w.line(f"const {storage_type(da)}* ra = {ra}; const {storage_type(db)}* rb = {rb};")
        if da.name in _LOAD8 and db.name in _LOAD8:
            # the same sums as the array form below, in vector-typed variables: the compiler keeps
            # them in registers (a float array of partial sums was spilled, ~3x slower on short k);
            # 16-bit floats widen 8 at a time, exactly
            la, lb = _LOAD8[da.name], _LOAD8[db.name]
            w.line("ls_v8 p0 = {0}, p1 = {0}, p2 = {0}, p3 = {0}; long long l = 0;")
            w.line(f"for (; l + 32 <= {kk}; l += 32) {{")
            for q in range(4):
                w.line(f"  p{q} += {la}(ra + l + {8 * q}) * {lb}(rb + l + {8 * q});")
            w.line("}")
            w.line(f"for (; l + 8 <= {kk}; l += 8) p0 += {la}(ra + l) * {lb}(rb + l);")
            w.line(f"for (; l < {kk}; l++) acc += {_load(da, 'ra[l]')} * {_load(db, 'rb[l]')};")
            w.line("p0 = (p0 + p1) + (p2 + p3);")
            w.line("acc += ((p0[0] + p0[1]) + (p0[2] + p0[3])) + ((p0[4] + p0[5]) + (p0[6] + p0[7]));")
        else:
            w.line("float part[32] = {0}; long long l = 0;")
            w.line(f"for (; l + 32 <= {kk}; l += 32)")
            w.line(f"  for (int q = 0; q < 32; q++) part[q] += {_load(da, 'ra[l + q]')} * {_load(db, 'rb[l + q]')};")
            w.line(f"for (; l + 8 <= {kk}; l += 8)")
            w.line(f"  for (int q = 0; q < 8; q++) part[q] += {_load(da, 'ra[l + q]')} * {_load(db, 'rb[l + q]')};")
            w.line(f"for (; l < {kk}; l++) acc += {_load(da, 'ra[l]')} * {_load(db, 'rb[l]')};")
            w.line("for (int q = 0; q < 8; q++) part[q] = (part[q] + part[q + 8]) + (part[q + 16] + part[q + 24]);")
            w.line("acc += ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));")
    elif dialect == "cuda" and mode == "matmul_dot" and vec is not None:
        # both rows contiguous along k: 16-byte loads when k and both rows' addresses allow them
        width, dot = vec
        w.line(f"const {storage_type(da)}* ra = in0 + oa + i * {sam};")
        w.line(f"const {storage_type(db)}* rb = in1 + ob + j * {sbn};")
        w.line(f"if ({kk} % {width} == 0 && (((unsigned long long)ra | (unsigned long long)rb) & 15) == 0) {{")
        w.line("  #pragma unroll 4")  # several 16-byte loads in flight per lane
        w.line(f"  for (long long l = lane * {width}; l < {kk}; l += {WARP * width})")
        w.line(f"    acc += {dot}(*(const uint4*)(ra + l), *(const uint4*)(rb + l));")
        w.line("} else {")
        w.line("  " + scalar.replace("\n", "\n  "))
        w.line("}")
    else:
        w.line(f"if ({valid_j}) " + scalar)
    if dialect == "cuda" and mode == "matmul_dot":
        w.line(f"for (int o = {WARP // 2}; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);")
        writer = "lane == 0"
    elif mode == "matmul_tile":
        w.line(f"__shared__ {ct} part[{TILE_K}][{TILE_N}];")
        w.line("part[slice][lane] = acc;")
        w.line("__syncthreads();")
        w.line(f"if (slice == 0) for (int s = 1; s < {TILE_K}; s++) acc += part[s][lane];")
        w.line("__syncthreads();")
        writer = f"slice == 0 && j < {nn}"
    else:
        writer = "1"
    if axes is not None:
        out_index = w.expr(_flat_of([*bcoords, sym("i"), sym("j")], (*batch, m, n)))
    else:
        out_index = "(bi * " + mm + " + i) * " + nn + " + j"
    value = "acc"
    bufs = [("out", storage_type(op.dtype), True, "out"), ("in0", storage_type(da), False, 0),
            ("in1", storage_type(db), False, 1)]
    if "r_view" in a:  # MatmulAdd (or the cuda backend's LtMatmulAdd)
        region = _Region(w, [a["r_view"]], [in_dtypes[2]], False, names=["in2"])
        w.index_vars.add("_ls_oz")
        w.line(f"if ({writer}) {{")
        w.line(f"  const long long _ls_oz = {out_index};")
        w.push()
        at: _Point | str = "_ls_oz"
        if axes is not None:
            at = _Point("_ls_oz", sym("_ls_oz"), (*batch, m, n), (*bcoords, sym("i"), sym("j")))
        r = region.leaf(0, at)
        inner = w.pop()
        w.scope.lines.extend("  " + ln for ln in inner)
        w.line(f"  out[_ls_oz] = {_store(op.dtype, f'({ct})(acc + ({ct}){r})')};")
        w.line("}")
        body = w.pop()
        bufs.append(("in2", storage_type(in_dtypes[2]), False, 2))
    else:
        w.line(f"if ({writer}) out[{out_index}] = {_store(op.dtype, value)};")
        body = w.pop()
    return _finish(w, dialect, mode, bufs, count, body, "matmul", axes, k)


def _stream_order(axes: list[tuple[str, Expr]], strides: list) -> list[tuple[str, Expr]]:
    """The loop axes over B's (batch..., j) coordinates ordered by B's strides, largest first, so
    the items walk B (the weights, or the cached keys of every head) in memory order: each thread
    streams one contiguous range instead of revisiting B once per head.  Kept as given when a
    stride is symbolic.  ``strides`` are B's, one per batch dim and then j's."""
    names = [f"_ls_b{k}" for k in range(len(strides) - 1)] + ["j"]
    stride_of = dict(zip(names, strides))
    if any(stride_of[name].free_vars() for name, _ in axes):
        return axes
    return sorted(axes, key=lambda ax: -stride_of[ax[0]].value)  # stable: ties keep their order


def _batch_offset(offset: Expr, coords: list[Expr], strides) -> Expr:
    out = offset
    for c, st in zip(coords, strides):
        out = out + c * st
    return out


ROW_CHUNK = 64  # outputs of one row a c-dialect row item accumulates at once


def _matmul_rows_c(op: LOp, in_dtypes: list[DType]) -> KernelSpec:
    """``Matmul`` in the c dialect when B's rows are contiguous along n (``x @ W`` with W row-major,
    attention weights @ V): an item is up to 64 outputs of one row, accumulated over k as a vector
    (``acc[q] += a[l] * B[l, j0 + q]``, which the compiler vectorises); each output's sum runs over
    k in order, like the scalar loop."""
    a = op.args
    w = _Writer("c")
    da, db = in_dtypes[0], in_dtypes[1]
    ct = "double" if op.dtype.name == "float64" else "float"
    batch = list(a["batch"])
    m, n, k = a["m"], a["n"], a["k"]
    w.index_vars |= {"_ls_item"}
    nn, kk = w.expr(n), w.expr(k)
    w.push()
    axes, bcoords = _loop_axes(batch, "_ls_b")
    nchunks = (n + (ROW_CHUNK - 1)) // ROW_CHUNK
    axes += [("i", m), ("_ls_jc", nchunks)]  # a loop nest: coordinates without divisions
    w.index_vars |= {name for name, _ in axes} | {"j0", "q"}
    w.line(f"const long long j0 = _ls_jc * {ROW_CHUNK};")
    w.line(f"const long long oa = {w.expr(_batch_offset(a['a_offset'], bcoords, a['a_batch_strides']))}, "
           f"ob = {w.expr(_batch_offset(a['b_offset'], bcoords, a['b_batch_strides']))};")
    orow = w.expr(_flat_of([*bcoords, sym("i")], (*batch, m)) * n)
    sam, sak, sbk = (w.expr(a[f]) for f in ("a_stride_m", "a_stride_k", "b_stride_k"))
    if not n.free_vars() and (n.value % ROW_CHUNK == 0 or n.value < ROW_CHUNK):
        # a compile-time width: the accumulators stay in vector registers
        w.line(f"const long long jn = {min(int(n.value), ROW_CHUNK)};")
    else:
        w.line(f"const long long jn = {nn} - j0 < {ROW_CHUNK} ? {nn} - j0 : {ROW_CHUNK};")
    w.line(f"{ct} acc[{ROW_CHUNK}];")
    w.line(f"for (int q = 0; q < {ROW_CHUNK}; q++) acc[q] = 0;")
    w.line(f"for (long long l = 0; l < {kk}; l++) {{")
    w.line(f"  const {ct} av = ({ct}){_load(da, f'in0[oa + i * {sam} + l * {sak}]')};")
    w.line(f"  const {storage_type(db)}* rb = in1 + ob + l * {sbk} + j0;")
    w.line(f"  for (long long q = 0; q < jn; q++) acc[q] += av * ({ct}){_load(db, 'rb[q]')};")
    w.line("}")
    w.line("for (long long q = 0; q < jn; q++) {")
    w.index_vars.add("_ls_oz")
    w.line(f"  const long long _ls_oz = {orow} + j0 + q;")
    bufs = [("out", storage_type(op.dtype), True, "out"), ("in0", storage_type(da), False, 0),
            ("in1", storage_type(db), False, 1)]
    value = "acc[q]"
    if "r_view" in a:  # MatmulAdd (or the cuda backend's LtMatmulAdd)
        region = _Region(w, [a["r_view"]], [in_dtypes[2]], False, names=["in2"])
        w.push()
        r = region.leaf(0, _Point("_ls_oz", sym("_ls_oz"), (*batch, m, n), (*bcoords, sym("i"), sym("j0") + sym("q"))))
        w.scope.parent.lines.extend("  " + ln for ln in w.pop())
        value = f"({ct})(acc[q] + ({ct}){r})"
        bufs.append(("in2", storage_type(in_dtypes[2]), False, 2))
    w.line(f"  out[_ls_oz] = {_store(op.dtype, value)};")
    w.line("}")
    body = w.pop()
    early = _split_k_rows(w, op, in_dtypes, ct) if ct == "float" else None
    return _finish(w, "c", "matmul_rows", bufs, prod(batch) * m * nchunks, body, "matmul", axes, k * ROW_CHUNK,
                   early=early)


SPLIT_K_CHUNKS = 8  # a fixed count: the partial sums, and so the result, do not depend on the threads
SPLIT_K_OUT = 1024  # the largest output (elements) a split-k matmul takes (its partials live on the stack)
SPLIT_K_MIN_K = 256


def _split_k_rows(w: _Writer, op: LOp, in_dtypes: list[DType], ct: str) -> list[str]:
    """The run-time alternative of a row matmul with a small output and a long reduction (decode
    attention's weights @ V: 9 x 64 outputs over every cached position): the reduction is cut into
    :data:`SPLIT_K_CHUNKS` chunks, each accumulating the whole output into its own partial sums
    while it walks its rows of B in memory order (each cached position once, every head of it),
    the chunks split over the cores; the partials are then added in a fixed tree.  (The row items
    read B once per output row and have one item per row to share between the cores.)"""
    a = op.args
    da, db = in_dtypes[0], in_dtypes[1]
    batch, m, n, k = list(a["batch"]), a["m"], a["n"], a["k"]
    total = prod(batch) * m * n
    nchunk = SPLIT_K_CHUNKS
    names = [f"_ls_sb{q}" for q in range(len(batch))]
    w.index_vars |= {*names, "_ls_si", "_ls_sl", "_ls_so"}
    w.push()
    tot, kk, nn = w.expr(total), w.expr(k), w.expr(n)
    w.line(f"if ({tot} <= {SPLIT_K_OUT} && {kk} >= {SPLIT_K_MIN_K}) {{")
    w.line(f"  {ct} _ls_part[{nchunk}][{SPLIT_K_OUT}];")
    w.line(f"  const long long _ls_kc = ({kk} + {nchunk - 1}) / {nchunk};")
    w.line("  #pragma omp parallel for schedule(static)")
    w.line(f"  for (int _ls_c = 0; _ls_c < {nchunk}; _ls_c++) {{")
    w.line(f"    {ct}* LS_RESTRICT acc = _ls_part[_ls_c];")
    w.line(f"    for (long long q = 0; q < {tot}; q++) acc[q] = 0;")
    w.line(f"    const long long l0 = _ls_c * _ls_kc, l1 = ls_min({kk}, l0 + _ls_kc);")
    w.line("    for (long long _ls_sl = l0; _ls_sl < l1; _ls_sl++) {")
    w.push()
    coords = [sym(x) for x in names]
    depth = 0
    for name, size in zip(names, batch):
        w.line(f"{'  ' * depth}for (long long {name} = 0; {name} < {w.expr(size)}; {name}++) {{")
        depth += 1
    w.line(f"{'  ' * depth}for (long long _ls_si = 0; _ls_si < {w.expr(m)}; _ls_si++) {{")
    w.push()
    sl, si = sym("_ls_sl"), sym("_ls_si")
    ia = w.expr(_batch_offset(a["a_offset"], coords, a["a_batch_strides"]) + si * a["a_stride_m"]
                + sl * a["a_stride_k"])
    ib = w.expr(_batch_offset(a["b_offset"], coords, a["b_batch_strides"]) + sl * a["b_stride_k"])
    row = w.expr(_flat_of([*coords, si], (*batch, m)) * n)
    w.line(f"const {ct} av = ({ct}){_load(da, f'in0[{ia}]')};")
    w.line(f"const {storage_type(db)}* rb = in1 + {ib};")
    w.line(f"{ct}* ar = acc + {row};")
    w.line(f"for (long long q = 0; q < {nn}; q++) ar[q] += av * ({ct}){_load(db, 'rb[q]')};")
    inner = w.pop()
    w.scope.lines.extend("  " * (depth + 1) + ln for ln in inner)
    for d in range(depth, -1, -1):
        w.line(f"{'  ' * d}}}")
    loops = w.pop()
    w.scope.lines.extend("      " + ln for ln in loops)
    w.line("    }")
    w.line("  }")
    w.line(f"  for (long long _ls_so = 0; _ls_so < {tot}; _ls_so++) {{")
    w.push()
    value = _pairwise([f"_ls_part[{c}][_ls_so]" for c in range(nchunk)], lambda x, y: f"({x} + {y})")
    if "r_view" in a:
        region = _Region(w, [a["r_view"]], [in_dtypes[2]], False, names=["in2"])
        r = region.leaf(0, _Point.flat_var("_ls_so"))
        value = f"({ct})({value} + ({ct}){r})"
    w.line(f"out[_ls_so] = {_store(op.dtype, value)};")
    fin = w.pop()
    w.scope.lines.extend("    " + ln for ln in fin)
    w.line("  }")
    w.line("  return;")
    w.line("}")
    return w.pop()


# 8 elements of a row as 8 floats (c dialect): the prelude's vector loads by storage dtype
_LOAD8 = {"float32": "ls_ld8", "bfloat16": "ls_ld8_bf16", "float16": "ls_ld8_f16"}

# 16-byte dot products of two rows (cuda dialect): elements per uint4, the prelude's function
_VECTOR_DOT = {"bfloat16": (8, "ls_dot8_bf16"), "float16": (8, "ls_dot8_f16"), "float32": (4, "ls_dot4_f32")}

# ---------------------------------------------------------------------------- per op
_ELEMENTWISE = tuple(n for n, p in PRIMITIVES.items() if p.category in ("unary", "binary"))


def render_op(op: LOp, in_dtypes: list[DType], dialect: str) -> list[KernelSpec]:
    """The kernels that compute ``op`` (run in order), each writing the op's value (``out``)."""
    if dialect not in DIALECTS:
        raise ValueError(f"unknown dialect {dialect!r}")
    name = op.op
    if name == "Fused":
        return [_region_kernel(dialect, op.args["body"], op.operand_views(), in_dtypes, op.dtype, op.shape, "fused")]
    if name in _ELEMENTWISE:
        tree = (name, *(("leaf", k) for k in range(len(op.inputs))))
        return [_region_kernel(dialect, tree, op.operand_views(), in_dtypes, op.dtype, op.shape, name.lower())]
    if name == "Cast":
        return [_region_kernel(dialect, ("Cast", op.args["to"], ("leaf", 0)), op.operand_views(), in_dtypes,
                               op.dtype, op.shape, "cast")]
    if name in ("SumReduce", "MaxReduce"):
        view = op.args["x_view"]
        tree = (name, op.args["axis"], RegionSpace(tuple(view.shape)), ("leaf", 0))
        return [_region_kernel(dialect, tree, [view], in_dtypes, op.dtype, op.shape, name.lower())]
    if name == "Iota":
        return [_region_kernel(dialect, ("iota", op.args["expr"], op.args["dtype"]), [], [], op.dtype,
                               op.args["shape"], "iota")]
    if name == "Output":
        return [_region_kernel(dialect, ("leaf", 0), [op.args["x_view"]], in_dtypes, op.dtype, op.shape, "output")]
    if name == "Gather":
        tree = ("gather", ("leaf", 0), 1)
        return [_region_kernel(dialect, tree, [op.args["indexes_view"], op.args["data_view"]], in_dtypes,
                               op.dtype, op.shape, "gather")]
    if name == "Scatter":
        copy = _region_kernel(dialect, ("leaf", 0), [op.args["dest_view"]], [in_dtypes[0]], op.dtype, op.shape,
                              "copy", operands=[0])
        return [copy, _scatter_kernel(dialect, op, in_dtypes)]
    if name == "ScatterInPlace":
        return [_scatter_kernel(dialect, op, in_dtypes)]
    if name in ("Matmul", "MatmulAdd", "LtMatmul", "LtMatmulAdd"):
        # the cuda backend's cuBLASLt ops have Matmul's fields: this kernel is their fallback where
        # no cuBLASLt plan exists (backends/cuda/cublaslt.py)
        return [_matmul_kernel(dialect, op, in_dtypes)]
    raise LightspeedError(f"kernel renderer: no kernel for {name}")


def module_source(specs: list[KernelSpec], dialect: str) -> str:
    """One translation unit holding the prelude and every distinct kernel of ``specs`` (and the
    block decoders when a block matmul is among them)."""
    seen: dict[str, str] = {}
    for s in specs:
        seen.setdefault(s.name, s.source)
    blocks = dialect == "c" and any(name.startswith(tuple(f"ls_{q}{kind}" for q in _BLOCK_TYPES
                                                          for kind in ("matmul", "gather"))) for name in seen)
    return prelude(dialect) + (_BLOCK_PRELUDE if blocks else "") + "\n" + "\n".join(seen[k] for k in sorted(seen))

