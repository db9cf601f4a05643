"""The exposition (one snapshot per scrape, loopback by default), the host-spread warning and the
store migration that added replicas.host."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import urllib.request

import pytest

from alloclab.analysis.warnings import host_spread
from alloclab.common.errors import UserError
from alloclab.serve import metrics
from alloclab.store import SCHEMA_VERSION, Store


def test_listen_addresses():
    assert metrics.parse_listen("9464") == ("127.0.0.1", 9464)
    assert metrics.parse_listen(":9464") == ("127.0.0.1", 9464)
    assert metrics.parse_listen("0.0.0.0:9464") == ("0.0.0.0", 9464)
    assert metrics.parse_listen("[::1]:9464") == ("::1", 9464)
    for bad in ("example:80", "1.2.3.4:99999", "x", "1.2.3.4:"):
        with pytest.raises(UserError, match="not an address"):
            metrics.parse_listen(bad)


def _snapshot_of_three():
    units = [
        metrics.UnitFigures(
            f"u{i}.service",
            "jemalloc",
            "jemalloc@5.3.0",
            "5.3.0",
            2,
            {"rss_kb": 1000 + i, "pss_kb": 500 if i else None, "cgroup_kb": 2000},
            1.5,
            i == 0,
            i,
            sha256="ab" * 32,
            start_time=1000.0 + i,
        )
        for i in range(3)
    ]
    units.append(
        metrics.UnitFigures(
            "down.service", "jemalloc", "jemalloc@5.3.0", "5.3.0", 0, {}, None, None, 4, up=False, sha256="ab" * 32
        )
    )
    return metrics.Snapshot(t=1234.5, host="h1", units=units)


def _scrape(exp) -> str:
    server, port = metrics.serve(exp, "127.0.0.1:0")
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    finally:
        server.shutdown()


def test_a_scrape_reads_one_snapshot_with_group_sums():
    exp = metrics.Exposition(metrics.CollectorHealth())
    assert "alloclab_unit" not in _scrape(exp)  # nothing sampled yet: only the collector's own
    exp.publish(_snapshot_of_three())
    text = _scrape(exp)
    from prometheus_client.parser import text_string_to_metric_families

    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }
    group = (("group", "jemalloc"), ("host", "h1"))
    assert samples[("alloclab_group_memory_bytes", group + (("memtype", "resident"),))] == 3003 * 1024
    assert samples[("alloclab_group_memory_bytes", group + (("memtype", "cgroup"),))] == 3 * 2000 * 1024
    assert samples[("alloclab_group_units", group + (("memtype", "resident"),))] == 3
    assert samples[("alloclab_group_units", group + (("memtype", "proportionalResident"),))] == 2  # the sum covers 2
    assert samples[("alloclab_group_units_expected", group)] == 4
    assert samples[("alloclab_unit_up", (("host", "h1"), ("unit", "down.service")))] == 0
    assert samples[("alloclab_unit_up", (("host", "h1"), ("unit", "u0.service")))] == 1
    # a stopped unit: no memory, processes, cpu or verification, never 0 bytes; its identity and restarts stay
    assert not [
        k
        for k in samples
        if ("unit", "down.service") in k[1]
        and k[0]
        not in ("alloclab_unit_up", "alloclab_unit_info", "alloclab_unit_restarts_total", "alloclab_unit_generation")
    ]
    assert (
        samples[
            (
                "alloclab_unit_info",
                (
                    ("allocator", "jemalloc@5.3.0"),
                    ("generation", "none"),
                    ("group", "jemalloc"),
                    ("host", "h1"),
                    ("library_sha256", "ab" * 32),
                    ("unit", "u1.service"),
                    ("version", "5.3.0"),
                ),
            )
        ]
        == 1
    )
    # figures carry host and unit only: a deploy changes the info series, not the memory series
    assert all(
        set(dict(k[1])) <= {"host", "unit", "memtype"}
        for k in samples
        if k[0].startswith("alloclab_unit_") and k[0] != "alloclab_unit_info"
    )
    assert 'alloclab_unit_memory_bytes{host="h1",memtype="proportionalResident",unit="u0.service"}' not in text
    assert text.count("alloclab_unit_restarts_total{") == 4 and "# TYPE alloclab_unit_cpu_seconds_total counter" in text
    assert 'alloclab_unit_allocator_verified{host="h1",unit="u1.service"} 0.0' in text
    assert 'alloclab_unit_process_start_time_seconds{host="h1",unit="u2.service"} 1002.0' in text
    assert 'alloclab_last_sample_timestamp_seconds{host="h1"} 1234.5' in text
    assert "alloclab_collector_tick_duration_seconds_bucket" in text and "process_cpu_seconds_total" in text
    assert 'alloclab_collector_errors_total{kind="systemd"} 0.0' in text and "alloclab_collector_build_info{" in text


@pytest.mark.prometheus
@pytest.mark.skipif(not shutil.which("promtool"), reason="promtool missing: run scripts/install.sh --test")
def test_every_name_and_help_passes_promtool():
    """promtool's linter (names, units, counters' _total, HELP present) on a full scrape."""
    health = metrics.CollectorHealth()
    exp = metrics.Exposition(health)
    exp.publish(_snapshot_of_three())
    health.tick(0.02)
    health.late()
    health.error("systemd")
    text = _scrape(exp)
    check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert check.returncode == 0 and not check.stdout.strip() and not check.stderr.strip(), check.stdout + check.stderr


def rep(name, group, host):
    return {"name": name, "group": group, "host": host}


def test_host_spread_warns_only_when_groups_are_uneven():
    even = [rep(f"h{h}/u{i}", g, f"h{h}") for h in (1, 2) for i, g in enumerate(["a", "b", "a", "b"])]
    assert host_spread(even, ["a", "b"]) == []
    assert host_spread([rep("u1", "a", None), rep("u2", "b", None)], ["a", "b"]) == []  # no hosts recorded
    uneven = [
        rep("h1/u1", "a", "h1"),
        rep("h1/u2", "a", "h1"),
        rep("h1/u3", "b", "h1"),
        rep("h2/u1", "b", "h2"),
        rep("h2/u2", "b", "h2"),
        rep("h2/u3", "b", "h2"),
    ]
    (w,) = host_spread(uneven, ["a", "b"])
    assert w.kind == "hosts-unbalanced" and "a" in w.groups and w.data["replicas_per_host"]["a"] == {"h1": 2, "h2": 0}


def test_a_schema_3_store_gains_the_host_column(tmp_path):
    store = Store.create(tmp_path / "run.db")
    store.add_group(name="g", allocator="glibc")
    store.add_replica(group_id=1, name="r1", idx=0)
    store.close()
    conn = sqlite3.connect(tmp_path / "run.db")  # make it what an older alloclab wrote
    conn.execute("ALTER TABLE replicas DROP COLUMN host")
    conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    again = Store.open(tmp_path)
    assert again.meta()["schema_version"] == str(SCHEMA_VERSION)
    assert again.replicas()[0]["host"] is None and again.replicas()[0]["name"] == "r1"


def test_import_refuses_what_prometheus_should_not_have_sent(tmp_path, monkeypatch):
    from alloclab.interchange import prometheus_import

    answers = {
        "unprintable": [{"metric": {"group": "g\n1", "unit": "u"}, "values": [[1, "5"]]}],
        "no label": [{"metric": {"unit": "u"}, "values": [[1, "5"]]}],
        "malformed": [{"metric": {"group": "g", "unit": "u"}, "values": [[1, "five"]]}],
    }
    for what, answer in answers.items():
        document = {"status": "success", "data": {"resultType": "matrix", "result": answer}}
        monkeypatch.setattr(prometheus_import.Client, "get", lambda self, path, params, document=document: document)
        with pytest.raises(UserError):
            prometheus_import.import_prometheus(
                "http://x", tmp_path / what, 0, 10, 1, {"rss_kb": "q"}, say=lambda s: None
            )
        assert not (tmp_path / what).exists()  # nothing created before the data were read
    monkeypatch.setattr(
        prometheus_import.Client,
        "get",
        lambda self, path, params: {"status": "success", "data": {"resultType": "matrix", "result": []}},
    )
    with pytest.raises(UserError, match="no series"):
        prometheus_import.import_prometheus(
            "http://x", tmp_path / "empty", 0, 10, 1, {"rss_kb": "q"}, say=lambda s: None
        )
    with pytest.raises(UserError, match="not before"):
        prometheus_import.import_prometheus("http://x", tmp_path / "r", 10, 5, 1, {"rss_kb": "q"}, say=lambda s: None)
    assert prometheus_import.parse_time("now-10m", "--from", now=1000.0) == 400.0
    assert prometheus_import.parse_time("2026-01-01T00:00:00Z", "--from") == 1767225600.0
    with pytest.raises(UserError, match="is not a time"):
        prometheus_import.parse_time("yesterday", "--from")


def test_cli_one_line_errors(tmp_path):
    from tests.conftest import run_cli

    p = run_cli("import", "prometheus", "http://127.0.0.1:1", "-o", str(tmp_path / "r"))
    assert p.returncode == 2 and "cannot read http://127.0.0.1:1 as a Prometheus server" in p.stderr
    assert p.stderr.count("\n") == 1 and not (tmp_path / "r").exists()
    p = run_cli(
        "fleet", "collect", "--plan", str(tmp_path / "none.json"), "-o", str(tmp_path / "r"), "--listen", "nope:1"
    )
    assert p.returncode == 2 and p.stderr.count("\n") == 1
