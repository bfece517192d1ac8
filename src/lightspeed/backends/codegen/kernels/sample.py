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

__all__ = ["SAMPLE_KERNEL", "LOGIT_CODES", "sampler_source"]

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
/* one row (see the module's docstring); e: V doubles, h: 65536 doubles of scratch */
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
  if (k > 0 && k < V) {  /* the k-th largest key, with multiplicity */
    memset(cnt, 0, 65536 * sizeof(long long));
    for (long long i = 0; i < V; i++) cnt[ls_skey(ls_logit(x, dtype, i)) >> 16]++;
    long long above = 0, hb = 65535;
    for (; hb > 0 && above + cnt[hb] < k; hb--) above += cnt[hb];
    memset(cnt, 0, 65536 * sizeof(long long));
    for (long long i = 0; i < V; i++) {
      const ls_u32 key = ls_skey(ls_logit(x, dtype, i));
      if ((long long)(key >> 16) == hb) cnt[key & 0xffffu]++;
    }
    long long lb = 65535;
    for (; lb > 0 && above + cnt[lb] < k; lb--) above += cnt[lb];
    kth = ((ls_u32)hb << 16) | (ls_u32)lb;
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
    memset(h, 0, 65536 * sizeof(double));
    for (long long i = 0; i < V; i++) if (e[i] > 0.0) h[ls_skey(ls_logit(x, dtype, i)) >> 16] += e[i] / total;
    long long hb = 0;
    for (; hb < 65535 && cum + h[hb] <= lim; hb++) cum += h[hb];
    memset(h, 0, 65536 * sizeof(double));
    for (long long i = 0; i < V; i++) {
      const ls_u32 key = ls_skey(ls_logit(x, dtype, i));
      if (e[i] > 0.0 && (long long)(key >> 16) == hb) h[key & 0xffffu] += e[i] / total;
    }
    long long lb = 0;
    for (; lb < 65535 && cum + h[lb] <= lim; lb++) cum += h[lb];
    const ls_u32 bkey = ((ls_u32)hb << 16) | (ls_u32)lb;
    long long upto = 0;  /* tokens at bkey below this index drop out too */
    for (long long i = 0; i < V; i++) {
      if (ls_skey(ls_logit(x, dtype, i)) != bkey || e[i] <= 0.0) continue;
      if (cum + e[i] / total > lim) break;
      cum += e[i] / total;
      upto = i + 1;
    }
    for (long long i = 0; i < V; i++) {
      const ls_u32 key = ls_skey(ls_logit(x, dtype, i));
      if (i != last && (key < bkey || (key == bkey && i < upto))) e[i] = 0.0;
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
/* rows of logits (``stride`` elements apart) -> one token id each; params: 4 doubles per row */
void ls_sample_rows(const void* logits, int dtype, long long rows, long long stride, long long V,
                    const double* params, long long* out) {
  #pragma omp parallel for schedule(dynamic, 1) if (rows > 1)
  for (long long r = 0; r < rows; r++) {
    double* e = (double*)malloc((size_t)(V + 65536) * sizeof(double));
    const size_t es = dtype == 0 ? 4 : 2;
    out[r] = e ? ls_sample_row((const char*)logits + (size_t)(r * stride) * es, dtype, V, params + 4 * r, e, e + V)
               : -1;
    free(e);
  }
}
"""


def sampler_source(dialect: str) -> str:
    """The sampler's source: ``ls_sample_rows(logits, dtype, rows, stride, V, params, out)``
    (c: a function the host calls; cuda: a kernel of one block per row)."""
    if dialect == "c":
        return _C
    raise ValueError(f"the token sampler has no {dialect!r} dialect")
