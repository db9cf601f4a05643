"""The exposition (one snapshot per scrape, loopback by default), the host-spread warning and the
store migration that added replicas.host."""
from __future__ import annotations

import sqlite3
import urllib.request

import pytest

from alloclab import metrics
from alloclab.analysis.warnings import host_spread
from alloclab.errors import UserError
from alloclab.store import SCHEMA_VERSION, Store


def test_listen_addresses():
    assert metrics.parse_listen("9464") == ("127.0.0.1", 9464)
    assert metrics.parse_listen(":9464") == ("127.0.0.1", 9464)
    assert metrics.parse_listen("0.0.0.0:9464") == ("0.0.0.0", 9464)
    assert metrics.parse_listen("[::1]:9464") == ("::1", 9464)
    for bad in ("example:80", "1.2.3.4:99999", "x", "1.2.3.4:"):
        with pytest.raises(UserError, match="not an address"):
            metrics.parse_listen(bad)


def test_a_scrape_reads_one_snapshot_with_group_sums():
    exp = metrics.Exposition()
    server, port = metrics.serve(exp, "127.0.0.1:0")
    try:
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read() == b""     # nothing sampled yet
        units = [metrics.UnitFigures(f"u{i}.service", "jemalloc", "jemalloc@5.3.0", "5.3.0", 2,
                                     {"rss_kb": 1000 + i, "pss_kb": None, "cgroup_kb": 2000}, 1.5, i == 0, i)
                 for i in range(3)]
        exp.publish(metrics.Snapshot(t=1234.5, host="h1", units=units))
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    finally:
        server.shutdown()
    from prometheus_client.parser import text_string_to_metric_families
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(text) for s in fam.samples}
    group_labels = (("allocator", "jemalloc@5.3.0"), ("group", "jemalloc"), ("host", "h1"))
    assert samples[("alloclab_group_memory_bytes", group_labels + (("memtype", "resident"), ("version", "5.3.0")))] == 3003 * 1024
    assert samples[("alloclab_group_memory_bytes", group_labels + (("memtype", "cgroup"), ("version", "5.3.0")))] == 3 * 2000 * 1024
    assert samples[("alloclab_group_units", group_labels + (("version", "5.3.0"),))] == 3
    assert 'memtype="proportionalResident"' not in text          # not measured this tick: absent, not 0
    assert text.count("alloclab_unit_restarts_total{") == 3 and "# TYPE alloclab_unit_cpu_seconds_total counter" in text
    assert 'alloclab_unit_allocator_verified{allocator="jemalloc@5.3.0",group="jemalloc",host="h1",unit="u1.service",' \
           'version="5.3.0"} 0.0' in text
    assert 'alloclab_last_sample_timestamp_seconds{host="h1"} 1234.5' in text


def rep(name, group, host):
    return {"name": name, "group": group, "host": host}


def test_host_spread_warns_only_when_groups_are_uneven():
    even = [rep(f"h{h}/u{i}", g, f"h{h}") for h in (1, 2) for i, g in enumerate(["a", "b", "a", "b"])]
    assert host_spread(even, ["a", "b"]) == []
    assert host_spread([rep("u1", "a", None), rep("u2", "b", None)], ["a", "b"]) == []      # no hosts recorded
    uneven = [rep("h1/u1", "a", "h1"), rep("h1/u2", "a", "h1"), rep("h1/u3", "b", "h1"), rep("h2/u1", "b", "h2"),
              rep("h2/u2", "b", "h2"), rep("h2/u3", "b", "h2")]
    (w,) = host_spread(uneven, ["a", "b"])
    assert w.kind == "hosts-unbalanced" and "a" in w.groups and w.data["replicas_per_host"]["a"] == {"h1": 2, "h2": 0}


def test_a_schema_3_store_gains_the_host_column(tmp_path):
    store = Store.create(tmp_path / "run.db")
    store.insert("groups", name="g", allocator="glibc")
    store.insert("replicas", group_id=1, name="r1", idx=0)
    store.close()
    conn = sqlite3.connect(tmp_path / "run.db")          # make it what an older alloclab wrote
    conn.execute("ALTER TABLE replicas DROP COLUMN host")
    conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    again = Store.open(tmp_path)
    assert again.meta()["schema_version"] == str(SCHEMA_VERSION)
    assert again.replicas()[0]["host"] is None and again.replicas()[0]["name"] == "r1"



def test_import_refuses_what_prometheus_should_not_have_sent(tmp_path, monkeypatch):
    from alloclab import promimport
    answers = {
        "unprintable": [{"metric": {"group": "g\n1", "unit": "u"}, "values": [[1, "5"]]}],
        "no label": [{"metric": {"unit": "u"}, "values": [[1, "5"]]}],
        "malformed": [{"metric": {"group": "g", "unit": "u"}, "values": [[1, "five"]]}],
    }
    for what, answer in answers.items():
        document = {"status": "success", "data": {"resultType": "matrix", "result": answer}}
        monkeypatch.setattr(promimport.Client, "get", lambda self, path, params, document=document: document)
        with pytest.raises(UserError):
            promimport.import_prometheus("http://x", tmp_path / what, 0, 10, 1, {"rss_kb": "q"}, say=lambda s: None)
        assert not (tmp_path / what).exists()          # nothing created before the data were read
    monkeypatch.setattr(promimport.Client, "get", lambda self, path, params: {
        "status": "success", "data": {"resultType": "matrix", "result": []}})
    with pytest.raises(UserError, match="no series"):
        promimport.import_prometheus("http://x", tmp_path / "empty", 0, 10, 1, {"rss_kb": "q"}, say=lambda s: None)
    with pytest.raises(UserError, match="not before"):
        promimport.import_prometheus("http://x", tmp_path / "r", 10, 5, 1, {"rss_kb": "q"}, say=lambda s: None)
    assert promimport.parse_time("now-10m", "--from", now=1000.0) == 400.0
    assert promimport.parse_time("2026-01-01T00:00:00Z", "--from") == 1767225600.0
    with pytest.raises(UserError, match="is not a time"):
        promimport.parse_time("yesterday", "--from")


def test_cli_one_line_errors(tmp_path):
    from tests.conftest import run_cli
    p = run_cli("import", "prometheus", "http://127.0.0.1:1", "-o", str(tmp_path / "r"))
    assert p.returncode == 2 and "cannot read http://127.0.0.1:1 as a Prometheus server" in p.stderr
    assert p.stderr.count("\n") == 1 and not (tmp_path / "r").exists()
    p = run_cli("fleet", "collect", "--plan", str(tmp_path / "none.json"), "-o", str(tmp_path / "r"), "--listen", "nope:1")
    assert p.returncode == 2 and p.stderr.count("\n") == 1
