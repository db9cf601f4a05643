"""Fuzz campaign for `alloclab import torutils` (issue 17, item 2): structured mutations of the real
1AEO datasets in tests/data (and of an alloclab export of one), each imported by the real CLI with a
timeout. Counts tracebacks, hangs, exit codes other than 0 and 2, messages longer than one line,
and output directories left behind by a failed import. Target: 0 of each.

    PYTHONPATH=src .venv/bin/python benchmarks/fuzz_import.py --mutations 2000 --seed 1

Each case runs the CLI's own entry point (alloclab.cli.main) in a forked child, so thousands of
cases fit in minutes; every --subprocess-every'th case instead runs `python -m alloclab` as a new
process, as a user would. Failing cases are kept under --keep (default: a temp dir) to reproduce.
Not part of the default test run; figures in benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATASETS = REPO / "tests" / "data" / "1aeo-torutils"

HOSTILE = [
    "",
    " ",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "-1",
    "-0",
    "0",
    "1e308",
    "1e999",
    "9" * 40,
    "1_000",
    "0x1f",
    "+5",
    "1.5.3",
    "１２",
    "٣",
    "5 kB",
    "\x00",
    "\x1b[31m",
    "a\nb",
    '"',
    '""',
    ",",
    "'",
    "\\",
    "%s%n",
    "{}",
    "{0}",
    "😀",
    "\u202e",
    "\ufeff",
    "A" * 300,
    "B" * 200_000,
    "2025-13-01T00:00:00",
    "2025-09-09T25:61:00",
    "1900-01-01T00:00:00",
    "9999-12-31T23:59:59+14:00",
    "0001-01-01",
    "2025-09-09",
    "2025-09-09T00:00:00Z",
    "2025-09-09T00:00:00.123456789",
    "yesterday",
    "relay",
    "aggregate",
    "glibc",
    "A",
    "all",
    "load",
    "idle",
    "warmup",
    "full",
    "cheap",
    "../../etc/passwd",
    "/dev/zero",
    "null",
    "true",
    "[]",
    '{"a": 1}',
]


def _mutate_csv_cell(f: Path, rng: random.Random) -> str:
    lines = f.read_text(errors="surrogateescape").splitlines()
    if len(lines) < 2:
        return "noop"
    i = rng.randrange(1, len(lines))
    fields = lines[i].split(",")
    j = rng.randrange(len(fields))
    fields[j] = rng.choice(HOSTILE) if rng.random() < 0.8 else str(rng.randint(-(10**12), 10**12))
    lines[i] = ",".join(fields)
    f.write_text("\n".join(lines) + "\n", errors="surrogateescape")
    return f"cell {f.name}:{i + 1}:{j}"


def _mutate_csv_structure(f: Path, rng: random.Random) -> str:
    lines = f.read_text(errors="surrogateescape").splitlines()
    if not lines:
        return "noop"
    op = rng.choice(
        [
            "drop-col",
            "dup-col",
            "rename-col",
            "dup-row",
            "drop-rows",
            "shuffle",
            "header-only",
            "swap-cols",
            "extra-field",
            "missing-field",
            "blank-lines",
            "crlf",
            "bom",
        ]
    )
    header = lines[0].split(",")
    k = rng.randrange(len(header))
    if op == "drop-col":
        lines = [",".join(x for n, x in enumerate(ln.split(",")) if n != k) for ln in lines]
    elif op == "dup-col":
        header[k] = header[rng.randrange(len(header))]
        lines[0] = ",".join(header)
    elif op == "rename-col":
        header[k] = rng.choice(HOSTILE[:30])
        lines[0] = ",".join(header)
    elif op == "dup-row" and len(lines) > 1:
        i = rng.randrange(1, len(lines))
        lines.insert(rng.randrange(1, len(lines) + 1), lines[i])
    elif op == "drop-rows":
        lines = [lines[0]] + [ln for ln in lines[1:] if rng.random() < 0.5]
    elif op == "shuffle":
        body = lines[1:]
        rng.shuffle(body)
        lines = [lines[0]] + body
    elif op == "header-only":
        lines = lines[:1]
    elif op == "swap-cols":
        m = rng.randrange(len(header))
        header[k], header[m] = header[m], header[k]
        lines[0] = ",".join(header)
    elif op == "extra-field" and len(lines) > 1:
        i = rng.randrange(1, len(lines))
        lines[i] += ",x"
    elif op == "missing-field" and len(lines) > 1:
        i = rng.randrange(1, len(lines))
        lines[i] = lines[i].rsplit(",", 1)[0]
    elif op == "blank-lines":
        lines.insert(rng.randrange(len(lines) + 1), "")
    elif op == "crlf":
        f.write_bytes("\r\n".join(lines).encode(errors="surrogateescape") + b"\r\n")
        return op
    elif op == "bom":
        f.write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode(errors="surrogateescape") + b"\n")
        return op
    f.write_text("\n".join(lines) + "\n", errors="surrogateescape")
    return f"{op} {f.name}"


def _mutate_bytes(f: Path, rng: random.Random) -> str:
    data = bytearray(f.read_bytes())
    op = rng.choice(["flip", "insert-nul", "insert-ff", "truncate", "insert-random", "delete-span"])
    pos = rng.randrange(len(data) + 1)
    if op == "flip" and data:
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif op == "insert-nul":
        data[pos:pos] = b"\0"
    elif op == "insert-ff":
        data[pos:pos] = b"\xff\xfe"
    elif op == "truncate":
        del data[pos:]
    elif op == "insert-random":
        data[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    elif op == "delete-span":
        del data[pos : pos + rng.randint(1, 200)]
    f.write_bytes(bytes(data))
    return f"{op} {f.name}@{pos}"


def _mutate_file(folder: Path, f: Path, rng: random.Random) -> str:
    op = rng.choice(["empty", "directory", "delete", "fifo", "dev-zero", "dangling", "huge-line", "many-lines", "swap"])
    if op == "empty":
        f.write_bytes(b"")
    elif op == "directory":
        f.unlink()
        f.mkdir()
    elif op == "delete":
        f.unlink()
    elif op == "fifo":
        f.unlink()
        os.mkfifo(f)
    elif op == "dev-zero":
        f.unlink()
        f.symlink_to("/dev/zero")
    elif op == "dangling":
        f.unlink()
        f.symlink_to(folder / "does-not-exist")
    elif op == "huge-line":
        with open(f, "ab") as out:
            out.write(b"x," * 2_000_000 + b"\n")
    elif op == "many-lines":
        with open(f, "ab") as out:
            out.write(b"\n" * 200_000)
    elif op == "swap":
        others = [g for g in folder.rglob("*") if g.is_file() and g != f]
        if others:
            shutil.copyfile(rng.choice(others), f)
    return f"{op} {f.name}"


def _mutate_json(f: Path, rng: random.Random) -> str:
    try:
        doc = json.loads(f.read_text())
    except (ValueError, OSError, RecursionError):
        return "noop"
    values = [None, True, 1, -1, 1e308, "x", [], {}, [1, 2], {"format": 1}, "nan", "A" * 1000]

    def walk(x, depth=0):
        if isinstance(x, dict) and x:
            k = rng.choice(list(x))
            if rng.random() < 0.3 or depth > 4:
                if rng.random() < 0.3:
                    del x[k]
                else:
                    x[k] = rng.choice(values)
            else:
                walk(x[k], depth + 1)
        elif isinstance(x, list) and x:
            i = rng.randrange(len(x))
            if rng.random() < 0.3 or depth > 4:
                x[i] = rng.choice(values)
            else:
                walk(x[i], depth + 1)

    op = rng.choice(["walk", "walk", "walk", "deep", "truncate"])
    if op == "walk":
        walk(doc)
        f.write_text(json.dumps(doc))
    elif op == "deep":
        f.write_text("[" * 50_000 + "]" * 50_000)
    else:
        text = json.dumps(doc)
        f.write_text(text[: rng.randrange(len(text) + 1)])
    return f"json-{op}"


def _mutate_groups(folder: Path, rng: random.Random) -> str:
    groups = folder / "groups"
    lists = sorted(groups.glob("group_*.txt")) if groups.is_dir() else []
    if not lists:
        return "noop"
    f = rng.choice(lists)
    op = rng.choice(["append", "steal", "empty", "junk", "rename", "new-list"])
    if op == "append":
        with open(f, "a") as out:
            out.write(rng.choice(HOSTILE[:40]) + "\n")
    elif op == "steal":
        other = rng.choice(lists).read_text().split()
        if other:
            with open(f, "a") as out:
                out.write(rng.choice(other) + "\n")
    elif op == "empty":
        f.write_text("")
    elif op == "junk":
        f.write_bytes(bytes(rng.randrange(256) for _ in range(200)))
    elif op == "rename":
        f.rename(
            groups / rng.choice(["group_.txt", "group_Z_glibc.txt", "group_A_x1_historical.txt", "group_\n_a.txt"])
        )
    elif op == "new-list":
        (groups / "group_Q_jemalloc.txt").write_text("\n".join(rng.sample(f.read_text().split() or ["x"], 1)) + "\n")
    return f"groups-{op} {f.name}"


def mutate(folder: Path, rng: random.Random) -> str:
    """One to three structured mutations of a copied dataset folder."""
    done = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        files = [f for f in folder.rglob("*") if f.is_file() and not f.is_symlink()]
        csvs = [f for f in files if f.suffix == ".csv"]
        kind = rng.choices(["cell", "structure", "bytes", "file", "json", "groups"], [35, 20, 15, 10, 10, 10])[0]
        if kind == "cell" and csvs:
            done.append(_mutate_csv_cell(rng.choice(csvs), rng))
        elif kind == "structure" and csvs:
            done.append(_mutate_csv_structure(rng.choice(csvs), rng))
        elif kind == "bytes" and files:
            done.append(_mutate_bytes(rng.choice(files), rng))
        elif kind == "file" and files:
            done.append(_mutate_file(folder, rng.choice(files), rng))
        elif kind == "json" and (folder / "experiment.json").is_file():
            done.append(_mutate_json(folder / "experiment.json", rng))
        elif kind == "groups":
            done.append(_mutate_groups(folder, rng))
    return "; ".join(done) or "noop"


def make_bases(work: Path, names=("co-guard-2025-09", "5way-2026-01")) -> dict[str, Path]:
    """Copies of the named datasets and an alloclab export of co-guard under work/base: what cases mutate."""
    from alloclab.torutils.export import export_csv
    from alloclab.torutils.importer import import_torutils

    bases = {name: work / "base" / name for name in names}
    for name, path in bases.items():
        shutil.copytree(DATASETS / name, path)
    export_csv(import_torutils(bases["co-guard-2025-09"], work / "exported-run"), work / "base" / "alloclab-export")
    bases["alloclab-export"] = work / "base" / "alloclab-export"
    return bases


def mutated_cases(bases: dict[str, Path], work: Path, rng: random.Random, count: int):
    """Yields (n, base name, case folder, mutation) `count` times: a fresh copy of a base chosen by
    `rng`, mutated, at case folder / "in" (the case folder is reused: done with it before the next)."""
    for n in range(count):
        base_name = rng.choice(sorted(bases))
        case = work / "case"
        shutil.rmtree(case, ignore_errors=True)
        shutil.copytree(bases[base_name], case / "in", symlinks=True)
        yield n, base_name, case, mutate(case / "in", rng)


def run_forked(folder: Path, out: Path, log: Path, timeout: float) -> tuple[int | None, float]:
    """The CLI's entry point in a forked child; (exit code or None on timeout, seconds)."""
    code, seconds, _ = run_cli_forked(["import", "torutils", str(folder), "-o", str(out)], log, timeout)
    return code, seconds


