"""stats.growth_pool / pooled: a replica's growth interval narrowed or widened by its group's spread."""

import numpy as np

from alloclab.stats import RULES, growth, growth_pool, pooled
from tests import simulated_series as sim

T = sim.times(3 * 86400.0, 1800.0)  # 3 days every 30 min: the coarse scales apply, and it is quick


def _group(ys):
    gs = [growth(T, y) for y in ys]
    return gs, growth_pool([g.change_share for g in gs], [g.window_s for g in gs])


def test_replicas_that_agree_give_back_the_power_the_coarse_scales_took():
    rng = np.random.default_rng(29)
    gs, pool = _group(sim.growing(rng, 5, T, share=0.10, phi=0.8, sd_share=0.02))
    ps = [pooled(g, pool, key=i) for i, g in enumerate(gs)]
    assert pool is not None and pool.n == 5
    assert all(p.change_hi - p.change_lo <= g.change_hi - g.change_lo + 1e-9 for p, g in zip(ps, gs))
    assert sum(p.change_lo > 0 for p in ps) > sum(g.change_lo > 0 for g in gs)
    assert all(bool(p.pooled) == (p is not g) for p, g in zip(ps, gs))


def test_the_pooled_interval_is_never_narrower_than_the_finest_scale_bound():
    rng = np.random.default_rng(30)
    gs, pool = _group(sim.flat(rng, 5, T, phi=0.8, sd_share=0.02))
    for i, g in enumerate(gs):
        p = pooled(g, pool, key=i)
        assert (p.change_hi - p.change_mb) >= 1.959 * g.se_fine - 1e-9


def test_a_lone_grower_keeps_its_own_interval():
    rng = np.random.default_rng(31)
    ys = sim.flat(rng, 4, T, phi=0.8, sd_share=0.02)
    ys[0] *= 1.4  # a level far from the others' does not matter: shares
    ys[1] += 30.0 * (T - T[0]) / (T[-1] - T[0])
    gs, pool = _group(ys)
    assert pooled(gs[1], pool, key=1) == pooled(
        gs[1], None, key=1
    )  # the group scatters more than its own interval allows


def _lone_two_scale(seed):
    """One flat two-scale series (AR(1) 2% φ 0.9 + slow wander 3%, τ 1.7 d) over 3 days."""
    y = sim.two_scale(np.random.default_rng(seed), 1, T)[0]
    return y, growth(T, y)


def test_a_replica_alone_has_the_slow_part_of_its_interval_widened():
    """Seed 385: the wander rose 6.9% and the series' own interval (a coarse scale set it, 1.3×
    the finest scale's) excludes 0 — Growing with no peers to widen it (session 9: pooled(g,
    None) was g). The variance the coarse scale adds now counts RULES growth_slow_widen² times."""
    from alloclab.stats import classify

    y, g = _lone_two_scale(385)
    assert g.change_lo > 0 and g.change_share > 0.05 and classify(T, y, growth=g).word == "Growing"
    p = pooled(g, None, key=0)
    own, fine, k = g.change_hi - g.change_mb, 1.959964 * g.se_fine, RULES["growth_slow_widen"]
    assert abs((p.change_hi - p.change_mb) - np.sqrt(fine**2 + k * k * (own**2 - fine**2))) < 1e-6 * g.level_mb
    assert p.change_lo < 0 < p.change_hi and "widened" in p.pooled and p.change_mb == g.change_mb
    assert classify(T, y, growth=p).word != "Growing"
    assert pooled(g, None, key=0, slow_widen=1.0) is g


def test_a_replica_over_an_unlike_window_is_treated_as_alone():
    y, g = _lone_two_scale(385)
    pool = growth_pool([0.01, -0.02, 0.03], [9 * 86400.0] * 3)  # the group ran 9 days, this one 3
    assert pool is not None and pooled(g, pool, key=0) == pooled(g, None, key=0) != g


def test_an_interval_the_finest_scale_set_is_not_widened():
    """Seed 254: no coarse scale set the interval (it is the finest scale's AR(1) bound), so there
    is no slow part to widen — a wander this smooth stays beyond one series' reach (stated)."""
    y, g = _lone_two_scale(254)
    assert abs((g.change_hi - g.change_mb) - 1.959964 * g.se_fine) < 1e-6 * g.level_mb
    assert pooled(g, None, key=0) is g


def test_a_pool_needs_three_replicas_over_alike_windows():
    assert growth_pool([0.01, 0.02], [86400.0, 86400.0]) is None
    assert growth_pool([0.01, 0.02, 0.03], [86400.0, 86400.0, 3 * 86400.0]) is None
    p = growth_pool([0.01, 0.02, 0.03, 0.5], [86400.0, 86400.0, 86400.0, 9 * 86400.0])
    assert p is not None and p.n == 3 and abs(p.share_sd - 0.01) < 1e-12


