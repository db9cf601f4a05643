"""Import of the real 1AEO TorUtils data, and export in the same layout."""

import csv
import json
from collections import Counter
from datetime import UTC, datetime

import pytest

from alloclab.analysis.load import is_imported
from alloclab.store import Store
from alloclab.torutils.export import export_csv
from alloclab.torutils.importer import import_torutils
from alloclab.torutils.layout import MEMORY_COLUMNS
from tests.conftest import DATASETS


def _relay_rows(path):
    with open(path, newline="") as f:
        return [r for r in csv.DictReader(f) if r["type"] == "relay"]


def test_five_way_import(tmp_path):
    src = DATASETS / "5way-2026-01"
    run = import_torutils(src, tmp_path / "run")
    store = Store.open(run)
    rows = _relay_rows(src / "memory.csv")
    listed = {}
    for f in (src / "groups").glob("group_*.txt"):
        if "historical" not in f.name:
            for nick in f.read_text().split():
                listed[nick] = f.name.split("_")[1]
    assert store.query("SELECT COUNT(*) FROM samples")[0][0] == sum(1 for r in rows if r["nickname"] in listed)
    per_group = dict(
        store.query("SELECT g.name, COUNT(*) FROM replicas r JOIN groups g ON g.id = r.group_id GROUP BY g.name")
    )
    assert per_group == dict(Counter(listed.values())) == {"A": 20, "B": 80, "C": 60, "D": 20, "E": 20}
    lo, hi = store.query("SELECT MIN(t), MAX(t) FROM samples")[0]
    stamps = sorted(r["timestamp"] for r in rows)
    assert lo == datetime.fromisoformat(stamps[0]).replace(tzinfo=UTC).timestamp()
    assert hi == datetime.fromisoformat(stamps[-1]).replace(tzinfo=UTC).timestamp()
    labels = {r["name"]: (r["family"], r["version"]) for r in store.query("SELECT name, family, version FROM groups")}
    assert labels["A"] == ("mimalloc", "3.0.1") and labels["E"] == ("glibc", None)
    assert store.meta()["baseline"] == "E"
    assert store.query("SELECT COUNT(*) FROM events")[0][0] == 12


def test_co_unified_import_uses_the_group_column(tmp_path):
    src = DATASETS / "co-unified-2025-12"
    run = import_torutils(src, tmp_path / "run")
    store = Store.open(run)
    rows = _relay_rows(src / "memory_measurements.csv")
    # rows without a group are other relays on the host, or a relay before it joined a group
    # (group I's relays ran glibc before 2026-01-02): they are left out, not guessed
    assert store.query("SELECT COUNT(*) FROM samples")[0][0] == sum(1 for r in rows if r["rss_kb"] and r["group"])
    groups = dict(
        store.query("SELECT g.name, COUNT(*) FROM replicas r JOIN groups g ON g.id = r.group_id GROUP BY g.name")
    )
    want = Counter()
    seen = set()
    for r in rows:
        if r["group"] and r["nickname"] not in seen:
            seen.add(r["nickname"])
            want[r["group"]] += 1
    assert groups == dict(want)
    assert store.meta()["baseline"] == "Z"  # the glibc control group


def test_export_round_trips_through_import(tmp_path):
    run = import_torutils(DATASETS / "co-guard-2025-09", tmp_path / "run")
    Store.open(run).set_meta(ticks_skipped=7)  # a sampler that fell behind: the ticks-skipped warning's data
    tor = {"consensus_at": 1.0, "relays_listed": 12, "load": {}, "routers": {}, "traffic": {}}
    Store.open(run).set_meta(records="alloclab", tor_network=json.dumps(tor), network_namespace="interfaces: lo")
    out = tmp_path / "csv"
    export_csv(run, out)
    header = (out / "memory.csv").read_text().splitlines()[0].split(",")
    assert header[: len(MEMORY_COLUMNS)] == MEMORY_COLUMNS and "pss_kb" in header and "live_bytes" in header
    again = import_torutils(out, tmp_path / "again")
    a, b = Store.open(run), Store.open(again)
    q = "SELECT r.name, s.t, s.rss_kb FROM samples s JOIN replicas r ON r.id = s.replica_id ORDER BY r.name, s.t"
    assert [tuple(x) for x in a.query(q)] == [tuple(x) for x in b.query(q)]
    assert b.meta()["ticks_skipped"] == "7"  # the warning it feeds travels too
    # alloclab's own records are read as a run, not segmented by evidence; the tor section's figures
    assert is_imported(a) is is_imported(b) is False
    for key in ("records", "tor_network", "network_namespace"):
        assert b.meta()[key] == a.meta()[key]


def test_not_a_torutils_folder(tmp_path):
    from alloclab.common.errors import UserError

    with pytest.raises(UserError, match="no memory CSV"):
        import_torutils(tmp_path, tmp_path / "run")


def test_import_never_invents_a_phase(tmp_path):
    run = import_torutils(DATASETS / "co-guard-2025-09", tmp_path / "run")
    store = Store.open(run)
    assert store.query("SELECT COUNT(*) FROM samples WHERE phase IS NOT NULL")[0][0] == 0
    assert store.query("SELECT DISTINCT tier, nprocs FROM samples")[0][:] == ("imported", 1)
    assert "phases" not in store.meta()


def test_two_rows_of_one_relay_at_one_time_are_kept_and_named(tmp_path):
    # co-unified has two processes both called estgee at several times: kept, noted, not guessed
    src = DATASETS / "co-unified-2025-12"
    run = import_torutils(src, tmp_path / "run")
    store = Store.open(run)
    dupes = json.loads(store.meta()["duplicate_timestamps"])
    rows = _relay_rows(src / "memory_measurements.csv")
    per_time = Counter((r["nickname"], r["timestamp"]) for r in rows if r["group"] and r["rss_kb"])
    assert dupes == {n: c for n, c in Counter(n for (n, _), k in per_time.items() for _ in range(k - 1)).items()}
    assert any(
        "two processes under one nickname" in d
        for (d,) in store.query("SELECT description FROM events WHERE kind = 'note'")
    )
