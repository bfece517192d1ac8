"""Hardware counters of a prefill and a decode step on the GPU (Nsight Compute), summarised per
kernel: where each kernel stands against its own limits (DRAM bandwidth, SM throughput,
occupancy), which CUDA events alone cannot say.

On the GPU host (Firecracker machines run ncu; gVisor ones do not: KINDS.md):

    python3 scripts/gpu_ncu.py run SHAPE [--prompt N]     # ncu over the target below -> $OUT/ncu.csv
                                                           # (with why warps stall, where ncu knows it)
    python3 scripts/gpu_ncu.py summary $OUT/ncu.csv        # the table (also printed by run)
    python3 scripts/gpu_ncu.py detail SHAPE [--prompt N] [--kernel REGEX]
                                                           # every section (--set full) of the first
                                                           # launch of the kernels matching REGEX (default
                                                           # attention_mma) -> $OUT/ncu_detail.txt, and its
                                                           # SASS with stall samples -> $OUT/ncu_sass.csv

``target`` (what ncu runs): a Llama of the peer shape with random bf16 weights compiled for cuda
(the search's decisions cached by a first, unprofiled run), one warm-up generation, then between
cuProfilerStart / cuProfilerStop a prompt of N tokens and one decode step: ncu profiles only that
range (``--profile-from-start off``), each kernel of the captured graphs as its own node
(``--graph-profiling node``), with the clocks left alone (``--clock-control none``, METHOD.md).
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
METRICS = {
    "gpu__time_duration.sum": "us",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram%",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm%",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "occ%",
    "launch__registers_per_thread": "regs",
    "launch__grid_size": "blocks",
}
# why warps wait, as cycles stalled per issued instruction (the WarpStateStats section's ratios):
# asked for too, and dropped if this ncu does not know them
STALLS = {f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio": r for r in (
    "long_scoreboard", "barrier", "short_scoreboard", "mio_throttle", "math_pipe_throttle", "wait",
    "lg_throttle", "not_selected")}


def target(shape: str, prompt: int) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    sys.path.insert(0, str(ROOT / "src"))
    from gpu_decode import random_llama
    from peer_torch_decode import SHAPES

    import lightspeed as ls
    from lightspeed.backends.cuda import driver
    from lightspeed.models.generate import Generator

    model, weights, _, rng = random_llama(shape)
    gen = Generator(model, weights, backend="cuda", search=ls.SearchOptions(budget=4, seed=0, progress=False))
    ids = list(rng.integers(0, SHAPES[shape]["vocab"], prompt))
    gen.generate(ids, max_new_tokens=3, stop_ids=[])  # plans, graph captures, library heuristics
    cu = driver.bindings()
    driver.device().sync(0)
    driver.check(cu.cuProfilerStart(), "cuProfilerStart")
    gen.generate(ids, max_new_tokens=2, stop_ids=[])  # the prefill, then one decode step
    driver.device().sync(0)
    driver.check(cu.cuProfilerStop(), "cuProfilerStop")


def summary(path: str) -> str:
    """Per kernel label (ls_<label>_<hash>; the library's kernels under their own names): launches,
    total time, and the time-weighted mean of each percentage."""
    rows: dict[tuple[str, int], dict[str, str]] = defaultdict(dict)
    with open(path, newline="") as f:
        lines = [ln for ln in f if ln.startswith('"')]  # ncu's log lines before the table
    for r in csv.DictReader(lines):
        key = (r["Kernel Name"], int(r["ID"]))
        rows[key][r["Metric Name"]] = r["Metric Value"].replace(",", "")
        rows[key]["unit:" + r["Metric Name"]] = r.get("Metric Unit", "")
    agg: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for (name, _), m in rows.items():
        label = name.split("(")[0]
        if label.startswith("ls_"):
            label = "ls_" + "_".join(label[3:].split("_")[:-1])
        t = float(m.get("gpu__time_duration.sum", 0) or 0)
        unit = m.get("unit:gpu__time_duration.sum", "")
        # to us (ncu 2025 writes "ns" / "ms", older ones "nsecond" / "msecond")
        t = t / 1e3 if unit in ("ns", "nsecond") else t * 1e3 if unit in ("ms", "msecond") else t
        a = agg[label]
        a["n"] += 1
        a["us"] += t
        for metric in METRICS:
            if metric.endswith("pct_of_peak_sustained_elapsed") or metric.endswith("pct_of_peak_sustained_active"):
                a[metric] += t * float(m.get(metric, 0) or 0)
        a["regs"] = max(a["regs"], float(m.get("launch__registers_per_thread", 0) or 0))
        for metric in STALLS:
            if metric in m:
                a[metric] += t * float(m[metric] or 0)
                a["stalls"] = 1.0
    out = [f"{'kernel':<40} {'launches':>8} {'us':>9} {'us/launch':>10} {'dram%':>6} {'sm%':>6} {'occ%':>6} "
           f"{'regs':>5}"]
    for label, a in sorted(agg.items(), key=lambda kv: -kv[1]["us"]):
        us = a["us"] or 1.0
        pct = [a[m] / us for m in METRICS if "pct" in m]
        out.append(f"{label[:40]:<40} {int(a['n']):>8} {a['us']:>9.1f} {a['us'] / a['n']:>10.2f} "
                   + " ".join(f"{p:>6.1f}" for p in pct) + f" {int(a['regs']):>5}")
    stalled = [(label, a) for label, a in sorted(agg.items(), key=lambda kv: -kv[1]["us"]) if a.get("stalls")]
    if stalled:  # the kernels that cost most: what their warps wait on
        out += ["", "stall cycles per issued instruction (time-weighted), the 12 costliest kernels",
                f"{'kernel':<40} " + " ".join(f"{r[:8]:>8}" for r in STALLS.values())]
        for label, a in stalled[:12]:
            us = a["us"] or 1.0
            out.append(f"{label[:40]:<40} " + " ".join(f"{a[m] / us:>8.2f}" for m in STALLS))
    return "\n".join(out)


def _prepared(shape: str, prompt: int) -> tuple[Path, list[str]]:
    """$OUT made, and the target's command, run once unprofiled (the search's decisions cached,
    kernels compiled) so that ncu sees only the warm prefill and step."""
    out = Path(os.environ.get("OUT", "/tmp/gpu-out"))
    out.mkdir(parents=True, exist_ok=True)
    me = [sys.executable, str(Path(__file__).resolve()), "target", shape, "--prompt", str(prompt)]
    subprocess.run(me, check=True)
    return out, me


def run(shape: str, prompt: int) -> None:
    out, me = _prepared(shape, prompt)
    csv_path = out / "ncu.csv"
    def ncu(metrics: list[str]) -> int:
        cmd = ["ncu", "--clock-control", "none", "--profile-from-start", "off", "--graph-profiling", "node",
               "--target-processes", "all", "--metrics", ",".join(metrics), "--csv", "--log-file", str(csv_path), *me]
        return subprocess.run(cmd).returncode
    if ncu([*METRICS, *STALLS]) != 0:  # an ncu without the stall ratios: the rest alone
        print("ncu: the stall ratios were refused; profiling without them", flush=True)
        if ncu(list(METRICS)) != 0:
            raise SystemExit("ncu failed (see the log above)")
    text = summary(str(csv_path))
    (out / "ncu_summary.txt").write_text(text + "\n")
    print(text)


def detail(shape: str, prompt: int, kernel: str) -> None:
    """One kernel's every section: where its time goes against its own limits, beyond the table."""
    out, me = _prepared(shape, prompt)
    rep = out / "ncu_detail"
    cmd = ["ncu", "--clock-control", "none", "--profile-from-start", "off", "--graph-profiling", "node",
           "--target-processes", "all", "--kernel-name", f"regex:{kernel}", "--launch-count", "1",
           "--set", "full", "--import-source", "yes", "--force-overwrite", "--export", str(rep), *me]
    if subprocess.run(cmd).returncode != 0:
        raise SystemExit("ncu failed (see the log above)")
    report = str(rep) + ".ncu-rep"
    with open(out / "ncu_detail.txt", "w") as f:
        subprocess.run(["ncu", "--import", report, "--page", "details", "--print-details", "all"], stdout=f)
    with open(out / "ncu_sass.csv", "w") as f:  # per SASS instruction: executions, stall samples
        subprocess.run(["ncu", "--import", report, "--page", "source", "--print-source", "sass", "--csv"], stdout=f)
    print((out / "ncu_detail.txt").read_text()[-6000:])


def main() -> int:
    args = sys.argv[1:]
    if not args or args[0] not in ("run", "target", "summary", "detail"):
        print(__doc__)
        return 2
    if args[0] == "summary":
        print(summary(args[1]))
        return 0
    shape = args[1] if len(args) > 1 and not args[1].startswith("--") else "llama-3.2-1b"
    prompt = int(args[args.index("--prompt") + 1]) if "--prompt" in args else 512
    if args[0] == "detail":
        detail(shape, prompt, args[args.index("--kernel") + 1] if "--kernel" in args else "attention_mma")
        return 0
    (run if args[0] == "run" else target)(shape, prompt)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
