"""Wall time to provision the whole default allocator set on this machine, cold and warm.

    python benchmarks/provision.py [--jobs 2]

Cold: an empty alloclab cache and an empty cargo home (so Debian indexes, packages and crates are
all fetched again). Warm: the same command again. Prints JSON; figures in benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from alloclab.allocators import catalog


def build_all(env: dict, jobs: int) -> float:
    ids = list(catalog.entries())
    t = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "alloclab", "allocators", "build", "-j", str(jobs), *ids],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - t
    if proc.returncode != 0:
        print(proc.stdout[-2000:], proc.stderr[-2000:], file=sys.stderr)
        raise SystemExit("build failed")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as cargo:
        env = {"ALLOCLAB_CACHE": cache, "CARGO_HOME": cargo}
        cold = build_all(env, args.jobs)
        warm = build_all(env, args.jobs)
    print(
        json.dumps(
            {"ids": len(catalog.entries()), "jobs": args.jobs, "cold_s": round(cold, 1), "warm_s": round(warm, 2)}
        )
    )


if __name__ == "__main__":
    main()
