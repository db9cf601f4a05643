"""Fuzz campaign for `alloclab import prometheus` (issue 30, item 5): hostile answers from a loopback
server (tests/prom_server.py), each import run by the CLI's entry point in a forked child with
`--timeout 10s`. Counts tracebacks, hangs (no exit within 40 s), exits other than 0 and 2, messages
longer than one line, run directories left after a failure, and each child's peak RSS (wait4), the
largest split by answer size (≤ 1 MB, larger). Target: 0, 0, 0, 0, 0, ≤ 1 GB on answers ≤ 1 MB, and
the 100 MB answer refused at the cap, early.

    PYTHONPATH=src .venv/bin/python benchmarks/fuzz_prometheus.py --cases 600 --seed 1

Answers: a valid contract-layout range answer (alloclab_unit_info + memory, restarts, start time,
verified, up for 4 units), mutated 1-3 times at the JSON level (values and timestamps retyped,
NaN/Inf/1e300/negative/bool, keys deleted, series duplicated or multiplied, labels with control
characters, 10 kB or non-string values, nesting 100,000 deep, status/resultType changed) or at the
byte level (flips, truncation, junk), or served in a hostile way (a byte a second, a stall, a
Content-Length that lies, 100 MB streamed or declared, HTML with 500, redirects to itself).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "src"))

from fuzz_import import run_cli_forked  # benchmarks/fuzz_import.py

from tests.prom_server import PromServer

T0, STEP, N = 1_000_000.0, 5.0, 40
TIMES = [T0 + i * STEP for i in range(N)]
UNITS = {"u1": "glibc", "u2": "jemalloc", "u3": "jemalloc-bg", "u4": "mimalloc"}
HOSTILE_VALUES = [
    float("nan"),
    float("inf"),
    -1.0,
    1e300,
    -1e300,
    True,
    None,
    "x",
    "NaN",
    "+Inf",
    "-Inf",
    "1e999",
    "",
    [],
    {},
    2**70,
    "\x00",
    "0x10",
]
HOSTILE_LABELS = ["", " ", "\n", "a\x1bb", "\u2028", "x" * 10000, 5, None, "😀", "../../etc", "h1/u1"]


def valid(query: str) -> dict:
    result = []
    for u, g in UNITS.items():
        if "unit_info" in query:
            result.append(
                {
                    "metric": {
                        "host": "h1",
                        "unit": u,
                        "group": g,
                        "allocator": g,
                        "version": "1",
                        "library_sha256": "ab",
                    },
                    "values": [[t, "1"] for t in TIMES],
                }
            )
            continue
        if "memory" in query:
            values = [[t, str((20 + (i % 4) * 10) << 20)] for i, t in enumerate(TIMES)]
        elif "restarts" in query:
            values = [[t, "0"] for t in TIMES]
        elif "start_time" in query:
            values = [[t, str(T0 - 100)] for t in TIMES]
        else:
            values = [[t, "1"] for t in TIMES]
        result.append({"metric": {"host": "h1", "unit": u}, "values": values})
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


def mutate_json(doc: dict, rng: random.Random) -> tuple[dict | bytes, str]:
    try:
        result = doc["data"]["result"]
        assert isinstance(result, list) and all(
            isinstance(s, dict) and isinstance(s.get("values"), list) and isinstance(s.get("metric"), dict)
            for s in result
        )
    except (KeyError, TypeError, AssertionError):
        return doc, "noop (already broken)"
    kind = rng.choice(
        ["value", "time", "label", "delete", "duplicate", "multiply", "deep", "status", "retype", "empty"]
    )
    if kind == "value" and result:
        s = rng.choice(result)
        if s["values"]:
            rng.choice(s["values"])[1] = rng.choice(HOSTILE_VALUES)
    elif kind == "time" and result:
        s = rng.choice(result)
        if s["values"]:
            rng.choice(s["values"])[0] = rng.choice(HOSTILE_VALUES + [T0 - 10**6, T0 + 10**6, 0])
    elif kind == "label" and result:
        m = rng.choice(result)["metric"]
        m[rng.choice(list(m) + ["group", "unit", "host"])] = rng.choice(HOSTILE_LABELS)
    elif kind == "delete":
        target = rng.choice([doc, doc["data"], *(result[:1]), *([result[0]["values"]] if result else [])])
        if isinstance(target, dict) and target:
            del target[rng.choice(list(target))]
        elif isinstance(target, list) and target:
            target.pop(rng.randrange(len(target)))
    elif kind == "duplicate" and result:
        result.append(copy.deepcopy(rng.choice(result)))
    elif kind == "multiply" and result:
        s = rng.choice(result)
        result.extend(
            {"metric": {**s["metric"], "unit": f"x{i}"}, "values": s["values"]} for i in range(rng.choice([50, 500]))
        )
    elif kind == "deep":
        depth = rng.choice([20, 1000, 100_000])
        return (
            b'{"status":"success","data":{"resultType":"matrix","result":' + b"[" * depth + b"]" * depth + b"}}"
        ), f"deep {depth}"
    elif kind == "status":
        doc[rng.choice(["status", "data"])] = rng.choice(["error", None, 1, {"resultType": "vector", "result": []}])
    elif kind == "retype":
        doc["data"]["result"] = rng.choice([{}, "x", 1, None, [1, 2], [[]]])
    elif kind == "empty":
        doc["data"]["result"] = []
    return doc, kind


def make_answer(rng: random.Random):
    """A function query -> (status, headers, pieces, pause), and its description and size."""
    mode = rng.random()
    if mode < 0.12:
        how = rng.choice(
            ["trickle", "stall", "lying-length", "html-500", "streamed-100MB", "declared-100MB", "redirect"]
        )
        if how == "trickle":
            return (lambda q: (200, {}, (b" " for _ in range(3600)), 1.0)), how, 3600
        if how == "stall":
            return (lambda q: (200, {"Content-Length": "100"}, (b"{" for _ in range(1)), 60.0)), how, 1
        if how == "lying-length":
            return (lambda q: (200, {"Content-Length": "100000"}, [json.dumps(valid(q)).encode()[:500]], 0.0)), how, 500
        if how == "html-500":
            return (lambda q: (500, {"Content-Type": "text/html"}, [b"<html>" * 1000], 0.0)), how, 6000
        if how == "streamed-100MB":
            return (lambda q: (200, {}, (b" " * (1 << 16) for _ in range(1600)), 0.0)), how, 100 << 20
        if how == "declared-100MB":
            return (
                (lambda q: (200, {"Content-Length": str(100 << 20)}, (b" " * (1 << 16) for _ in range(1600)), 0.0)),
                how,
                100 << 20,
            )
        return (lambda q: (302, {"Location": "/api/v1/query_range?query=x", "Content-Length": "0"}, [], 0.0)), how, 0
    hits = rng.randint(1, 3)
    target = rng.random()  # which queries get the mutation: all, or one column
    plan = [rng.randrange(1 << 30) for _ in range(hits)]

    def answer(q: str):
        doc: dict | bytes = valid(q)
        kinds = []
        if target < 0.5 or "resident" in q:
            for seed in plan:
                if isinstance(doc, bytes):
                    break
                doc, kind = mutate_json(doc, random.Random(seed))
                kinds.append(kind)
        body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
        if mode > 0.9:  # byte-level damage
            r = random.Random(plan[0])
            b = bytearray(body)
            for _ in range(r.randint(1, 5)):
                b[r.randrange(len(b))] = r.randrange(256)
            body = bytes(b[: r.randrange(len(b) + 1)]) if r.random() < 0.3 else bytes(b)
        return 200, {"Content-Type": "application/json", "Content-Length": str(len(body))}, [body], 0.0

    sample = answer('avg_over_time(alloclab_unit_memory_bytes{memtype="resident"}[5s])')[2][0]
    return answer, ("bytes" if mode > 0.9 else "json") + f" x{hits}", len(sample)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=600)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", type=Path, help="Keep failing cases' logs here.")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix=f"fuzz-prom-{os.getpid()}-"))
    keep = args.keep or work / "failures"
    keep.mkdir(parents=True, exist_ok=True)
    counts = {"exit 0": 0, "exit 2": 0, "tracebacks": 0, "hangs": 0, "other exits": 0, "multi-line": 0, "leftover": 0}
    peak_small = peak_large = 0
    big: list[str] = []
    times = []
    began = time.time()
    try:
        for n in range(args.cases):
            answer, what, size = make_answer(rng)
            out, log = work / f"run{n}", work / f"log{n}"
            with PromServer(answer) as srv:
                code, took, rss = run_cli_forked(
                    [
                        "import",
                        "prometheus",
                        srv.url,
                        "--from",
                        f"{T0:.0f}",
                        "--to",
                        f"{TIMES[-1]:.0f}",
                        "--step",
                        f"{STEP:g}s",
                        "--timeout",
                        "10s",
                        "-o",
                        str(out),
                    ],
                    log,
                    40.0,
                )
            times.append(took)
            text = log.read_text(errors="replace")
            if size <= 1 << 20:
                peak_small = max(peak_small, rss)
            else:
                peak_large = max(peak_large, rss)
                if "100MB" in what:
                    big.append(f"{what}: exit {code}, {took:.1f} s, peak {rss / 1024:.0f} MB")
            bad = []
            if code is None:
                counts["hangs"] += 1
                bad.append("hang")
            elif code == 0:
                counts["exit 0"] += 1
            elif code == 2:
                counts["exit 2"] += 1
                lines = [ln for ln in text.splitlines() if ln.startswith("alloclab: error")]
                if (
                    len(lines) != 1
                    or len([ln for ln in text.splitlines() if ln.strip() and not ln.startswith("  ")]) > 1
                ):
                    counts["multi-line"] += 1
                    bad.append("multi-line")
                if out.exists():
                    counts["leftover"] += 1
                    bad.append("leftover")
            else:
                counts["other exits"] += 1
                bad.append(f"exit {code}")
            if "Traceback" in text:
                counts["tracebacks"] += 1
                bad.append("traceback")
            if bad:
                shutil.copy(log, keep / f"case{n}.log")
                print(f"case {n} ({what}): {', '.join(bad)}", flush=True)
            shutil.rmtree(out, ignore_errors=True)
            log.unlink(missing_ok=True)
            if (n + 1) % 50 == 0:
                print(f"{n + 1} cases, {time.time() - began:.0f} s: {counts}", file=sys.stderr, flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work / "failures", ignore_errors=True) if not any((work / "failures").iterdir()) else None
    times.sort()
    print(
        json.dumps(
            {
                "seed": args.seed,
                "cases": args.cases,
                **counts,
                "peak_rss_mb_answers_le_1MB": round(peak_small / 1024),
                "peak_rss_mb_larger": round(peak_large / 1024),
                "median_s": round(times[len(times) // 2], 2),
                "max_s": round(times[-1], 1),
                "100MB cases": big,
                "seconds": round(time.time() - began),
                "failures_kept_in": str(keep),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
