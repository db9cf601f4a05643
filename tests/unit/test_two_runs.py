"""Run-to-run comparison (alloclab.analysis.two_runs, stats.across_runs) on store fixtures: real SQLite
stores written through the store API, analysed by the real analysis."""

from __future__ import annotations

import json

import numpy as np
import pytest

from alloclab.analysis import two_runs
from alloclab.commands.compare import exit_code as compare_exit_code
from alloclab.common.errors import UserError
from alloclab.reporters.two_runs import text_lines, to_json
from alloclab.stats.across_runs import compare_pairs, gate, rose_beyond
from alloclab.store import Store

T0 = 1_790_000_000.0
N = 300  # samples per replica, 1 s apart


def make_run(
    path,
    groups: dict[str, list[float]],
    *,
    seed: int = 0,
    sha: str = "a" * 64,
    kernel: str = "6.1.0",
    experiment: str = 'name = "x"\n',
    family: dict[str, str] | None = None,
    command: list[str] | None = None,
    t0: float = T0,
    step: float = 1.0,
    source: str = "run",
    grow_mb: dict[str, float] | None = None,
    noise_sd: float = 0.004,
):
    """A finished run: each group's replicas flat at the given levels (MB) with 1% AR(1) noise
    (innovations noise_sd of the level), N samples `step` s apart from t0, every replica verified;
    grow_mb: a group's replicas climb linearly by this many MB over the samples."""
    path.mkdir(parents=True)
    st = Store.create(path / "run.db")
    rng = np.random.default_rng(seed)
    st.begin()
    st.set_meta(
        name="x",
        metric="rss",
        interval=step,
        phases={"warmup": 0.0, "load": float(N * step), "idle": 0.0},
        started_at=t0,
        ended_at=t0 + N * step,
        end_reason="planned duration reached",
        source=source,
        seed=0,
        kernel=kernel,
        host="h",
        glibc="glibc 2.36",
        cpu="c",
        alloclab_version="0",
        experiment=experiment,
    )
    for k, (g, levels) in enumerate(groups.items()):
        fam = (family or {}).get(g, "glibc")
        gid = st.add_group(
            name=g,
            allocator=fam,
            kind="preload",
            library_path=f"/lib/{fam}.so",
            library_sha256=sha,
            family=fam,
            version="1",
            env_json='{"MALLOC_ARENA_MAX": "2"}',
            command_json=json.dumps(command or ["prog"]),
            is_baseline=int(k == 0),
            provenance_json="{}",
        )
        for i, level in enumerate(levels, 1):
            rid = st.add_replica(
                group_id=gid,
                idx=i,
                name=f"{g}-{i}",
                start_order=i,
                started_at=t0,
                ended_at=t0 + N * step,
                exit_code=0,
                root_pid=1000 + i,
                verified=1,
                end_kind="stopped",
            )
            noise = np.zeros(N)
            for j in range(1, N):
                noise[j] = 0.9 * noise[j - 1] + rng.normal(0, noise_sd)
            climb = (grow_mb or {}).get(g, 0.0) * np.arange(N) / (N - 1)
            kb = (level * 1024 * (1 + noise) + climb * 1024).astype(int)
            st.add_samples(
                ("t", "replica_id", "phase", "nprocs", "rss_kb", "tier"),
                [(t0 + j * step, rid, "load", 1, int(v), "fast") for j, v in enumerate(kb)],
            )
    st.commit()
    st.close()
    return path


def test_identical_runs_show_no_significant_change(tmp_path):
    a = make_run(tmp_path / "a", {"glibc": [100, 101, 99], "jemalloc": [60, 61, 60.5]}, seed=1)
    b = make_run(tmp_path / "b", {"glibc": [100.5, 99.5, 100], "jemalloc": [60.2, 60.8, 60.4]}, seed=2)
    rc = two_runs.compare_runs(a, b, fail_on_increase=5)
    assert [g.key for g in rc.groups] == ["glibc", "jemalloc"]
    assert not rc.any_significant and not rc.failed
    assert all(g.verdict.startswith("no significant change") for g in rc.groups)
    assert "no significant change in any matched group" in text_lines(rc)
    assert not rc.changes and not rc.experiment_diff
    g = rc.groups[0]
    assert g.comparison.ratio_ci[0] < 1 < g.comparison.ratio_ci[1]
    assert g.level_a_mb == pytest.approx(100, rel=0.02) and g.level_b_mb == pytest.approx(100, rel=0.02)


