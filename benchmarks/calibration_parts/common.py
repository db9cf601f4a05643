"""What every part of benchmarks/calibration.py shares: the table of results (ROWS, row), the words
as reports show them (words, shown, share), rates with their intervals (rate, clopper_pearson,
grouped_rate), the designs (window, sampling interval) and series makers the parts simulate on,
and the run-time settings that no public parameter of alloclab carries: rules_set (entries of the
shared RULES table), growth_scales (stats.growth's coarse scales) and group_curve (the group
route's smooth curve in stats.steps), each set for one block and restored after it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from alloclab.stats import classify
from alloclab.stats.rules import RULES
from alloclab.stats.status import status_phrase
from tests import simulated_series as sim

# (window, sampling interval) pairs from the demo to the operators' relays
DESIGNS = [("1 h @ 1 s", 3600.0, 1.0), ("6 h @ 60 s", 6 * 3600.0, 60.0), ("9 d @ 15 min", 9 * 86400.0, 900.0)]


ROWS: list[tuple[str, str, str, int]] = []


def row(name: str, value: str, target: str, n: int) -> None:
    ROWS.append((name, value, target, n))
    print(f"  {name}: {value} (target {target}, n={n})", file=sys.stderr, flush=True)


# what the step rule says, as reports show it ("Ratcheting" until the word was retired, issue 49;
# the rows below keep the rule's old name in their labels so they read beside the figures measured before)
STEPS = "Growing in steps"


def words(t: np.ndarray, ys: np.ndarray) -> list[str]:
    """Each series' status as reports show it (status_phrase: "Growing in steps" where it climbs in steps)."""
    return [status_phrase(c.word, c.shape) for c in (classify(t, y) for y in ys)]


def shown(x) -> str:
    """A replica's or group's status as reports show it."""
    return status_phrase(x.status, getattr(x, "growth_shape", None))


