
#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#define __restrict__ restrict
#define LS_INLINE inline __attribute__((always_inline))
/* The word before a kernel's table T holds the address of the call's error word: a gather that
   meets an index outside its data sets it, and the executor raises IndexOutOfRange after the call
   (the reference and cpu backends raise at once). */
static inline void ls_oob(const long long* T) { *(volatile long long*)(T[-1]) = 1; }
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
/* The attention kernel's scores (kernels/attention.py, the grouped kernel): keys kb, kb + stride, ...
   (float rows) dotted with q over n elements (a multiple of 8), each as 8 partial sums in order over
   the 8-element chunks (one fused multiply-add each), then ((p0 + p1) + (p2 + p3)) + ((p4 + p5) +
   (p6 + p7)): one key's loop, bit for bit, with several keys' chains in flight together. */
static LS_INLINE float ls_sum8(ls_v8 v) { return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7])); }
static LS_INLINE void ls_scores4(const float* q, const float* kb, int n, int stride, float* out) {
  ls_v8 p0 = {0}, p1 = {0}, p2 = {0}, p3 = {0};
  for (int c = 0; c < n; c += 8) {
    const ls_v8 qv = ls_ld8(q + c);
    p0 += qv * ls_ld8(kb + c); p1 += qv * ls_ld8(kb + stride + c);
    p2 += qv * ls_ld8(kb + 2 * stride + c); p3 += qv * ls_ld8(kb + 3 * stride + c);
  }
  out[0] = ls_sum8(p0); out[1] = ls_sum8(p1); out[2] = ls_sum8(p2); out[3] = ls_sum8(p3);
}
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
/* The row matmul's register tile (kernels/matmul_rows.py): acc[r][q] for r < R rows of A and the
   64 columns of B from b = sum over l, in order, of a[r * sam + l * sak] * b[l * sbk + q], one
   fused multiply-add per term (the scalar loop's result, bit for bit, whatever R is: a row's sums
   do not depend on the rows beside it).  R rows x LS_NV vectors of columns live in registers
   (4 x 4 of AVX-512's 32; 4 x 2 of AVX2's 16), each B vector loaded once for the R rows.  The B
   vectors are named variables, not an array: gcc kept an array of them (and so the sums) in
   memory, 3x slower. */
#if defined(__AVX512F__)
#include <immintrin.h>
#define LS_VW 16
#define LS_NV 4
#define LS_EACH_V(X) X(0) X(1) X(2) X(3)
typedef float ls_vw __attribute__((vector_size(64)));
static LS_INLINE ls_vw ls_vfma(ls_vw a, ls_vw b, ls_vw c) {
  return (ls_vw)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
}
static LS_INLINE ls_vw ls_vset(float x) { return (ls_vw)_mm512_set1_ps(x); }
#elif defined(__FMA__) && defined(__AVX__)
#include <immintrin.h>
#define LS_VW 8
#define LS_NV 2
#define LS_EACH_V(X) X(0) X(1)
typedef float ls_vw __attribute__((vector_size(32)));
static LS_INLINE ls_vw ls_vfma(ls_vw a, ls_vw b, ls_vw c) {
  return (ls_vw)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
}
static LS_INLINE ls_vw ls_vset(float x) { return (ls_vw)_mm256_set1_ps(x); }
#else
#define LS_VW 8
#define LS_NV 2
#define LS_EACH_V(X) X(0) X(1)
typedef float ls_vw __attribute__((vector_size(32)));
static LS_INLINE ls_vw ls_vfma(ls_vw a, ls_vw b, ls_vw c) {
  ls_vw r;
  for (int q = 0; q < LS_VW; q++) r[q] = __builtin_fmaf(a[q], b[q], c[q]);
  return r;
}
static LS_INLINE ls_vw ls_vset(float x) {
  ls_vw r;
  for (int q = 0; q < LS_VW; q++) r[q] = x;
  return r;
}
#endif
/* The attention kernel's scores of a transposed key block kt [n][16] (16 keys, a key a lane; n a
   multiple of 8) against two query rows q, q1 [n]: lane b of the partial sums P_u = sum over the
   chunks i of q[8i + u] * kt[8i + u][b], in order, fused, then ((P0 + P1) + (P2 + P3)) + ((P4 + P5) +
   (P6 + P7)): ls_scores4's arithmetic, key by key, bit for bit, a vector of keys at a time; each load
   of the block serves both rows (16 independent chains). */
static LS_INLINE ls_vw ls_ldw(const float* p) { ls_vw v; memcpy(&v, p, sizeof(ls_vw)); return v; }
#define LS_KT_FMA2(u) { const ls_vw k##u = ls_ldw(k + (u) * 16); \
  p##u = ls_vfma(ls_vset(q[c + (u)]), k##u, p##u); r##u = ls_vfma(ls_vset(q1[c + (u)]), k##u, r##u); }
