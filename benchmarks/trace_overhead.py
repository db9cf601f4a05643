"""Trace recorder and replayer: recording slowdown (vs uninstrumented and vs heaptrack), bytes per
event on disk, and replay speed against the same operations issued directly in a loop.

    python benchmarks/trace_overhead.py [--repeat 3] [--baseline-tracer OLD/liballoclab_trace.so]

--baseline-tracer records every program with a second recorder too (e.g. the previous format's,
built from an older commit), in the same rounds, and reports its bytes per event and slowdown
beside the current one's ("base_*" fields).

heaptrack comes from Debian (apt-get install heaptrack); without it that column is empty.
Wall times are medians of --repeat runs, side by side in one session; compare ratios, not seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from trace_workloads import PACED, RECORDED

from alloclab.native import build
from alloclab.run import trace

CPU: list[float] = []  # CPU seconds (user + sys, all threads) of the last command run


def wall(cmd: list[str], env: dict | None = None) -> float:
    """Wall seconds of one command; its CPU seconds go to CPU (on a saturated machine the CPU
    ratio is the steadier figure: the recorder's writer thread is counted in it)."""
    t = time.perf_counter()
    proc = subprocess.Popen(
        cmd, env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd)
    CPU.append(usage.ru_utime + usage.ru_stime)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", help="run only the programs whose name contains this")
    ap.add_argument("--replay-max-events", type=int, help="replay only traces of at most this many events")
    ap.add_argument(
        "--no-heaptrack", action="store_true", help="skip heaptrack (its figures are in benchmarks/README.md)"
    )
    ap.add_argument("--baseline-tracer", help="a second liballoclab_trace.so to record with, side by side")
    args = ap.parse_args()
    print(json.dumps({"load_average": os.getloadavg()}), flush=True)
    tracer = str(build.program("liballoclab_trace.so"))
    heaptrack = shutil.which("heaptrack")
    out = {}
    with tempfile.TemporaryDirectory() as d:
        for name, (prog, argv) in RECORDED.items():
            if args.only and args.only not in name:
                continue
            cmd = [str(build.program(prog)), *argv]
            path = Path(d) / "t.trace"
            base_path = Path(d) / "base.trace"
            plain, recorded, heap, plain_cpu, recorded_cpu, base, base_cpu = [], [], [], [], [], [], []
            for _ in range(args.repeat):
                plain.append(wall(cmd))
                plain_cpu.append(CPU[-1])
                recorded.append(wall(cmd, {"LD_PRELOAD": tracer, "ALLOCLAB_TRACE_FILE": str(path)}))
                recorded_cpu.append(CPU[-1])
                if args.baseline_tracer:
                    base.append(wall(cmd, {"LD_PRELOAD": args.baseline_tracer, "ALLOCLAB_TRACE_FILE": str(base_path)}))
                    base_cpu.append(CPU[-1])
                if heaptrack and not args.no_heaptrack and not name.startswith(PACED):
                    heap.append(wall([heaptrack, "-o", str(Path(d) / "h"), *cmd]))
                    for f in Path(d).glob("h*"):
                        f.unlink()
            info = trace.info(path, points=2)
            replayed = args.replay_max_events is None or info["events"] <= args.replay_max_events
            direct = (
                statistics.median(trace.replay(path, speed=0, direct=True)["ops_per_s"] for _ in range(args.repeat))
                if replayed
                else None
            )
            threaded = (
                statistics.median(trace.replay(path, speed=0)["ops_per_s"] for _ in range(args.repeat))
                if replayed
                else None
            )
            row = {
                "events": info["events"],
                "bytes_per_event": round(path.stat().st_size / info["events"], 2),
                "plain_s": round(statistics.median(plain), 3),
                "record_slowdown": None
                if name.startswith(PACED)
                else round(statistics.median(recorded) / statistics.median(plain), 2),
                "record_cpu_ratio": None
                if name.startswith(PACED)
                else round(statistics.median(recorded_cpu) / statistics.median(plain_cpu), 2),
                "heaptrack_slowdown": round(statistics.median(heap) / statistics.median(plain), 1) if heap else None,
                "replay_ops_per_s": round(threaded) if replayed else None,
                "direct_ops_per_s": round(direct) if replayed else None,
                "replay_vs_direct": round(threaded / direct, 2) if replayed else None,
            }
            if base:
                base_events = trace.info(base_path, points=2)["events"]
                row["base_bytes_per_event"] = round(base_path.stat().st_size / base_events, 2)
                if not name.startswith(PACED):
                    row["base_record_slowdown"] = round(statistics.median(base) / statistics.median(plain), 2)
                    row["base_record_cpu_ratio"] = round(statistics.median(base_cpu) / statistics.median(plain_cpu), 2)
            out[name] = row
            print(json.dumps({name: row}), flush=True)
    print(json.dumps({"load_average": os.getloadavg()}), flush=True)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