def test_a_slow_wander_its_own_interval_missed_is_widened_to_its_peers_spread():
    """Flat two-scale noise (fast AR(1) 2% + slow wander 3%, τ 1.7 d): replica 2 rose 7.7% and its
    own (coarse-scale) interval excludes 0 — Growing on its own — while its four peers' changes
    scatter 2–4× wider; the old pooled() only narrowed, so it stayed Growing."""
    from alloclab.stats import classify

    rng = np.random.default_rng(3)
    ys = sim.two_scale(rng, 5, T)
    gs, pool = _group(ys)
    g = gs[2]
    assert g.change_lo > 0 and g.change_share > 0.05 and classify(T, ys[2], growth=g).word == "Growing"
    p = pooled(g, pool, key=2)
    assert p.change_lo < 0 < p.change_hi and "widened" in p.pooled
    assert classify(T, ys[2], growth=p).word != "Growing"
    sd, k = pool.others_sd(2)
    assert k == 4 and abs((p.change_hi - p.change_mb) - RULES["growth_pool_widen"] * sd * g.level_mb) < 1e-9


def test_peers_exclude_the_replica_asking():
    p = growth_pool([0.0, 0.01, -0.01, 0.5], [86400.0] * 4, ["a", "b", "c", "d"])
    assert p.others_sd("d") == (0.01, 3)  # a lone grower is not widened by its own growth
    sd, k = p.others_sd("a")
    assert k == 3 and sd > 0.2
    assert p.others_sd("e")[1] == 4  # not a member: every member is a peer


def test_a_non_member_with_a_members_share_keeps_every_member_as_a_peer():
    """The replica asking is found by its key, not its share: "x" (an excluded replica, or one whose
    window is outside the pool's) changed +50% as member "d" did; the old lookup by value left
    "d" out of x's peers (3, not 4) and widened x by the flat three's spread only."""
    p = growth_pool([0.0, 0.01, -0.01, 0.5, 0.5], [86400.0] * 4 + [9 * 86400.0], ["a", "b", "c", "d", "x"])
    assert p.keys == ("a", "b", "c", "d")
    assert p.others_sd("x") == (p.share_sd, 4)
    assert p.others_sd("d") == (0.01, 3)


def _first_pass(ys):
    from alloclab.analysis.load import Segment, Series
    from alloclab.analysis.replica import replica_stats_steady

    firsts = []
    for k, y in enumerate(ys):
        nan = np.full(len(T), np.nan)
        t = 1_700_000_000 + T
        s = Series(
            k,
            f"r{k}",
            "g",
            True,
            t,
            y,
            np.array(["load"] * len(T), dtype=object),
            nan,
            nan,
            np.zeros(len(T)),
            nan,
            [Segment(float(t[0]), float(t[-1]), "g", "whole run")],
        )
        firsts.append(replica_stats_steady(s))
    return firsts


def test_a_replica_whose_group_cannot_pool_is_decided_on_the_widened_interval():
    """analysis' second pass with no pool (a group of 1 or 2, unlike windows): session 9 kept the
    first pass's word (Growing); the widened interval is not above 0, and the reason says why."""
    from alloclab.analysis.replica import repooled

    ((r, steady),) = _first_pass([_lone_two_scale(385)[0]])
    assert r.status == "Growing"
    again = repooled(r, steady, None)
    assert again.status != "Growing" and again.change_lo < 0 < again.change_hi
    assert "cannot be told from that wander" in again.status_reason


def test_a_widened_replica_says_why_it_is_not_growing():
    """The replica of the widened test above through analysis' second pass: its word is not
    Growing and its reason names the peers' spread and what it cannot tell."""
    from alloclab.analysis.replica import repooled

    firsts = _first_pass(sim.two_scale(np.random.default_rng(3), 5, T))
    pool = growth_pool(
        [r.change_share for r, _ in firsts], [r.window_h * 3600 for r, _ in firsts], [r.name for r, _ in firsts]
    )
    r, steady = firsts[2]
    assert r.status == "Growing"
    again = repooled(r, steady, pool)
    assert again.status != "Growing" and "cannot be told from that wander" in again.status_reason
    assert again.change_lo < 0 < again.change_hi and again is not r and r.status == "Growing"
    # the change and its (widened) interval are said once, whatever the word
    assert again.status_reason.count("changed ") == 1, again.status_reason
    assert f"(95% interval {again.change_lo:+.1f} to {again.change_hi:+.1f} MB)" in again.status_reason, (
        again.status_reason
    )
