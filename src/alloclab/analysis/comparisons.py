"""Group comparisons against the baseline (replicas are the units), through stats.group_tests:
Welch's t on log levels, Holm across the comparisons to the baseline, geometric-mean ratio
intervals at each comparison's Holm level, equivalence with a margin, replicas needed, and a
compact letter display instead of chained ranks. A group with one replica is "untestable"."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import stats
from ..stats.rules import RULES


@dataclass
class GroupComparison:
    group: str
    n: int
    mean_mb: float | None
    median_mb: float | None
    geo_mean_mb: float | None = None
    ratio: float | None = None  # geometric-mean ratio to the baseline
    ratio_ci: tuple[float, float] | None = None  # at ci_level: excludes 1 exactly when significant
    ci_level: float | None = None
    diff_mb: float | None = None
    p_raw: float | None = None
    p_holm: float | None = None
    min_p: float | None = None  # smallest Holm-adjusted p the design allows
    cliffs_delta: float | None = None
    significant: bool = False
    status: str = "untestable"  # baseline | lower | higher | equivalent | inconclusive | untestable
    equivalent: bool = False
    margin: float = 0.05
    replicas_needed: int | None = None
    letters: str = ""  # groups sharing a letter are not shown different
    rank: int | None = None  # 1 + number of groups shown lower than this one
    method: str = ""
    notes: tuple[str, ...] = ()

    @property
    def untestable(self) -> bool:
        return self.status == "untestable"


def compare_groups(levels: dict[str, np.ndarray], baseline: str, seed: int = 0) -> dict[str, GroupComparison]:
    alpha = RULES["alpha"]
    raw = stats.compare_to_baseline(levels, baseline, alpha=alpha, margin=RULES["equivalence_margin"], seed=seed)
    letter = stats.letters(levels, alpha=alpha)
    counts = {g: len(v) for g, v in levels.items() if len(v)}
    min_p = stats.design_min_p(counts, baseline) if baseline in counts and len(counts) > 1 else None
    out: dict[str, GroupComparison] = {}
    for g, a in levels.items():
        c = raw[g]
        out[g] = GroupComparison(
            g,
            len(a),
            float(np.mean(a)) if len(a) else None,
            float(np.median(a)) if len(a) else None,
            c.geo_mean_mb,
            c.ratio,
            c.ratio_ci,
            c.ci_level,
            c.diff_mb,
            c.p_raw,
            c.p_adj,
            min_p,
            c.cliffs_delta,
            c.significant,
            c.status,
            c.equivalent,
            c.margin,
            c.replicas_needed,
            letter.get(g, ""),
            None,
            c.method,
            tuple(c.notes),
        )
    # rank: groups whose letters share nothing with this one and lie lower; ties share a rank
    for gc in out.values():
        if not gc.letters:
            continue
        lower = [
            h
            for h, d in out.items()
            if d.letters and not set(d.letters) & set(gc.letters) and (d.geo_mean_mb or 0) < (gc.geo_mean_mb or 0)
        ]
        gc.rank = 1 + len(lower)
    return out
