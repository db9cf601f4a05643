"""Ratcheting ("Growing in steps") on simulated series: the own route (classify), the group route
(stats.steps.ratchet_group), the shared route (stats.ratchet_shared) and the staircase's shape:
--part staircases, staircase-reach, ratchet-climbs, ratchet-group, noise-shapes, ratchet-shared
and ratchet-shape of benchmarks/calibration.py.
"""

from __future__ import annotations

import time

import numpy as np

from alloclab.stats import classify
from alloclab.stats.rules import RULES
from tests import simulated_series as sim

from .common import (
    JITTERED,
    LEVELLING_OFF,
    POOLED_DESIGNS,
    STEPS,
    grouped_rate,
    jittered_maker,
    ratchet_cells,
    rate,
    row,
    share,
    shared_daily_cycle,
    staircase_maker,
    words,
)


def staircases(rng: np.random.Generator, n: int) -> None:
    """Ratcheting (stats.status.classify, both routes) at realistic noise: +8% in five uneven steps
    with AR(1) 1–2% at φ 0.5 / 0.9 per sample; and how often it is said of flat AR(1) (φ 0.5–0.99),
    flat two-scale noise (AR(1) 2% φ 0.9 + slow wander 3%, τ 1.7 d), a daily cycle ±4% (phase
    drawn per series, AR(1) 1% φ 0.9), a smooth +10% climb (AR(1) 2% φ 0.9: Growing, not
    Ratcheting), climbs that level off, and a slow wander with white measurement noise
    (JITTERED); last, staircases in near-white noise (φ 0 and 0.2), in the TorUtils designs. 95% Clopper–Pearson intervals."""

    def said(t, ys, *accepted):
        ws = words(t, ys)
        return rate(sum(w in accepted for w in ws), len(ws))

    for label, window, dt in POOLED_DESIGNS:
        t = sim.times(window, dt)
        for sd, phi in ((0.01, 0.5), (0.01, 0.9), (0.02, 0.5), (0.02, 0.9)):
            row(
                f"Ratcheting on +8% five-step staircases, AR(1) {sd:.0%} φ {phi}, {label}",
                said(t, sim.staircase(rng, n, t, climb_share=0.08, steps=5, sd_share=sd, phi=phi), STEPS),
                "≥ 80%",
                n,
            )
        for phi in (0.5, 0.9, 0.95, 0.99):
            row(
                f"Ratcheting on flat AR(1) 2% φ {phi}, {label}",
                said(t, sim.flat(rng, n, t, phi=phi, sd_share=0.02), STEPS),
                "≤ 1%",
                n,
            )
        row(
            f"Ratcheting on flat two-scale noise (AR(1) 2% φ 0.9 + slow wander 3%, τ 1.7 d), {label}",
            said(t, sim.two_scale(rng, n, t, fast_phi=0.9), STEPS),
            "≤ 1%",
            n,
        )
        row(
            f"Ratcheting on a daily cycle ±4% (any phase) with AR(1) 1% φ 0.9, {label}",
            said(t, sim.sinusoid(rng, n, t, amplitude_share=0.04, period_s=86400.0, sd_share=0.01, phi=0.9), STEPS),
            "≤ 1%",
            n,
        )
        ys = sim.growing(rng, n, t, share=0.10, phi=0.9, sd_share=0.02)
        ws = words(t, ys)
        row(
            f"Ratcheting on a smooth +10% climb, AR(1) 2% φ 0.9, {label} (Growing/Bloating)",
            f"{rate(ws.count(STEPS), n)} ({share(ws, 'Growing', 'Bloating'):.1%})",
            "≤ 1%",
            n,
        )
        for tau, sd, phi in LEVELLING_OFF:
            row(
                f"Ratcheting on a climb that levels off (+15%, τ {tau:.0%} of the window), AR(1) {sd:.0%} φ {phi}, {label}",
                said(t, sim.levelling_off(rng, n, t, tau_share=tau, sd_share=sd, phi=phi), STEPS),
                "≤ 1%",
                n,
            )
    # session 16's cells after every design's earlier ones, so that those draw as before
    for label, window, dt in POOLED_DESIGNS:
        t = sim.times(window, dt)
        for phi, sd, white in JITTERED:
            row(
                f"Ratcheting on a flat slow wander with measurement noise (AR(1) {sd:.0%} φ {phi} + white {white:.1%}), {label}",
                said(t, sim.jittered(rng, n, t, sd_share=sd, phi=phi, white_share=white), STEPS),
                "≤ 1%",
                n,
            )
        for sd, phi in ((0.01, 0.0), (0.015, 0.2)):  # what reading a wander in the residuals costs (steps.step_noise)
            row(
                f"Ratcheting on +8% five-step staircases in near-white noise, AR(1) {sd:.1%} φ {phi}, {label}",
                said(t, sim.staircase(rng, n, t, climb_share=0.08, steps=5, sd_share=sd, phi=phi), STEPS),
                "stated",
                n,
            )


