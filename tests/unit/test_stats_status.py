"""stats.status: words re-based on the steady window and on durations, not sample counts."""

import numpy as np
import pytest

from alloclab.stats import (
    RULES,
    STATUS_ORDER,
    classify,
    ratchet_group,
    release_events,
    status_phrase,
    step_evidence,
)
from tests import simulated_series as sim

STEPS = "Growing in steps"  # the word the step rule gives (retired as a status word: "Ratcheting")


def words(t, ys):
    return [status_phrase(c.word, c.shape) for c in (classify(t, y) for y in ys)]


def test_a_staircase_that_never_releases_is_ratcheting_at_any_sampling_interval():
    rng = np.random.default_rng(21)
    for window, dt in ((3600.0, 1.0), (9 * 86400.0, 900.0)):
        t = sim.times(window, dt)
        ws = words(t, sim.staircase(rng, 40, t, climb_share=0.08, steps=6))
        assert ws.count(STEPS) >= 34, (window, dt, ws)


@pytest.mark.filterwarnings("error::RuntimeWarning")  # a constant's lag-1 was 0/0 (stats.growth.detrended_lag1)
def test_sinusoids_flat_and_constant_series_are_not_ratcheting():
    rng = np.random.default_rng(22)
    t = sim.times(6 * 3600.0, 30.0)
    ws = words(t, sim.sinusoid(rng, 100, t, amplitude_share=0.03, period_s=5400.0))
    ws += words(t, sim.flat(rng, 100, t, phi=0.95, sd_share=0.02))
    assert ws.count(STEPS) <= 0.05 * len(ws)
    assert sum(w in ("Growing", "Bloating") for w in ws) <= 0.05 * len(ws)
    assert classify(t, np.full(len(t), 100.0)).word == "Flat"


def test_a_smooth_leak_is_growing_and_a_big_one_bloating():
    t = sim.times(6 * 3600.0, 60.0)
    rng = np.random.default_rng(23)
    assert classify(t, 100 + 10 * t / t[-1] + rng.normal(0, 0.3, len(t))).word == "Growing"
    assert classify(t, 100 + 40 * t / t[-1] + rng.normal(0, 0.3, len(t))).word == "Bloating"


def test_a_flat_word_beside_a_climb_says_why_the_climb_is_not_growth():
    # a +8% staircase in 2% AR(1) noise over 1.5 days is Flat on its own interval in most replicas;
    # the reason must give the change and its interval, not only why it is not steps
    rng = np.random.default_rng(24)
    t = sim.times(1.5 * 86400, 600.0)
    calls = [classify(t, y) for y in sim.staircase(rng, 12, t, climb_share=0.08, steps=5, sd_share=0.02, phi=0.9)]
    flat = [c for c in calls if c.word == "Flat"]
    assert len(flat) >= 4, [c.word for c in calls]
    for c in flat:
        g = c.growth
        assert not g.significant and g.change_lo < 0 < g.change_hi, c.reason
        assert c.reason.startswith(
            f"changed {g.change_share:+.1%} of the level (95% interval {g.change_lo:+.1f} to "
            f"{g.change_hi:+.1f} MB): not shown beyond its noise; "
        ), c.reason
    # a significant climb under the flat threshold: Flat, and the reason names the threshold
    small = classify(t, 100 + 2 * t / t[-1] + rng.normal(0, 0.05, len(t)))
    assert small.word == "Flat" and small.growth.significant, small.reason
    from alloclab.stats import growth_bar_share

    bar = growth_bar_share(t[-1] - t[0])
    assert bar == pytest.approx(RULES["growing_min_rate_share_day"] * 1.5), bar  # over 1.5 days: the rate's bar, 3%
    assert f"under the {bar:.1%} of the level" in small.reason and "/day" in small.reason, small.reason
    fall = classify(t, 100 - 3 * t / t[-1] + rng.normal(0, 0.05, len(t)))
    assert fall.word == "Flat" and fall.growth.significant and "a fall, not growth" in fall.reason, fall.reason


