"""Does the main job reach its verdicts every run, within its time and the machine?

    python benchmarks/main_job.py --runs 10 [-o DIR]                   # the real demo, `alloclab demo`, as root
    python benchmarks/main_job.py --model --runs 5 [--seconds 270]     # the tor-dircache model part of `demo --model`
    python benchmarks/main_job.py --read RUN [RUN ...]                 # figures of existing model run directories

The real demo (default): `alloclab demo -o DIR/runN` one run at a time, at normal priority (the
runs are the measurement; give the machine to them: a quiet machine is the goal's condition). Per
run: the wall time of the whole command (provisioning, network set-up, run, report), the set-up's
share of it (command start to the relays' start, and the authorities' consensus wait within it),
the relays' warm-up (held until they hold the directory),
how the run ended (every comparison decided at a look of the sequential rule, or the cap, with what
the last look left open), each group's ratio to glibc with its CI
and Holm p, whether mimalloc 3.0.1 is shown above 2.0.9 (no shared letter), whether the report
printed the cpu-saturated warning, the machine's 1-minute load average (median and peak over the
command, sampled every 0.5 s: other people's work shows here) and the run's own load (its
runnable + D-state threads). Then the goals of issue 50 run by run: total <= 300 s, no
cpu-saturated warning, mimalloc 2.0.9 and jemalloc each <= 0.6x glibc, 3.0.1 above 2.0.9, every
comparison significant after Holm, and the run stopped because every comparison was decided.

--model: the tor-dircache part of `alloclab demo --model` alone (the experiment file `alloclab demo
--model` writes for --seconds of comparisons, via commands/demo.py's experiment_text). Per run:
mimalloc 2.0.9's and jemalloc 5.3.0's ratio to glibc, CI and Holm p; the replica CV of glibc's and
mimalloc 2.0.9's steady means; the run's own CPU share (its processes' user + sys seconds / wall
seconds / cores) and its own load (mean count of its threads that are runnable or in D state,
sampled every 0.5 s: what the run adds to the load average that the cpu-saturated warning reads);
whether the run printed that warning. With --read, the spread's sources for glibc: the SE of a
replica's steady mean (blocks of 5 samples) against the replica-to-replica SD, and the correlation
of each replica's first and second half of the window (a persistent per-process level). See
benchmarks/README.md "The main job".
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import statistics as st
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from alloclab.commands.demo import DEMOS, experiment_text
from alloclab.store import Store

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


def watched(argv: list[str], log: Path) -> dict:
    """Run `argv` to its end (output to `log`); its wall time, CPU share, own load and the machine's load."""
    before, t0, t0_wall = os.times(), time.monotonic(), time.time()
    counts: list[tuple[int, int]] = []
    machine: list[float] = []
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        while proc.poll() is None:
            counts.append(tree_threads_busy(proc.pid))
            machine.append(os.getloadavg()[0])
            time.sleep(0.5)
    wall, after = time.monotonic() - t0, os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return {
        "cpu_share": cpu / wall / (os.cpu_count() or 1),
        "own_load": st.mean(r + d for r, d in counts) if counts else 0.0,
        "own_d": st.mean(d for _, d in counts) if counts else 0.0,
        "load_median": st.median(machine) if machine else 0.0,
        "load_max": max(machine, default=0.0),
        "wall_s": wall,
        "exit": proc.returncode,
        "t0_wall": t0_wall,
    }


def run_part(out: Path, seconds: int) -> dict:
    label, template, share = DEMOS[0]
    out.mkdir(parents=True)
    exp = out / "experiment.toml"
    exp.write_text(experiment_text(template, int(seconds * share)))
    return watched([str(ROOT / ".venv/bin/alloclab"), "run", str(exp), "-o", str(out / "run")], out / "stdout.txt")


def run_demo(out: Path) -> dict:
    """One `alloclab demo`, watched; its figures and the goals of issue 50."""
    out.parent.mkdir(parents=True, exist_ok=True)
    log = out.parent / f"{out.name}.txt"
    got = watched([str(ROOT / ".venv/bin/alloclab"), "demo", "-o", str(out)], log)
    printed = log.read_text()
    got["saturated"] = "cpu-saturated" in printed
    m = re.search(r"run ended: (.*?); data\s+in", printed, re.S)
    got["ended"] = " ".join(m.group(1).split()) if m else f"exit {got['exit']}"
    summary = out / "run" / "summary.csv"
    rows = {r["group"]: r for r in csv.DictReader(open(summary))} if summary.is_file() else {}
    got["groups"] = {
        g: (
            float(r["ratio_to_baseline"]),
            float(r["ratio_ci_low"]),
            float(r["ratio_ci_high"]),
            float(r["p_holm"]),
            r["letters"],
        )
        for g, r in rows.items()
        if r["ratio_to_baseline"]
    }
    got["glibc_mb"] = float(rows["glibc"]["level_mb"]) if "glibc" in rows else None
    got["setup_s"], got["consensus_s"], got["warmup_s"], got["how"] = None, None, None, ""
    if (out / "run" / "run.db").is_file():
        store = Store.open_readonly(out / "run" / "run.db")
        started = store.meta().get("started_at")
        got["warmup_s"] = json.loads(store.meta().get("phases", "{}")).get(
            "warmup"
        )  # held while relays fetch the directory
        got["setup_s"] = float(started) - got["t0_wall"] if started else None
        waited = [re.search(r"after (\d+) s", e["description"]) for e in store.events(kinds=["tor_consensus"])]
        got["consensus_s"] = float(waited[0].group(1)) if waited and waited[0] else None
        store.close()
    how = re.search(r"^(stopped as soon as every comparison was decided|ran to the cap .*?)(:| —)", printed, re.M)
    got["how"] = how.group(0) if how else ""
    g = got["groups"]
    old, new = g.get("mimalloc-2.0.9"), g.get("mimalloc-3.0.1")
    got["goals"] = {
        "total <= 300 s": got["wall_s"] <= 300,
        "no cpu-saturated": not got["saturated"],
        "2.0.9 and jemalloc <= 0.6x": all(k in g and g[k][0] <= 0.6 for k in ("mimalloc-2.0.9", "jemalloc-5.3.0")),
        "3.0.1 above 2.0.9": bool(old and new and new[0] > old[0] and not set(old[4]) & set(new[4])),
        "every comparison significant": bool(g) and all(v[3] < 0.05 for v in g.values()),
        "stopped: every comparison decided": got["how"].startswith("stopped as soon as every comparison was decided"),
    }
    return got