def run_cli_forked(args: list[str], log: Path, timeout: float) -> tuple[int | None, float, int]:
    """`alloclab ARGS` by the CLI's entry point in a forked child, stdout and stderr to `log`:
    (exit code or None on timeout, seconds, the child's peak RSS in kB from wait4)."""
    from alloclab import cli

    started = time.monotonic()
    pid = os.fork()
    if pid == 0:  # child
        code = 1
        try:
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            sys.argv = ["alloclab", *args]
            os.environ["ALLOCLAB_DEBUG"] = "1"  # a fault shows its traceback, counted as one
            cli.main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    deadline = started + timeout
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), time.monotonic() - started, usage.ru_maxrss
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            _, _, usage = os.wait4(pid, 0)
            return None, time.monotonic() - started, usage.ru_maxrss
        time.sleep(0.005)


def run_subprocess(folder: Path, out: Path, log: Path, timeout: float) -> tuple[int | None, float]:
    started = time.monotonic()
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "ALLOCLAB_DEBUG": "1"}  # a fault shows its traceback
    with open(log, "wb") as f:
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "alloclab", "import", "torutils", str(folder), "-o", str(out)],
                stdout=f,
                stderr=f,
                timeout=timeout,
                env=env,
            )
            return proc.returncode, time.monotonic() - started
        except subprocess.TimeoutExpired:
            return None, time.monotonic() - started


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mutations", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per case before it counts as a hang")
    ap.add_argument("--subprocess-every", type=int, default=25, help="every Nth case as a new `python -m alloclab`")
    ap.add_argument("--keep", type=Path, help="where failing cases are kept (default: a temp dir)")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO / "src"))
    work = Path(tempfile.mkdtemp(prefix="alloclab-fuzz-import-"))
    keep = args.keep or work / "failures"
    keep.mkdir(parents=True, exist_ok=True)
    bases = make_bases(work)
    rng = random.Random(args.seed)
    counts = {
        "cases": 0,
        "exit0": 0,
        "exit2": 0,
        "tracebacks": 0,
        "hangs": 0,
        "other_exits": 0,
        "multi_line": 0,
        "leftover_output": 0,
        "subprocess_cases": 0,
    }
    times = []
    started = time.monotonic()
    for n, base_name, case, what in mutated_cases(bases, work, rng, args.mutations):
        out, log = case / "out" / "run", case / "log"
        runner = run_subprocess if args.subprocess_every and n % args.subprocess_every == 0 else run_forked
        counts["subprocess_cases"] += runner is run_subprocess
        code, secs = runner(case / "in", out, log, args.timeout)
        times.append(secs)
        text = log.read_text(errors="replace")
        counts["cases"] += 1
        problem = None
        if code is None:
            counts["hangs"] += 1
            problem = "hang"
        elif "Traceback" in text:
            counts["tracebacks"] += 1
            problem = "traceback"
        elif code == 0:
            counts["exit0"] += 1
        elif code == 2:
            counts["exit2"] += 1
            if text.strip().count("\n") != 0:
                counts["multi_line"] += 1
                problem = "multi-line message"
            if (case / "out").exists():
                counts["leftover_output"] += 1
                problem = "output left behind"
        else:
            counts["other_exits"] += 1
            problem = f"exit {code}"
        if problem:
            dest = keep / f"{n:05d}-{problem.replace(' ', '-')}"
            shutil.copytree(case / "in", dest / "in", symlinks=True, ignore_dangling_symlinks=True)
            (dest / "what.txt").write_text(f"base {base_name}\nmutation {what}\n{problem}\n{text}")
            print(f"case {n} ({base_name}: {what}): {problem}", file=sys.stderr)
        shutil.rmtree(case, ignore_errors=True)
        if (n + 1) % 200 == 0:
            print(f"{n + 1} cases, {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    elapsed = time.monotonic() - started
    times.sort()
    summary = {
        **counts,
        "seed": args.seed,
        "seconds": round(elapsed, 1),
        "median_case_s": round(times[len(times) // 2], 3) if times else None,
        "max_case_s": round(times[-1], 3) if times else None,
        "failures_kept_in": str(keep),
    }
    print(json.dumps(summary, indent=1))
    shutil.rmtree(work / "base", ignore_errors=True)
    bad = (
        counts["tracebacks"]
        + counts["hangs"]
        + counts["other_exits"]
        + counts["multi_line"]
        + counts["leftover_output"]
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
