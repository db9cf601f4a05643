"""Replay speed: the threaded replayer against the same operations issued directly in a loop.

    python benchmarks/replay_speed.py [--pairs 7] [--only NAME] [--replayer PATH] [--keep DIR]

Every built-in workload (up to 4 threads) and the bare malloc/free loops are recorded once; then
each trace is replayed as ABAB pairs — `replay --direct` (one thread, no turns: the yardstick),
then `replay` (one thread per recorded thread, --speed 0) — so both sides of a pair see the same
machine load. Per workload: the median and the minimum over the pairs of the wall-time ratio
(replay ops/s / direct ops/s; target >= 0.8), and the median CPU-time ratio (direct CPU / replay
CPU over the replay phase only, all threads: on a saturated machine the steadier figure).
Also: the share of operations on objects touched by more than one thread (those wait for their
turn; all others run without synchronisation), how many of those found their turn not yet come
(waits), how many futex sleeps that took, and the time spent waiting as a share of threads x wall
time. The A/A control (a second direct run in each pair, its ratio to the first) shows how far
this machine's load alone moves a ratio. Load average per workload, before and after.

--replayer runs another build of native/replay.c (e.g. an older commit's) on the same traces;
one without cpu_seconds in its output gets the CPU of the whole process (reading included).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

from trace_workloads import REPLAYED

from alloclab.native import build


def run(cmd: list[str]) -> tuple[dict, float]:
    """The replayer's JSON line and the process's CPU seconds."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.stdout.read(), proc.stderr.read()  # the replayer writes one line to each at most
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {err.strip()[-300:]}")
    line = next((ln for ln in out.splitlines() if ln.startswith("{")), "{}")
    return json.loads(line), usage.ru_utime + usage.ru_stime


def record(name: str, directory: Path) -> Path:
    path = directory / f"{name}.trace"
    if path.exists():
        return path
    prog, argv = REPLAYED[name]
    env = {"LD_PRELOAD": str(build.program("liballoclab_trace.so")), "ALLOCLAB_TRACE_FILE": str(path)}
    subprocess.run(
        [str(build.program(prog)), *argv],
        env={**os.environ, **env},
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return path


def once(replayer: str, path: Path, *mode: str) -> dict:
    """One replay; CPU seconds of the replay phase (or, from an older replayer, of the process)."""
    result, process_cpu = run([replayer, str(path), "--speed", "0", *mode])
    result.setdefault("cpu_seconds", process_cpu)
    return result


def measure(replayer: str, path: Path, pairs: int, control: bool) -> dict:
    wall, cpu, same, last = [], [], [], {}
    for _ in range(pairs):
        direct = once(replayer, path, "--direct")
        threaded = once(replayer, path)
        if control:  # A/A: a second direct run, its ratio to the first is this machine's noise
            same.append(once(replayer, path, "--direct")["ops_per_s"] / direct["ops_per_s"])
        # (a replayer before issue 16 counted thread-exit markers as --direct operations)
        if (
            abs(threaded["operations"] - direct["operations"]) > threaded["threads"]
            or threaded["live_bytes_end"] != direct["live_bytes_end"]
        ):
            raise SystemExit(f"{path.name}: replay and direct disagree: {threaded} vs {direct}")
        wall.append(threaded["ops_per_s"] / direct["ops_per_s"])
        cpu.append(direct["cpu_seconds"] / max(threaded["cpu_seconds"], 1e-9))
        last = threaded
    ops = last["operations"]
    row = {
        "threads": last["threads"],
        "operations": ops,
        "wall_ratio_median": round(statistics.median(wall), 2),
        "wall_ratio_min": round(min(wall), 2),
        "wall_ratios": [round(x, 2) for x in wall],
        "cpu_ratio_median": round(statistics.median(cpu), 2),
    }
    if same:
        row |= {
            "direct_vs_direct_median": round(statistics.median(same), 2),
            "direct_vs_direct_min": round(min(same), 2),
        }
    if "shared_ops" in last:
        row |= {
            "shared_ops_pct": round(100 * last["shared_ops"] / max(ops, 1), 1),
            "waits_per_1k_ops": round(1000 * last["waits"] / max(ops, 1), 2),
            "sleeps_per_1k_ops": round(1000 * last["sleeps"] / max(ops, 1), 2),
            "waited_s_per_thread_s": round(last["waited_s"] / max(last["seconds"] * last["threads"], 1e-9), 3),
        }
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=7, help="ABAB pairs per workload (medians; at least 5)")
    ap.add_argument("--only", help="only the workloads whose name contains this")
    ap.add_argument("--replayer", help="path of the replay program to measure (default: this checkout's)")
    ap.add_argument("--keep", type=Path, help="record traces into (and reuse them from) this directory")
    ap.add_argument("--no-control", action="store_true", help="skip the A/A control (a second direct run per pair)")
    args = ap.parse_args()
    if args.pairs < 1:
        ap.error("--pairs must be at least 1")
    replayer = args.replayer or str(build.program("replay"))
    print(json.dumps({"load_average": os.getloadavg(), "replayer": replayer}), flush=True)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        directory = args.keep or Path(tmp)
        directory.mkdir(parents=True, exist_ok=True)
        for name in REPLAYED:
            if args.only and args.only not in name:
                continue
            row = measure(replayer, record(name, directory), args.pairs, not args.no_control)
            row["load_average"] = [round(x, 1) for x in os.getloadavg()]
            out[name] = row
            print(json.dumps({name: row}), flush=True)
    worst = min((r["wall_ratio_min"] for r in out.values()), default=None)
    print(
        json.dumps(
            {
                "load_average": os.getloadavg(),
                "worst_wall_ratio": worst,
                "all_medians_at_least_0.8": all(r["wall_ratio_median"] >= 0.8 for r in out.values()),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
