
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
/* 8 bytes at q (any even address: GGUF's K-quant super-blocks are 2-byte aligned) as two
   little-endian 32-bit words: one 8-byte load, two 4-byte loads or four 2-byte loads by q's
   alignment (a warp's lanes share it where they read one super-block) */
static LS_INLINE void ls_words8(const unsigned char* q, unsigned int* a, unsigned int* b) {
  const unsigned long long at = (unsigned long long)q;
  if ((at & 7) == 0) { const unsigned long long v = *(const unsigned long long*)q; *a = (unsigned int)v; *b = (unsigned int)(v >> 32); }
  else if ((at & 3) == 0) { *a = ((const unsigned int*)q)[0]; *b = ((const unsigned int*)q)[1]; }
  else {
    const unsigned short* h = (const unsigned short*)q;
    *a = h[0] | (unsigned int)h[1] << 16; *b = h[2] | (unsigned int)h[3] << 16;
  }
}
/* part p (weights 8p..8p+7) of group g of a Q4_K (code 4) or Q6_K (code 5) row as 8 unsigned
   weights, bytes of u0 (weights 8p..8p+3) and u1, with its affine map value = s * u + o (ls_kgroup's,
   so the same float32 weights) */
static LS_INLINE void ls_kpart(const unsigned char* row, int code, long long g, int p, unsigned int* u0,
                               unsigned int* u1, float* s, float* o) {
  const int sub = (int)(g & 7);
  unsigned int a, b;
  if (code == 4) {
    const unsigned char* sb = row + 144 * (g >> 3);
    int sc, m;
    ls_scale_min_k4(sub, sb + 4, &sc, &m);
    ls_words8(sb + 16 + 32 * (sub >> 1) + 8 * p, &a, &b);
    const int sh = 4 * (sub & 1);
    *u0 = (a >> sh) & 0x0F0F0F0Fu; *u1 = (b >> sh) & 0x0F0F0F0Fu;
    *s = ls_hx(sb, 0) * (float)sc; *o = -(ls_hx(sb, 1) * (float)m);
  } else {
    const unsigned char* sb = row + 210 * (g >> 3);
    const int half = sub >> 2, k = sub & 3;
    unsigned int c, d;
    ls_words8(sb + 64 * half + 32 * (k & 1) + 8 * p, &a, &b);
    ls_words8(sb + 128 + 32 * half + 8 * p, &c, &d);
    const int sh = 4 * (k >> 1), hs = 2 * k;
    *u0 = ((a >> sh) & 0x0F0F0F0Fu) | ((c >> hs) & 0x03030303u) << 4;
    *u1 = ((b >> sh) & 0x0F0F0F0Fu) | ((d >> hs) & 0x03030303u) << 4;
    *s = ls_hx(sb + 208, 0) * (float)((const signed char*)sb)[192 + 8 * half + 2 * k + (p >> 1)];
    *o = -32.0f * *s;
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
#if defined(LS_WIDE) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
/* Lane-per-block dots (q4_0, q4_1, q8_0 weights; x as 16- or 8-bit integers), AVX-512 with VNNI.
   Each lane of a 512-bit integer accumulator sums one block's dot (q8_0: half a block's), so the
   scales are applied once per group of blocks and row (one conversion and multiply-add) instead
   of once per block pair, and the products are dpwssd (16-bit x: 32 a instruction) or dpbusd
   (8-bit x: 64).  The weights' 64-byte loads are transposed as 4 x 4 dwords within each 128-bit
   chunk: q4 groups of 16 blocks put block 4i + c in lane p = 4c + i (ls_tblk), q8_0 groups of 8
   put half c % 2 of block 2i + c / 2 there; the blocks after the last full group go in
   subgroups of one load (4 q4 blocks, 2 q8_0 blocks), lane (c, i) holding dword i of chunk c.
   x is laid out to match once per call (ls_tlayout_x); a row's float operations are the same
   whatever the number of rows ``nr`` dotted at once, so its result does not depend on the rows
   beside it (batch invariance). */
#define LS_TDOT 1
static LS_INLINE int ls_tblk(int p) { return 4 * (p % 4) + p / 4; }
/* blocks per full group and per subgroup: q4 16 and 4, q8_0 8 and 2 */
#define LS_TGROUP(q8) ((q8) ? 8 : 16)
#define LS_TSUB(q8) ((q8) ? 2 : 4)
/* a row of x laid out: padded blocks (x's bytes: 4 bits per block) and floats (dt, st) */
#define LS_TBLOCKS(nb, q8) ((nb) / LS_TGROUP(q8) * LS_TGROUP(q8) + ((nb) % LS_TGROUP(q8) + LS_TSUB(q8) - 1) / LS_TSUB(q8) * LS_TSUB(q8))
#define LS_TFLOATS(nb, q8) (((nb) / LS_TGROUP(q8) + ((nb) % LS_TGROUP(q8) + LS_TSUB(q8) - 1) / LS_TSUB(q8)) * 16)
/* x quantised by ls_quant_x (``bits`` 16 or 8, blocks in order: y, d, s) into the lane layout for
   weights of ``qtype`` (yt: LS_TBLOCKS * 4 * bits bytes; dt, st: LS_TFLOATS floats; tmp: 64 nb
   bytes).  16-bit x: each block's integers first reordered so that dword v holds the pair of
   weights a dpwssd pairs there (see the E vectors of ls_tdot_rows / ls_tdot8_rows); 8-bit x for
   q8_0 weights: offset by 128 (dpbusd multiplies unsigned by signed bytes; ls_tdot8_rows takes
   128 times each lane's weight sum back). */
static LS_INLINE void ls_tlayout_x(const void* y, int bits, int qtype, const float* d, const float* s, long long nb,
                                   unsigned char* tmp, unsigned char* yt, float* dt, float* st) {
  static const short order4[32] = {0, 2, 16, 18, 1, 3, 17, 19, 4, 6, 20, 22, 5, 7, 21, 23,
                                   8, 10, 24, 26, 9, 11, 25, 27, 12, 14, 28, 30, 13, 15, 29, 31};
  static const short order8[32] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15,
                                   16, 18, 17, 19, 20, 22, 21, 23, 24, 26, 25, 27, 28, 30, 29, 31};
  const int q8 = qtype == 2, G = LS_TGROUP(q8), S = LS_TSUB(q8);
  const int dw = bits;  /* dwords per block of x (32 integers of bits / 8 bytes) */
  const long long nf = nb / G;
  const int* base = (const int*)y;
  if (bits == 16) {
    const __m512i pv = _mm512_loadu_si512(q8 ? order8 : order4);
    for (long long b = 0; b < nb; b++)
      _mm512_storeu_si512(tmp + 64 * b, _mm512_permutexvar_epi16(pv, _mm512_loadu_si512((const short*)y + 32 * b)));
    base = (const int*)tmp;
  }
  const __m512i flip = _mm512_set1_epi8((char)0x80);
  const int flipped = bits == 8 && q8;
  const __m512i lc = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);  /* lane p: chunk c */
  const __m512i li = _mm512_set_epi32(3, 2, 1, 0, 3, 2, 1, 0, 3, 2, 1, 0, 3, 2, 1, 0);  /* dword i */
  const __m512i one = _mm512_set1_epi32(1);
  /* q4: lane p's block 4i + c; q8_0: block 2i + c / 2, half c % 2 */
  const __m512i lblock = q8 ? _mm512_add_epi32(_mm512_slli_epi32(li, 1), _mm512_srli_epi32(lc, 1))
                            : _mm512_add_epi32(_mm512_slli_epi32(li, 2), lc);
  const __m512i lhalf = _mm512_and_si512(lc, one);
  const int nv = q8 ? 4 * bits / 8 : bits;  /* vectors per full group */
  const __m512i first = _mm512_mullo_epi32(lblock, _mm512_set1_epi32(dw));  /* lane p's block's first dword */
  for (long long g = 0; g < nf; g++) {
    for (int v = 0; v < nv; v++) {
      /* the dword of the (reordered) block each lane takes: q4 16-bit: vector v = 4u + e is dword
         v; q4 8-bit: vector 2u + e holds bytes 4u + 16e.. = dword u + 4e; q8_0 16-bit: vector 2u + e
         is dword 8h + v; q8_0 8-bit: vector u is dword 4h + u */
      __m512i col;
      if (!q8) col = _mm512_set1_epi32(bits == 16 ? v : v / 2 + 4 * (v % 2));
      else col = _mm512_add_epi32(_mm512_slli_epi32(lhalf, bits == 16 ? 3 : 2), _mm512_set1_epi32(v));
      __m512i t = _mm512_i32gather_epi32(_mm512_add_epi32(first, col),
                                          base + (long long)G * dw * g, 4);
      if (flipped) t = _mm512_xor_si512(t, flip);
      _mm512_storeu_si512(yt + 64 * (nv * g + v), t);
    }
    const __m512i bidx = _mm512_add_epi32(lblock, _mm512_set1_epi32((int)(G * g)));
    _mm512_storeu_ps(dt + 16 * g, _mm512_i32gather_ps(bidx, d, 4));
    if (q8) _mm512_storeu_ps(st + 16 * g, _mm512_setzero_ps());
    else _mm512_storeu_ps(st + 16 * g, _mm512_i32gather_ps(bidx, s, 4));
  }
  const int ns = nv / (G / S);  /* vectors per subgroup */
  for (long long sg = 0; G * nf + S * sg < nb; sg++) {
    const long long b0 = G * nf + S * sg, nt = nb - b0 < S ? nb - b0 : S;
    /* lane (c, i): q4 dword i of block c; q8_0 dword 4 (c % 2) + i of block c / 2 */
    const __m512i sblock = q8 ? _mm512_srli_epi32(lc, 1) : lc;
    const __mmask16 in = _mm512_cmplt_epi32_mask(sblock, _mm512_set1_epi32((int)nt));
    for (int e = 0; e < ns; e++) {
      /* q4 16-bit: dword 4i + e; q4 8-bit: dword i + 4e; q8_0 16-bit: dword 8h + 2i + e; q8_0 8-bit: 4h + i */
      __m512i col;
      if (!q8) col = bits == 16 ? _mm512_add_epi32(_mm512_slli_epi32(li, 2), _mm512_set1_epi32(e))
                                : _mm512_add_epi32(li, _mm512_set1_epi32(4 * e));
      else col = bits == 16 ? _mm512_add_epi32(_mm512_add_epi32(_mm512_slli_epi32(lhalf, 3), _mm512_slli_epi32(li, 1)),
                                               _mm512_set1_epi32(e))
                            : _mm512_add_epi32(_mm512_slli_epi32(lhalf, 2), li);
      __m512i t = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), in,
                                               _mm512_add_epi32(_mm512_mullo_epi32(sblock, _mm512_set1_epi32(dw)), col),
                                               base + dw * b0, 4);
      if (flipped) t = _mm512_mask_xor_epi32(t, in, t, flip);
      _mm512_storeu_si512(yt + 64 * (nv * nf + ns * sg + e), t);
    }
    for (int p = 0; p < 16; p++) {
      const int c = p / 4, i = p % 4, blk = q8 ? c / 2 : c;
      dt[16 * nf + 16 * sg + p] = blk < nt ? d[b0 + blk] : 0.0f;
      st[16 * nf + 16 * sg + p] = !q8 && blk < nt && i == 0 ? s[b0 + blk] : 0.0f;
    }
  }
}
/* The lane sum of a float vector in a fixed tree (lanes i + i+8, then i + i+4, i + i+2, i + i+1:
   the halving order of GCC's _mm512_reduce_add_ps, written out so that every compiler gives the
   same sums), and ls_hsum16: the lane sums of 16 vectors at once in the same tree, each addition
   pairing the same two values as ls_hsum's (a float sum is the same in either operand order), so
   each of its sums is bit for bit ls_hsum's.  Lane 4c + k of ls_hsum16's result is the sum of v[c +
   4k]; transposed, the 16 sums cost 45 vector operations instead of ~128. */
