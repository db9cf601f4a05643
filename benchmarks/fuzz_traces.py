"""Structured-mutation fuzz campaign for traces: `alloclab trace info` and `trace replay` on
thousands of mutants of real recordings, counting tracebacks, hangs, crashes and bad exit codes.

    python benchmarks/fuzz_traces.py --count 2000 [--seed 1] [--work DIR] [--subprocess]

Seeds are recorded here with the real recorder (three small programs). Each mutant is one of:
bit flips, truncation, a header field, a block-header field (event count, raw length, thread
number, first timestamp), a column value re-encoded validly (a time delta, a size, a pointer delta,
an operation), block reordering, duplication, deletion, splicing blocks of another seed, and
thread-number changes. Each mutant runs `trace info` and `trace replay --max-gap 1 --max-duration 3
--max-alloc 256M --max-live 1G` (limits small enough for a shared machine) through the CLI's own
entry point, in-process by default (the native replayer is a real child process either way;
--subprocess also starts a Python CLI per call). Outcomes per call: ok (exit 0), refused (exit 2,
one line), and the failures: traceback, hang (over --bound seconds, or the CLI's own deadline
firing), crash (the replayer killed by a signal), bad exit (any other code, or exit 2 with more
than one line). Exit status 1 if any failure. Not part of the default test run; figures are in
benchmarks/README.md and docs/reference/trace-format.md.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from alloclab.native import build
from alloclab.run import trace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.trace_codec: the format in Python
from tests.trace_codec import FREE, MALLOC, REALLOC, THREAD_EXIT, TICK_NS, parse

INTERESTING = [
    0,
    1,
    2,
    7,
    8,
    15,
    16,
    127,
    128,
    255,
    4096,
    1 << 20,
    1 << 30,
    (1 << 32) - 1,
    1 << 32,
    1 << 40,
    (1 << 40) + 1,
    16 << 30,
    (16 << 30) + 1,
    1 << 59,
    (1 << 63) - 1,
    (1 << 64) - 1,
]
REPLAY_LIMITS = ["--max-gap", "1", "--max-duration", "3", "--max-alloc", str(256 << 20), "--max-live", str(1 << 30)]

PYSCRIPT = "import json\nd=[json.dumps({str(i): [i]*5 for i in range(300)}) for _ in range(20)]\n"


def record_seeds(work: Path) -> list[bytes]:
    nd = build.build_dir()
    programs = {
        "xmalloc": [str(nd / "stressors"), "--pattern", "xmalloc", "--rounds", "1", "--slots", "300"],
        "pool": [str(nd / "worker_pool"), "--builds", "1", "--modules", "40", "--gap", "0.05", "--threads", "3"],
        "python": [sys.executable, "-c", PYSCRIPT],
    }
    seeds = []
    for name, argv in programs.items():
        path = work / f"seed-{name}.trace"
        trace.record(path, argv)
        seeds.append(path.read_bytes())
        print(f"seed {name}: {len(seeds[-1]):,} bytes, {trace.info(path)['events']:,} events")
    return seeds


def _value(rng: random.Random) -> int:
    return rng.choice(INTERESTING) if rng.random() < 0.7 else rng.getrandbits(rng.choice([8, 16, 32, 64]))


def mutate(seed: bytes, other: bytes, rng: random.Random) -> tuple[str, bytes]:
    kind = rng.choice(
        [
            "bitflip",
            "truncate",
            "header",
            "block-field",
            "column",
            "op",
            "reorder",
            "duplicate",
            "delete",
            "splice",
            "threads",
            "time-gap",
            "size",
        ]
    )
    if kind == "bitflip":
        blob = bytearray(seed)
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(blob))
            blob[i] ^= 1 << rng.randrange(8)
        return kind, bytes(blob)
    if kind == "truncate":
        return kind, seed[: rng.randrange(len(seed))]
    t = parse(seed)
    b = rng.choice(t.blocks)
    if kind == "header":
        field = rng.choice(["version", "flags", "tick_ns", "pid", "start_realtime_ns", "start_monotonic_ns"])
        setattr(
            t, field, _value(rng) & (0xFFFFFFFF if field in ("version", "flags", "tick_ns", "pid") else (1 << 64) - 1)
        )
    elif kind == "block-field":
        field = rng.choice(["events", "raw_len", "thread", "first_ts"])
        if field == "events":
            b.events = rng.choice([len(b.ops) + 1, len(b.ops) - 1, 0, _value(rng)])
        elif field == "raw_len":
            b.raw_len = rng.choice([len(b.payload()) + 1, len(b.payload()) - 1, 0, _value(rng)])
        elif field == "thread":
            b.thread = rng.choice([0, rng.choice(t.blocks).thread, _value(rng)])
        else:
            b.first_ts = _value(rng)
    elif kind == "column":
        col = rng.choice([b.times, b.sizes, b.pointers, b.ops])
        if col:
            i = rng.randrange(len(col))
            col[i] = (
                rng.choice([_value(rng), -_value(rng)])
                if col is b.pointers
                else _value(rng) & (0xFF if col is b.ops else (1 << 64) - 1)
            )
        if rng.random() < 0.3 and col:
            col.insert(rng.randrange(len(col)), _value(rng) & 0xFF)
    elif kind == "op":
        if b.ops:
            i = rng.randrange(len(b.ops))
            b.ops[i] = rng.choice([THREAD_EXIT, THREAD_EXIT, MALLOC, FREE, REALLOC, 0, 7, 255])
    elif kind == "reorder":
        rng.shuffle(t.blocks)
    elif kind == "duplicate":
        for _ in range(rng.randint(1, 3)):
            t.blocks.insert(rng.randrange(len(t.blocks) + 1), rng.choice(t.blocks))
    elif kind == "delete":
        del t.blocks[rng.randrange(len(t.blocks))]
    elif kind == "splice":
        o = parse(other)
        t.blocks[rng.randrange(len(t.blocks))] = rng.choice(o.blocks)
    elif kind == "threads":
        base = rng.choice([1, 1000, 1 << 31])
        for i, blk in enumerate(t.blocks):
            blk.thread = base + (i if rng.random() < 0.7 else 0)
    elif kind == "time-gap":
        if b.times:
            b.times[rng.randrange(len(b.times))] = rng.choice(
                [10**9 // TICK_NS * rng.randint(1, 10), 1 << 40, 1 << 55, _value(rng)]
            )
    elif kind == "size" and b.sizes:
        b.sizes[rng.randrange(len(b.sizes))] = rng.choice(
            [1 << 40, (1 << 40) + 1, 16 << 30, 300 << 20, 1 << 30, _value(rng)]
        )
    return kind, t.to_bytes()


def run_cli_inprocess(args: list[str]) -> tuple[int | str, str]:
    """The CLI's own entry point; returns (exit code or 'traceback', stderr)."""
    from alloclab import cli

    err, out = io.StringIO(), io.StringIO()
    old_argv = sys.argv
    sys.argv = ["alloclab", *args]
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            cli.main()
        return 0, err.getvalue()
    except SystemExit as exc:
        return (exc.code if isinstance(exc.code, int) else 1), err.getvalue()
    except BaseException as exc:  # a traceback is what we count
        return "traceback", f"{type(exc).__name__}: {exc}"
    finally:
        sys.argv = old_argv


