"""How decisive `alloclab gate --fail-on-increase 5` is, measured end to end (outside the default
test run). Figures in docs/tutorials/ci-memory-gate.md ("How decisive").

    nice -n 10 .venv/bin/python benchmarks/gate_decisive.py                 # 10 gates per cell (~20 min on 2 cores)
    nice -n 10 .venv/bin/python benchmarks/gate_decisive.py --runs 3        # smoke (~6 min)

Part 1, real gates: the CLI as a CI job runs it (defaults: 4 replicas a side, 10 s warm-up, 1 s
interval, looks at 20/40/80/160/290 s, 5-minute limit), on two deterministic workloads, each A/A
(the same build both sides) and +10% (the candidate does 10% more work, ~+9.5% RSS):
- trace: a recording of benchmarks/gate_program.c (600 modules, 468,000 events; the candidate's recording 660)
  replayed at --speed 0 under glibc (`--baseline-trace` / `--candidate-trace`);
- program: benchmarks/gate_program.c itself with a fixed input (2,000 modules; 2,200), holding its memory (`--baseline` /
  `--candidate` commands).
The cells' runs are interleaved in a seeded order, so load on the shared machine falls on all of
them alike; /proc/loadavg is recorded before every gate.

Part 2, resampled from part 1 (seeded): every replica level of the A/A gates' last looks (the
settled levels each gate decided on), pooled per workload (run-to-run differences included, so the
spread is if anything overstated); 4 drawn a side, the candidate's multiplied by 1.00, 1.05
(exactly the limit: every "above" is a false fail) and 1.10, decided as the first look decides
(level α·20/590, the smallest). Gives the error rates at the limit, which real A/A and +10% gates
cannot show.

Part 3, a live-service-like workload (simulated, as benchmarks/compare_gate.py: 6 h series with
AR(1) noise, restarts with regrowth and level shifts, replica cv 5%): the share decided with n
replicas a side, at the last look's level (α·290/590 ≈ 0.025, the best any look of a 5-minute plan
gets), for A/A and +10%.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

ALLOCLAB = str(Path(sys.executable).parent / "alloclab")
PROGRAM_MODULES = 2000  # ~17 MB held
TRACE_MODULES = 600  # 468,000 events: 0.4 s to replay alone
PLAN_TIMES = (20, 40, 80, 160, 290)  # the default plan's looks (warm-up 10 s + 10 intervals, 5 minutes)


def load1() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def prepare(work: Path) -> dict[str, tuple[list[str], list[str]]]:
    """Build the program, record the two traces; the gate's arguments per (workload, change)."""
    prog = work / "gate_program"
    subprocess.run(["cc", "-O2", "-o", str(prog), str(ROOT / "benchmarks" / "gate_program.c")], check=True)
    traces = {}
    for n in (TRACE_MODULES, TRACE_MODULES * 11 // 10):
        traces[n] = work / f"modules-{n}.trace"
        subprocess.run(
            [ALLOCLAB, "trace", "record", "-o", str(traces[n]), "--", str(prog), str(n)],
            check=True,
            capture_output=True,
        )
    cmd = lambda n: f"{prog} {n} hold"
    base, more = TRACE_MODULES, TRACE_MODULES * 11 // 10
    return {
        ("trace", "A/A"): ["--baseline-trace", str(traces[base]), "--candidate-trace", str(traces[base])],
        ("trace", "+10%"): ["--baseline-trace", str(traces[base]), "--candidate-trace", str(traces[more])],
        ("program", "A/A"): ["--baseline", cmd(PROGRAM_MODULES), "--candidate", cmd(PROGRAM_MODULES)],
        ("program", "+10%"): ["--baseline", cmd(PROGRAM_MODULES), "--candidate", cmd(PROGRAM_MODULES * 11 // 10)],
    }


def one_gate(args: list[str], out: Path) -> dict:
    before = load1()
    started = time.monotonic()
    p = subprocess.Popen(
        [ALLOCLAB, "gate", *args, "--fail-on-increase", "5", "--no-report", "--json", "-o", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = p.communicate(timeout=600)
    finally:
        if p.poll() is None:  # interrupted or over time: alloclab stops its replicas on SIGTERM
            p.terminate()
            p.wait(timeout=60)
    wall = time.monotonic() - started
    try:
        j = json.loads(stdout)
    except ValueError:
        raise SystemExit(f"gate failed to report (exit {p.returncode}): {stderr[-2000:]}") from None
    return {
        "exit": p.returncode,
        "outcome": j["outcome"],
        "looks": len(j["looks"]),
        "elapsed_s": j["elapsed_s"],
        "wall_s": round(wall, 1),
        "ratio": j["ratio"],
        "load1": before,
        "first_look": j["looks"][0] if j["looks"] else None,
        "last_look": j["looks"][-1] if j["looks"] else None,
    }


def real_gates(rng, runs: int, work: Path) -> list[dict]:
    cells = prepare(work)
    order = [cell for cell in cells for _ in range(runs)]
    rng.shuffle(order)
    results = []
    for k, cell in enumerate(order):
        r = one_gate(cells[cell], work / f"gate-{k:03d}")
        r["workload"], r["change"] = cell
        results.append(r)
        print(
            f"  {k + 1}/{len(order)} {cell[0]} {cell[1]}: {r['outcome']} (exit {r['exit']}) at look {r['looks']}, "
            f"{r['elapsed_s']:.0f} s, ratio {r['ratio']:.4f}, load1 {r['load1']:.1f}",
            file=sys.stderr,
            flush=True,
        )
    return results


def resampled(rng, results: list[dict], draws: int, n: int = 4) -> list[tuple]:
    from alloclab import analysis
    from alloclab.studies.gate import decide_look

    level = analysis.RULES["alpha"] * PLAN_TIMES[0] / sum(PLAN_TIMES)
    rows = []
    for workload in ("trace", "program"):
        pool = np.array(
            [
                x
                for r in results
                if r["workload"] == workload and r["change"] == "A/A" and r["last_look"]
                for x in r["last_look"]["baseline_mb"] + r["last_look"]["candidate_mb"]
            ]
        )
        if len(pool) < 2 * n:
            continue
        for up in (1.0, 1.05, 1.10):
            counts = dict.fromkeys(("within", "above", "inconclusive"), 0)
            for _ in range(draws):
                pick = rng.permutation(pool)[: 2 * n]
                look = decide_look({"b": pick[:n], "c": pick[n:] * up}, "b", "c", 5.0, level, PLAN_TIMES[0])
                counts[look.outcome] += 1
            rows.append((workload, len(pool), f"{up - 1:+.0%}", *(f"{counts[k] / draws:.1%}" for k in counts)))
    return rows


def live_service(rng, draws: int) -> list[tuple]:
    import compare_gate as cg

    from alloclab import analysis
    from alloclab.studies.gate import decide_look

    level = analysis.RULES["alpha"] * PLAN_TIMES[-1] / sum(PLAN_TIMES)
    rows = []
    for n in (5, 10, 20, 40, 80):
        for up in (1.0, 1.10):
            a = cg.replica_levels(rng, draws, n, [1.0] * cg.GROUPS, 0.0)[:, 0]
            b = cg.replica_levels(rng, draws, n, [up] * cg.GROUPS, 0.0)[:, 0]
            got = [decide_look({"b": a[i], "c": b[i]}, "b", "c", 5.0, level, 0).outcome for i in range(draws)]
            rows.append(
                (n, f"{up - 1:+.0%}", *(f"{got.count(k) / draws:.1%}" for k in ("within", "above", "inconclusive")))
            )
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10, help="real gates per cell (4 cells)")
    ap.add_argument("--draws", type=int, default=2000, help="resampled / simulated gates per cell")
    ap.add_argument("--seed", type=int, default=20261128)
    ap.add_argument("--skip-real", action="store_true", help="only part 3 (no runs)")
    ap.add_argument("--save", type=Path, help="write every real gate's result (JSON lines) here")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the running gate is stopped (one_gate's finally)
    rng = np.random.default_rng(args.seed)
    started = time.monotonic()
    print(f"nice {os.nice(0)}, load before: {Path('/proc/loadavg').read_text().strip()}, {os.cpu_count()} cores")
    if not args.skip_real:
        with tempfile.TemporaryDirectory(prefix="alloclab-gate-bench-") as d:
            results = real_gates(rng, args.runs, Path(d))
        if args.save:
            args.save.write_text("".join(json.dumps(r) + "\n" for r in results))
        print(
            "\n| workload | true change | gates | within | above | inconclusive | decided | wrong calls | "
            "median time to decision | slowest | load1 (median, max) |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for workload in ("trace", "program"):
            for change in ("A/A", "+10%"):
                rs = [r for r in results if r["workload"] == workload and r["change"] == change]
                c = {k: sum(r["outcome"] == k for r in rs) for k in ("within", "above", "inconclusive")}
                wrong = c["above"] if change == "A/A" else c["within"]
                el = [r["elapsed_s"] for r in rs]
                ld = [r["load1"] for r in rs]
                print(
                    f"| {workload} | {change} | {len(rs)} | {c['within']} | {c['above']} | {c['inconclusive']} | "
                    f"{(c['within'] + c['above']) / len(rs):.0%} | {wrong} | {np.median(el):.0f} s | {max(el):.0f} s | "
                    f"{np.median(ld):.1f}, {max(ld):.1f} |"
                )
        print("\n| workload | pooled replica levels | true change | within | above | inconclusive |")
        print("|---|---|---|---|---|---|")
        for row in resampled(rng, results, args.draws):
            print("| " + " | ".join(map(str, row)) + " |")
    print("\n| live-service-like (simulated) replicas a side | true change | within | above | inconclusive |")
    print("|---|---|---|---|---|")
    for row in live_service(rng, args.draws):
        print("| " + " | ".join(map(str, row)) + " |")
    print(
        f"\nseed {args.seed}, {time.monotonic() - started:.0f} s, load after: {Path('/proc/loadavg').read_text().strip()}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
