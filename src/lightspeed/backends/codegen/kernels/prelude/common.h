
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
  if (v - v != v - v) return 0;  /* NaN and +-inf give 0, as the reference (inf - inf is NaN) */
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