static LS_INLINE void ls_scores_t16x2(const float* restrict q, const float* restrict q1, const float* restrict kt,
                                      int n, float* restrict out, float* restrict out1) {
  for (int h = 0; h < 16; h += LS_VW) {
    ls_vw p0 = ls_vset(0.0f), p1 = p0, p2 = p0, p3 = p0, p4 = p0, p5 = p0, p6 = p0, p7 = p0;
    ls_vw r0 = p0, r1 = p0, r2 = p0, r3 = p0, r4 = p0, r5 = p0, r6 = p0, r7 = p0;
    for (int c = 0; c < n; c += 8) {
      const float* k = kt + c * 16 + h;
      LS_KT_FMA2(0) LS_KT_FMA2(1) LS_KT_FMA2(2) LS_KT_FMA2(3) LS_KT_FMA2(4) LS_KT_FMA2(5) LS_KT_FMA2(6) LS_KT_FMA2(7)
    }
    const ls_vw s = ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7));
    const ls_vw s1 = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7));
    memcpy(out + h, &s, sizeof(ls_vw));
    memcpy(out1 + h, &s1, sizeof(ls_vw));
  }
}
/* The attention kernel's maximum and sum of a key block's 16 values, as trees (x[i] with x[i + 8],
   then 4 apart, 2, 1): a few vector steps instead of a chain of 16 dependent ones. */
static LS_INLINE float ls_max16(const float* restrict x) {
  float a[8], b[4];
  for (int i = 0; i < 8; i++) a[i] = x[i] > x[i + 8] ? x[i] : x[i + 8];
  for (int i = 0; i < 4; i++) b[i] = a[i] > a[i + 4] ? a[i] : a[i + 4];
  const float c0 = b[0] > b[2] ? b[0] : b[2], c1 = b[1] > b[3] ? b[1] : b[3];
  return c0 > c1 ? c0 : c1;
}
static LS_INLINE float ls_sum16(const float* restrict x) {
  float a[8], b[4];
  for (int i = 0; i < 8; i++) a[i] = x[i] + x[i + 8];
  for (int i = 0; i < 4; i++) b[i] = a[i] + a[i + 4];
  return (b[0] + b[2]) + (b[1] + b[3]);
}
/* The attention kernel's weighted values of a key block for two rows: a0 = a0 * s0 + the sum over the
   16 keys b, in order, of p0[b] * vb[b] (fused; vb [16][hv]), a1 likewise: the rows' LS_NV vectors
   of columns each, 2 x LS_NV independent chains in flight; columns past the vectors' multiple one
   at a time, with the same operations. */
#define LS_PV_INIT(v) ls_vw c0##v, c1##v; memcpy(&c0##v, a0 + j + (v) * LS_VW, sizeof(ls_vw)); \
  memcpy(&c1##v, a1 + j + (v) * LS_VW, sizeof(ls_vw)); c0##v = c0##v * ls_vset(s0); c1##v = c1##v * ls_vset(s1);
#define LS_PV_FMA(v) { ls_vw x; memcpy(&x, vb + b * hv + j + (v) * LS_VW, sizeof(ls_vw)); \
  c0##v = ls_vfma(w0, x, c0##v); c1##v = ls_vfma(w1, x, c1##v); }
#define LS_PV_STORE(v) memcpy(a0 + j + (v) * LS_VW, &c0##v, sizeof(ls_vw)); memcpy(a1 + j + (v) * LS_VW, &c1##v, sizeof(ls_vw));
static LS_INLINE void ls_pv16x2(float* restrict a0, float* restrict a1, const float* restrict p0,
                                const float* restrict p1, const float s0, const float s1,
                                const float* restrict vb, const int hv) {
  int j = 0;
  for (; j + LS_VW * LS_NV <= hv; j += LS_VW * LS_NV) {
    LS_EACH_V(LS_PV_INIT)
    for (int b = 0; b < 16; b++) {
      const ls_vw w0 = ls_vset(p0[b]), w1 = ls_vset(p1[b]);
      LS_EACH_V(LS_PV_FMA)
    }
    LS_EACH_V(LS_PV_STORE)
  }
  for (; j < hv; j++) {
    float c0 = a0[j] * s0, c1 = a1[j] * s1;
    for (int b = 0; b < 16; b++) { c0 = __builtin_fmaf(p0[b], vb[b * hv + j], c0); c1 = __builtin_fmaf(p1[b], vb[b * hv + j], c1); }
    a0[j] = c0; a1[j] = c1;
  }
}
#define LS_MR 4
#define LS_TILE_LOAD(v) ls_vw b##v; memcpy(&b##v, rb + (v) * LS_VW, sizeof(ls_vw));
#define LS_TILE_FMA(v) c[r][v] = ls_vfma(av, b##v, c[r][v]);
#define LS_TILE_ZERO(v) c[r][v] = ls_vset(0.0f);
#define LS_TILE_STORE(v) memcpy(&acc[r][t + (v) * LS_VW], &c[r][v], sizeof(ls_vw));
static LS_INLINE void ls_mm_tile(const int R, const long long K, const float* restrict a, const long long sam,
                                 const long long sak, const float* restrict b, const long long sbk,
                                 float acc[LS_MR][64]) {
  for (int t = 0; t < 64; t += LS_VW * LS_NV) {
    ls_vw c[LS_MR][LS_NV];
    for (int r = 0; r < R; r++) { LS_EACH_V(LS_TILE_ZERO) }
    for (long long l = 0; l < K; l++) {
      const float* rb = b + l * sbk + t;
      LS_EACH_V(LS_TILE_LOAD)
      for (int r = 0; r < R; r++) {
        const ls_vw av = ls_vset(a[r * sam + l * sak]);
        LS_EACH_V(LS_TILE_FMA)
      }
    }
    for (int r = 0; r < R; r++) { LS_EACH_V(LS_TILE_STORE) }
  }
}