static LS_INLINE float ls_hsum(__m512 v) {
  const __m256 t8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  const __m128 t4 = _mm_add_ps(_mm256_castps256_ps128(t8), _mm256_extractf128_ps(t8, 1));
  const __m128 t2 = _mm_add_ps(t4, _mm_shuffle_ps(t4, t4, 0x4e));
  return _mm_cvtss_f32(_mm_add_ps(t2, _mm_shuffle_ps(t2, t2, 0xb1)));
}
static LS_INLINE __m512 ls_hsum16(const __m512* v) {
  __m512 s1[8], s2[4], s3[2];
  for (int p = 0; p < 8; p++)  /* lanes i + i+8: [v[2p] | v[2p+1]], 8 lanes each */
    s1[p] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], 0x44),
                          _mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], 0xee));
  for (int q = 0; q < 4; q++)  /* i + i+4: chunk c of s2[q] is v[4q + c]'s 4 lanes */
    s2[q] = _mm512_add_ps(_mm512_shuffle_f32x4(s1[2 * q], s1[2 * q + 1], 0x88),
                          _mm512_shuffle_f32x4(s1[2 * q], s1[2 * q + 1], 0xdd));
  for (int u = 0; u < 2; u++)  /* i + i+2: chunk c of s3[u] is v[c]'s 2 lanes, then v[4 + c]'s (u = 0) */
    s3[u] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(s2[2 * u]), _mm512_castps_pd(s2[2 * u + 1]))),
                          _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(s2[2 * u]), _mm512_castps_pd(s2[2 * u + 1]))));
  return _mm512_add_ps(_mm512_shuffle_ps(s3[0], s3[1], 0x88), _mm512_shuffle_ps(s3[0], s3[1], 0xdd));
}
/* line ``l`` of the ``pfl`` 64-byte lines at pf asked into the L1 cache (none when l >= pfl): the
   multi-row products' next pair of weight rows, a line at each step of this pair's products.  The
   hardware prefetcher did not follow two rows read side by side (perf: ~20% of a [576 x 1536]
   product's time on the second row's first loads), and a burst of a pair's lines (30) at once
   stalled on the L1's misses in flight instead */
