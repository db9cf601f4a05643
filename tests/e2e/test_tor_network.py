"""The tor-network scenario end to end, with Debian's tor: a private test network on loopback in
its own network namespace reaches a consensus, its relays (the replicas, each under its group's
allocator) serve directory load, the report is written, and nothing of it outlives alloclab —
not even after kill -9."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from alloclab.capture import sampler
from alloclab.process import reaper
from alloclab.tor import network
from alloclab.tor.network import DIRECTORY_HELD
from tests.conftest import run_cli
from tests.experiments import write_experiment

pytestmark = [pytest.mark.tor, pytest.mark.root]  # Debian's tor in a network namespace


@pytest.fixture(scope="module")
def tor() -> str:
    found = shutil.which("tor") or ("/usr/sbin/tor" if os.path.exists("/usr/sbin/tor") else None)
    if not found:
        pytest.fail("tor missing: run scripts/install.sh --test")
    why = network.namespace_refusal()
    if why:
        pytest.skip(f"no network namespace here ({why}): the scenario refuses to run tor on the host network")
    return found


def _token_processes(token: str) -> list[int]:
    return [
        pid
        for pid in sampler.all_processes()
        if sampler.environ_marks(pid, (reaper.TOKEN_VAR.encode(),)).get(reaper.TOKEN_VAR.encode()) == token.encode()
    ]


def _db(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def test_two_groups_of_two_relays(tor, tmp_path, jemalloc):
    # routers: descriptor-only routers in the directory (7,000 in benchmarks/tor)
    write_experiment(
        tmp_path / "tor.toml",
        "tor-e2e",
        None,
        {"glibc": {"allocator": "glibc", "torrc": ["MaxMemInQueues 256 MB"]}, "jemalloc": jemalloc},
        replicas=2,
        interval="1s",
        verify_every="10s",
        phases={"warmup": "10s", "load": "30s"},
        tables={"scenario": {"name": "tor-network", "voting_interval": "10s", "load_rate": 5, "routers": 40}},
    )
    run = tmp_path / "run"
    t0 = time.monotonic()
    out = run_cli("run", str(tmp_path / "tor.toml"), "-o", str(run), timeout=400)
    took = time.monotonic() - t0
    assert out.returncode == 0, out.stderr[-2000:]
    db = _db(run / "run.db")
    kinds = [k for (k,) in db.execute("SELECT kind FROM events")]
    assert "tor_consensus" in kinds and "tor_relays_ready" in kinds, kinds
    meta = dict(db.execute("SELECT key, value FROM meta"))
    assert meta["network_namespace"] == "interfaces: lo"  # nothing but loopback
    load = json.loads(meta["tor_network"])["load"]
    assert sorted(load) == ["glibc-1", "glibc-2", "jemalloc-1", "jemalloc-2"]
    info = json.loads(meta["tor_network"])
    # the routers' signed descriptors were accepted and voted in: the consensus lists them beside the relays
    assert info["routers"]["accepted"] >= 40 and info["routers"]["refused"] == 0, info["routers"]
    assert info["relays_listed"] >= 40 + 4, info["relays_listed"]
    # the warm-up lasts until every relay holds the directory (issue 26: the download is not the load under test)
    held = db.execute("SELECT t FROM events WHERE kind = 'tor_directory_held'").fetchone()
    load_at = db.execute("SELECT t FROM events WHERE kind = 'phase' AND description LIKE 'load%'").fetchone()
    assert held and load_at and load_at[0] >= held[0], (held, load_at)
    assert db.execute("SELECT count(*) FROM samples WHERE phase = 'load' AND t < ?", held).fetchone()[0] == 0
    load_s = db.execute("SELECT max(t) - min(t) FROM samples WHERE phase = 'load'").fetchone()[0]
    assert load_s >= 30 - 2, load_s  # the load lasts as planned after a held warm-up
    assert json.loads(meta["phases"])["warmup"] >= 10 and info["directory_at"] == held[0]
    for name, h in info["holding"].items():
        # held by the scenario's own rule (a few descriptors are always in flight under churn)
        assert (
            h["listed"] >= 36
            and h["descriptors"] >= DIRECTORY_HELD * h["listed"]
            and h["microdescs"] >= DIRECTORY_HELD * h["md_listed"]
        ), (name, h)
    cached = (run / "replicas" / "glibc-1" / "work" / "data" / "cached-consensus").read_text()
    assert sum(line.startswith("r fake") for line in cached.splitlines()) >= 36  # what the relay caches and serves
    for name, counts in load.items():
        assert counts["served"] > 20, (name, counts)  # every relay served directory requests
        assert counts["by_kind"].get("consensus", 0) > 0 and counts["by_kind"].get("server/all", 0) > 0
    rows = db.execute("SELECT r.name, r.verified, g.name FROM replicas r JOIN groups g ON g.id = r.group_id").fetchall()
    assert len(rows) == 4 and all(v == 1 for _, v, _ in rows), rows
    comm = {c for (c,) in db.execute("SELECT DISTINCT comm FROM processes")}
    assert comm == {"tor"}, comm
    mapped = {
        m
        for (m,) in db.execute(
            "SELECT DISTINCT mapped_allocator FROM processes p JOIN replicas r ON r.id = p.replica_id "
            "JOIN groups g ON g.id = r.group_id WHERE g.name = 'jemalloc'"
        )
    }
    assert any("jemalloc" in (m or "") for m in mapped), mapped
    assert "## Tor test network" in (run / "report.md").read_text()
    assert "descriptor-only routers" in (run / "report.md").read_text()
    # the network is kept for inspection: keys, torrcs (with the group's own option), logs
    assert (run / "tor-network" / "auth0" / "keys" / "authority_certificate").is_file()
    assert "MaxMemInQueues 256 MB" in (run / "replicas" / "glibc-1" / "work" / "torrc").read_text()
    assert "MaxMemInQueues" not in (run / "replicas" / "jemalloc-1" / "work" / "torrc").read_text()
    assert _token_processes(meta["run_token"]) == []
    print(f"tor e2e took {took:.0f} s")


def _consensus_flags(path: Path) -> dict[str, set[str]]:
    """nickname -> flags of a consensus ({} while there is none)."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    out, nick = {}, None
    for line in lines:
        if line.startswith("r "):
            nick = line.split()[1]
        elif line.startswith("s ") and nick:
            out[nick] = set(line.split()[1:])
    return out


