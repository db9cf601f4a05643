"""Calibration of the cpu-saturated rule (analysis/rules.py cpu_wait_share): a short real `alloclab
run` of the Tor directory-cache model, in one of four conditions, and what the store then says.

    python benchmarks/cpu_wait.py CASE [--seconds 60 --replicas 2 --hogs N --out DIR]
    python benchmarks/cpu_wait.py cost [--processes 200 --threads 12 --rounds 50]

CASE:
  alone        the run by itself;
  idle-hogs    beside one busy loop per core at SCHED_IDLE, a lower priority than the run's (this
               stands for "work at nice 19 beside a run at nice 0 with autogroup off": this
               script runs whole under `nice -n 19`, so its hogs go one step lower);
  equal-hogs   the run and two busy loops at the run's own nice, all pinned to one CPU (taskset),
               so the replicas share that core with two loops that never sleep;
  nice19-hogs  one busy loop per core at nice 19 in a session of its own: with autogroup off like
               idle-hogs; with autogroup on (Debian's default) each session gets an equal share
               whatever its nice, so the replicas are starved while the load looks moderate.

--own-cpu-cgroup runs the case inside a cgroup v1 `cpu` group of its own (cpu.shares 15, the weight of
nice 19, so it stays as polite as `nice -n 19`): the kernel's autogroup applies only to tasks in the
root cpu group, so inside it nice and SCHED_IDLE order the run and the hogs whatever
/proc/sys/kernel/sched_autogroup_enabled says (this script never changes that setting). With it,
--run-nice 0 runs `alloclab run` at nice 0 inside the group: "nice 19 hogs beside a run at nice 0"
as an operator has it, while the group as a whole weighs what one nice-19 process does.

Prints one JSON object: the kernel's autogroup setting, each replica's wait share over the compared
window (Σ waited / Σ (waited + run), from the store: analysis/cpuwait.py) and each group's median,
the CPU the replicas used, the host's median and peak 1-minute load over the window, the host's
CPU pressure (/proc/pressure/cpu "some", share of the run's wall time), the cores other work used
meanwhile (processes outside this script's tree, at a nice below this script's: with autogroup off
they come first), and which cpu warning the
new rule and the old load-average rule give. `cost` instead times the sampler's cheap tier (CPU of this thread) over --processes sleeping processes
of one thread and of --threads threads, without and with the schedstat read, and one PSI read
(cpu.pressure + cpu.stat) of this process's cgroup v2 where there is one.
Every process it starts is stopped before it returns.
Figures in benchmarks/README.md ("CPU wait: the cpu-saturated rule").
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from alloclab import sampler
from alloclab.analysis import analyse, cpuwait
from alloclab.analysis.rules import RULES
from alloclab.store import Store

CASES = ("alone", "idle-hogs", "equal-hogs", "nice19-hogs")
EXPERIMENT = """name = "cpu-wait-{case}"
replicas = {replicas}
interval = "1s"
baseline = "glibc"
seed = 7
metric = "rss"

[phases]
warmup = "{warmup}s"
load = "{load}s"

[workload]
name = "tor-dircache"
hour = 6

[[group]]
name = "glibc"
allocator = "glibc"

[[group]]
name = "jemalloc-5.3.0"
allocator = "jemalloc@5.3.0"
"""
LOOP = "while True: pass"


def cpu_by_process() -> dict[int, tuple[int, int, float]]:
    """pid -> (ppid, nice, CPU seconds) of every process on the host."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                raw = open(f"/proc/{name}/stat", "rb").read()
            except OSError:
                continue
            rest = raw[raw.rfind(b")") + 2:].split()
            out[int(name)] = (int(rest[1]), int(rest[16]), (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK"))
    return out


def other_work(before: dict, after: dict, wall: float) -> dict[str, float]:
    """Cores used during the run by processes outside this script's tree, by nice: above this
    script's nice they had priority over the replicas (with autogroup off)."""
    mine, todo = set(), [os.getpid()]
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in after.items():
        children.setdefault(ppid, []).append(pid)
    while todo:
        pid = todo.pop()
        mine.add(pid)
        todo.extend(children.get(pid, ()))
    own = os.nice(0)
    out = {"higher_priority_cores": 0.0, "same_or_lower_priority_cores": 0.0}
    for pid, (_, nice, cpu) in after.items():
        if pid in mine:
            continue
        used = cpu - (before[pid][2] if pid in before else 0.0)
        out["higher_priority_cores" if nice < own else "same_or_lower_priority_cores"] += used / wall
    return {k: round(v, 3) for k, v in out.items()}


def psi_some_us() -> int:
    with open("/proc/pressure/cpu") as f:
        return int(f.readline().rsplit("total=", 1)[1])


def start_hogs(case: str, cpu: int, count: int | None) -> list[subprocess.Popen]:
    ncpu = count or len(os.sched_getaffinity(0))
    if case == "idle-hogs":
        setup = lambda: os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))   # noqa: E731
        return [subprocess.Popen([sys.executable, "-c", LOOP], preexec_fn=setup) for _ in range(ncpu)]
    if case == "equal-hogs":
        setup = lambda: os.sched_setaffinity(0, {cpu})                                # noqa: E731
        return [subprocess.Popen([sys.executable, "-c", LOOP], preexec_fn=setup) for _ in range(count or 2)]
    if case == "nice19-hogs":
        setup = lambda: os.nice(19 - os.nice(0))                                      # noqa: E731
        return [subprocess.Popen([sys.executable, "-c", LOOP], preexec_fn=setup, start_new_session=True)
                for _ in range(ncpu)]
    return []


