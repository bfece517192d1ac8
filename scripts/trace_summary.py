"""Where a traced step's kernel time goes: a ``LIGHTSPEED_TRACE`` file's ``run.kernel`` events
(kernels launched one by one between CUDA events on cuda) grouped by op and launch kind.

    python scripts/trace_summary.py trace.json [--runs N] [--by-run]

Prints, per (op, kind), launches per step, microseconds per step and per launch, over the last
``N`` traced runs (default 2: a warm step), and the kernel sum beside each run's wall time;
``--by-run``: one table per run instead (a prefill and the decode step after it apart).
"""

from __future__ import annotations

import argparse
import collections
import json


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--by-run", action="store_true")
    args = ap.parse_args()
    events = json.load(open(args.trace))
    events = events["traceEvents"] if isinstance(events, dict) else events
    runs = [e for e in events if e.get("cat") == "run"]
    kernels = [e for e in events if e.get("cat") == "run.kernel"]
    chosen = runs[-args.runs:]
    if args.by_run:
        for i, run in enumerate(chosen):
            end = chosen[i + 1]["ts"] if i + 1 < len(chosen) else float("inf")
            table(run, [k for k in kernels if run["ts"] <= k["ts"] < end])
            print()
        return 0
    totals: dict[tuple, list[float]] = collections.defaultdict(list)
    for i, run in enumerate(chosen):
        # a run's kernels are placed from its start on, up to the next run
        end = chosen[i + 1]["ts"] if i + 1 < len(chosen) else float("inf")
        inside = [k for k in kernels if run["ts"] <= k["ts"] < end]
        print(f"run {run['name']} {run.get('args', {}).get('dims', '')}: wall {run['dur']:.1f} us, "
              f"{len(inside)} kernels, kernel sum {sum(k['dur'] for k in inside):.1f} us")
        for k in inside:
            totals[(k["name"], k.get("args", {}).get("kind", ""))].append(k["dur"])
    n = max(1, len(chosen))
    print(f"\n{'op':<16} {'kind':<12} {'per step':>8} {'us/step':>9} {'us/launch':>10}")
    for (op, kind), durs in sorted(totals.items(), key=lambda kv: -sum(kv[1])):
        print(f"{op:<16} {kind:<12} {len(durs) / n:>8.1f} {sum(durs) / n:>9.1f} {sum(durs) / len(durs):>10.2f}")
    return 0


def table(run: dict, inside: list[dict]) -> None:
    """One run's kernels by (op, kind), the largest first."""
    print(f"run {run['name']} {run.get('args', {}).get('dims', '')}: wall {run['dur']:.1f} us, "
          f"{len(inside)} kernels, kernel sum {sum(k['dur'] for k in inside):.1f} us")
    totals: dict[tuple, list[float]] = collections.defaultdict(list)
    for k in inside:
        totals[(k["name"], k.get("args", {}).get("kind", ""))].append(k["dur"])
    print(f"{'op':<16} {'kind':<12} {'launches':>8} {'us':>9} {'us/launch':>10}")
    for (op, kind), durs in sorted(totals.items(), key=lambda kv: -sum(kv[1])):
        print(f"{op:<16} {kind:<12} {len(durs):>8} {sum(durs):>9.1f} {sum(durs) / len(durs):>10.2f}")


if __name__ == "__main__":
    raise SystemExit(main())
