"""Run faults and duplicated samples on small real SQLite stores written through the Store API:
crashed / early-exiting replicas are named with their signal or exit code and, when they ended
before the comparison window's end, left out of the group's comparison (data still shown); a
run cut short is a serious warning; one process sampled under two names counts once."""

from __future__ import annotations

import numpy as np
import pytest

from alloclab.analysis import analyse
from alloclab.store import Store

T0 = 1_760_000_000.0


def _store(
    tmp_path,
    faults: dict[str, tuple[str, int, float]],
    grow: set[str] = frozenset(),
    copies: tuple[str, str, float] | None = None,
) -> Store:
    """Groups a (glibc, baseline) and b (jemalloc), 5 replicas each, 1 h at 5 s. `faults`:
    name -> (end_kind, exit_code, share of the run at which it ended); `grow`: replicas climbing
    30% over the run; `copies`: (name, copied name, from share) — name's samples are the copied
    replica's own from that share of the run on (a prefix match)."""
    st = Store.create(tmp_path / "run.db")
    st.set_meta(
        source="run",
        metric="rss",
        interval=5.0,
        end_reason="planned duration reached",
        phases='{"warmup": 0, "load": 3600, "idle": 0}',
        seed=1,
    )
    gid = {
        g: st.add_group(
            name=g,
            allocator=fam,
            kind="system",
            family=fam,
            version=None,
            env_json="{}",
            command_json="[]",
            is_baseline=int(g == "a"),
        )
        for g, fam in (("a", "glibc"), ("b", "jemalloc"))
    }
    rng = np.random.default_rng(3)
    t = T0 + np.arange(0.0, 3600.0, 5.0)
    ys = {}
    for g, level in (("a", 100.0), ("b", 70.0)):
        for i in range(1, 6):
            name = f"{g}-{i}"
            y = level * (1 + 0.01 * rng.standard_normal(len(t)))
            if name in grow:
                y = y * (1 + 0.3 * (t - t[0]) / (t[-1] - t[0]))
            ys[name] = (g, i, y)
    if copies:  # the long-named replica, a process of its own
        ys[copies[1]] = ("b", 9, 75 * (1 + 0.01 * rng.standard_normal(len(t))))
    for name, (g, i, y) in ys.items():
        kind, code, at = faults.get(name, ("stopped", 0, 1.0))
        keep = t <= t[0] + at * 3600
        if copies and name == copies[0]:
            y = np.where(t >= t[0] + copies[2] * 3600, ys[copies[1]][2], y)
        rid = st.add_replica(
            group_id=gid[g],
            idx=i,
            name=name,
            start_order=i,
            verified=1,
            exit_code=code,
            end_kind=kind,
            started_at=t[0],
            ended_at=float(t[keep][-1]),
        )
        pid = st.add_process(replica_id=rid, pid=1000 + rid, start_ticks=rid, first_seen=t[0], last_seen=t[keep][-1])
        st.add_verification(t=t[0], process_id=pid, verified=1, detail="ok")
        st.add_samples(
            ("t", "replica_id", "phase", "rss_kb"),
            [(float(a), rid, "load", int(b * 1024)) for a, b in zip(t[keep], y[keep])],
        )
        if kind == "crashed":
            st.add_event(float(t[keep][-1]), "replica_crash", f"{name} was killed by SIGSEGV", replica_id=rid)
        elif kind == "exited-early":
            st.add_event(float(t[keep][-1]), "replica_exit", f"{name} exited with code {code}", replica_id=rid)
    st.commit()
    return st


