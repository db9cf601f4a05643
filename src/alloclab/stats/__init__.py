"""Statistics for alloclab verdicts: numpy arrays in, dataclasses out. No store and no run data are
read; the one file access is a cache: growth.lag1_quantiles simulates a table of lag-1
autocorrelation quantiles once (seeded, so the same on every machine) and keeps it as
stats/lag1-*.npy under the cache directory (settings.cache_root: $ALLOCLAB_CACHE,
$XDG_CACHE_HOME/alloclab or ~/.cache/alloclab), simulating again when that directory is not
writable or the file is damaged.

Public API (stable; the analysis package calls these):

growth.py
    growth(t_s, y, *, level=None, seed=0) -> Growth | None
        Change over a steady window (Theil–Sen slope × window, MB and share of level) with a 95%
        interval that survives autocorrelation (non-overlapping batch means whose length comes from
        the series' own autocorrelation time, t-interval on the batch-mean trend). A rate per hour
        only where the window supports one (RULES["rate_min_window_s"], RULES["rate_min_blocks"]).
    group_growth(start_mb, end_mb, window_s, *, alpha=None) -> dict[str, GroupGrowth]
        The same question across replicas: log(end/start) per clean replica over the group's common
        window, one-sample t, Holm across groups; .word is "Growing"/"Bloating" when the group grows
        beyond the flat threshold (within-series intervals may be withheld; this test needs none).
    growth_pool(shares, windows_s, keys=None) -> GrowthPool | None;  pooled(growth, pool, *, key, widen=None, slow_widen=None) -> Growth
        A replica's own interval with the variance its coarse scales add counted
        RULES growth_slow_widen² times (one series under-states a slow wander); then, where its
        group pools (≥ 3 replicas, like windows), the group's changes' measured SD (every noise
        scale in it) narrows it to t(n−1) × that SD where narrower (floor: its finest scale's
        AR(1) bound), and it is widened to RULES growth_pool_widen × the SD of the *other*
        replicas' changes where that is wider.
    trend_edges(t_s, y, start, end, edge_s) -> (start_mb, end_mb, basis) | None
        A replica's level at a span's ends: over a day or more, the trend beside a fitted daily
        cycle (2 harmonics), so a cycle every replica shares is not growth; else edge medians.
status.py
    RULES, STATUS_ORDER, release_events(t_s, y, level) -> Releases,
    classify(t_s, y, *, verified=True, growth=None, seed=0, earlier=None) -> StatusCall (its .word is the status word,
        its .shape STEPS where a Growing series climbs in steps: status_phrase(word, shape) -> "Growing in steps")
steps.py
    step_evidence(t_s, y) -> StepEvidence: a window's step fit and Ratcheting's own verdict on it (what
        classify words a replica with; its StatusCall.ratchet carries it)
    ratchet_group(replicas: [StepEvidence], *, sims=None) -> GroupRatchet | None: Ratcheting on a group's
        combined step evidence, each replica against its own simulated null (a smooth climb that may level
        off), their p's combined by the truncated product (docs/lab/calibration.md, "Ratcheting")
ratchet_shared.py
    ratchet_shared(windows, *, sims=None) -> SharedRatchet | None: Ratcheting on steps a group's replicas
        share in time (their average's step fit), each replica climbing at them on its own series
group_tests.py
    compare_to_baseline(levels, baseline, *, alpha=0.05, margin=0.05, seed=0) -> dict[str, Comparison]
        Welch t on log levels (replicas are the units), Holm across comparisons to the baseline,
        geometric-mean-ratio intervals at each comparison's Holm level (interval excludes 1 ⇔
        significant), equivalence (interval inside [1/(1+m), 1+m]), replicas needed for 80% power,
        exact permutation p on log levels as a cross-check.
    letters(levels, *, alpha=0.05) -> dict[str, str]   compact letter display, Holm over all pairs
    design_min_p(replicas, baseline=None, *, method="welch") -> float
    design_warning(replicas, baseline=None, *, alpha=0.05, cv=None) -> str | None
        also the power to show a 0.7× difference when replicas differ by cv (RULES design_replica_cv,
        20%), with the replicas needed (group_tests.design_power, design_spread_warning)
added_growth.py
    growth_beside(pairs, baseline, *, alpha=None, margin_share=None) -> dict[str, GrowthBeside]
        Each group's per-replica changes (MB) against the baseline's over the window common to the
        two: Welch's t, Holm across groups, the excess's interval at its Holm level, and a word
        (grows beyond / as / less than / no more than the baseline, cannot tell) with an
        equivalence margin of RULES beside_margin_share of the group's level.
across_runs.py
    compare_pairs(pairs, *, alpha=0.05, margin=0.05, seed=0) -> dict[str, Comparison]
        The same group in two runs (B against A): Welch t on log levels, Holm across groups, ratio
        B/A intervals at each group's Holm level (`alloclab compare`).
    rose_beyond(comparison, pct) -> bool   the interval's lower end above 1 + pct/100 ("shown above")
    gate(comparison, pct) -> GateResult   the CI gate: within | above | inconclusive, with the upper
        end of the interval in percent and the smallest increase detectable with 80% power
sequential.py
    SequentialTest(alpha=0.05, n_comparisons=1, *, max_looks=None, first_look_s=None, look_times_s=None,
                   until="best")   (until="every": stop once every comparison is decided)
        .update(levels_by_group, baseline, *, elapsed_s=None) -> SequentialDecision
        .next_look_s() -> float | None   (look_times_s: planned looks, alpha ∝ elapsed time)
        Group-sequential test with Bonferroni alpha spending over looks (valid under any
        dependence between looks, hence for repeated looks at the same drifting replicas).
threshold.py
    ThresholdTest(threshold, alpha=0.05, *, max_looks=None, first_look_s=None)
        .update(good, candidate, *, elapsed_s=None) -> ThresholdDecision ("bad", "good" or None)
        SequentialTest on candidate/threshold against good: is the ratio above or below a threshold?
checks.py
    identical_series(a_t, a_y, b_t, b_y) -> SeriesMatch   (truthy when one process was sampled twice)

Changes from the brief: classify takes the steady window's arrays and returns a StatusCall (word
plus the evidence behind it) rather than a bare string; growth takes an optional `level`.
"""

