"""Ratcheting on steps a group's replicas SHARE in time (the same load peak, DoS wave or consensus
burst lifts every relay of a host at the same sample): the positions are searched once, on the
average of the replicas' relative series, whose noise falls like 1/√n; then each replica is
Ratcheting only where its OWN series climbs at those times, and beside its own smooth curve at
the times the others step (a flat replica is never called because its neighbours step, nor every
replica of a group whose shared smooth climb looked like steps). Beside steps.ratchet_group (each replica its own step times).
Figures: docs/lab/calibration.md, "Steps a group shares"; thresholds RULES ratchet_shared_*."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np

from .rules import RULES
from .steps import (
    StepFit,
    _curve_phi,
    _sharp_bar,
    _smooth_basis,
    _step_scan,
    group_shape,
    null_p,
    quasi_difference,
    residual_phi,
    robust_sd,
    simulated_p,
    step_fit_x,
)


@dataclass(frozen=True)
class SharedRatchet:
    """A group's shared steps and, per replica, whether its own series climbs at them."""

    called: tuple[bool, ...]  # per replica: Ratcheting on the steps its group shares
    reasons: tuple[str, ...]  # per replica: why, for those called
    climb: tuple[float | None, ...]  # per replica: its own climb at the shared steps (share of its level)
    climb_t: tuple[float | None, ...]  # ... and that climb's t (generalised least squares, its own AR(1))
    apart_t: tuple[float | None, ...]  # ... its climb's t beside its own smooth curve at the steps of the OTHERS'
    # average (_apart_t; None: not asked, its climb above fell short)
    at_s: tuple[float, ...]  # the shared steps' times, s from the common window's start
    second_t: float | None  # the average's sharpest up-step beside a level and its sharpest one
    p: float | None  # the larger of its two nulls' p's; None: not simulated (pre-screen)
    found: bool  # the group's shared steps found (each null below its level)
    simulations: int  # step fits run on simulated averages


def _common_bins(windows: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, float] | None:
    """The replicas' relative series (y / its level − 1) on one time grid: ≤ ratchet_step_points equal
    bins over the span every window covers (bins a replica has no sample in are interpolated), as
    (replicas × bins, the span in s). None when that span is under half the median window (the
    replicas were not watched at the same time) or holds fewer than 12 samples of some replica."""
    lo = max(float(t[0]) for t, _ in windows)
    hi = min(float(t[-1]) for t, _ in windows)
    spans = [float(t[-1] - t[0]) for t, _ in windows]
    if hi <= lo or hi - lo < 0.5 * float(np.median(spans)):
        return None
    inside = [(t >= lo) & (t <= hi) for t, _ in windows]
    bins = min(int(RULES["ratchet_step_points"]), min(int(k.sum()) for k in inside))
    if bins < 12:
        return None
    rows = []
    for (t, y), k in zip(windows, inside):
        tt, yy = t[k], y[k]
        level = float(np.median(yy))
        if level <= 0:
            return None
        idx = np.minimum(((tt - lo) / (hi - lo) * bins).astype(int), bins - 1)
        counts = np.bincount(idx, minlength=bins)
        sums = np.bincount(idx, weights=yy, minlength=bins)
        have = counts > 0
        mean = np.interp(np.arange(bins), np.nonzero(have)[0], sums[have] / counts[have])
        rows.append(mean / level - 1)
    return np.array(rows), hi - lo


def _second_sharp(x: np.ndarray, fit: StepFit) -> tuple[int, float]:
    """The sharpest up-step beside a straight line (its bin index among the candidates) and the
    sharpest up-step beside a level and THAT step (≥ 2 bins from it), at the fit's φ: one step is
    not a staircase (a single shared level shift has its one sharp step and noise after it, a
    staircase climbs again after its sharpest step)."""
    n = len(x)
    idx = np.arange(n)
    cand = np.arange(2, n - 1)
    xt = quasi_difference(x, fit.phi)
    line = quasi_difference(np.column_stack([np.ones(n), idx / n]), fit.phi)
    first = int(np.argmax(_step_scan(xt, line, fit.phi, cand)))
    step = (1 - fit.phi) * (idx > cand[first]) + (idx == cand[first])
    tz = _step_scan(xt, np.column_stack([line[:, :1], step]), fit.phi, cand)
    tz[max(first - 1, 0) : first + 2] = -np.inf
    return first, float(tz.max())


def _statistic(x: np.ndarray) -> tuple[StepFit | None, int, float | None]:
    """The average's step fit, its sharpest step and, where the fit has the staircase's shape as
    steps.group_shape asks it, its second sharp step (_second_sharp); else None."""
    fit = step_fit_x(x)
    if fit is None or not group_shape(fit):
        return fit, 0, None
    first, second = _second_sharp(x, fit)
    return fit, first, second