def test_crashed_replicas_are_named_and_never_count_as_flat_units(tmp_path):
    # a-1, a-2 climb 30%; a-3..a-5 are flat and crash (SIGSEGV) 40% into the run
    crashed = {n: ("crashed", -11, 0.4) for n in ("a-3", "a-4", "a-5")}
    a = analyse(_store(tmp_path, crashed, grow={"a-1", "a-2"}))
    ga = a.group("a")
    assert ga.excluded == ["a-3", "a-4", "a-5"] and ga.usable == 2
    assert ga.status == "Bloating"  # with the crashed ones as units the majority would say Flat
    crash = a.warning("replica-crashed")
    assert crash and crash[0].severity == "serious" and crash[0].replicas == ["a-3", "a-4", "a-5"]
    assert "SIGSEGV" in crash[0].message and "excluded from the comparison" in crash[0].message
    shown = {r.name: r for r in a.replicas}
    assert shown["a-4"].steady_mb is not None and "crashed (killed by SIGSEGV)" in shown["a-4"].excluded
    assert ga.comparison.n == 2


def test_early_exit_named_with_its_code_and_a_late_crash_still_compared(tmp_path):
    a = analyse(_store(tmp_path, {"b-2": ("exited-early", 3, 0.5), "b-3": ("crashed", -6, 1.0)}))
    ex = a.warning("replica-exited")
    assert ex and ex[0].replicas == ["b-2"] and "exit code 3" in ex[0].message
    late = a.warning("replica-crashed")
    assert late and "SIGABRT" in late[0].message and "compared" in late[0].message
    assert a.group("b").excluded == ["b-2"] and a.group("b").usable == 4


def test_run_cut_short_is_a_serious_warning(tmp_path):
    st = _store(tmp_path, {})
    st.conn.execute("DELETE FROM meta WHERE key = 'end_reason'")
    assert st.mark_cut_short("killed", T0 + 3595, "alloclab was killed (SIGKILL); the watchdog closed the run")
    st.commit()
    a = analyse(Store.open(tmp_path / "run.db"))
    cut = a.warning("run-cut-short")
    assert cut and cut[0].severity == "serious" and cut[0].data["reason"] == "killed"
    assert "watchdog" in cut[0].message
    assert "run-cut-short" in {w.kind for w in a.recommendation.caveats}


def test_one_process_under_two_names_counts_once(tmp_path):
    # from half-way, the prefix name b-1 samples b-10's process (pgrep b-1 matches b-10)
    st = _store(tmp_path, {}, copies=("b-1", "b-10", 0.5))
    a = analyse(st)
    ident = a.warning("identical-series")
    assert ident and ident[0].data["dropped_from"] == "b-1" and ident[0].data["kept"] == "b-10"
    b1 = next(s for s in a.series if s.name == "b-1")
    assert b1.t[-1] < T0 + 1800  # its copied half is gone, its own half stays
    assert ident[0].data["dropped_samples"] == pytest.approx(360, abs=1)


@pytest.mark.parametrize(
    "loads,expected",
    [
        (lambda x: np.where(x < 60, 4.0 * np.exp(-x / 60), 1.0), "cpu-burst"),  # start-up burst, then calm
        (lambda x: np.full_like(x, 4.0), "cpu-saturated"),  # saturated throughout
        (lambda x: np.full_like(x, 1.0), None),  # calm throughout
    ],
    ids=["burst", "saturated", "calm"],
)
def test_cpu_saturation_is_judged_over_the_compared_window(tmp_path, loads, expected):
    st = _store(tmp_path, {})
    st.set_meta(ncpu=2)
    x = np.arange(0.0, 3600.0, 5.0)
    st.add_host_samples(
        ("t", "mem_total_kb", "mem_available_kb", "swap_total_kb", "swap_free_kb", "load1"),
        [(T0 + a, 1 << 24, 1 << 23, 0, 0, float(v)) for a, v in zip(x, loads(x))],
    )
    st.commit()
    kinds = {w.kind for w in analyse(st).warnings}
    assert kinds & {"cpu-burst", "cpu-saturated"} == ({expected} if expected else set())


