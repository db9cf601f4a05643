"""Every threshold that turns numbers into words (documented in docs/analysis.md)."""
from __future__ import annotations

from ..stats import STATUS_ORDER  # noqa: F401  (the status words are the stats package's)

RULES = {
    "min_steady_samples": 8,          # fewer post-warm-up samples: "Too short"
    "warmup_steepness": 3.0,          # a start 3x steeper than the second half is a warm-up ...
    "warmup_fraction": 0.9,           # ... which ends when the series first reaches 90% of its late level
    "warmup_max_share": 0.5,          # ... but never drops more than half of the window
    # a process's regrowth after it (re)started (analysis/regrowth.py; benchmarks/fleet_realism.py)
    "regrowth_min_samples": 24,       # fitted only on a process with this many samples ...
    "regrowth_min_window_s": 2 * 3600.0,  # ... over at least 2 h
    "regrowth_max_points": 256,       # the fit on ≤ 256 equal time bins (means)
    "regrowth_tau_min_s": 300.0,      # time constants tried: 5 min ...
    "regrowth_tau_max_s": 24 * 3600.0,  # ... to a day ...
    "regrowth_tau_max_share": 1.0,    # ... and at most the process's span (a restart mid-window regrows over what is left)
    "regrowth_tau_grid": 24,          # ... on 24 log-spaced values
    "regrowth_t": 4.0,                # recognised: the deficit's t ≤ −4 (lag-1-widened; τ is chosen from the grid) ...
    "regrowth_min_share": 0.03,       # ... and ≥ 3% of the level at the process start
    "regrowth_steady_share": 0.05,    # the steep part (remaining deficit > 5% of the level) is left out as the warm-up
    "flat_max_growth_share": 0.05,    # growth over the window below 5% of the level counts as flat
    "growing_min_change_mb": 1.0,     # and a change below 1 MB never counts as growing
    "bloating_window_share": 0.25,    # Growing by 25% of the level or more within the window: "Bloating"
    "variable_iqr_share": 0.25,       # IQR above 25% of the median in the steady window: "Variable"
    "release_min_mb": 1.0,            # a drop between samples of at least 1 MB ...
    "release_min_share": 0.01,        # ... and 1% of the level counts as a release event
    "ratchet_min_samples": 20,        # ratcheting needs this many samples with no release at all
    "alpha": 0.05,                    # family-wise error rate (Holm)
    "equivalence_margin": 0.05,       # "equivalent": ratio interval inside [1/1.05, 1.05]
    "bootstrap_resamples": 5000,
    "permutation_exact_limit": 50000, # above this many splits, sample permutations instead
    "permutation_samples": 20000,
    "min_replicas": 3,                # fewer per group: a confound warning
    "level_shift_share": 0.3,         # a level change of 30% around an event: allocator changed?
    "restart_drop_share": 0.3,        # a restart event counts when memory drops by 30% or more there
    "start_skew_intervals": 3,        # replicas whose analysed data start further apart: started apart
    # segments (analysis/load.py)
    "segment_step_share": 0.3,        # a step of 30%+ between the samples around an event confirms it
    "unexplained_drop_share": 0.5,    # a drop of 50%+ with no event: an unrecorded process restart ...
    "restart_fall_share": 0.3,        # ... or of 30%+ to a level the next samples stay near (a young process)
    "restart_keep_window_share": 0.5, # restarts inside the window: it ends before the first one when that keeps half of it;
                                      # replicas restarted earlier are left out of the comparison by name
    # windows (analysis/windows.py)
    "sample_tolerance_intervals": 2.5,  # a replica's sample stands for a time up to 2.5 of its own sampling intervals
                                      # before it (collectors per host sample seconds apart and miss ticks)
    "day_level_s": 86400.0,           # a window of a day or more: each replica's level is the mean of its hourly means
                                      # over the window's last day (a whole daily cycle), not one end-of-window sample
    "day_level_min_hours": 20,        # ... from a process that ran at least 20 of those 24 hours (younger: its end level)
    "swing_differs_ratio": 2.0,       # daily-swing-differs: one group's median daily swing ≥ 2× another's ...
    "swing_differs_min_share": 0.04,  # ... and ≥ 4% of its level (the others' within 2% AR(1) noise read up to ~3%)
    "end_span_share": 0.0,            # a level "at time T": its last sample at or before T (a share > 0: median over that share of the window)
    "published_differs_share": 0.02,  # published-style and clean figures further apart: show both, say why
    "rate_min_window_h": 6.0,         # a growth rate per hour/day only over a window this long ...
    "rate_min_samples": 10,
    "growth_edge_share": 0.05,        # group growth: each replica's level at the window's start/end is the median over 5% of it           # ... with this many samples; shorter: change over the window only
    # warnings (analysis/warnings.py)
    "identical_min_share": 0.5,       # equal at half the shared timestamps (and 3+ distinct values): one process twice
    "identical_min_points": 5,        # ... and at least this many of them
    "lazyfree_material_share": 0.05,  # LazyFree above 5% of RSS: RSS overstates what the allocator holds
    "age_skew_share": 0.25,           # replicas' process ages at the window start differ by > 25% of the window
    "cpu_saturated_load_per_core": 1.5,
    "ticks_skipped_share": 0.05,      # more than 5% of the sampling ticks skipped (a tick overran): ticks-skipped is a caution
    "host_share_gap": 0.2,            # a host's share of a group's replicas 20 points off its share of all: hosts-unbalanced
    # compare (runcompare.py): a daily cycle of amplitude A shifts a level taken at time-of-day
    # offset d by up to 2A·sin(πd/24): 2 h keeps that ≤ 0.52A (≤ 2.1% for the calibration's 4% cycle);
    # a mean over ≥ 20 h keeps ≤ 0.19A of the cycle (|sin(πL/24)/(πL/24)|), so it is a day average
    "clock_skew_hours": 2.0,          # the runs' levels taken further apart in time of day: times-of-day-differ
    "day_average_hours": 20.0,        # a level averaged over this long is not biased by the time of day
}