static LS_INLINE void ls_prefetch_line(const unsigned char* pf, long long pfl, long long l) {
  if (l < pfl) __builtin_prefetch(pf + 64 * l, 0, 3);
}
/* 256 bytes at q as four 64-byte loads L0..L3 transposed as 4 x 4 dwords within each 128-bit
   chunk: lane (c, i) of T[u] is dword u of chunk c of L_i */
static LS_INLINE void ls_tload(const unsigned char* q, __m512i* T) {
  const __m512i L0 = _mm512_loadu_si512(q), L1 = _mm512_loadu_si512(q + 64);
  const __m512i L2 = _mm512_loadu_si512(q + 128), L3 = _mm512_loadu_si512(q + 192);
  const __m512i t0 = _mm512_unpacklo_epi32(L0, L1), t1 = _mm512_unpackhi_epi32(L0, L1);
  const __m512i t2 = _mm512_unpacklo_epi32(L2, L3), t3 = _mm512_unpackhi_epi32(L2, L3);
  T[0] = _mm512_unpacklo_epi64(t0, t2); T[1] = _mm512_unpackhi_epi64(t0, t2);
  T[2] = _mm512_unpacklo_epi64(t1, t3); T[3] = _mm512_unpackhi_epi64(t1, t3);
}
/* packed q4 row (qtype 0: q4_0, 1: q4_1) dotted with ``nr`` rows of x laid out by ls_tlayout_x
   (rows ``ystride`` bytes and ``xstride`` floats apart): sum over blocks of dw * dx * (integer
   dot), lane by lane, plus the offsets (q4_1: m, q4_0: -8 dw) times s; the lanes summed last. */
