"""What other designs of the Ratcheting rule would reach: oracles that know the noise (the bound
and the ceiling) and the group-combining and smooth-curve explorations measured against the rule
of their session: --part ratchet-bound, ratchet-ceiling, ratchet-combine and ratchet-curve of
benchmarks/calibration.py.
"""

from __future__ import annotations

import time

import numpy as np

from alloclab.stats.rules import RULES
from alloclab.stats.steps import truncated_product_p
from tests import simulated_series as sim

from .common import POOLED_DESIGNS, grouped_rate, ratchet_cells, row, shared_daily_cycle
from .ratchet import one_step_shape


def _whitener(phi: float, sd: float):
    """Rows of a matrix (index = time) whitened for AR(1) noise of this φ and marginal SD: the noise
    becomes N(0, 1) (Prais–Winsten, divided by the innovations' SD)."""
    sig_e = sd * np.sqrt(1 - phi * phi)

    def white(m: np.ndarray) -> np.ndarray:
        out = m.copy()
        out[1:] = m[1:] - phi * m[:-1]
        out[0] = m[0] * np.sqrt(1 - phi * phi)
        return out / sig_e

    return white


def _white_staircase(rng: np.random.Generator, t: np.ndarray, white) -> np.ndarray:
    """One +8% five-step staircase's mean (sim.staircase's uneven steps at random times, no noise),
    whitened by `white` (_whitener)."""
    at = np.sort(rng.uniform(t[0], t[-1] * 0.9, 5))
    size = rng.dirichlet(np.ones(5)) * 0.08
    return white(np.sum(size[:, None] * (t[None, :] >= at[:, None]), axis=0)[:, None])[:, 0]


def ratchet_bound(rng: np.random.Generator, n: int) -> None:
    """What any test could reach on these staircases: the +8% five-step staircase (the generator's
    uneven steps at random times), each series under AR(1) noise at its TRUE φ and SD, against the
    null "a straight line (flat or a smooth climb) plus that noise", at a 1% false rate per series.
    Generalised least squares on the samples (no binning). Two oracles, averaged over n staircase
    draws: step times known, sizes unknown (a 5-df χ² test of the steps beside the line), and the
    whole staircase known (Neyman–Pearson, one-sided z): power Φ(δ − z₀.₉₉) with δ the staircase's
    length beyond the line in the noise's metric. No test that must find the step times can beat
    the second; the first is the ceiling of any fit that finds them exactly. A third oracle
    measures what SEARCHING for the times costs when nothing else is estimated (_scan_bound)."""
    from scipy.stats import chi2, ncx2, norm

    for label, window, dt in POOLED_DESIGNS:
        t = sim.times(window, dt)
        u = (t - t[0]) / (t[-1] - t[0])
        for sd, phi in ((0.02, 0.5), (0.02, 0.9), (0.015, 0.9), (0.01, 0.5), (0.01, 0.9)):
            white = _whitener(phi, sd)
            line = white(np.column_stack([np.ones(len(t)), u]))
            q, _ = np.linalg.qr(line)
            known_pos = known_all = 0.0
            draws = []
            for _ in range(n):
                mu = _white_staircase(rng, t, white)
                draws.append(mu)
                beyond = mu - q @ (q.T @ mu)
                d2 = float(beyond @ beyond)
                known_all += norm.sf(norm.isf(0.01) - np.sqrt(d2))
                known_pos += ncx2.sf(chi2.isf(0.01, 5), 5, d2)
            row(
                f"bound: +8% five-step staircases, AR(1) {sd:.1%} φ {phi}, {label}: detection at 1% false, "
                f"step times known / whole staircase known",
                f"{known_pos / n:.1%} / {known_all / n:.1%}",
                "stated (the ceiling)",
                n,
            )
            sharpest, five = _scan_bound(
                rng, white(np.tril(np.ones((len(t), len(t))))[:, 2 : len(t) - 1]), q, np.array(draws)
            )
            row(
                f"bound: +8% five-step staircases, AR(1) {sd:.1%} φ {phi}, {label}: detection at 1% false, "
                f"step times SEARCHED with φ, SD and the line known: the sharpest up-step / five forward-selected "
                f"up-steps",
                f"{sharpest:.1%} / {five:.1%}",
                "stated (the search's cost)",
                n,
            )


