"""Arrays between PyTorch and the GPU executor: torch CUDA tensors used where they lie (as
:class:`~.driver.DeviceArray` s over the same memory), results handed back as torch tensors, and
the ordering of the executor's stream against torch's current stream."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ... import dtypes as dt
from . import driver
from .driver import DeviceArray
from .executor import thread_stream

__all__ = ["is_torch_cuda", "from_torch", "to_torch", "torch_dtype", "torch_stream", "wait_on"]


def is_torch_cuda(v: Any) -> bool:
    if not type(v).__module__.startswith("torch"):
        return False
    import torch

    return isinstance(v, torch.Tensor) and v.is_cuda


def from_torch(t: Any) -> DeviceArray:
    """A torch CUDA tensor as a DeviceArray over the same memory (no copy when contiguous)."""
    t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    return DeviceArray(t.data_ptr(), tuple(t.shape), dt.as_dtype(t.dtype).np, t)


def torch_dtype(d: np.dtype) -> Any:
    import torch

    name = dt.as_dtype(d).name
    return {"bfloat16": torch.bfloat16, "float8_e4m3": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2,
            "bool": torch.bool}.get(name) or getattr(torch, name)


def to_torch(a: DeviceArray) -> Any:
    """A DeviceArray as a torch CUDA tensor: the one it wraps, or a copy into a new one, which
    torch's current stream then waits for."""
    import torch

    if isinstance(a.owner, torch.Tensor):
        return a.owner
    out = torch.empty(a.shape, dtype=torch_dtype(a.dtype), device="cuda")
    driver.device().copy(out.data_ptr(), a.ptr, a.nbytes, thread_stream())
    wait_on(driver.bindings().CUstream(torch.cuda.current_stream().cuda_stream), thread_stream())
    return out


def torch_stream(arrays: Mapping[str, Any]) -> Any:
    import sys

    if "torch" not in sys.modules:
        return None
    if not any(isinstance(v, DeviceArray) and type(v.owner).__module__.startswith("torch") for v in arrays.values()):
        return None
    import torch

    return driver.bindings().CUstream(torch.cuda.current_stream().cuda_stream)


def wait_on(waiter: Any, on: Any) -> None:
    dev = driver.device()
    ev = dev.event()
    dev.record(ev, on)
    driver.check(driver.bindings().cuStreamWaitEvent(waiter, ev, 0), "cuStreamWaitEvent")
    driver.bindings().cuEventDestroy(ev)
