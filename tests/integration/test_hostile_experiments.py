"""Hostile experiment files through the real CLI: one line, exit 2, and nothing created — no run
directory (given or default), no cgroup, no process. The issue's tracebacks and hangs, one by one."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli

BASE = """name = "hostile"
command = ["/bin/sleep", "30"]
interval = "0.5s"
[[group]]
name = "a"
allocator = "glibc"
"""


def cgroups_of(pid: int) -> list[str]:
    """Cgroups a run by process `pid` made (the runner names them alloclab-PID-REPLICA)."""
    found = []
    for root, dirs, _ in os.walk("/sys/fs/cgroup"):
        found += [os.path.join(root, d) for d in dirs if d.startswith(f"alloclab-{pid}-")]
    return found


def run_traced(*args: str, cwd: Path) -> tuple[subprocess.CompletedProcess, int]:
    """The real CLI, and its pid (to find anything it left)."""
    p = subprocess.Popen(
        [sys.executable, "-m", "alloclab", *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    out, err = p.communicate(timeout=60)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err), p.pid


def nothing_created(proc, workdir: Path, out: Path, *needles: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert lines[0].startswith("alloclab: error: ") and " — " in lines[0]  # the problem — the fix
    for n in needles:
        assert n in lines[0], lines[0]
    assert not os.path.exists(out), "a run directory was left behind"
    assert not (workdir / "runs").exists(), "a default run directory was left behind"


CASES = {
    "nul byte in an argument": (BASE.replace('"30"]', '"30\\u0000"]'), ["contains a NUL byte"]),
    "raw nul byte": (BASE.replace("interval", "\x00interval"), ["not valid TOML"]),
    "1,000-deep array": (
        BASE.replace('interval = "0.5s"', "x = " + "[" * 1000 + "]" * 1000),
        ["nested more than 16 deep"],
    ),
    "empty placeholder": (BASE.replace('"30"]', '"{}"]'), ["unknown placeholder {}"]),
    "format spec": (BASE.replace('"30"]', '"{seed:d}"]'), ["unknown placeholder {seed:d}"]),
    "attribute access": (BASE.replace('"30"]', '"{replica.x}"]'), ["unknown placeholder {replica.x}"]),
    "unmatched brace": (BASE.replace('"30"]', '"{"]'), ["unmatched brace"]),
    "env key A=B": (BASE + 'env = { "A=B" = "1" }\n', ["env key 'A=B' is not a variable name"]),
    "over-long path": (BASE.replace('"/bin/sleep"', '"/' + "a" * 5000 + '"'), ["5,001 bytes long"]),
    "over-long component": (
        BASE.replace('allocator = "glibc"', 'allocator = "/' + "a" * 300 + '.so"'),
        ["303-byte component"],
    ),
    "load = nan": (BASE + "[phases]\nload = nan\n", ["phases.load = nan is not a finite number"]),
    "interval = nan": (BASE.replace('"0.5s"', "nan"), ["interval = nan is not a finite number"]),
    "interval below the minimum": (BASE.replace('"0.5s"', '"1ms"'), ["shorter than the minimum of 0.1s"]),
    "interval of 1e-9": (BASE.replace('"0.5s"', "1e-9"), ["shorter than the minimum"]),
    "huge duration": (BASE + '[phases]\nload = "99999999999d"\n', ["longer than the maximum of 366d"]),
    "too many replicas": (BASE.replace("interval", "replicas = 100000\ninterval"), ["1 to 256 replicas"]),
    "missing load program": (
        BASE + '[load]\ncommand = ["./no-such-loadgen", "{port}"]\n',
        ["[load] command", "not found"],
    ),
    "load program inside workdir": (BASE + '[load]\ncommand = ["{workdir}/gen"]\n', ["inside {workdir}"]),
    "name with a slash": (BASE.replace('"hostile"', '"../../etc"'), ["must be 1-64 letters"]),
    "newline in a group name": (BASE.replace('name = "a"', 'name = "a\\nb"'), ["needs a name"]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_hostile_file_creates_nothing(tmp_path, name):
    text, needles = CASES[name]
    exp = tmp_path / "exp.toml"
    exp.write_text(text)
    out = tmp_path / "run"
    started = time.monotonic()
    proc, pid = run_traced("run", str(exp), "-o", str(out), cwd=tmp_path)
    nothing_created(proc, tmp_path, out, *needles)
    assert not cgroups_of(pid)
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("name", ["1,000-deep array", "env key A=B", "missing load program"])
def test_default_run_dir_not_made_and_check_agrees(tmp_path, name):
    text, needles = CASES[name]
    exp = tmp_path / "exp.toml"
    exp.write_text(text)
    proc = run_cli("run", str(exp), cwd=tmp_path, timeout=60)  # default: runs/<time>-<name>
    nothing_created(proc, tmp_path, tmp_path / "run", *needles)
    check = run_cli("check", str(exp), cwd=tmp_path, timeout=60)
    assert check.returncode == 2 and check.stderr.strip() == proc.stderr.strip()


@pytest.mark.parametrize(
    "option,value,needle",
    [
        ("--max-duration", "nan", "is not a duration"),
        ("--max-duration", "1e999", "is not a duration"),
        ("--max-duration", "99999999999999999999d", "longer than the maximum of 366d"),
        ("--max-duration", "0s", "longer than zero"),
        ("--max-duration", "-5m", "is not a duration"),
        ("--stable-for", "inf", "is not a duration"),
    ],
)
def test_duration_options_follow_the_same_rules(tmp_path, option, value, needle):
    exp = tmp_path / "exp.toml"
    exp.write_text(BASE)
    out = tmp_path / "run"
    extra = ["--until-significant"] if option == "--stable-for" else []
    proc = run_cli("run", str(exp), "-o", str(out), *extra, f"{option}={value}", cwd=tmp_path, timeout=60)
    nothing_created(proc, tmp_path, out, option, needle)


def test_output_that_is_a_file_or_too_long(tmp_path):
    exp = tmp_path / "exp.toml"
    exp.write_text(BASE)
    blocker = tmp_path / "file"
    blocker.write_text("keep")
    proc = run_cli("run", str(exp), "-o", str(blocker), cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and "is a file" in proc.stderr and blocker.read_text() == "keep"
    proc = run_cli("run", str(exp), "-o", str(tmp_path / ("d" * 300)), cwd=tmp_path, timeout=60)
    nothing_created(proc, tmp_path, tmp_path / ("d" * 300), "-o has a 300-byte component")


def test_experiment_file_that_is_not_a_file(tmp_path):
    os.mkfifo(tmp_path / "fifo.toml")  # reading it would block forever
    proc = run_cli("run", str(tmp_path / "fifo.toml"), "-o", str(tmp_path / "run"), cwd=tmp_path, timeout=60)
    nothing_created(proc, tmp_path, tmp_path / "run", "is not a regular file")


def test_check_accepts_a_good_file_and_creates_nothing(tmp_path):
    exp = tmp_path / "exp.toml"
    exp.write_text(
        BASE.replace("interval", "replicas = 2\ninterval") + '[[group]]\nname = "b"\nallocator = "bundled"\n'
    )
    proc = run_cli("check", str(exp), cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    # ok, with the design check's warning for 2 replicas (as run would print it)
    assert proc.stdout.startswith(
        "ok, with 1 warning (below): hostile: 2 groups (a=glibc, b=bundled) x 2 replicas, sampled every 0.5s"
    ), proc.stdout
    assert "design-cannot-show-difference" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp.toml"]


def test_the_minimum_interval_still_ends_on_time(tmp_path):
    """The hang the issue found: a tiny interval spun and ignored --max-duration. At the minimum
    interval a real run stops at --max-duration and samples at about the interval."""
    import sqlite3

    exp = tmp_path / "exp.toml"
    exp.write_text(BASE.replace('"0.5s"', '"0.1s"'))
    started = time.monotonic()
    proc = run_cli(
        "run", str(exp), "-o", str(tmp_path / "run"), "--max-duration", "2s", "--no-report", cwd=tmp_path, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert time.monotonic() - started < 60
    with sqlite3.connect(tmp_path / "run" / "run.db") as db:
        (ticks,) = db.execute("select count(distinct t) from host_samples").fetchone()
    assert 5 <= ticks <= 25  # 2 s at 0.1 s: about 20 ticks, never hundreds