def _scan_bound(
    rng: np.random.Generator, steps: np.ndarray, line: np.ndarray, means: np.ndarray
) -> tuple[float, float]:
    """Power of two scans over every step position on whitened data (noise N(0, 1) after
    whitening at the true φ and SD), beside the line (`line`: its whitened columns,
    orthonormal), each at its 99th percentile under the null simulated with the same noise:
    the sharpest one-sided step z (the own route's statistic without estimating anything) and
    the χ² of five up-steps chosen forward (each the sharpest beside the line and the steps
    before it). `steps`: the whitened step columns (a step at each sample after the first);
    `means`: each staircase draw's whitened mean. (sharpest's power, five's power.)"""
    s = _unit_steps(steps, line)
    m = len(means)
    null = np.array([_scan_stats(s, line, rng.standard_normal(s.shape[0])) for _ in range(m)])
    bar = np.quantile(null, 0.99, axis=0)
    alt = np.array([_scan_stats(s, line, mu + rng.standard_normal(s.shape[0])) for mu in means])
    return float(np.mean(alt[:, 0] > bar[0])), float(np.mean(alt[:, 1] > bar[1]))


def _unit_steps(steps: np.ndarray, line: np.ndarray) -> np.ndarray:
    """The whitened step columns beside the line's (orthonormal) columns, each of length 1."""
    s = steps - line @ (line.T @ steps)
    return s / np.maximum(np.linalg.norm(s, axis=0), 1e-12)


def _scan_stats(s: np.ndarray, line: np.ndarray, e: np.ndarray) -> tuple[float, float]:
    """The two scans of _scan_bound on one whitened series e: the sharpest up-step's z beside the
    line, and the χ² of five up-steps chosen forward. `s`: _unit_steps."""
    e = e - line @ (line.T @ e)
    cols, total, first = s.copy(), 0.0, None
    for _ in range(5):
        z = cols.T @ e
        k = int(np.argmax(z))
        if z[k] <= 0:
            break
        first = z[k] if first is None else first
        total += z[k] ** 2
        c = cols[:, k].copy()
        e = e - z[k] * c  # the chosen step out of the data and of every other column
        cols -= np.outer(c, c @ cols)
        norms = np.linalg.norm(cols, axis=0)
        cols[:, norms < 1e-6] = 0
        cols /= np.maximum(norms, 1e-12)
    return (first or 0.0), total


# the group route's level up to session 14 (Fisher's method without the smallest p), at which
# --part ratchet-ceiling, ratchet-combine and ratchet-curve measured what other designs would buy
FISHER_ALPHA = 0.01


