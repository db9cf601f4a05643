"""Crash hygiene, for real: alloclab killed with SIGKILL leaves no process and no cgroup behind
(its watchdog ends them, even a double-forked background child) and the run is marked cut short
and can be closed with --resume; a replica that crashes or exits early is named; a full disk ends
the run with one line; without cgroups a reused pid is never adopted."""

from __future__ import annotations

import glob
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from alloclab.capture import sampler
from alloclab.process import reaper
from tests.conftest import run_cli
from tests.waiting import wait_for, wait_for_ticks


def _start(exp: Path, out: Path, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "alloclab", "run", str(exp), "-o", str(out), "--no-report"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def _run_processes(token: str) -> list[int]:
    """Processes carrying the run's token in their environment (what the run started)."""
    return [
        pid
        for pid in sampler.all_processes()
        if sampler.environ_marks(pid, (reaper.TOKEN_VAR.encode(),)).get(reaper.TOKEN_VAR.encode()) == token.encode()
    ]


def _cgroups_of(pid: int) -> list[str]:
    # only under the parents the runner (a child of this process, in its cgroup) creates in: a shared
    # host can hold other sandboxes' leftovers with the same pid in sibling hierarchies
    return [p for parent, _ in sampler._own_cgroup_dirs() for p in glob.glob(f"{parent}/alloclab-{pid}-*")]


def _meta(db: Path) -> dict:
    return dict(sqlite3.connect(db).execute("SELECT key, value FROM meta").fetchall())


@pytest.fixture
def daemonizing(tmp_path, native_dir) -> Path:
    """A replica that leaves a double-forked, setsid background child, then runs a workload."""
    script = tmp_path / "daemonize.sh"
    script.write_text(
        f"#!/bin/sh\n( setsid sleep 300 & )\nexec {native_dir / 'frag'} --load 120 --mb 4 --threads 1 --seed 1\n"
    )
    script.chmod(0o755)
    return script


def _experiment(
    tmp: Path, command: list[str], load: str = "60s", interval: str = "0.25s", replicas: int = 2, extra_groups: str = ""
) -> Path:
    exp = tmp / "exp.toml"
    argv = ", ".join(f'"{a}"' for a in command)
    exp.write_text(
        f'name = "crash"\ncommand = [{argv}]\nreplicas = {replicas}\ninterval = "{interval}"\ngrace = "2s"\n'
        f'[phases]\nload = "{load}"\n[[group]]\nname = "glibc"\nallocator = "glibc"\n{extra_groups}'
    )
    return exp


def test_kill_minus_nine_leaves_nothing_and_the_run_is_closed_by_resume(tmp_path, daemonizing):
    out = tmp_path / "run"
    p = _start(_experiment(tmp_path, [str(daemonizing)]), out)
    wait_for_ticks(out / "run.db", 6)
    meta = _meta(out / "run.db")
    token = meta["run_token"]
    before = _run_processes(token)
    assert len(before) >= 4, before  # two workloads and two double-forked sleeps
    if meta["cgroups"] == "per replica":  # the look below sees them while they exist
        assert len(_cgroups_of(p.pid)) == 2
    p.kill()
    p.wait()
    killed_at = time.time()
    # the watchdog sweeps the run's processes and cgroups after alloclab died, then closes the run
    wait_for(
        lambda: not _run_processes(token) and not _cgroups_of(p.pid) and "end_reason" in _meta(out / "run.db"),
        30,
        "the watchdog to end every process of the run, remove its cgroups and record the end",
        interval=0.2,
    )  # a /proc walk per look
    db = sqlite3.connect(out / "run.db")
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    last = db.execute("SELECT MAX(t) FROM samples").fetchone()[0]
    assert killed_at - last < 2 * 0.25 + 1.0  # at most about one interval lost
    meta = _meta(out / "run.db")
    assert meta["end_reason"] == "killed" and meta["cut_short"] == "killed"
    assert db.execute("SELECT COUNT(*) FROM events WHERE kind = 'cut_short'").fetchone()[0] == 1
    assert db.execute("SELECT COUNT(*) FROM replicas WHERE ended_at IS NULL").fetchone()[0] == 0
    res = run_cli("run", "--resume", str(out))
    assert res.returncode == 0, res.stderr
    assert "no process of" in res.stdout and (out / "report.md").exists()
    assert (
        sqlite3.connect(out / "run.db").execute("SELECT COUNT(*) FROM events WHERE kind = 'resumed'").fetchone()[0] == 1
    )
    again = run_cli("run", str(tmp_path / "exp.toml"), "--resume", str(out))
    assert again.returncode == 2 and "not both" in again.stderr


def test_a_normal_end_leaves_no_background_child(tmp_path, daemonizing):
    out = tmp_path / "run"
    p = _start(_experiment(tmp_path, [str(daemonizing)], load="2s"), out, env={"ALLOCLAB_CGROUPS": "off"})
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert _run_processes(_meta(out / "run.db")["run_token"]) == []
    assert not (out / "watchdog.log").exists()  # the watchdog had nothing to do, and left


def test_crashed_and_early_replicas_are_named(tmp_path, native_dir):
    groups = (
        '[[group]]\nname = "segv"\nallocator = "glibc"\ncommand = ["/bin/sh", "-c", "sleep 1; kill -SEGV $$"]\n'
        '[[group]]\nname = "quits"\nallocator = "glibc"\ncommand = ["/bin/sh", "-c", "sleep 1; exit 3"]\n'
    )
    exp = _experiment(
        tmp_path,
        [str(native_dir / "frag"), "--load", "60", "--mb", "4", "--threads", "1"],
        load="4s",
        interval="0.5s",
        replicas=1,
        extra_groups=groups,
    )
    proc = run_cli("run", str(exp), "-o", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    db = sqlite3.connect(tmp_path / "run" / "run.db")
    rows = {name: (code, kind) for name, code, kind in db.execute("SELECT name, exit_code, end_kind FROM replicas")}
    assert rows["segv-1"] == (-signal.SIGSEGV, "crashed")
    assert rows["quits-1"] == (3, "exited-early")
    assert rows["glibc-1"][1] == "stopped"
    events = dict(db.execute("SELECT kind, description FROM events WHERE kind IN ('replica_crash', 'replica_exit')"))
    assert "segv-1 was killed by SIGSEGV" in events["replica_crash"]
    assert "quits-1 exited with code 3" in events["replica_exit"]
    report = (tmp_path / "run" / "report.md").read_text()
    assert "segv-1" in report and "quits-1" in report


@pytest.mark.parametrize(
    "content,said",
    [
        ("#!/nonexistent/interpreter\n", "names the interpreter"),  # refused by the checks before anything starts
        ("\x7fELF not really a program\n", "cannot start"),  # passes the checks; exec itself fails
    ],
)
def test_a_failing_start_is_one_line_and_leaves_nothing(tmp_path, content, said):
    script = tmp_path / "bad.sh"
    script.write_text(content)
    script.chmod(0o755)
    exp = _experiment(tmp_path, [str(script)], load="2s")
    proc = run_cli("run", str(exp), "-o", str(tmp_path / "run"))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "ProgrammingError" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("alloclab: error")]
    assert len(errors) == 1 and said in errors[0], proc.stderr  # (the planned-design warnings may precede it)
    assert not (tmp_path / "run").exists()


@pytest.fixture
def small_disk(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mnt)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs (needs root)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)])