def old_rule(store: Store, start: float, end: float) -> str | None:
    """What the load-average rule (the fallback) says over the window."""
    ncpu = int(store.meta().get("ncpu", "0") or 0)
    limit = RULES["cpu_saturated_load_per_core"] * ncpu
    compared, whole = store.host_summary(start, end), store.host_summary()
    if compared["median_load1"] is not None and compared["median_load1"] > limit:
        return "cpu-saturated"
    return "cpu-burst" if whole["max_load1"] and whole["max_load1"] > limit else None


CPU_V1 = Path("/sys/fs/cgroup/cpu")


@contextlib.contextmanager
def own_cpu_cgroup(wanted: bool):
    """This process (and what it starts after) in a new cgroup v1 cpu group at nice 19's weight."""
    if not wanted:
        yield None
        return
    if not (CPU_V1 / "cpu.shares").exists():
        sys.exit(f"cpu_wait: no cgroup v1 cpu controller at {CPU_V1}; drop --own-cpu-cgroup")
    home = next(line.split(":", 2)[2].strip() for line in open("/proc/self/cgroup")
                if "cpu" in line.split(":", 2)[1].split(","))
    group = CPU_V1 / home.lstrip("/") / f"alloclab-cpuwait-{os.getpid()}-{secrets.token_hex(3)}"
    group.mkdir()
    try:
        (group / "cpu.shares").write_text("15")
        (group / "cgroup.procs").write_text(str(os.getpid()))
        yield str(group)
    finally:
        (CPU_V1 / home.lstrip("/") / "cgroup.procs").write_text(str(os.getpid()))
        deadline = time.monotonic() + 10
        while True:
            try:
                group.rmdir()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


def measure(case: str, seconds: float, replicas: int, out: Path, hogs: int | None = None,
            run_nice: int | None = None) -> dict:
    cpu = max(os.sched_getaffinity(0))
    exp = out / f"{case}.toml"
    warmup = max(5, int(seconds * 0.2))
    exp.write_text(EXPERIMENT.format(case=case, replicas=replicas, warmup=warmup, load=int(seconds) - warmup))
    run = out / f"run-{case}"
    alloclab = Path(sys.executable).with_name("alloclab")
    hogs = start_hogs(case, cpu, hogs)
    try:
        psi0, t0, procs0 = psi_some_us(), time.monotonic(), cpu_by_process()
        def setup() -> None:
            if case == "equal-hogs":
                os.sched_setaffinity(0, {cpu})
            if run_nice is not None:
                os.setpriority(os.PRIO_PROCESS, 0, run_nice)
        pin = setup
        subprocess.run([str(alloclab), "run", str(exp), "-o", str(run), "--no-report"], check=True,
                       stdout=subprocess.DEVNULL, preexec_fn=pin)
        psi = (psi_some_us() - psi0) / 1e6 / (time.monotonic() - t0)
        others = other_work(procs0, cpu_by_process(), time.monotonic() - t0)
    finally:
        for h in hogs:
            h.send_signal(signal.SIGKILL)
            h.wait()
    store = Store.open_checked(run)
    a = analyse(store)
    w = a.window
    if w is None:
        sys.exit(f"cpu_wait: the run in {run} has no comparison window; give more --seconds")
    waits = cpuwait.span_waits(store, store.replicas(), w.start, w.end)
    compared = store.host_summary(w.start, w.end)
    kinds = [x.kind for x in a.warnings if x.kind in ("cpu-saturated", "cpu-burst")]
    return {
        "case": case, "hogs": len(hogs), "autogroup": Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip(),
        "nice": os.nice(0), "run_nice": run_nice if run_nice is not None else os.nice(0), "window_s": round(w.end - w.start, 1),
        "replica_wait_share": {x.replica: round(x.share, 3) for x in waits},
        "group_median_wait_share": {g: round(m, 3) for g, m in cpuwait.group_medians(waits).items()},
        "replica_cores": {x.replica: round(x.ran_s / (w.end - w.start), 3) for x in waits},
        "sources": sorted({s for x in waits for s in x.sources}),
        "load1_median": compared["median_load1"], "load1_max": compared["max_load1"],
        "host_cpu_pressure_some_share": round(psi, 3), "other_work": others,
        "warning_new_rule": kinds, "warning_load_rule": old_rule(store, w.start, w.end),
    }


