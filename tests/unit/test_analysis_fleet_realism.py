"""What a fleet experiment looks like (issue 49), on small real SQLite stores with known truth:
every relay starting with the data and regrowing, a group's relays restarted under one event
labelled with the group, relays sampled on their own clocks, and a group whose daily swing is
larger than the others'. Seeded; the rates are benchmarks/fleet_realism.py's."""

from __future__ import annotations

import numpy as np
import pytest

from alloclab.analysis import analyse, regrowth
from alloclab.analysis.load import Segment, Series
from alloclab.analysis.windows import Window, day_level, level_at
from alloclab.stats.steps import ar1
from alloclab.store import Store

T0 = 1_760_000_000.0
DAY = 86400.0
GROWTH_WORDS = ("Growing", "Bloating")


def _store(tmp_path, series: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]], events=()) -> Store:
    """An imported run: group -> relay -> (times, MB); events (t, kind, description, group label)."""
    st = Store.create(tmp_path / "run.db")
    st.set_meta(source="import torutils test", metric="rss", interval=600, end_reason="imported")
    rows = []
    for k, (g, relays) in enumerate(series.items()):
        gid = st.add_group(
            name=g,
            allocator=f"alloc{g.lower()}",
            kind="imported",
            family=f"alloc{g.lower()}",
            version=None,
            env_json="{}",
            command_json="[]",
            is_baseline=int(k == 0),
        )
        for i, (name, (t, y)) in enumerate(relays.items()):
            rid = st.add_replica(group_id=gid, idx=i, name=name, start_order=i)
            rows += [(float(a), rid, None, int(b * 1024)) for a, b in zip(t, y)]
    st.add_samples(("t", "replica_id", "phase", "rss_kb"), rows)
    for t, kind, description, label in events:
        st.add_event(t, kind, description, group_name=label)
    return st


def _young(t: np.ndarray, since: float, low: float, tau_s: float) -> np.ndarray:
    u = t - since
    return np.where(u >= 0, low + (1 - low) * (1 - np.exp(-np.maximum(u, 0) / tau_s)), 1.0)


def _fleet(rng, days=1.5, step=600.0, groups="ZAB", n=4, shape=None, clocks=False):
    """group -> relay -> (t, MB): flat at 300 MB with 1.5% AR(1) noise, times `shape(g, i, t)` if given."""
    base = T0 + np.arange(0, days * DAY + step / 2, step)
    out = {}
    for g in groups:
        out[g] = {}
        for i in range(n):
            t = base + (rng.uniform(0, step / 2) + rng.uniform(-30, 30) if clocks else 0.0)
            if clocks:
                keep = rng.random(len(t)) >= 0.02
                keep[0] = keep[-1] = True
                t = t[keep]
            y = 300 * (1 + ar1(rng, 1, len(t), 0.9, 0.015)[0])
            out[g][f"{g.lower()}{i}"] = (t, y * (shape(g, i, t) if shape else 1.0))
    return out


def test_a_regrowth_is_recognised_and_a_straight_climb_is_not():
    rng = np.random.default_rng(3)
    t = T0 + np.arange(0, 1.5 * DAY, 600.0)
    noise = ar1(rng, 3, len(t), 0.9, 0.015)
    regrown = 300 * (_young(t, T0 - 1, 0.4, 6 * 3600) + noise[0])
    reg = regrowth.fit(t, regrown)
    assert reg is not None and 0.45 < reg.deficit_share < 0.75 and 3 * 3600 < reg.tau_s < 12 * 3600
    assert reg.steady_from > T0 + 3 * 3600  # the steep part left out
    back = regrowth.adjusted(t, regrown, reg)
    late, early = np.mean(back[-36:]), np.mean(back[np.searchsorted(t, reg.steady_from) :][:36])
    assert abs(late / early - 1) < 0.03  # what remains is modelled, not growth
    climbing = 300 * (1 + 0.08 * (t - T0) / (t[-1] - T0) + noise[1])
    assert regrowth.fit(t, climbing) is None  # a leak has no bend: kept as growth
    assert regrowth.fit(t, 300 * (1 + noise[2])) is None


def test_every_relay_starting_with_the_data_is_not_growth(tmp_path):
    rng = np.random.default_rng(11)
    taus = {}

    def shape(g, i, t):
        taus[(g, i)] = tau = rng.uniform(2, 12) * 3600
        return _young(t, T0 - 1, rng.uniform(0.3, 0.7), tau)

    a = analyse(_store(tmp_path, _fleet(rng, shape=shape)))
    assert not [g.name for g in a.groups if g.status in GROWTH_WORDS]
    assert not any(g.growth_beside is not None and g.growth_beside.word == "beyond" for g in a.groups)
    [w] = a.warning("regrowth")
    assert len(w.replicas) >= 10 and "not read as growth" in w.message


