#!/usr/bin/env python3
"""Fuzz campaign over alloclab's inputs: structured mutations of valid files, each run through the
real CLI, counting tracebacks, hangs, unexpected exit codes and anything left behind.

    python scripts/fuzz_inputs.py experiments [--count 2400] [--seed 1] [--jobs 2] [--timeout 30]

Kinds: `experiments` (experiment TOML files, `alloclab run FILE -o DIR --max-duration 1s --no-report`).
Other input kinds (traces, plans, CSV folders) can add a subcommand here.

A mutant must end in exit 0 (it was a valid file and ran) or 2 (one line on stderr, naming the problem);
after exit 2 nothing may exist: no run directory, no alloclab cgroup, no process of its session.
Outside the default test run; tests/unit/test_experiment_file.py replays a few hundred mutants in-process.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Valid seeds: each runs for real in about a second (sleep; sh with a load generator; a workload).
SEEDS = [
    """name = "seed-sleep"
command = ["/bin/sleep", "30"]
replicas = 2
interval = "0.5s"
seed = 3
[phases]
warmup = "0.2s"
load = "0.5s"
idle = "0.3s"
[[group]]
name = "glibc"
allocator = "glibc"
env = { MALLOC_ARENA_MAX = "2" }
[[group]]
name = "tuned"
allocator = "glibc"
env = { MALLOC_ARENA_MAX = 1, GLIBC_TUNABLES = "glibc.malloc.trim_threshold=131072" }
""",
    """name = "seed-load"
command = ["/bin/sh", "-c", "echo {replica} {group} {port} {seed} > {workdir}/id; exec sleep 30"]
metric = "pss"
grace = "2s"
verify_every = "5s"
port_base = 30000
[load]
command = ["/bin/sh", "-c", "echo load {{literal}} {port}"]
[[group]]
name = "a"
allocator = "glibc"
[[group]]
name = "b"
allocator = "bundled"
command = ["/bin/sleep", "{replica}0"]
""",
    """name = "seed-workload"
