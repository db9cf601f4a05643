"""Groups against a baseline: replicas are the units, the test is Welch's t on log levels.

Why log levels: allocators change memory multiplicatively (0.44× glibc), replica spread is roughly
proportional to the level, and the geometric-mean ratio with its interval falls straight out of a
difference of log means. Why Welch's t rather than a permutation test: with 3 replicas a side a
permutation test cannot go below p = 0.1, whatever the effect; the t test on logs reaches a verdict
when the effect is large relative to the spread, and its calibration (coverage, family-wise error)
is measured in benchmarks/calibration.py. The permutation p stays as a cross-check field.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import cast

import numpy as np
from numpy.typing import ArrayLike
from scipy import special

from .rules import RULES


@dataclass
class Comparison:
    group: str
    n: int
    geo_mean_mb: float | None
    mean_mb: float | None
    status: str = "untestable"  # baseline | lower | higher | equivalent | inconclusive | untestable
    testable: bool = False  # n ≥ 2 in both this group and the baseline
    ratio: float | None = None  # geometric-mean ratio group / baseline
    ratio_ci: tuple[float, float] | None = None  # at ci_level (the comparison's Holm level)
    ci_level: float | None = None  # e.g. 0.975 when Holm tested this one at α/2
    diff_mb: float | None = None  # difference of arithmetic means
    p_raw: float | None = None
    p_adj: float | None = None  # Holm across the comparisons to the baseline
    significant: bool = False  # p_adj < alpha  ⇔  ratio_ci excludes 1
    equivalent: bool = False  # ratio_ci inside [1/(1+margin), 1+margin]
    margin: float = 0.05
    method: str = ""  # "welch-log" or a fallback, e.g. "permutation-log (zero variance)"
    df: float | None = None  # Welch–Satterthwaite degrees of freedom
    cliffs_delta: float | None = None
    replicas_needed: int | None = None  # per group for 80% power (ratio, or the margin when near 1); None: > 1000
    p_permutation: float | None = None  # exact/sampled permutation p on log levels (cross-check)
    notes: list[str] = field(default_factory=list)  # assumption checks that failed or are weak


@dataclass(frozen=True)
class Welch:
    d: float  # difference of log means
    se: float
    df: float
    p: float


def _clean(a: ArrayLike) -> np.ndarray:
    a = np.asarray(a, dtype=float)
    return a[np.isfinite(a) & (a > 0)]


def welch(la: np.ndarray, lb: np.ndarray) -> Welch | None:
    """Welch's t on two samples of log levels; None when both variances are zero."""
    na, nb = len(la), len(lb)
    va, vb = la.var(ddof=1), lb.var(ddof=1)
    se2 = va / na + vb / nb
    d = float(la.mean() - lb.mean())
    if se2 <= 1e-24:
        return None
    df = se2**2 / ((va / na) ** 2 / (na - 1) + (vb / nb) ** 2 / (nb - 1))
    se = math.sqrt(se2)
    return Welch(d, se, float(df), float(2 * special.stdtr(df, -abs(d) / se)))


def holm(p: list[float]) -> list[float]:
    """Holm-adjusted p-values (step-down, monotone)."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    adj, running = [1.0] * m, 0.0
    for k, i in enumerate(order):
        running = max(running, min(1.0, (m - k) * p[i]))
        adj[i] = running
    return adj


def holm_levels(p: list[float], alpha: float) -> list[float]:
    """The level γ_i at which Holm effectively tests each hypothesis, chosen so that
    p_i < γ_i ⇔ Holm rejects i: α/(m − r_i + 1) for hypotheses reached by the step-down, and
    the level of the first non-rejected step for every hypothesis after it. An interval at
    1 − γ_i therefore excludes the null exactly when Holm's adjusted p is below α."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    gam = [alpha] * m
    stopped = None
    for k, i in enumerate(order):
        level = alpha / (m - k)
        if stopped is None and p[i] >= level:
            stopped = level
        gam[i] = level if stopped is None else stopped
    return gam


