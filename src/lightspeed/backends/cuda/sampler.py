"""The cuda token sampler (``Backend.sampler``): the sampler kernel of
``codegen/kernels/sample.py`` in the cuda dialect, a cluster of blocks per row on sm_90 (one block
before it), queued on the calling thread's stream behind the step that made the logits; the ids
stay on the device for the next step's input and are copied back into page-locked memory behind
the kernel."""

from __future__ import annotations

import ctypes
import hashlib
import weakref
from typing import Any

import numpy as np

from ...errors import InputError
from ...program import Pending
from ..codegen.kernels.sample import (
    LOGIT_CODES,
    SAMPLE_CLUSTER,
    SAMPLE_KERNEL,
    SAMPLE_THREADS,
    checked_params,
    sampler_source,
)
from . import driver, nvrtc
from .driver import DeviceArray
from .executor import thread_stream

__all__ = ["DeviceSampler"]

_ARG_TYPES = (ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_longlong,
              ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


class DeviceSampler:
    """Rows of logits (a program's device output, or host arrays, uploaded) -> token ids."""

    def __init__(self) -> None:
        dev = driver.device()
        # a row's blocks share their histograms through distributed shared memory (sm_90)
        self.cluster = SAMPLE_CLUSTER if dev.major >= 9 else 1
        source = sampler_source("cuda", SAMPLE_THREADS, self.cluster)
        key = "sampler-" + hashlib.sha256(source.encode()).hexdigest()[:16]
        self.fn = dev.function(dev.module(nvrtc.compile_cubin(source), key), SAMPLE_KERNEL)

    def sample(self, logits: Any, params: Any) -> Pending:
        stream, dev = thread_stream(), driver.device()
        if not isinstance(logits, DeviceArray):
            host = np.asarray(logits)
            if host.ndim != 2 or host.dtype.name not in LOGIT_CODES:  # one message for every backend
                raise InputError(f"sampler: logits must be [rows, V] of float32/bfloat16/float16, got "
                                 f"{host.dtype.name}{list(host.shape)}")
            logits = DeviceArray.from_host(np.ascontiguousarray(host), stream, wait=False)
        if logits.ndim != 2 or logits.dtype.name not in LOGIT_CODES:
            raise InputError(f"sampler: logits must be [rows, V] of float32/bfloat16/float16, got "
                             f"{logits.dtype.name}{list(logits.shape)}")
        rows, vocab = logits.shape
        prm = checked_params(rows, params)
        if rows == 0:
            empty = np.empty(0, np.int64)
            return Pending({"ids": DeviceArray.empty((0,), empty.dtype)}, {"ids": empty})
        prm_dev = DeviceArray.from_host(prm, stream, wait=False)  # the driver stages it before returning
        ids = DeviceArray.empty((rows,), np.dtype(np.int64))
        scratch = DeviceArray.empty((rows, vocab), np.dtype(np.uint64))  # the rows' fixed-point weights
        args = (logits.ptr, LOGIT_CODES[logits.dtype.name], rows, vocab, vocab, prm_dev.ptr, ids.ptr, scratch.ptr)
        dev.launch(self.fn, (rows * self.cluster, 1, 1), (SAMPLE_THREADS, 1, 1), args, stream,
                   cluster=(self.cluster, 1, 1), types=_ARG_TYPES)
        out = dev.pinned((rows,), np.dtype(np.int64))
        dev.download(out, ids.ptr, stream)
        event = dev.event()
        dev.record(event, stream)
        keep = (logits, prm_dev, scratch)  # alive until the kernel is done with them

        def wait() -> None:
            dev.wait_event(event)
            keep.__class__  # noqa: B018 -- the closure holds them

        pending = Pending({"ids": ids}, {"ids": out}, wait)
        weakref.finalize(pending, driver.bindings().cuEventDestroy, event)
        return pending