def test_a_larger_group_fails_the_gate_and_provenance_changes_are_named(tmp_path):
    a = make_run(tmp_path / "a", {"glibc": [100, 101, 99], "jemalloc": [60, 61, 60.5]}, seed=1)
    b = make_run(
        tmp_path / "b",
        {"glibc": [100.5, 99.5, 100], "jemalloc": [80, 81, 80.5]},
        seed=2,
        sha="b" * 64,
        kernel="6.2.0",
        experiment='name = "y"\n',
    )
    rc = two_runs.compare_runs(a, b, fail_on_increase=5)
    je = next(g for g in rc.groups if g.key == "jemalloc")
    assert je.comparison.significant and je.verdict == "higher" and je.rose_beyond_gate
    assert je.comparison.ratio == pytest.approx(80.5 / 60.5, rel=0.02)
    assert [g.key for g in rc.failed] == ["jemalloc"]
    fields = {(c.scope, c.field) for c in rc.changes}
    assert (
        ("run", "kernel") in fields
        and ("jemalloc", "library_sha256") in fields
        and ("glibc", "library_sha256") in fields
    )
    assert any(ln.startswith("+name") for ln in rc.experiment_diff)
    # a larger threshold than the increase: the same data are shown within it
    wide = two_runs.compare_runs(a, b, fail_on_increase=50)
    assert not wide.failed and wide.gate_outcome == "within"
    d = json.loads(to_json(rc))
    assert d["gate"] == "above" and d["groups"][1]["rose_beyond_gate"] is True
    assert d["groups"][1]["gate"]["outcome"] == "above" and isinstance(d["groups"][1]["gate"]["limit"], float)
    assert rc.gate_outcome == "above" and compare_exit_code(rc.gate_outcome) == 1


def test_matching_by_allocator_and_groups_in_one_run_only(tmp_path):
    a = make_run(tmp_path / "a", {"base": [100, 101, 99], "je": [60, 61, 60.5]}, family={"je": "jemalloc"})
    b = make_run(
        tmp_path / "b",
        {"base2": [100, 101, 99], "je-new": [60, 61, 60.5], "extra": [5, 5.1, 5.2]},
        family={"je-new": "jemalloc", "extra": "mimalloc"},
    )
    by_name = two_runs.compare_runs(a, b)
    assert by_name.groups == [] and set(by_name.only_a) == {"base", "je"}
    by_alloc = two_runs.compare_runs(a, b, by="allocator")
    assert {(g.group_a, g.group_b) for g in by_alloc.groups} == {("base", "base2"), ("je", "je-new")}
    assert by_alloc.only_b == ["mimalloc 1"]
    dup = make_run(tmp_path / "dup", {"x": [1, 1.1], "y": [1, 1.2]})
    with pytest.raises(UserError, match="two groups on glibc 1"):
        two_runs.compare_runs(dup, a, by="allocator")


def test_single_replica_is_untestable_never_no_change(tmp_path):
    a = make_run(tmp_path / "a", {"g": [100]})
    b = make_run(tmp_path / "b", {"g": [300]})
    rc = two_runs.compare_runs(a, b, fail_on_increase=0)
    assert rc.groups[0].verdict == "untestable" and not rc.failed
    assert any("untestable" in n for n in rc.notes)
    # a 3x larger single replica cannot be shown anything: the gate says so, it does not pass
    assert rc.gate_outcome == "inconclusive" and rc.groups[0].gate.outcome == "inconclusive"


