"""The token sampler: rows of logits sampled with temperature, top-k and top-p as the host
sampler (``models.generate.sample_token``) samples them, in the c and cuda dialects, so that a
sampled token needs neither the logits on the host nor numpy's sort of the vocabulary.

Per row, with ``params`` (temperature T > 0, top_k k, top_p p, the uniform draw u) and the logits
x as float64 z = x / T (the host's arithmetic):

1. top-k (0 < k < V): the k-th largest value by a radix select over the logits' order keys (two
   passes of 16 bits on the CPU, four of 8 bits on a GPU); tokens below it drop out (ties with it
   stay, as HF's TopK).  z = x / T keeps x's order, so the select runs on x.
2. top-p (p < 1): the host sorts ascending (stable) and drops the prefix whose cumulative
   probability is at most 1 - p, never the most likely token; here the prefix's end is found by
   mass histograms over the same keys, then among the tokens tied at that key in index order.
3. the draw: the first token (index order) whose cumulative weight exp(z - max z) exceeds u times
   the total -- ``searchsorted(cumsum, u * total, "right")``, in float64, the sums in index order.

The result equals the host sampler's for the same u except where a sum lands within rounding of a
boundary (sums associate differently here: histogram bins, a GPU's block partials; exp may differ
from numpy's in the last bit).  The CPU kernel keeps a V-sized float64 scratch per row; the GPU
kernel is one block per row."""

from __future__ import annotations

from typing import Any

import numpy as np

from ....errors import InputError

__all__ = ["SAMPLE_KERNEL", "SAMPLE_THREADS", "LOGIT_CODES", "sampler_source", "checked_params"]

SAMPLE_KERNEL = "ls_sample_rows"
# the logits' dtype, as the kernels' ``dtype`` argument
LOGIT_CODES = {"float32": 0, "bfloat16": 1, "float16": 2}

