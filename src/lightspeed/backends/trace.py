"""``LIGHTSPEED_TRACE=path.json``: a Chrome / Perfetto trace (the Trace Event Format) of what a
process compiled and ran.

* **Compiles** (every backend, from ``lightspeed.pipeline.compile``): one span per program, with the search's
  phases (build, encode, saturate or cache load, extract, profile, lower), each ruleset's
  saturation and each measured candidate (its origin, time and backend ops) laid out inside it.
* **Runs**: one span per call of a program; inside it one event per kernel or host op, timed on
  the device's clock: the cpu backend times each step, the native backend each kernel call, the
  cuda backend each kernel with CUDA events (launched one by one while tracing, instead of as the
  captured graph, so kernels can be told apart).

Open the file in https://ui.perfetto.dev or chrome://tracing.  It is written when the process
exits (and by :func:`flush`).  Tracing costs nothing when the variable is unset.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["enabled", "event", "span", "flush", "events", "compile_events"]

_PATH = os.environ.get("LIGHTSPEED_TRACE") or None
_events: list[dict[str, Any]] = []
_lock = threading.Lock()
_T0 = time.perf_counter()


def enabled() -> bool:
    return _PATH is not None


def _us(t: float) -> float:
    return round((t - _T0) * 1e6, 3)


def event(name: str, cat: str, start: float, seconds: float, **args: Any) -> None:
    """A complete event: ``start`` on the ``time.perf_counter`` clock, ``seconds`` long."""
    if _PATH is None:
        return
    ev = {"name": name, "cat": cat, "ph": "X", "ts": _us(start), "dur": round(seconds * 1e6, 3),
          "pid": os.getpid(), "tid": threading.get_ident() % 1_000_000}
    if args:
        ev["args"] = {k: v if isinstance(v, (int, float, str, bool)) or v is None else str(v) for k, v in args.items()}
    with _lock:
        _events.append(ev)


@contextmanager
def span(name: str, cat: str, **args: Any) -> Iterator[None]:
    if _PATH is None:
        yield
        return
    t = time.perf_counter()
    try:
        yield
    finally:
        event(name, cat, t, time.perf_counter() - t, **args)


def compile_events(report: Any, start: float, backend: str) -> None:
    """A search report's phases, rulesets and measured candidates as events from ``start`` (the
    report keeps durations; they are laid out in order)."""
    if _PATH is None or report is None:
        return
    t = start
    for phase, sec in {**report.phases, "lower": getattr(report, "lower", 0.0)}.items():
        event(phase, "compile.phase", t, sec, backend=backend)
        if phase == "saturate":
            u = t
            for rs, (rsec, its, why) in report.rulesets.items():
                event(f"ruleset {rs}", "compile.ruleset", u, rsec, iterations=its, stop=why)
                u += rsec
        if phase == "profile":
            u = t
            for c in report.candidates:
                dur = c.seconds if c.seconds is not None else 0.0
                event(f"candidate #{c.index} {c.origin}", "compile.candidate", u, dur,
                      measured_s=c.seconds, winner=c.index == report.winner, error=c.error,
                      ops=", ".join(f"{k}={v}" for k, v in sorted(c.ops.items())))
                u += dur
        t += sec


def events() -> list[dict[str, Any]]:
    with _lock:
        return list(_events)


def flush(path: str | None = None) -> str | None:
    """Write the trace (to ``path``, else ``$LIGHTSPEED_TRACE``); returns the path written."""
    target = path or _PATH
    if target is None:
        return None
    with _lock:
        data = {"traceEvents": list(_events), "displayTimeUnit": "ms"}
    tmp = f"{target}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, target)
    return target


def _enable_for_tests(path: str | None) -> None:
    """Turn tracing on or off in this process (tests)."""
    global _PATH
    _PATH = path
    with _lock:
        _events.clear()


if _PATH is not None:
    atexit.register(flush)
