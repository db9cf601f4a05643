"""`alloclab compare` on real short runs (real processes under glibc, real /proc, real SQLite) and the
live view served during a real run, checked against the store it reads."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import run_cli


def experiment(tmp: Path, native_dir: Path, app_mb: int, name: str) -> Path:
    frag = native_dir / "frag"
    # two seconds of churn, then the survivors held through the measured window: the level depends
    # little on how fast the loaded machine let the program work (24 MB: about 1.5x the level of 8)
    cmd = lambda mb: (
        f'["{frag}", "--load", "2", "--idle", "60", "--mb", "{mb}", "--threads", "1", "--seed", "{{seed}}"]'
    )
    path = tmp / f"{name}.toml"
    path.write_text(f"""
name = "{name}"
replicas = 3
interval = "0.5s"
seed = 7
baseline = "glibc"
command = {cmd(8)}
[phases]
warmup = "3s"
load = "3s"
idle = "2s"
[[group]]
name = "glibc"
allocator = "glibc"
[[group]]
name = "app"
allocator = "glibc"
command = {cmd(app_mb)}
""")
    return path


SECRET = "hunter2-not-for-upstream"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=20) as r:
        return json.loads(r.read())


@pytest.fixture(scope="module")
def runs(tmp_path_factory, native_dir):
    """Run A (served live and polled while it runs), run A again, and run B whose `app` group holds
    3x the memory (the same program told to keep 24 MB instead of 8)."""
    tmp = tmp_path_factory.mktemp("cmp")
    same = experiment(tmp, native_dir, 8, "cmp")
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "alloclab",
            "run",
            str(same),
            "-o",
            str(tmp / "a"),
            "--no-report",
            "--serve",
            f"127.0.0.1:{port}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "ALLOCLAB_TEST_SECRET": SECRET},
    )
    polls, assets = [], {}
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            state = get(f"http://127.0.0.1:{port}/api/state")
            if state["last_sample"] is not None and state["ended_at"] is None:
                polls.append((state, get(f"http://127.0.0.1:{port}/api/series?since=0")))
                if "page" not in assets:
                    for path in ("/", "/plotly.min.js"):
                        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=20) as r:
                            assets[path] = r.read().decode()
                    assets["page"] = "ok"
        except OSError:
            pass
        time.sleep(0.7)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    after = None
    try:
        get(f"http://127.0.0.1:{port}/api/state")
    except OSError as exc:
        after = exc
    for name in ("a2", "b"):
        exp = same if name == "a2" else experiment(tmp, native_dir, 24, "cmp")
        p = run_cli("run", str(exp), "-o", str(tmp / name), "--no-report")
        assert p.returncode == 0, p.stderr
    return {"dir": tmp, "polls": polls, "stderr": err, "after": after, "port": port, "assets": assets}


def test_identical_runs_exit_0_with_no_significant_change(runs):
    d = runs["dir"]
    p = run_cli("compare", str(d / "a"), str(d / "a2"), "--fail-on-increase", "5")
    assert "no significant change in any matched group" in p.stdout
    assert "gate PASSED" in p.stdout or "gate INCONCLUSIVE" in p.stdout  # never "FAILED" on identical runs
    # undecided is exit 4 (never a silent green), unless allowed
    assert p.returncode == (0 if "gate PASSED" in p.stdout else 4), p.stdout + p.stderr
    allowed = run_cli("compare", str(d / "a"), str(d / "a2"), "--fail-on-increase", "5", "--allow-inconclusive")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert "experiment file: identical" in p.stdout


def test_a_group_holding_more_memory_fails_the_gate(runs):
    d = runs["dir"]
    p = run_cli("compare", str(d / "a"), str(d / "b"), "--fail-on-increase", "5")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "gate FAILED" in p.stdout and "shown above 1.05× in app" in p.stdout
    from alloclab.analysis import two_runs  # the --json document, built in this process (saves an interpreter start)
    from alloclab.reporters.two_runs import to_json

    j = json.loads(to_json(two_runs.compare_runs(d / "a", d / "b", fail_on_increase=5)))
    app = next(g for g in j["groups"] if g["key"] == "app")
    glibc = next(g for g in j["groups"] if g["key"] == "glibc")
    assert app["significant"] and app["ratio_ci"][0] > 1.05 and app["rose_beyond_gate"]
    assert not glibc["rose_beyond_gate"]
    assert j["gate"] == "above" and any(
        c["field"] == "command_json" and c["scope"] == "app" for c in j["provenance_changes"]
    )
    # a bad run argument exits 2 with one line
    bad = run_cli("compare", str(d / "a"), str(d / "nope"))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr


def test_live_view_answers_with_the_runs_current_data(runs):
    polls, d = runs["polls"], runs["dir"]
    assert f"live view: http://127.0.0.1:{runs['port']}/" in runs["stderr"]
    assert len(polls) >= 2, "the live view never answered during the run"
    db = sqlite3.connect(d / "a" / "run.db")
    ids = {name: rid for rid, name in db.execute("SELECT id, name FROM replicas")}
    for state, series in polls:
        assert len(state["replicas"]) == 6
        for r in state["replicas"]:
            if r["last_t"] is None:
                continue
            (kb,) = db.execute(
                "SELECT rss_kb FROM samples WHERE replica_id = ? AND t = ?", (ids[r["name"]], r["last_t"])
            ).fetchone()
            assert r["last_mb"] == pytest.approx(kb / 1024)
        # every sample up to the poll, exactly as stored
        for name, s in series["series"].items():
            rows = db.execute(
                "SELECT t, rss_kb FROM samples WHERE replica_id = ? AND t <= ? ORDER BY t", (ids[name], series["until"])
            ).fetchall()
            assert s["t"] == [t for t, _ in rows] and s["mb"] == pytest.approx([kb / 1024 for _, kb in rows])
    # the data grew between polls: the view follows the run
    assert polls[-1][0]["last_sample"] > polls[0][0]["last_sample"]
    # the page and its chart library come from the server itself (no other origin named)
    page, js = runs["assets"]["/"], runs["assets"]["/plotly.min.js"]
    assert '<script src="/plotly.min.js"></script>' in page and "http://" not in page and "https://" not in page
    assert len(js) > 1_000_000 and "plotly" in js[:2000].lower()
    assert runs["after"] is not None, "the live view outlived the run"


def test_live_view_refuses_public_addresses_and_bad_ports(tmp_path, native_dir):
    exp = experiment(tmp_path, native_dir, 8, "x")
    p = run_cli("run", str(exp), "-o", str(tmp_path / "r"), "--serve", "0.0.0.0:8080")
    assert p.returncode == 2 and "not a loopback address" in p.stderr and not (tmp_path / "r").exists()
    p = run_cli("run", str(exp), "-o", str(tmp_path / "r"), "--serve", "127.0.0.1:99999")
    assert p.returncode == 2 and "[ADDR:]PORT" in p.stderr
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        p = run_cli("run", str(exp), "-o", str(tmp_path / "r2"), "--serve", f"127.0.0.1:{busy.getsockname()[1]}")
    assert p.returncode == 2 and "cannot serve the live view" in p.stderr and not (tmp_path / "r2").exists()


def test_bundle_holds_what_upstream_needs_and_extracts_safely(runs, tmp_path):
    d = runs["dir"]
    out = tmp_path / "a.tar.gz"
    p = run_cli("bundle", str(d / "a"), "-o", str(out))  # run a has no report yet: bundle writes it
    assert p.returncode == 0, p.stderr
    with tarfile.open(out) as tar:
        members = tar.getmembers()
        names = {m.name for m in members}
        for m in members:
            assert m.isfile() and not m.name.startswith("/") and ".." not in Path(m.name).parts, m.name
            assert m.name.startswith("a-bundle/")
        for f in (
            "experiment.toml",
            "provenance.json",
            "README.md",
            "report.md",
            "summary.json",
            "charts/timeseries.png",
        ):
            assert f"a-bundle/{f}" in names, f
        blob = b"".join(tar.extractfile(m).read() for m in members)
        tar.extractall(tmp_path / "x", filter="data")  # the strict filter accepts every member
    assert SECRET.encode() not in blob
    root = tmp_path / "x" / "a-bundle"
    db = sqlite3.connect(d / "a" / "run.db")
    (exp,) = db.execute("SELECT value FROM meta WHERE key = 'experiment'").fetchone()
    assert (root / "experiment.toml").read_text() == exp
    prov = json.loads((root / "provenance.json").read_text())
    stored = {n: (path, ver) for n, path, ver in db.execute("SELECT name, library_path, version FROM groups")}
    assert {g["name"]: (g["library_path"], g["version"]) for g in prov["groups"]} == stored
    (kernel,) = db.execute("SELECT value FROM meta WHERE key = 'kernel'").fetchone()
    assert prov["run"]["kernel"] == kernel and "run_token" not in prov["run"]
    assert "alloclab run experiment.toml" in (root / "README.md").read_text()
    again = run_cli("bundle", str(d / "a"), "-o", str(out))
    assert again.returncode == 2 and "already exists" in again.stderr


def test_bundle_refuses_unreadable_runs(tmp_path):
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "run.db").write_bytes(b"not a database at all" * 100)
    for run in (tmp_path / "broken", tmp_path / "missing"):
        p = run_cli("bundle", str(run))
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr, p.stderr
    assert not list(tmp_path.glob("*.tar.gz"))