def ratchet_ceiling(rng: np.random.Generator, n: int) -> None:
    """What the group route's design could reach if nothing had to be estimated: each replica's p
    from the scans of _scan_bound (φ, SD and the smooth curve's basis known; p among 2,000 null
    series of the same whitened noise), beside a straight line and beside the cubic the rules use
    (RULES ratchet_smooth_degree: what keeps a climb that levels off from being called Ratcheting);
    the group's p Fisher's without the smallest, a replica Ratcheting at its own p ≤ 1% or at p ≤
    ratchet_group_replica_p when the group's p ≤ FISHER_ALPHA (status.ratchet_group's design up to
    session 14); and the same with the group's p by the truncated product (truncated_product_p) at
    ratchet_group_alpha (the design since session 15; no staircase-shape gate, p's down to 1/2,001). Per replica, groups of 5 and 3 made of
    consecutive staircase draws; n draws a cell."""
    alpha, replica_p = FISHER_ALPHA, RULES["ratchet_group_replica_p"]
    for label, window, dt in POOLED_DESIGNS:
        t = sim.times(window, dt)
        u = (t - t[0]) / (t[-1] - t[0])
        for sd, phi in ((0.02, 0.5), (0.02, 0.9), (0.01, 0.5)):
            white = _whitener(phi, sd)
            means = [_white_staircase(rng, t, white) for _ in range(n)]
            steps = white(np.tril(np.ones((len(t), len(t))))[:, 2 : len(t) - 1])
            curves = (
                ("a straight line", np.column_stack([np.ones(len(t)), u])),
                (
                    f"a polynomial of degree {int(RULES['ratchet_smooth_degree'])}",
                    np.polynomial.legendre.legvander(2 * u - 1, int(RULES["ratchet_smooth_degree"])),
                ),
            )
            for curve, basis in curves:
                line, _ = np.linalg.qr(white(basis))
                s = _unit_steps(steps, line)
                null = np.array([_scan_stats(s, line, rng.standard_normal(len(t))) for _ in range(2000)])
                alt = np.array([_scan_stats(s, line, mu + rng.standard_normal(len(t))) for mu in means])
                for k, stat in ((0, "the sharpest up-step"), (1, "five forward-selected up-steps")):
                    p = (1 + (null[None, :, k] >= alt[:, None, k]).sum(1)) / (len(null) + 1)
                    found, product = [], []
                    for m in (5, 3):
                        g = p[: (n // m) * m].reshape(-1, m)
                        group_p = fisher_without_smallest_p(g, m)
                        called = (g <= alpha) | ((group_p[:, None] <= alpha) & (g <= replica_p))
                        found.append(f"{called.mean():.1%} (groups {np.mean(group_p <= alpha):.0%})")
                        # the design since session 15: the truncated product at the rule's group level
                        group_p = truncated_product_p(g)
                        called = (g <= alpha) | ((group_p[:, None] <= RULES["ratchet_group_alpha"]) & (g <= replica_p))
                        product.append(
                            f"{called.mean():.1%} (groups {np.mean(group_p <= RULES['ratchet_group_alpha']):.0%})"
                        )
                    row(
                        f"ceiling: +8% five-step staircases, AR(1) {sd:.0%} φ {phi}, {label}, beside {curve}, "
                        f"{stat}, φ, SD and curve known: one series at 1% false / the group route's design up to session 14 "
                        f"(Fisher's ≤ 1%), per replica, groups of 5 / 3 / the design since session 15 (truncated product "
                        f"≤ {RULES['ratchet_group_alpha']:.2%}), groups of 5 / 3",
                        f"{np.mean(p <= alpha):.1%} / {found[0]} / {found[1]} / {product[0]} / {product[1]}",
                        "stated (the ceiling)",
                        n,
                    )


def fisher_without_smallest_p(ps: np.ndarray, m: int) -> np.ndarray:
    """Each row's p by Fisher's method on its m − 1 largest p's (session 14's status.ratchet_group group p)."""
    from scipy.stats import chi2

    return chi2.sf(-2 * np.log(np.sort(ps, axis=-1)[..., 1:]).sum(-1), 2 * (m - 1))


def _called(found: np.ndarray, own: np.ndarray, shape: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Per replica (groups × replicas), as status.ratchet_group calls them: Ratcheting on its own, or
    in a found group with the staircase's shape and its p ≤ ratchet_group_replica_p."""
    return own | (found[:, None] & shape & (p <= RULES["ratchet_group_replica_p"]))


def ratchet_combine(
    rng: np.random.Generator, n: int, designs=POOLED_DESIGNS, only: tuple[str, ...] | None = None
) -> None:
    """What combining a group's replicas otherwise would buy (staircases) and cost (climbs that level
    off, shifts, cycles), measured in session 14 against the rule of then: each replica's p beside
    its own cubic (steps.null_p: its sharpest step among simulations of its cubic + its noise,
    AR(1), since session 16 AR(1) + white, since session 17 fitted by Whittle's likelihood — the
    docs' figures are session 14's — that also have the staircase's shape) from 399 simulations instead of 99; then the group by Fisher's method (that rule's) or by
    the truncated product of the p's ≤ 0.05 (a replica without the shape costs nothing), each
    without the smallest p, at FISHER_ALPHA and at half of it; a found group's replicas
    called as the rule calls them (the shape and p ≤ ratchet_group_replica_p), or also, "relaxed",
    a replica with one up-step beyond the noise that climbs ≥ ratchet_min_climb_share without a
    release, at its ungated p ≤ ratchet_group_replica_p. The rule itself (ratchet_group, now the
    levelling curve and the truncated product) on the same groups. Groups of 5, and of 3 made of their first three replicas;
    per replica with grouped_rate's intervals; n groups a cell."""
    from alloclab.stats.steps import group_shape, null_p, ratchet_group, step_evidence

    sims, tau = 399, 0.05
    alpha, replica_p = FISHER_ALPHA, RULES["ratchet_group_replica_p"]

    def shifts(rng_, m, t):
        at = t[0] + rng_.uniform(0.1, 0.9, m) * (t[-1] - t[0])  # sim.level_shift's times are 0.2–0.8 and shared
        return 100 * (1 + 0.08 * (t[None, :] >= at[:, None]) + sim.ar1(rng_, m, len(t), 0.9, 0.02))

    cells = ratchet_cells(((0.02, 0.9), (0.02, 0.5), (0.01, 0.5)))
    cells += [
        ("flat AR(1) 2% φ 0.9", lambda r, m, t: sim.flat(r, m, t, phi=0.9, sd_share=0.02), "≤ 1%"),
        ("daily cycle ±4% shared by the group, any phase, AR(1) 2% φ 0.9", shared_daily_cycle(0.02), "≤ 1%"),
        ("one +8% shift, each replica at its own time, AR(1) 2% φ 0.9", shifts, "stated"),
    ]
    cells = [c for c in cells if only is None or c[0].startswith(only)]
    for label, window, dt in designs:
        t = sim.times(window, dt)
        for name, make, target in cells:
            started = time.monotonic()
            cols = []  # per replica: shape, own, gated p, relaxed shape, ungated p; the rule's call for 5 / 3
            for _ in range(n):
                ev = [step_evidence(t, y) for y in make(rng, 5, t)]
                rule5, rule3 = ratchet_group(ev), ratchet_group(ev[:3])
                for i, e in enumerate(ev):
                    shape = e.fit is not None and group_shape(e.fit)
                    relaxed = e.fit is not None and not shape and not e.ratcheting and one_step_shape(e.fit)
                    p = null_p(e.x, e.fit.sharp_t, rng, sims)[0] if shape and not e.ratcheting else 1.0
                    q = null_p(e.x, e.fit.sharp_t, rng, sims, gated=False)[0] if relaxed else 1.0
                    cols.append(
                        (
                            shape,
                            e.ratcheting,
                            p,
                            relaxed,
                            q,
                            rule5.own[i] or rule5.called[i],
                            i < 3 and (rule3.own[i] or rule3.called[i]),
                        )
                    )
            a = np.array(cols, dtype=float).reshape(n, 5, 7)
            for m in (5, 3):
                b = a[:, :m]
                shape, own, relaxed = b[..., 0] > 0, b[..., 1] > 0, b[..., 3] > 0
                p = np.where(own, 1 / (sims + 1), b[..., 2])
                fisher = fisher_without_smallest_p(p, m) <= alpha
                tpm = truncated_product_p(p, m, tau)
                strict = lambda found: _called(found, own, shape, p)
                loose = lambda found: strict(found) | (found[:, None] & relaxed & (b[..., 4] <= replica_p))
                said = [("the rule", b[..., 5 if m == 5 else 6] > 0), ("Fisher's at 399 simulations", strict(fisher))]
                for level in (alpha, alpha / 2):
                    said += [
                        (f"truncated product ≤ {level:.1%}", strict(tpm <= level)),
                        ("… relaxed", loose(tpm <= level)),
                    ]
                row(
                    f"combining a group, n = {m}, {name}, {label}: Ratcheting per replica by "
                    + " / ".join(k for k, _ in said),
                    "; ".join(grouped_rate(c.sum(1), m) for _, c in said)
                    + f"; staircase shape {shape.mean():.0%}, one up-step only {relaxed.mean():.0%}; {(time.monotonic() - started) / n:.1f} s a group",
                    target,
                    n * m,
                )


def ratchet_curve(
    rng: np.random.Generator, n: int, designs=POOLED_DESIGNS, only: tuple[str, ...] | None = None
) -> None:
    """Does a smooth curve that a climb levelling off fits (steps.levelling_basis) take away the false
    Ratcheting the truncated product added on such climbs (--part ratchet-combine), and at what
    cost in staircases found? Each replica with the staircase's shape gets its p beside the cubic
    (steps.null_p) and beside the levelling curve (steps.levelling_null_p), 399 simulations each; the
    group by Fisher's method (session 14's rule) and by the truncated product at half FISHER_ALPHA,
    without the smallest p; a found group's replicas called as the rule calls them. An exploration
    of a direction, not a rule: per replica, groups of 5 and of 3 (their first three), grouped
    intervals, n groups a cell."""
    from alloclab.stats.steps import group_shape, levelling_null_p, null_p, step_evidence

    sims, tau, alpha = 399, 0.05, FISHER_ALPHA
    cells = ratchet_cells(((0.02, 0.9), (0.01, 0.5)))
    cells = [c for c in cells if only is None or c[0].startswith(only)]
    for label, window, dt in designs:
        t = sim.times(window, dt)
        for name, make, target in cells:
            cols = []  # per replica: shape, own, p beside the cubic, p beside the levelling curve
            for _ in range(n):
                for e in (step_evidence(t, y) for y in make(rng, 5, t)):
                    shape = e.fit is not None and group_shape(e.fit) and not e.ratcheting
                    cols.append(
                        (
                            shape,
                            e.ratcheting,
                            null_p(e.x, e.fit.sharp_t, rng, sims)[0] if shape else 1.0,
                            levelling_null_p(e.x, e.fit, rng, sims).p if shape else 1.0,
                        )
                    )
            a = np.array(cols, dtype=float).reshape(n, 5, 4)
            for m in (5, 3):
                b = a[:, :m]
                shape, own = b[..., 0] > 0, b[..., 1] > 0
                said = []
                for col, curve in ((2, "the cubic"), (3, "the saturating curve")):
                    p = np.where(own, 1 / (sims + 1), b[..., col])
                    fisher = fisher_without_smallest_p(p, m) <= alpha
                    product = truncated_product_p(p, m, tau) <= alpha / 2
                    for how, found in (("Fisher's", fisher), (f"truncated product ≤ {alpha / 2:.1%}", product)):
                        said.append((f"{how} beside {curve}", _called(found, own, shape, p)))
                row(
                    f"smooth curve, n = {m}, {name}, {label}: Ratcheting per replica by "
                    + " / ".join(k for k, _ in said),
                    "; ".join(grouped_rate(c.sum(1), m) for _, c in said) + f"; own route alone {own.mean():.1%}",
                    target,
                    n * m,
                )