_C = r"""
#include <math.h>
#include <stdlib.h>
#include <string.h>
typedef unsigned int ls_u32;
/* a float's order key: unsigned, in the floats' order (-inf lowest) */
static inline ls_u32 ls_skey(float x) {
  ls_u32 b; memcpy(&b, &x, 4);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
static inline float ls_logit(const void* x, int dtype, long long i) {
  if (dtype == 0) return ((const float*)x)[i];
  unsigned short h = ((const unsigned short*)x)[i];
  if (dtype == 1) { ls_u32 b = (ls_u32)h << 16; float f; memcpy(&f, &b, 4); return f; }
  _Float16 v; memcpy(&v, &h, 2); return (float)v;
}
/* radix passes over the 32-bit keys: 11, 11 and 10 bits (histograms of 2048 bins stay in cache) */
static const int ls_shift[3] = {21, 10, 0}, ls_bits[3] = {11, 11, 10};
/* one row (see the module's docstring); e: V doubles, h: 2048 doubles of scratch */
static long long ls_sample_row(const void* x, int dtype, long long V, const double* prm, double* e, double* h) {
  const double T = prm[0], p = prm[2], u = prm[3];
  const long long k = (long long)prm[1];
  long long* cnt = (long long*)h;
  ls_u32 kth = 0, top = 0;
  long long last = 0;  /* the most likely token last in ascending stable order: the highest index of the max */
  for (long long i = 0; i < V; i++) {
    const ls_u32 key = ls_skey(ls_logit(x, dtype, i));
    if (key >= top) { top = key; last = i; }
  }
  if (k > 0 && k < V) {  /* the k-th largest key, with multiplicity, from the top bits down */
    ls_u32 prefix = 0, mask = 0;
    long long above = 0;
    for (int pass = 0; pass < 3; pass++) {
      const int sh = ls_shift[pass], nb = 1 << ls_bits[pass];
      memset(cnt, 0, (size_t)nb * sizeof(long long));
      for (long long i = 0; i < V; i++) {
        const ls_u32 key = ls_skey(ls_logit(x, dtype, i));
        if ((key & mask) == prefix) cnt[(key >> sh) & (ls_u32)(nb - 1)]++;
      }
      long long b = nb - 1;
      for (; b > 0 && above + cnt[b] < k; b--) above += cnt[b];
      prefix |= (ls_u32)b << sh;
      mask |= (ls_u32)(nb - 1) << sh;
    }
    kth = prefix;
  }
  float xmax;
  { const ls_u32 b = (top & 0x80000000u) ? (top & 0x7fffffffu) : ~top; memcpy(&xmax, &b, 4); }
  const double zmax = T == 1.0 ? (double)xmax : (double)xmax / T;
  for (long long i = 0; i < V; i++) {  /* e: exp(z - max z) of the kept tokens, 0 for the rest */
    const float xi = ls_logit(x, dtype, i);
    const double z = T == 1.0 ? (double)xi : (double)xi / T;
    e[i] = ls_skey(xi) >= kth ? exp(z - zmax) : 0.0;
  }
  if (p < 1.0) {  /* drop the ascending prefix of cumulative probability <= 1 - p */
    double total = 0.0;
    for (long long i = 0; i < V; i++) total += e[i];
    const double lim = 1.0 - p;
    double cum = 0.0;
    ls_u32 prefix = 0, mask = 0;
    for (int pass = 0; pass < 3; pass++) {  /* the key where the cumulative sum passes 1 - p */
      const int sh = ls_shift[pass], nb = 1 << ls_bits[pass];
      memset(h, 0, (size_t)nb * sizeof(double));
      for (long long i = 0; i < V; i++) {
        if (e[i] <= 0.0) continue;
        const ls_u32 key = ls_skey(ls_logit(x, dtype, i));
        if ((key & mask) == prefix) h[(key >> sh) & (ls_u32)(nb - 1)] += e[i] / total;
      }
      long long b = 0;
      for (; b < nb - 1 && cum + h[b] <= lim; b++) cum += h[b];
      prefix |= (ls_u32)b << sh;
      mask |= (ls_u32)(nb - 1) << sh;
    }
    const ls_u32 bkey = prefix;
    long long upto = 0;  /* tokens at bkey below this index drop out too */
    for (long long i = 0; i < V; i++) {
      if (e[i] <= 0.0 || ls_skey(ls_logit(x, dtype, i)) != bkey) continue;
      if (cum + e[i] / total > lim) break;
      cum += e[i] / total;
      upto = i + 1;
    }
    for (long long i = 0; i < V; i++) {
      if (e[i] <= 0.0 || i == last) continue;
      const ls_u32 key = ls_skey(ls_logit(x, dtype, i));
      if (key < bkey || (key == bkey && i < upto)) e[i] = 0.0;
    }
  }
  double total = 0.0;
  for (long long i = 0; i < V; i++) total += e[i];
  const double target = u * total;
  double c = 0.0;
  for (long long i = 0; i < V; i++) {
    c += e[i];
    if (c > target) return i;
  }
  return V - 1;
}
/* rows of logits (``stride`` elements apart) -> one token id each; params: 4 doubles per row.
   Each thread keeps its scratch (V + 2048 doubles) from call to call. */
static _Thread_local double* ls_scratch;
static _Thread_local long long ls_scratch_n;
void ls_sample_rows(const void* logits, int dtype, long long rows, long long stride, long long V,
                    const double* params, long long* out) {
  #pragma omp parallel for schedule(dynamic, 1) if (rows > 1)
  for (long long r = 0; r < rows; r++) {
    if (ls_scratch_n < V + 2048) {
      free(ls_scratch);
      ls_scratch = (double*)malloc((size_t)(V + 2048) * sizeof(double));
      ls_scratch_n = ls_scratch ? V + 2048 : 0;
    }
    const size_t es = dtype == 0 ? 4 : 2;
    out[r] = ls_scratch ? ls_sample_row((const char*)logits + (size_t)(r * stride) * es, dtype, V, params + 4 * r,
                                        ls_scratch, ls_scratch + V)
                        : -1;
  }
}
"""

# the cuda dialect: one block of SAMPLE_THREADS threads per row.  Radix passes of 8 bits over
# shared histograms; the ordered sums (top-p's ties, the draw) by contiguous chunks of indices,
# one per thread, their partial sums scanned in shared memory, then walked by the thread whose
# chunk holds the crossing.
SAMPLE_THREADS = 512