static LS_INLINE void ls_tdot_rows(const unsigned char* row, long long nb, int qtype, int bits,
                                   const unsigned char* yt, long long ystride, const float* dt, const float* st,
                                   long long xstride, float* out, const int nr) {
  const unsigned char* qs = row + (qtype == 1 ? 4 : 2) * nb;
  const __m512i blk = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
  const __m512i quad = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
  const __m512i m16 = _mm512_set1_epi32(0x000F000F), m8 = _mm512_set1_epi8(15);
  const int nv = bits == 16 ? 16 : 8, vb = 64 * nv;  /* vectors and bytes of x per full group */
  __m512 facc[8], offv[8];
  for (int r = 0; r < nr; r++) { facc[r] = _mm512_setzero_ps(); offv[r] = _mm512_setzero_ps(); }
  const long long nf = nb / 16;
  for (long long g = 0; g < nf; g++) {
    const unsigned char* q = qs + 256 * g;
    __m512i T[4];
    ls_tload(q, T);
    __m512i E[16];  /* T[u]'s weights: 16-bit pairs (E[4u + e]) or bytes (E[2u], low; E[2u + 1], high) */
    for (int u = 0; u < 4; u++) {
      if (bits == 16) {
        E[4 * u] = _mm512_and_si512(T[u], m16);
        E[4 * u + 1] = _mm512_and_si512(_mm512_srli_epi32(T[u], 4), m16);
        E[4 * u + 2] = _mm512_and_si512(_mm512_srli_epi32(T[u], 8), m16);
        E[4 * u + 3] = _mm512_and_si512(_mm512_srli_epi32(T[u], 12), m16);
      } else {
        E[2 * u] = _mm512_and_si512(T[u], m8);
        E[2 * u + 1] = _mm512_and_si512(_mm512_srli_epi32(T[u], 4), m8);
      }
    }
    const __m512 dv = _mm512_permutexvar_ps(blk, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(row + 32 * g))));
    const __m512 mv = qtype == 1 ? _mm512_permutexvar_ps(blk, _mm512_cvtph_ps(_mm256_loadu_si256(
                                       (const __m256i*)(row + 2 * nb + 32 * g)))) : dv;
    __m512i acc[8];
    if (bits == 16 || nr == 1) {  /* a row at a time, four chains */
      for (int r = 0; r < nr; r++) {
        const __m512i* yr = (const __m512i*)(yt + r * ystride + g * vb);
        __m512i a[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
        for (int v = 0; v < nv; v++)
          a[v % 4] = bits == 16 ? _mm512_dpwssd_epi32(a[v % 4], E[v], _mm512_loadu_si512(yr + v))
                                : _mm512_dpbusd_epi32(a[v % 4], E[v], _mm512_loadu_si512(yr + v));
        acc[r] = _mm512_add_epi32(_mm512_add_epi32(a[0], a[1]), _mm512_add_epi32(a[2], a[3]));
      }
    } else {  /* 8-bit rows side by side: a chain per row */
      for (int r = 0; r < nr; r++) acc[r] = _mm512_setzero_si512();
      for (int v = 0; v < nv; v++)
        for (int r = 0; r < nr; r++)
          acc[r] = _mm512_dpbusd_epi32(acc[r], E[v], _mm512_loadu_si512((const __m512i*)(yt + r * ystride + g * vb) + v));
    }
    for (int r = 0; r < nr; r++) {
      const __m512 sc = _mm512_mul_ps(dv, _mm512_loadu_ps(dt + r * xstride + 16 * g));
      facc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r]), sc, facc[r]);
      offv[r] = _mm512_fmadd_ps(mv, _mm512_loadu_ps(st + r * xstride + 16 * g), offv[r]);
    }
  }
  for (long long sg = 0; 16 * nf + 4 * sg < nb; sg++) {
    const long long b0 = 16 * nf + 4 * sg, nt = nb - b0 < 4 ? nb - b0 : 4;
    const __m512i L = _mm512_maskz_loadu_epi8(nt == 4 ? ~0ULL : (1ULL << (16 * nt)) - 1ULL, qs + 16 * b0);
    __m512i E[4];
    if (bits == 16) {
      E[0] = _mm512_and_si512(L, m16); E[1] = _mm512_and_si512(_mm512_srli_epi32(L, 4), m16);
      E[2] = _mm512_and_si512(_mm512_srli_epi32(L, 8), m16); E[3] = _mm512_and_si512(_mm512_srli_epi32(L, 12), m16);
    } else {
      E[0] = _mm512_and_si512(L, m8); E[1] = _mm512_and_si512(_mm512_srli_epi32(L, 4), m8);
    }
    const __mmask8 bm = (__mmask8)((1u << nt) - 1u);
    const __m512 dv = _mm512_permutexvar_ps(quad, _mm512_castps128_ps512(_mm_cvtph_ps(_mm_maskz_loadu_epi16(bm, row + 2 * b0))));
    const __m512 mv = qtype == 1 ? _mm512_permutexvar_ps(quad, _mm512_castps128_ps512(
                                       _mm_cvtph_ps(_mm_maskz_loadu_epi16(bm, row + 2 * (nb + b0))))) : dv;
    const long long o = 16 * nf + 16 * sg;
    for (int r = 0; r < nr; r++) {
      const __m512i* yr = (const __m512i*)(yt + r * ystride + nf * vb + sg * (vb / 4));
      const __m512i isum = bits == 16
          ? _mm512_add_epi32(_mm512_dpwssd_epi32(_mm512_madd_epi16(E[0], _mm512_loadu_si512(yr)), E[1], _mm512_loadu_si512(yr + 1)),
                             _mm512_dpwssd_epi32(_mm512_madd_epi16(E[2], _mm512_loadu_si512(yr + 2)), E[3], _mm512_loadu_si512(yr + 3)))
          : _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), E[0], _mm512_loadu_si512(yr)), E[1],
                                _mm512_loadu_si512(yr + 1));
      const __m512 sc = _mm512_mul_ps(dv, _mm512_loadu_ps(dt + r * xstride + o));
      facc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), sc, facc[r]);
      offv[r] = _mm512_fmadd_ps(mv, _mm512_loadu_ps(st + r * xstride + o), offv[r]);
    }
  }
  for (int r = 0; r < nr; r++) {
    const float dot = ls_hsum(facc[r]), off = ls_hsum(offv[r]);
    out[r] = dot + (qtype == 1 ? off : -8.0f * off);
  }
}
/* packed q8_0 row dotted with ``nr`` rows of x laid out by ls_tlayout_x (as ls_tdot_rows): sum
   over blocks of dw * dx * (integer dot), lane by lane, the lanes summed last */
