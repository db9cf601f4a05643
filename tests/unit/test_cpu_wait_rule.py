"""The cpu-saturated rule on small real stores: judged by the measured processes' own wait for a
CPU (samples.cpu_wait_s / cpu_run_s) when the store has it, by the load average only when not."""
from __future__ import annotations

import numpy as np
import pytest

from alloclab.analysis import cpuwait, warnings
from alloclab.analysis.rules import RULES
from alloclab.analysis.windows import Window

from .test_analysis_faults import T0, _store


def _loads(st, level: float) -> None:
    x = np.arange(0.0, 3600.0, 5.0)
    st.set_meta(ncpu=2)
    st.add_host_samples(("t", "mem_total_kb", "mem_available_kb", "swap_total_kb", "swap_free_kb", "load1"),
                        [(T0 + a, 1 << 24, 1 << 23, 0, 0, level) for a in x])
    st.commit()


def _cpu(shares: dict[str, float], default: float = 0.02, until: float | None = None):
    """Each replica runs 0.1 s a second and waits `share` of its runnable time (default for the
    others); with `until`, only up to that many seconds, `default` after."""
    def cumulative(name: str, s: float):
        share = shares.get(name, default)
        if until is not None and s > until:
            waited = 0.1 * share / (1 - share) * until + 0.1 * default / (1 - default) * (s - until)
        else:
            waited = 0.1 * share / (1 - share) * s
        return waited, 0.1 * s
    return cumulative


def _cpu_warnings(st, opens: float = 0.0):
    """The cpu check's warnings over a comparison window from `opens` s after the start to the end."""
    c = warnings.Context(st, [], [], Window(T0 + opens, T0 + 3600, {}, "test"), {}, {}, ["a", "b"], False)
    return list(warnings.cpu_load(c))


def test_a_high_load_beside_processes_that_got_their_cpu_is_not_saturation(tmp_path):
    # load 6 on 2 cores (work at nice 19 beside the run), the replicas waited 2% of their runnable time:
    # the load-average rule said cpu-saturated here
    st = _store(tmp_path, {}, cpu=_cpu({}), cpu_source="schedstat")
    _loads(st, 6.0)
    assert _cpu_warnings(st) == []


def test_processes_short_of_cpu_under_a_moderate_load_are_saturated_and_named(tmp_path):
    # group b's replicas waited 70% of their runnable time (another session's equal share, autogroup on)
    # while the load stayed at 1.2 on 2 cores: the load-average rule was silent
    st = _store(tmp_path, {}, cpu=_cpu({f"b-{i}": 0.7 for i in range(1, 6)} | {"a-1": 0.7}), cpu_source="schedstat")
    _loads(st, 1.2)
    [w] = _cpu_warnings(st)
    assert (w.kind, w.severity, w.groups) == ("cpu-saturated", "caution", ["b"])
    assert sorted(w.replicas) == [f"b-{i}" for i in range(1, 6)]          # a-1 alone does not move a's median
    assert w.data["evidence"] == "cpu-wait" and w.data["sources"] == ["schedstat"]
    assert w.data["group_median_share"]["b"] == pytest.approx(0.7, abs=0.01)
    assert "b waited 70%" in w.message and "schedstat" in w.message


def test_psi_evidence_is_named(tmp_path):
    st = _store(tmp_path, {}, cpu=_cpu({}, default=0.6), cpu_source="psi")
    [w] = _cpu_warnings(st)
    assert w.groups == ["a", "b"] and "PSI" in w.message and w.data["sources"] == ["psi"]


def test_a_start_up_wait_before_the_window_is_a_burst(tmp_path):
    # every replica waited 80% in the first 5 minutes (start-up), 2% after; the window starts later
    st = _store(tmp_path, {}, cpu=_cpu({n: 0.8 for g in "ab" for n in (f"{g}-{i}" for i in range(1, 6))}, until=300),
                cpu_source="schedstat")
    [w] = _cpu_warnings(st, opens=600)
    assert (w.kind, w.severity, w.groups) == ("cpu-burst", "info", ["a", "b"])
    # the 10 minutes before it: 5 at 80%, 5 at 2% -> (120 + 0.6) s waited of (120.6 + 60) s runnable
    assert w.data["before_window_median_share"]["a"] == pytest.approx(120.6 / 180.6, abs=0.01) and "67%" in w.message


def test_without_the_record_the_load_average_decides_and_says_so(tmp_path):
    st = _store(tmp_path, {})
    _loads(st, 6.0)
    [w] = _cpu_warnings(st)
    assert w.kind == "cpu-saturated" and w.data["evidence"] == "load-average" and "load average" in w.message


def test_falling_counters_are_skipped_not_counted_as_negative_wait(tmp_path):
    # the summed schedstat falls when a thread ends: that interval is left out, not read as negative wait
    def falling(name, s):
        waited, run = _cpu({}, default=0.7)(name, s)
        return (waited - 500.0 if s >= 1800 else waited), run
    st = _store(tmp_path, {}, cpu=falling, cpu_source="schedstat")
    waits = cpuwait.span_waits(st, st.replicas(), T0, T0 + 3600)
    assert len(waits) == 10 and all(w.share == pytest.approx(0.7, abs=0.01) for w in waits)
    assert RULES["cpu_wait_share"] < 0.7
