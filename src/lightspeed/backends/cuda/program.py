"""``CudaProgram``: a kernel program on the GPU, taking and giving numpy arrays, torch CUDA tensors
or :class:`~.driver.DeviceArray` s: numpy inputs are copied to the device and results copied back
(and a gather's index outside its data raised then: IndexOutOfRange, as on the host backends);
torch CUDA tensors are used where they lie (outputs come back as torch CUDA tensors, work ordered
on torch's current stream); DeviceArrays stay on the device (what the search times)."""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ...errors import InputError
from ...program import Pending, to_numpy
from ..codegen.program import KernelProgram
from . import driver
from .driver import DeviceArray
from .executor import thread_stream
from .interop import from_torch, is_torch_cuda, to_torch, torch_dtype, torch_stream, wait_on

__all__ = ["CudaProgram"]


class CudaProgram(KernelProgram):
    """A kernel program on the GPU, taking and giving numpy arrays, torch CUDA tensors or
    DeviceArrays (see the module docstring)."""

    def _fresh_state(self) -> None:
        super()._fresh_state()
        self._torch_resident: bool | None = None  # a resident input is a torch tensor (its first call says)
        if self._resident:  # a persisted copy: its uploads (queued, not waited for) done before any
            driver.device().sync(thread_stream())  # other thread's stream reads them

    def as_array(self, value: Any, what: str) -> Any:
        if isinstance(value, DeviceArray):
            return value
        if is_torch_cuda(value):
            return from_torch(value)
        return to_numpy(value, what)

    def to_device(self, array: Any) -> Any:
        """A device array stays; anything else as on every kernel backend (weights held as blocks
        placed by the op table, other arrays uploaded)."""
        if isinstance(array, DeviceArray):
            return array
        return super().to_device(array)

    def zeros(self, shape: tuple[int, ...], dtype: Any) -> DeviceArray:
        """Made on the device and cleared on this thread's stream (ordered before the calls that
        use it; no host array, no wait)."""
        out = DeviceArray.empty(tuple(shape), np.dtype(dtype))
        driver.device().memset(out.ptr, out.nbytes, thread_stream())
        return out

    def clear(self, array: Any) -> None:
        if not isinstance(array, DeviceArray):
            return super().clear(array)
        driver.device().memset(array.ptr, array.nbytes, thread_stream())

    def rows(self, array: Any, start: int, count: int) -> Any:
        if not isinstance(array, DeviceArray):
            return super().rows(array, start, count)
        if not 0 <= start <= start + count <= array.shape[0]:
            raise InputError(f"rows {start}..{start + count} outside an array of {array.shape[0]} rows")
        return array.rows(start, count)

    def store_back(self, user: Any, array: Any) -> None:
        if isinstance(user, DeviceArray) or is_torch_cuda(user):
            dest = self.as_array(user, "aliased input")
            if dest.ptr != array.ptr:
                driver.device().copy(dest.ptr, array.ptr, array.nbytes, thread_stream())
            return
        host = to_numpy(user, "aliased input")
        if not (host.flags.c_contiguous and host.flags.writeable):
            raise InputError("an aliased host input must be writable and C-contiguous")
        src = array if isinstance(array, DeviceArray) else self.to_device(array)
        driver.device().download(host, src.ptr, thread_stream())
        driver.device().sync(thread_stream())

    def execute(self, arrays: dict[str, Any], dims: dict[str, int], out=None) -> dict[str, Any]:
        # torch's tensors among this call's inputs (the persisted ones looked at once: the check of
        # every weight was ~150 tests a decode step of the 1B)
        given = self._local.__dict__.get("given")
        if self._torch_resident is None:
            self._torch_resident = torch_stream(self._resident) is not None
        fresh = arrays if given is None or given[1] is not arrays or self._torch_resident else {
            k: arrays[k] for k in given[0]}
        torch_s = torch_stream(fresh)
        if torch_s is None:
            return super().execute(arrays, dims, out)
        # torch's tensors in: outputs are written straight into new torch CUDA tensors, and the work
        # is ordered after torch's current stream and before its next use of any of them
        import torch

        out = dict(out or {})
        for name in self.output_names:
            if name not in out and name not in self.output_aliases:
                op = self.outputs_of[name]
                t = torch.empty(self._output_shape[name](dims), dtype=torch_dtype(op.dtype.np), device="cuda")
                out[name] = DeviceArray(t.data_ptr(), tuple(t.shape), op.dtype.np, t)
        wait_on(thread_stream(), torch_s)
        res = super().execute(arrays, dims, out)
        wait_on(torch_s, thread_stream())
        return res

    def launch(self, inputs: Mapping[str, Any], *, dims: Mapping[str, int] | None = None,
               fetch: Sequence[str] = ()) -> Pending:
        """The call queued on this thread's stream: host inputs uploaded without waiting, outputs
        left on the device, the ``fetch`` ones copied into page-locked host buffers behind the
        work, an event after them (``Pending.result()`` waits on it)."""
        if not isinstance(inputs, Mapping) or any(is_torch_cuda(v) for v in inputs.values()):
            return super().launch(inputs, dims=dims, fetch=fetch)  # torch's streams: run it as a call
        stream, dev = thread_stream(), driver.device()
        self.check_fetch(fetch)
        staged = {k: v if isinstance(v, DeviceArray) else DeviceArray.from_host(self.as_array(v, f"input {k!r}"),
                                                                                  stream, wait=False)
                  for k, v in inputs.items()}
        res = self(staged, dims=dims)  # every input on the device: nothing is waited for
        host = {}
        for k in fetch:
            v = res[k]
            host[k] = buf = dev.pinned(v.shape, v.dtype)
            dev.download(buf, v.ptr, stream)
        event = dev.event()
        dev.record(event, stream)

        def wait() -> None:
            dev.wait_event(event)
            self.raise_device_errors()

        pending = Pending(res, host, wait)
        weakref.finalize(pending, driver.bindings().cuEventDestroy, event)  # waited for or dropped
        return pending

    def deliver(self, res: dict[str, Any], inputs: Mapping[str, Any]) -> dict[str, Any]:
        values = list(inputs.values())
        if any(is_torch_cuda(v) for v in values):
            return {k: to_torch(v) if isinstance(v, DeviceArray) else v for k, v in res.items()}
        if values and all(isinstance(v, DeviceArray) for v in values):
            return res
        stream = thread_stream()
        dev = driver.device()
        host = {}
        given = {id(v) for v in values}
        for k, v in res.items():
            if isinstance(v, DeviceArray) and id(v) not in given:  # not the caller's own device array
                h = np.empty(v.shape, v.dtype)
                dev.download(h, v.ptr, stream)
                host[k] = h
            else:
                host[k] = v
        dev.sync(stream)
        self.raise_device_errors()
        return super().deliver(host, inputs)

    def raise_device_errors(self) -> None:
        """After the host waited for the device: IndexOutOfRange if a finished run of this thread's
        state gathered outside its data (the run's error word, copied back behind it)."""
        state = getattr(self._local, "state", None)
        if state is not None:
            state.check(thread_stream())