static LS_INLINE void ls_tdot8_rows(const unsigned char* row, long long nb, int bits, const unsigned char* yt,
                                    long long ystride, const float* dt, long long xstride, float* out, const int nr) {
  const unsigned char* qs = row + 2 * nb;
  const __m512i lblock = _mm512_set_epi32(7, 5, 3, 1, 7, 5, 3, 1, 6, 4, 2, 0, 6, 4, 2, 0);  /* 2i + c / 2 */
  const __m512i lsub = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);  /* c / 2 */
  const __m512i ones = _mm512_set1_epi8(1);
  const int nv = bits == 16 ? 8 : 4, vb = 64 * nv;  /* vectors and bytes of x per full group */
  __m512 facc[8];
  for (int r = 0; r < nr; r++) facc[r] = _mm512_setzero_ps();
  const long long nf = nb / 8;
  for (long long g = 0; g < nf; g++) {
    const unsigned char* q = qs + 256 * g;
    __m512i T[4];
    ls_tload(q, T);
    __m512i E[8], corr = _mm512_setzero_si512();
    if (bits == 16) {  /* signed bytes 0 and 2, 1 and 3 of each dword as 16-bit pairs */
      for (int u = 0; u < 4; u++) {
        E[2 * u] = _mm512_srai_epi16(_mm512_slli_epi16(T[u], 8), 8);
        E[2 * u + 1] = _mm512_srai_epi16(T[u], 8);
      }
    } else {  /* x was offset by 128: take 128 times each lane's weight sum back */
      for (int u = 0; u < 4; u++) corr = _mm512_dpbusd_epi32(corr, ones, T[u]);
      corr = _mm512_slli_epi32(corr, 7);
    }
    const __m512 dv = _mm512_permutexvar_ps(lblock, _mm512_castps256_ps512(
                                                _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(row + 16 * g)))));
    for (int r = 0; r < nr; r++) {
      const __m512i* yr = (const __m512i*)(yt + r * ystride + g * vb);
      __m512i acc;
      if (bits == 16) {
        __m512i a0 = _mm512_setzero_si512(), a1 = a0;
        for (int v = 0; v < 8; v += 2) {
          a0 = _mm512_dpwssd_epi32(a0, E[v], _mm512_loadu_si512(yr + v));
          a1 = _mm512_dpwssd_epi32(a1, E[v + 1], _mm512_loadu_si512(yr + v + 1));
        }
        acc = _mm512_add_epi32(a0, a1);
      } else {
        const __m512i a0 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(yr), T[0]),
                                               _mm512_loadu_si512(yr + 1), T[1]);
        const __m512i a1 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(yr + 2), T[2]),
                                               _mm512_loadu_si512(yr + 3), T[3]);
        acc = _mm512_sub_epi32(_mm512_add_epi32(a0, a1), corr);
      }
      const __m512 sc = _mm512_mul_ps(dv, _mm512_loadu_ps(dt + r * xstride + 16 * g));
      facc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), sc, facc[r]);
    }
  }
  for (long long sg = 0; 8 * nf + 2 * sg < nb; sg++) {
    const long long b0 = 8 * nf + 2 * sg, nt = nb - b0 < 2 ? nb - b0 : 2;
    const __m512i L = _mm512_maskz_loadu_epi8(nt == 2 ? ~0ULL : (1ULL << 32) - 1ULL, qs + 32 * b0);
    __m512i E0, E1, corr = _mm512_setzero_si512();
    if (bits == 16) {
      E0 = _mm512_srai_epi16(_mm512_slli_epi16(L, 8), 8);
      E1 = _mm512_srai_epi16(L, 8);
    } else {
      E0 = E1 = L;
      corr = _mm512_slli_epi32(_mm512_dpbusd_epi32(corr, ones, L), 7);
    }
    const __mmask8 bm = (__mmask8)((1u << nt) - 1u);
    const __m512 dv = _mm512_permutexvar_ps(lsub, _mm512_castps128_ps512(_mm_cvtph_ps(_mm_maskz_loadu_epi16(bm, row + 2 * b0))));
    const long long o = 16 * nf + 16 * sg;
    for (int r = 0; r < nr; r++) {
      const __m512i* yr = (const __m512i*)(yt + r * ystride + nf * vb + sg * (vb / 4));
      const __m512i acc = bits == 16
          ? _mm512_dpwssd_epi32(_mm512_madd_epi16(E0, _mm512_loadu_si512(yr)), E1, _mm512_loadu_si512(yr + 1))
          : _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(yr), E1), corr);
      const __m512 sc = _mm512_mul_ps(dv, _mm512_loadu_ps(dt + r * xstride + o));
      facc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), sc, facc[r]);
    }
    (void)E0;
  }
  for (int r = 0; r < nr; r++) out[r] = ls_hsum(facc[r]);
}
/* Two weight rows at a time (16-bit x): ``nr`` (at most 4) rows of x laid out by ls_tlayout_x dotted
   with packed q4 rows row0 and row1 (ls_tdot2_rows) or q8_0 rows (ls_tdot82_rows).  Each vector of
   x is loaded once (into a register: a load folded into each product would be two) for both
   weight rows' products, and no accumulator leaves the registers at 4 rows (4 x 2 integer, 8 + 8
   float; 8 rows would spill): on the 2-core VM's Zen 4 a q4_1 [576 x 1536] product of 8 rows ran
   90 us against ls_tdot_rows' 152 (dpwssd ~0.7 a cycle, was ~0.4).  Every output's float
   operations are ls_tdot_rows' / ls_tdot8_rows' (the same scale products, conversions and
   multiply-adds in the same order per lane, the same lane sums) and its integer sums are exact in
   any order, so each output is bit for bit the one-row-at-a-time function's: a row's result does
   not depend on the rows or weight rows beside it. */