def run_cli_subprocess(args: list[str], bound: float) -> tuple[int | str, str]:
    try:
        p = subprocess.run(
            [sys.executable, "-m", "alloclab", *args],
            capture_output=True,
            text=True,
            timeout=bound * 3,
            env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "ALLOCLAB_DEBUG": "1"},
        )
    except subprocess.TimeoutExpired:
        return "hang", "the CLI itself did not return"
    return ("traceback" if "Traceback" in p.stderr else p.returncode), p.stderr


def classify(code: int | str, stderr: str, seconds: float, bound: float) -> str:
    if code == "traceback" or code == "hang":
        return code
    if seconds > bound or "did not finish within" in stderr:
        return "hang"
    if "killed by signal" in stderr:
        return "crash"
    if code == 0:
        return "ok"
    if code == 2 and stderr.count("\n") == 1:
        return "refused"
    return "bad-exit"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["traces"], nargs="?", default="traces")
    ap.add_argument("--count", type=int, default=2000, help="mutants to try")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bound", type=float, default=10.0, help="seconds after which a call counts as a hang")
    ap.add_argument("--work", type=Path, help="keep seeds and failing mutants here (default: a temporary directory)")
    ap.add_argument("--subprocess", action="store_true", help="start a Python CLI per call (slower)")
    a = ap.parse_args()
    work = a.work or Path(tempfile.mkdtemp(prefix="fuzz-traces-"))
    work.mkdir(parents=True, exist_ok=True)
    seeds = record_seeds(work)
    rng = random.Random(a.seed)
    outcomes: dict[str, collections.Counter] = {"info": collections.Counter(), "replay": collections.Counter()}
    by_kind: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    failures = []
    slowest = 0.0
    mutant = work / "mutant.trace"
    start = time.monotonic()
    for n in range(a.count):
        i = rng.randrange(len(seeds))
        kind, blob = mutate(seeds[i], seeds[(i + 1) % len(seeds)], rng)
        mutant.write_bytes(blob)
        for cmd, args in (
            ("info", ["trace", "info", str(mutant), "--json"]),
            ("replay", ["trace", "replay", str(mutant), *REPLAY_LIMITS]),
        ):
            t0 = time.monotonic()
            code, stderr = run_cli_subprocess(args, a.bound) if a.subprocess else run_cli_inprocess(args)
            secs = time.monotonic() - t0
            slowest = max(slowest, secs)
            outcome = classify(code, stderr, secs, a.bound)
            outcomes[cmd][outcome] += 1
            by_kind[kind][f"{cmd}:{outcome}"] += 1
            if outcome not in ("ok", "refused"):
                keep = work / f"fail-{n}-{cmd}-{outcome}.trace"
                keep.write_bytes(blob)
                failures.append(f"{keep}: {cmd} {outcome}: {stderr.strip()[-300:]}")
        if (n + 1) % 200 == 0:
            print(f"{n + 1} mutants, {time.monotonic() - start:.0f} s", flush=True)
    elapsed = time.monotonic() - start
    print(f"\n{a.count} mutants (seed {a.seed}) in {elapsed:.0f} s; slowest call {slowest:.2f} s")
    for cmd, c in outcomes.items():
        print(f"  trace {cmd}: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
    print(
        "  by mutation: "
        + "; ".join(
            f"{k}: " + ", ".join(f"{kk} {vv}" for kk, vv in sorted(v.items())) for k, v in sorted(by_kind.items())
        )
    )
    bad = sum(v for c in outcomes.values() for k, v in c.items() if k not in ("ok", "refused"))
    print(f"  failures (traceback, hang, crash, bad exit): {bad}")
    for f in failures[:20]:
        print("   ", f)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