def _shared_null_p(
    x: np.ndarray, first: int, second: float, rng: np.random.Generator, sims: int, decide_at: float | None = None
) -> tuple[float, int]:
    """Where the average's statistic falls among simulations of "one step (at its sharpest) on a
    level, plus AR(1) noise" fitted to the average itself (ordinary least squares; median-unbiased
    φ and the SD of those residuals), same length; the step fit and the statistic (_statistic,
    its every condition) re-run in full on each, φ estimated again. Sequential (steps.simulated_p,
    `decide_at` passed on). (p, simulations run)."""
    n = len(x)
    idx = np.arange(n)
    design = np.column_stack([np.ones(n), (idx >= first + 2).astype(float)])
    coef, *_ = np.linalg.lstsq(design, x, rcond=None)
    mean = design @ coef
    # the noise's φ and SD beside a smooth curve and that step: the staircase's other steps left
    # beside a level alone read as a wander of φ ≈ 1, a null that steps as often as the data
    wide = np.column_stack([_smooth_basis(n), design[:, 1]])
    r = x - wide @ np.linalg.lstsq(wide, x, rcond=None)[0]
    phi = min(_curve_phi(r, wide), 0.999)
    sd = float(np.std(r, ddof=wide.shape[1]))

    def as_sharp(series: np.ndarray) -> bool:
        s = _statistic(series)[2]
        return bool(s is not None and s >= second)

    return simulated_p(mean, phi, sd, as_sharp, rng, sims, decide_at)


def _climb_at(x: np.ndarray, at: np.ndarray, *, curve: bool = False) -> tuple[float, float]:
    """A replica's own climb at the step bins `at` (the sum of its step sizes there, a share of its
    level) and that climb's t: generalised least squares of its series on a level (`curve`: its
    own smooth curve, steps._smooth_basis) plus those steps under AR(1) noise at its own φ (from
    the residuals of that fit: median-unbiased for a level, steps._curve_phi beside a curve)."""
    n = len(x)
    idx = np.arange(n)
    base = _smooth_basis(n) if curve else np.ones((n, 1))
    k = base.shape[1]
    if len(at) == 0:
        return 0.0, 0.0
    design = np.column_stack([base] + [(idx >= a).astype(float) for a in at])
    coef, *_ = np.linalg.lstsq(design, x, rcond=None)
    r = x - design @ coef
    phi = min(_curve_phi(r, design) if curve else residual_phi(r), 0.999)
    xt, dt = quasi_difference(x, phi), quasi_difference(design, phi)
    beta, *_ = np.linalg.lstsq(dt, xt, rcond=None)
    sd = max(robust_sd(xt - dt @ beta), 1e-12)
    cov = np.linalg.pinv(dt.T @ dt)[k:, k:]
    climb = float(beta[k:].sum())
    se = math.sqrt(max(float(cov.sum()), 1e-300)) * sd
    return climb, climb / se


def _apart_t(xs: np.ndarray, i: int) -> float:
    """Replica i's own climb t beside its own smooth curve (_climb_at, curve) at the up-steps the
    step fit finds on the average of the OTHER replicas: times its own noise did not choose, so under
    a smooth climb the group shares (every replica climbs, at no step) it is a t of noise, ~N(0, 1);
    at the group's own times it was not (the replica's noise is 1/n of the average that chose them:
    t 2–5 beside a cubic in the smooth-climb groups that passed)."""
    fit = step_fit_x(np.delete(xs, i, axis=0).mean(axis=0))
    if fit is None:
        return 0.0
    return _climb_at(xs[i], fit.at[fit.sizes > 0], curve=True)[1]