replicas = 1
interval = "1s"
max_duration = "3s"
smaps_budget = 0.05
baseline = "g"
[workload]
name = "worker-pool"
[[group]]
name = "g"
allocator = "glibc"
""",
]

NUMERIC_KEYS = [
    "replicas",
    "interval",
    "seed",
    "grace",
    "verify_every",
    "port_base",
    "max_duration",
    "smaps_budget",
    "phases.warmup",
    "phases.load",
    "phases.idle",
]
HOSTILE_NUMBERS = [
    "nan",
    "-nan",
    "inf",
    "-inf",
    "+inf",
    "0",
    "-0.0",
    "-1",
    "1e-9",
    "1e308",
    "1e-320",
    "9" * 40,
    "-9223372036854775809",
    "9223372036854775807",
    "0.001",
    "1",
    "257",
    "1025",
    "65535",
    "3.5",
    "true",
    '"1ms"',
    '"0s"',
    '"99999999999d"',
    '"1e400s"',
    '"nan"',
    '"inf s"',
    '"5x"',
    '""',
    '"0.05s"',
    '"0.1s"',
    '"367d"',
    '"  2s  "',
    '"2s\\n"',
    "[]",
    "{}",
    "[1, 2]",
    "1979-05-27",
    "07:32:00",
    '"\\u0000"',
    '"١s"',
]
HOSTILE_STRINGS = [
    "",
    " ",
    ".",
    "..",
    "../x",
    "/",
    "a/b",
    "a\\u0000b",
    "\\u0000",
    "a\\nb",
    "\\r\\n",
    "\\t",
    "\\u007f",
    "\\u2028",
    "é",
    "ü" * 300,
    "名前",
    "🦀",
    "x" * 70,
    "x" * 5000,
    "/" + "a" * 300,
    "/" + "a/" * 2100,
    "-rf",
    "--help",
    "{}",
    "{0}",
    "{seed:d}",
    "{replica.x}",
    "{group[0]}",
    "{replica!r}",
    "{nope}",
    "{",
    "}",
    "{{}}",
    "{{replica}}",
    "{port:>10}",
    "{workdir}" * 40,
    "%n",
    "%s%s%s",
    "$(touch /tmp/alloclab-pwned)",
    "`id`",
    "'",
    '\\"',
    "\\\\",
    "A=B",
    "glibc",
    "bundled",
    "mimalloc@",
    "@",
    "nosuch@1.0",
    "mimalloc@99.9",
    "jemalloc@x@y",
    "/nonexistent/lib.so",
    "/etc/passwd",
    "/dev/null",
    "/proc/self/mem",
    "./lib.so",
]
HOSTILE_KEYS = [
    "A=B",
    "",
    " ",
    "1ABC",
    "A B",
    "A.B",
    "A-B",
    "é",
    "LD_PRELOAD",
    "ALLOCLAB_STATS",
    "A\\u0000B",
    "X" * 300,
    "MALLOC_CONF",
    "MIMALLOC_NOPE",
    "GLIBC_TUNABLES",
    "_OK",
    "ok_lower",
]
UNKNOWN_KEYS = ["colour", "replica", "groups", "Name", "name ", "intervall", "phase", "env", "allocator", "\\u0000"]


def basic(s: str) -> str:
    return '"' + s + '"'


def deep(kind: str, n: int) -> str:
    return ("[" * n + "1" + "]" * n) if kind == "array" else ("{a = " * n + "1" + "}" * n)


def _set_top(text: str, key: str, value: str) -> str:
    """Set a top-level key (or TABLE.KEY) to a raw TOML value, replacing any existing line."""
    lines = text.split("\n")
    if "." in key:
        table, sub = key.split(".", 1)
        if f"[{table}]" not in lines:
            return _prepend_table(text, table, f"{sub} = {value}")
        i = lines.index(f"[{table}]")
        j = i + 1
        while j < len(lines) and not lines[j].startswith("["):
            if lines[j].startswith(f"{sub} ="):
                lines[j] = f"{sub} = {value}"
                return "\n".join(lines)
            j += 1
        lines.insert(i + 1, f"{sub} = {value}")
        return "\n".join(lines)
    first_table = next((i for i, ln in enumerate(lines) if ln.startswith("[")), len(lines))
    for i in range(first_table):
        if lines[i].startswith(f"{key} ="):
            lines[i] = f"{key} = {value}"
            return "\n".join(lines)
    lines.insert(0, f"{key} = {value}")
    return "\n".join(lines)


def _prepend_table(text: str, table: str, line: str) -> str:
    lines = text.split("\n")
    first_table = next((i for i, ln in enumerate(lines) if ln.startswith("[")), len(lines))
    return "\n".join(lines[:first_table] + [f"[{table}]", line] + lines[first_table:])


def _group_line(text: str, line: str, which: int = 0) -> str:
    """Add a line to the which-th [[group]] table."""
    parts = text.split("[[group]]\n")
    if len(parts) < 2:
        return text + "\n[[group]]\n" + line + "\n"
    which = min(which, len(parts) - 2)
    parts[which + 1] = line + "\n" + parts[which + 1]
    return "[[group]]\n".join(parts)


def _replace_first(text: str, prefix: str, new_line: str) -> str:
    lines = text.split("\n")
    for i, ln in enumerate(lines):
        if ln.startswith(prefix):
            lines[i] = new_line
            return "\n".join(lines)
    return text


def mutate(rng: random.Random, base: str) -> tuple[str, str]:
    """One structured mutation of a valid file: (its kind, the new text)."""
    kind = rng.choice(
        [
            "number",
            "number",
            "string_field",
            "argv",
            "placeholder",
            "env_key",
            "env_value",
            "deep",
            "nul_raw",
            "missing",
            "extra",
            "type_swap",
            "groups",
            "allocator",
            "long_path",
            "unicode",
            "bytes",
            "load",
            "workload",
            "duplicate",
            "stack",
        ]
    )
    t = base
    if kind == "number":
        t = _set_top(t, rng.choice(NUMERIC_KEYS), rng.choice(HOSTILE_NUMBERS))
    elif kind == "string_field":
        key = rng.choice(["name", "metric", "baseline", "interval"])
        t = _set_top(t, key, basic(rng.choice(HOSTILE_STRINGS)))
    elif kind == "argv":
        arg = basic(rng.choice(HOSTILE_STRINGS))
        form = rng.choice(
            [
                f"[{arg}]",
                f'["/bin/sleep", {arg}]',
                f"[{arg}, {arg}]",
                "[]",
                arg,
                "[1]",
                '[["x"]]',
                f'["/bin/sleep", "1", {arg}]' + "",
                '["/bin/sleep"' + ', "1"' * 3000 + "]",
            ]
        )
        if "workload" in t:
            t = t.replace("[workload]\nname", "[workload]\nnam_")  # so command is the only program
            t = _set_top(t, "command", form)
        else:
            t = _replace_first(t, "command = ", f"command = {form}")
    elif kind == "placeholder":
        ph = rng.choice(
            [
                "{}",
                "{0}",
                "{seed:d}",
                "{replica.x}",
                "{group[0]}",
                "{replica!r}",
                "{nope}",
                "{",
                "}",
                "{{",
                "}}",
                "{seed:{replica}}",
                "{ replica}",
                "{REPLICA}",
                "{replica}" * 40,
                "{port}{port}",
                "{{replica}}",
                "{workdir:.3}",
                "{seed!s:>5}",
                "{__class__}",
                "{group.__init__.__globals__}",
            ]
        )
        target = rng.choice(["command", "load", "group"])
        if target == "command" and "command = [" in t:
            t = _replace_first(t, "command = [", f'command = ["/bin/sleep", "{ph}"]')
        elif target == "load":
            t = (
                t + f'\n[load]\ncommand = ["/bin/echo", "{ph}"]\n'
                if "[load]" not in t
                else t.replace('"echo load {{literal}} {port}"', f'"echo {ph}"')
            )
        else:
            t = _group_line(t, f'command = ["/bin/sleep", "{ph}"]', rng.randrange(3))
    elif kind == "env_key":
        key = basic(rng.choice(HOSTILE_KEYS))
        t = (
            t.replace("env = { ", f'env = {{ {key} = "1", ', 1)
            if "env = { " in t
            else _group_line(t, f'env = {{ {key} = "1" }}', rng.randrange(3))
        )
    elif kind == "env_value":
        val = rng.choice(
            [
                basic(rng.choice(HOSTILE_STRINGS)),
                "nan",
                "inf",
                "true",
                "[1]",
                "{a = 1}",
                "1e999",
                basic("x" * 40000),
                "99999999999999999999",
                "1979-05-27",
            ]
        )
        t = (
            _group_line(t, f"env = {{ FUZZ_VALUE = {val} }}", rng.randrange(3))
            if "env =" not in t
            else t.replace("env = { ", f"env = {{ FUZZ_VALUE = {val}, ", 1)
        )
    elif kind == "deep":
        n = rng.choice([15, 16, 17, 20, 100, 400, 1000, 3000])
        where = rng.choice(["top", "env", "workload"])
        value = deep(rng.choice(["array", "table"]), n)
        t = (
            _set_top(t, "fuzz", value)
            if where == "top"
            else (
                _group_line(t, f"env = {{ X = {value} }}")
                if where == "env"
                else t + f'\n[workload]\nname = "x"\np = {value}\n'
            )
        )
        if rng.random() < 0.3:
            t = "a" + ".b" * n + " = 1\n" + base
    elif kind == "nul_raw":
        pos = rng.randrange(len(t) + 1)
        t = t[:pos] + rng.choice(["\x00", "\x01", "\x1b[2J", "\x7f", "\r", "\u2028", "\ufeff"]) + t[pos:]
    elif kind == "missing":
        lines = [ln for ln in t.split("\n")]
        victims = [i for i, ln in enumerate(lines) if "=" in ln or ln.startswith("[")]
        for i in sorted(rng.sample(victims, k=min(len(victims), rng.choice([1, 1, 2, 4]))), reverse=True):
            del lines[i]
        t = "\n".join(lines)
    elif kind == "extra":
        key = rng.choice(UNKNOWN_KEYS)
        t = rng.choice(
            [
                _set_top(t, basic(key), "1"),
                _group_line(t, f"{basic(key)} = 1"),
                t + f"\n[phases]\n{basic(key)} = 1\n",
                t + f'\n[load]\ncommand = ["/bin/true"]\n{basic(key)} = 2\n',
            ]
        )
    elif kind == "type_swap":
        swaps = [
            ("replicas", '"2"'),
            ("interval", "[1]"),
            ("name", "5"),
            ("command", '"/bin/sleep 1"'),
            ("seed", "1.5"),
            ("metric", "1"),
            ("phases", "3"),
            ("load", '"x"'),
            ("group", '"glibc"'),
            ("group", "[1, 2]"),
            ("workload", "[]"),
            ("baseline", "[]"),
            ("port_base", '"20000"'),
            ("smaps_budget", '"2%"'),
            ("group", "[]"),
            ("max_duration", "{}"),
            ("grace", "true"),
            ("load", "{}"),
        ]
        key, value = rng.choice(swaps)
        t = (
            _set_top(t, key, value)
            if f"[{key}]" not in t and f"[[{key}]]" not in t
            else t.replace(f"[[{key}]]", f"[[{key}_]]").replace(f"[{key}]", f"[{key}_]") + f"\n{key} = {value}\n"
        )
        if key in ("phases", "load", "workload", "group"):
            t = f"{key} = {value}\n" + base.replace(f"[[{key}]]", f"[[{key}x]]").replace(f"[{key}]", f"[{key}x]")
    elif kind == "groups":
        # valid sizes stay small enough to run here; the limits themselves are tested in-process
        n, replicas = rng.choice([(0, 1), (6, 2), (65, 1), (300, 1), (64, 17), (5, 257), (1, 0), (2, -3)])
        body = "".join(f'\n[[group]]\nname = "g{i}"\nallocator = "glibc"\n' for i in range(n))
        t = _set_top(t.split("[[group]]")[0], "replicas", str(replicas)) + body
    elif kind == "allocator":
        t = _replace_first(t, "allocator = ", f"allocator = {basic(rng.choice(HOSTILE_STRINGS))}")
    elif kind == "long_path":
        n = rng.choice([250, 256, 4000, 4100, 70000])
        path = rng.choice(["/" + "a" * n, "/tmp/" + "b/" * (n // 2), "./" + "c" * n])
        field = rng.choice(["command", "allocator", "trace"])
        if field == "command":
            t = (
                _replace_first(t, "command = [", f'command = ["{path}"]')
                if "command = [" in t
                else _set_top(t.replace("[workload]\nname", "[workload]\nnam_"), "command", f'["{path}"]')
            )
        elif field == "allocator":
            t = _replace_first(t, "allocator = ", f'allocator = "{path}"')
        else:
            t = t.split("[workload]")[0] if "[workload]" in t else t
            t = t.replace('command = ["', 'commandx = ["', 1) + f'\n[workload]\ntrace = "{path}"\n'
            t = "\n".join(ln for ln in t.split("\n") if not ln.startswith("commandx"))
    elif kind == "unicode":
        s = rng.choice(["é", "名前", "🦀", "\u200b", "\u202e", "ﬁ", "Ω", "\u0301"])
        t = rng.choice(
            [
                _set_top(t, "name", basic("x" + s)),
                _replace_first(t, 'name = "', f'name = "{s}"'),
                t.replace('[[group]]\nname = "', f'[[group]]\nname = "{s}', 1),
                s + t,
                t + s,
            ]
        )
    elif kind == "bytes":
        b = bytearray(t.encode("utf-8", "surrogateescape"))
        for _ in range(rng.choice([1, 2, 8])):
            op = rng.randrange(3) if b else 2
            pos = rng.randrange(len(b)) if b else 0
            if op == 0:
                b[pos] = rng.randrange(256)
            elif op == 1:
                del b[pos]
            else:
                b[pos:pos] = bytes([rng.choice(b"[]{}\"'=\n#.\\,")])
        return kind, b.decode("utf-8", "surrogateescape")
    elif kind == "load":
        t = t + rng.choice(
            [
                "\n[load]\n",
                "\n[load]\ncommand = []\n",
                '\n[load]\ncommand = ["/nonexistent/loadgen"]\n',
                '\n[load]\ncommand = ["./missing-{group}"]\n',
                '\n[load]\ncommand = "x"\n',
                '\n[load]\ncommand = ["/etc/passwd"]\n',
                '\n[load]\ncommand = ["{workdir}/gen"]\n',
            ]
        )
    elif kind == "workload":
        t = "\n".join(ln for ln in t.split("\n") if not ln.startswith("command =")).replace("[workload]", "[workloadx]")
        t = t + rng.choice(
            [
                "\n[workload]\n",
                '\n[workload]\nname = "nope"\n',
                "\n[workload]\nname = 5\n",
                '\n[workload]\nname = "worker-pool"\nthreads = nan\n',
                '\n[workload]\nname = "worker-pool"\nthreads = -1\n',
                '\n[workload]\nname = "worker-pool"\nzzz = 1\n',
                '\n[workload]\ntrace = "/nonexistent.trace"\n',
                '\n[workload]\ntrace = "/etc/passwd"\n',
                "\n[workload]\ntrace = 5\n",
                '\n[workload]\ntrace = "/dev/null"\nspeed = -1\n',
                '\n[workload]\nname = "worker-pool"\nseed = "x"\n',
            ]
        )
    elif kind == "duplicate":
        t = rng.choice(
            [
                t
                + '\n[[group]]\nname = "glibc"\nallocator = "glibc"\n'
                + '\n[[group]]\nname = "a"\nallocator = "glibc"\n',
                'name = "x"\n' + t,
                t + '\n[phases]\nload = "1s"\n',
                t.replace("[[group]]", "[group]", 1),
            ]
        )
    elif kind == "stack":
        for _ in range(3):
            _, t = mutate(rng, t)
    return kind, t


def campaign_cases(count: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    return [mutate(rng, SEEDS[i % len(SEEDS)]) for i in range(count)]


# ---- running one case through the real CLI ----


def _cgroups_of(pid: int) -> list[str]:
    """Cgroups left by the alloclab process `pid` (the runner names them alloclab-PID-REPLICA)."""
    found = []
    for root, dirs, _ in os.walk("/sys/fs/cgroup"):
        found += [os.path.join(root, d) for d in dirs if d.startswith(f"alloclab-{pid}-")]
        dirs[:] = [d for d in dirs if not d.startswith("alloclab-")]
    return found


def _session_members(sid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid:
                out.append(int(entry))
    return out


def _end_reason(run: Path) -> str | None:
    """The run's recorded end reason (meta end_reason), None when it has none or no store."""
    import sqlite3

    try:
        conn = sqlite3.connect(f"file:{run / 'run.db'}?mode=ro", uri=True)
        try:
            row = conn.execute("SELECT value FROM meta WHERE key='end_reason'").fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    return row[0] if row else None