_CUDA = r"""
#define LS_NT @THREADS@  /* a multiple of 32, at least 256 */
typedef unsigned int ls_u32;
__device__ __forceinline__ ls_u32 ls_skey(float x) {
  const ls_u32 b = __float_as_uint(x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float ls_logit(const void* x, int dtype, long long i) {
  if (dtype == 0) return ((const float*)x)[i];
  const unsigned short h = ((const unsigned short*)x)[i];
  if (dtype == 1) return __uint_as_float((ls_u32)h << 16);
#ifdef LS_H2F  /* a host harness running this kernel (tests) */
  return LS_H2F(h);
#else
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
#endif
}
/* the block's sum of v (every thread gets it) */
__device__ double ls_bsum(double v, double* sh) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
  __syncthreads();
  double t = 0.0;
  for (int w = 0; w < LS_NT / 32; w++) t += sh[w];
  __syncthreads();
  return t;
}
/* the block's minimum of v */
__device__ long long ls_bmin(long long v, long long* sh) {
  for (int o = 16; o > 0; o >>= 1) { const long long w = __shfl_xor_sync(0xffffffffu, v, o); v = w < v ? w : v; }
  __syncthreads();
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
  __syncthreads();
  long long t = sh[0];
  for (int w = 1; w < LS_NT / 32; w++) t = sh[w] < t ? sh[w] : t;
  __syncthreads();
  return t;
}
/* the sum of the chunks before this thread's (sh: LS_NT + 1 doubles; *all: every chunk's, summed
   in the same order) */
__device__ double ls_before(double mine, double* sh, double* all) {
  __syncthreads();
  sh[threadIdx.x] = mine;
  __syncthreads();
  if (threadIdx.x == 0) {
    double c = 0.0;
    for (int t = 0; t < LS_NT; t++) { const double v = sh[t]; sh[t] = c; c += v; }
    sh[LS_NT] = c;
  }
  __syncthreads();
  const double b = sh[threadIdx.x];
  *all = sh[LS_NT];
  __syncthreads();
  return b;
}
extern "C" __global__ void __launch_bounds__(LS_NT) ls_sample_rows(const void* logits, int dtype, long long rows,
    long long stride, long long V, const double* params, long long* out) {
  /* per-warp histograms (counts or masses), summed into warp 0's row after each pass */
  __shared__ double hist[LS_NT / 32][256];
  __shared__ unsigned long long best;
  __shared__ double scan[LS_NT + 1];
  __shared__ long long lsh[LS_NT / 32];
  __shared__ ls_u32 chosen;
  __shared__ double before;
  const long long r = blockIdx.x;
  if (r >= rows) return;
  const void* x = (const char*)logits + (size_t)(r * stride) * (dtype == 0 ? 4 : 2);
  const double T = params[4 * r], p = params[4 * r + 2], u = params[4 * r + 3];
  const long long k = (long long)params[4 * r + 1];
  const int tid = threadIdx.x;
  const long long chunk = (V + LS_NT - 1) / LS_NT, lo = tid * chunk, hi = lo + chunk < V ? lo + chunk : V;
  /* the largest key, and the highest index holding it (the last in ascending stable order) */
  ls_u32 top = 0; long long last = -1;
  for (long long i = lo; i < hi; i++) {
    const ls_u32 key = ls_skey(ls_logit(x, dtype, i));
    if (key >= top) { top = key; last = i; }
  }
  {
    unsigned long long m = ((unsigned long long)top << 32) | (unsigned long long)(last + 1);
    for (int o = 16; o > 0; o >>= 1) {
      const unsigned long long w = __shfl_xor_sync(0xffffffffu, m, o);
      m = w > m ? w : m;
    }
    if (tid == 0) best = 0;
    __syncthreads();
    if ((tid & 31) == 0) atomicMax(&best, m);
    __syncthreads();
    m = best;
    __syncthreads();
    top = (ls_u32)(m >> 32); last = (long long)(m & 0xffffffffu) - 1;
  }
  /* top-k: the k-th largest key, 8 bits a pass from the top */
  ls_u32 kth = 0;
  if (k > 0 && k < V) {
    ls_u32 prefix = 0, mask = 0; long long above = 0;
    unsigned int* cnt = (unsigned int*)hist[tid >> 5];
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int b = tid; b < (LS_NT / 32) * 256; b += LS_NT) ((unsigned int*)hist)[b + (b / 256) * 256] = 0u;
      __syncthreads();
      for (long long i = tid; i < V; i += LS_NT) {
        const ls_u32 key = ls_skey(ls_logit(x, dtype, i));
        if ((key & mask) == prefix) atomicAdd(&cnt[(key >> shift) & 255u], 1u);
      }
      __syncthreads();
      unsigned long long c = 0;  /* bin tid's count (LS_NT >= 256), written once every count is read */
      if (tid < 256)
        for (int w = 0; w < LS_NT / 32; w++) c += ((unsigned int*)hist[w])[tid];
      __syncthreads();
      if (tid < 256) hist[0][tid] = (double)c;  /* exact: at most V < 2^53 */
      __syncthreads();
      if (tid == 0) {
        int b = 255;
        for (; b > 0 && above + (long long)hist[0][b] < k; b--) above += (long long)hist[0][b];
        chosen = (ls_u32)b;
      }
      __syncthreads();
      prefix |= chosen << shift; mask |= 255u << shift;
    }
    kth = prefix;
  }
  const float xmax = __uint_as_float((top & 0x80000000u) ? (top & 0x7fffffffu) : ~top);
  const double zmax = T == 1.0 ? (double)xmax : (double)xmax / T;
#define LS_E(i, key, xi) ((key) >= kth ? exp((T == 1.0 ? (double)(xi) : (double)(xi) / T) - zmax) : 0.0)
  ls_u32 bkey = 0; long long upto = 0;
  if (p < 1.0) {  /* the ascending prefix of cumulative probability <= 1 - p */
    double part = 0.0;
    for (long long i = lo; i < hi; i++) { const float xi = ls_logit(x, dtype, i); part += LS_E(i, ls_skey(xi), xi); }
    const double total = ls_bsum(part, scan);
    const double lim = 1.0 - p;
    double* wmass = hist[tid >> 5];
    double cum = 0.0;
    ls_u32 prefix = 0, mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int b = tid; b < (LS_NT / 32) * 256; b += LS_NT) hist[b / 256][b % 256] = 0.0;
      __syncthreads();
      for (long long i = tid; i < V; i += LS_NT) {
        const float xi = ls_logit(x, dtype, i);
        const ls_u32 key = ls_skey(xi);
        const double e = LS_E(i, key, xi);
        if (e > 0.0 && (key & mask) == prefix) atomicAdd(&wmass[(key >> shift) & 255u], e / total);
      }
      __syncthreads();
      for (int b = tid; b < 256; b += LS_NT) {
        double c = 0.0;
        for (int w = 0; w < LS_NT / 32; w++) c += hist[w][b];
        hist[0][b] = c;
      }
      __syncthreads();
      if (tid == 0) {
        int b = 0;
        for (; b < 255 && cum + hist[0][b] <= lim; b++) cum += hist[0][b];
        chosen = (ls_u32)b; before = cum;
      }
      __syncthreads();
      prefix |= chosen << shift; mask |= 255u << shift;
      cum = before;
      __syncthreads();
    }
    bkey = prefix;
    /* the tokens tied at bkey in index order: those while the sum stays <= 1 - p drop out too */
    double tied = 0.0;
    for (long long i = lo; i < hi; i++) {
      const float xi = ls_logit(x, dtype, i);
      const ls_u32 key = ls_skey(xi);
      if (key == bkey) tied += LS_E(i, key, xi) / total;
    }
    double all;
    double c = cum + ls_before(tied, scan, &all);
    long long cut = V;
    for (long long i = lo; i < hi; i++) {
      const float xi = ls_logit(x, dtype, i);
      const ls_u32 key = ls_skey(xi);
      if (key != bkey) continue;
      const double e = LS_E(i, key, xi);
      if (e <= 0.0) continue;
      if (c + e / total > lim) { cut = i; break; }
      c += e / total;
    }
    upto = ls_bmin(cut, lsh);
  }
  /* the draw: the first token whose cumulative weight exceeds u times the total */
#define LS_W(i, key, xi) \
  ((p < 1.0 && (i) != last && ((key) < bkey || ((key) == bkey && (i) < upto))) ? 0.0 : LS_E(i, key, xi))
  double part = 0.0;
  for (long long i = lo; i < hi; i++) { const float xi = ls_logit(x, dtype, i); part += LS_W(i, ls_skey(xi), xi); }
  double total;
  const double start = ls_before(part, scan, &total);
  const double target = u * total;
  long long pick = V - 1;
  if (start + part > target) {
    double c = start;
    for (long long i = lo; i < hi; i++) {
      const float xi = ls_logit(x, dtype, i);
      c += LS_W(i, ls_skey(xi), xi);
      if (c > target) { pick = i; break; }
    }
  }
  pick = ls_bmin(pick, lsh);
  if (tid == 0) out[r] = pick;
}
"""