from .added_growth import GrowthBeside, growth_beside
from .checks import SeriesMatch, identical_series, median_present
from .group_tests import Comparison, compare_to_baseline, design_min_p, design_warning, letters
from .growth import (
    GroupGrowth,
    Growth,
    GrowthPool,
    change_phrase,
    group_growth,
    growth,
    growth_bar_share,
    growth_pool,
    pooled,
    rate_phrase,
    trend_edges,
)
from .ratchet_shared import SharedRatchet, ratchet_shared
from .rules import RULES
from .sequential import SequentialDecision, SequentialTest
from .status import (
    STATUS_ORDER,
    STEPS,
    Releases,
    StatusCall,
    classify,
    release_events,
    status_phrase,
)
from .steps import GroupRatchet, StepEvidence, ratchet_group, step_evidence
from .threshold import ThresholdDecision, ThresholdTest

__all__ = [
    "median_present",
    "Growth",
    "growth",
    "change_phrase",
    "GrowthPool",
    "growth_pool",
    "pooled",
    "GroupGrowth",
    "group_growth",
    "trend_edges",
    "RULES",
    "STATUS_ORDER",
    "Releases",
    "StatusCall",
    "classify",
    "release_events",
    "STEPS",
    "status_phrase",
    "growth_bar_share",
    "rate_phrase",
    "GroupRatchet",
    "ratchet_group",
    "StepEvidence",
    "step_evidence",
    "SharedRatchet",
    "ratchet_shared",
    "Comparison",
    "compare_to_baseline",
    "letters",
    "design_min_p",
    "design_warning",
    "GrowthBeside",
    "growth_beside",
    "SequentialDecision",
    "SequentialTest",
    "SeriesMatch",
    "identical_series",
    "ThresholdDecision",
    "ThresholdTest",
]
