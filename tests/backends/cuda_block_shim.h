// Runs a cuda-dialect kernel's thread-block clusters on host threads (tests only, for a kernel a
// GPU-less machine cannot run: tests/backends/test_sampler.py).  One cluster at a time, its
// blocks side by side: a std::thread per CUDA thread, __syncthreads a barrier of the block,
// ls_csync one of the cluster, warp intrinsics an exchange through a buffer between two block
// barriers (so every thread of the block must reach them, as the sampler's loops do),
// LS_SMEM a per-block instance, ls_remote the same variable in another block's instance, atomics
// std::atomic_ref.  ls_run_clusters(grid, cluster, threads, f) runs f on every (block, thread).
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>
#define LS_HOST_SHIM
#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define LS_H2F(h) ls_shim_h2f(h)
#define LS_SHIM_BLOCKS 16    // the most blocks a cluster
#define LS_SHIM_THREADS 1024  // the most threads a block
struct ls_dim { unsigned int x, y, z; };
static thread_local ls_dim threadIdx, blockIdx;
static thread_local unsigned ls_shim_rank;  // this thread's block in its cluster
static std::barrier<>* ls_shim_block_bar[LS_SHIM_BLOCKS];
static std::barrier<>* ls_shim_cluster_bar;
static void __syncthreads() { ls_shim_block_bar[ls_shim_rank]->arrive_and_wait(); }
static unsigned ls_rank() { return ls_shim_rank; }
static void ls_csync() { ls_shim_cluster_bar->arrive_and_wait(); }
static size_t ls_shim_smem_bytes;  // the size of a block's LS_SMEM instance
template <class T> static T& ls_shim_smem() {
  static T store[LS_SHIM_BLOCKS];
  ls_shim_smem_bytes = sizeof(T);
  return store[ls_shim_rank];
}
#define LS_SMEM(T, name) T& name = ls_shim_smem<T>()
template <class T> static T* ls_remote(T* p, unsigned rank) {
  return (T*)((char*)p + ((long long)rank - (long long)ls_shim_rank) * (long long)ls_shim_smem_bytes);
}
static unsigned long long ls_xbuf[LS_SHIM_BLOCKS][LS_SHIM_THREADS];
// every lane's value, after every thread of the block has published its own
template <class T> static unsigned long long ls_shim_publish(T v) {
  static_assert(sizeof(T) <= 8);
  unsigned long long w = 0; std::memcpy(&w, &v, sizeof(T));
  ls_xbuf[ls_shim_rank][threadIdx.x] = w;
  __syncthreads();
  return w;
}
template <class T> static T ls_shim_lane(unsigned lane) {
  T r; unsigned long long w = ls_xbuf[ls_shim_rank][(threadIdx.x & ~31u) + lane]; std::memcpy(&r, &w, sizeof(T));
  return r;
}
template <class T> static T __shfl_xor_sync(unsigned, T v, int o) {
  ls_shim_publish(v);
  const T r = ls_shim_lane<T>((threadIdx.x & 31) ^ o);
  __syncthreads();
  return r;
}
template <class T> static T __shfl_up_sync(unsigned, T v, int o) {
  ls_shim_publish(v);
  const unsigned lane = threadIdx.x & 31;
  const T r = lane >= (unsigned)o ? ls_shim_lane<T>(lane - o) : v;
  __syncthreads();
  return r;
}
static unsigned __match_any_sync(unsigned, unsigned v) {
  ls_shim_publish(v);
  unsigned m = 0;
  for (unsigned l = 0; l < 32; l++) m |= (ls_shim_lane<unsigned>(l) == v ? 1u : 0u) << l;
  __syncthreads();
  return m;
}
static unsigned __reduce_add_sync(unsigned mask, unsigned v) {
  ls_shim_publish(v);
  unsigned s = 0;
  for (unsigned l = 0; l < 32; l++) if (mask >> l & 1u) s += ls_shim_lane<unsigned>(l);
  __syncthreads();
  return s;
}
static int __ffs(unsigned v) { return v ? __builtin_ctz(v) + 1 : 0; }
static float __uint_as_float(unsigned int u) { float f; std::memcpy(&f, &u, 4); return f; }
static unsigned int __float_as_uint(float f) { unsigned int u; std::memcpy(&u, &f, 4); return u; }
static float ls_shim_h2f(unsigned short h) { _Float16 v; std::memcpy(&v, &h, 2); return (float)v; }
template <class T> static T atomicAdd(T* p, T v) { return std::atomic_ref<T>(*p).fetch_add(v); }
using std::exp;

template <class F> static void ls_run_clusters(long long grid, int cluster, int threads, F f) {
  for (long long c = 0; c < grid / cluster; c++) {
    std::barrier<> cbar(cluster * threads);
    std::vector<std::barrier<>*> bars;
    for (int q = 0; q < cluster; q++) bars.push_back(ls_shim_block_bar[q] = new std::barrier<>(threads));
    ls_shim_cluster_bar = &cbar;
    std::vector<std::thread> ts;
    for (int q = 0; q < cluster; q++)
      for (int t = 0; t < threads; t++)
        ts.emplace_back([=] {
          threadIdx = {(unsigned)t, 0, 0};
          blockIdx = {(unsigned)(c * cluster + q), 0, 0};
          ls_shim_rank = (unsigned)q;
          f();
        });
    for (auto& th : ts) th.join();
    for (auto* b : bars) delete b;
  }
}