def test_a_leak_after_a_fresh_start_is_still_growing(tmp_path):
    rng = np.random.default_rng(12)

    def shape(g, i, t):
        leak = 1 + (0.12 * (t - T0) / (1.5 * DAY) if g == "B" else 0.0)
        return leak * _young(t, T0 - 1, rng.uniform(0.4, 0.7), rng.uniform(2, 8) * 3600)

    a = analyse(_store(tmp_path, _fleet(rng, shape=shape)))
    assert a.group("B").status in GROWTH_WORDS
    assert a.group("Z").status not in GROWTH_WORDS and a.group("A").status not in GROWTH_WORDS


def test_a_restart_labelled_with_its_group_is_read_as_recorded(tmp_path):
    rng = np.random.default_rng(13)
    at = T0 + 0.3 * 1.5 * DAY
    a = analyse(
        _store(
            tmp_path,
            _fleet(rng, shape=lambda g, i, t: _young(t, at, 0.45, 4 * 3600) if g == "A" else 1.0),
            events=[(at, "restart", "group A restarted", "A")],
        )
    )
    assert a.label_mapping["A"].groups == ["A"]
    [w] = a.warning("restart-in-window")
    assert sorted(w.replicas) == ["a0", "a1", "a2", "a3"]
    assert all(r["recorded"] for r in w.data["restarts"]) and "(0 with no recorded event" in w.message
    assert a.group("A").status not in GROWTH_WORDS


def test_relays_on_their_own_clocks_keep_their_levels(tmp_path):
    seed = 14
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    aligned = analyse(_store(tmp_path / "a", _fleet(np.random.default_rng(seed))))
    own = analyse(_store(tmp_path / "b", _fleet(np.random.default_rng(seed), clocks=True)))
    for g in "ZAB":
        assert own.group(g).usable == aligned.group(g).usable == 4
        assert own.group(g).level_mb == pytest.approx(aligned.group(g).level_mb, rel=0.02)
    assert own.recommendation.headline().split(":")[0] == aligned.recommendation.headline().split(":")[0]


def test_level_at_falls_back_to_the_last_sample_within_its_tolerance():
    t = T0 + np.arange(0, 3600 * 6, 600.0)
    s = Series(
        1,
        "r",
        "G",
        None,
        t,
        np.arange(len(t), dtype=float) + 100,
        np.full(len(t), None),
        *[np.full(len(t), np.nan)] * 4,
        segments=[Segment(float(t[0]), float(t[-1]), "G", "first sample")],
    )
    assert level_at(s, float(t[-1]) + 2.0, 0.0) == 100 + len(t) - 1  # 2 s after its last sample
    assert level_at(s, float(t[-1]) + 3 * 600.0, 0.0) is None  # beyond 2.5 of its intervals


@pytest.mark.parametrize("end_hour", [0.0, 6.0, 13.5, 19.0])
def test_a_day_level_does_not_follow_the_clock(end_hour):
    t = T0 + np.arange(0, 2 * DAY + end_hour * 3600, 600.0)
    swing = 300 * (1 + 0.10 * np.sin(2 * np.pi * t / DAY))
    s = Series(
        1,
        "r",
        "G",
        None,
        t,
        swing,
        np.full(len(t), None),
        *[np.full(len(t), np.nan)] * 4,
        segments=[Segment(float(t[0]), float(t[-1]), "G", "first sample")],
    )
    assert day_level(s, Window(float(t[0]), float(t[-1]), {}, "")) == pytest.approx(300, rel=0.005)


def test_a_group_swinging_more_is_warned_and_not_significant(tmp_path):
    rng = np.random.default_rng(15)
    phase = 1.3
    a = analyse(
        _store(
            tmp_path,
            _fleet(
                rng,
                days=2.3,
                n=5,
                shape=lambda g, i, t: 1 + (0.10 if g == "A" else 0.02) * np.sin(2 * np.pi * t / DAY + phase),
            ),
        )
    )
    [w] = a.warning("daily-swing-differs")
    assert w.message.startswith("A's relays swing")
    assert not a.group("A").comparison.significant
    assert "hourly means over the last day" in a.level_basis
