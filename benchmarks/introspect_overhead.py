"""Overhead of the introspection helper (native/introspect.c) on a malloc-heavy workload.

    python benchmarks/introspect_overhead.py [--seconds 8 --repeat 3 --interval 1 --allocators glibc,jemalloc,mimalloc]

For each allocator and repeat, two copies of `frag` (one churning thread, 32 MB of survivors) run
side by side at the same time — one with the helper preloaded after the allocator, one without —
so both see the same machine (which copy starts first alternates). Throughput = operations/s from
the workload's own counter, and operations per CPU second (less sensitive to how the shared cores
were divided between the two copies); memory =
RSS (median of readings every 0.25 s over the second half) and peak RSS (VmHWM). The helper's own
memory: its record mapping's resident size (smaps) and the RSS difference; its CPU: the helper
thread's CPU over the process's. Prints one JSON object (medians of the repeats); figures in
benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from alloclab.capture import introspect
from alloclab.native import build
from alloclab.run import workloads

LIBS = {
    "glibc": None,
    "jemalloc": "libjemalloc.so.2",
    "mimalloc": "libmimalloc.so.2",
    "tcmalloc": "libtcmalloc_minimal.so.4",
}


def _lib(name: str) -> str | None:
    if LIBS[name] is None:
        return None
    found = sorted(glob.glob(f"/usr/lib/*/{LIBS[name]}"))
    if not found:
        raise SystemExit(f"{LIBS[name]} not installed: bash scripts/install.sh --test")
    return found[0]


def _rss(pid: int) -> int:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _hwm(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def _record_rss(pid: int) -> int:
    """Resident bytes of the helper's record mapping (its .bin file) in pid."""
    total, inside = 0, False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        if "-" in line.split(" ")[0] and len(line.split()) >= 5:
            inside = line.rstrip().endswith(".bin")
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1]) * 1024
    return total


def one_pair(frag: str, lib: str | None, seconds: float, interval: float, work: Path, helper_first: bool) -> dict:
    procs = {}
    for variant in ("helper", "plain") if helper_first else ("plain", "helper"):  # alternated: no start-order bias
        d = work / variant
        d.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        env["ALLOCLAB_STATS"] = str(d / "stats.bin")
        if variant == "helper":
            env.update(introspect.helper_env(d, interval, 0.01))
            env["LD_PRELOAD"] = introspect.preload_with_helper(lib, introspect.helper_path())
        elif lib:
            env["LD_PRELOAD"] = lib
        procs[variant] = (
            subprocess.Popen(
                [frag, "--load", str(seconds), "--idle", "60", "--mb", "32", "--threads", "1"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            ),
            d,
        )
    rss = {v: [] for v in procs}
    start = time.monotonic()
    while time.monotonic() - start < seconds - 0.2:
        time.sleep(0.25)
        if time.monotonic() - start > seconds / 2:
            for v, (p, _) in procs.items():
                rss[v].append(_rss(p.pid))
    out = {}
    for v, (p, d) in procs.items():
        st = workloads.read_stats(d / "stats.bin")
        rec_file = next(iter(d.glob(f"{p.pid}-*.bin")), None)
        rec = introspect.read_record(rec_file) if rec_file else None
        cpu = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()
        proc_cpu = (int(cpu[11]) + int(cpu[12])) / os.sysconf("SC_CLK_TCK")
        out[v] = {
            "ops_per_s": st.ops / seconds if st else None,
            "ops_per_cpu_s": st.ops / proc_cpu if st and proc_cpu else None,
            "rss_median": statistics.median(rss[v]),
            "hwm": _hwm(p.pid),
            "record_rss": _record_rss(p.pid) if v == "helper" else 0,
            "helper_cpu_share": (rec.helper_cpu_s / proc_cpu) if rec and proc_cpu else None,
            "collections": rec.collections if rec else 0,
        }
        p.kill()
        p.wait()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--interval", type=float, default=1.0, help="helper cadence (s)")
    ap.add_argument("--allocators", default="glibc,jemalloc,mimalloc")
    args = ap.parse_args()
    frag = str(build.program("frag"))
    results = {}
    with tempfile.TemporaryDirectory(prefix="alloclab-introspect-bench-") as tmp:
        for name in args.allocators.split(","):
            lib = _lib(name)
            reps = [
                one_pair(frag, lib, args.seconds, args.interval, Path(tmp) / f"{name}-{i}", i % 2 == 0)
                for i in range(args.repeat)
            ]
            med = lambda v, k: statistics.median(r[v][k] for r in reps if r[v][k] is not None)
            results[name] = {
                "throughput_ratio": statistics.median(r["helper"]["ops_per_s"] / r["plain"]["ops_per_s"] for r in reps),
                "cpu_efficiency_ratio": statistics.median(
                    r["helper"]["ops_per_cpu_s"] / r["plain"]["ops_per_cpu_s"] for r in reps
                ),
                "ops_per_s_helper": med("helper", "ops_per_s"),
                "ops_per_s_plain": med("plain", "ops_per_s"),
                "rss_diff_mb": statistics.median(
                    (r["helper"]["rss_median"] - r["plain"]["rss_median"]) / 2**20 for r in reps
                ),
                "rss_plain_mb": med("plain", "rss_median") / 2**20,
                "hwm_diff_mb": statistics.median((r["helper"]["hwm"] - r["plain"]["hwm"]) / 2**20 for r in reps),
                "record_rss_kb": med("helper", "record_rss") / 1024,
                "helper_cpu_share": med("helper", "helper_cpu_share"),
                "collections": med("helper", "collections"),
            }
    print(
        json.dumps(
            {"seconds": args.seconds, "repeat": args.repeat, "interval": args.interval, "results": results}, indent=2
        )
    )


if __name__ == "__main__":
    main()
