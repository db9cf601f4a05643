"""What a coarser timestamp tick would save, and what it would cost the replay: records every
built-in workload of trace_overhead.py once, re-encodes each recording with its times in ticks of
1 us (the recorder's since 2026-11-22; it was 32 ns) and 4 us (`trace_recode --tick`), and prints
per tick the bytes per event, the time columns' share, and what `trace info` (the replayer's
ordering) makes of it: peak and final live bytes and untracked frees, which a coarser tick must
leave unchanged. (A tick finer than the recorder's only rounds its times: to compare 32 ns or
256 ns, record with a build whose TRACE_TICK_NS is 32.)

    python benchmarks/trace_tick.py [--only NAME] [--ticks 1000,4000]

Results: benchmarks/README.md, "Format 3: a coarser tick".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from pathlib import Path

from trace_workloads import RECORDED

from alloclab.native import build
from alloclab.run import trace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="run only the programs whose name contains this")
    ap.add_argument("--ticks", default="1000,4000", help="ticks to re-encode at, in ns (comma-separated)")
    args = ap.parse_args()
    ticks = [int(t) for t in args.ticks.split(",")]
    tracer, recode = str(build.program("liballoclab_trace.so")), str(build.program("trace_recode"))
    print(json.dumps({"load_average": os.getloadavg()}), flush=True)
    with tempfile.TemporaryDirectory() as d:
        for name, (prog, argv) in RECORDED.items():
            if args.only and args.only not in name:
                continue
            rec, coarse = Path(d) / "rec.trace", Path(d) / "coarse.trace"
            subprocess.run(
                [str(build.program(prog)), *argv],
                check=True,
                stdout=subprocess.DEVNULL,
                env={**os.environ, "LD_PRELOAD": tracer, "ALLOCLAB_TRACE_FILE": str(rec)},
            )
            for tick in ticks:
                out = subprocess.run(
                    [recode, str(rec), "--tick", str(tick), "--out", str(coarse)], capture_output=True, text=True
                )
                if out.returncode != 0:
                    raise SystemExit(f"trace_recode failed on {name} at {tick} ns: {out.stderr.strip() or out.stdout}")
                r = json.loads(out.stdout)
                info = trace.info(coarse, points=2)
                print(
                    json.dumps(
                        {
                            "program": name,
                            "tick_ns": tick,
                            "events": r["events"],
                            "bytes_per_event": r["bytes_per_event"],
                            "times": round(r["times"] + r["times_hi"], 3),
                            "peak_live_bytes": info["peak_live_bytes"],
                            "final_live_bytes": info["final_live_bytes"],
                            "untracked_frees": info["untracked_frees"],
                        }
                    ),
                    flush=True,
                )
    print(json.dumps({"load_average": os.getloadavg()}), flush=True)


if __name__ == "__main__":
    main()
