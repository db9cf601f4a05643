"""Every threshold that turns numbers into words, in one table (documented in docs/method/index.md):
the statistics' rules and the analysis' (analysis/ reads this table; there is no second one).

No threshold counts samples where the meaning is a duration: windows and quiet spans are in
seconds, changes in MB or shares of the level, so a series sampled every second and the same
series sampled every 15 minutes get the same word.
"""

from __future__ import annotations

RULES: dict[str, float] = {
    # -- windows
    "min_samples": 8,  # fewer steady samples: "Too short" (nothing can be estimated)
    "min_window_s": 60.0,  # a steady window shorter than a minute: "Too short"
    # -- growth (stats.growth)
    "growth_max_points": 512,  # longer series are averaged into this many equal time bins
    "growth_level": 0.95,  # the change's interval: 95% ...
    "growth_phi_bound": 0.90,  # ... at a 90% upper confidence bound on the residuals' AR(1) φ
    "growth_min_scale_points": 12,  # ... also on 128 / 32 / 16 coarser bins (≥ 12 points) where the fine AR(1) fails there
    "growth_phi_bound_coarse": 0.90,  # ... then at that scale's own 90% bound (noise on two time scales)
    "growth_coarse_trigger": 0.25,  # ... "fails": the median-unbiased variance there above a quarter of the fine bound's
    "growth_pool_min_replicas": 3,  # a group's replicas (≥ 3, windows within 1.25× of their median) narrow each one's
    "growth_pool_window_ratio": 1.25,  # ... interval to t(n−1) × their changes' SD where that is narrower (growth.pooled)
    "growth_pool_widen": 2.5,  # ... and widen it to 2.5 × the SD of the other replicas' changes where that is wider
    "growth_slow_widen": 3.0,  # a replica's own interval: the variance a coarse scale adds counts 3² (growth.pooled)
    "growth_exact_rel": 1e-9,  # residuals below 1e-9 of the level: an exact line, exact answer
    "rate_min_window_s": 6 * 3600.0,  # a rate per hour only over ≥ 6 h ...
    "rate_min_blocks": 8,  # ... resting on ≥ 8 effective independent samples
    "growth_cycle_period_s": 86400.0,  # group growth over ≥ a day: the trend beside a fitted daily cycle ...
    "growth_cycle_harmonics": 2,  # ... of 2 harmonics (24 h and 12 h); also in group Ratcheting's curve (ratchet_group_*)
    # -- status words (stats.status)
    "flat_max_growth_share": 0.05,  # Growing needs a change > 5% of the level over the window ...
    "growing_min_rate_share_day": 0.02,  # ... or, over a window of ≥ growing_rate_min_window_s, a rate > 2% of the level
    # a day (growth.growth_bar_share): a +3%/day leak is Growing over a day, not Flat
    # until its change passes 5% (benchmarks/growth_words.md) ...
    "growing_rate_min_window_s": 86400.0,  # ... (shorter windows: the 5% bar alone; a daily cycle is fitted only over a day)
    "growing_beside_bar_share": 0.5,  # a group "grows beyond the baseline" but Flat on its own: Growing when its own change
    # is ≥ half that bar too (analysis._group_status; a significant excess of 1% beside a
    # daily cycle is no leak: benchmarks/growth_words.md)
    "growing_min_change_mb": 1.0,  # ... and ≥ 1 MB, with its 95% interval above zero
    "bloating_window_share": 0.25,  # Growing by ≥ 25% of the level within the window: "Bloating"
    "variable_iqr_share": 0.25,  # IQR above 25% of the median in the steady window: "Variable"
    "release_min_mb": 1.0,  # a release: a fall from the running peak of ≥ 1 MB ...
    "release_min_share": 0.01,  # ... and ≥ 1% of the level ...
    "release_noise_k": 3.0,  # ... and ≥ 3 × the noise's expected range over the window (÷3 per side)
    "ratchet_min_climb_share": 0.02,  # Ratcheting (steps.step_fit): up-steps climbing ≥ 2% of the level together ...
    "ratchet_max_drawdown": 0.25,  # ... and no down-step of ≥ 25% of that climb (a release)
    # the step fit: steps under AR(1) noise, generalised least squares (benchmarks/calibration.py --part staircases)
    "ratchet_step_points": 1024,  # the window averaged into ≤ 1024 equal time bins (coarser bins blur a step into
    # the noise: +8% staircases at 1% AR(1) φ 0.9, 865 samples: 78% at 256 bins, 98% unbinned)
    "ratchet_step_t": 3.0,  # a step (up or down) enters the fit at |t| ≥ 3 ...
    "ratchet_max_steps": 8,  # ... up to 8 of them
    "ratchet_min_steps": 2,  # Ratcheting: ≥ 2 up-steps climbing ≥ ratchet_min_climb_share together, no down-step
    # of ≥ ratchet_max_drawdown of that climb, and ...
    "ratchet_sharp_t": 4.5,  # ... one step with t ≥ 4.5 beside a smooth curve (a smooth climb has none;
    # + √(2 ln n) − √(2 ln 256) over n > 256 bins, the growth of the largest noise t):
    # false Ratcheting ≤ 1% on flat AR(1) φ ≤ 0.99, two-scale noise, cycles, linear growth
    "ratchet_white_gap": 0.2,  # the noise between the step fit's steps read as a slow AR(1) plus
    # white measurement noise where its lag-2 / lag-1 says φ ≥ 0.2 above its lag-1
    # (steps.step_noise; AR(1) alone: 90% of +8% staircases at φ 0.5 within 0.14):
    # read as AR(1), own-route false Ratcheting 1.0–3.2% on AR(1) φ 0.995 + 0.5% white,
    # 0–2.0% at φ 0.98 (--part staircases; 0–1.0% since)
    "ratchet_white_min_lag2_se": 3.0,  # ... and only where the residuals' lag-2 is ≥ 3/√n (3 standard errors): else a missed
    # step's remains in white noise read as a wander (+8% staircases in 1% white noise,
    # 1.5 d: 90.8% read as AR(1), 80.8% with this floor, --part staircases; on an
    # exploration's draw 88.6% → 46% without it). The step fit's reading only: the
    # group route's null is fitted by likelihood (steps.whittle_noise)
    "ratchet_smooth_degree": 3,  # the smooth curve: a cubic in time (a line left a levelling-off climb's bend to the
    # steps: Ratcheting 16–44% on saturating climbs; 0–1% with the cubic)
    # -- growth beside the baseline's (stats.added_growth): per-replica changes in MB, Welch, Holm
    "beside_margin_share": 0.05,  # "grows as the baseline does": the excess's interval inside ±5% of the group's
    # level over the window (the change its own series would call Flat)
    # a group's replicas lend each other step evidence (steps.ratchet_group, --part ratchet-group): each replica's
    # sharpest up-step beside its own smooth curve that may level off (a cubic + 1 − e^(−u/τ), + the daily cycle's
    # harmonics over ≥ growth_cycle_period_s) against its own null
    # simulated ratchet_group_sims times (that curve + its noise: AR(1) + white by Whittle's likelihood, steps.whittle_noise; everything fitted again in every
    # simulation), the replicas' p's combined by the truncated product (Zaykin 2002) without the smallest ...
    "ratchet_group_min_replicas": 3,  # ... in groups of ≥ 3 usable replicas ...
    "ratchet_group_sims": 399,  # ... 399 simulations a replica (a replica's p ≥ 1/400; 99 lost 4–6 points of
    # staircases found, --part ratchet-combine) ...
    "ratchet_group_stop": 10,  # ... fewer where 10 of them are as extreme as the data (Besag–Clifford) ...
    "ratchet_group_max_tested": 10,  # ... the group tested on its first 10 (cost; the rest simulated only if it is) ...
    "ratchet_group_tau": 0.05,  # ... the product of the p's ≤ 5% (a replica above, or without the shape, costs nothing) ...
    "ratchet_group_alpha": 0.0025,  # ... the group's p ≤ 0.25% (0.5% called flat, cyclic and lone-staircase groups of 3 in
    # up to 1.0% of replicas; 0.25%: ≤ 0.8%, and −2 to −4 points of staircases found) ...
    "ratchet_group_replica_p": 0.25,  # ... then Ratcheting for each replica with the staircase's shape and its own p ≤ 0.25
    # among its simulations that have the shape (session 19; among all of them a flat
    # replica's p passed in 88–95% of those with the shape)
    # steps a group's replicas share in time (stats.ratchet_shared, --part ratchet-shared): the replicas' average has the
    # staircase's shape and a step past ratchet_sharp_t, that step lies beyond the average's own cubic + AR(1) simulated
    # and its second sharp step beyond one step + AR(1) simulated (both fitted to the average) ...
    "ratchet_shared_sims": 399,  # ... 399 simulations each (fewer where 10 are as extreme: ratchet_group_stop) ...
    "ratchet_shared_alpha": 0.005,  # ... the one-step null's p ≤ 0.5%: a false group calls every replica that climbs, so
    # the group's rate is the replicas' (1% let 4 of 400 one-step groups through, seed 13) ...
    "ratchet_shared_sharp_alpha": 0.0025,  # ... the smooth-curve null's ≤ 0.25% (none of 399 as sharp): 47 of 47 staircase
    # groups reach it (2% φ 0.9, n = 5), 0.5% let 4 of 200 smooth-climb groups of 3 through
    "ratchet_shared_replica_t": 3.0,  # a replica's own climb at the shared steps ≥ ratchet_min_climb_share with t ≥ 3
    # (the flat replica beside stepping ones: 0 of 100 called, its t within ±2.1) ...
    "ratchet_shared_apart_t": 1.0,  # ... and t ≥ 1 beside its own cubic at the others' steps (_apart_t): ~N(0, 1) under a
    # smooth climb the group shares, so a false group calls ~1 replica in 6, not all;
    # staircases lose ~4 points (t ≥ 1.5 / 2 lost 10 / 15)
    # -- comparisons (stats.group_tests)
    "alpha": 0.05,  # family-wise error rate (Holm)
    "equivalence_margin": 0.05,  # equivalent: ratio interval inside [1/1.05, 1.05]
    "power_target": 0.80,  # "replicas needed" is for 80% power
    "design_replica_cv": 0.20,  # the design check before a run assumes replicas may differ by 20% ...
    "design_ratio": 0.70,  # ... and asks for 80% power to show a 0.7× (and 1/0.7×) difference
    "permutation_exact_limit": 20000,  # exact permutation p up to this many splits, else sampled
    "permutation_samples": 20000,
    # -- identical-series check (stats.checks)
    "identical_min_shared": 20,  # need ≥ 20 shared timestamps ...
    "identical_min_share": 0.9,  # ... equal at ≥ 90% of them ...
    "identical_min_distinct": 3,  # ... with ≥ 3 distinct equal values (moving together)
    # -- the analysis of a run (analysis/): steady window and warm-up (analysis/replica.py)
    "warmup_steepness": 3.0,  # a start 3x steeper than the second half is a warm-up ...
    "warmup_fraction": 0.9,  # ... which ends when the series first reaches 90% of its late level
    "warmup_max_share": 0.5,  # ... but never drops more than half of the window
    # -- a process's regrowth after it (re)started (analysis/regrowth.py; benchmarks/fleet_realism.py)
    "regrowth_min_samples": 24,  # fitted only on a process with this many samples ...
    "regrowth_min_window_s": 2 * 3600.0,  # ... over at least 2 h
    "regrowth_max_points": 256,  # the fit on ≤ 256 equal time bins (means)
    "regrowth_tau_min_s": 300.0,  # time constants tried: 5 min ...
    "regrowth_tau_max_s": 24 * 3600.0,  # ... to a day ...
    "regrowth_tau_max_share": 1.0,  # ... and at most the process's span (a restart mid-window regrows over what is left)
    "regrowth_tau_grid": 24,  # ... on 24 log-spaced values
    "regrowth_t": 4.0,  # recognised: the deficit's t ≤ −4 (lag-1-widened; τ is chosen from the grid) ...
    "regrowth_min_share": 0.03,  # ... and ≥ 3% of the level at the process start
    "regrowth_steady_share": 0.05,  # the steep part (remaining deficit > 5% of the level) is left out as the warm-up
    # -- the design and the verdict (analysis/design.py, analysis/verdict.py)
    "min_replicas": 3,  # fewer per group: a confound warning
    "start_skew_intervals": 3,  # replicas whose analysed data start further apart: started apart
    # -- segments (analysis/load.py)
    "segment_step_share": 0.3,  # a step of 30%+ between the samples around an event confirms it
    "unexplained_drop_share": 0.5,  # a drop of 50%+ with no event: an unrecorded process restart ...
    "restart_fall_share": 0.3,  # ... or of 30%+ to a level the next samples stay near (a young process)
    "restart_keep_window_share": 0.5,  # restarts inside the window: it ends before the first one when that keeps half of it;
    # replicas restarted earlier are left out of the comparison by name
    # -- windows (analysis/windows.py)
    "sample_tolerance_intervals": 2.5,  # a replica's sample stands for a time up to 2.5 of its own sampling intervals
    # before it (collectors per host sample seconds apart and miss ticks)
    "day_level_s": 86400.0,  # a window of a day or more: each replica's level is the mean of its hourly means
    # over the window's last day (a whole daily cycle), not one end-of-window sample
    "day_level_min_hours": 20,  # ... from a process that ran at least 20 of those 24 hours (younger: its end level)
    "swing_differs_ratio": 2.0,  # daily-swing-differs: one group's median daily swing ≥ 2× another's ...
    "swing_differs_min_share": 0.04,  # ... and ≥ 4% of its level (the others' within 2% AR(1) noise read up to ~3%)
    "end_span_share": 0.0,  # a level "at time T": its last sample at or before T (a share > 0: median over that share of the window)
    "published_differs_share": 0.02,  # published-style and clean figures further apart: show both, say why
    # -- group growth (analysis/__init__.py)
    "growth_edge_share": 0.05,  # group growth: each replica's level at the window's start/end is the median over 5% of it
    # -- warnings (analysis/warnings.py, analysis/duplicates.py)
    "identical_min_points": 5,  # a duplicated replica: this many consecutive equal shared timestamps (analysis/duplicates.py)
    "lazyfree_material_share": 0.05,  # LazyFree above 5% of RSS: RSS overstates what the allocator holds
    "age_skew_share": 0.25,  # replicas' process ages at the window start differ by > 25% of the window
    "cpu_saturated_load_per_core": 1.5,
    "ticks_skipped_share": 0.05,  # more than 5% of the sampling ticks skipped (a tick overran): ticks-skipped is a caution
    "host_share_gap": 0.2,  # a host's share of a group's replicas 20 points off its share of all: hosts-unbalanced
    # -- compare (analysis/two_runs.py): a daily cycle of amplitude A shifts a level taken at time-of-day
    # offset d by up to 2A·sin(πd/24): 2 h keeps that ≤ 0.52A (≤ 2.1% for the calibration's 4% cycle);
    # a mean over ≥ 20 h keeps ≤ 0.19A of the cycle (|sin(πL/24)/(πL/24)|), so it is a day average
    "clock_skew_hours": 2.0,  # the runs' levels taken further apart in time of day: times-of-day-differ
    "day_average_hours": 20.0,  # a level averaged over this long is not biased by the time of day
}