def test_not_a_run_is_refused(tmp_path):
    a = make_run(tmp_path / "a", {"g": [100, 101]})
    with pytest.raises(UserError, match="not an alloclab run"):
        two_runs.compare_runs(a, tmp_path / "missing")


def test_gate_is_the_intervals_lower_end():
    rng = np.random.default_rng(3)
    a = 100 * np.exp(rng.normal(0, 0.01, 5))
    c = compare_pairs({"g": (a, a * 1.10)})["g"]
    assert c.significant and c.ratio == pytest.approx(1.10)
    assert rose_beyond(c, 5) is (c.ratio_ci[0] > 1.05)
    assert rose_beyond(c, 5) and not rose_beyond(c, 10) and not rose_beyond(c, 20)
    # significant, point estimate above 1 + PCT, interval not wholly above: no alarm
    c2 = compare_pairs({"g": (a, a * np.exp(rng.normal(0.06, 0.03, 5)))})["g"]
    if c2.ratio > 1.05 and c2.ratio_ci[0] <= 1.05:
        assert not rose_beyond(c2, 5)


def test_gate_has_three_outcomes_and_states_what_the_data_could_detect():
    rng = np.random.default_rng(4)
    a = 100 * np.exp(rng.normal(0, 0.01, 5))
    quiet = compare_pairs({"g": (a, a * np.exp(rng.normal(0, 0.01, 5)))})["g"]
    r = gate(quiet, 5)
    assert r.outcome == "within" and r.upper_pct == pytest.approx(100 * (quiet.ratio_ci[1] - 1))
    assert r.upper_pct < 5 and 5 < r.detectable_pct < 10
    # two noisy replicas a side: the interval allows +50% and more, so a 5% gate cannot pass
    noisy = compare_pairs({"g": (np.array([80.0, 120.0]), np.array([82.0, 121.0]))})["g"]
    r = gate(noisy, 5)
    assert r.outcome == "inconclusive" and r.upper_pct > 50 and "reaches past 1.05" in r.reason
    assert r.detectable_pct > r.upper_pct
    # undecided is never a silent green: exit 4 by default, 0 only when allowed
    assert compare_exit_code("inconclusive") == 4 and compare_exit_code("inconclusive", allow_inconclusive=True) == 0
    assert compare_exit_code("within") == 0 and compare_exit_code("above", allow_inconclusive=True) == 1


def test_text_names_every_warning_fits_80_columns_and_says_inconclusive(tmp_path):
    """The issue's case: two short runs of 2 replicas whose interval allows +55% must not pass a
    5% gate; the comparison's own notes and both runs' warnings reach the text output."""
    a = make_run(tmp_path / "a", {"svc": [80, 120]}, seed=1)
    b = make_run(tmp_path / "b", {"svc": [85, 119]}, seed=2)
    rc = two_runs.compare_runs(a, b, fail_on_increase=5)
    assert rc.gate_outcome == "inconclusive"
    lines = text_lines(rc, width=80)
    text = "\n".join(lines)
    assert max(map(len, lines)) <= 80
    assert lines[-1].startswith("gate INCONCLUSIVE") or "gate INCONCLUSIVE" in text.split("\n\n")[-1]
    assert "gate passed" not in text.lower()
    for w in rc.warnings_a + rc.warnings_b:
        assert f"{w.severity} {w.kind}" in text
    assert rc.warnings_a and any(n in text for n in ["Welch df", "too-few-replicas"])
    # no word split over two lines: every token of the wrapped text is a token of the unwrapped one
    wide = " ".join(text_lines(rc, width=80, wrap=False)).split()
    assert set(" ".join(lines).split()) <= set(wide)


