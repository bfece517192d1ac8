// Tensor-core products (kernels/matmul_mma.py): D = A B + C for one warp's 16 x 16 (A, row-major)
// times 16 x 8 (B, k-major) of 16-bit floats into 16 x 8 float32 sums, as PTX's
// mma.sync.aligned.m16n8k16 with float32 accumulation (sm_80 and later).  a: the four 32-bit
// registers of A's fragment, b: B's two, c: the thread's four sums, updated in place.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define LS_MMA_ASM(T)                                                                                  \
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." T "." T ".f32 {%0, %1, %2, %3}, "              \
               "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"                                          \
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                         \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))
#else
#define LS_MMA_ASM(T)
#endif
static LS_INLINE void ls_mma_bf16(float* c, const unsigned int* a, const unsigned int* b) { LS_MMA_ASM("bf16"); }
static LS_INLINE void ls_mma_f16(float* c, const unsigned int* a, const unsigned int* b) { LS_MMA_ASM("f16"); }
// Asynchronous copies (sm_80+): 16 bytes from global to shared memory without passing through
// registers, `bytes` of them read (the rest zero-filled: 0 for a chunk past the operand's
// edge, whose source must still be a valid address), grouped by commit and waited for as groups.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
static LS_INLINE void ls_cp_async16(void* smem, const void* gmem, int bytes) {
  const unsigned int s = (unsigned int)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(bytes) : "memory");
}
static LS_INLINE void ls_cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
#define LS_CP_WAIT(N) asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory")
#else
static LS_INLINE void ls_cp_async16(void* smem, const void* gmem, int bytes) {}
static LS_INLINE void ls_cp_commit() {}
#define LS_CP_WAIT(N)
#endif
// Four 8 x 8 matrices of 16-bit elements from shared memory into a warp's fragments (sm_75+):
// thread t gives the address of row t % 8 of matrix t / 8 (16 bytes, 16-byte aligned) and
// receives r[q] = row t / 4, columns 2 (t % 4) and the next of matrix q -- the mma fragments'
// layout, one instruction where 32-bit shared loads take four.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
static LS_INLINE void ls_ldmatrix_x4(unsigned int* r, const void* smem) {
  const unsigned int s = (unsigned int)__cvta_generic_to_shared(smem);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
// The same with each 8 x 8 matrix transposed: thread t receives rows 2 (t % 4) and the next at
// column t / 4 -- a B fragment read from a row-major [k][n] tile (attention's values, keys down).
static LS_INLINE void ls_ldmatrix_x4_trans(unsigned int* r, const void* smem) {
  const unsigned int s = (unsigned int)__cvta_generic_to_shared(smem);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
#else
static LS_INLINE void ls_ldmatrix_x4(unsigned int* r, const void* smem) {}
static LS_INLINE void ls_ldmatrix_x4_trans(unsigned int* r, const void* smem) {}
#endif
// Two floats rounded to nearest even into one register of two 16-bit floats (lo in the low half),
// one cvt instruction (sm_80+; the attention tiles' probabilities, which become A fragments):
// the same bits as ls_f2bf / ls_f2h for every non-NaN value.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
static LS_INLINE unsigned int ls_pack2_bf16(float lo, float hi) {
  unsigned int r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
static LS_INLINE unsigned int ls_pack2_f16(float lo, float hi) {
  unsigned int r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
// 2^x by the special-function unit alone (relative error ~2^-22, results below 2^-126 flushed
// to 0): the tiles' probabilities, rounded to 16 bits right after, need no more
static LS_INLINE float ls_exp2_fast(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
#else
static LS_INLINE unsigned int ls_pack2_bf16(float lo, float hi) { return 0u; }
static LS_INLINE unsigned int ls_pack2_f16(float lo, float hi) { return 0u; }
static LS_INLINE float ls_exp2_fast(float x) { return 0.0f; }
#endif
