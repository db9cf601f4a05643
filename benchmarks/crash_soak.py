"""Fault soak: kill -9 alloclab at random points of a run, N times, and count what is left.

    python benchmarks/crash_soak.py [-n 20] [--seed 1] [--no-cgroups]

Each round starts a short experiment (2 replicas, each leaving a double-forked `setsid` background
child, then running the frag workload; 0.25 s interval), waits (one round in five: 0.2-4 s from
launch, so it dies during start-up; the others: 0-4 s after the first stored tick), sends SIGKILL to alloclab, waits 5 s, then
counts: survivors (processes whose working directory is inside the round's run directory, i.e.
anything the run started), leaked cgroups (alloclab-PID-*), intervals lost (whole intervals
between the last stored tick and the kill), and SQLite's `PRAGMA integrity_check`. Prints one line
per round and a JSON summary; figures in benchmarks/README.md. Not part of the default test run.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from alloclab.native import build

INTERVAL = 0.25


def processes_under(directory: Path) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.readlink(f"/proc/{name}/cwd").startswith(str(directory)):
                    out.append(int(name))
            except OSError:
                pass
    return out


def _ticks(db: Path) -> int:
    try:
        return sqlite3.connect(db).execute("SELECT COUNT(DISTINCT t) FROM samples").fetchone()[0]
    except sqlite3.Error:
        return 0


def one_round(tmp: Path, i: int, delay: float, during_startup: bool, env: dict) -> dict:
    out = tmp / f"run-{i}"
    p = subprocess.Popen(
        [sys.executable, "-m", "alloclab", "run", str(tmp / "exp.toml"), "-o", str(out), "--no-report"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    if during_startup:
        time.sleep(delay)
    else:  # wait for the first stored tick, then the random delay
        deadline = time.time() + 60
        while time.time() < deadline and not _ticks(out / "run.db"):
            time.sleep(0.05)
        time.sleep(delay)
    p.kill()
    p.wait()
    killed_at = time.time()
    time.sleep(5.0)
    survivors = processes_under(out)
    leaked = glob.glob(f"/sys/fs/cgroup/**/alloclab-{p.pid}-*", recursive=True)
    row = {
        "round": i,
        "when": "startup" if during_startup else "sampling",
        "delay_s": round(delay, 2),
        "survivors": len(survivors),
        "leaked_cgroups": len(leaked),
        "ticks": 0,
        "intervals_lost": None,
        "integrity": None,
        "end_reason": None,
    }
    db = out / "run.db"
    if db.exists():
        conn = sqlite3.connect(db)
        row["integrity"] = conn.execute("PRAGMA integrity_check").fetchone()[0]
        try:
            n, last = conn.execute("SELECT COUNT(DISTINCT t), MAX(t) FROM samples").fetchone()
        except sqlite3.OperationalError:  # killed before the schema was written
            n, last = 0, None
        row["ticks"] = n
        if last is not None:
            row["intervals_lost"] = int((killed_at - last) // INTERVAL)
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall()) if n else {}
        row["end_reason"] = meta.get("end_reason")
        conn.close()
    for pid in survivors:  # leave the machine clean for the next round
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    for cg in leaked:
        try:
            os.rmdir(cg)
        except OSError:
            pass
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-cgroups", action="store_true", help="set ALLOCLAB_CGROUPS=off (tree and identity only)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    frag = build.program("frag")
    env = {**os.environ, **({"ALLOCLAB_CGROUPS": "off"} if args.no_cgroups else {})}
    rows = []
    with tempfile.TemporaryDirectory(prefix="alloclab-soak-") as d:
        tmp = Path(d)
        script = tmp / "daemonize.sh"
        script.write_text(f"#!/bin/sh\n( setsid sleep 300 & )\nexec {frag} --load 120 --mb 4 --threads 1 --seed 1\n")
        script.chmod(0o755)
        (tmp / "exp.toml").write_text(
            f'name = "soak"\ncommand = ["{script}"]\nreplicas = 2\ninterval = "{INTERVAL}s"\n'
            'grace = "2s"\n[phases]\nload = "60s"\n[[group]]\nname = "glibc"\nallocator = "glibc"\n'
        )
        for i in range(args.n):
            startup = rng.random() < 0.2
            row = one_round(tmp, i, rng.uniform(0.2, 4.0) if startup else rng.uniform(0.0, 4.0), startup, env)
            rows.append(row)
            print(json.dumps(row), flush=True)
    sampled = [r for r in rows if r["intervals_lost"] is not None]
    summary = {
        "rounds": len(rows),
        "cgroups": "off" if args.no_cgroups else "per replica",
        "rounds_with_survivors": sum(r["survivors"] > 0 for r in rows),
        "survivors_total": sum(r["survivors"] for r in rows),
        "leaked_cgroups_total": sum(r["leaked_cgroups"] for r in rows),
        "rounds_killed_while_sampling": len(sampled),
        "max_intervals_lost": max((r["intervals_lost"] for r in sampled), default=None),
        "integrity_ok": sum(r["integrity"] == "ok" for r in rows if r["integrity"] is not None),
        "stores": sum(r["integrity"] is not None for r in rows),
        "marked_killed": sum(r["end_reason"] == "killed" for r in sampled),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