def permutation_p(a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> float:
    """Two-sided permutation p of the difference of means; exact up to permutation_exact_limit
    splits, else sampled (with the +1 correction)."""
    pooled = np.concatenate([a, b])
    n, na = len(pooled), len(a)
    observed = abs(a.mean() - b.mean())
    total = math.comb(n, na)
    if total <= RULES["permutation_exact_limit"]:
        idx = np.array(list(itertools.combinations(range(n), na)))
        mask = np.zeros((len(idx), n), dtype=bool)
        np.put_along_axis(mask, idx, True, axis=1)
    else:
        k = int(RULES["permutation_samples"])
        mask = np.argsort(rng.random((k, n)), axis=1) < na
    sa = mask @ pooled
    diffs = np.abs(sa / na - (pooled.sum() - sa) / (n - na))
    hits = int(np.sum(diffs >= observed - 1e-12))
    return hits / len(mask) if total <= RULES["permutation_exact_limit"] else (hits + 1) / (len(mask) + 1)


def cliffs_delta(a: np.ndarray, b: np.ndarray) -> float:
    diff = np.subtract.outer(a, b)
    return float((np.sum(diff > 0) - np.sum(diff < 0)) / diff.size)


def replicas_needed(
    d: float, sd: float, *, gamma: float, margin: float | None = None, power: float | None = None, max_n: int = 1000
) -> int | None:
    """Replicas per group for `power` (default RULES power_target) with a two-sided t test at
    level gamma on log levels: for a true log-ratio d when margin is None, otherwise for showing
    equivalence within ±log(1+margin) (TOST) when the true log-ratio is d. None when > max_n."""
    power = RULES["power_target"] if power is None else power
    if sd <= 0:
        return 2
    # normal-approximation start, then the exact (noncentral t) power just above it
    z = special.ndtri(1 - gamma / 2) + special.ndtri(power)
    gap = abs(d) if margin is None else math.log1p(margin) - abs(d)
    if gap <= 0:
        return None
    n0 = 2 * (z * sd / gap) ** 2
    if n0 > max_n:
        return None
    first = max(2, int(n0) - 1)
    n = np.arange(first, min(max_n, first + 40) + 1, dtype=float)
    df = 2 * n - 2
    se = sd * np.sqrt(2 / n)
    if margin is None:
        if abs(d) <= 0:
            return None
        tc = special.stdtrit(df, 1 - gamma / 2)
        nc = abs(d) / se
        pw = 1 - special.nctdtr(df, nc, tc) + special.nctdtr(df, nc, -tc)
    else:
        delta = math.log1p(margin)
        if abs(d) >= delta:
            return None
        tc = special.stdtrit(df, 1 - gamma / 2)  # the interval at 1 − γ inside the margin
        # P(lower bound > −Δ and upper bound < Δ) for the interval d̂ ± tc·se
        pw = np.clip(special.nctdtr(df, (d - delta) / se, -tc) - special.nctdtr(df, (d + delta) / se, tc), 0, 1)
    ok = np.nonzero(pw >= power)[0]
    return int(n[ok[0]]) if len(ok) else None


def test_pair(
    c: Comparison,
    a: np.ndarray,
    ref: np.ndarray,
    rng: np.random.Generator,
    sides: tuple[str, str],
    untestable: str,
    cross_check: bool = True,
) -> Welch | None:
    """One comparison of `a` against `ref` (per-replica levels, MB) into `c`: ratio of geometric
    means, difference, Welch's t on log levels (permutation p beside it, and instead of it when
    neither side has any spread), Cliff's delta and notes. `sides` names a and ref in the note
    written when either has fewer than 2 replicas (then c stays untestable). Used by
    compare_to_baseline and across_runs.compare_pairs."""
    if len(a) and len(ref):
        c.ratio = float(np.exp(np.log(a).mean() - np.log(ref).mean()))
        c.diff_mb = float(a.mean() - ref.mean())
    if len(a) < 2 or len(ref) < 2:
        c.notes.append(f"{sides[0] if len(a) < 2 else sides[1]} has {min(len(a), len(ref))} replica(s): {untestable}")
        return None
    c.testable = True
    la, lb = np.log(a), np.log(ref)
    w = welch(la, lb)
    if cross_check or w is None:  # (a fleet's 28 looks skip it: ~0.1 s a comparison at 80 + 80, and unused)
        c.p_permutation = permutation_p(la, lb, rng)
    c.cliffs_delta = cliffs_delta(a, ref)
    if w is None:
        c.method = "permutation-log (zero variance on both sides)"
        c.p_raw = c.p_permutation
        c.notes.append("every replica has the same level on each side: no spread to test against; permutation p used")
        return None
    c.method, c.p_raw, c.df = "welch-log", w.p, w.df
    if w.df < 2:
        c.notes.append(f"Welch df = {w.df:.1f}: the interval is very wide")
    sa, sb = la.std(ddof=1), lb.std(ddof=1)
    if min(sa, sb) > 0 and max(sa, sb) / min(sa, sb) > 10:
        c.notes.append("spreads differ more than tenfold: check for a contaminated replica")
    return w


def compare_to_baseline(
    levels: dict[str, np.ndarray],
    baseline: str,
    *,
    alpha: float = 0.05,
    margin: float = 0.05,
    seed: int = 0,
    cross_check: bool = True,
) -> dict[str, Comparison]:
    """Compare every group's per-replica steady levels (MB) with the baseline's.

    Each group gets geometric and arithmetic means. A group with ≥ 2 replicas, against a baseline
    with ≥ 2, is tested with Welch's t on log levels; Holm across those comparisons; the ratio
    interval is at each comparison's Holm level (so it excludes 1 exactly when p_adj < alpha);
    equivalence when that interval lies inside [1/(1+margin), 1+margin]. A group or baseline
    with one replica is "untestable", never "tied"."""
    rng = np.random.default_rng(seed)
    clean = {g: _clean(v) for g, v in levels.items()}
    base = clean.get(baseline, np.array([]))
    out: dict[str, Comparison] = {}
    tests: dict[str, Welch | None] = {}
    for g, a in clean.items():
        c = Comparison(
            g,
            len(a),
            float(np.exp(np.log(a).mean())) if len(a) else None,
            float(a.mean()) if len(a) else None,
            margin=margin,
        )
        out[g] = c
        if g == baseline:
            c.status, c.method = "baseline", "baseline"
            continue
        w = test_pair(c, a, base, rng, ("this group", "the baseline"), "a difference cannot be tested", cross_check)
        if c.testable:
            tests[g] = w
    tested = [g for g in out if out[g].testable]
    p = [cast(float, out[g].p_raw) for g in tested]  # testable: p_raw is set
    for g, pa, gam in zip(tested, holm(p), holm_levels(p, alpha)):
        c, w = out[g], tests[g]
        settle(c, w, pa, gam, alpha, margin)
        if w is not None:
            la, lb = np.log(clean[g]), np.log(base)
            pooled_sd = math.sqrt((la.var(ddof=1) + lb.var(ddof=1)) / 2)
            plan = alpha / max(1, len(tested))  # Bonferroni level for planning
            if abs(w.d) >= math.log1p(margin) / 2:
                c.replicas_needed = replicas_needed(w.d, pooled_sd, gamma=plan)
            else:
                c.replicas_needed = replicas_needed(w.d, pooled_sd, gamma=plan, margin=margin)
    return out


def settle(c: Comparison, w: Welch | None, p_adj: float, gamma: float, alpha: float, margin: float) -> None:
    """A tested comparison's Holm outcome: adjusted p, significance, the ratio interval at the
    comparison's Holm level 1 - gamma (so it excludes 1 exactly when p_adj < alpha), equivalence
    within the margin, and the status word."""
    c.p_adj, c.significant, c.ci_level = p_adj, p_adj < alpha, 1 - gamma
    if w is not None:
        half = special.stdtrit(w.df, 1 - gamma / 2) * w.se
        c.ratio_ci = (float(np.exp(w.d - half)), float(np.exp(w.d + half)))
        c.equivalent = bool(c.ratio_ci[0] >= 1 / (1 + margin) and c.ratio_ci[1] <= 1 + margin)
    if c.significant:
        c.status = "lower" if (c.ratio or 1) < 1 else "higher"
    elif c.equivalent:
        c.status = "equivalent"
    else:
        c.status = "inconclusive"


def _pairwise_significant(clean: dict[str, np.ndarray], alpha: float) -> set[frozenset[str]]:
    pairs, ps = [], []
    for g, h in itertools.combinations([g for g in clean if len(clean[g]) >= 2], 2):
        w = welch(np.log(clean[g]), np.log(clean[h]))
        if w is None:
            p = 0.0 if np.log(clean[g]).mean() != np.log(clean[h]).mean() else 1.0
        else:
            p = w.p
        pairs.append(frozenset((g, h)))
        ps.append(p)
    return {pair for pair, pa in zip(pairs, holm(ps)) if pa < alpha}


def letters(levels: dict[str, np.ndarray], *, alpha: float = 0.05) -> dict[str, str]:
    """Compact letter display from all pairwise Welch-log tests, Holm over all pairs: groups that
    share a letter are not shown different, groups that share none are. Groups are lettered in
    order of increasing geometric mean ("a" = lowest). A group with one replica cannot be shown
    different from any other and shares a letter with all of them; a group without data gets ""."""
    clean = {g: _clean(v) for g, v in levels.items()}
    names = sorted((g for g in clean if len(clean[g])), key=lambda g: np.log(clean[g]).mean())
    sig = _pairwise_significant(clean, alpha)
    columns: list[set[str]] = [set(names)] if names else []  # no group with data: no letters
    for pair in sig:  # insert: split every column holding both
        i, j = tuple(pair)
        new = []
        for col in columns:
            if i in col and j in col:
                new += [col - {i}, col - {j}]
            else:
                new.append(col)
        # absorb: drop columns contained in another
        uniq: list[set[str]] = []
        for col in sorted(new, key=len, reverse=True):
            if col and not any(col <= other for other in uniq):
                uniq.append(col)
        columns = uniq
    rank = {g: k for k, g in enumerate(names)}
    columns.sort(key=lambda col: (min(rank[g] for g in col), max(rank[g] for g in col)))
    alphabet = "abcdefghijklmnopqrstuvwxyz"
    out = {g: "" for g in levels}
    for k, col in enumerate(columns):
        letter = alphabet[k] if k < 26 else f"({k})"
        for g in col:
            out[g] += letter
    return {g: "".join(sorted(s, key=lambda ch: alphabet.find(ch))) for g, s in out.items()}


def _design(replicas: dict[str, int] | tuple[int, int], baseline: str | None) -> tuple[dict[str, int], str]:
    if isinstance(replicas, dict):
        counts = {str(g): int(n) for g, n in replicas.items()}
    else:
        n_groups, n_per = replicas
        counts = {f"group{i + 1}": int(n_per) for i in range(int(n_groups))}
    if baseline is None or baseline not in counts:
        baseline = next(iter(counts))
    return counts, baseline


def design_min_p(
    replicas: dict[str, int] | tuple[int, int], baseline: str | None = None, *, method: str = "welch"
) -> float:
    """Smallest Holm-adjusted p any comparison to the baseline can reach with this design.
    `replicas` is {group: n} or (n_groups, n_per_group). Welch: 0 when the baseline and at least
    one other group have ≥ 2 replicas (the t statistic is unbounded; with n = 2 a side the df can
    be as low as 1, so only effects many times the spread get there), 1 when no comparison is
    testable. Permutation: (number of comparisons) × 2 / C(n_a + n_b, n_a), the first Holm step."""
    counts, baseline = _design(replicas, baseline)
    others = {g: n for g, n in counts.items() if g != baseline}
    m = max(1, len(others))
    nb = counts[baseline]
    testable = {g: n for g, n in others.items() if n >= 2 and nb >= 2}
    if not testable:
        return 1.0
    if method == "welch":
        return 0.0
    if method == "permutation":
        return min(1.0, m * min(2.0 / math.comb(n + nb, n) for n in testable.values()))
    raise ValueError(f"unknown method {method!r}")


def design_power(n_a: int, n_b: int, ratio: float, cv: float, *, gamma: float) -> float:
    """Power of a two-sided t test at level gamma on log levels (df n_a + n_b − 2) for a true
    ratio between groups whose replicas spread with log-sd cv (noncentral t)."""
    if n_a < 2 or n_b < 2:
        return 0.0
    df = n_a + n_b - 2
    nc = abs(math.log(ratio)) / (cv * math.sqrt(1 / n_a + 1 / n_b))
    tc = special.stdtrit(df, 1 - gamma / 2)
    pw = float(1 - special.nctdtr(df, nc, tc) + special.nctdtr(df, nc, -tc))
    return pw if math.isfinite(pw) else 1.0  # nctdtr gives NaN far in the tail


def design_spread_warning(
    counts: dict[str, int], baseline: str, *, alpha: float, cv: float | None = None, ratio: float | None = None
) -> str | None:
    """When replicas differ by `cv` (RULES design_replica_cv, 20%: Tor relays can), can this
    design show a `ratio` (RULES design_ratio, 0.7×, and its inverse) at 80% power? The test is
    taken at α/m (Holm's first step, m comparisons to the baseline), the smallest group against
    the baseline. None when it can."""
    cv = RULES["design_replica_cv"] if cv is None else cv
    ratio = RULES["design_ratio"] if ratio is None else ratio
    others = {g: n for g, n in counts.items() if g != baseline}
    if not others or counts[baseline] < 2:
        return None
    m = len(others)
    n = min(others.values())
    gamma = alpha / m
    low = design_power(n, counts[baseline], ratio, cv, gamma=gamma)
    if low >= RULES["power_target"]:
        return None
    need = replicas_needed(math.log(ratio), cv, gamma=gamma)
    return (
        f"if replicas differ by {cv:.0%} (coefficient of variation; Tor relays can), {n} replicas per group "
        f"show a {ratio:.2f}× (or {1 / ratio:.2f}×) difference from the baseline in only about {low:.0%} of runs (Holm over {m} comparison{'s' if m > 1 else ''}); about "
        f"{need if need is not None else 'more than 1000'} replicas per group give {RULES['power_target']:.0%}"
    )


def design_warning(
    replicas: dict[str, int] | tuple[int, int],
    baseline: str | None = None,
    *,
    alpha: float = 0.05,
    cv: float | None = None,
) -> str | None:
    """None, or one sentence on why a significant result is impossible or unlikely with this
    design (groups × replicas), to show before a run starts; `cv`: the replicas' expected spread
    (default RULES design_replica_cv)."""
    counts, baseline = _design(replicas, baseline)
    if counts[baseline] < 2:
        return (
            f"the baseline {baseline} has {counts[baseline]} replica: no difference from it can be "
            "tested; run at least 3 replicas per group"
        )
    single = [g for g, n in counts.items() if n < 2 and g != baseline]
    if single:
        return (
            f"{', '.join(single)} {'has' if len(single) == 1 else 'have'} a single replica: "
            "untestable against the baseline; run at least 3 replicas per group"
        )
    if len(counts) < 2:
        return "only one group: nothing to compare"
    two = [g for g, n in counts.items() if n == 2]
    if two:
        return (
            f"{', '.join(two)} {'has' if len(two) == 1 else 'have'} 2 replicas: Welch's test then has "
            "as little as 1 degree of freedom and only differences far larger than the replica "
            "spread can be significant; run at least 3 replicas per group"
        )
    return design_spread_warning(counts, baseline, alpha=alpha, cv=cv)
