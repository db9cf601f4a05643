"""A group's growth beside the baseline's, in megabytes: what the allocator adds to the workload's.

Why MB and not shares of the level: where the workload itself grows (a directory cache keeping
superseded descriptors), every allocator holds the same extra megabytes, and the same +45 MB is
+6% of a 750 MB glibc relay but +21% of a 200 MB mimalloc one, so the status words' shares call the
small relays Growing for the workload's growth. The difference of the groups' mean per-replica
changes (MB, over one window common to the pair) is what the allocator adds; a workload component
every group shares (the same MB, or a cycle on the same clock) cancels in it.

The test: Welch's t on the per-replica changes (replicas are the units: the changes of independent
processes, whatever the autocorrelation within each series), Holm across the groups compared with
the baseline, the excess's interval at each comparison's Holm level (it excludes 0 exactly when
Holm rejects), and an equivalence margin of RULES beside_margin_share (5%) of the group's level at
the window's start — the change-free band beside_margin_share (5%) around the baseline's change (the growth bar a series of its own is held to is stats.growth_bar_share). Words:

- "grows beyond the baseline": significant, excess > 0;
- "grows less than the baseline": significant, excess < 0;
- "grows as the baseline does": the interval inside ±margin;
- "grows no more than the baseline": the interval's upper end below +margin (its lower end beyond
  −margin: less growth is not ruled out);
- "cannot tell": none of these (the interval reaches above +margin).

Every word but the first and the last rests on the interval's upper end below +margin: with the
interval at the Holm level 1 − γ, a true excess at the margin is called one of them at most γ/2
≤ 2.5% of the time (Welch's approximation aside; measured in benchmarks/calibration.py --part
beside).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import special

from .group_tests import Welch, holm, holm_levels, welch
from .rules import RULES

BEYOND = "grows beyond the baseline"
LESS = "grows less than the baseline"
AS = "grows as the baseline does"
NO_MORE = "grows no more than the baseline"
UNKNOWN = "cannot tell"
WORDS = (BEYOND, AS, LESS, NO_MORE, UNKNOWN)
NOT_BEYOND = (AS, LESS, NO_MORE)  # words under which the group's growth is the baseline's (the workload's) or less


@dataclass(frozen=True)
class GrowthBeside:
    """One group's change against the baseline's over the window common to the two."""

    group: str
    baseline: str
    n: int  # the group's replicas with a change
    n_baseline: int
    window_s: float
    changes_mb: tuple[float, ...]  # per replica, end − start (MB)
    baseline_changes_mb: tuple[float, ...]
    change_mb: float  # mean of changes_mb
    baseline_change_mb: float
    level_mb: float  # the group's mean level at the window's start (shares are of this)
    margin_mb: float  # beside_margin_share × level_mb (pro rata for a measured span shorter than the window)
    excess_mb: float  # change_mb − baseline_change_mb
    excess_lo: float | None  # interval at ci_level (Holm level); None: untested
    excess_hi: float | None
    ci_level: float | None
    p_raw: float | None  # Welch's t, two-sided
    p_adj: float | None  # Holm across the groups compared with the baseline
    word: str
    reason: str = ""

    @property
    def excess_share(self) -> float | None:
        return self.excess_mb / self.level_mb if self.level_mb > 0 else None

    @property
    def not_beyond(self) -> bool:
        """The group grows no more than the baseline (as, less or no more): the workload's growth."""
        return self.word in NOT_BEYOND

    def phrase(self) -> str:
        """The word with the baseline named: "grows as glibc does"."""
        return self.word.replace("the baseline", self.baseline)

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["changes_mb"], d["baseline_changes_mb"] = list(self.changes_mb), list(self.baseline_changes_mb)
        d["excess_share"] = self.excess_share
        return d


def _word(lo: float, hi: float, significant: bool, excess: float, margin: float) -> str:
    if significant:
        return BEYOND if excess > 0 else LESS
    if hi < margin:
        return AS if lo > -margin else NO_MORE
    return UNKNOWN


def growth_beside(
    pairs: dict[str, tuple[Any, ...]], baseline: str, *, alpha: float | None = None, margin_share: float | None = None
) -> dict[str, GrowthBeside]:
    """pairs: group -> (its per-replica changes MB, the baseline's over the same window, the group's
    level at the window's start MB, the window s[, the span s the changes measure]). Welch's t per
    group, Holm across the groups with ≥ 2 changes on both sides (the others: "cannot tell",
    untested), intervals at Holm levels. The margin is margin_share of the level over the window,
    pro rata for the span measured when shorter (changes between edge medians span 95% of it: a
    true excess of 5% over the window shows as 4.75%, and the margin is 4.75% of the level)."""
    alpha = RULES["alpha"] if alpha is None else alpha
    share = RULES["beside_margin_share"] if margin_share is None else margin_share
    base: dict[str, tuple[Any, ...]] = {}
    tests = {}
    for g, (a, b, level, window, *measured) in pairs.items():
        a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
        a, b = a[np.isfinite(a)], b[np.isfinite(b)]
        scale = min(1.0, measured[0] / window) if measured and window > 0 else 1.0
        base[g] = (a, b, float(level), float(window), share * scale * float(level))
        if len(a) >= 2 and len(b) >= 2:
            w = welch(a, b)
            # no spread on either side: the degenerate clear answer (as stats.group_growth gives)
            d = float(a.mean() - b.mean())
            tests[g] = w if w is not None else Welch(d, 0.0, math.inf, 0.0 if abs(d) > 1e-12 else 1.0)
    out = {}
    for g, (a, b, level, window, margin) in base.items():
        if g not in tests:
            out[g] = GrowthBeside(
                g,
                baseline,
                len(a),
                len(b),
                window,
                tuple(a),
                tuple(b),
                float(a.mean()) if len(a) else math.nan,
                float(b.mean()) if len(b) else math.nan,
                level,
                margin,
                float(a.mean() - b.mean()) if len(a) and len(b) else math.nan,
                None,
                None,
                None,
                None,
                None,
                UNKNOWN,
                f"untested: {min(len(a), len(b))} replica(s) with a change on one side, 2 needed",
            )
    tested = list(tests)
    p = [tests[g].p for g in tested]
    for g, pa, gam in zip(tested, holm(p), holm_levels(p, alpha)):
        a, b, level, window, margin = base[g]
        w = tests[g]
        d = w.d
        half = float(special.stdtrit(w.df, 1 - gam / 2)) * w.se if w.se > 0 else 0.0
        lo, hi = d - half, d + half
        word = _word(lo, hi, pa < alpha, d, margin)
        pct = f"{d / level:+.1%}" if level > 0 else "–"
        reason = (
            f"{len(a)} replicas changed {a.mean():+.1f} MB, {baseline}'s {len(b)} {b.mean():+.1f} MB over the same "
            f"window: {d:+.1f} MB ({pct} of its {level:.0f} MB at the window's start), {1 - gam:.1%} interval "
            f"{lo:+.1f} to {hi:+.1f} MB, margin ±{margin:.1f} MB, Holm p = {pa:.2g}"
        )
        out[g] = GrowthBeside(
            g,
            baseline,
            len(a),
            len(b),
            window,
            tuple(float(x) for x in a),
            tuple(float(x) for x in b),
            float(a.mean()),
            float(b.mean()),
            level,
            margin,
            d,
            lo,
            hi,
            1 - gam,
            w.p,
            pa,
            word,
            reason,
        )
    return out
