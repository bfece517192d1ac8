"""The token sampler: rows of logits sampled with temperature, top-k and top-p as the host
sampler (``models.generate.sample_token``) samples them, in the c and cuda dialects, so that a
sampled token needs neither the logits on the host nor numpy's sort of the vocabulary.

Per row, with ``params`` (temperature T > 0, top_k k, top_p p, the uniform draw u) and the logits
x as float64 z = x / T (the host's arithmetic):

1. top-k (0 < k < V): the k-th largest value by a radix select over the logits' order keys (passes
   of 11, 11 and 10 bits); tokens below it drop out (ties with it
   stay, as HF's TopK).  z = x / T keeps x's order, so the select runs on x.
2. top-p (p < 1): the host sorts ascending (stable) and drops the prefix whose cumulative
   probability is at most 1 - p, never the most likely token; here the prefix's end is found by
   mass histograms over the same keys, then among the tokens tied at that key in index order.
3. the draw: the first token (index order) whose cumulative weight exp(z - max z) exceeds u times
   the total -- ``searchsorted(cumsum, u * total, "right")``, in float64, the sums in index order.

The result equals the host sampler's for the same u except where a sum lands within rounding of a
boundary (sums associate differently here: histogram bins, the GPU's fixed-point weights; exp may
differ from numpy's in the last bit).  The CPU kernel keeps a V-sized float64 scratch per row; the
GPU kernel a V-sized row of fixed-point weights, a row sampled by a cluster of blocks."""

from __future__ import annotations

from typing import Any

import numpy as np

from ....errors import InputError

__all__ = ["SAMPLE_KERNEL", "SAMPLE_THREADS", "SAMPLE_CLUSTER", "LOGIT_CODES", "sampler_source", "checked_params"]

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

# the cuda dialect: a row is sampled by a cluster of SAMPLE_CLUSTER blocks of SAMPLE_THREADS
# threads (sm_90; one block elsewhere), each block owning a contiguous part of the vocabulary.
# Weights are fixed point: w = round(exp(z - max z) * 2^(63 - bits(V))), kept in a scratch row, so
# every sum is an exact integer whatever order it is added in (histograms by shared atomics, block
# and cluster sums, the ordered prefixes); float64 differs from it by ~1e-9 of the total at most.
# Radix passes of 11, 11 and 10 bits; a histogram add first sums a warp's lanes of one bin
# (``__match_any_sync``), so a few crowded bins do not serialise the warp.
SAMPLE_THREADS = 512
SAMPLE_CLUSTER = 8