@pytest.mark.parametrize("skipped, expected", [(0, None), (20, "info"), (100, "caution")])
def test_skipped_ticks_are_a_warning_sized_by_their_share(tmp_path, skipped, expected):
    # 1 h at 5 s = 721 ticks: 20 skipped is 2.8% (info), 100 is 13.9% (above ticks_skipped_share: caution)
    st = _store(tmp_path, {})
    st.set_meta(started_at=T0, ended_at=T0 + 3600.0, **({"ticks_skipped": skipped} if skipped else {}))
    st.commit()
    found = [w for w in analyse(st).warnings if w.kind == "ticks-skipped"]
    if expected is None:
        assert found == []
    else:
        assert [w.severity for w in found] == [expected]
        assert found[0].data["skipped"] == skipped and found[0].data["ticks"] == 721


def test_skipped_ticks_gather_into_one_event_a_minute():
    from alloclab.run.runner import SkippedTicks

    s = SkippedTicks()
    assert s.take(1.0) is None and not s.due(100.0)
    s.add(3, 4.2)
    assert s.due(100.0)  # the first overrun is recorded at once
    assert s.take(1.0) == "3 sampling ticks skipped: the sampler fell behind its 1 s schedule 1 time (by up to 4.20 s)"
    s.add(1, 1.5)
    assert not s.due(s.last_record + 30)  # then at most one event a minute
    assert s.due(s.last_record + 61)
    assert s.take(1.0).startswith("1 sampling tick skipped") and s.total == 4


def test_the_pooled_pass_does_not_compute_growth_again(tmp_path, monkeypatch):
    """Each replica's growth, release events and step fit are computed once: the group's pooled
    interval re-decides the word from them (it re-ran replica_stats, growth included, for every
    pooled replica; then stats.classify, step fit included: 18 step fits and 19 release scans for
    10 replicas), and the group route of Ratcheting reads the step fits classify ran (it fitted
    every replica of a group of ≥ 3 again: 19 fits); the words and reasons are those of
    replica_stats with the pool."""
    from alloclab import stats
    from alloclab.analysis import replica_stats
    from alloclab.analysis.load import load_series, segment
    from alloclab.stats import status, steps

    st = _store(tmp_path, {}, grow={"a-1"})
    calls = {"growth": 0, "step_fit_x": 0, "release_events": 0}
    for module, name in ((stats, "growth"), (steps, "step_fit_x"), (status, "release_events")):
        real = getattr(module, name)
        monkeypatch.setattr(
            module,
            name,
            lambda *a, _real=real, _name=name, **k: calls.__setitem__(_name, calls[_name] + 1) or _real(*a, **k),
        )
    a = analyse(st)
    assert sum("widened to the spread" in r.status_reason for r in a.replicas) == 4  # a-2..a-5 decided again
    # every replica once (a-1's step fit for the group route: classify settled its word, Bloating,
    # before fitting); no simulated series here (the group route's pre-screen stops it)
    assert calls == {"growth": 10, "step_fit_x": 10, "release_events": 10} and len(a.replicas) == 10
    monkeypatch.undo()
    series = load_series(st, "rss")
    segment(st, series)
    by = {s.name: s for s in series}
    for g in ("a", "b"):
        rs = [r for r in a.replicas if r.group == g]
        pool = stats.growth_pool([r.change_share for r in rs], [r.window_h * 3600 for r in rs], [r.name for r in rs])
        assert pool is not None
        assert [(r.status, r.status_reason) for r in rs] == [
            (x.status, x.status_reason) for x in (replica_stats(by[r.name], pool=pool) for r in rs)
        ]


def test_a_signal_with_no_name_is_named_by_its_number():
    # one function names signals for the runner's live notices and the analysis's warnings
    import signal

    from alloclab.common.signalname import how_ended, signal_name

    assert signal_name(signal.SIGSEGV) == "SIGSEGV"
    assert signal_name(signal.SIGRTMIN + 3) == f"signal {signal.SIGRTMIN + 3}"
    # and one function says how a process ended (the runner, the analysis, its warnings, the replayer)
    assert [how_ended(c) for c in (-signal.SIGSEGV, 3, None)] == [
        "killed by SIGSEGV",
        "exit code 3",
        "exit code unknown",
    ]
