"""Host as a factor: group effects estimated within hosts, host effects beside them.

Replicas on several hosts (merged stores, Prometheus imports, fleet collectors) differ by host as
well as by allocator: another kernel, CPU, load or workload mix moves every unit on a host. The
headline comparison (stats.compare_to_baseline) pools replicas across hosts; when groups are spread
unevenly over hosts, a host difference turns into a group difference there (the `hosts-unbalanced`
warning). This module fits the additive two-way model on log levels

    log level = mean + group effect + host effect + noise

by least squares (unbalanced designs included), so each group's ratio to the baseline is compared
within hosts (the blocked comparison), and each host's ratio to the fleet's geometric mean is
reported beside it with its interval, plus an F test of "no host effect". Group p-values are
Holm-adjusted across the comparisons to the baseline, and the intervals are at Holm's level, as in
the headline comparison. A group × host interaction is not modelled (with two units per group and
host it cannot be told from noise). Calibration: benchmarks/host_blocking.py (docs/method/index.md).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy import special

from ..stats.group_tests import holm, holm_levels
from ..stats.rules import RULES


@dataclass
class HostEffect:
    host: str
    replicas: int
    ratio: float  # the host's level / the fleet's geometric mean, groups held equal
    ratio_ci: tuple[float, float]


@dataclass
class BlockedComparison:
    group: str
    ratio: float  # geometric ratio to the baseline within hosts
    ratio_ci: tuple[float, float]  # at ci_level (Holm's level for this comparison)
    ci_level: float
    p_raw: float
    p_adj: float
    significant: bool
    hosts_with_both: int  # hosts that carry this group and the baseline


@dataclass
class HostFactor:
    hosts: list[str]
    baseline: str
    df: int  # residual degrees of freedom
    residual_sd: float  # on the log scale
    host_p: float | None  # F test of "no host effect"
    host_effects: list[HostEffect]
    group_effects: list[BlockedComparison]
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["host_effects"] = {h.pop("host"): h for h in d["host_effects"]}
        d["group_effects"] = {g.pop("group"): g for g in d["group_effects"]}
        return d


def _t_quantile(df: int, level: float) -> float:
    return float(special.stdtrit(df, 0.5 + level / 2))


def host_factor(
    given: list[tuple[str, str | None, float | None]], baseline: str, alpha: float | None = None
) -> HostFactor | None:
    """given: (group, host, level MB) per replica compared (those without a host or a level left
    out). None with fewer than two hosts, no
    baseline replicas, or a design that cannot separate hosts from groups (no residual df, or a
    group that shares no host with the others)."""
    alpha = RULES["alpha"] if alpha is None else alpha
    rows: list[tuple[str, str, float]] = [
        (g, h, v) for g, h, v in given if h and v is not None and math.isfinite(v) and v > 0
    ]
    hosts = sorted({h for _, h, _ in rows})
    groups = [baseline] + sorted({g for g, _, _ in rows} - {baseline})
    if len(hosts) < 2 or not any(g == baseline for g, _, _ in rows) or len(groups) < 1:
        return None
    y = np.log([v for _, _, v in rows])
    n, ng, nh = len(rows), len(groups), len(hosts)
    gi = {g: i for i, g in enumerate(groups)}
    hi = {h: i for i, h in enumerate(hosts)}
    # treatment coding: intercept = baseline on the first host
    x = np.zeros((n, ng + nh - 1))
    x[:, 0] = 1.0
    for r, (g, h, _) in enumerate(rows):
        if gi[g]:
            x[r, gi[g]] = 1.0
        if hi[h]:
            x[r, ng - 1 + hi[h]] = 1.0
    p = x.shape[1]
    df = n - p
    if df < 1 or np.linalg.matrix_rank(x) < p:
        return None
    xtx_inv = np.linalg.inv(x.T @ x)
    beta = xtx_inv @ x.T @ y
    resid = y - x @ beta
    rss = float(resid @ resid)
    s2 = rss / df
    notes = []
    # F test of the host terms: the model without them against the full one
    xr = x[:, :ng]
    br, *_ = np.linalg.lstsq(xr, y, rcond=None)
    rss_r = float(((y - xr @ br) ** 2).sum())
    host_p = None
    if s2 > 0:
        f = ((rss_r - rss) / (nh - 1)) / s2
        host_p = float(special.fdtrc(nh - 1, df, max(f, 0.0)))
    else:
        notes.append("no spread left within hosts and groups: intervals are points")
    # host effects against the fleet: contrast e_h - mean over hosts of the host terms
    host_effects = []
    tq = _t_quantile(df, 1 - alpha)
    for h in hosts:
        c = np.zeros(p)
        for other in hosts:
            w = (1.0 if other == h else 0.0) - 1.0 / nh
            if hi[other]:
                c[ng - 1 + hi[other]] += w
        est = float(c @ beta)
        se = math.sqrt(max(float(c @ xtx_inv @ c) * s2, 0.0))
        host_effects.append(
            HostEffect(
                h,
                sum(1 for _, hh, _ in rows if hh == h),
                math.exp(est),
                (math.exp(est - tq * se), math.exp(est + tq * se)),
            )
        )
    # group effects within hosts, Holm across the comparisons to the baseline
    raw = []
    for g in groups[1:]:
        est, se = float(beta[gi[g]]), math.sqrt(max(float(xtx_inv[gi[g], gi[g]]) * s2, 0.0))
        pr = float(2 * special.stdtr(df, -abs(est) / se)) if se > 0 else (0.0 if est else 1.0)
        raw.append((g, est, se, pr))
    adj = holm([r[3] for r in raw]) if raw else []
    levels = holm_levels([r[3] for r in raw], alpha) if raw else []
    group_effects = []
    by_host = {h: {g for g, hh, _ in rows if hh == h} for h in hosts}
    for (g, est, se, pr), pa, gam in zip(raw, adj, levels):
        q = _t_quantile(df, 1 - gam)
        group_effects.append(
            BlockedComparison(
                g,
                math.exp(est),
                (math.exp(est - q * se), math.exp(est + q * se)),
                1 - gam,
                pr,
                pa,
                pa < alpha,
                sum(1 for h in hosts if {g, baseline} <= by_host[h]),
            )
        )
    lonely = [c.group for c in group_effects if c.hosts_with_both == 0]
    if lonely:
        notes.append(
            f"{', '.join(lonely)} share no host with {baseline}: their within-host ratio rests on the "
            "additive model through other groups"
        )
    return HostFactor(hosts, baseline, df, math.sqrt(s2), host_p, host_effects, group_effects, notes)
