"""`alloclab merge`: hosts' run stores into one run, every record kept and re-linked (ids renumbered),
groups checked to agree, nothing written on a refusal."""

from __future__ import annotations

import json

import pytest

from alloclab.common.errors import UserError
from alloclab.interchange.merge import merge_runs
from alloclab.store import DB_NAME, Store
from tests.conftest import run_cli

GROUPS = [("glibc", "glibc", None), ("jemalloc", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "5.3.0")]


def host_run(path, host: str, t0: float, groups=GROUPS, units: int = 2):
    """A fleet-collector-like store: per unit one process, a verification, samples, a restart."""
    path.mkdir(parents=True)
    s = Store.create(path / DB_NAME)
    s.begin()
    s.set_meta(
        name="relays",
        source="fleet",
        metric="rss",
        interval=1.0,
        seed=7,
        baseline="glibc",
        host=host,
        started_at=t0,
        ended_at=t0 + 10,
    )
    gid = {
        g: s.add_group(
            name=g,
            allocator=a,
            kind="preload",
            version=v,
            library_sha256=(v and "ab"),
            env_json="{}",
            command_json="[]",
            is_baseline=int(g == "glibc"),
        )
        for g, a, v in groups
    }
    for i in range(units * len(groups)):
        g = groups[i % len(groups)][0]
        rid = s.add_replica(group_id=gid[g], idx=i, name=f"relay@{i}", start_order=i, started_at=t0, host=host)
        pid = s.add_process(replica_id=rid, pid=100 + i, start_ticks=5, first_seen=t0, last_seen=t0 + 9, verified=1)
        s.add_verification(t=t0, process_id=pid, verified=1)
        s.add_samples(
            ("t", "replica_id", "phase", "rss_kb"),
            [(t0 + k + 0.01 * i, rid, "load", 1000 * (i + 1)) for k in range(10)],
        )
        s.add_event(t0 + 5, "process_restart", f"relay@{i}: main process 1 -> 2", rid, g)
    s.commit()
    s.close()
    return path


def test_merge_keeps_hosts_times_processes_and_events(tmp_path):
    a = host_run(tmp_path / "h1", "h1", 1000.0)
    b = host_run(tmp_path / "h2", "h2", 1000.3)
    out = merge_runs([a, b], tmp_path / "merged", say=lambda *x: None)
    m = Store.open(out)
    reps = m.replicas()
    assert sorted(r["name"] for r in reps) == sorted(f"{h}/relay@{i}" for h in ("h1", "h2") for i in range(4))
    for r in reps:
        host, unit = r["name"].split("/")
        i = int(unit.split("@")[1])
        assert r["host"] == host and r["group"] == GROUPS[i % 2][0]
        t0 = 1000.0 if host == "h1" else 1000.3
        series = m.series(r["id"], ["rss_kb"])
        assert series["t"] == [t0 + k + 0.01 * i for k in range(10)] and set(series["rss_kb"]) == {1000 * (i + 1)}
        procs = m.processes(r["id"])
        assert [p["pid"] for p in procs] == [100 + i]
        ev = [e for e in m.events(kinds=["process_restart"]) if e["replica_id"] == r["id"]]
        assert len(ev) == 1 and ev[0]["description"].startswith(unit)
    ver = m.verifications()
    assert len(ver) == 8 and {(v["replica_id"], v["pid"]) for v in ver} == {
        (r["id"], 100 + int(r["name"].split("@")[1])) for r in reps
    }
    meta = m.meta()
    assert meta["records"] == "alloclab" and json.loads(meta["hosts"]) == ["h1", "h2"]
    prov = json.loads(meta["merged_from"])
    assert [p["host"] for p in prov] == ["h1", "h2"] and prov[0]["rows"]["samples"] == 40
    m.close()


@pytest.mark.parametrize(
    "other, word",
    [
        ([("glibc", "glibc", None), ("mimalloc", "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2", "2.0.9")], "only in"),
        ([("glibc", "glibc", None), ("jemalloc", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "5.2.1")], "version"),
    ],
)
def test_groups_must_agree(tmp_path, other, word):
    a = host_run(tmp_path / "h1", "h1", 1000.0)
    b = host_run(tmp_path / "h2", "h2", 1000.0, groups=other)
    with pytest.raises(UserError) as err:
        merge_runs([a, b], tmp_path / "merged", say=lambda *x: None)
    assert word in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "merged").exists()


def test_cli_refuses_the_same_host_twice_in_one_line(tmp_path):
    a = host_run(tmp_path / "a", "h1", 1000.0)
    b = host_run(tmp_path / "b", "h1", 1000.0)
    p = run_cli("merge", str(a), str(b), "-o", str(tmp_path / "merged"))
    assert p.returncode == 2 and "Traceback" not in p.stderr and "h1" in p.stderr, p.stderr
    assert not (tmp_path / "merged").exists()