/* nr rows of x (vector y + r * ystride) dotted with two rows' weight vectors e0, e1: one load of
   each x vector (into a register: a load folded into each product would be two) for both */
static LS_INLINE void ls_dot2(__m512i* a0, __m512i* a1, __m512i e0, __m512i e1, const unsigned char* y,
                              long long ystride, const int nr) {
  _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) {
    __m512i x = _mm512_loadu_si512((const __m512i*)(y + r * ystride));
    __asm__("" : "+v"(x));
    a0[r] = _mm512_dpwssd_epi32(a0[r], e0, x);
    a1[r] = _mm512_dpwssd_epi32(a1[r], e1, x);
  }
}
static LS_INLINE void ls_tdot2_rows(const unsigned char* row0, const unsigned char* row1, long long nb, int qtype,
                                    const unsigned char* yt, long long ystride, const float* dt, const float* st,
                                    long long xstride, float* out0, float* out1, const int nr,
                                    const unsigned char* pf, long long pfl) {
  const unsigned char* qs0 = row0 + (qtype == 1 ? 4 : 2) * nb;
  const unsigned char* qs1 = row1 + (qtype == 1 ? 4 : 2) * nb;
  const __m512i blk = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
  const __m512i quad = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
  const __m512i m16 = _mm512_set1_epi32(0x000F000F);
  const int vb = 64 * 16;  /* bytes of x per full group */
  __m512 facc[8], offv[8];  /* [r]: row0's, [4 + r]: row1's */
  for (int r = 0; r < 8; r++) { facc[r] = _mm512_setzero_ps(); offv[r] = _mm512_setzero_ps(); }
  const long long nf = nb / 16;
  for (long long g = 0; g < nf; g++) {
    __m512i T0[4], T1[4], a0[4], a1[4];
    ls_tload(qs0 + 256 * g, T0);
    ls_tload(qs1 + 256 * g, T1);
    for (int r = 0; r < 4; r++) { a0[r] = _mm512_setzero_si512(); a1[r] = _mm512_setzero_si512(); }
    _Pragma("GCC unroll 16") for (int v = 0; v < 16; v++) {  /* E[v] of ls_tdot_rows, for each row */
      ls_prefetch_line(pf, pfl, 16 * g + v);
      const __m512i e0 = _mm512_and_si512(_mm512_srli_epi32(T0[v / 4], 4 * (v % 4)), m16);
      const __m512i e1 = _mm512_and_si512(_mm512_srli_epi32(T1[v / 4], 4 * (v % 4)), m16);
      ls_dot2(a0, a1, e0, e1, yt + g * vb + 64 * v, ystride, nr);
    }
    const __m512 dv0 = _mm512_permutexvar_ps(blk, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(row0 + 32 * g))));
    const __m512 dv1 = _mm512_permutexvar_ps(blk, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(row1 + 32 * g))));
    const __m512 mv0 = qtype == 1 ? _mm512_permutexvar_ps(blk, _mm512_cvtph_ps(_mm256_loadu_si256(
                                        (const __m256i*)(row0 + 2 * nb + 32 * g)))) : dv0;
    const __m512 mv1 = qtype == 1 ? _mm512_permutexvar_ps(blk, _mm512_cvtph_ps(_mm256_loadu_si256(
                                        (const __m256i*)(row1 + 2 * nb + 32 * g)))) : dv1;
    _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) {
      const __m512 dx = _mm512_loadu_ps(dt + r * xstride + 16 * g), sx = _mm512_loadu_ps(st + r * xstride + 16 * g);
      facc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a0[r]), _mm512_mul_ps(dv0, dx), facc[r]);
      offv[r] = _mm512_fmadd_ps(mv0, sx, offv[r]);
      facc[4 + r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a1[r]), _mm512_mul_ps(dv1, dx), facc[4 + r]);
      offv[4 + r] = _mm512_fmadd_ps(mv1, sx, offv[4 + r]);
    }
  }
  for (long long sg = 0; 16 * nf + 4 * sg < nb; sg++) {  /* ls_tdot_rows' subgroups of 4 blocks */
    const long long b0 = 16 * nf + 4 * sg, nt = nb - b0 < 4 ? nb - b0 : 4;
    const __mmask64 lm = nt == 4 ? ~0ULL : (1ULL << (16 * nt)) - 1ULL;
    const __m512i L0 = _mm512_maskz_loadu_epi8(lm, qs0 + 16 * b0), L1 = _mm512_maskz_loadu_epi8(lm, qs1 + 16 * b0);
    const __mmask8 bm = (__mmask8)((1u << nt) - 1u);
    const __m512 dv0 = _mm512_permutexvar_ps(quad, _mm512_castps128_ps512(_mm_cvtph_ps(_mm_maskz_loadu_epi16(bm, row0 + 2 * b0))));
    const __m512 dv1 = _mm512_permutexvar_ps(quad, _mm512_castps128_ps512(_mm_cvtph_ps(_mm_maskz_loadu_epi16(bm, row1 + 2 * b0))));
    const __m512 mv0 = qtype == 1 ? _mm512_permutexvar_ps(quad, _mm512_castps128_ps512(
                                        _mm_cvtph_ps(_mm_maskz_loadu_epi16(bm, row0 + 2 * (nb + b0))))) : dv0;
    const __m512 mv1 = qtype == 1 ? _mm512_permutexvar_ps(quad, _mm512_castps128_ps512(
                                        _mm_cvtph_ps(_mm_maskz_loadu_epi16(bm, row1 + 2 * (nb + b0))))) : dv1;
    const long long o = 16 * nf + 16 * sg;
    __m512i a0[4], a1[4];
    for (int r = 0; r < 4; r++) { a0[r] = _mm512_setzero_si512(); a1[r] = _mm512_setzero_si512(); }
    _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++) {
      ls_prefetch_line(pf, pfl, 16 * nf + 4 * sg + v);
      const __m512i e0 = _mm512_and_si512(_mm512_srli_epi32(L0, 4 * v), m16);
      const __m512i e1 = _mm512_and_si512(_mm512_srli_epi32(L1, 4 * v), m16);
      ls_dot2(a0, a1, e0, e1, yt + nf * vb + sg * (vb / 4) + 64 * v, ystride, nr);
    }
    _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) {
      const __m512 dx = _mm512_loadu_ps(dt + r * xstride + o), sx = _mm512_loadu_ps(st + r * xstride + o);
      facc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a0[r]), _mm512_mul_ps(dv0, dx), facc[r]);
      offv[r] = _mm512_fmadd_ps(mv0, sx, offv[r]);
      facc[4 + r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a1[r]), _mm512_mul_ps(dv1, dx), facc[4 + r]);
      offv[4 + r] = _mm512_fmadd_ps(mv1, sx, offv[4 + r]);
    }
  }
  for (long long l = 16 * nf + 4 * ((nb - 16 * nf + 3) / 4); l < pfl; l++) ls_prefetch_line(pf, pfl, l);
  /* facc[j] is v[j], offv[j] v[8 + j]: lane 4 (j % 4) + j / 4 holds facc[j]'s sum, lane 4 (j % 4) + 2 +
     j / 4 offv[j]'s */
  __m512 v[16];
  for (int j = 0; j < 8; j++) { v[j] = facc[j]; v[8 + j] = offv[j]; }
  float sums[16];
  _mm512_storeu_ps(sums, ls_hsum16(v));
  for (int r = 0; r < nr; r++) {
    const float s0 = sums[4 * r + 2], s1 = sums[4 * r + 3];
    out0[r] = sums[4 * r] + (qtype == 1 ? s0 : -8.0f * s0);
    out1[r] = sums[4 * r + 1] + (qtype == 1 ? s1 : -8.0f * s1);
  }
}
static LS_INLINE void ls_tdot82_rows(const unsigned char* row0, const unsigned char* row1, long long nb,
                                     const unsigned char* yt, long long ystride, const float* dt, long long xstride,
                                     float* out0, float* out1, const int nr, const unsigned char* pf, long long pfl) {
  const unsigned char* qs0 = row0 + 2 * nb;
  const unsigned char* qs1 = row1 + 2 * nb;
  const __m512i lblock = _mm512_set_epi32(7, 5, 3, 1, 7, 5, 3, 1, 6, 4, 2, 0, 6, 4, 2, 0);  /* 2i + c / 2 */
  const __m512i lsub = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);  /* c / 2 */
  const int vb = 64 * 8;  /* bytes of x per full group */
  __m512 facc[8];
  for (int r = 0; r < 8; r++) facc[r] = _mm512_setzero_ps();
  const long long nf = nb / 8;
  for (long long g = 0; g < nf; g++) {
    __m512i T0[4], T1[4], a0[4], a1[4];
    ls_tload(qs0 + 256 * g, T0);
    ls_tload(qs1 + 256 * g, T1);
    for (int r = 0; r < 4; r++) { a0[r] = _mm512_setzero_si512(); a1[r] = _mm512_setzero_si512(); }
    _Pragma("GCC unroll 8") for (int v = 0; v < 8; v++) {  /* E[v] of ls_tdot8_rows, for each row */
      ls_prefetch_line(pf, pfl, 8 * g + v);
      const __m512i e0 = v % 2 ? _mm512_srai_epi16(T0[v / 2], 8) : _mm512_srai_epi16(_mm512_slli_epi16(T0[v / 2], 8), 8);
      const __m512i e1 = v % 2 ? _mm512_srai_epi16(T1[v / 2], 8) : _mm512_srai_epi16(_mm512_slli_epi16(T1[v / 2], 8), 8);
      ls_dot2(a0, a1, e0, e1, yt + g * vb + 64 * v, ystride, nr);
    }
    const __m512 dv0 = _mm512_permutexvar_ps(lblock, _mm512_castps256_ps512(
                                                 _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(row0 + 16 * g)))));
    const __m512 dv1 = _mm512_permutexvar_ps(lblock, _mm512_castps256_ps512(
                                                 _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(row1 + 16 * g)))));
    _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) {
      const __m512 dx = _mm512_loadu_ps(dt + r * xstride + 16 * g);
      facc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a0[r]), _mm512_mul_ps(dv0, dx), facc[r]);
      facc[4 + r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a1[r]), _mm512_mul_ps(dv1, dx), facc[4 + r]);
    }
  }
  for (long long sg = 0; 8 * nf + 2 * sg < nb; sg++) {  /* ls_tdot8_rows' subgroups of 2 blocks */
    const long long b0 = 8 * nf + 2 * sg, nt = nb - b0 < 2 ? nb - b0 : 2;
    const __mmask64 lm = nt == 2 ? ~0ULL : (1ULL << 32) - 1ULL;
    const __m512i L0 = _mm512_maskz_loadu_epi8(lm, qs0 + 32 * b0), L1 = _mm512_maskz_loadu_epi8(lm, qs1 + 32 * b0);
    const __mmask8 bm = (__mmask8)((1u << nt) - 1u);
    const __m512 dv0 = _mm512_permutexvar_ps(lsub, _mm512_castps128_ps512(_mm_cvtph_ps(_mm_maskz_loadu_epi16(bm, row0 + 2 * b0))));
    const __m512 dv1 = _mm512_permutexvar_ps(lsub, _mm512_castps128_ps512(_mm_cvtph_ps(_mm_maskz_loadu_epi16(bm, row1 + 2 * b0))));
    const long long o = 16 * nf + 16 * sg;
    __m512i a0[4], a1[4];
    for (int r = 0; r < 4; r++) { a0[r] = _mm512_setzero_si512(); a1[r] = _mm512_setzero_si512(); }
    _Pragma("GCC unroll 2") for (int v = 0; v < 2; v++) {
      ls_prefetch_line(pf, pfl, 8 * nf + 2 * sg + v);
      const __m512i e0 = v ? _mm512_srai_epi16(L0, 8) : _mm512_srai_epi16(_mm512_slli_epi16(L0, 8), 8);
      const __m512i e1 = v ? _mm512_srai_epi16(L1, 8) : _mm512_srai_epi16(_mm512_slli_epi16(L1, 8), 8);
      ls_dot2(a0, a1, e0, e1, yt + nf * vb + sg * (vb / 4) + 64 * v, ystride, nr);
    }
    _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) {
      const __m512 dx = _mm512_loadu_ps(dt + r * xstride + o);
      facc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a0[r]), _mm512_mul_ps(dv0, dx), facc[r]);
      facc[4 + r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a1[r]), _mm512_mul_ps(dv1, dx), facc[4 + r]);
    }
  }
  for (long long l = 8 * nf + 2 * ((nb - 8 * nf + 1) / 2); l < pfl; l++) ls_prefetch_line(pf, pfl, l);
  __m512 v[16];
  for (int j = 0; j < 8; j++) { v[j] = facc[j]; v[8 + j] = _mm512_setzero_ps(); }
  float sums[16];
  _mm512_storeu_ps(sums, ls_hsum16(v));  /* facc[j]'s sum in lane 4 (j % 4) + j / 4 */
  for (int r = 0; r < nr; r++) { out0[r] = sums[4 * r]; out1[r] = sums[4 * r + 1]; }
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
#endif  /* __CUDACC_RTC__ */
