"""Fleet collector cost: `fleet collect` over 200 and 2,000 real systemd units at a 1 s interval.

    python benchmarks/fleet_collector.py [--units 200 2000 --seconds 60 --interval 1 --crashing 50]

The units are real `Type=simple` services of a real `systemd --user` manager (started as the tests
start it: tests/systemd_user.py, a private mount namespace, its own cgroup), instances of one
template running `memhog 1` (1 MiB touched, then pause()); `--crashing N` adds N instances of a
second template that exits after 0.5 s with Restart=always (a crash loop, as in issue 25). The plan
is made by `fleet plan`'s code; the collector is `collector.collect` exactly as `fleet collect`
runs it, in a child process (RUSAGE_SELF + RUSAGE_CHILDREN, so `systemctl` children count),
interval 1 s, full tier within its default budget (2% of a core, the same as `run`'s sampler).
Measured per size: CPU share of one core (collector + its children, start-up included), the
steady-state CPU per tick (median over the ticks after the third, process CPU of the collector;
the cheap tier is that less the full tier's mean per tick), the full tier's share,
tick duration (median, p99), tick lateness against the fixed schedule (p99, as a share of the
interval), systemd questions per tick, and the C floor of the cheap tier (benchmarks/native/sampler_floor.c
-c: each unit's cgroup.procs, then stat + statm of its processes; open/read/close, no Python).
Also the kernel's cost of each read alone (sampler_floor -b: cgroup.procs, stat, statm, opened
afresh and through a kept descriptor). Prints one JSON object per size, then one summary line:

    SUMMARY 2000 units, 1 s interval, load 12.5: cheap tier 4.1% of a core (20.5 us a unit; C floor
    26.1 us = 5.2%, ratio 0.79); full tier 2.0%; ticks on time 59/60; p99 lateness 1.0% of the interval
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from native_helpers import build_helpers  # benchmarks/ is this script's directory

from alloclab.fleet import collector, fleetread, systemd
from alloclab.fleet.plan import load_plan, make_plan
from tests.systemd_user import Unavailable, user_manager


def child(args) -> None:
    """The collector itself, in its own process, so its CPU (and its children's) is its own."""
    units = systemd.units_from("user", Path(args.root))
    plan = load_plan(Path(args.plan))
    t0 = time.monotonic()
    if os.environ.get("ALLOCLAB_BENCH_PROFILE"):  # where the time goes: cProfile to that file
        import cProfile

        with cProfile.Profile(time.process_time) as prof:  # CPU, not wall: the host is shared
            result = collector.collect(units, plan, Path(args.run), args.interval, args.seconds, say=lambda s: None)
        prof.dump_stats(os.environ["ALLOCLAB_BENCH_PROFILE"])
    else:
        result = collector.collect(units, plan, Path(args.run), args.interval, args.seconds, say=lambda s: None)
    wall = time.monotonic() - t0
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    print(
        json.dumps(
            {
                "wall_s": wall,
                "cpu_self_s": me.ru_utime + me.ru_stime,
                "cpu_children_s": kids.ru_utime + kids.ru_stime,
                **{
                    k: result[k]
                    for k in (
                        "ticks",
                        "lateness",
                        "durations",
                        "tick_cpu",
                        "systemd_queries",
                        "full_tier_cpu_s",
                        "phase_cpu",
                    )
                },
            }
        )
    )


def start_units(names: list[str]) -> None:
    """Start them in chunks (no waiting on each job), then until all are active, start what is not
    (a busy manager can refuse a chunk: "Connection timed out")."""
    wanted = set(names)
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        out = subprocess.run(
            ["systemctl", "--user", "list-units", "--type=service", "--state=active", "--no-legend", "--plain"],
            capture_output=True,
            text=True,
        ).stdout
        missing = sorted(wanted - {line.split()[0] for line in out.splitlines() if line.strip()})
        if not missing:
            return
        for i in range(0, len(missing), 250):
            subprocess.run(["systemctl", "--user", "start", "--no-block", *missing[i : i + 250]], capture_output=True)
        time.sleep(2)
    raise RuntimeError("units did not all start in 900 s")


def native_read_cost(procs: list[str], rounds: int = 30) -> dict:
    """CPU of the native reader's call alone (and its records unpacked), µs a unit: cgroup.procs and
    stat read every tick, against every collector.MEMBERSHIP_SECONDS (statm alone in between), in
    alternating blocks so that the host's load falls on both alike."""
    every = max(1, round(collector.MEMBERSHIP_SECONDS / 1.0))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8 * len(procs) + 1024)), hard))
    out = {}
    readers = {}
    for name, n in (("membership_every_tick", 1), (f"membership_every_{every}_ticks", every)):
        r, why = fleetread.open_reader(4 * len(procs) + 64)
        if r is None:
            return {"unavailable": why}
        r.set_units(len(procs))
        r.membership_every(n)
        for i, path in enumerate(procs):
            r.set_unit(i, path)
        r.read()  # descriptors opened
        readers[name], out[name] = r, 0.0
    for _ in range(rounds // every):
        for name, r in readers.items():
            t0 = time.thread_time()
            for _ in range(every):
                r.read()
            out[name] += time.thread_time() - t0
    for r in readers.values():
        r.close()
    return {name: round(cpu / (rounds // every * every) / len(procs) * 1e6, 2) for name, cpu in out.items()}


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def measure(n: int, crashing: int, seconds: float, interval: float, helpers: Path, scratch: Path) -> dict:
    tag = uuid.uuid4().hex[:6]
    root = scratch / f"root-{n}"
    unit_dir = root / "etc" / "systemd" / "system"
    unit_dir.mkdir(parents=True)
    (unit_dir / f"bench{tag}@.service").write_text(f"[Service]\nType=simple\nExecStart={helpers / 'memhog'} 1\n")
    (unit_dir / f"crash{tag}@.service").write_text(
        "[Service]\nType=simple\nExecStart=/bin/sh -c 'sleep 0.5; exit 1'\n"
        "Restart=always\nRestartSec=0.5\nStartLimitIntervalSec=0\n"
    )
    names = [f"bench{tag}@{i}.service" for i in range(n)] + [f"crash{tag}@{i}.service" for i in range(crashing)]
    with user_manager(unit_dir, scratch):
        t0 = time.monotonic()
        start_units(names[:n])
        if crashing:
            subprocess.run(["systemctl", "--user", "start", "--no-block", *names[n:]], check=True)
        started_s = time.monotonic() - t0
        groups = scratch / "groups.toml"
        groups.write_text('name = "bench"\ncommand = ["/bin/true"]\n[[group]]\nname = "glibc"\nallocator = "glibc"\n')
        t0 = time.monotonic()
        # set-up only (the collector's child keeps the default bound): on a loaded host the
        # manager answered one `systemctl show` of 2,000 units after more than 30 s
        systemd.UNIT_STATES_TIMEOUT = 900.0
        plan = make_plan(systemd.units_from("user", root), f"*{tag}@*", groups, 1, scratch / f"plan-{n}.json")
        plan_s = time.monotonic() - t0
        run = scratch / f"run-{n}"
        proc = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                "--root",
                str(root),
                "--plan",
                str(plan.path),
                "--run",
                str(run),
                "--interval",
                str(interval),
                "--seconds",
                str(seconds),
            ],
            capture_output=True,
            text=True,
            timeout=seconds * 5 + 600,
        )
        if proc.returncode:
            raise RuntimeError(proc.stderr[-2000:])
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        state = systemd.units_from("user", root).unit_states(names[:n])  # (also set-up: the floor's files)
        procs = [files[0] for files in (systemd.cgroup_files(s.control_group) for s in state.values()) if files[0]]
        floor = json.loads(
            subprocess.run(
                [str(helpers / "sampler_floor"), "-c", "20", *procs], capture_output=True, text=True, check=True
            ).stdout
        )
        native = native_read_cost(procs)
        reads = json.loads(
            subprocess.run(
                [str(helpers / "sampler_floor"), "-b", "20", *procs], capture_output=True, text=True, check=True
            ).stdout
        )
    cpu = got["cpu_self_s"] + got["cpu_children_s"]
    cheap_cpu = cpu - got["full_tier_cpu_s"]
    floor_share = floor["unit_us"] * 1e-6 * n / interval
    late = got["lateness"]
    steady = got["tick_cpu"][3:] or got["tick_cpu"]  # after start-up (first verifications, rows)
    full_per_tick = got["full_tier_cpu_s"] / got["ticks"]
    return {
        "units": n,
        "crashing_units": crashing,
        "unit_type": "Type=simple (memhog 1 MiB)",
        "interval_s": interval,
        "seconds": round(got["wall_s"], 1),
        "ticks": got["ticks"],
        "load_average": os.getloadavg(),
        "start_units_s": round(started_s, 1),
        "plan_s": round(plan_s, 1),
        "cpu_share_of_one_core": round(cpu / got["wall_s"], 4),
        "slots": int(got["wall_s"] / interval),
        "ticks_on_time": sum(1 for x in late if x <= 0.1 * interval) + 1,
        "steady_tick_cpu_median_s": round(statistics.median(steady), 4),
        "steady_cheap_share_at_interval": round((statistics.median(steady) - full_per_tick) / interval, 4),
        "steady_cheap_us_per_unit": round((statistics.median(steady) - full_per_tick) / n * 1e6, 1),
        "steady_ratio_to_floor": round((statistics.median(steady) - full_per_tick) / n * 1e6 / floor["unit_us"], 2),
        "cpu_children_share": round(got["cpu_children_s"] / got["wall_s"], 4),
        "full_tier_share": round(got["full_tier_cpu_s"] / got["wall_s"], 4),
        "cheap_tier_share": round(cheap_cpu / got["wall_s"], 4),
        "cheap_us_per_unit": round(cheap_cpu / got["ticks"] / n * 1e6, 1),
        "floor_us_per_unit": round(floor["unit_us"], 1),
        "floor_share": round(floor_share, 4),
        "ratio_to_floor": round(cheap_cpu / got["ticks"] / n * 1e6 / floor["unit_us"], 2),
        "tick_s_median": round(statistics.median(got["durations"]), 4),
        "tick_s_p99": round(pct(got["durations"], 0.99), 4),
        "lateness_p99_share_of_interval": round(pct(late, 0.99) / interval, 4) if late else None,
        "lateness_max_s": round(max(late), 4) if late else None,
        # after the third tick, as the steady CPU: the first tick verifies every process (13 s at
        # 2,000 units and load 63), and the slots it overran count against the whole run's figures
        "steady_ticks_on_time": f"{sum(1 for x in late[3:] if x <= 0.1 * interval)}/{len(late[3:])}",
        "steady_lateness_p99_share_of_interval": round(pct(late[3:], 0.99) / interval, 4) if late[3:] else None,
        "systemd_queries_per_tick": round(got["systemd_queries"] / got["ticks"], 2),
        # where a steady tick's CPU went (medians after the third tick; read includes the full tier)
        "steady_phase_cpu_ms": {k: round(statistics.median(v[3:] or v) * 1e3, 1) for k, v in got["phase_cpu"].items()},
        "kernel_read_us_per_unit": reads,
        "native_read_us_per_unit": native,
    }


def summary(got: dict) -> str:
    """The figures the goal names, on one line (steady state: ticks after the third)."""
    late = got["lateness_p99_share_of_interval"]
    return (
        f"SUMMARY {got['units']} units"
        + (f" + {got['crashing_units']} crashing" if got["crashing_units"] else "")
        + f", {got['interval_s']:g} s interval, load {got['load_average'][0]:.1f}: cheap tier "
        f"{100 * got['steady_cheap_share_at_interval']:.2f}% of a core ({got['steady_cheap_us_per_unit']} us a unit; "
        f"C floor {got['floor_us_per_unit']} us = {100 * got['floor_share']:.1f}%, ratio {got['steady_ratio_to_floor']}); "
        f"full tier {100 * got['full_tier_share']:.1f}%; ticks on time {got['ticks_on_time']}/{got['slots']}; "
        f"p99 lateness {'-' if late is None else f'{100 * late:.1f}%'} of the interval (after the third tick: "
        f"{got['steady_ticks_on_time']} on time, p99 {100 * (got['steady_lateness_p99_share_of_interval'] or 0):.1f}%); "
        f"systemd questions {got['systemd_queries_per_tick']} a tick"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--units", type=int, nargs="+", default=[200, 2000])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--crashing", type=int, default=0, help="also run N crash-looping units")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    ap.add_argument("--plan", help=argparse.SUPPRESS)
    ap.add_argument("--run", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    signal.signal(
        signal.SIGTERM, lambda *a: sys.exit(143)
    )  # `timeout` and friends: clean up (manager, cgroups) on the way out
    helpers = build_helpers()
    scratch = Path(tempfile.mkdtemp(prefix=f"alloclab-fleet-bench-{os.getpid()}-"))
    try:
        for n in args.units:
            got = measure(n, args.crashing, args.seconds, args.interval, helpers, scratch)
            print(json.dumps(got, indent=2), flush=True)
            print(summary(got), flush=True)
    except Unavailable as exc:
        sys.exit(f"no systemd user manager here: {exc}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(helpers, ignore_errors=True)


if __name__ == "__main__":
    main()