@pytest.mark.root  # small_disk mounts a tmpfs
def test_a_full_disk_stops_the_run_with_one_line(tmp_path, small_disk, native_dir):
    out = small_disk / "run"
    exp = _experiment(
        tmp_path, [str(native_dir / "frag"), "--load", "120", "--mb", "4", "--threads", "1"], interval="0.1s"
    )
    p = subprocess.Popen(
        [sys.executable, "-m", "alloclab", "run", str(exp), "-o", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_ticks(out / "run.db", 5)
        token = _meta(out / "run.db")["run_token"]
        fd = os.open(small_disk / "filler", os.O_WRONLY | os.O_CREAT)
        try:  # take every free byte
            while True:
                os.write(fd, b"x" * 65536)
        except OSError:
            pass
        os.close(fd)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 3, err
    assert "Traceback" not in err and "disk" in err and "full" in err
    assert len([ln for ln in err.splitlines() if "alloclab: error" in ln]) == 1
    (small_disk / "filler").unlink()
    meta = _meta(out / "run.db")
    assert meta["end_reason"] == "disk-full"
    assert sqlite3.connect(out / "run.db").execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert _run_processes(token) == [] and _cgroups_of(p.pid) == []


def test_without_cgroups_a_reused_pid_is_never_adopted(tmp_path):
    """A replica's short-lived child is recorded; after it exits its pid is handed (through
    ns_last_pid) to an unrelated 100 MB process, which must not be sampled as the replica's."""
    script = tmp_path / "child.sh"
    script.write_text("#!/bin/sh\nsleep 2 &\necho $! > child.pid\nwait\nexec sleep 60\n")
    script.chmod(0o755)
    out = tmp_path / "run"
    p = _start(_experiment(tmp_path, [str(script)], replicas=1, interval="0.2s"), out, env={"ALLOCLAB_CGROUPS": "off"})
    try:
        pid_file = out / "replicas" / "glibc-1" / "work" / "child.pid"
        deadline = time.time() + 30
        while not (pid_file.exists() and pid_file.read_text().strip()) and time.time() < deadline:
            time.sleep(0.05)
        child = int(pid_file.read_text())
        while os.path.exists(f"/proc/{child}") and time.time() < deadline:
            time.sleep(0.05)
        intruder = None
        for _ in range(200):  # other processes on the host may take the pid first: retry
            Path("/proc/sys/kernel/ns_last_pid").write_text(str(child - 1))
            q = subprocess.Popen([sys.executable, "-c", "import time; b = bytearray(100 << 20); time.sleep(8)"])
            if q.pid == child:
                intruder = q
                break
            q.kill()
            q.wait()
        if intruder is None:
            pytest.skip("could not get the pid reused on this busy host")
        intruder_born = time.time()
        db = sqlite3.connect(out / "run.db")
        wait_for(
            lambda: (
                db.execute("SELECT COUNT(DISTINCT t) FROM samples WHERE t > ?", (intruder_born,)).fetchone()[0] >= 10
            ),
            30,
            "ten ticks sampled with the intruder alive",
        )
        intruder_start = sampler.read_stat(child).start_ticks
        assert (
            db.execute(
                "SELECT COUNT(*) FROM processes WHERE pid = ? AND start_ticks = ?", (child, intruder_start)
            ).fetchone()[0]
            == 0
        )
        assert db.execute("SELECT COUNT(*) FROM processes WHERE pid = ?", (child,)).fetchone()[0] == 1  # the real child
        assert db.execute("SELECT MAX(rss_kb) FROM samples").fetchone()[0] < 50_000
        intruder.kill()
        intruder.wait()
    finally:
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=60)


def test_tree_matches_roots_by_start_time():
    def st(pid, ppid, start):
        return sampler.ProcStat(pid, ppid, "x", start, 0, 0, 0, 0, 1)

    procs = {10: st(10, 1, 100), 11: st(11, 10, 105), 12: st(12, 11, 90)}  # 12 names 11 but started before it
    assert sampler.tree({(10, 100)}, procs) == [10, 11]
    assert sampler.tree({(10, 99)}, procs) == []  # pid 10 is another process now


def test_resume_samples_survivors_and_serves_their_metrics(tmp_path, daemonizing):
    """With alloclab and its watchdog both killed, the double-forked children survive; `--resume
    --metrics` samples them until the planned end and serves each resumed tick to Prometheus."""
    import socket
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    out = tmp_path / "run"
    p = _start(_experiment(tmp_path, [str(daemonizing)], load="14s", interval="0.5s"), out)
    wait_for_ticks(out / "run.db", 4)
    children = subprocess.run(
        ["pgrep", "-P", str(p.pid), "-f", "alloclab.process.watchdog"], capture_output=True, text=True
    )
    watchdog = [int(x) for x in children.stdout.split()]
    assert len(watchdog) == 1, children
    os.kill(watchdog[0], signal.SIGKILL)
    p.kill()
    p.wait()
    killed_at = time.time()
    token = _meta(out / "run.db")["run_token"]
    try:
        survivors = _run_processes(token)
        assert survivors, "nothing survived alloclab and its watchdog (the double-forked sleeps should)"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        res = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "alloclab",
                "run",
                "--resume",
                str(out),
                "--no-report",
                "--metrics",
                f"127.0.0.1:{port}",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        text, t, deadline = "", 0.0, time.time() + 30
        while time.time() < deadline and t < killed_at:  # until a tick the resume itself sampled
            time.sleep(0.3)
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
            except OSError:
                continue
            t = next(
                (
                    s.value
                    for fam in text_string_to_metric_families(text)
                    for s in fam.samples
                    if s.name == "alloclab_last_sample_timestamp_seconds"
                ),
                0.0,
            )
        stdout, stderr = res.communicate(timeout=60)
    finally:
        for pid in _run_processes(token):
            os.kill(pid, signal.SIGKILL)
    assert res.returncode == 0, stderr
    assert "processes had survived" in stdout and f"serving /metrics on 127.0.0.1:{port}" in stderr
    assert t > killed_at, "no resumed tick was served"
    samples = [s for fam in text_string_to_metric_families(text) for s in fam.samples]
    rss = {
        s.labels["unit"]: s.value
        for s in samples
        if s.name == "alloclab_unit_memory_bytes" and s.labels["memtype"] == "resident"
    }
    db = sqlite3.connect(out / "run.db")
    assert rss and set(rss) <= {"glibc-1", "glibc-2"}
    for name, value in rss.items():
        (kb,) = db.execute(
            "SELECT s.rss_kb FROM samples s JOIN replicas r ON r.id = s.replica_id WHERE r.name = ? AND s.t = ?",
            (name, t),
        ).fetchone()
        assert value == kb * 1024
    assert _run_processes(token) == []  # the resume ended the survivors
    with pytest.raises(OSError):  # and the exposition ended with it
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)
