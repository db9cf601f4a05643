"""The recommendation reads in one line (issue 27): a headline first, "cannot be told apart" said as
such with the interval, and a baseline that wins significantly is a confident verdict. Real stores
(tests.unit.test_two_runs.make_run) through the real analysis."""

from __future__ import annotations

import re

from alloclab.analysis import analyse
from alloclab.reporters.terminal import print_summary
from alloclab.store import Store
from tests.unit.test_two_runs import make_run


def _rec(tmp_path, groups):
    return analyse(Store.open(make_run(tmp_path / "r", groups, seed=5))).recommendation


def test_a_significant_winner_is_named_first(tmp_path):
    rec = _rec(tmp_path, {"glibc": [100, 101, 99], "je": [60, 61, 60.5]})
    first = rec.text().split("\n")[0]
    assert first == rec.headline() and re.match(
        r"Run \*\*je\*\*: 0\.6\d× \[0\.\d\d–0\.\d\d\] the RSS of the baseline glibc — confidence ", first
    )
    assert "confidence high" in first or "confidence moderate" in first


def test_a_baseline_that_wins_significantly_is_a_confident_verdict(tmp_path):
    rec = _rec(tmp_path, {"glibc": [60, 61, 60.5], "je": [100, 101, 99], "mi": [120, 119, 121]})
    assert rec.winner == "glibc" and rec.runner_up == "je" and rec.runner_up_significant
    assert rec.confidence in ("high", "moderate") and "no group beat" not in rec.confidence_reason
    assert rec.headline().startswith("Keep **glibc** (the baseline): every other group used more RSS (closest: je 1.")


def test_groups_that_cannot_be_told_apart_are_said_to_be_so_with_the_interval(tmp_path):
    rec = _rec(tmp_path, {"glibc": [100, 106, 95], "je": [101, 94, 105]})
    h = rec.headline()
    assert "cannot be told apart" in h and rec.confidence == "low"
    assert "used the least memory" not in h
    assert re.search(r"interval \d\.\d\d–\d\.\d\d: differences beyond [−+-]\d+% / \+\d+% are ruled out", h), h
    assert "cannot be told apart" in rec.detail() or rec.winner == "glibc"


def test_terminal_prints_the_headline_first_and_points_to_warnings_it_shows(tmp_path):
    from rich.console import Console

    a = analyse(Store.open(make_run(tmp_path / "r", {"glibc": [100, 101], "je": [60, 61]}, seed=5)))
    console = Console(width=80, record=True)
    print_summary(a, console)
    text = console.export_text()
    assert (
        a.recommendation.headline().replace("**", "") in text.replace("\n", " ").replace("  ", " ")
        or text.split("Run je")[1]
    )
    assert "(see Warnings)" not in text


def test_levels_that_never_settled_are_low_confidence_and_say_why(tmp_path):
    """Every replica Too short (300 samples 0.1 s apart: a 30 s steady window, under a minute; what a
    saturated machine that samples too rarely also gives) is no verdict to act on, however clear the
    difference: low, naming why (it was moderate). Same for a baseline that wins."""
    for name, groups, unsettled in (
        ("win", {"glibc": [100, 101, 99], "je": [60, 61, 60.5]}, "je and glibc"),
        ("keep", {"glibc": [60, 61, 60.5], "je": [100, 101, 99]}, "je and glibc"),
    ):
        a = analyse(Store.open(make_run(tmp_path / name, groups, seed=5, step=0.1)))
        assert {r.status for r in a.replicas} == {"Too short"}
        rec = a.recommendation
        assert rec.significant or rec.runner_up_significant
        assert rec.confidence == "low", (name, rec.confidence, rec.confidence_reason)
        assert rec.confidence_reason.startswith(f"every replica of {unsettled} too short to settle a level"), (
            rec.confidence_reason
        )
        assert "confidence low" in rec.headline()