def staircase_reach(rng: np.random.Generator, n: int) -> None:
    """What the Ratcheting rule reaches at 2% AR noise: the same five-step staircases with a taller
    climb (+8 / +16 / +24%), and at 1.5% noise, in the two TorUtils designs."""
    for label, window, dt in (("1.5 d @ 10 min", 1.5 * 86400, 600.0), ("9 d @ 15 min", 9 * 86400, 900.0)):
        t = sim.times(window, dt)
        for sd, phi in ((0.015, 0.5), (0.015, 0.9), (0.02, 0.5), (0.02, 0.9)):
            for climb in (0.08, 0.16, 0.24):
                if sd == 0.015 and climb != 0.08:
                    continue
                ws = words(t, sim.staircase(rng, n, t, climb_share=climb, steps=5, sd_share=sd, phi=phi))
                row(
                    f"Ratcheting on +{climb:.0%} five-step staircases, AR(1) {sd:.1%} φ {phi}, {label}",
                    rate(sum(w == STEPS for w in ws), n),
                    "stated (what is reachable)",
                    n,
                )


def ratchet_climbs(rng: np.random.Generator, n: int) -> None:
    """The own route (classify) on smooth +10% climbs (a line plus AR(1) noise: Growing, never
    Ratcheting) across the noise the TorUtils designs see — AR(1) 1% and 2% at φ 0.5 / 0.9 / 0.95 /
    0.98 per sample — over 1.5 d @ 10 min (217 samples) and 3 d @ 5 min (865), with the +8%
    five-step staircases at 1% beside them; `n` series a cell, 2n for the calibration's own cell
    (2%, φ 0.9) over 1.5 days. Also the step fit's median φ against the true one: the steps absorb
    the wander's largest excursions, so φ comes out low where the noise is slow against the window,
    and a step beside a straight line looks sharper than it is."""
    from alloclab.stats.steps import step_fit

    for label, window, dt in (("1.5 d @ 10 min", 1.5 * 86400, 600.0), ("3 d @ 5 min", 3 * 86400, 300.0)):
        t = sim.times(window, dt)
        for phi in (0.5, 0.9, 0.95, 0.98):
            for sd in (0.02, 0.01):
                k = 2 * n if (sd, phi) == (0.02, 0.9) and label.startswith("1.5") else n
                ys = sim.growing(rng, k, t, share=0.10, phi=phi, sd_share=sd)
                ws = words(t, ys)
                est = np.median([step_fit(t, y, float(np.median(y))).phi for y in ys[:200]])
                row(
                    f"own route, smooth +10% climb, AR(1) {sd:.0%} φ {phi}, {label}: Ratcheting (the step fit's median φ)",
                    f"{rate(ws.count(STEPS), k)} ({est:.3f})",
                    "≤ 1%",
                    k,
                )
        for phi in (0.5, 0.9):
            ws = words(t, sim.staircase(rng, n, t, climb_share=0.08, steps=5, sd_share=0.01, phi=phi))
            row(
                f"own route, +8% five-step staircases, AR(1) 1% φ {phi}, {label}: Ratcheting",
                rate(ws.count(STEPS), n),
                "≥ 80%",
                n,
            )


RATCHET_REPLICA_P = (0.1, 0.25, 0.5, 1.0)


RATCHET_GROUP_ALPHA = (0.001, 0.0025)  # group levels stricter than RULES ratchet_group_alpha, on the same groups (a
# level at or above the rule's is not printed: a group is simulated only where it can reach the rule's)


