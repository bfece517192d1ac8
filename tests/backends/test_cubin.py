"""backends/cuda/cubin.py: the registers and local frame ptxas gave each kernel, read from the
cubin NVRTC makes here (no GPU), against what the kernels' own bounds force."""

import pytest

from lightspeed.backends.cuda.cubin import KernelResources, kernel_resources
from tests.backends.harness import nvrtc_or_skip

SOURCE = r'''
extern "C" __global__ void __launch_bounds__(128, 3) bounded(float* a, const float* b) {
  float x[64];
  for (int i = 0; i < 64; i++) x[i] = b[threadIdx.x * 64 + i];
  float s = 0.0f;
  for (int i = 0; i < 64; i++) for (int j = 0; j < 64; j++) s += x[i] * x[j] * b[j];
  a[threadIdx.x] = s;
}
extern "C" __global__ void twice(float* a, const float* b) { a[threadIdx.x] = 2.0f * b[threadIdx.x]; }
extern "C" __global__ void indexed(float* a, const int* k) {
  float x[256];
  for (int i = 0; i < 256; i++) x[i] = a[i * blockDim.x + threadIdx.x] * (float)i;
  x[k[threadIdx.x] & 255] = 0.0f;  // a store at an index known only at run time: the array in local memory
  float s = 0.0f;
  for (int i = 0; i < 256; i++) s += x[i] * (float)(i + 1);
  a[threadIdx.x] = s;
}
'''


def test_registers_and_frames_of_a_cubins_kernels():
    nvrtc = nvrtc_or_skip()
    got = kernel_resources(nvrtc.compile_cubin(SOURCE, "sm_90"))
    assert set(got) == {"bounded", "twice", "indexed"}
    # 3 blocks of 128 threads within 65536 registers: at most 170, allocated in 8s -> 168
    assert 0 < got["bounded"].registers <= 168
    assert got["bounded"].blocks_per_sm(128) >= 3
    assert 0 < got["twice"].registers <= 16 and got["twice"].frame_bytes == 0
    assert got["indexed"].frame_bytes >= 256 * 4


def test_blocks_per_sm_by_hand():
    # 254 registers -> 256 a thread (units of 256 a warp: 8192 a warp), 4 warps a block: 2 blocks
    assert KernelResources(254, 0).blocks_per_sm(128) == 2
    assert KernelResources(168, 0).blocks_per_sm(128) == 3
    assert KernelResources(32, 0).blocks_per_sm(256) == 8


def test_not_a_cubin_is_refused():
    with pytest.raises(ValueError, match="ELF"):
        kernel_resources(b"not an image")
