"""The CUDA driver, through NVIDIA's ``cuda-python`` bindings (``cuda.bindings.driver``).

A thin layer: one context per process (the device's primary context, which PyTorch shares), a
caching device allocator, copies, modules and launches, streams, events and CUDA graphs.  Every
driver call's result is checked; a failure raises :class:`CudaError` naming the call and the
driver's error.  Nothing here is imported until the cuda backend is used.
"""

from __future__ import annotations

import collections
import ctypes
import math
import os
import threading
import weakref
from typing import Any

import numpy as np

from ...errors import LightspeedError

__all__ = ["CudaError", "Device", "DeviceArray", "device", "available", "unavailable_reason"]


class CudaError(LightspeedError):
    """A CUDA driver call failed, or no usable GPU/driver/library is present."""


_drv: Any = None
_device: Device | None = None
_lock = threading.Lock()
_bound = threading.local()  # whether this thread has made the primary context current
_reason: str | None = None


def bindings():
    global _drv
    if _drv is None:
        try:
            from cuda.bindings import driver as drv
        except ImportError as e:
            raise CudaError("the cuda backend needs NVIDIA's cuda-python bindings: pip install 'lightspeed[cuda]' "
                            f"({e})") from None
        _drv = drv
    return _drv


def check(result: Any, what: str) -> Any:
    """The values of a driver call's result tuple, or CudaError."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    drv = bindings()
    if err != drv.CUresult.CUDA_SUCCESS:
        name = drv.cuGetErrorName(err)
        label = name[1].decode() if name[0] == drv.CUresult.CUDA_SUCCESS else str(err)
        raise CudaError(f"CUDA driver call {what} failed: {label}")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else tuple(rest)


class Device:
    """GPU 0 of this process: its primary context, properties and a caching allocator."""

    def __init__(self) -> None:
        drv = bindings()
        # kernels loaded when their module is (at compile time), not at their first launch (the
        # CUDA 12 default, lazy, put every kernel's load into a cached program's first call)
        os.environ.setdefault("CUDA_MODULE_LOADING", "EAGER")
        try:
            check(drv.cuInit(0), "cuInit")
        except RuntimeError as e:  # the bindings could not load libcuda
            raise CudaError(f"no CUDA driver: {e}") from None
        count = check(drv.cuDeviceGetCount(), "cuDeviceGetCount")
        if count < 1:
            raise CudaError("no CUDA device is visible")
        self.handle = check(drv.cuDeviceGet(0), "cuDeviceGet")
        self.context = check(drv.cuDevicePrimaryCtxRetain(self.handle), "cuDevicePrimaryCtxRetain")
        attr = drv.CUdevice_attribute
        self.major = check(drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.handle),
                           "cuDeviceGetAttribute")
        self.minor = check(drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.handle),
                           "cuDeviceGetAttribute")
        self.sm_count = check(drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, self.handle),
                              "cuDeviceGetAttribute")
        raw = check(drv.cuDeviceGetName(128, self.handle), "cuDeviceGetName")
        self.name = raw.split(b"\0")[0].decode()
        self.arch = f"sm_{self.major}{self.minor}"
        self._free: dict[int, list[int]] = {}
        self._pinned_free: dict[int, list[int]] = {}
        self._alloc_lock = threading.Lock()
        # blocks whose owners were collected, waiting to join the free lists.  A finalizer only
        # appends here (atomic, no lock): the collector can run a finalizer on a thread that
        # holds _alloc_lock (any allocation inside the locked region may collect), and taking
        # the lock there deadlocked (cuda conformance cases hung in alloc, twenty-second session)
        self._released: collections.deque[tuple[dict[int, list[int]], int, int]] = collections.deque()
        # bytes held from the driver (in use or cached for reuse) and their peak: this process's
        # device memory beside the context's own (benchmarks report the peak)
        self.held_bytes = self.peak_bytes = 0
        self._modules: dict[str, Any] = {}
        self.bind()

    def bind(self) -> None:
        """Make the primary context current on this thread (each thread needs it once)."""
        check(bindings().cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    # ------------------------------------------------------------------ memory
    def alloc(self, nbytes: int) -> Block:
        """Device memory of at least ``nbytes`` (rounded up to a size class and reused)."""
        size = _size_class(max(1, nbytes))
        with self._alloc_lock:
            self._collect_released()
            free = self._free.get(size)
            ptr = free.pop() if free else None
        if ptr is None:
            self.bind()
            try:
                ptr = int(check(bindings().cuMemAlloc(size), "cuMemAlloc"))
            except CudaError:
                self.trim()
                ptr = int(check(bindings().cuMemAlloc(size), f"cuMemAlloc({size} bytes)"))
            with self._alloc_lock:
                self.held_bytes += size
                self.peak_bytes = max(self.peak_bytes, self.held_bytes)
        return Block(self, ptr, size)

    def pinned(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """A host array in page-locked memory (a device-to-host copy into it runs asynchronously;
        into pageable memory the copy waits for the stream), reused from a cache of freed ones."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        size = _size_class(max(1, nbytes))
        with self._alloc_lock:
            self._collect_released()
            free = self._pinned_free.get(size)
            ptr = free.pop() if free else None
        if ptr is None:
            self.bind()
            ptr = int(check(bindings().cuMemHostAlloc(size, 0), f"cuMemHostAlloc({size} bytes)"))
        raw = (ctypes.c_uint8 * size).from_address(ptr)
        weakref.finalize(raw, self._released.append, (self._pinned_free, ptr, size))
        return np.frombuffer(raw, np.uint8, nbytes).view(dtype).reshape(shape)

    def _collect_released(self) -> None:
        """Move the finalized blocks onto their free lists (the caller holds _alloc_lock)."""
        while self._released:
            free, ptr, size = self._released.popleft()
            free.setdefault(size, []).append(ptr)

    def trim(self) -> None:
        """Return every cached free block to the driver."""
        with self._alloc_lock:
            self._collect_released()
            blocks = [(p, size) for size, ps in self._free.items() for p in ps]
            self._free.clear()
            self.held_bytes -= sum(size for _, size in blocks)
        for p, _ in blocks:
            check(bindings().cuMemFree(p), "cuMemFree")

    # ------------------------------------------------------------------ copies
    def upload(self, ptr: int, host: np.ndarray, stream: Any) -> None:
        host = _c_order(host)
        if host.nbytes:
            check(bindings().cuMemcpyHtoDAsync(ptr, host.ctypes.data, host.nbytes, stream), "cuMemcpyHtoDAsync")

    def download(self, host: np.ndarray, ptr: int, stream: Any) -> None:
        if host.nbytes:
            check(bindings().cuMemcpyDtoHAsync(host.ctypes.data, ptr, host.nbytes, stream), "cuMemcpyDtoHAsync")

    def memset(self, ptr: int, nbytes: int, stream: Any) -> None:
        """Zero ``nbytes`` bytes at ``ptr``, queued on ``stream``."""
        if nbytes:
            check(bindings().cuMemsetD8Async(ptr, 0, nbytes, stream), "cuMemsetD8Async")

    def copy(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        if nbytes:
            check(bindings().cuMemcpyDtoDAsync(dst, src, nbytes, stream), "cuMemcpyDtoDAsync")

    # ------------------------------------------------------------------ streams, events, graphs
    def stream(self) -> Any:
        drv = bindings()
        return check(drv.cuStreamCreate(drv.CUstream_flags.CU_STREAM_NON_BLOCKING), "cuStreamCreate")

    def sync(self, stream: Any) -> None:
        check(bindings().cuStreamSynchronize(stream), "cuStreamSynchronize")

    def wait_event(self, event: Any) -> None:
        """Block until the work before ``event``'s record has run."""
        check(bindings().cuEventSynchronize(event), "cuEventSynchronize")

    def event(self) -> Any:
        return check(bindings().cuEventCreate(0), "cuEventCreate")

    def record(self, event: Any, stream: Any) -> None:
        check(bindings().cuEventRecord(event, stream), "cuEventRecord")

    def elapsed(self, start: Any, end: Any) -> float:
        """Seconds between two recorded events (waits for the second)."""
        check(bindings().cuEventSynchronize(end), "cuEventSynchronize")
        return check(bindings().cuEventElapsedTime(start, end), "cuEventElapsedTime") / 1e3

    def begin_capture(self, stream: Any) -> None:
        drv = bindings()
        mode = drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        check(drv.cuStreamBeginCapture(stream, mode), "cuStreamBeginCapture")

    def end_capture(self, stream: Any) -> Any:
        """The captured work as an instantiated, launchable graph."""
        drv = bindings()
        graph = check(drv.cuStreamEndCapture(stream), "cuStreamEndCapture")
        try:
            return check(drv.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        finally:
            drv.cuGraphDestroy(graph)

    def launch_graph(self, graph_exec: Any, stream: Any) -> None:
        check(bindings().cuGraphLaunch(graph_exec, stream), "cuGraphLaunch")

    # ------------------------------------------------------------------ kernels
    def module(self, image: bytes, key: str) -> Any:
        """A loaded module (cubin), once per key."""
        mod = self._modules.get(key)
        if mod is None:
            self.bind()
            mod = self._modules[key] = check(bindings().cuModuleLoadData(image), "cuModuleLoadData")
        return mod

    def function(self, module: Any, name: str) -> Any:
        return check(bindings().cuModuleGetFunction(module, name.encode()), f"cuModuleGetFunction({name})")

    def launch(self, fn: Any, grid: tuple[int, int, int], block: tuple[int, int, int], args: tuple[int, ...],
               stream: Any, shared_bytes: int = 0, cluster: tuple[int, int, int] = (1, 1, 1),
               overlap: bool = False, types: tuple | None = None) -> None:
        """Launch ``fn(T, ints...)``: the first argument is a device pointer, the rest ints (or
        ``args`` of the ctypes ``types``); with
        ``shared_bytes`` of dynamic shared memory per block and, when ``cluster`` is not (1, 1, 1),
        in thread-block clusters of that shape (sm_90: ``cuLaunchKernelEx``).  ``overlap``: a
        programmatic dependent launch (sm_90): the kernel may be scheduled while the previous one
        on the stream still runs, and waits for it at its ``griddepcontrol.wait`` (every generated
        kernel's first statement), so only the launch latency overlaps, never the work."""
        drv = bindings()
        types = types or (ctypes.c_void_p, *([ctypes.c_int] * (len(args) - 1)))
        if tuple(cluster) == (1, 1, 1) and not overlap:
            check(drv.cuLaunchKernel(fn, *grid, *block, shared_bytes, stream, (args, types), 0), "cuLaunchKernel")
            return
        config = drv.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = grid
        config.blockDimX, config.blockDimY, config.blockDimZ = block
        config.sharedMemBytes = shared_bytes
        config.hStream = stream
        attrs = []
        if tuple(cluster) != (1, 1, 1):
            attr = drv.CUlaunchAttribute()
            attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster
            attrs.append(attr)
        if overlap:
            attr = drv.CUlaunchAttribute()
            attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            attr.value.programmaticStreamSerializationAllowed = 1
            attrs.append(attr)
        config.attrs = attrs
        config.numAttrs = len(attrs)
        check(drv.cuLaunchKernelEx(config, fn, (args, types), 0), "cuLaunchKernelEx")

    def allow_shared(self, fn: Any, shared_bytes: int) -> None:
        """Let ``fn`` take ``shared_bytes`` of dynamic shared memory per block (past 48 KiB a
        kernel must opt in)."""
        drv = bindings()
        attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        check(drv.cuFuncSetAttribute(fn, attr, shared_bytes), "cuFuncSetAttribute")


def _c_order(a: Any) -> np.ndarray:
    """``a`` as a C-ordered array of its own shape (np.ascontiguousarray turns a 0-d array into
    shape (1,): a scalar input then failed its rank check)."""
    a = np.asarray(a)
    return a if a.flags.c_contiguous else a.copy(order="C")


def _size_class(n: int) -> int:
    """Sizes round up to 512 bytes, then to a quarter of the power of two above (waste <= 25%)."""
    if n <= 512:
        return 512
    p = 1 << (n - 1).bit_length()
    q = p // 4
    return ((n + q - 1) // q) * q


class Block:
    """An allocation: returned to the device's cache when the last reference goes."""

    __slots__ = ("ptr", "size", "__weakref__")

    def __init__(self, dev: Device, ptr: int, size: int):
        self.ptr, self.size = ptr, size
        weakref.finalize(self, dev._released.append, (dev._free, ptr, size))


class DeviceArray:
    """An array in device memory: ``ptr``, ``shape``, ``dtype`` (numpy), row-major.  Holds its
    memory (or the object that owns it, e.g. a torch tensor) alive."""

    __slots__ = ("ptr", "shape", "dtype", "owner", "__weakref__")

    def __init__(self, ptr: int, shape: tuple[int, ...], dtype: np.dtype, owner: Any):
        self.ptr, self.shape, self.dtype, self.owner = int(ptr), tuple(int(d) for d in shape), np.dtype(dtype), owner

    def rows(self, start: int, count: int) -> DeviceArray:
        """Rows ``start .. start + count`` (checked by the caller) as a view holding this array:
        no conversions (a generation's cache rows are 64 views on a 16-layer first token's path)."""
        out = DeviceArray.__new__(DeviceArray)
        out.ptr = self.ptr + int(start) * (self.nbytes // max(1, self.shape[0]))
        out.shape, out.dtype, out.owner = (int(count), *self.shape[1:]), self.dtype, self
        return out

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @staticmethod
    def empty(shape: tuple[int, ...], dtype: np.dtype) -> DeviceArray:
        dev = device()
        n = math.prod(int(d) for d in shape) * np.dtype(dtype).itemsize  # (np.prod: ~3 us a call)
        block = dev.alloc(n)
        return DeviceArray(block.ptr, shape, dtype, block)

    @staticmethod
    def from_host(host: np.ndarray, stream: Any = None, wait: bool = True) -> DeviceArray:
        """A device copy of ``host``; ``wait=False``: the copy is queued on ``stream`` (the host
        array may change at once: the driver stages a pageable source before it returns)."""
        host = _c_order(host)
        out = DeviceArray.empty(host.shape, host.dtype)
        dev = device()
        dev.upload(out.ptr, host, stream or 0)
        if wait:
            dev.sync(stream or 0)
        return out

    def numpy(self, stream: Any = None) -> np.ndarray:
        """A host copy.  Without ``stream``, after all work on the device: the legacy default stream
        does not wait for the non-blocking streams programs run on (a copy there could read an
        output before the kernel that writes it has run)."""
        out = np.empty(self.shape, self.dtype)
        dev = device()
        if stream is None:
            check(bindings().cuCtxSynchronize(), "cuCtxSynchronize")
        dev.download(out, self.ptr, stream or 0)
        dev.sync(stream or 0)
        return out

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}, ptr={self.ptr:#x})"


def device() -> Device:
    """The process's GPU (created on first use); CudaError when there is none."""
    global _device
    if _device is None:
        with _lock:
            if _device is None:
                _device = Device()
    if not getattr(_bound, "yes", False):  # once a thread: ~10 cuCtxSetCurrent calls a prefill call were
        _device.bind()                     # on the first token's path (the context stays current)
        _bound.yes = True
    return _device


def available() -> bool:
    """Whether a GPU, its driver and the bindings are usable here (never raises)."""
    global _reason
    if _reason is not None:  # looked once and found none: Graph.compile asks on every compile
        return False
    try:
        device()
        return True
    except Exception as e:  # noqa: BLE001 - any failure means "not here"
        _reason = str(e) or type(e).__name__
        return False


def unavailable_reason() -> str | None:
    return _reason
