"""One growth word (issue 49): "Growing", with the qualifier "in steps"; a leak judged by its rate."""

import numpy as np

from alloclab import stats
from alloclab.analysis import _group_status
from alloclab.reporters.tables import STATUS_RULES, table_cells
from alloclab.stats import RULES, classify, growth_bar_share, status_phrase
from tests import simulated_series as sim


def test_the_step_rule_says_growing_in_steps_and_no_report_word_is_ratcheting():
    t = sim.times(3600.0, 1.0)
    calls = [classify(t, y) for y in sim.staircase(np.random.default_rng(21), 10, t, climb_share=0.08, steps=6)]
    stepped = [c for c in calls if c.shape == stats.STEPS]
    assert len(stepped) >= 8 and all(c.word == "Growing" for c in stepped), [(c.word, c.shape) for c in calls]
    assert {status_phrase(c.word, c.shape) for c in stepped} == {"Growing in steps"}
    assert status_phrase("Flat", stats.STEPS) == "Flat" and status_phrase("Growing") == "Growing"
    assert "Ratcheting" not in stats.STATUS_ORDER and "Ratcheting" not in STATUS_RULES
    row = {
        "group": "B",
        "level_mb": 100.0,
        "baseline": False,
        "ratio_to_baseline": None,
        "status": "Growing",
        "growth_shape": "steps",
        "allocator": "glibc",
        "version": None,
        "verified": 0,
        "replicas": 3,
        "footprint_mb": None,
        "steady_median_mb": None,
        "peak_mb": None,
        "final_mb": None,
        "change_mb": None,
        "p_holm": None,
        "letters": None,
    }
    assert table_cells(row)[3] == "Growing in steps"


def test_a_three_percent_a_day_leak_over_a_day_and_a_half_is_growing_not_flat():
    # +3%/day is +4.5% over 1.5 days: under the 5% the window bar asked, over the 3% the rate's bar asks
    t = sim.times(1.5 * 86400, 600.0)
    rng = np.random.default_rng(5)
    y = 100 * (1 + 0.03 * (t - t[0]) / 86400 + rng.normal(0, 0.002, len(t)))
    call = classify(t, y)
    assert growth_bar_share(t[-1] - t[0]) < 0.045 < RULES["flat_max_growth_share"]
    assert call.word == "Growing" and "/day" in call.reason, call.reason
    # a short window keeps the 5% bar: a run of an hour is not judged by a rate a day
    assert growth_bar_share(3600.0) == RULES["flat_max_growth_share"]
    # the group test uses the same bar
    g = stats.group_growth(
        {"B": np.full(5, 100.0)}, {"B": 100 * (1.045 + rng.normal(0, 0.003, 5))}, {"B": t[-1] - t[0]}
    )
    assert g["B"].word == "Growing" and "/day" in g["B"].reason, g["B"].reason


def test_a_group_is_not_flat_beside_its_own_grows_beyond_the_baseline_when_it_grows():
    # +1%/day over 3 days (3%): under the bar over this window, shown beyond the baseline and on its own
    window, level = 3 * 86400, 300.0
    rng = np.random.default_rng(7)
    grows = 9.0 + rng.normal(0, 1.0, 5)
    flat = rng.normal(0, 1.0, 5)
    beside = stats.growth_beside({"B": (grows, flat, level, window)}, "Z")["B"]
    assert beside.word == "grows beyond the baseline", beside
    own = stats.group_growth({"B": np.full(5, level)}, {"B": level + grows}, {"B": window})["B"]
    assert own.significant and own.word is None and own.change_share < growth_bar_share(window)
    word, why, shape = _group_status(["Flat"] * 5, 5, own, [None] * 5, beside)
    assert word == "Growing" and why.startswith("grows beyond the baseline") and shape is None, why
    # not shown on its own (groups of 3), beside a baseline that stays flat: the excess is its own growth
    few = stats.growth_beside({"B": (grows[:3], flat[:3], level, window)}, "Z")["B"]
    weak = stats.group_growth({"B": np.full(3, level)}, {"B": level + grows[:3]}, {"B": window}, alpha=1e-12)["B"]
    assert few.word == "grows beyond the baseline" and not weak.significant
    assert _group_status(["Flat"] * 3, 3, weak, [None] * 3, few)[0] == "Growing"
    # beyond a baseline that falls more than the group grows, its own change not shown: Flat, and why
    falling = stats.growth_beside({"B": (flat + 9.0, flat - 19.0, level, window)}, "Z")["B"]
    still = stats.group_growth({"B": np.full(5, level)}, {"B": level + flat + 9.0}, {"B": window}, alpha=1e-12)["B"]
    assert falling.word == "grows beyond the baseline" and not still.significant and still.change_share > 0
    word, why, _ = _group_status(["Flat"] * 5, 5, still, [None] * 5, falling)
    assert word == "Flat" and "less than the baseline's fall" in why, why
    # a significant excess too small to be a leak (1% over 3 days, beside a daily cycle): Flat, and why
    small = stats.growth_beside({"B": (flat + 3.0, flat, level, window)}, "Z")["B"]
    tiny = stats.group_growth({"B": np.full(5, level)}, {"B": level + flat + 3.0}, {"B": window})["B"]
    assert small.word == "grows beyond the baseline" and tiny.change_share < 0.5 * growth_bar_share(window)
    word, why, _ = _group_status(["Flat"] * 5, 5, tiny, [None] * 5, small)
    assert word == "Flat" and "too small to be a leak" in why, why


def test_a_group_is_in_steps_when_more_of_its_growing_replicas_climb_in_steps():
    assert _group_status(["Growing"] * 3 + ["Flat"] * 2, 5, None, ["steps", "steps", None, None, None]) == (
        "Growing",
        "3 of 5 replicas Growing (2 in steps)",
        "steps",
    )
    assert _group_status(["Growing"] * 3 + ["Flat"] * 2, 5, None, ["steps", None, None, None, None])[2] is None
    assert _group_status(["Flat"] * 3 + ["Growing"] * 2, 5, None, [None] * 3 + ["steps"] * 2)[::2] == ("Flat", None)


def test_a_tie_of_growing_replicas_against_a_group_test_that_does_not_show_growth_is_not_growing():
    g = stats.group_growth(
        {"A": np.full(5, 100.0)}, {"A": 100 + np.array([-20.0, 25.0, -10.0, 30.0, -24.0])}, {"A": 12 * 3600.0}
    )["A"]
    assert g.p_adj is not None and not g.significant
    word, why, _ = _group_status(["Growing", "Growing", "Flat", "Flat", "Variable"], 5, g)
    assert word == "Flat" and "not a majority" in why, why
    assert _group_status(["Growing"] * 3 + ["Flat"] * 2, 5, g)[0] == "Growing"


def test_a_group_whose_replicas_all_have_growth_words_keeps_its_vote_when_the_group_test_does_not_show_it():
    # 2 Growing and 2 Bloating: no majority, no calmer word to give it to (min() of nothing ended analyse())
    rng = np.random.default_rng(11)
    start = np.full(4, 100.0)
    unshown = stats.group_growth({"B": start}, {"B": start * (1.02 + rng.normal(0, 0.05, 4))}, {"B": 3600.0})["B"]
    assert unshown.p_adj is not None and not unshown.significant
    for words in (["Growing", "Growing", "Bloating", "Bloating"], ["Growing", "Bloating"]):
        word, why, _ = _group_status(words, len(words), unshown, [None] * len(words))
        assert word in ("Growing", "Bloating") and "across replicas not shown" in why, (word, why)
