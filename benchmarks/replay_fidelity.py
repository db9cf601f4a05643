"""Replay fidelity over time: RSS of a program and of its paced replay (speed 1), both under jemalloc
with decay 0 (freed pages go back at once, so RSS shows the sawtooth's teeth), read every 20 ms.

    python benchmarks/replay_fidelity.py [--reps 5] [--mb 48] [--load 4]

Per repetition: the correlation r of the two RSS curves on the original's clock, taken at the best
start-up delay of the replay between 0 and 0.4 s (the replayer reads and orders the trace first;
a tooth is 1 s, so a wrong phase cannot line up); the replay's peak RSS (ru_maxrss) over the
original's; the load average before. The default test run asserts only the peak ratio
(tests/integration/test_trace.py::test_rss_of_a_replay_tracks_the_original): the curve's shape
depends on when each process gets the CPU, and r fell to 0.894 on a loaded machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from alloclab.native import build
from alloclab.run import trace


def rss_curve(cmd: list[str], env: dict) -> tuple[np.ndarray, np.ndarray, int]:
    """(seconds since start, RSS pages) read every 20 ms, each placed at the time it was taken (on a
    busy machine a reading comes late), and the process's peak RSS in KB."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, env=env)
    times, values = [], []
    while True:
        done, status, usage = os.wait4(p.pid, os.WNOHANG)  # wait4, not poll: its rusage has the peak
        if done:
            p.returncode = os.waitstatus_to_exitcode(status)
            break
        try:
            values.append(int(open(f"/proc/{p.pid}/statm").read().split()[1]))
            times.append(time.monotonic() - t0)
        except (OSError, IndexError):
            pass
        time.sleep(0.02)
    return np.array(times), np.array(values, dtype=float), usage.ru_maxrss


def correlation(original, replayed) -> float:
    grid = np.linspace(0.0, original[0][-1], 100)
    a = np.interp(grid, original[0], original[1])
    return max(
        float(np.corrcoef(a, np.interp(grid + lag, replayed[0], replayed[1]))[0, 1])
        for lag in np.arange(0.0, 0.41, 0.02)
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--mb", type=int, default=48)
    ap.add_argument("--load", type=float, default=4)
    ap.add_argument("--jemalloc", default=next(iter(sorted(Path("/usr/lib").glob("*/libjemalloc.so.2"))), None))
    args = ap.parse_args()
    argv = [
        str(build.program("stressors")),
        "--pattern",
        "sawtooth",
        "--load",
        f"{args.load:g}",
        "--period",
        "1",
        "--mb",
        str(args.mb),
    ]
    env = {**os.environ, "LD_PRELOAD": str(args.jemalloc), "MALLOC_CONF": "dirty_decay_ms:0,muzzy_decay_ms:0"}
    rs, peaks = [], []
    with tempfile.TemporaryDirectory(prefix="replay-fidelity-") as tmp:
        path = Path(tmp) / "saw.trace"
        trace.record(path, argv)
        for i in range(args.reps):
            load = os.getloadavg()[0]
            original = rss_curve(argv, env)
            replayed = rss_curve([str(build.program("replay")), str(path), "--speed", "1"], env)
            r, peak = correlation(original, replayed), replayed[2] / original[2]
            rs.append(r)
            peaks.append(peak)
            print(
                f"rep {i + 1}: r = {r:.3f}, replay peak / original peak = {peak:.3f} "
                f"({replayed[2] / 1024:.1f} / {original[2] / 1024:.1f} MB), load {load:.1f}",
                flush=True,
            )
    print(
        f"r: median {statistics.median(rs):.3f}, min {min(rs):.3f}; peak ratio: median {statistics.median(peaks):.3f}, "
        f"range {min(peaks):.3f}-{max(peaks):.3f}"
    )


if __name__ == "__main__":
    main()
