
#ifndef __CUDACC_RTC__  /* NVRTC has no C library headers; the decoders need none there */
#include <stdlib.h>
#endif
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
#ifndef __CUDACC_RTC__  /* the host's vector decoders and integer dots (cuda: the scalar part above) */
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
/* a block's weights as 16-bit integers (0-15, 16-31), then their dot with 32 of x's 16-bit
   integers: ls_block_dot256's 16-bit path, in two parts so that rows can share the unpacking */
static LS_INLINE void ls_wunpack16(const unsigned char* q, int q8, __m256i* w0, __m256i* w1) {
  if (!q8) {
    const __m128i nib = _mm_loadu_si128((const __m128i*)q), low = _mm_set1_epi8(15);
    *w0 = _mm256_cvtepu8_epi16(_mm_and_si128(nib, low));
    *w1 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(nib, 4), low));
  } else {
    *w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)q));
    *w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(q + 16)));
  }
}
static LS_INLINE __m256 ls_wdot16(__m256i w0, __m256i w1, const unsigned char* y) {
  const __m256i* yy = (const __m256i*)y;
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_cvtepi32_ps(_mm256_dpwssd_epi32(_mm256_madd_epi16(w0, _mm256_loadu_si256(yy)), w1,
                                                _mm256_loadu_si256(yy + 1)));
#else
  return _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_madd_epi16(w0, _mm256_loadu_si256(yy)),
                                             _mm256_madd_epi16(w1, _mm256_loadu_si256(yy + 1))));
#endif
}
static LS_INLINE __m256 ls_block_dot256(const unsigned char* q, int q8, const void* y, int bits) {
  if (bits == 16) {
    __m256i w0, w1;
    ls_wunpack16(q, q8, &w0, &w1);
    return ls_wdot16(w0, w1, (const unsigned char*)y);
  }
  const __m256i v = _mm256_loadu_si256((const __m256i*)y);
  if (!q8) {  /* 8 bits: a block's 16 bytes of nibbles against x's 32 bytes */
    const __m128i nib = _mm_loadu_si128((const __m128i*)q), low = _mm_set1_epi8(15);
    const __m256i u = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(nib, 4), low), _mm_and_si128(nib, low));
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), u, v));
#else
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(u, v), _mm256_set1_epi16(1)));
#endif
  }
  /* signed times signed: |w| times y with w's sign */
  const __m256i w = _mm256_loadu_si256((const __m256i*)q);
  const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(v, w));
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
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
/* four rows of x (16-bit integers, rows ``ystride`` bytes apart; their scales ``xstride`` floats
   apart) dotted with one packed row: each row's float operations are ls_qdot's, in ls_qdot's order,
   and the integer dots are exact, so out[r] is bit for bit ls_qdot of row r (batch invariance);
   the block's weights are unpacked once for the four. */
#if defined(LS_WIDE) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
/* 512-bit pairs: ls_qdot's two 8-lane accumulators (blocks t and t + 1 of each group of 8) side by
   side in one register, so one integer dot, conversion and multiply-add serve both; each lane's
   operations are the 256-bit ones', so the results are too.  x is then laid out in pairs
   (ls_pair_x): blocks 2u and 2u + 1 of the groups as [first halves | second halves]. */