_CUDA = r"""
#define LS_NT @THREADS@   /* threads a block: a power of two, 64 to 1024 */
#define LS_NC @CLUSTER@   /* blocks a row: a thread-block cluster when > 1 (sm_90) */
#define LS_NB 2048        /* histogram bins: 11 bits a radix pass */
#define LS_ALL 0xffffffffu
typedef unsigned int ls_u32;
typedef unsigned long long ls_u64;
#ifndef LS_HOST_SHIM  /* (a host harness, tests/backends/cuda_block_shim.h, defines these itself) */
#define LS_SMEM(T, name) __shared__ T name
#if LS_NC > 1
__device__ __forceinline__ unsigned ls_rank() {
  unsigned r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r;
}
/* every thread of the cluster; shared memory written before it is visible to the cluster after it */
__device__ __forceinline__ void ls_csync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
/* the same shared variable in block ``rank`` of the cluster (distributed shared memory) */
template <class T> __device__ __forceinline__ T* ls_remote(T* p, unsigned rank) {
  ls_u64 r; asm volatile("mapa.u64 %0, %1, %2;" : "=l"(r) : "l"(p), "r"(rank)); return (T*)r;
}
#else
__device__ __forceinline__ unsigned ls_rank() { return 0; }
__device__ __forceinline__ void ls_csync() { __syncthreads(); }
template <class T> __device__ __forceinline__ T* ls_remote(T* p, unsigned) { return p; }
#endif
#endif
__device__ __forceinline__ ls_u32 ls_skey(float x) {  /* a float's order key (-inf lowest) */
  const ls_u32 b = __float_as_uint(x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float ls_logit(const void* x, int dtype, long long i) {
  if (dtype == 0) return ((const float*)x)[i];
  const unsigned short h = ((const unsigned short*)x)[i];
  if (dtype == 1) return __uint_as_float((ls_u32)h << 16);
#ifdef LS_H2F
  return LS_H2F(h);
#else
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
#endif
}
struct ls_smem {
  ls_u64 hist[LS_NB];    /* this block's histogram of a pass (read by the cluster) */
  ls_u64 tot[LS_NB];     /* the cluster's, summed in rank order */
  ls_u64 warp[LS_NT / 32];
  ls_u64 part;           /* this block's sum or maximum (read by the cluster) */
  long long found;       /* an index found in this block's part of the row, else V */
  ls_u64 bin, before;    /* a chosen bin and the sum of the bins before it */
};
/* the block's sum (max: its maximum) of v, every thread getting it */
__device__ ls_u64 ls_block_reduce(ls_u64 v, bool max, ls_smem& S) {
  for (int o = 16; o > 0; o >>= 1) {
    const ls_u64 w = __shfl_xor_sync(LS_ALL, v, o);
    v = max ? (w > v ? w : v) : v + w;
  }
  __syncthreads();
  if ((threadIdx.x & 31) == 0) S.warp[threadIdx.x >> 5] = v;
  __syncthreads();
  ls_u64 t = S.warp[0];
  for (int q = 1; q < LS_NT / 32; q++) t = max ? (S.warp[q] > t ? S.warp[q] : t) : t + S.warp[q];
  return t;
}
/* the cluster's sum (max: maximum) of the blocks' values b; *before: the sum of the lower ranks' */
__device__ ls_u64 ls_cluster_reduce(ls_u64 b, bool max, ls_smem& S, ls_u64* before) {
  __syncthreads();
  if (threadIdx.x == 0) S.part = b;
  ls_csync();
  const unsigned me = ls_rank();
  ls_u64 t = 0, pre = 0;
  for (unsigned q = 0; q < LS_NC; q++) {
    const ls_u64 s = *ls_remote(&S.part, q);
    if (q < me) pre += s;
    t = max ? (s > t ? s : t) : t + s;
  }
  ls_csync();  /* every block has read S.part before any writes it again */
  if (before) *before = pre;
  return t;
}
/* the block's exclusive prefix sum of v in thread order; *total: the block's sum */
__device__ ls_u64 ls_block_scan(ls_u64 v, ls_smem& S, ls_u64* total) {
  const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
  ls_u64 s = v;
  for (int o = 1; o < 32; o <<= 1) {
    const ls_u64 y = __shfl_up_sync(LS_ALL, s, o);
    if (lane >= o) s += y;
  }
  __syncthreads();
  if (lane == 31) S.warp[wi] = s;
  __syncthreads();
  ls_u64 pre = 0, t = 0;
  for (int q = 0; q < LS_NT / 32; q++) { if (q < wi) pre += S.warp[q]; t += S.warp[q]; }
  *total = t;
  return pre + s - v;
}
/* adds wt to bin b of this block's histogram (b == LS_NB: nothing), the lanes of a warp with the
   same bin summed first; wt below 2^63 with every warp's lanes of a bin summing below 2^63 */
__device__ __forceinline__ void ls_hist_add(ls_u32 b, ls_u64 wt, ls_smem& S) {
  const unsigned peers = __match_any_sync(LS_ALL, b);
  /* three parts (32 lanes' 16-bit parts stay under 2^21; the high parts sum below 2^31) */
  const ls_u64 hi = __reduce_add_sync(peers, (unsigned)(wt >> 32));
  const ls_u64 mid = __reduce_add_sync(peers, (unsigned)(wt >> 16) & 0xffffu);
  const ls_u64 lo = __reduce_add_sync(peers, (unsigned)wt & 0xffffu);
  if (b < LS_NB && (int)(threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&S.hist[b], (hi << 32) + (mid << 16) + lo);
}
__device__ void ls_hist_clear(ls_smem& S) {
  for (int b = threadIdx.x; b < LS_NB; b += LS_NT) S.hist[b] = 0;
  __syncthreads();
}
/* S.tot: the cluster's histogram (every block's S.hist, summed in rank order) */
__device__ void ls_hist_gather(ls_smem& S) {
  __syncthreads();
  ls_csync();
  for (int b = threadIdx.x; b < LS_NB; b += LS_NT) {
    ls_u64 t = 0;
    for (unsigned q = 0; q < LS_NC; q++) t += ls_remote(S.hist, q)[b];
    S.tot[b] = t;
  }
  ls_csync();  /* every block has read S.hist before any clears it */
}
/* walking the first nb bins of S.tot upwards (down: downwards), the first bin where the sum so
   far passes L (or the last bin): S.bin, and S.before the sum of the bins walked before it */
__device__ void ls_cross(ls_u64 L, int nb, bool down, ls_smem& S) {
  const int per = LS_NB / LS_NT, first = threadIdx.x * per;
  ls_u64 mine = 0;
  for (int j = first; j < first + per && j < nb; j++) mine += S.tot[down ? nb - 1 - j : j];
  ls_u64 total;
  const ls_u64 pre = ls_block_scan(mine, S, &total);
  if (first <= nb - 1 && nb - 1 < first + per) { S.bin = down ? 0 : nb - 1; S.before = total - S.tot[S.bin]; }
  __syncthreads();
  if (pre <= L && pre + mine > L) {
    ls_u64 c = pre;
    for (int j = first; j < first + per && j < nb; j++) {
      const int b = down ? nb - 1 - j : j;
      if (c + S.tot[b] > L) { S.bin = b; S.before = c; break; }
      c += S.tot[b];
    }
  }
  __syncthreads();
}
/* the first index i of the row where the sum of f over indices <= i passes limit(total), with
   total the sum of f over the row; V if none.  Each thread sums a contiguous chunk [lo, hi) of its
   block's part, so the crossing is in one thread's chunk, which it walks again. */
template <class F, class G>
__device__ long long ls_first_past(F f, G limit, long long lo, long long hi, long long V, ls_smem& S) {
  ls_u64 mine = 0;
  for (long long i = lo; i < hi; i++) mine += f(i);
  ls_u64 btotal, base;
  const ls_u64 pre = ls_block_scan(mine, S, &btotal);
  if (threadIdx.x == 0) S.found = V;
  const ls_u64 total = ls_cluster_reduce(btotal, false, S, &base);
  const ls_u64 L = limit(total), start = base + pre;
  if (start <= L && start + mine > L) {
    ls_u64 c = start;
    for (long long i = lo; i < hi; i++) {
      c += f(i);
      if (c > L) { S.found = i; break; }
    }
  }
  ls_csync();
  long long found = V;
  for (unsigned q = 0; q < LS_NC; q++) {
    const long long g = *ls_remote(&S.found, q);
    found = g < found ? g : found;
  }
  ls_csync();
  return found;
}
extern "C" __global__ void __launch_bounds__(LS_NT) ls_sample_rows(const void* logits, int dtype, long long rows,
    long long stride, long long V, const double* params, long long* out, ls_u64* scratch) {
  LS_SMEM(ls_smem, S);
  const long long r = blockIdx.x / LS_NC;  /* a cluster's blocks are consecutive: one row */
  if (r >= rows) return;
  const unsigned me = ls_rank();
  const int tid = threadIdx.x;
  const void* x = (const char*)logits + (size_t)(r * stride) * (dtype == 0 ? 4 : 2);
  ls_u64* w = scratch + r * V;
  const double T = params[4 * r], p = params[4 * r + 2], u = params[4 * r + 3];
  const long long k = (long long)params[4 * r + 1];
  /* this block's part of the row, and this thread's chunk of it (the ordered sums) */
  const long long part = (V + LS_NC - 1) / LS_NC;
  const long long b0 = me * part < V ? me * part : V, b1 = b0 + part < V ? b0 + part : V;
  const long long chunk = (b1 - b0 + LS_NT - 1) / LS_NT;
  const long long lo = b0 + tid * chunk < b1 ? b0 + tid * chunk : b1, hi = lo + chunk < b1 ? lo + chunk : b1;
  /* the largest key, and the highest index holding it (the last in ascending stable order) */
  ls_u64 m = 0;
  for (long long i = b0 + tid; i < b1; i += LS_NT) {
    const ls_u64 c = ((ls_u64)ls_skey(ls_logit(x, dtype, i)) << 32) | (ls_u64)(i + 1);
    m = c > m ? c : m;
  }
  m = ls_cluster_reduce(ls_block_reduce(m, true, S), true, S, 0);
  const ls_u32 top = (ls_u32)(m >> 32);
  const long long last = (long long)(m & 0xffffffffu) - 1;
  /* top-k: the k-th largest key with multiplicity, from the top bits down */
  ls_u32 kth = 0;
  if (k > 0 && k < V) {
    ls_u32 prefix = 0, mask = 0;
    long long above = 0;
    for (int pass = 0; pass < 3; pass++) {
      const int sh = pass == 0 ? 21 : pass == 1 ? 10 : 0, nb = pass == 2 ? 1024 : 2048;
      ls_hist_clear(S);
      for (long long i0 = b0; i0 < b1; i0 += LS_NT) {  /* the same trip count in every thread */
        const long long i = i0 + tid;
        ls_u32 bin = LS_NB;
        if (i < b1) {
          const ls_u32 key = ls_skey(ls_logit(x, dtype, i));
          if ((key & mask) == prefix) bin = (key >> sh) & (ls_u32)(nb - 1);
        }
        ls_hist_add(bin, 1, S);
      }
      ls_hist_gather(S);
      ls_cross((ls_u64)(k - 1 - above), nb, true, S);
      above += (long long)S.before;
      prefix |= (ls_u32)S.bin << sh;
      mask |= (ls_u32)(nb - 1) << sh;
    }
    kth = prefix;
  }
  /* the weights: fixed point exp(z - max z) of the tokens top-k keeps, 0 for the rest */
  const float xmax = __uint_as_float((top & 0x80000000u) ? (top & 0x7fffffffu) : ~top);
  const double zmax = T == 1.0 ? (double)xmax : (double)xmax / T;
  int vbits = 1;
  while (vbits < 62 && (1LL << vbits) < V) vbits++;
  const double scale = (double)(1ULL << (63 - vbits));
  ls_u64 wsum = 0;
  for (long long i = b0 + tid; i < b1; i += LS_NT) {
    const float xi = ls_logit(x, dtype, i);
    const double e = ls_skey(xi) >= kth ? exp((T == 1.0 ? (double)xi : (double)xi / T) - zmax) : 0.0;
    const ls_u64 wi = e > 0.0 ? (ls_u64)(e * scale + 0.5) : 0;
    w[i] = wi;
    wsum += wi;
  }
  /* the total (its barriers also order the weights' writes before any thread reads them) */
  const ls_u64 W = ls_cluster_reduce(ls_block_reduce(wsum, false, S), false, S, 0);
  ls_u32 bkey = 0;
  long long upto = 0;
  if (p < 1.0) {  /* drop the ascending prefix of cumulative probability <= 1 - p */
    const ls_u64 L = (ls_u64)((1.0 - p) * (double)W);
    ls_u64 cum = 0;
    ls_u32 prefix = 0, mask = 0;
    for (int pass = 0; pass < 3; pass++) {  /* the key where the cumulative sum passes L */
      const int sh = pass == 0 ? 21 : pass == 1 ? 10 : 0, nb = pass == 2 ? 1024 : 2048;
      ls_hist_clear(S);
      for (long long i0 = b0; i0 < b1; i0 += LS_NT) {
        const long long i = i0 + tid;
        ls_u32 bin = LS_NB;
        ls_u64 wi = 0;
        if (i < b1) {
          const ls_u32 key = ls_skey(ls_logit(x, dtype, i));
          wi = w[i];
          if (wi > 0 && (key & mask) == prefix) bin = (key >> sh) & (ls_u32)(nb - 1);
          else wi = 0;
        }
        ls_hist_add(bin, wi, S);
      }
      ls_hist_gather(S);
      ls_cross(L - cum, nb, false, S);
      cum += S.before;
      prefix |= (ls_u32)S.bin << sh;
      mask |= (ls_u32)(nb - 1) << sh;
    }
    bkey = prefix;
    /* the tokens tied at bkey, in index order: those while the sum stays <= L drop out too */
    upto = ls_first_past(
        [&](long long i) -> ls_u64 { return ls_skey(ls_logit(x, dtype, i)) == bkey ? w[i] : 0; },
        [&](ls_u64) -> ls_u64 { return L - cum; }, lo, hi, V, S);
  }
  /* the draw: the first token whose cumulative weight passes u times the total */
  const long long pick = ls_first_past(
      [&](long long i) -> ls_u64 {
        if (p < 1.0 && i != last) {
          const ls_u32 key = ls_skey(ls_logit(x, dtype, i));
          if (key < bkey || (key == bkey && i < upto)) return 0;
        }
        return w[i];
      },
      [&](ls_u64 total) -> ls_u64 { return (ls_u64)(u * (double)total); }, lo, hi, V, S);
  if (me == 0 && tid == 0) out[r] = pick < V ? pick : V - 1;
}
"""


def sampler_source(dialect: str, threads: int = SAMPLE_THREADS, cluster: int = SAMPLE_CLUSTER) -> str:
    """The sampler's source.  c: ``ls_sample_rows(logits, dtype, rows, stride, V, params, out)``,
    a function the host calls.  cuda: the kernel ``ls_sample_rows(..., out, scratch)`` (scratch:
    rows x V 64-bit words), launched as ``rows * cluster`` blocks of ``threads`` (a power of two,
    64 to 1024) in clusters of ``cluster`` (1 to 8; above 1 the GPU must be sm_90 or later)."""
    if dialect == "c":
        return _C
    if dialect == "cuda":
        if threads & (threads - 1) or not 64 <= threads <= 1024:
            raise ValueError(f"the cuda sampler's block is a power of two of 64 to 1024 threads, got {threads}")
        if not 1 <= cluster <= 8:
            raise ValueError(f"the cuda sampler's cluster is 1 to 8 blocks, got {cluster}")
        return _CUDA.replace("@THREADS@", str(threads)).replace("@CLUSTER@", str(cluster))
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