SLEEPER = "import threading, time\nfor _ in range({n} - 1): threading.Thread(target=time.sleep, args=(1e6,), daemon=True).start()\nprint('ready', flush=True)\ntime.sleep(1e6)"


def cost(processes: int, threads: int, rounds: int) -> dict:
    out: dict = {"processes": processes, "threads": threads, "rounds": rounds}
    for n in (1, threads):
        procs = [subprocess.Popen([sys.executable, "-c", SLEEPER.format(n=n)], stdout=subprocess.PIPE, text=True)
                 for _ in range(processes)]
        try:
            for p in procs:
                assert p.stdout.readline().strip() == "ready"
            pids = [p.pid for p in procs]
            for schedstat in (False, True):
                sampler.sample_processes(pids, None, schedstat=schedstat)          # descriptors opened
                t0 = time.thread_time()
                for _ in range(rounds):
                    sampler.sample_processes(pids, None, schedstat=schedstat)
                us = (time.thread_time() - t0) / rounds / processes * 1e6
                out[f"cheap_us_{n}_threads" + ("_schedstat" if schedstat else "")] = round(us, 1)
            out[f"schedstat_tick_ms_{processes}x{n}_threads"] = round(
                (out[f"cheap_us_{n}_threads_schedstat"] - out[f"cheap_us_{n}_threads"]) * processes / 1000, 2)
        finally:
            for p in procs:
                p.kill()
                p.wait()
    rel = next((line.split(":", 2)[2].strip() for line in open("/proc/self/cgroup") if line.startswith("0::")), None)
    for mount in ("/sys/fs/cgroup/unified", "/sys/fs/cgroup"):
        cg = sampler.Cgroup(Path(mount + (rel or "/")), 2)
        if rel is not None and cg.has_cpu_pressure and cg.cpu_wait() is not None:
            t0 = time.thread_time()
            for _ in range(rounds * 20):
                cg.cpu_wait()
            out["psi_read_us"] = round((time.thread_time() - t0) / rounds / 20 * 1e6, 1)
            break
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case", choices=CASES + ("cost",))
    ap.add_argument("--seconds", type=float, default=60.0, help="warm-up + load of the run")
    ap.add_argument("--replicas", type=int, default=2, help="replicas per group (two groups)")
    ap.add_argument("--out", type=Path, help="keep the run here (default: a temporary directory, removed)")
    ap.add_argument("--hogs", type=int, help="busy loops (default: one per core; equal-hogs: two)")
    ap.add_argument("--own-cpu-cgroup", action="store_true", help="run the case in a cgroup v1 cpu group of its own")
    ap.add_argument("--run-nice", type=int, help="with --own-cpu-cgroup: the run's nice inside the group (the group "
                    "keeps nice 19's weight towards everything else)")
    ap.add_argument("--processes", type=int, default=200, help="cost: sleeping processes")
    ap.add_argument("--threads", type=int, default=12, help="cost: threads of each in the second pass")
    ap.add_argument("--rounds", type=int, default=50, help="cost: ticks timed")
    args = ap.parse_args()
    if args.run_nice is not None and not args.own_cpu_cgroup:
        sys.exit("cpu_wait: --run-nice only with --own-cpu-cgroup (outside it the run stays at this script's nice)")
    if args.case == "cost":
        print(json.dumps(cost(args.processes, args.threads, args.rounds)))
        return
    with own_cpu_cgroup(args.own_cpu_cgroup) as group, tempfile.TemporaryDirectory(
            prefix=f"alloclab-cpu-wait-{os.getpid()}-") as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        print(json.dumps({**measure(args.case, args.seconds, args.replicas, out, args.hogs, args.run_nice), "cpu_cgroup": group}))


if __name__ == "__main__":
    main()