def figures(run: Path) -> dict:
    summary = {r["group"]: r for r in csv.DictReader(open(run / "summary.csv"))}
    replicas = list(csv.DictReader(open(run / "replicas.csv")))
    out: dict = {}
    for g in COMPARED:
        s = summary[g]
        out[g] = (
            f"{float(s['ratio_to_baseline']):.3f}× [{float(s['ratio_ci_low']):.2f}–"
            f"{float(s['ratio_ci_high']):.2f}] p {float(s['p_holm']):.2g}"
        )
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
        blocks = [st.mean(v[i : i + 5]) for i in range(0, len(v) - 4, 5)]
        ses.append(st.stdev(blocks) / len(blocks) ** 0.5)
    h1 = [st.mean(v[: len(v) // 2]) for v in series.values()]
    h2 = [st.mean(v[len(v) // 2 :]) for v in series.values()]
    return {
        "glibc spread": f"replica SD {st.stdev(means):.1f} MB, SE of one replica's mean {st.mean(ses):.1f} MB, "
        f"halves r {st.correlation(h1, h2):.2f}"
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=0)
    ap.add_argument("--model", action="store_true", help="the tor-dircache model part instead of the real demo")
    ap.add_argument(
        "--seconds", type=int, default=270, help="--model: the two comparisons' length (the part gets its share)"
    )
    ap.add_argument("-o", "--output", type=Path, default=Path("runs") / f"main-job-{os.getpid()}")
    ap.add_argument(
        "--read", nargs="*", type=Path, default=[], help="existing model run directories (…/tor-dircache/run)"
    )
    a = ap.parse_args()
    if not a.runs and not a.read:
        ap.error("give --runs N or --read RUN...")
    met: dict[str, int] = {}
    for i in range(a.runs):
        out = a.output / f"run{i + 1}"
        if not a.model:
            print(f"run {i + 1}/{a.runs}: alloclab demo -o {out}", flush=True)
            r = run_demo(out)
            ratios = ", ".join(f"{g} {v[0]:.2f}× [{v[1]:.2f}–{v[2]:.2f}] p {v[3]:.2g}" for g, v in r["groups"].items())
            setup = (
                f"set-up {r['setup_s']:.0f} s (consensus after {r['consensus_s'] or 0:.0f} s), relays' warm-up "
                f"{r['warmup_s'] or 0:.0f} s"
                if r["setup_s"] is not None
                else "no run"
            )
            print(
                f"  total {r['wall_s']:.0f} s (exit {r['exit']}), {setup}; {r['ended']}; glibc {r['glibc_mb'] or 0:.0f} MB; {ratios}; "
                f"cpu-saturated {'yes' if r['saturated'] else 'no'}; machine load {r['load_median']:.1f} median, "
                f"{r['load_max']:.1f} peak; own load {r['own_load']:.1f}, own CPU {r['cpu_share']:.2f} of the cores",
                flush=True,
            )
            print("  goals: " + ", ".join(f"{k} {'yes' if ok else 'NO'}" for k, ok in r["goals"].items()), flush=True)
            for k, ok in r["goals"].items():
                met[k] = met.get(k, 0) + ok
            met["all"] = met.get("all", 0) + all(r["goals"].values())
            continue
        print(f"run {i + 1}/{a.runs}: {out} ({int(a.seconds * DEMOS[0][2])} s)", flush=True)
        load = run_part(out, a.seconds)
        print(
            f"  {figures(out / 'run')} own CPU {load['cpu_share']:.2f} of the cores, own load "
            f"{load['own_load']:.1f} (of it in D state {load['own_d']:.2f}), wall {load['wall_s']:.0f} s",
            flush=True,
        )
    if met:
        print(f"goals met in {a.runs} runs: " + ", ".join(f"{k} {n}/{a.runs}" for k, n in met.items()))
    for run in a.read:
        print(f"{run}: {figures(run)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
