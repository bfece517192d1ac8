"""The cuda driver layer's host-side bookkeeping, which runs without a GPU: freed device blocks
return to the size-class free lists however the collector schedules their finalizers."""

from __future__ import annotations

import collections
import gc
import threading

from lightspeed.backends.cuda.driver import Block, Device


def _bookkeeping_only_device() -> Device:
    """A Device with its free lists and lock but no CUDA context (the parts this test touches)."""
    dev = Device.__new__(Device)
    dev._free, dev._pinned_free = {}, {}
    dev._alloc_lock = threading.Lock()
    dev._released = collections.deque()
    dev.held_bytes = dev.peak_bytes = 0
    return dev


def test_a_block_finalized_while_the_allocator_holds_its_lock_does_not_deadlock():
    """Regression (cuda conformance cases hung in ``Device.alloc``): an allocation inside the
    locked region can run the collector, which finalizes an unreachable block on that same
    thread; the finalizer used to take the (non-reentrant) lock again and waited forever."""
    dev = _bookkeeping_only_device()
    finished = threading.Event()

    def allocate_and_collect():  # on its own thread: a hang fails the test instead of blocking it
        blocks = [Block(dev, 0x1000 * (i + 1), 256) for i in range(3)]
        cycle = [blocks.pop()]
        cycle.append(cycle)  # reachable only through a cycle: freed by the collector
        del cycle
        with dev._alloc_lock:
            gc.collect()
        blocks.clear()  # refcount finalization, outside the lock
        finished.set()

    threading.Thread(target=allocate_and_collect, daemon=True).start()
    assert finished.wait(10), "a finalizer blocked on the allocator's lock"
    with dev._alloc_lock:
        dev._collect_released()
    assert sorted(dev._free[256]) == [0x1000, 0x2000, 0x3000]
    assert not dev._released
