"""Split a GPU kernel timeline into decode steps and say where a step's time goes.

    python scripts/step_timeline.py TRACE.csv|TRACE.json [--name NAME] [--gap-us 30] [--marker SUBSTRING]
                                 [--sequence]

TRACE is ``nsys stats -r cuda_gpu_trace -f csv`` of a run traced with ``--cuda-graph-trace=node``,
or a chrome trace of PyTorch's profiler (scripts/gpu_profile.py makes one: the GPU host has no
nsys).  A step is a run of kernels with no gap longer than ``--gap-us`` between them (or, with
``--marker``, the kernels after each one whose name holds it: torch.compile's loop leaves no
gaps); the last steps of the run (the steady state) are summarised: the period from one step's
start to the next, the kernels' own time, the gaps between kernels inside a step (launch latency,
tails) and the idle time before the next step starts (the host's part).  Then the kernels by total
time per step, with their mean duration.
"""

from __future__ import annotations

import csv
import json
import sys
from collections import defaultdict
from statistics import median


def load(path: str) -> list[tuple[float, float, str]]:
    """(start us, duration us, name) of each kernel: an nsys csv, or a chrome trace (PyTorch's
    profiler: events of category ``kernel``)."""
    rows = []
    if path.endswith(".json"):
        with open(path) as f:
            events = json.load(f)
        events = events.get("traceEvents", events) if isinstance(events, dict) else events
        rows = [(float(e["ts"]), float(e["dur"]), e.get("name", "")) for e in events
                if e.get("cat") == "kernel" and "dur" in e]
        rows.sort()
        return rows
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            name = r.get("Name") or r.get("name") or ""
            if "[CUDA memcpy" in name or "[CUDA memset" in name:
                continue
            rows.append((float(r["Start (ns)"]) / 1e3, float(r["Duration (ns)"]) / 1e3, name))
    rows.sort()
    return rows


def steps_of(rows: list[tuple[float, float, str]], gap_us: float, marker: str | None
             ) -> list[list[tuple[float, float, str]]]:
    """Steps split at gaps longer than ``gap_us``, or after each kernel whose name holds
    ``marker`` (a pipelined loop, as torch.compile's, leaves no gaps between its steps)."""
    steps: list[list[tuple[float, float, str]]] = []
    end = None
    cut = False
    for r in rows:
        if end is None or (marker is None and r[0] - end > gap_us) or cut:
            steps.append([])
        cut = marker is not None and marker in r[2]
        steps[-1].append(r)
        end = max(end or 0.0, r[0] + r[1])
    return steps


def short(name: str) -> str:
    name = name.split("(")[0]
    return name[:60]


def main() -> None:
    args = sys.argv[1:]
    gap = float(args[args.index("--gap-us") + 1]) if "--gap-us" in args else 30.0
    label = args[args.index("--name") + 1] if "--name" in args else args[0]
    marker = args[args.index("--marker") + 1] if "--marker" in args else None
    rows = load(args[0])
    steps = steps_of(rows, gap, marker)
    sizes = [len(s) for s in steps]
    if marker is None and rows and max(sizes.count(n) for n in sizes) < 4:
        # pipelined steps leave no gaps (or a few): split at a kernel that runs once a step (the
        # rarest name seen at least 8 times; the head, say)
        counts: dict[str, int] = defaultdict(int)
        for _, _, n in rows:
            counts[n] += 1
        once = [n for n, c in counts.items() if c >= 8]
        if once:
            # the run's last kernel when it is one of them (a step's last: the sampling), else the rarest
            marker = rows[-1][2] if rows[-1][2] in once else min(once, key=lambda n: (counts[n], n))
            label += f" (steps split after {short(marker)})"
            steps = steps_of(rows, gap, marker)
    sizes = [len(s) for s in steps]
    typical = median(sizes[len(sizes) // 2:]) if sizes else 0
    tail = [s for s in steps[len(steps) // 2:] if len(s) == typical][-24:]
    if len(tail) < 2:
        print(f"{label}: {len(steps)} steps found, too few of one size; sizes {sizes[-20:]}")
        return
    starts = {id(s): s[0][0] for s in tail}
    period, busy, inner, idle = [], [], [], []
    for s in tail:
        k = steps.index(s)
        span = max(a + d for a, d, _ in s) - s[0][0]
        work = sum(d for _, d, _ in s)
        busy.append(work)
        inner.append(span - work)
        if k + 1 < len(steps):
            period.append(steps[k + 1][0][0] - starts[id(s)])
            idle.append(steps[k + 1][0][0] - (s[0][0] + span))
    print(f"{label}: {len(steps)} steps, {typical} kernels per step; over the last {len(tail)}:")
    print(f"  period {median(period):8.1f} us   kernels {median(busy):8.1f} us   gaps inside a step "
          f"{median(inner):7.1f} us   idle before the next {median(idle):7.1f} us")
    per = defaultdict(list)
    for s in tail:
        acc = defaultdict(float)
        cnt = defaultdict(int)
        for _, d, n in s:
            acc[short(n)] += d
            cnt[short(n)] += 1
        for n in acc:
            per[n].append((acc[n], cnt[n]))
    table = sorted(((median(a for a, _ in v), v[0][1], n) for n, v in per.items()), reverse=True)
    print(f"  {'kernel':<60} {'us/step':>9} {'count':>6} {'mean us':>8}")
    for t, c, n in table[:25]:
        print(f"  {n:<60} {t:>9.1f} {c:>6} {t / c:>8.2f}")
    if "--sequence" in args:  # one step's kernels in launch order (which product is which)
        print("  one step in order (start us from the step's start, duration us, kernel):")
        for a, d, n in tail[-1]:
            print(f"  {a - tail[-1][0][0]:9.1f} {d:8.2f}  {short(n)}")


if __name__ == "__main__":
    main()
