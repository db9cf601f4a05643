"""The analysis on the real 1AEO TorUtils data: it runs, names the confounds that are really
there, and its per-group figures agree with an independent computation written here."""
from __future__ import annotations

import csv
from collections import defaultdict
from datetime import datetime, timezone
from statistics import median

import pytest

from alloclab.analysis import analyse
from alloclab.store import Store
from alloclab.torutils import import_torutils
from tests.conftest import DATASETS


@pytest.fixture(scope="module")
def fiveway(tmp_path_factory):
    run = import_torutils(DATASETS / "5way-2026-01", tmp_path_factory.mktemp("5way") / "run")
    return run, analyse(Store.open(run))


def test_confounds_that_are_really_there(fiveway):
    _, a = fiveway
    names = {n for n, _ in a.warnings}
    text = dict(a.warnings)
    assert "identical-series" in names and "knxw" in text["identical-series"] and "knxwledgej" in text["identical-series"]
    assert "replica-in-several-groups" in names and text["replica-in-several-groups"].startswith("13 replicas")


def _ts(s: str) -> float:
    d = datetime.fromisoformat(s)
    return (d if d.tzinfo else d.replace(tzinfo=timezone.utc)).timestamp()


def test_group_figures_agree_with_an_independent_computation(fiveway):
    """Peak and final per group: median over relays of the max / last RSS after the relay's last
    restart (a restart event for 'all' that the relay's own series confirms with a 30% drop)."""
    _, a = fiveway
    src = DATASETS / "5way-2026-01"
    group_of = {}
    for f in (src / "groups").glob("group_*.txt"):
        if "historical" not in f.name:
            for nick in f.read_text().split():
                group_of[nick] = f.name.split("_")[1]
    restarts = [_ts(e["timestamp"]) for e in csv.DictReader(open(src / "events.csv")) if e["event_type"] == "restart"]
    series = defaultdict(list)
    for row in csv.DictReader(open(src / "memory.csv")):
        if row["type"] == "relay" and row["nickname"] in group_of and row["rss_kb"]:
            series[row["nickname"]].append((_ts(row["timestamp"]), int(row["rss_kb"])))
    peaks, finals = defaultdict(list), defaultdict(list)
    for nick, pts in series.items():
        pts.sort()
        start = pts[0][0]
        for r in sorted(restarts):
            after = [i for i, (t, _) in enumerate(pts) if t >= r]
            if after and after[0] >= 1:
                i = after[0]
                before = median(v for _, v in pts[max(0, i - 3):i])
                if min(v for _, v in pts[i:i + 2]) < 0.7 * before:
                    start = pts[i][0]
        seg = [v for t, v in pts if t >= start]
        peaks[group_of[nick]].append(max(seg) / 1024)
        finals[group_of[nick]].append(seg[-1] / 1024)
    for g in a.groups:
        assert g.peak_mb == pytest.approx(median(peaks[g.name]), rel=1e-9), g.name
        assert g.final_mb == pytest.approx(median(finals[g.name]), rel=1e-9), g.name


def test_published_ordering_and_the_growing_group(fiveway):
    _, a = fiveway
    level = {g.name: g.steady_mean_mb for g in a.groups}
    assert level["B"] < level["C"] < level["D"] < level["E"]        # 2.0.9 < 2.1.7 < jemalloc < glibc
    assert a.group("A").status in ("Growing", "Bloating")           # mimalloc 3.0.1
    assert a.group("B").comparison.significant and a.group("B").comparison.ratio < 0.35
    assert "B" in a.recommendation


def test_co_unified_groups_started_apart(tmp_path):
    run = import_torutils(DATASETS / "co-unified-2025-12", tmp_path / "run")
    a = analyse(Store.open(run))
    names = {n for n, _ in a.warnings}
    assert "groups-started-apart" in names              # group I (mimalloc 3.0.1) joined on 2026-01-02
    assert a.baseline == "Z"