def test_levels_taken_at_different_times_of_day_warn_and_hold_the_gate(tmp_path):
    """A daily cycle alone moves B/A when the runs' levels stand for different hours (calibration:
    7.0% false fails at n = 5 without this): warned, in --json, and the gate says inconclusive."""
    groups = {"jemalloc": [60, 61, 60.5]}
    a = make_run(tmp_path / "a", groups, seed=1, source="fleet")
    late = make_run(tmp_path / "late", {"jemalloc": [80, 81, 80.5]}, seed=2, t0=T0 + 6 * 3600, source="fleet")
    rc = two_runs.compare_runs(a, late, fail_on_increase=5)
    [w] = rc.warnings
    assert w.kind == "times-of-day-differ" and w.data["hours_apart"] == pytest.approx(6.0, abs=0.01)
    assert rc.gate_raw == "above" and rc.gate_outcome == "inconclusive"
    assert compare_exit_code(rc.gate_outcome) == 4 and compare_exit_code(rc.gate_outcome, allow_inconclusive=True) == 0
    text = text_lines(rc, wrap=False)
    gate_line = next(ln for ln in text if ln.startswith("gate INCONCLUSIVE"))
    assert "times-of-day-differ" in gate_line and "same hour" in gate_line and "≥ 24 h" in gate_line
    clock = lambda t: __import__("alloclab.common.timefmt", fromlist=["utc"]).utc(t, minutes=True)[11:16]
    assert clock(T0) in w.message and clock(T0 + 6 * 3600) in w.message
    d = json.loads(to_json(rc))
    assert d["gate"] == "inconclusive" and d["gate_before_warnings"] == "above"
    assert [x["kind"] for x in d["warnings"]] == ["times-of-day-differ"]
    # two experiments of `alloclab run` make their own load: the hour they ran at is no factor
    lab_a = make_run(tmp_path / "lab-a", groups, seed=1)
    lab_b = make_run(tmp_path / "lab-b", {"jemalloc": [80, 81, 80.5]}, seed=2, t0=T0 + 6 * 3600)
    lab = two_runs.compare_runs(lab_a, lab_b, fail_on_increase=5)
    assert lab.warnings == [] and lab.gate_outcome == "above"
    # the same hour a day later: no warning, the gate decides
    same = two_runs.compare_runs(
        a, make_run(tmp_path / "same", groups, seed=2, t0=T0 + 86400, source="fleet"), fail_on_increase=5
    )
    assert same.warnings == [] and same.gate_outcome == same.gate_raw
    # both levels are means over ≥ 24 h: the cycle averages out whatever the start hour
    long_a = make_run(tmp_path / "la", groups, seed=1, step=300.0, source="fleet")
    long_b = make_run(tmp_path / "lb", groups, seed=2, step=300.0, t0=T0 + 7 * 3600, source="fleet")
    assert two_runs.compare_runs(long_a, long_b, fail_on_increase=5).warnings == []
    # one a day average, the other not: warned whatever the hours
    mixed = two_runs.compare_runs(long_a, a, fail_on_increase=5)
    assert [w.kind for w in mixed.warnings] == ["times-of-day-differ"]


def test_what_changed_cuts_long_commands_between_whole_arguments(tmp_path):
    """A long argv that differs late is shown around the difference, cut between arguments with "…",
    never inside one (the cut used to fall mid-argument: `…"--thr`)."""
    argv = [
        "/usr/local/lib/alloclab/native/stressors",
        "--pattern",
        "sawtooth",
        "--load",
        "3600",
        "--period",
        "2",
        "--mb",
        "48",
        "--seed",
        "7",
        "--threads",
        "4",
    ]
    argv_b = [*argv[:-3], "8", *argv[-2:]]
    a = make_run(tmp_path / "a", {"svc": [100, 101, 99]}, seed=1, command=argv)
    b = make_run(tmp_path / "b", {"svc": [100, 101, 99]}, seed=2, command=argv_b)
    rc = two_runs.compare_runs(a, b)
    for width in (60, 80, 100, 140):
        line = next(ln for ln in text_lines(rc, width=width, wrap=False) if ln.startswith("  svc: command: "))
        before, after = line.removeprefix("  svc: command: ").split(" → ")
        for shown, full in ((before, argv), (after, argv_b)):
            assert shown.startswith("…"), (width, shown)
            assert all(w.strip('[],"') in full for w in shown.strip("…").split()), (width, shown)
        assert '"7"' in before and '"8"' in after, (width, line)