#define LS_PAIRS 1
static LS_INLINE void ls_pair_x(short* y, long long nb) {
  for (long long b = 0; b + 2 <= (nb & ~7LL); b += 2) {
    short t[64];
    memcpy(t, y + 32 * b, 128);
    memcpy(y + 32 * b, t, 32); memcpy(y + 32 * b + 16, t + 32, 32);
    memcpy(y + 32 * b + 32, t + 16, 32); memcpy(y + 32 * b + 48, t + 48, 32);
  }
}
/* ``nr`` (4 or 8, a constant where it is called: the loops over the rows unroll) rows at once */
static LS_INLINE void ls_qdot_rows(const unsigned char* row, long long nb, int qtype, const unsigned char* y,
                                   long long ystride, const float* xd, const float* xs, long long xstride,
                                   float* out, const int nr) {
  const int q8 = qtype == 2, bsize = q8 ? 32 : 16;
  const unsigned char* qs = row + (qtype == 1 ? 4 : 2) * nb;
  __m512 acc[8];
  __m256 offv[8];
  float off[8];
  for (int r = 0; r < nr; r++) { acc[r] = _mm512_setzero_ps(); offv[r] = _mm256_setzero_ps(); off[r] = 0.0f; }
  const __m512i sel[4] = {
    _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
    _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2),
    _mm512_set_epi32(5, 5, 5, 5, 5, 5, 5, 5, 4, 4, 4, 4, 4, 4, 4, 4),
    _mm512_set_epi32(7, 7, 7, 7, 7, 7, 7, 7, 6, 6, 6, 6, 6, 6, 6, 6)};
  const __m256i low = _mm256_set1_epi8(15);
  long long b = 0;
  for (; b + 8 <= nb; b += 8) {
    const __m256 dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(row + 2 * b)));
    const __m256 mv = qtype == 1 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(row + 2 * (nb + b)))) : dv;
    __m512 sc[8];
    for (int r = 0; r < nr; r++) {
      sc[r] = _mm512_castps256_ps512(_mm256_mul_ps(dv, _mm256_loadu_ps(xd + r * xstride + b)));
      if (!q8) offv[r] = _mm256_fmadd_ps(mv, _mm256_loadu_ps(xs + r * xstride + b), offv[r]);
    }
    for (int t = 0; t < 8; t += 2) {
      __m512i w0, w1;  /* [block t | block t + 1] weights 0-15, 16-31 as 16-bit integers */
      const unsigned char* q = qs + (b + t) * bsize;
      if (!q8) {
        const __m256i nib = _mm256_loadu_si256((const __m256i*)q);
        const __m256i n0 = _mm256_and_si256(nib, low), n1 = _mm256_and_si256(_mm256_srli_epi16(nib, 4), low);
        /* nib holds block t's 16 bytes then block t + 1's: low nibbles are weights 0-15 */
        w0 = _mm512_cvtepu8_epi16(n0);
        w1 = _mm512_cvtepu8_epi16(n1);
      } else {
        w0 = _mm512_cvtepi8_epi16(_mm256_set_m128i(_mm_loadu_si128((const __m128i*)(q + 32)),
                                                   _mm_loadu_si128((const __m128i*)q)));
        w1 = _mm512_cvtepi8_epi16(_mm256_set_m128i(_mm_loadu_si128((const __m128i*)(q + 48)),
                                                   _mm_loadu_si128((const __m128i*)(q + 16))));
      }
      for (int r = 0; r < nr; r++) {
        const unsigned char* yr = y + r * ystride + (b + t) * 64;
        const __m512i p = _mm512_dpwssd_epi32(_mm512_madd_epi16(w0, _mm512_loadu_si512(yr)), w1,
                                              _mm512_loadu_si512(yr + 64));
        acc[r] = _mm512_fmadd_ps(_mm512_permutexvar_ps(sel[t / 2], sc[r]), _mm512_cvtepi32_ps(p), acc[r]);
      }
    }
  }
  for (int r = 0; r < nr; r++) {
    __m256 acc0 = _mm512_castps512_ps256(acc[r]), acc1 = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[r]), 1));
    for (long long c = b; c < nb; c++) {
      __m256i a0, a1;
      ls_wunpack16(qs + c * bsize, q8, &a0, &a1);
      acc0 = ls_acc_fma(ls_acc_set1(ls_hx(row, c) * xd[r * xstride + c]), ls_wdot16(a0, a1, y + r * ystride + c * 64),
                        acc0);
      if (!q8) off[r] += ls_hx(row, qtype == 1 ? nb + c : c) * xs[r * xstride + c];
    }
    const float dot = ls_hsum4(ls_acc_half(ls_acc_add(acc0, acc1)));
    off[r] += ls_hsum8(offv[r]);
    out[r] = q8 ? dot : dot + (qtype == 1 ? off[r] : -8.0f * off[r]);
  }
}
static LS_INLINE void ls_qdot_rows4(const unsigned char* row, long long nb, int qtype, const unsigned char* y,
                                    long long ystride, const float* xd, const float* xs, long long xstride,
                                    float* out) {
  ls_qdot_rows(row, nb, qtype, y, ystride, xd, xs, xstride, out, 4);
}
/* eight rows: each block's weights unpacked once for all eight (the 8-row paged step) */
static LS_INLINE void ls_qdot_rows8(const unsigned char* row, long long nb, int qtype, const unsigned char* y,
                                    long long ystride, const float* xd, const float* xs, long long xstride,
                                    float* out) {
  ls_qdot_rows(row, nb, qtype, y, ystride, xd, xs, xstride, out, 8);
}
#endif
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
#ifndef LS_PAIRS
/* without 512-bit pairs: the four rows one after another (the same results) */
static LS_INLINE void ls_qdot_rows4(const unsigned char* row, long long nb, int qtype, const unsigned char* y,
                                    long long ystride, const float* xd, const float* xs, long long xstride,
                                    float* out) {
  for (int r = 0; r < 4; r++) out[r] = ls_qdot(row, nb, qtype, 16, y + r * ystride, xd + r * xstride, xs + r * xstride);
}
static LS_INLINE void ls_qdot_rows8(const unsigned char* row, long long nb, int qtype, const unsigned char* y,
                                    long long ystride, const float* xd, const float* xs, long long xstride,
                                    float* out) {
  for (int r = 0; r < 8; r++) out[r] = ls_qdot(row, nb, qtype, 16, y + r * ystride, xd + r * xstride, xs + r * xstride);
}
#endif
#endif  /* __CUDACC_RTC__ */
