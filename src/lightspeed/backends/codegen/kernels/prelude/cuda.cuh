
#define LS_INLINE __device__ __forceinline__
// Programmatic dependent launch (sm_90): every kernel first waits until the kernel before it on
// the stream has finished and its writes are visible (so reads and writes after this line are
// ordered as with a plain launch), then lets the next kernel be scheduled.  Only the launch latency
// overlaps.  The wait must precede any early return: a kernel that ends without waiting could
// finish before its predecessor, and its successor would then wait on nothing.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define LS_KERNEL_BEGIN() do { asm volatile("griddepcontrol.wait;" ::: "memory"); \
                               asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); } while (0)
#else
#define LS_KERNEL_BEGIN() do { } while (0)
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// thread-block clusters (sm_90): this block's rank, a barrier of every thread of the cluster
// (release/acquire: shared memory written before it is visible to the cluster after it), and a
// float of another block's shared memory (distributed shared memory)
static LS_INLINE unsigned int ls_cluster_rank() {
  unsigned int r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r;
}
static LS_INLINE unsigned int ls_cluster_size() {
  unsigned int n; asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n)); return n;
}
static LS_INLINE void ls_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
static LS_INLINE unsigned int ls_cluster_addr(const void* p, unsigned int rank) {
  unsigned int a = (unsigned int)__cvta_generic_to_shared(p), r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
  return r;
}
static LS_INLINE float ls_cluster_ld(const float* p, unsigned int rank) {
  float v; asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(ls_cluster_addr(p, rank)) : "memory");
  return v;
}
// the other compute types of a reduction (kernels/region.py's cluster rows)
static LS_INLINE double ls_cluster_ld(const double* p, unsigned int rank) {
  double v; asm volatile("ld.shared::cluster.f64 %0, [%1];" : "=d"(v) : "r"(ls_cluster_addr(p, rank)) : "memory");
  return v;
}
static LS_INLINE int ls_cluster_ld(const int* p, unsigned int rank) {
  int v; asm volatile("ld.shared::cluster.s32 %0, [%1];" : "=r"(v) : "r"(ls_cluster_addr(p, rank)) : "memory");
  return v;
}
static LS_INLINE unsigned int ls_cluster_ld(const unsigned int* p, unsigned int rank) {
  unsigned int v;
  asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(v) : "r"(ls_cluster_addr(p, rank)) : "memory");
  return v;
}
static LS_INLINE long long ls_cluster_ld(const long long* p, unsigned int rank) {
  long long v; asm volatile("ld.shared::cluster.s64 %0, [%1];" : "=l"(v) : "r"(ls_cluster_addr(p, rank)) : "memory");
  return v;
}
#endif
// a weight chunk streamed from memory (LIGHTSPEED_CUDA_WEIGHT_LOADS=stream): read-only for the
// kernel's life, no L1 line allocated, 256-byte L2 fetches
static LS_INLINE uint4 ls_ldw(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
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
// an index outside a gathered tensor: the run's error word (T[-1], its address in the table's
// slot before T; the executor reads the word back behind the run and raises IndexOutOfRange)
static LS_INLINE void ls_oob(const long long* T) { *(volatile long long*)(T[-1]) = 1; }
// sum of a[q] * w[q] * b[q] over a 16-byte chunk of each (a row scaled by a weight, dotted with
// another row: the normed products, kernels/norm.py)
static LS_INLINE float ls_dot8_bf16_3(uint4 a, uint4 w, uint4 b) {
  const unsigned int x[4] = {a.x, a.y, a.z, a.w}, v[4] = {w.x, w.y, w.z, w.w}, y[4] = {b.x, b.y, b.z, b.w};
  float s = 0.0f;
  #pragma unroll
  for (int q = 0; q < 4; q++)
    s += __uint_as_float(x[q] << 16) * __uint_as_float(v[q] << 16) * __uint_as_float(y[q] << 16)
       + __uint_as_float(x[q] & 0xffff0000u) * __uint_as_float(v[q] & 0xffff0000u) * __uint_as_float(y[q] & 0xffff0000u);
  return s;
}
static LS_INLINE float ls_dot8_f16_3(uint4 a, uint4 w, uint4 b) {
  const unsigned int x[4] = {a.x, a.y, a.z, a.w}, v[4] = {w.x, w.y, w.z, w.w}, y[4] = {b.x, b.y, b.z, b.w};
  float s = 0.0f;
  #pragma unroll
  for (int q = 0; q < 4; q++)
    s += ls_h2f((unsigned short)(x[q] & 0xffffu)) * ls_h2f((unsigned short)(v[q] & 0xffffu))
           * ls_h2f((unsigned short)(y[q] & 0xffffu))
       + ls_h2f((unsigned short)(x[q] >> 16)) * ls_h2f((unsigned short)(v[q] >> 16)) * ls_h2f((unsigned short)(y[q] >> 16));
  return s;
}
static LS_INLINE float ls_dot4_f32_3(uint4 a, uint4 w, uint4 b) {
  return __uint_as_float(a.x) * __uint_as_float(w.x) * __uint_as_float(b.x)
       + __uint_as_float(a.y) * __uint_as_float(w.y) * __uint_as_float(b.y)
       + __uint_as_float(a.z) * __uint_as_float(w.z) * __uint_as_float(b.z)
       + __uint_as_float(a.w) * __uint_as_float(w.w) * __uint_as_float(b.w);
}
static LS_INLINE float ls_dot4_f32(uint4 a, uint4 b) {
  return __uint_as_float(a.x) * __uint_as_float(b.x) + __uint_as_float(a.y) * __uint_as_float(b.y)
       + __uint_as_float(a.z) * __uint_as_float(b.z) + __uint_as_float(a.w) * __uint_as_float(b.w);
}