def test_kill_9_leaves_no_tor_behind(tor, tmp_path):
    # co-guard: guard relays with DirCache 0 (no DirPort, no load, still relays)
    write_experiment(
        tmp_path / "tor.toml",
        "tor-kill",
        None,
        {"glibc": "glibc"},
        replicas=2,
        interval="1s",
        phases={"warmup": "10s", "load": "10m"},
        tables={
            "scenario": {
                "name": "tor-network",
                "authorities": 1,
                "voting_interval": "10s",
                "variant": "co-guard",
                "routers": 20,
            }
        },
    )
    run = tmp_path / "run"
    p = subprocess.Popen(
        [sys.executable, "-m", "alloclab", "run", str(tmp_path / "tor.toml"), "-o", str(run), "--no-report"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 150
        token, tor_pids = None, []
        while time.time() < deadline:
            try:
                db = _db(run / "run.db")
                token = dict(db.execute("SELECT key, value FROM meta")).get("run_token")
                samples = db.execute("SELECT COUNT(DISTINCT t) FROM samples").fetchone()[0]
                db.close()
            except sqlite3.OperationalError:
                samples = 0
            if token and samples >= 3:
                tor_pids = [pid for pid in _token_processes(token) if sampler.read_stat(pid).comm == "tor"]
                flags = _consensus_flags(run / "tor-network" / "auth0" / "cached-consensus")
                if len(tor_pids) >= 3 and {"glibc1", "glibc2"} <= set(flags):  # the authority and both relays, listed
                    break
            time.sleep(0.5)
        assert len(tor_pids) >= 3, "the network did not start"
        # co-guard: the relays under test are voted Guard, the descriptor-only routers are not
        assert all("Guard" in flags[n] for n in ("glibc1", "glibc2")), flags
        routers = [f for n, f in flags.items() if n.startswith("fake")]
        assert len(routers) >= 18 and not any("Guard" in f for f in routers), flags
        torrc = (run / "replicas" / "glibc-1" / "work" / "torrc").read_text()
        assert "DirCache 0" in torrc and "DirPort" not in torrc
        p.send_signal(signal.SIGKILL)
        p.wait()
        deadline = time.time() + 30
        while _token_processes(token) and time.time() < deadline:
            time.sleep(0.2)
        assert _token_processes(token) == []
        assert not any(sampler.is_alive(sampler.read_stat(pid).identity) for pid in tor_pids if sampler.read_stat(pid))
        deadline = time.time() + 30  # the watchdog marks the run after its sweep
        while (
            dict(_db(run / "run.db").execute("SELECT key, value FROM meta")).get("end_reason") is None
            and time.time() < deadline
        ):
            time.sleep(0.2)
        meta = dict(_db(run / "run.db").execute("SELECT key, value FROM meta"))
        assert meta.get("end_reason") == "killed"
        assert (run / "tor-network" / "auth0" / "torrc").is_file()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_refused_clearly_without_a_network_namespace(tmp_path):
    """Without CAP_SYS_ADMIN (dropped from the bounding set, so even root lacks it) no namespace
    can be made: `check` and `run` refuse in one line, and nothing is created."""
    if not shutil.which("setpriv") or os.geteuid() != 0:
        pytest.skip("needs root and setpriv to drop CAP_SYS_ADMIN")
    write_experiment(
        tmp_path / "tor.toml", "tor-refused", None, {"a": "glibc"}, tables={"scenario": {"name": "tor-network"}}
    )
    for verb in (["check"], ["run", "-o", str(tmp_path / "run")]):
        out = subprocess.run(
            [
                "setpriv",
                "--bounding-set=-sys_admin",
                sys.executable,
                "-m",
                "alloclab",
                *verb,
                str(tmp_path / "tor.toml"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ},
        )
        assert out.returncode == 2 and "refused one (Operation not permitted)" in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_no_consensus_in_time_is_one_line_and_the_network_is_kept(tor, tmp_path):
    """A first consensus cannot come within the timeout (5-minute voting, 10 s allowed): the run
    stops before any relay starts, says why in one line (exit 2), keeps the network directory for
    inspection and leaves no authority running."""
    write_experiment(
        tmp_path / "tor.toml",
        "tor-slow",
        None,
        {"glibc": "glibc"},
        phases={"load": "1m"},
        tables={
            "scenario": {"name": "tor-network", "authorities": 1, "voting_interval": "5m", "consensus_timeout": "10s"}
        },
    )
    run = tmp_path / "run"
    out = run_cli("run", str(tmp_path / "tor.toml"), "-o", str(run), timeout=120)
    assert out.returncode == 2 and "no consensus within 10 s" in out.stderr, out.stderr
    # after the planned-design warnings and the progress lines: one error line
    errors = [line for line in out.stderr.splitlines() if line.startswith("alloclab: error:")]
    assert len(errors) == 1 and "no consensus within 10 s" in errors[0] and "Traceback" not in out.stderr, out.stderr
    meta = dict(_db(run / "run.db").execute("SELECT key, value FROM meta"))
    assert meta["end_reason"] == "no tor consensus"
    assert (run / "tor-network" / "auth0" / "notice.log").is_file()
    assert not (run / "replicas" / "glibc-1" / "stdout.log").exists()  # no relay was started
    assert _token_processes(meta["run_token"]) == []


@pytest.mark.slow
def test_traffic_through_each_groups_relays(tor, tmp_path, jemalloc):
    """`traffic`: each group's tor client builds circuits of that group's relays only (guard, middle
    and exit all relays under test, the exits reaching nothing but the sink) and moves data through
    them. Slow (~2-3 min): `pytest -m slow tests/e2e/test_tor_network.py -k traffic`."""
    write_experiment(
        tmp_path / "tor.toml",
        "tor-traffic",
        None,
        {"glibc": "glibc", "jemalloc": jemalloc},
        replicas=3,
        interval="2s",
        phases={"warmup": "10s", "load": "60s"},
        tables={
            "scenario": {
                "name": "tor-network",
                "voting_interval": "10s",
                "routers": 40,
                "authorities": 1,
                "traffic": 200,
                "num_cpus": 4,
            }
        },
    )
    run = tmp_path / "run"
    out = run_cli("run", str(tmp_path / "tor.toml"), "-o", str(run), timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    db = _db(run / "run.db")
    meta = dict(db.execute("SELECT key, value FROM meta"))
    streams = json.loads(meta["tor_network"])["traffic"]
    for group, c in streams.items():  # every group's client moved data through its relays
        assert c["streams"] >= 20 and c["bytes_down"] > 1_000_000, (group, c)
    sink = json.loads((run / "tor-network" / "traffic" / "sink.json").read_text())
    assert sink["streams"] >= sum(c["streams"] for c in streams.values())
    net = json.loads((run / "tor-network" / "network.json").read_text())
    relays = {r["replica"] for r in net["relays"]}
    # only the relays under test are Guard and Exit (not the authority, not the routers)
    flags = _consensus_flags(run / "tor-network" / "auth0" / "cached-consensus")
    guards = {n for n, f in flags.items() if {"Guard", "Exit", "Fast"} <= f}
    assert guards == {network.nickname(r) for r in relays}, flags
    for i, _group in enumerate(("glibc", "jemalloc")):
        torrc = (run / "tor-network" / "traffic" / f"client{i}" / "torrc").read_text()
        mine = [ln for ln in torrc.splitlines() if ln.startswith(("MiddleNodes", "ExitNodes", "ExcludeNodes"))]
        assert len(mine) == 3 and mine[0].split()[1] == mine[1].split()[1] != mine[2].split()[1], mine
    for r in net["relays"]:
        text = Path(r["torrc"]).read_text()
        sink_port = 20000 - network.TRAFFIC_PORTS_BELOW - 1  # port_base's default
        assert "NumCPUs 4" in text and f"ExitPolicy accept *:{sink_port}\nExitPolicy reject *:*" in text
    assert _token_processes(meta["run_token"]) == []