def ratchet_shared(windows: list[tuple[np.ndarray, np.ndarray]], *, sims: int | None = None) -> SharedRatchet | None:
    """Ratcheting on steps the group's replicas share in time (their steady windows, t s on one
    clock and y MB). The replicas' relative series are averaged on one grid (_common_bins); the
    average's step fit must have the staircase's shape (steps.group_shape) and a step sharper
    than a smooth curve explains (t ≥ steps._sharp_bar, classify's own bar); that sharpest step
    must lie beyond every simulation of the average's own smooth curve in AR(1) noise
    (steps.null_p at φ unbiased for the curve and at its upper bound: p ≤
    ratchet_shared_sharp_alpha) and its second sharp step (_second_sharp) beyond one step on a
    level in AR(1) noise fitted to it (_shared_null_p, p ≤ ratchet_shared_alpha), over
    ratchet_shared_sims simulations each. Then a replica is Ratcheting where its own climb at the
    shared steps is ≥ ratchet_min_climb_share with t ≥ ratchet_shared_replica_t (_climb_at) and
    its climb beside its own smooth curve at the OTHER replicas' steps has t ≥
    ratchet_shared_apart_t (_apart_t): a false group would otherwise call every replica. Cost
    bounded: nothing is simulated unless the average has the shape, the sharp bar, a second step
    at t ≥ ratchet_step_t and some replica passing both checks (the second null only once the
    first has fallen); the simulations stop early and are seeded from the data (a report
    reproduces). None with fewer than ratchet_group_min_replicas windows or no common span."""
    m = len(windows)
    if m < RULES["ratchet_group_min_replicas"]:
        return None
    clean = []
    for t, y in windows:
        t, y = np.asarray(t, dtype=float), np.asarray(y, dtype=float)
        ok = np.isfinite(t) & np.isfinite(y)
        if ok.sum() < 12:
            return None
        clean.append((t[ok], y[ok]))
    grid = _common_bins(clean)
    if grid is None:
        return None
    xs, span = grid
    sims = int(RULES["ratchet_shared_sims"] if sims is None else sims)
    avg = xs.mean(axis=0)
    fit, first, second = _statistic(avg)
    none = (False,) * m, ("",) * m
    if fit is None or second is None or second < RULES["ratchet_step_t"] or fit.sharp_t < _sharp_bar(fit.bins):
        return SharedRatchet(*none, (None,) * m, (None,) * m, (None,) * m, (), second, None, False, 0)
    at = fit.at
    climbs = [_climb_at(x, at) for x in xs]
    apart = [
        _apart_t(xs, i) if c >= RULES["ratchet_min_climb_share"] and tc >= RULES["ratchet_shared_replica_t"] else None
        for i, (c, tc) in enumerate(climbs)
    ]
    confirms = [a is not None and a >= RULES["ratchet_shared_apart_t"] for a in apart]
    at_s = tuple(float(a) / len(avg) * span for a in at)
    if not any(confirms):
        return SharedRatchet(
            *none,
            tuple(c for c, _ in climbs),
            tuple(tc for _, tc in climbs),
            tuple(apart),
            at_s,
            second,
            None,
            False,
            0,
        )
    digest = hashlib.blake2b(np.round(avg, 9).tobytes(), digest_size=8).digest()
    rng = np.random.default_rng(int.from_bytes(digest, "little"))
    # both nulls must fall (an intersection–union test, valid at the larger of the two levels): a smooth
    # climb in AR(1) noise (its cubic: a leak, a climb levelling off, a cycle's rise, a slow wander:
    # steps.null_p, its sharpest step beside that curve) at ratchet_shared_sharp_alpha, and one step on
    # a level (a level shift: _shared_null_p) at ratchet_shared_alpha
    # each simulated only until its decision is known (a p that must end above its level stops there)
    p_sharp, done = null_p(
        avg, fit.sharp_t, rng, sims, unbiased_phi=True, decide_at=RULES["ratchet_shared_sharp_alpha"]
    )
    p_second, more = (
        _shared_null_p(avg, first, second, rng, sims, RULES["ratchet_shared_alpha"])
        if p_sharp <= RULES["ratchet_shared_sharp_alpha"]
        else (1.0, 0)
    )
    p, done = max(p_sharp, p_second), done + more
    found = p_sharp <= RULES["ratchet_shared_sharp_alpha"] and p_second <= RULES["ratchet_shared_alpha"]
    hours = ", ".join(f"{s / 3600:.1f}" for s in at_s)
    called = tuple(bool(ok and found) for ok in confirms)
    reasons = tuple(
        f"climbs at the steps its group shares: {c:+.1%} of its level (t {tc:.1f}) at the {len(at)} steps the "
        f"average of its {m} replicas took ({hours} h into their common window), and beside its own smooth "
        f"climb at the steps of the others' average (t {a:.1f}); the average's sharpest step "
        f"(t {fit.sharp_t:.1f}) beyond a smooth climb in AR(1) noise and its second (t {second:.1f}) beyond one "
        f"step (p {p:.2g}, {done} simulations)"
        if call
        else ""
        for call, (c, tc), a in zip(called, climbs, apart)
    )
    return SharedRatchet(
        called,
        reasons,
        tuple(c for c, _ in climbs),
        tuple(tc for _, tc in climbs),
        tuple(apart),
        at_s,
        second,
        p,
        found,
        done,
    )