def test_a_slow_release_is_one_event_whatever_the_sampling_interval():
    fine = np.arange(0, 3600, 1.0)
    y = np.where(fine < 1800, 100.0, np.maximum(90.0, 100 - (fine - 1800) / 30))  # 10 MB over 5 min
    coarse = fine[::300]
    assert release_events(fine, y, 100.0).count == 1
    assert release_events(coarse, y[::300], 100.0).count == 1
    assert release_events(fine, np.full(len(fine), 100.0), 100.0).count == 0


def _releases_per_sample(t, y, thr):
    """The rule, one sample at a time: a fall of ≥ thr from the running peak starts a release; it
    lasts until a sample climbs thr above its running trough. (count, largest fall, last trough's
    index)."""
    peak, count, largest, last, trough, top, inside = y[0], 0, 0.0, None, None, None, False
    for i, v in enumerate(y):
        if inside:
            if v < trough:
                trough, last, largest = v, i, max(largest, top - v)
            elif v >= trough + thr:
                inside, peak = False, v
            continue
        peak = max(peak, v)
        largest = max(largest, peak - v)
        if peak - v >= thr:
            count, inside, top, trough, last = count + 1, True, peak, v, i
    return count, largest, last


def test_release_events_follow_the_rule_sample_by_sample():
    # release_events scans with numpy over chunks (a per-sample loop cost 7–13 ms a 9-day 15-s window):
    # the same events, largest fall and last trough as the rule applied one sample at a time, on
    # series with many releases across chunk edges, ties (whole MB) and none
    from alloclab.stats.status import release_threshold

    rng = np.random.default_rng(8)
    for k in range(60):
        n = int(rng.choice([1, 2, 40, 700, 3000]))
        t = np.cumsum(rng.uniform(1, 20, n))
        y = (
            100
            + [
                np.cumsum(rng.normal(0, 1, n)),
                10.0 * ((np.arange(n) % rng.integers(2, 60)) > 10),
                np.round(np.cumsum(rng.normal(0, 2, n))),
                rng.normal(0, 1, n),
            ][k % 4]
        )
        level = float(np.median(y)) * (k % 3)
        got, thr = release_events(t, y, level), release_threshold(t, y, level)
        count, largest, last = _releases_per_sample(t, y, thr)
        assert (got.count, got.largest_mb) == (count, largest), k
        assert got.last_release_s == (None if last is None else t[last] - t[0]), k
        assert got.quiet_s == t[-1] - (t[0] if last is None else t[last]), k


def test_too_short_and_unverified():
    assert classify(np.arange(5.0), np.ones(5)).word == "Too short"
    assert classify(np.arange(0, 30, 1.0), np.ones(30)).word == "Too short"  # 30 s < min_window_s
    assert classify(np.arange(100.0), np.ones(100), verified=False).word == "Unverified"
    assert set(STATUS_ORDER) >= {"Flat", "Growing", "Bloating", "Variable"} and "Ratcheting" not in STATUS_ORDER
    assert RULES["ratchet_sharp_t"] > RULES["ratchet_step_t"] > 0


