"""Does the main job's tor-dircache comparison reach a significant verdict every run, within the machine?

    python benchmarks/main_job.py --runs 5 [--seconds 270] [-o DIR]   # run the part, as `alloclab demo` does
    python benchmarks/main_job.py --read RUN [RUN ...]                 # figures of existing run directories

Runs the tor-dircache part of `alloclab demo` alone (the experiment file `alloclab demo --seconds
270` writes, via commands/demo.py's experiment_text), one run at a time, at normal priority (the
runs are the measurement). Per run: mimalloc 2.0.9's and jemalloc 5.3.0's ratio to glibc, CI and
Holm p; the replica CV of glibc's and mimalloc 2.0.9's steady means; the run's own CPU share (its
processes' user + sys seconds / wall seconds / cores) and its own load (mean count of its threads
that are runnable or in D state, sampled every 0.5 s: what the run adds to the load average that
the cpu-saturated warning reads); whether the run printed that warning. With --read, the spread's
sources for glibc: the SE of a replica's steady mean (blocks of 5 samples) against the
replica-to-replica SD, and the correlation of each replica's first and second half of the window
(a persistent per-process level). See benchmarks/README.md "The main job".
"""
from __future__ import annotations

import argparse
import csv
import os
import re
import statistics as st
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from alloclab.commands.demo import DEMOS, experiment_text  # noqa: E402
from alloclab.store import Store  # noqa: E402

COMPARED = ("mimalloc-2.0.9", "jemalloc-5.3.0")


def tree_threads_busy(root: int) -> tuple[int, int]:
    """Threads of `root` and its descendants that are runnable (R) and uninterruptible (D)."""
    children: dict[int, list[int]] = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                stat = Path(f"/proc/{p}/stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(p))
    todo, runnable, blocked = [root], 0, 0
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                state = Path(f"/proc/{pid}/task/{t}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            runnable += state == "R"
            blocked += state == "D"
    return runnable, blocked


def run_part(out: Path, seconds: int) -> dict:
    label, template, share = DEMOS[0]
    out.mkdir(parents=True)
    exp = out / "experiment.toml"
    exp.write_text(experiment_text(template, int(seconds * share)))
    before, t0 = os.times(), time.monotonic()
    with open(out / "stdout.txt", "w") as log:
        proc = subprocess.Popen([str(ROOT / ".venv/bin/alloclab"), "run", str(exp), "-o", str(out / "run")],
                                stdout=log, stderr=subprocess.STDOUT)
        counts: list[tuple[int, int]] = []
        while proc.poll() is None:
            counts.append(tree_threads_busy(proc.pid))
            time.sleep(0.5)
    wall, after = time.monotonic() - t0, os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return {"cpu_share": cpu / wall / (os.cpu_count() or 1), "own_load": st.mean(r + d for r, d in counts) if counts else 0.0,
            "own_d": st.mean(d for _, d in counts) if counts else 0.0,
            "wall_s": wall}


def figures(run: Path) -> dict:
    summary = {r["group"]: r for r in csv.DictReader(open(run / "summary.csv"))}
    replicas = list(csv.DictReader(open(run / "replicas.csv")))
    out: dict = {}
    for g in COMPARED:
        s = summary[g]
        out[g] = (f"{float(s['ratio_to_baseline']):.3f}× [{float(s['ratio_ci_low']):.2f}–"
                  f"{float(s['ratio_ci_high']):.2f}] p {float(s['p_holm']):.2g}")
    for g in ("glibc", "mimalloc-2.0.9"):
        v = [float(r["steady_mean_mb"]) for r in replicas if r["group"] == g]
        out[f"cv {g}"] = f"{st.stdev(v) / st.mean(v):.1%} ({min(v):.0f}–{max(v):.0f} MB, n {len(v)})"
    printed = (run.parent / "stdout.txt").read_text() if (run.parent / "stdout.txt").exists() else ""
    m = re.search(r"cpu-saturated: load average was ([\d.]+)", printed)
    out["cpu-saturated"] = f"yes (machine load {m.group(1)})" if m else ("no" if printed else "?")
    out.update(glibc_spread(run / "run.db"))
    return out


def glibc_spread(db: Path) -> dict:
    store = Store.open_readonly(db)
    series: dict[str, list[float]] = {}
    for s in store.samples_by_time():
        if s["grp"] == "glibc" and s["phase"] == "load":
            series.setdefault(s["replica"], []).append(s["rss_kb"] / 1024)
    means = [st.mean(v) for v in series.values()]
    ses = []
    for v in series.values():
        blocks = [st.mean(v[i:i + 5]) for i in range(0, len(v) - 4, 5)]
        ses.append(st.stdev(blocks) / len(blocks) ** 0.5)
    h1 = [st.mean(v[: len(v) // 2]) for v in series.values()]
    h2 = [st.mean(v[len(v) // 2:]) for v in series.values()]
    return {"glibc spread": f"replica SD {st.stdev(means):.1f} MB, SE of one replica's mean {st.mean(ses):.1f} MB, "
                            f"halves r {st.correlation(h1, h2):.2f}"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=0)
    ap.add_argument("--seconds", type=int, default=270, help="the demo's --seconds (the part gets its share)")
    ap.add_argument("-o", "--output", type=Path, default=Path("runs") / f"main-job-{os.getpid()}")
    ap.add_argument("--read", nargs="*", type=Path, default=[], help="existing run directories (…/tor-dircache/run)")
    a = ap.parse_args()
    if not a.runs and not a.read:
        ap.error("give --runs N or --read RUN...")
    for i in range(a.runs):
        out = a.output / f"run{i + 1}"
        print(f"run {i + 1}/{a.runs}: {out} ({int(a.seconds * DEMOS[0][2])} s)", flush=True)
        load = run_part(out, a.seconds)
        print(f"  {figures(out / 'run')} own CPU {load['cpu_share']:.2f} of the cores, own load "
              f"{load['own_load']:.1f} (of it in D state {load['own_d']:.2f}), wall {load['wall_s']:.0f} s", flush=True)
    for run in a.read:
        print(f"{run}: {figures(run)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
