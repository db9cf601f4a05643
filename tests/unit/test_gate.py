"""alloclab.studies.gate: the looks' plan and spending, one look's decision (compare's gate at the look's
level), the derived two-group experiment, and bad input (one line, exit 2)."""

from __future__ import annotations

import numpy as np
import pytest

from alloclab.common.errors import UserError
from alloclab.studies import gate as g
from tests.conftest import run_cli


def test_the_default_plan_looks_at_doublings_and_spends_alpha_in_proportion_to_elapsed_time():
    stop = g.GateStop(
        5, first_look_s=20, planned_s=300, interval=1, metric="rss", baseline="baseline", candidate="candidate"
    )
    times = [t for t, _ in stop.plan]
    levels = [lv for _, lv in stop.plan]
    assert times == [20, 40, 80, 160, 290]
    assert sum(levels) == pytest.approx(0.05)
    assert levels == pytest.approx([0.05 * t / sum(times) for t in times])
    assert not stop.due(19.9) and stop.due(20.0)


def test_one_look_calls_within_above_and_inconclusive_as_compare_does():
    rng = np.random.default_rng(51)
    base = 100 * np.exp(0.002 * rng.normal(size=4))
    level = 0.05 * 20 / 590
    same = g.decide_look({"b": base, "c": 100 * np.exp(0.002 * rng.normal(size=4))}, "b", "c", 5, level, 20)
    assert same.outcome == "within" and same.ratio_ci[1] <= 1.05
    more = g.decide_look({"b": base, "c": 110 * np.exp(0.002 * rng.normal(size=4))}, "b", "c", 5, level, 20)
    assert more.outcome == "above" and more.ratio_ci[0] > 1.05
    # a live service's spread (cv 5%) with 4 replicas: undecided, and it says how far off it is
    noisy = g.decide_look(
        {"b": 100 * np.exp(0.05 * rng.normal(size=4)), "c": 100 * np.exp(0.05 * rng.normal(size=4))},
        "b",
        "c",
        5,
        level,
        20,
    )
    assert noisy.outcome == "inconclusive" and noisy.detectable_pct > 10 and noisy.upper_pct > 5
    # a narrower interval (a later look's larger level) can decide what an earlier one could not
    wide = g.decide_look({"b": base, "c": base * 1.06}, "b", "c", 5, 1e-6, 20)
    narrow = g.decide_look({"b": base, "c": base * 1.06}, "b", "c", 5, 0.025, 290)
    assert (
        narrow.ratio_ci[0] > wide.ratio_ci[0]
        and narrow.ratio_ci[1] - narrow.ratio_ci[0] < wide.ratio_ci[1] - wide.ratio_ci[0]
    )


def test_the_derived_experiment_runs_both_sides_in_one_run(tmp_path):
    plan = g.Plan(
        g.Side(command=("/bin/sleep", "600")),
        g.Side(command=("/bin/sleep", "601"), allocator="glibc", env={"MALLOC_ARENA_MAX": "2"}),
        5,
    )
    exp = g.experiment(plan, tmp_path)
    assert [x.name for x in exp.groups] == ["baseline", "candidate"] and exp.baseline == "baseline"
    assert exp.groups[1].command == ("/bin/sleep", "601") and exp.groups[1].env == {"MALLOC_ARENA_MAX": "2"}
    assert exp.replicas == 4 and exp.phases.warmup == 10 and exp.planned_duration() == 300
    for bad, words in (
        (g.Plan(plan.baseline, plan.candidate, 1000), "out of range"),
        (g.Plan(plan.baseline, plan.candidate, 5, replicas=1), "too few"),
        (g.Plan(plan.baseline, plan.candidate, 5, max_duration_s=15), "no time after the warm-up"),
    ):
        with pytest.raises(UserError, match=words):
            g.experiment(bad, tmp_path)


@pytest.mark.parametrize(
    "args, words",
    [
        (["--baseline", "/bin/true"], "needs its threshold"),
        (["--fail-on-increase", "5"], "say what the gate runs"),
        (["--fail-on-increase", "5", "--baseline", "/bin/true"], "the baseline's and the candidate's command"),
        (["--fail-on-increase", "5", "--command", "/bin/true", "--trace", "x.trace"], "give one of"),
        (["--fail-on-increase", "5", "--trace", "missing.trace"], "is not a file"),
        (["--fail-on-increase", "5", "--command", "/bin/true", "--baseline-env", "NOEQUALS"], "is not NAME=VALUE"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, words):
    p = run_cli("gate", *args, "-o", str(tmp_path / "run"), cwd=tmp_path)
    assert p.returncode == 2 and words in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
    assert not (tmp_path / "run").exists()


def test_every_gate_command_in_the_docs_parses():
    """docs/tutorials/ci-memory-gate.md's `alloclab gate` examples use options that exist (each parsed as the CLI
    parses it; running them needs the programs they name)."""
    import shlex

    from alloclab.cli import gate as gate_cli
    from tests.conftest import REPO

    text = (REPO / "docs" / "tutorials" / "ci-memory-gate.md").read_text()
    lines = [ln for ln in text.splitlines() if ln.startswith("alloclab gate ")]
    assert len(lines) >= 5
    for ln in lines:
        ctx = gate_cli.make_context("gate", shlex.split(ln)[2:])
        assert ctx.params["fail_on_increase"] == 5, ln
