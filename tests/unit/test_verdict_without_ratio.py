"""A recommendation whose winner has no ratio (the baseline had no level to divide by) still reads:
every headline branch words it without the figure instead of failing (a TypeError ended `report`
on a fleet run whose baseline had no usable window)."""

from __future__ import annotations

import pytest

from alloclab.analysis.verdict import Recommendation


@pytest.mark.parametrize("untestable", [True, False])
def test_every_headline_branch_reads_without_a_ratio(untestable):
    r = Recommendation(
        metric="rss",
        baseline="glibc",
        basis="level at the end",
        winner="jemalloc",
        winner_mb=12.5,
        ratio=None,
        untestable=untestable,
    )
    text = r.headline()
    assert "jemalloc" in text and "None" not in text
    assert r.as_dict()["headline"] == text


def test_the_baseline_winning_with_a_runner_up_without_ratio_reads():
    r = Recommendation(
        metric="rss",
        baseline="glibc",
        basis="level at the end",
        winner="glibc",
        runner_up="jemalloc",
        runner_up_ratio=None,
    )
    assert "cannot be told apart (no ratio" in r.headline()