def share(ws: list[str], *accepted: str) -> float:
    return sum(w in accepted for w in ws) / len(ws)


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    from scipy import stats as sps

    a = 1 - level
    lo = 0.0 if k == 0 else float(sps.beta.ppf(a / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(sps.beta.ppf(1 - a / 2, k + 1, n - k))
    return lo, hi


def rate(k: int, n: int) -> str:
    lo, hi = clopper_pearson(k, n)
    return f"{k / n:.1%} [{lo:.1%}–{hi:.1%}] ({k}/{n})"


def grouped_rate(per_group, m: int) -> str:
    """A per-replica rate whose replicas come in groups of m that decide together (a group found
    Ratcheting calls several of its replicas at once, so they are not independent trials): the 95%
    Clopper–Pearson interval of the effective count, the count divided by Kish's design effect (the
    variance of the groups' shares against a binomial's, within [1, m]). Where fewer than five
    groups hold a call (or fewer than five lack one) that variance says little, so m: as if each
    group's replicas moved as one — a rare call then widens the interval, never narrows it."""
    k_g = np.asarray(per_group, dtype=float)
    groups, k = len(k_g), float(k_g.sum())
    n = groups * m
    share = k / n
    if min(int((k_g > 0).sum()), int((k_g < m).sum())) < 5:
        deff = float(m)
    else:
        deff = min(float(m), max(1.0, (np.var(k_g / m, ddof=1) / groups) / (share * (1 - share) / n)))
    lo, hi = clopper_pearson(k / deff, n / deff)
    return f"{share:.1%} [{lo:.1%}–{hi:.1%}] ({k:.0f}/{n}, {groups} groups; design effect {deff:.1f})"


POOLED_DESIGNS = (
    ("1.5 d @ 10 min", 1.5 * 86400, 600.0),
    ("3 d @ 5 min", 3 * 86400, 300.0),
    ("9 d @ 15 min", 9 * 86400, 900.0),
)


# windows as long as the slow wander's autocorrelation time (1.7 d) or shorter
SHORT_DESIGNS = (
    ("0.5 d @ 5 min", 0.5 * 86400, 300.0),
    ("1 d @ 5 min", 86400.0, 300.0),
    ("1.7 d @ 10 min", 1.7 * 86400, 600.0),
)


# a slow wander sampled with white measurement noise (φ, SD, white SD): the step fit's lag-1 read it as fast
# noise until steps.step_noise (own route 1.0–3.2% Ratcheting at φ 0.995, 0–2.0% at φ 0.98)
JITTERED = ((0.995, 0.02, 0.005), (0.98, 0.01, 0.005))


def jittered_maker(phi: float, sd: float, white: float):
    """A cell's series maker (rng, series, t) for AR(1) at φ and SD plus white noise (sim.jittered)."""
    return lambda r, m, t: sim.jittered(r, m, t, sd_share=sd, phi=phi, white_share=white)


def staircase_maker(sd: float, phi: float):
    """A cell's series maker (rng, series, t) for +8% five-step staircases in AR(1) noise at SD and φ."""
    return lambda r, m, t: sim.staircase(r, m, t, climb_share=0.08, steps=5, sd_share=sd, phi=phi)


# climbs that level off (a relay approaching its ceiling): fast and slow bends, quiet and noisy
LEVELLING_OFF = ((0.15, 0.01, 0.9), (0.3, 0.02, 0.95), (1.0, 0.02, 0.95))


def shared_daily_cycle(sd: float):
    """A group's series (make(rng, m, t)) with a daily cycle ±4% every replica shares (one phase a
    group, any hour) in each replica's own AR(1) noise at φ 0.9 and this marginal SD."""

    def make(rng_, m, t):
        phase = rng_.uniform(0, 2 * np.pi)
        return 100 * (1 + 0.04 * np.sin(2 * np.pi * t / 86400.0 + phase) + sim.ar1(rng_, m, len(t), 0.9, sd))

    return make


def ratchet_cells(stairs, climbs: bool = True) -> list:
    """(name, make(rng, m, t), target) cells: +8% five-step staircases at each (AR(1) SD, φ) of
    `stairs`, then (climbs) the two levelling-off climbs and the smooth +10% climb, shared by the group."""
    cells = [
        (f"+8% five-step staircases, AR(1) {sd:.0%} φ {phi}", staircase_maker(sd, phi), "≥ 80%") for sd, phi in stairs
    ]
    if climbs:
        cells += [
            (
                f"a climb that levels off shared by the group (+15%, τ {tau_:.0%} of the window), AR(1) {sd:.0%} φ {phi}",
                (
                    lambda tau__, sd_, phi_: (
                        lambda r, m, t: sim.levelling_off(r, m, t, tau_share=tau__, sd_share=sd_, phi=phi_)
                    )
                )(tau_, sd, phi),
                "≤ 1%",
            )
            for tau_, sd, phi in LEVELLING_OFF[:2]
        ]
        cells += [
            (
                "smooth +10% climb shared by the group, AR(1) 2% φ 0.9",
                lambda r, m, t: sim.growing(r, m, t, share=0.10, phi=0.9, sd_share=0.02),
                "≤ 1%",
            )
        ]
    return cells


def _levelling_basis_by_bic(
    x: np.ndarray, cycle: np.ndarray | None = None, bases: list[np.ndarray] | None = None
) -> np.ndarray:
    """--group-curve bic (session 18's exploration, not the rule): steps.levelling_basis choosing
    among the cubic (+ the day's harmonics) alone and each levelling curve by BIC on the fit
    prewhitened at the cubic's residual φ, so the levelling term enters only where it earns its column."""
    from alloclab.stats import steps

    bases = steps.levelling_bases(len(x), cycle) if bases is None else bases
    cubic = bases[0][:, :-1]
    phi = steps.residual_phi(x - cubic @ np.linalg.lstsq(cubic, x, rcond=None)[0])
    xt = steps.quasi_difference(x, phi)

    def bic(b: np.ndarray) -> float:
        bt = steps.quasi_difference(b, phi)
        r = xt - bt @ np.linalg.lstsq(bt, xt, rcond=None)[0]
        return len(x) * np.log(max(float(r @ r), 1e-300) / len(x)) + b.shape[1] * np.log(len(x))

    return min([cubic] + list(bases), key=bic)


@contextmanager
def rules_set(**entries: float) -> Iterator[None]:
    """The shared RULES table with these entries for the block, the old values back after it (even
    on an error): the options --smooth-degree and --group-alpha, and --part growth-frontier's
    settings. No function of alloclab takes its rules as a parameter; every one reads this table."""
    unknown = [k for k in entries if k not in RULES]
    if unknown:
        raise KeyError(f"no rule named {', '.join(unknown)}")
    saved = {k: RULES[k] for k in entries}
    RULES.update(entries)
    try:
        yield
    finally:
        RULES.update(saved)


@contextmanager
def growth_scales(divs: tuple[int, ...]) -> Iterator[None]:
    """stats.growth's coarse scales for the block: growth_max_points divided by each of `divs` (the
    rule's 4, 16, 32: 128, 32 and 16 bins), each kept while it holds ≥ growth_min_scale_points and
    fewer bins than the series. growth() takes no parameter for its scales: growth.bin_scales is
    swapped for the block and put back (--part growth-frontier)."""
    gm = importlib.import_module("alloclab.stats.growth")  # the module (stats' `growth` is the function)
    saved = gm.bin_scales
    gm.bin_scales = lambda nb: (
        [nb]
        + [
            k
            for k in (int(RULES["growth_max_points"]) // d for d in divs)
            if RULES["growth_min_scale_points"] <= k < nb
        ]
    )
    try:
        yield
    finally:
        gm.bin_scales = saved


# --group-curve: which function of stats.steps each choice swaps
GROUP_CURVES = {"rule": None, "cubic": "levelling_bases", "bic": "levelling_basis", "no-cycle": "cycle_of"}


@contextmanager
def group_curve(kind: str) -> Iterator[None]:
    """The group route's smooth curve (stats.steps.ratchet_group) for the block: 'rule' the rule's;
    'cubic' the rule's curves without their last column, the levelling term (the cubic + the day's
    harmonics); 'bic' the levelling term only where it earns its column (_levelling_basis_by_bic);
    'no-cycle' without the day's harmonics. ratchet_group takes no parameter for its curve, so the
    function of stats.steps that builds it is swapped for the block and put back after."""
    name = GROUP_CURVES[kind]
    if name is None:
        yield
        return
    steps = importlib.import_module("alloclab.stats.steps")
    saved = getattr(steps, name)
    if kind == "cubic":
        swapped = lambda n, cycle=None: [saved(n, cycle)[0][:, :-1]]
    elif kind == "bic":
        swapped = _levelling_basis_by_bic
    else:
        swapped = lambda e: None
    setattr(steps, name, swapped)
    try:
        yield
    finally:
        setattr(steps, name, saved)