def run_case(index: int, kind: str, text: str, work: Path, timeout: float) -> dict:
    case_dir = work / f"case-{index:05d}"
    case_dir.mkdir()
    exp = case_dir / "exp.toml"
    exp.write_bytes(text.encode("utf-8", "surrogateescape"))
    out = case_dir / "run"
    argv = [sys.executable, "-m", "alloclab", "run", str(exp), "-o", str(out), "--max-duration", "1s", "--no-report"]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    started = time.monotonic()
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        cwd=case_dir,
        env=env,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
        hung = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        stdout, stderr = proc.communicate()
        hung = True
    seconds = time.monotonic() - started
    time.sleep(0.05)
    survivors = _session_members(proc.pid)
    for pid in survivors:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    leaked = _cgroups_of(proc.pid)
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    code = proc.returncode
    problems = [f"{len(leaked)} cgroups left"] if leaked else []
    if hung:
        problems.append("hang")
    if "Traceback" in stderr:
        problems.append("traceback")
    if not hung and code not in (0, 2):
        problems.append(f"exit {code}")
    if code == 2 and len(lines) != 1:
        problems.append("not one line")
    if code == 2 and out.exists():
        problems.append("leftover run directory")
    if survivors:
        problems.append(f"{len(survivors)} processes left")
    if code != 2 and out.exists() and _end_reason(out) is None:
        problems.append("run directory without an end reason")
    return {
        "index": index,
        "kind": kind,
        "code": code,
        "seconds": round(seconds, 2),
        "problems": problems,
        "message": lines[-1][:300] if lines else "",
        "file": str(exp),
    }