def sampler_source(dialect: str, threads: int = SAMPLE_THREADS) -> str:
    """The sampler's source: ``ls_sample_rows(logits, dtype, rows, stride, V, params, out)``
    (c: a function the host calls; cuda: a kernel of one block of ``threads`` per row, a multiple
    of 32 of at least 256)."""
    if dialect == "c":
        return _C
    if dialect == "cuda":
        if threads % 32 or threads < 256:
            raise ValueError(f"the cuda sampler's block is a multiple of 32 of at least 256 threads, got {threads}")
        return _CUDA.replace("@THREADS@", str(threads))
    raise ValueError(f"the token sampler has no {dialect!r} dialect")


def checked_params(rows: int, params: Any) -> np.ndarray:
    """A sampler call's ``params`` as the kernels read them: [rows, 4] float64, contiguous
    (temperature > 0, top_k, top_p, the draw u in [0, 1)); errors name what is wrong."""
    prm = np.ascontiguousarray(params, dtype=np.float64)
    if prm.shape != (rows, 4):
        raise InputError(f"sampler: params must be [{rows}, 4] (temperature, top_k, top_p, u), got {list(prm.shape)}")
    if not (prm[:, 0] > 0).all() or not ((prm[:, 3] >= 0) & (prm[:, 3] < 1)).all():
        raise InputError("sampler: temperature must be > 0 and u in [0, 1)")
    return prm
