"""The GPU executor: kernels compiled by NVRTC for the device, launched by their launch shapes
(grid at the plan's bounds, block, dynamic shared memory, cluster) on the thread's stream, captured
once per plan as a CUDA graph and replayed; cuBLASLt calls inside the same graph.

``LIGHTSPEED_CUDA_GRAPHS=0`` launches kernels one by one instead of replaying a graph (for
debuggers and ``compute-sanitizer``).  On sm_90 and later every generated kernel is a programmatic
dependent launch (its first statement waits for the previous kernel, so the launch latency of a
kernel overlaps the tail of the one before it); ``LIGHTSPEED_CUDA_PDL=0`` launches them plainly.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...errors import IndexOutOfRange, LightspeedError
from ..codegen.kernels import KernelSpec, module_source
from ..codegen.program import Executor, Launch
from . import cublaslt as lt
from . import driver
from .driver import DeviceArray

__all__ = ["GpuExecutor", "thread_stream"]

STATIC_SHARED_LIMIT = 48 << 10  # bytes of dynamic shared memory a kernel may take without opting in
# graphs kept per run state: a program whose cuBLASLt calls take a dim (a prefill's rows) has one
# per prompt length seen lately; one whose calls are static, one per set of buffers
GRAPHS_PER_STATE = 16
# LIGHTSPEED_CUDA_PDL_SKIP=a,b: kernels whose launch kind or name contains one of these launch
# plainly (a debugging switch: which kernel's overlap with its predecessor breaks a result)
PDL_SKIP = tuple(x for x in os.environ.get("LIGHTSPEED_CUDA_PDL_SKIP", "").split(",") if x)


_local = threading.local()


def thread_stream() -> Any:
    """This thread's stream (created on first use; non-blocking, so it never waits on others')."""
    s = getattr(_local, "stream", None)
    if s is None:
        s = _local.stream = driver.device().stream()
    return s


class _State:
    """A thread's run state: the arena, the table (dims and addresses) on the host and on the
    device -- kernels get its slot 0 as T, and T[-1] holds the address of the error word a gather
    sets for an index outside its data (``ls_oob``) -- and the word's copy in page-locked memory,
    made behind every run and read where the host next waits for the device (:meth:`check`)."""

    def __init__(self, nbytes: int, slots: int):
        dev = driver.device()
        self.arena = dev.alloc(nbytes)
        self.arena_address = self.arena.ptr
        self.words = np.zeros(slots + 1, np.int64)
        self.table = self.words[1:]
        self.words_dev = dev.alloc((slots + 1) * 8)
        self.table_ptr = self.words_dev.ptr + 8
        self.error_dev = dev.alloc(8)
        dev.upload(self.error_dev.ptr, np.zeros(1, np.int64), 0)
        dev.sync(0)
        self.words[0] = self.error_dev.ptr
        self.error_host = dev.pinned((1,), np.int64)
        self.error_host[0] = 0
        # captured graphs by the library launches' table values (their pointers and dims: cuBLASLt
        # bakes both into a graph), the latest last; at most GRAPHS_PER_STATE
        self.graphs: OrderedDict[tuple, Any] = OrderedDict()
        self.grids: list | None = None
        self.library_slots: np.ndarray | None = None  # the table slots those values are read from

    def check(self, stream: Any) -> None:
        """Raise IndexOutOfRange when a run that has finished set the error word (the host has
        waited for the device since); the word is cleared for the next run."""
        if self.error_host[0]:
            self.error_host[0] = 0
            driver.device().upload(self.error_dev.ptr, np.zeros(1, np.int64), stream)
            raise IndexOutOfRange("Gather: an index is out of range for its data (an embedding id past the "
                                  "vocabulary, say)")


class GpuExecutor(Executor):
    """Kernels compiled by NVRTC for the device, run on the thread's stream as a CUDA graph."""

    name = "gpu"
    dialect = "cuda"

    def __init__(self) -> None:
        self.captures = 0  # CUDA graphs captured (tests check that dims changes capture none)
        self.use_graphs = os.environ.get("LIGHTSPEED_CUDA_GRAPHS", "1") != "0"
        self._overlap: bool | None = None  # programmatic dependent launches (decided on first use)
        self._functions: dict[str, Any] = {}
        self._plans: dict[str, lt.LtPlan] = {}
        self._lock = threading.Lock()
        self._local = threading.local()  # per thread (one stream each): the cuBLASLt workspace

    def add_library_call(self, spec: KernelSpec, plan: lt.LtPlan | lt.LtDimsPlan) -> None:
        """Register the cuBLASLt plan a library launch ``spec`` runs (its handle)."""
        with self._lock:
            self._plans[spec.name] = plan

    def compile(self, specs: list[KernelSpec], launches: list[Launch] | None = None) -> dict[str, Any]:
        """One module per kernel (compiled once per process and cached on disk): the candidates of
        a search share most kernels, so each distinct one is compiled once."""
        from .nvrtc import compile_many

        dev = driver.device()
        with self._lock:
            todo = [s for s in {s.name: s for s in specs}.values()
                    if s.name not in self._functions and s.library is None]
            clustered = [s.name for s in todo if s.launch.cluster != (1, 1, 1)]
            if clustered and dev.major < 9:
                raise LightspeedError(
                    f"kernels {', '.join(clustered[:3])} run in thread-block clusters, which need sm_90 or later "
                    f"(this GPU is {dev.arch}): set LIGHTSPEED_ATTENTION_CLUSTER=0 and LIGHTSPEED_CUDA_CLUSTER_ROWS=0")
            if todo:
                images = compile_many([module_source([s], "cuda") for s in todo], dev.arch)
                for s, image in zip(todo, images):
                    fn = dev.function(dev.module(image, s.name), s.name)
                    if s.launch.shared_bytes > STATIC_SHARED_LIMIT:
                        dev.allow_shared(fn, s.launch.shared_bytes)
                    self._functions[s.name] = fn
            # a library launch's handle is its plan
            return {s.name: self._plans[s.name] if s.library is not None else self._functions[s.name]
                    for s in specs}

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> DeviceArray:
        return DeviceArray.empty(tuple(shape), dtype)

    def finish(self) -> None:
        driver.device().sync(thread_stream())

    def upload(self, host: np.ndarray, wait: bool = True) -> DeviceArray:
        """On this thread's stream; ``wait=False`` (a call's inputs): not waited for -- the driver
        has taken the host bytes when it returns and the thread's kernels run after the copy (a
        prefill's two inputs each waited for the stream on the first token's path).  Constants
        and weights wait: another thread's stream may read them first."""
        return DeviceArray.from_host(host, thread_stream(), wait=wait)

    def address(self, array: Any) -> int:
        return array.ptr

    def owns(self, array: Any) -> bool:
        return isinstance(array, DeviceArray)

    def span(self, first: Any, shape: tuple[int, ...], dtype: np.dtype) -> DeviceArray | None:
        owner = first
        while isinstance(owner, DeviceArray):
            owner = owner.owner  # down to the allocation (a torch tensor's memory is not ours)
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        if not isinstance(owner, driver.Block) or first.ptr + nbytes > owner.ptr + owner.size:
            return None
        return DeviceArray(first.ptr, shape, dtype, first)

    def new_state(self, nbytes: int, slots: int) -> _State:
        return _State(nbytes, slots)

    @staticmethod
    def _prepare(state: _State, launches: list[Launch], bounds: Mapping[str, int]) -> tuple[Any, Any]:
        """The device and stream, with this call's table uploaded and the grids sized (once per state)."""
        dev = driver.device()
        stream = thread_stream()
        dev.upload(state.words_dev.ptr, state.words, stream)
        if state.grids is None:  # each kernel's launch shape at the plan's bounds
            state.grids = [launch.spec.launch.grid_at(bounds, dev.sm_count) for launch in launches]
        return dev, stream

    def _workspace(self) -> int:
        """This thread's cuBLASLt workspace (its stream's: calls on one stream never overlap)."""
        ws = getattr(self._local, "workspace", None)
        if ws is None:
            ws = self._local.workspace = driver.device().alloc(lt.WORKSPACE_BYTES)
        return ws.ptr

    def overlap(self, dev: Any) -> bool:
        """Whether kernels are programmatic dependent launches: sm_90 or later (the kernels' wait
        is compiled only there) unless ``LIGHTSPEED_CUDA_PDL=0``."""
        if self._overlap is None:
            self._overlap = dev.major >= 9 and os.environ.get("LIGHTSPEED_CUDA_PDL", "1") != "0"
        return self._overlap

    def _launch(self, dev: Any, state: _State, launch: Launch, handle: Any, grid: tuple, stream: Any,
                overlap: bool | None = None) -> None:
        """One launch: a kernel by its launch shape, or a cuBLASLt call with the pointers the host
        table holds now.  ``overlap`` (default: :meth:`overlap`) makes a kernel a programmatic
        dependent launch."""
        spec = launch.spec
        if spec.library is not None:
            plan, ptrs = self._library_call(state, launch, handle)
            lt.library().run(plan, ptrs, self._workspace(), int(stream))
        else:
            shape = spec.launch
            if overlap is None:  # only a kernel that waits for its predecessor may overlap it
                overlap = self.overlap(dev) and "LS_KERNEL_BEGIN();" in spec.source and not (
                    PDL_SKIP and any(x in shape.kind or x in spec.name for x in PDL_SKIP))
            dev.launch(handle, grid, shape.block, (state.table_ptr, *launch.args), stream,
                       shape.shared_bytes, shape.cluster, overlap)

    @staticmethod
    def _library_call(state: _State, launch: Launch, handle: Any) -> tuple[lt.LtPlan, tuple[int, ...]]:
        """A library launch's plan at this call's dims (an :class:`~.cublaslt.LtDimsPlan` takes its
        dims' table slots first) and its buffers' addresses."""
        nd = len(launch.spec.dims)
        values = tuple(int(state.table[s]) for s in launch.args)
        return (handle.at(values[:nd]) if nd else handle), values[nd:]

    def run(self, state: _State, launches: list[Launch], handles: dict[str, Any], bounds: Mapping[str, int]) -> None:
        dev, stream = self._prepare(state, launches, bounds)
        self._replay(dev, stream, state, launches, handles)
        dev.download(state.error_host, state.error_dev.ptr, stream)  # behind the run: read at the next wait

    def _replay(self, dev: Any, stream: Any, state: _State, launches: list[Launch], handles: dict[str, Any]) -> None:
        if not self.use_graphs:
            for launch, grid in zip(launches, state.grids):
                self._launch(dev, state, launch, handles[launch.spec.name], grid, stream)
            return
        # kernels read their dims and addresses from the device table, but a captured cuBLASLt call
        # keeps the pointers and sizes it was given: one graph per set of them
        if state.library_slots is None:  # (one numpy read a call: a prefill has ~100 library launches)
            state.library_slots = np.asarray([s for launch in launches if launch.spec.library is not None
                                              for s in launch.args], dtype=np.int64)
        key = tuple(state.table[state.library_slots].tolist())
        graph = state.graphs.get(key)
        if graph is None:
            if key:  # the heuristic and the descriptors outside the capture
                lib = lt.library()
                for launch in launches:
                    if launch.spec.library is not None:
                        lib.prepare_call(*self._library_call(state, launch, handles[launch.spec.name]), stream)
                self._workspace()
            if len(state.graphs) >= GRAPHS_PER_STATE:
                dev.sync(stream)  # the oldest graph may still run
                _, old = state.graphs.popitem(last=False)
                driver.check(driver.bindings().cuGraphExecDestroy(old), "cuGraphExecDestroy")
            dev.begin_capture(stream)
            try:
                for launch, grid in zip(launches, state.grids):
                    self._launch(dev, state, launch, handles[launch.spec.name], grid, stream)
            finally:
                graph = dev.end_capture(stream)
            state.graphs[key] = graph
            self.captures += 1
        else:
            state.graphs.move_to_end(key)
        dev.launch_graph(graph, stream)

    def run_traced(self, state: _State, launches: list[Launch], handles: dict[str, Any], bounds: Mapping[str, int]
                   ) -> list[tuple[Launch, float, float]]:
        """Kernels launched one by one between CUDA events; their times come from the events and
        are placed on the host clock from the moment the first one was recorded."""
        dev, stream = self._prepare(state, launches, bounds)
        marks = [dev.event() for _ in range(len(launches) + 1)]
        dev.sync(stream)
        host0 = time.perf_counter()
        dev.record(marks[0], stream)
        for launch, grid, mark in zip(launches, state.grids, marks[1:]):
            # plain launches: an event between two kernels times the kernel alone
            self._launch(dev, state, launch, handles[launch.spec.name], grid, stream, overlap=False)
            dev.record(mark, stream)
        dev.download(state.error_host, state.error_dev.ptr, stream)
        dev.sync(stream)
        out, at = [], host0
        for launch, a, b in zip(launches, marks, marks[1:]):
            sec = dev.elapsed(a, b)
            out.append((launch, at, sec))
            at += sec
        for m in marks:
            driver.bindings().cuEventDestroy(m)
        return out
