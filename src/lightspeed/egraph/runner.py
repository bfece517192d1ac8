"""The only module that touches egglog's Rust bindings (``egglog.bindings``, the text API).

Why the text API: the Pythonic ``Expr`` API generates mangled, unstable names; the text API takes
the same ``.egg`` programs the rule files hold.  Version notes (see docs/DESIGN notes):

* egglog 13.2 (the newest for Python 3.11) iterates its serialisation in a thread-pool order unless
  ``RAYON_NUM_THREADS=1`` is set before the first egglog call, so we set it at import time;
* 13.2's parser is quadratic in program length, so long programs go through a temporary file and
  ``(include "...")``;
* a Rust panic arrives as ``pyo3_runtime.PanicException``, a ``BaseException``: we catch it here
  and raise :class:`EgglogError` so callers only ever see lightspeed errors;
* a failing program is not rolled back: callers that want to recover use ``push``/``pop``.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import LightspeedError

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # must precede the first egglog call

__all__ = ["EgglogError", "EGraphRunner", "RunStats", "SerializedEGraph", "EGGLOG_VERSION"]

try:
    from importlib.metadata import version as _pkg_version

    EGGLOG_VERSION = _pkg_version("egglog")
except Exception:  # pragma: no cover - metadata missing in odd installs
    EGGLOG_VERSION = "unknown"

# programs longer than this go through a file + (include ...) (13.2's parser is quadratic)
INCLUDE_THRESHOLD = 20_000


class EgglogError(LightspeedError):
    """egglog rejected a program (parse or type error, failed check) or panicked."""


@dataclass
class RunStats:
    """What a ``run`` did: wall time, and per-rule match counts / per-ruleset times when reported."""

    seconds: float = 0.0
    rule_matches: dict[str, int] = field(default_factory=dict)
    ruleset_seconds: dict[str, float] = field(default_factory=dict)
    outputs: list[Any] = field(default_factory=list)

    def merge(self, other: RunStats) -> None:
        self.seconds += other.seconds
        for k, v in other.rule_matches.items():
            self.rule_matches[k] = self.rule_matches.get(k, 0) + v
        for k, v in other.ruleset_seconds.items():
            self.ruleset_seconds[k] = self.ruleset_seconds.get(k, 0.0) + v

    def format(self) -> str:
        lines = [f"egglog run: {self.seconds * 1e3:.1f} ms"]
        for name, t in sorted(self.ruleset_seconds.items()):
            if t > 0:  # egglog 13.2's own timers read ~0; lightspeed times rulesets itself (search report)
                lines.append(f"  ruleset {name}: {t * 1e3:.2f} ms (egglog's own timer)")
        for name, n in sorted(self.rule_matches.items(), key=lambda kv: -kv[1]):
            lines.append(f"  rule {name}: {n} matches")
        return "\n".join(lines)


@dataclass
class SerializedEGraph:
    """The JSON serialisation: ``nodes`` (id -> op, children node ids, eclass), ``class_data``."""

    nodes: dict[str, dict]
    class_data: dict[str, dict]
    root_eclasses: list[str]


def _report_stats(outputs: list[Any], stats: RunStats) -> None:
    for out in outputs:
        report = getattr(out, "report", None)
        if report is None:
            continue
        matches = getattr(report, "num_matches_per_rule", None) or {}
        for k, v in matches.items():
            stats.rule_matches[k] = stats.rule_matches.get(k, 0) + int(v)
        for attr in ("search_and_apply_time_per_ruleset",):
            per = getattr(report, attr, None) or {}
            for k, v in per.items():
                stats.ruleset_seconds[k] = stats.ruleset_seconds.get(k, 0.0) + v.total_seconds()


class EGraphRunner:
    """An egglog e-graph fed with program text."""

    def __init__(self) -> None:
        from egglog import bindings  # on first use: a cached compile never imports egglog (~0.4 s)

        self._b = bindings
        self._eg = bindings.EGraph()
        self._tmpdir: tempfile.TemporaryDirectory | None = None
        self.stats = RunStats()

    def run(self, program: str, *, name: str = "program") -> RunStats:
        """Parse and run ``program``; raises :class:`EgglogError` with egglog's message."""
        t0 = time.perf_counter()
        text = program
        if len(program) > INCLUDE_THRESHOLD:
            if self._tmpdir is None:
                self._tmpdir = tempfile.TemporaryDirectory(prefix="lightspeed-egg-")
            path = os.path.join(self._tmpdir.name, f"{name}-{len(os.listdir(self._tmpdir.name))}.egg")
            with open(path, "w") as f:
                f.write(program)
            text = f'(include "{path}")'
        try:
            commands = self._eg.parse_program(text)
            outputs = self._eg.run_program(*commands)
        except self._b.EggSmolError as e:
            raise EgglogError(f"egglog rejected {name}: {e}") from None
        except BaseException as e:  # pyo3's PanicException derives from BaseException
            if type(e).__name__ == "PanicException":
                raise EgglogError(f"egglog panicked while running {name}: {e}") from None
            raise
        stats = RunStats(seconds=time.perf_counter() - t0, outputs=list(outputs))
        _report_stats(stats.outputs, stats)
        self.stats.merge(stats)
        return stats

    def size(self) -> int:
        """Rows in all functions and constructors (egglog's ``print-size``): the e-graph's size."""
        outs = self.run("(print-size)", name="print-size").outputs
        return sum(int(n) for o in outs for _, n in getattr(o, "sizes", ()))

    def run_ruleset(self, ruleset: str, max_iterations: int, max_size: int | None = None) -> tuple[int, str]:
        """Run ``ruleset`` one iteration at a time until it saturates, hits ``max_iterations`` or the
        e-graph outgrows ``max_size``.  Returns (iterations run, why it stopped)."""
        for it in range(1, max_iterations + 1):
            outs = self.run(f"(run {ruleset} 1)", name=f"ruleset {ruleset}").outputs
            updated = any(getattr(getattr(o, "report", None), "updated", False) for o in outs)
            if not updated:
                return it, "saturated"
            if max_size is not None and self.size() > max_size:
                return it, f"e-graph size cap {max_size}"
        return max_iterations, "iteration cap"

    def push(self) -> None:
        self.run("(push)", name="push")

    def pop(self) -> None:
        self.run("(pop)", name="pop")

    def serialize(self, root: str) -> SerializedEGraph:
        """Serialise the e-classes reachable from global ``root`` (e.g. ``"$root"``)."""
        try:
            ser = self._eg.serialize([self._b.Var(self._b.RustSpan("lightspeed", 0, 0), root)])
        except self._b.EggSmolError as e:
            raise EgglogError(f"egglog could not serialise from {root}: {e}") from None
        data = json.loads(ser.to_json())
        return SerializedEGraph(data["nodes"], data.get("class_data", {}), data.get("root_eclasses", []))
