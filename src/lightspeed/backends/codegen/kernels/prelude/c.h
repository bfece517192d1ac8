
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