def ratchet_group_cal(
    rng: np.random.Generator,
    n: int,
    sizes: tuple[int, ...] = (5, 3),
    designs=POOLED_DESIGNS,
    only: tuple[str, ...] | None = None,
) -> None:
    """Ratcheting with the group route (stats.status.ratchet_group): groups of 3 and 5 replicas, each
    replica its own series (a staircase: its own step times and sizes). A replica's word is
    Ratcheting on its own evidence (classify's route) or on its group's. Detection on +8% five-step
    staircases at AR(1) 1–2%, φ 0.5 / 0.9; false Ratcheting on flat AR(1) 2% φ 0.5–0.99, flat
    two-scale noise, a daily cycle ±4% shared by the group (one phase a group, any hour; AR(1) 1% and
    2% φ 0.9), a smooth +10% climb shared by the group (AR(1) 2% φ 0.9: the session-9 prototype's
    failure), and the flat replicas of a group whose one replica is a staircase. `only`: the cells
    whose names start with these. Per replica, with grouped_rate's interval (a found group calls its replicas together); also the simulations a group cost."""
    from alloclab.stats.steps import ratchet_group, step_evidence

    cycle = shared_daily_cycle

    def lone(rng_, m, t):
        ys = sim.flat(rng_, m, t, phi=0.9, sd_share=0.02)
        ys[0] = sim.staircase(rng_, 1, t, climb_share=0.08, steps=5, sd_share=0.02, phi=0.9)[0]
        return ys

    stairs = ratchet_cells(((0.02, 0.5), (0.02, 0.9), (0.01, 0.5), (0.01, 0.9)), climbs=False)
    nulls = [
        (
            f"flat AR(1) 2% φ {phi}",
            (lambda phi_: lambda r, m, t: sim.flat(r, m, t, phi=phi_, sd_share=0.02))(phi),
            "≤ 1%",
        )
        for phi in (0.5, 0.9, 0.95, 0.99)
    ]
    nulls += [
        (
            "flat two-scale (AR(1) 2% φ 0.9 + slow wander 3%, τ 1.7 d)",
            lambda r, m, t: sim.two_scale(r, m, t, fast_phi=0.9),
            "≤ 1%",
        ),
        ("daily cycle ±4% shared by the group, any phase, AR(1) 1% φ 0.9", cycle(0.01), "≤ 1%"),
        ("daily cycle ±4% shared by the group, any phase, AR(1) 2% φ 0.9", cycle(0.02), "≤ 1%"),
        (
            "smooth +10% climb shared by the group, AR(1) 2% φ 0.9",
            lambda r, m, t: sim.growing(r, m, t, share=0.10, phi=0.9, sd_share=0.02),
            "≤ 1%",
        ),
        ("one +8% staircase (2% φ 0.9) among flat AR(1) 2% φ 0.9 replicas: the flat ones", lone, "≤ 1%"),
    ]
    nulls += [
        (
            f"a climb that levels off shared by the group (+15%, τ {tau:.0%} of the window), AR(1) {sd:.0%} φ {phi}",
            (
                lambda tau_, sd_, phi_: (
                    lambda r, m, t: sim.levelling_off(r, m, t, tau_share=tau_, sd_share=sd_, phi=phi_)
                )
            )(tau, sd, phi),
            "≤ 1%",
        )
        for tau, sd, phi in LEVELLING_OFF[:2]
    ]
    nulls += [
        (
            f"flat slow wander with measurement noise (AR(1) {sd:.0%} φ {phi} + white {white:.1%})",
            jittered_maker(phi, sd, white),
            "≤ 1%",
        )
        for phi, sd, white in JITTERED
    ]
    # last, so that the cells above draw as before: what the step fit's lag-2 floor keeps (steps.step_noise)
    near_white = [
        (f"+8% five-step staircases in near-white noise, AR(1) {sd:.1%} φ {phi}", staircase_maker(sd, phi), "stated")
        for sd, phi in ((0.01, 0.0), (0.015, 0.2))
    ]
    # last (session 18): groups where most replicas step and the rest do not — what the per-replica bar
    # (RULES ratchet_group_replica_p) guards once the group is found; the replicas counted are the rest.
    # Last, so that a run of one design (every documented one) draws each earlier cell as before; over
    # several designs one rng runs through them all, so the later designs' rows shift (as near_white's did)
    mixed = [
        (
            f"{others}: +8% five-step staircases (2% φ 0.9) in ⌈m/2⌉ replicas, {kind} in the others: the others",
            (
                lambda make_: (
                    lambda r, m, t: np.vstack([staircase_maker(0.02, 0.9)(r, m - m // 2, t), make_(r, m // 2, t)])
                )
            )(make),
            target,
        )
        for others, kind, make, target in (
            ("mixed, flat", "flat AR(1) 2% φ 0.9", lambda r, k, t: sim.flat(r, k, t, phi=0.9, sd_share=0.02), "≤ 1%"),
            (
                "mixed, smooth",
                "a smooth +10% climb (AR(1) 2% φ 0.9)",
                lambda r, k, t: sim.growing(r, k, t, share=0.10, phi=0.9, sd_share=0.02),
                "stated (Growing is right)",
            ),
        )
    ]
    mixed_makers = {make for _, make, _ in mixed}
    cells = [c for c in stairs + nulls + near_white + mixed if only is None or c[0].startswith(only)]
    for label, window, dt in designs:
        t = sim.times(window, dt)
        for name, make, target in cells:
            for m in sizes:
                said, own, total, sims, by_all = [], 0, 0, 0, 0
                alt = dict.fromkeys(RATCHET_REPLICA_P, 0)
                stricter = dict.fromkeys((a for a in RATCHET_GROUP_ALPHA if a < RULES["ratchet_group_alpha"]), 0)
                started = time.monotonic()
                for _ in range(n):
                    ys = make(rng, m, t)
                    g = ratchet_group([step_evidence(t, y) for y in ys])
                    keep = range(1, m) if make is lone else range(m - m // 2, m) if make in mixed_makers else range(m)
                    said.append(sum(g.own[i] or g.called[i] for i in keep))
                    own += sum(g.own[i] for i in keep)
                    total += len(keep)
                    sims += g.simulations
                    found = g.p is not None and g.p <= RULES["ratchet_group_alpha"]
                    for q in alt:  # the same groups under another per-replica bar (RULES ratchet_group_replica_p)
                        alt[q] += sum(
                            g.own[i] or (found and g.shaped_p[i] is not None and g.shaped_p[i] <= q) for i in keep
                        )
                    # ... and called by the replica's p among ALL its simulations, as until session 19 (its
                    # p among the shaped ones is never below it, so these calls hold the rule's)
                    by_all += sum(
                        g.own[i]
                        or (found and g.own_p[i] is not None and g.own_p[i] <= RULES["ratchet_group_replica_p"])
                        for i in keep
                    )
                    for a in stricter:  # ... and under a group level stricter than RULES ratchet_group_alpha (called
                        # already asks the rule's level, so only a lower one can be read from it)
                        stricter[a] += sum(g.own[i] or g.called[i] and g.p <= a for i in keep)
                row(
                    f"group route, n = {m}, {name}, {label}: Ratcheting (own route alone; replica p ≤ "
                    f"{' / '.join(f'{q:g}' for q in alt)} among the simulations with the shape; group p ≤ "
                    f"{' / '.join(f'{a:.2%}' for a in stricter) or '–'}; called by the p among all simulations, until session 19)",
                    f"{grouped_rate(said, len(keep))} ({own / total:.1%}; {' / '.join(f'{k / total:.1%}' for k in alt.values())}; "
                    f"{' / '.join(f'{k / total:.1%}' for k in stricter.values()) or '–'}; {by_all / total:.1%}); "
                    f"{sims / n:.0f} simulated fits and {(time.monotonic() - started) / n:.2f} s a group",
                    target,
                    total,
                )


def noise_shapes(
    rng: np.random.Generator,
    n: int,
    sizes: tuple[int, ...] = (5, 3),
    designs=POOLED_DESIGNS,
    only: tuple[str, ...] | None = None,
) -> None:
    """Flat series whose noise is not the one AR(1) the rules' nulls simulate (session 16): AR(1)
    with heavy-tailed innovations (t, 3 and 2.5 degrees of freedom), two short AR(1) scales, and a
    slow wander read with white measurement noise (the case that needed steps.step_noise).
    Groups of 5 and 3, each replica its own series: per replica the word classify gives (Ratcheting
    on its own evidence, Growing/Bloating) and Ratcheting with the group route (status.ratchet_group)."""
    from alloclab.stats.steps import ratchet_group, step_evidence

    cells = [
        (
            f"AR(1) {sd:.0%} φ {phi}, t{df:g} innovations",
            (lambda sd_, phi_, df_: lambda r, m, t: 100 * (1 + sim.ar1(r, m, len(t), phi_, sd_, df=df_)))(sd, phi, df),
        )
        for df in (3.0, 2.5)
        for sd, phi in ((0.02, 0.9), (0.02, 0.5), (0.01, 0.9))
    ]
    cells += [
        (
            "AR(1) 1.5% φ 0.5 + AR(1) 1.5% φ 0.98",
            lambda r, m, t: 100 * (1 + sim.ar1(r, m, len(t), 0.5, 0.015) + sim.ar1(r, m, len(t), 0.98, 0.015)),
        ),
        ("AR(1) 1% φ 0.9 + white 2%", jittered_maker(0.9, 0.01, 0.02)),
        ("AR(1) 1.5% φ 0.97 + white 1%", jittered_maker(0.97, 0.015, 0.01)),
        ("AR(1) 2% φ 0.99 + white 0.5%", jittered_maker(0.99, 0.02, 0.005)),
    ]
    cells = [c for c in cells if only is None or c[0].startswith(only)]
    for label, window, dt in designs:
        t = sim.times(window, dt)
        for name, make in cells:
            for m in sizes:
                said, own, growing = [], 0, 0
                for _ in range(n):
                    ys = make(rng, m, t)
                    calls = [classify(t, y) for y in ys]
                    g = ratchet_group(
                        [c.ratchet if c.ratchet is not None else step_evidence(t, y) for c, y in zip(calls, ys)]
                    )
                    said.append(sum(a or b for a, b in zip(g.own, g.called)))
                    own += sum(g.own)
                    growing += sum(c.word in ("Growing", "Bloating") and c.shape is None for c in calls)
                row(
                    f"flat {name}, n = {m}, {label}: Ratcheting (own route alone; Growing/Bloating)",
                    f"{grouped_rate(said, m)} ({own / (n * m):.1%}; {rate(growing, n * m)})",
                    "≤ 1%",
                    n * m,
                )


def ratchet_shared_cal(
    rng: np.random.Generator,
    n: int,
    sizes: tuple[int, ...] = (5, 3),
    designs=POOLED_DESIGNS,
    only: tuple[str, ...] | None = None,
) -> None:
    """Ratcheting on steps a group shares in time (stats.ratchet_shared) beside each replica's own
    route (steps.ratchet_in_noise): groups of 5 and 3. Detection per replica (own or shared) on +8%
    five-step staircases with step times shared by the group at AR(1) 1–2%, φ 0.5 / 0.9, and on
    staircases with their own step times (the shared route may only add); false Ratcheting added by
    the shared route on flat AR(1) 2% φ 0.5–0.99, two-scale noise (own wander, and a slow wander
    COMMON to the group), a daily cycle the group shares, a smooth climb it shares, one shared step,
    a shared step up and down (a release), the flat replica of a group whose others share a
    staircase (and the flat ones beside one staircase), and slow wanders read with white noise
    (JITTERED, session 16). `only`: the cells whose names start with
    these. Per replica, with grouped_rate's intervals; also the groups the shared test passed and the cost."""
    from alloclab.stats.ratchet_shared import ratchet_shared
    from alloclab.stats.steps import step_evidence

    def own_word(t, y):
        return step_evidence(t, y).ratcheting

    cycle = shared_daily_cycle

    def wander(rng_, m, t):  # own AR(1) 2% φ 0.9 + a slow 3% wander (τ 1.7 d) COMMON to the group
        slow_phi = float(np.exp(-float(np.median(np.diff(t))) / (1.7 * 86400)))
        return 100 * (1 + sim.ar1(rng_, m, len(t), 0.9, 0.02) + sim.ar1(rng_, 1, len(t), slow_phi, 0.03))

    def one_step(rng_, m, t):  # one +8% level shift at the same time for the group
        at = t[0] + rng_.uniform(0.2, 0.8) * (t[-1] - t[0])
        return 100 * (1 + 0.08 * (t >= at)[None, :] + sim.ar1(rng_, m, len(t), 0.9, 0.02))

    def up_down(rng_, m, t):  # +8% up, then back down: a release the group shares
        a, b = np.sort(t[0] + rng_.uniform(0.1, 0.9, 2) * (t[-1] - t[0]))
        return 100 * (1 + 0.08 * ((t >= a) & (t < b))[None, :] + sim.ar1(rng_, m, len(t), 0.9, 0.02))

    def flat_among_shared(rng_, m, t):
        ys = sim.shared_staircase(rng_, m, t, sd_share=0.02, phi=0.9)
        ys[0] = sim.flat(rng_, 1, t, phi=0.9, sd_share=0.02)[0]
        return ys

    def lone(rng_, m, t):
        ys = sim.flat(rng_, m, t, phi=0.9, sd_share=0.02)
        ys[0] = sim.staircase(rng_, 1, t, climb_share=0.08, steps=5, sd_share=0.02, phi=0.9)[0]
        return ys

    first, rest = (0,), None  # which replicas a cell counts (None: all)
    stairs = [
        (
            f"+8% five-step staircases, step times shared by the group, AR(1) {sd:.0%} φ {phi}",
            (lambda sd_, phi_: lambda r, m, t: sim.shared_staircase(r, m, t, sd_share=sd_, phi=phi_))(sd, phi),
            "≥ 80%",
            rest,
        )
        for sd, phi in ((0.02, 0.5), (0.02, 0.9), (0.01, 0.5), (0.01, 0.9))
    ]
    stairs += [
        (
            "+8% five-step staircases, each replica its own step times, AR(1) 2% φ 0.9",
            lambda r, m, t: sim.staircase(r, m, t, climb_share=0.08, steps=5, sd_share=0.02, phi=0.9),
            "not worse",
            rest,
        )
    ]
    nulls = [
        (
            f"flat AR(1) 2% φ {phi}",
            (lambda phi_: lambda r, m, t: sim.flat(r, m, t, phi=phi_, sd_share=0.02))(phi),
            "≤ 1%",
            rest,
        )
        for phi in (0.5, 0.9, 0.95, 0.99)
    ]
    nulls += [
        (
            "flat two-scale (AR(1) 2% φ 0.9 + slow wander 3%, τ 1.7 d, each its own)",
            lambda r, m, t: sim.two_scale(r, m, t, fast_phi=0.9),
            "≤ 1%",
            rest,
        ),
        (
            "shared slow wander (AR(1) 2% φ 0.9 own + slow wander 3%, τ 1.7 d, common to the group)",
            wander,
            "≤ 1%",
            rest,
        ),
        ("daily cycle ±4% shared by the group, any phase, AR(1) 1% φ 0.9", cycle(0.01), "≤ 1%", rest),
        ("daily cycle ±4% shared by the group, any phase, AR(1) 2% φ 0.9", cycle(0.02), "≤ 1%", rest),
        (
            "smooth +10% climb shared by the group, AR(1) 2% φ 0.9",
            lambda r, m, t: sim.growing(r, m, t, share=0.10, phi=0.9, sd_share=0.02),
            "≤ 1%",
            rest,
        ),
        (
            "shared +10% climb levelling off (τ 15% of the window), AR(1) 2% φ 0.9",
            lambda r, m, t: sim.levelling_off(r, m, t, rise_share=0.10, tau_share=0.15, sd_share=0.02, phi=0.9),
            "≤ 1%",
            rest,
        ),
        (
            "shared +10% climb levelling off (τ 30% of the window), AR(1) 2% φ 0.9",
            lambda r, m, t: sim.levelling_off(r, m, t, rise_share=0.10, tau_share=0.30, sd_share=0.02, phi=0.9),
            "≤ 1%",
            rest,
        ),
        ("one shared +8% step, AR(1) 2% φ 0.9", one_step, "≤ 1%", rest),
        ("shared +8% step up and down again, AR(1) 2% φ 0.9", up_down, "≤ 1%", rest),
        (
            "one flat AR(1) 2% φ 0.9 replica among replicas sharing a +8% staircase (2% φ 0.9): the flat one",
            flat_among_shared,
            "≤ 1%",
            first,
        ),
        ("one +8% staircase (2% φ 0.9) among flat AR(1) 2% φ 0.9 replicas: the flat ones", lone, "≤ 1%", None),
    ]
    nulls += [
        (
            f"flat slow wander with measurement noise (AR(1) {sd:.0%} φ {phi} + white {white:.1%}, each its own)",
            jittered_maker(phi, sd, white),
            "≤ 1%",
            rest,
        )
        for phi, sd, white in JITTERED
    ]
    cells = [c for c in stairs + nulls if only is None or c[0].startswith(only)]
    for label, window, dt in designs:
        t = sim.times(window, dt)
        for name, make, target, counted in cells:
            for m in sizes:
                said, added, own, total, sims, passed = [], [], 0, 0, 0, 0
                started = time.monotonic()
                for _ in range(n):
                    ys = make(rng, m, t)
                    g = ratchet_shared([(t, y) for y in ys])
                    keep = counted if counted is not None else (range(1, m) if make is lone else range(m))
                    mine = [own_word(t, ys[i]) for i in keep]
                    said.append(sum(o or g.called[i] for o, i in zip(mine, keep)))
                    own += sum(mine)
                    added.append(sum(g.called[i] and not o for o, i in zip(mine, keep)))
                    total += len(keep)
                    sims += g.simulations
                    passed += g.found
                row(
                    f"shared route, n = {m}, {name}, {label}: Ratcheting, own or shared (own route alone; added by the shared route)",
                    f"{grouped_rate(said, len(keep))} ({own / total:.1%}; {grouped_rate(added, len(keep))}); groups passing the shared test {passed}/{n}; "
                    f"{sims / n:.0f} simulated fits and {(time.monotonic() - started) / n:.2f} s a group",
                    target,
                    total,
                )


def one_step_shape(fit) -> bool:
    """The group route's staircase shape (steps.group_shape) with one up-step enough: what a call
    on one visible step would ask of a replica (--part ratchet-combine's "relaxed" calls, ratchet-shape)."""
    from alloclab.stats.steps import group_shape

    return group_shape(fit, min_steps=1)


def ratchet_shape(rng: np.random.Generator, n: int) -> None:
    """How many replicas show the staircase's shape on their own step fit (steps.group_shape: ≥ 2
    up-steps beyond the noise climbing ≥ 2% together, no release as sharp as the own bar): a rule
    that calls a replica Ratcheting only with that shape (both routes: the own route's shape is the
    stricter) finds at most this share, whatever its group's evidence. n series a cell, +8% five-step
    staircases at AR(1) 1–2%, and flat and smoothly climbing series beside them. Beside it the share
    with one up-step enough (one_step_shape): what a call on one visible step would let through, of
    staircases and of flat series (session 19)."""
    from alloclab.stats.steps import group_shape, step_evidence

    cells = [
        (f"+8% five-step staircases, AR(1) {sd:.0%} φ {phi}", staircase_maker(sd, phi))
        for sd, phi in ((0.02, 0.5), (0.02, 0.9), (0.01, 0.5), (0.01, 0.9))
    ]
    cells += [
        ("flat AR(1) 2% φ 0.9", lambda r, k, t: sim.flat(r, k, t, phi=0.9, sd_share=0.02)),
        ("smooth +10% climb, AR(1) 2% φ 0.9", lambda r, k, t: sim.growing(r, k, t, share=0.10, phi=0.9, sd_share=0.02)),
    ]
    # session 19's flat cells, drawn after every earlier row so that those keep their draws
    later = [
        ("flat AR(1) 2% φ 0.5", lambda r, k, t: sim.flat(r, k, t, phi=0.5, sd_share=0.02)),
        ("flat AR(1) 1% φ 0.9", lambda r, k, t: sim.flat(r, k, t, phi=0.9, sd_share=0.01)),
    ]
    for batch in (cells, later):
        for label, window, dt in POOLED_DESIGNS:
            t = sim.times(window, dt)
            for name, make in batch:
                fits = [step_evidence(t, y).fit for y in make(rng, n, t)]
                shaped = sum(f is not None and group_shape(f) for f in fits)
                one = sum(f is None or int((f.sizes > 0).sum()) < RULES["ratchet_min_steps"] for f in fits)
                single = sum(f is not None and one_step_shape(f) for f in fits)
                row(
                    f"the staircase's shape (steps.group_shape) on {name}, {label} (fewer than 2 up-steps beyond the noise) "
                    f"/ one up-step enough (one_step_shape)",
                    f"{rate(shaped, n)} ({rate(one, n)}) / {rate(single, n)}",
                    "stated (a bound on Ratcheting found)",
                    n,
                )