def experiments(args: argparse.Namespace) -> int:
    cases = campaign_cases(args.count, args.seed)
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="alloclab-fuzz-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda ic: run_case(ic[0], *ic[1], work, args.timeout), enumerate(cases)))
    codes = Counter(r["code"] for r in results)
    bad = [r for r in results if r["problems"]]
    summary = {
        "cases": len(results),
        "seed": args.seed,
        "wall_seconds": round(time.monotonic() - started, 1),
        "exit_codes": dict(sorted(codes.items(), key=lambda kv: str(kv[0]))),
        "one_line_exit_2": sum(1 for r in results if r["code"] == 2 and not r["problems"]),
        "tracebacks": sum("traceback" in r["problems"] for r in results),
        "hangs": sum("hang" in r["problems"] for r in results),
        "other_exit_codes": sum(any(p.startswith("exit") for p in r["problems"]) for r in results),
        "leftover_run_dirs": sum("leftover run directory" in r["problems"] for r in results),
        "run_dirs_without_end_reason": sum("run directory without an end reason" in r["problems"] for r in results),
        "leftover_processes": sum(any("processes left" in p for p in r["problems"]) for r in results),
        "leaked_cgroups": sum(any("cgroups left" in p for p in r["problems"]) for r in results),
        "max_case_seconds": max(r["seconds"] for r in results),
        "by_kind": {
            k: dict(Counter(r["code"] for r in results if r["kind"] == k)) for k in sorted({r["kind"] for r in results})
        },
    }
    print(json.dumps(summary, indent=1))
    for r in bad[:40]:
        print(
            f"PROBLEM case {r['index']} ({r['kind']}): {', '.join(r['problems'])}: {r['message']} [{r['file']}]",
            file=sys.stderr,
        )
    if args.report:
        Path(args.report).write_text(json.dumps({"summary": summary, "problems": bad}, indent=1))
    if not args.keep and not bad:
        subprocess.run(["rm", "-rf", str(work)])
    return 1 if bad else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="kind", required=True)
    p = sub.add_parser("experiments", help="mutated experiment files through `alloclab run`")
    p.add_argument("--count", type=int, default=2400)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds before a case counts as a hang")
    p.add_argument("--keep", help="keep every case (and its run directory) here")
    p.add_argument("--report", help="write the summary and every problem case as JSON here")
    args = parser.parse_args()
    return experiments(args)


if __name__ == "__main__":
    sys.exit(main())
