"""The calibration's own statistics (benchmarks/calibration.py): the grouped interval the group
routes' detection rows carry, and the ungated null behind --part ratchet-combine. Seeded."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import calibration as cal
from calibration_parts.common import grouped_rate

from alloclab.stats import step_evidence
from alloclab.stats.steps import group_shape, null_p
from tests import simulated_series as sim


def test_grouped_rate_widens_with_calls_that_come_by_group():
    def interval(text: str) -> tuple[float, float]:
        lo, hi = text.split("[")[1].split("]")[0].split("–")
        return float(lo.rstrip("%")), float(hi.rstrip("%"))

    scattered = [1] * 50 + [2] * 50  # 150 of 500, spread over every group
    clustered = [5] * 30 + [0] * 70  # 150 of 500, whole groups
    lo_s, hi_s = interval(grouped_rate(scattered, 5))
    lo_c, hi_c = interval(grouped_rate(clustered, 5))
    assert "design effect 1.0" in grouped_rate(scattered, 5)
    assert hi_c - lo_c > 1.8 * (hi_s - lo_s)
    assert lo_c < 30.0 < hi_c
    # no call at all: bounded as if each group were one trial (100 groups), not 500 replicas; one
    # call more never narrows the interval
    none, one = interval(grouped_rate([0] * 100, 5)), interval(grouped_rate([1] + [0] * 99, 5))
    assert none[1] > 3.0 and one[1] >= none[1]
    assert "design effect 5.0" in grouped_rate(clustered, 5)  # never above the group's size


@pytest.mark.simulation
def test_an_ungated_null_counts_at_least_the_simulations_the_gated_one_counts():
    t = sim.times(1.5 * 86400, 600.0)
    rng = np.random.default_rng(3)
    pairs = []
    for y in sim.staircase(rng, 12, t, climb_share=0.08, steps=5, sd_share=0.02, phi=0.9):
        e = step_evidence(t, y)
        if e.fit is None or not group_shape(e.fit):
            continue
        # the same simulations (one seed): the ungated null counts every one the gated null counts
        pairs.append(
            (
                null_p(e.x, e.fit.sharp_t, np.random.default_rng(11), 99)[0],
                null_p(e.x, e.fit.sharp_t, np.random.default_rng(11), 99, gated=False)[0],
            )
        )
    assert len(pairs) >= 4 and all(ungated >= gated for gated, ungated in pairs)
    # and some simulations as sharp as the data lack the staircase's shape: the gate is applied
    assert sum(ungated > gated for gated, ungated in pairs) >= 2, pairs


def _rows(capsys, prefix: str) -> list[str]:
    return [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(prefix)]


@pytest.mark.simulation
def test_the_shape_bound_separates_staircases_from_flat_series(monkeypatch, capsys):
    # --part ratchet-shape: what share of replicas show the staircase's shape, the bound on any call
    # that keeps it; seeded, 60 series a cell
    monkeypatch.setattr(sys, "argv", ["calibration.py", "--part", "ratchet-shape", "--datasets", "60", "--seed", "5"])
    assert cal.main() == 0
    rows = _rows(capsys, "| the staircase's shape")
    assert len(rows) == 24, rows  # 8 cells × the 3 pooled designs

    def share(cell: str, design: str, one_step: bool = False) -> float:
        [line] = [r for r in rows if cell in r and design in r]
        measured = line.split("| ")[2]
        return float((measured.split(" / ")[-1] if one_step else measured).split("%")[0])

    for design in ("1.5 d", "3 d", "9 d"):
        assert share("staircases, AR(1) 1% φ 0.9", design) >= 90.0 and share("flat AR(1) 2% φ 0.9", design) <= 10.0
        # one visible step is enough for more staircases and for more flat series (it asks less)
        for cell in ("staircases, AR(1) 2% φ 0.9", "flat AR(1) 2% φ 0.9", "flat AR(1) 2% φ 0.5"):
            assert share(cell, design, one_step=True) >= share(cell, design)
    assert share("staircases, AR(1) 2% φ 0.9", "1.5 d") < share(
        "staircases, AR(1) 2% φ 0.9", "9 d"
    )  # fewer bins, fewer steps seen
    assert share("flat AR(1) 2% φ 0.5", "1.5 d", one_step=True) < share(
        "flat AR(1) 2% φ 0.9", "1.5 d", one_step=True
    )  # wander makes steps


def test_mixed_groups_count_only_the_replicas_that_do_not_step(monkeypatch, capsys):
    # ⌈m/2⌉ staircases and m // 2 others: a group of 3 counts its one other, a group of 5 its two
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "calibration.py",
            "--part",
            "ratchet-group",
            "--datasets",
            "2",
            "--seed",
            "5",
            "--designs",
            "1.5 d",
            "--cells",
            "mixed, flat",
        ],
    )
    assert cal.main() == 0
    rows = _rows(capsys, "| group route")
    assert len(rows) == 2, rows
    assert any("n = 5" in r and "/4, 2 groups" in r for r in rows) and any(
        "n = 3" in r and "/2, 2 groups" in r for r in rows
    ), rows


@pytest.mark.simulation
def test_the_group_rows_give_the_call_among_the_shaped_beside_the_call_among_all(monkeypatch, capsys):
    # --part ratchet-group: the rate is the rule's (bar 0.25 among the simulations with the shape); the
    # looser bars call at least as many; the call by the p among all simulations (until session 19) at
    # least as many as the rule's, its p being never above the p among the shaped
    import re

    monkeypatch.setattr(
        sys,
        "argv",
        [
            "calibration.py",
            "--part",
            "ratchet-group",
            "--datasets",
            "4",
            "--seed",
            "5",
            "--designs",
            "1.5 d",
            "--cells",
            "+8% five-step staircases, AR(1) 2% φ 0.9",
        ],
    )
    assert cal.main() == 0
    # (the tables gather rows across main()'s calls in one process: this cell's only)
    rows = {r for r in _rows(capsys, "| group route") if ", +8% five-step staircases, AR(1) 2% φ 0.9, 1.5 d" in r}
    assert len(rows) == 2, rows
    for r in rows:
        rate, own, *bars, by_all = (
            float(v)
            for v in re.search(
                r"\| ([\d.]+)% \[.*?\((\d+\.\d)%; ([\d.]+)% / ([\d.]+)% / ([\d.]+)% / ([\d.]+)%; [^;]*; ([\d.]+)%\)", r
            ).groups()
        )
        assert rate == bars[1] and bars == sorted(bars) and own <= bars[0], r
        assert by_all >= rate, r
