// Runs a cuda-dialect kernel's blocks on host threads, one block at a time (tests only, for a
// kernel a GPU-less machine cannot run: tests/backends/test_sampler.py): a std::thread per CUDA
// thread, __syncthreads a barrier, a warp shuffle an exchange through a buffer between two
// barriers (so every thread of the block must reach it, as the sampler's reductions do),
// __shared__ arrays function statics, atomics std::atomic_ref.  ls_run_blocks(grid, threads, f)
// runs f on every (block, thread).
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>
#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static
#define LS_H2F(h) ls_shim_h2f(h)
struct ls_dim { unsigned int x, y, z; };
static thread_local ls_dim threadIdx, blockIdx;
static std::barrier<>* ls_bar;
static void __syncthreads() { ls_bar->arrive_and_wait(); }
static unsigned long long ls_xbuf[4096];
template <class T> static T __shfl_xor_sync(unsigned, T v, int o) {
  static_assert(sizeof(T) <= 8);
  unsigned long long w = 0; std::memcpy(&w, &v, sizeof(T));
  ls_xbuf[threadIdx.x] = w;
  __syncthreads();
  w = ls_xbuf[threadIdx.x ^ o];
  __syncthreads();
  T r; std::memcpy(&r, &w, sizeof(T)); return r;
}
static float __uint_as_float(unsigned int u) { float f; std::memcpy(&f, &u, 4); return f; }
static unsigned int __float_as_uint(float f) { unsigned int u; std::memcpy(&u, &f, 4); return u; }
static float ls_shim_h2f(unsigned short h) { _Float16 v; std::memcpy(&v, &h, 2); return (float)v; }
template <class T> static T atomicAdd(T* p, T v) { return std::atomic_ref<T>(*p).fetch_add(v); }
static unsigned long long atomicMax(unsigned long long* p, unsigned long long v) {
  std::atomic_ref<unsigned long long> a(*p); unsigned long long o = a.load();
  while (o < v && !a.compare_exchange_weak(o, v)) {}
  return o;
}
using std::exp;

template <class F> static void ls_run_blocks(long long grid, int threads, F f) {
  for (long long b = 0; b < grid; b++) {
    std::barrier<> bar(threads);
    ls_bar = &bar;
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; t++)
      ts.emplace_back([=] { threadIdx = {(unsigned)t, 0, 0}; blockIdx = {(unsigned)b, 0, 0}; f(); });
    for (auto& th : ts) th.join();
  }
}
