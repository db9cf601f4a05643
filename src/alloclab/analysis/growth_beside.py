"""Each group's growth beside the baseline's (stats.growth_beside): every replica's change in MB over
the window common to the group's and the baseline's growth windows (the spans the growth across
replicas uses), measured as that test measures it (stats.trend_edges, edges of
RULES growth_edge_share), so a workload growth every group shares cancels and what is left is the
allocator's."""

from __future__ import annotations

import numpy as np

from .. import stats
from ..stats.rules import RULES
from .load import Series


def growth_beside(
    members: dict[str, list[Series]], spans: dict[str, tuple[float, float]], baseline: str
) -> dict[str, stats.GrowthBeside]:
    """members: per group, the replicas its growth across replicas uses; spans: their common windows.
    Groups without a window overlapping the baseline's are left out."""
    if baseline not in spans:
        return {}
    pairs = {}
    baseline_edges: dict[
        tuple[float, float], tuple[np.ndarray, float]
    ] = {}  # groups sharing a window share the baseline's read
    for g, span in spans.items():
        if g == baseline or g not in members:
            continue
        lo, hi = max(span[0], spans[baseline][0]), min(span[1], spans[baseline][1])
        if hi <= lo:
            continue
        if (lo, hi) not in baseline_edges:
            baseline_edges[(lo, hi)] = _edges(members[baseline], lo, hi)
        (mine, measured), (theirs, _) = _edges(members[g], lo, hi), baseline_edges[(lo, hi)]
        if not len(mine):
            continue
        pairs[g] = (
            mine[:, 1] - mine[:, 0],
            theirs[:, 1] - theirs[:, 0] if len(theirs) else np.array([]),
            float(mine[:, 0].mean()),
            hi - lo,
            measured,
        )
    return stats.growth_beside(pairs, baseline)


def _edges(series: list[Series], lo: float, hi: float) -> tuple[np.ndarray, float]:
    """(start MB, end MB) per replica over [lo, hi], as rows, and the span (s) between the times
    they stand for: the trend's ends (a day or more) or the edge medians' centres, one edge's width
    inside the window — a steady growth measured so shows (window − edge) / window of its change
    over the window, and the margin is scaled alike (stats.growth_beside)."""
    edge = RULES["growth_edge_share"] * (hi - lo)
    got = [e for s in series if (e := stats.trend_edges(s.t, s.mb, lo, hi, edge)) is not None]
    medians = any(basis.startswith("medians") for _, _, basis in got)
    rows = np.array([e[:2] for e in got], dtype=float).reshape(-1, 2)
    return rows, (hi - lo) - (edge if medians else 0.0)
