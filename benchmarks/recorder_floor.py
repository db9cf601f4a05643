"""How much of the recorder's cost on a bare malloc/free loop is the clock read (issue 16 item 1).

    python benchmarks/recorder_floor.py [--repeat 9] [--rounds 1000]

Side by side, interleaved (A B C A B C ...), on the 1-thread loop of trace_overhead.py:
  plain      the loop alone;
  recorded   under liballoclab_trace.so (a TSC read per event);
  fake-clock under the same recorder built with -DALLOCLAB_TRACE_FAKE_CLOCK (a per-thread counter
             instead of the clock; its timestamps are meaningless, everything else is the same).
Also the cost of one clock read on this CPU (rdtsc and clock_gettime(CLOCK_MONOTONIC), 20 M reads,
median of 3) and the plain loop's wall time per malloc/free pair (process start included). Medians of wall and CPU ratios against
plain; the difference between recorded and fake-clock is what the timestamps cost.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

import trace_workloads

from alloclab.native import build as native_build

CLOCK_COST_C = r"""
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define READ_TSC() __rdtsc()
#else
#define READ_TSC() 0
#endif
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(void) {
    enum { N = 20000000 };
    volatile uint64_t sink = 0;
    double t0 = now();
    for (int i = 0; i < N; i++) sink += READ_TSC();
    double t1 = now();
    for (int i = 0; i < N; i++) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); sink += (uint64_t)t.tv_nsec; }
    double t2 = now();
    printf("{\"rdtsc_ns\": %.2f, \"clock_gettime_ns\": %.2f}\n", (t1 - t0) / N * 1e9, (t2 - t1) / N * 1e9);
    return (int)(sink & 0);
}
"""


def timed(cmd: list[str], env: dict | None = None) -> tuple[float, float]:
    """Wall and CPU seconds (all threads) of one run."""
    import time

    t = time.perf_counter()
    proc = subprocess.Popen(
        cmd, env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed")
    return time.perf_counter() - t, usage.ru_utime + usage.ru_stime


def build(d: Path) -> tuple[Path, Path]:
    src = Path(native_build.__file__).parent
    fake = d / "liballoclab_trace_fake_clock.so"
    subprocess.run(
        [
            "gcc",
            "-O2",
            "-g",
            "-std=c11",
            "-D_GNU_SOURCE",
            "-DALLOCLAB_TRACE_FAKE_CLOCK",
            "-fPIC",
            "-shared",
            "-fvisibility=hidden",
            "-ftls-model=initial-exec",
            "-o",
            str(fake),
            str(src / "tracer.c"),
            "-ldl",
            "-lpthread",
            "-lzstd",
        ],
        check=True,
    )
    (d / "clock_cost.c").write_text(CLOCK_COST_C)
    clock_cost = d / "clock_cost"
    subprocess.run(["gcc", "-O2", "-o", str(clock_cost), str(d / "clock_cost.c")], check=True)
    return fake, clock_cost


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--rounds", type=int, default=1000, help="loop rounds of 20,000 malloc/free pairs")
    args = ap.parse_args()
    print(json.dumps({"load_average": [round(x, 2) for x in os.getloadavg()]}), flush=True)
    prog, argv = trace_workloads.loop(1, args.rounds)
    loop = [str(native_build.program(prog)), *argv]
    tracer = str(native_build.program("liballoclab_trace.so"))
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        fake, clock_cost = build(d)
        clocks = [
            json.loads(subprocess.run([str(clock_cost)], capture_output=True, text=True, check=True).stdout)
            for _ in range(3)
        ]
        runs: dict[str, list[tuple[float, float]]] = {"plain": [], "recorded": [], "fake-clock": []}
        for _ in range(args.repeat):
            runs["plain"].append(timed(loop))
            runs["recorded"].append(timed(loop, {"LD_PRELOAD": tracer, "ALLOCLAB_TRACE_FILE": str(d / "r.trace")}))
            runs["fake-clock"].append(timed(loop, {"LD_PRELOAD": str(fake), "ALLOCLAB_TRACE_FILE": str(d / "f.trace")}))
    wall = {k: statistics.median(w for w, _ in v) for k, v in runs.items()}
    cpu = {k: statistics.median(c for _, c in v) for k, v in runs.items()}
    pairs = args.rounds * 20000
    out = {
        "rdtsc_ns": statistics.median(c["rdtsc_ns"] for c in clocks),
        "clock_gettime_ns": statistics.median(c["clock_gettime_ns"] for c in clocks),
        "plain_wall_ns_per_pair": round(wall["plain"] / pairs * 1e9, 2),
        "recorded_slowdown": round(wall["recorded"] / wall["plain"], 2),
        "fake_clock_slowdown": round(wall["fake-clock"] / wall["plain"], 2),
        "recorded_cpu_ratio": round(cpu["recorded"] / cpu["plain"], 2),
        "fake_clock_cpu_ratio": round(cpu["fake-clock"] / cpu["plain"], 2),
        "clock_ns_per_event": round((wall["recorded"] - wall["fake-clock"]) / (2 * pairs) * 1e9, 2),
        "slowdowns": {k: [round(w / wall["plain"], 2) for w, _ in v] for k, v in runs.items() if k != "plain"},
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
