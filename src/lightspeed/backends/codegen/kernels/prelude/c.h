
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