def test_variable():
    t = np.arange(0, 3600, 10.0)
    y = np.where((t // 300) % 2 == 0, 60.0, 140.0)
    call = classify(t, y)
    assert call.word == "Variable", call


def test_a_staircase_in_one_and_a_half_percent_ar_noise_is_ratcheting():
    # +8% in five uneven steps under AR(1) noise of 1.5% (φ 0.5), 9 days at 15 minutes: each step is
    # about one noise SD tall; the step fit under AR(1) finds 6 of these 8 beside a smooth curve
    t = sim.times(9 * 86400.0, 900.0)
    ws = words(t, sim.staircase(np.random.default_rng(25), 8, t, climb_share=0.08, steps=5, sd_share=0.015, phi=0.5))
    assert ws.count(STEPS) >= 6, ws


@pytest.mark.simulation
def test_a_climb_that_levels_off_is_not_ratcheting():
    # +15% approaching its ceiling (time constant 15% of the 9-day window) in AR(1) 1% φ 0.9, groups of
    # 5: beside a straight line its bend was read as steps (own route 4, group route 2 of these 20)
    t = sim.times(9 * 86400.0, 900.0)
    u = (t - t[0]) / (t[-1] - t[0])
    curve = 0.15 * (1 - np.exp(-u / 0.15)) / (1 - np.exp(-1 / 0.15))
    for seed in (0, 1, 2, 4):
        ys = 100 * (1 + curve[None, :] + sim.ar1(np.random.default_rng(seed), 5, len(t), 0.9, 0.01))
        group = ratchet_group([step_evidence(t, y) for y in ys])
        assert not any(group.own) and not any(group.called), (seed, group)


def test_persistent_noise_a_daily_cycle_and_a_smooth_climb_are_not_ratcheting():
    t = sim.times(1.5 * 86400.0, 600.0)
    # flat AR(1) φ 0.99 (2%) over 1.5 days: series the release-free-span rule called Ratcheting
    flat = [sim.flat(np.random.default_rng(seed), 1, t, phi=0.99, sd_share=0.02)[0] for seed in (35, 152, 249)]
    # a smooth +10% climb in AR(1) 2% φ 0.9: not steps (the old rules: Ratcheting)
    smooth = [
        sim.growing(np.random.default_rng(seed), 1, t, share=0.10, phi=0.9, sd_share=0.02)[0] for seed in (4, 7, 15)
    ]
    # a daily cycle ±4% at any phase (1% AR(1) φ 0.9): its rise is given back
    cycle = list(
        sim.sinusoid(np.random.default_rng(26), 8, t, amplitude_share=0.04, period_s=86400.0, sd_share=0.01, phi=0.9)
    )
    ws = words(t, flat + smooth + cycle)
    assert STEPS not in ws, ws


def _replicas(t, ys, words_):
    from alloclab.analysis.replica import ReplicaStats, SteadyGrowth

    reps = [
        ReplicaStats(
            f"r{i}",
            "A",
            True,
            len(t),
            steady_mb=float(np.median(y)),
            steady_mean_mb=float(np.mean(y)),
            status=w.removesuffix(" in steps"),
            growth_shape="steps" if w == STEPS else None,
        )
        for i, (y, w) in enumerate(zip(ys, words_))
    ]
    return reps, [SteadyGrowth(t, y, None) for y in ys]


@pytest.mark.simulation
def test_a_group_of_staircases_in_two_percent_noise_lends_its_replicas_step_evidence():
    # five +8% staircases (own step times) under AR(1) 2% φ 0.9, 9 days at 15 minutes: classify's own
    # route finds 2 of 5 (a step of 1.6% is ~1 noise SD); against each replica's simulated null the
    # group's evidence together is far beyond chance, and analysis re-words the other three with it
    from alloclab.analysis import _group_ratchet

    t = sim.times(9 * 86400.0, 900.0)
    ys = sim.staircase(np.random.default_rng(43), 5, t, climb_share=0.08, steps=5, sd_share=0.02, phi=0.9)
    own = words(t, ys)
    assert own.count(STEPS) == 2, own
    reps, steady = _replicas(t, ys, own)
    out = _group_ratchet(reps, steady)
    assert [status_phrase(r.status, r.growth_shape) for r in out].count(STEPS) == 5, [
        (r.status, r.status_reason) for r in out
    ]
    assert all("group" in r.status_reason for r, w in zip(out, own) if w != STEPS)
    # the replicas' call is by their p among the simulations with the shape, never below their p among all
    call = ratchet_group([step_evidence(t, y) for y in ys])
    pairs = [(q, s) for q, s in zip(call.own_p, call.shaped_p) if q is not None]
    assert len(pairs) == 5 and all(s >= q for q, s in pairs), call
    assert all(
        "simulations of that curve in its own noise that have the staircase's shape" in why
        for why, c in zip(call.reasons, call.called)
        if c
    ), call.reasons


def test_the_monte_carlo_p_stops_at_the_tenth_as_extreme_and_counts_a_subset_alike():
    from alloclab.stats.steps import besag_clifford_p, sequential_p

    stop = int(RULES["ratchet_group_stop"])
    assert besag_clifford_p(stop, 40, 399) == stop / 40  # stopped: hits over the draws run
    assert besag_clifford_p(stop - 1, 399, 399) == stop / 400  # ran out: (1 + hits) / (sims + 1)
    assert besag_clifford_p(0, 0, 0) == 1.0  # a subset with no draw says nothing
    # sequential_p over scripted draws: every third as extreme stops at the tenth hit, after 30 draws
    assert sequential_p(iter([i % 3 == 2 for i in range(399)]), 399) == (stop / 30, 30)
    assert sequential_p(iter([False] * 399), 399) == (1 / 400, 399)
    # a subset of the draws (those with the shape), as levelling_null_p reads it: 10 hits among 25
    # shaped draws of the 30 run is p 1/3 among them, 1/3 ≥ the p among all (10/30)
    assert besag_clifford_p(stop, 25, 25) == stop / 25 >= besag_clifford_p(stop, 30, 399)


@pytest.mark.simulation
def test_a_smooth_climb_or_a_daily_cycle_the_group_shares_lends_no_step_evidence():
    # the session-9 prototype (a lower bar for every replica when the group's median t was high) called
    # a smooth +10% climb shared by the group Ratcheting in 10% over 1.5 days: the replicas' φ
    # estimates are biased alike on one design. Each replica's own simulated null re-estimates φ, so
    # the bias is in the null; the simulations are seeded from the data (the same call, the same p).
    from alloclab.stats import ratchet_group, step_evidence

    t = sim.times(1.5 * 86400.0, 600.0)
    for seed in (3, 5):
        ys = sim.growing(np.random.default_rng(seed), 5, t, share=0.10, phi=0.9, sd_share=0.02)
        call = ratchet_group([step_evidence(t, y) for y in ys])
        assert not any(call.called) and not any(call.own), call
        assert call.p is None or call.p > RULES["ratchet_group_alpha"]
        assert ratchet_group([step_evidence(t, y) for y in ys]) == call
    rng = np.random.default_rng(6)
    ys = 100 * (1 + 0.04 * np.sin(2 * np.pi * t / 86400.0 + 1.0) + sim.ar1(rng, 5, len(t), 0.9, 0.01))
    assert not any(ratchet_group([step_evidence(t, y) for y in ys]).called)


def test_staircases_a_group_shares_in_time_are_found_in_two_percent_noise():
    # five replicas lifted at the same five moments (+8% each, their own step sizes), AR(1) 2% φ 0.9,
    # 1.5 days at 10 minutes: classify's own route and the group route (each replica its own times)
    # find none; the average of the five has the noise of one at 0.9%, where the step fit works
    from alloclab.analysis import _group_ratchet

    t = sim.times(1.5 * 86400.0, 600.0)
    ys = sim.shared_staircase(np.random.default_rng(6), 5, t, sd_share=0.02, phi=0.9)
    own = words(t, ys)
    assert own.count(STEPS) == 0, own
    out = _group_ratchet(*_replicas(t, ys, own))
    shared = [r for r in out if r.status_reason.startswith("climbs at the steps its group shares")]
    assert len(shared) == 3 and all(status_phrase(r.status, r.growth_shape) == STEPS for r in shared), [
        (r.status, r.status_reason) for r in out
    ]


@pytest.mark.simulation
def test_a_flat_replica_is_not_called_because_its_group_steps():
    # one flat replica beside five sharing a +8% staircase (2% φ 0.9, 1.5 days): the group's steps are
    # found, four of the five climb at them on their own series (and beside their own smooth curve at
    # the others' steps), the flat one does not (its own climb there is ~0): it stays unsaid. The
    # simulations are seeded from the data (the same call twice).
    from alloclab.stats import ratchet_shared

    t = sim.times(1.5 * 86400.0, 600.0)
    rng = np.random.default_rng(2)
    ys = np.vstack(
        [sim.flat(rng, 1, t, phi=0.9, sd_share=0.02), sim.shared_staircase(rng, 5, t, sd_share=0.02, phi=0.9)]
    )
    call = ratchet_shared([(t, y) for y in ys])
    assert call.found and not call.called[0] and sum(call.called[1:]) == 4, call
    assert (
        call.climb_t[0] < RULES["ratchet_shared_replica_t"]
        and min(call.climb_t[1:]) > RULES["ratchet_shared_replica_t"]
    )
    assert all("climbs at the steps its group shares" in why for why, c in zip(call.reasons, call.called) if c)
    assert ratchet_shared([(t, y) for y in ys]) == call


def test_a_smooth_climb_the_group_shares_is_not_a_shared_staircase():
    # a smooth +10% climb three replicas share (AR(1) 2% φ 0.9, 1.5 days): its average had a step
    # beyond all of its smooth-curve null's simulations at that null's low φ (a cubic's residuals
    # read AR(1) φ 0.9 as 0.876), and every replica "climbed at the shared steps" beside a level,
    # so all three were called (session 11's rule: 1.2-2.2% of such replicas). Now the null's φ is
    # unbiased for the cubic and at its upper bound, and each replica must also climb beside its
    # own cubic at the steps of the OTHER replicas' average.
    from alloclab.stats import ratchet_shared

    t = sim.times(1.5 * 86400.0, 600.0)
    ys = sim.growing(np.random.default_rng(130), 3, t, share=0.10, phi=0.9, sd_share=0.02)
    call = ratchet_shared([(t, y) for y in ys])
    assert not call.found and not any(call.called), call
    assert min(call.climb_t) >= RULES["ratchet_shared_replica_t"]  # beside a level they all "climb at the steps"


def test_a_cycle_or_one_level_shift_the_group_shares_is_not_a_shared_staircase():
    # what a group shares without ratcheting: a daily cycle ±4% (one phase for the group; it gives
    # back) and one +8% level shift at the same moment (one step is not a staircase)
    from alloclab.stats import ratchet_shared

    t = sim.times(1.5 * 86400.0, 600.0)
    rng = np.random.default_rng(7)
    for sd, phase in ((0.01, 0.0), (0.02, 2.0), (0.02, 4.0)):
        ys = 100 * (1 + 0.04 * np.sin(2 * np.pi * t / 86400.0 + phase) + sim.ar1(rng, 5, len(t), 0.9, sd))
        assert not any(ratchet_shared([(t, y) for y in ys]).called)
    for _ in range(3):
        at = t[0] + rng.uniform(0.2, 0.8) * (t[-1] - t[0])
        ys = 100 * (1 + 0.08 * (t >= at)[None, :] + sim.ar1(rng, 5, len(t), 0.9, 0.02))
        call = ratchet_shared([(t, y) for y in ys])
        assert not any(call.called), call


def test_truncated_product_p_is_valid_under_the_null_and_ignores_a_p_of_one():
    from alloclab.stats.steps import truncated_product_p

    rng = np.random.default_rng(7)
    for m in (5, 3):
        p = truncated_product_p(rng.uniform(size=(20_000, m)), m, 0.05)
        for level in (0.005, 0.01, 0.05):
            # never above the level (its atom at p = 1 makes it conservative where few p's fall ≤ τ)
            assert np.mean(p <= level) < level + 3 * np.sqrt(level * (1 - level) / 20_000)
    # exact where the statistic is continuous: groups of 5 at 1%
    p = truncated_product_p(rng.uniform(size=(20_000, 5)), 5, 0.05)
    assert abs(np.mean(p <= 0.01) - 0.01) < 4 * np.sqrt(0.01 * 0.99 / 20_000)
    # three replicas at 99 simulations' smallest p (1/100) beside two without the shape (p = 1):
    # Fisher's method without the smallest gives 1.8%, the truncated product far below 1%
    strong = np.array([[0.01, 0.01, 0.01, 1.0, 1.0]])
    assert truncated_product_p(strong, 5, 0.05)[0] <= 0.001
    assert truncated_product_p(np.ones((1, 5)), 5, 0.05)[0] == 1.0


def test_the_levelling_curve_fits_a_climb_that_levels_off_where_the_cubic_leaves_a_bend():
    from alloclab.stats.steps import _smooth_basis, levelling_basis

    u = np.linspace(0.0, 1.0, 217)
    x = 0.15 * (1 - np.exp(-u / 0.12))  # levels off within a third of the window
    cubic = _smooth_basis(len(x))

    def rss(b: np.ndarray, y: np.ndarray) -> float:
        return float(np.sum((y - b @ np.linalg.lstsq(b, y, rcond=None)[0]) ** 2))

    assert rss(levelling_basis(x), x) < 1e-6 * rss(cubic, x)
    line = 0.1 * u  # a straight climb: the cubic already fits it
    assert rss(levelling_basis(line), line) < 1e-12


@pytest.mark.simulation
def test_a_daily_cycle_over_nine_days_lends_no_step_evidence_because_the_curve_holds_the_cycle(monkeypatch):
    # ±4% with the time of day, shared by five replicas in AR(1) 1% φ 0.9, 9 days at 15 minutes: beside
    # a curve without the day's harmonics the cycle's rises are sharper than an AR(1) null makes them,
    # and this group (seed 46) was found Ratcheting; with them in the curve and its null it is not
    from alloclab.stats import steps

    t = sim.times(9 * 86400.0, 900.0)
    rng = np.random.default_rng(46)
    ys = 100 * (
        1 + 0.04 * np.sin(2 * np.pi * t / 86400.0 + rng.uniform(0, 2 * np.pi)) + sim.ar1(rng, 5, len(t), 0.9, 0.01)
    )
    ev = [step_evidence(t, y) for y in ys]
    assert steps.cycle_of(ev[0]) is not None and steps.cycle_of(ev[0]).shape == (len(ev[0].x), 4)
    call = ratchet_group(ev)
    assert not any(call.called) and not any(call.own), call
    monkeypatch.setattr(steps, "cycle_of", lambda e: None)
    # without the harmonics the null read by Whittle's likelihood still holds this group (the cycle's
    # rises left in the residuals read as a slower wander, and the null wanders as far) ...
    assert ratchet_group(ev).p > RULES["ratchet_group_alpha"]
    # ... where a null of AR(1) alone at the residuals' lag-1 φ and SD (session 15's) did not
    monkeypatch.setattr(steps, "whittle_noise", lambda r: (steps.residual_phi(r), 0.0, float(np.std(r))))
    without = ratchet_group(ev)
    bar = RULES["ratchet_group_replica_p"]
    assert without.p <= RULES["ratchet_group_alpha"], without
    assert sum(q is not None and q <= bar for q in without.own_p) >= 2, without
    # ... and its replicas passed the replica bar by their p among all simulations; among the simulations
    # with the staircase's shape (none has it in that null) they do not, and none is called (session 19)
    assert not any(without.called) and all(q is None or q > bar for q in without.shaped_p), without


def test_the_cycle_enters_the_curve_only_over_a_day_or_more():
    from alloclab.stats.steps import cycle_of

    for days, want in ((0.9, False), (1.5, True)):
        t = sim.times(days * 86400.0, 600.0)
        e = step_evidence(t, sim.flat(np.random.default_rng(1), 1, t, phi=0.5, sd_share=0.01)[0])
        assert (cycle_of(e) is not None) is want, days


def test_a_slow_wander_sampled_with_measurement_noise_is_not_ratcheting(monkeypatch):
    # AR(1) φ 0.995 (2%) plus 0.5% white noise over 1.5 days: the step fit's residuals read lag-1 φ
    # 0.1–0.5 (the steps take the wander, the white part lowers lag-1), and prewhitened at that φ the
    # wander's runs were steps sharp enough for Ratcheting (these seeds); their lag-2 / lag-1 reads the
    # wander's φ, and at it they are not
    from alloclab.stats import steps

    t = sim.times(1.5 * 86400.0, 600.0)
    ys = [
        sim.jittered(np.random.default_rng(seed), 1, t, sd_share=0.02, phi=0.995, white_share=0.005)[0]
        for seed in (8, 52, 60, 98, 118)
    ]
    ev = [step_evidence(t, y) for y in ys]
    assert not any(e.ratcheting for e in ev), [e.fit.phi for e in ev]
    assert all(e.fit.phi >= 0.65 for e in ev), [e.fit.phi for e in ev]
    monkeypatch.setattr(steps, "step_noise", lambda r, **_: (steps.residual_phi(r), 0.0))
    assert all(step_evidence(t, y).ratcheting for y in ys)


def test_a_staircase_in_white_noise_keeps_its_steps_because_a_missed_steps_remains_are_not_a_wander(monkeypatch):
    # +8% in five steps, 1% white noise, 1.5 days: a small step the fit misses leaves lag-2 / lag-1
    # high in the residuals; read as a wander (no lag-2 floor) the fit prewhitens at φ ≈ 1 and these
    # staircases (seeds) lose Ratcheting; with the floor they keep it
    t = sim.times(1.5 * 86400.0, 600.0)
    ys = [
        sim.staircase(np.random.default_rng(seed), 1, t, climb_share=0.08, steps=5, sd_share=0.01, phi=0.0)[0]
        for seed in (3, 4, 5, 6)
    ]
    assert all(step_evidence(t, y).ratcheting for y in ys)
    monkeypatch.setitem(RULES, "ratchet_white_min_lag2_se", -1e9)
    assert not any(step_evidence(t, y).ratcheting for y in ys)


def test_the_step_noise_is_ar1_at_the_lag_one_phi_for_ar1_noise_alone_and_a_wander_plus_white_noise_else():
    from alloclab.stats.steps import residual_phi, step_noise

    rng = np.random.default_rng(5)
    for phi in (0.5, 0.9):
        rs = sim.ar1(rng, 200, 217, phi, 1.0)
        same = np.mean([step_noise(r) == (residual_phi(r), 0.0) for r in rs])
        assert same >= 0.9, (phi, same)
    jittered = sim.ar1(rng, 1, 217, 0.995, 1.0)[0] + 0.5 * rng.normal(size=217)
    phi, white = step_noise(jittered - jittered.mean())
    assert phi >= residual_phi(jittered - jittered.mean()) + RULES["ratchet_white_gap"], phi
    assert 0.05 < white < 0.8, white  # 0.5² of 1.25 is white: 0.2


def test_the_group_routes_null_simulates_the_white_part_of_the_noise():
    from alloclab.stats.steps import simulated_p

    def drawn(white):
        seen = []
        simulated_p(
            np.zeros(4000), 0.99, 1.0, lambda y: seen.append(y) or False, np.random.default_rng(2), 3, white=white
        )
        return seen

    mixed = drawn(0.25)[0]
    lag1 = float(np.corrcoef(mixed[1:], mixed[:-1])[0, 1])
    assert 0.70 < lag1 < 0.78, lag1  # 0.75 × 0.99: a quarter of the variance white
    assert abs(float(np.std(mixed)) - 1.0) < 0.15, np.std(mixed)
    # without a white part the draws are the AR(1) ones of before (documented figures reproduce)
    assert np.array_equal(np.stack(drawn(0.0)), sim.ar1(np.random.default_rng(2), 3, 4000, 0.99, 1.0))


def test_the_group_routes_null_reads_ar1_plus_white_noise_by_whittles_likelihood_at_its_marginal_sd(monkeypatch):
    # AR(1) 1% φ 0.9 plus 2% white noise, 3 days at 5 minutes (865 bins), the residuals of the cubic:
    # Whittle's likelihood reads the model (φ, white share 0.8, SD 2.24%); lag-2 / lag-1 (step_noise,
    # the null before session 17) reads φ ≥ 0.99 in a quarter of them, where a null at the residuals'
    # SD wanders too little within the window
    from alloclab.stats.steps import _smooth_basis, step_noise, whittle_noise

    rng = np.random.default_rng(11)
    basis = _smooth_basis(865)
    xs = sim.jittered(rng, 40, sim.times(3 * 86400.0, 300.0), level=1.0, sd_share=0.01, phi=0.9, white_share=0.02) - 1
    rs = [x - basis @ np.linalg.lstsq(basis, x, rcond=None)[0] for x in xs]
    read = np.array([whittle_noise(r) for r in rs])
    phi, white, sd = np.median(read, axis=0)
    assert abs(phi - 0.9) < 0.04 and abs(white - 0.8) < 0.08 and abs(sd - 0.0224) < 0.002, (phi, white, sd)
    assert np.max(read[:, 0]) < 0.99
    monkeypatch.setitem(RULES, "ratchet_white_min_lag2_se", -np.inf)  # session 16's null read no lag-2 floor
    assert np.mean([step_noise(r)[0] >= 0.99 for r in rs]) >= 0.15
    # AR(1) alone reads no white part; its φ and SD as they are
    pure = sim.ar1(rng, 40, 865, 0.5, 0.02)
    read = np.array([whittle_noise(r - basis @ np.linalg.lstsq(basis, r, rcond=None)[0]) for r in pure])
    phi, white, sd = np.median(read, axis=0)
    assert abs(phi - 0.5) < 0.05 and white < 0.05 and abs(sd - 0.02) < 0.002, (phi, white, sd)
