"""Growth intervals and the status words on simulated series (stats.growth, stats.status.classify,
stats.group_growth, growth pooling): --part status, growth, two-scale, pooled, pooled-short and
growth-frontier of benchmarks/calibration.py.
"""

from __future__ import annotations

import numpy as np

from alloclab.stats import classify, group_growth, growth
from tests import simulated_series as sim

from .common import (
    DESIGNS,
    POOLED_DESIGNS,
    STEPS,
    growth_scales,
    rate,
    row,
    rules_set,
    share,
    shared_daily_cycle,
    words,
)


def status_words(rng: np.random.Generator, n: int) -> None:
    for label, window, dt in DESIGNS:
        t = sim.times(window, dt)
        for phi in (0.9, 0.99):
            ws = words(t, sim.flat(rng, n, t, phi=phi, sd_share=0.02))
            row(
                f"Growing/Bloating on flat AR(1) φ={phi}, 2% noise, {label}",
                f"{share(ws, 'Growing', 'Bloating'):.1%}",
                "≤ 5%",
                n,
            )
            row(f"Ratcheting on flat AR(1) φ={phi}, {label}", f"{share(ws, STEPS):.1%}", "≤ 5%", n)
        ws = words(t, sim.growing(rng, n, t, share=0.10, phi=0.9, sd_share=0.02))
        row(
            f"power: 10% true growth, AR(1) φ=0.9, 2% noise, {label}",
            f"{share(ws, 'Growing', 'Bloating', STEPS):.1%} (Growing {share(ws, 'Growing'):.0%})",
            "stated",
            n,
        )
        ws = words(t, sim.sinusoid(rng, n, t, amplitude_share=0.03, period_s=window / 4))
        row(f"Ratcheting on a sinusoid (3%, 4 periods), {label}", f"{share(ws, STEPS):.1%}", "≤ 5%", n)
        ws = words(t, sim.staircase(rng, n, t, climb_share=0.08, steps=6))
        row(f"Ratcheting on a staircase (6 steps, +8%), {label}", f"{share(ws, STEPS):.1%}", "≥ 90%", n)
        ws = words(t, sim.staircase(rng, n, t, climb_share=0.04, steps=4, sd_share=0.002))
        row(f"Ratcheting on a small staircase (4 steps, +4%), {label}", f"{share(ws, STEPS):.1%}", "stated", n)
    t = sim.times(6 * 3600.0, 60.0)
    ws = words(t, sim.restarts(rng, n, t))
    row(
        "Growing/Bloating/Ratcheting on a restart and regrowth (whole window, 6 h @ 60 s)",
        f"{share(ws, 'Growing', 'Bloating', STEPS):.1%}",
        "stated (segmenting is analysis' job)",
        n,
    )


def growth_coverage(rng: np.random.Generator, n: int) -> None:
    """Coverage of the within-series change interval where it is given, and how often it is
    withheld (never, by construction: the interval rests on a 90% upper bound on φ, which stays
    finite at the unit root), and its power for the 5% growth simulated."""
    for phi in (0.9, 0.95, 0.99):
        for label, window, dt in DESIGNS:
            t = sim.times(window, dt)
            ys = sim.growing(rng, n, t, share=0.05, phi=phi, sd_share=0.02)
            gs = [growth(t, y) for y in ys]
            inside = [g.change_lo <= 5.0 <= g.change_hi for g in gs if g.change_lo is not None]
            none = sum(g.change_lo is None for g in gs)
            taus = window / ((1 + phi) / (1 - phi) * dt)
            cov = f"{np.mean(inside):.1%}" if inside else "–"
            sig = sum(g.change_lo is not None and g.change_lo > 0 for g in gs)
            row(
                f"growth interval coverage where given (5% true, AR(1) φ={phi}, {taus:.0f} true autocorrelation "
                f"times), {label}",
                f"{cov} ({none / n:.0%} withheld; interval above 0 in {sig / n:.0%})",
                "≥ 93%",
                n,
            )
    t = np.arange(20.0) * 43200
    g = growth(t, 100 + 0.5 * t / 3600)
    row(
        "exact line, 20 samples every 12 h",
        f"change {g.change_mb:.1f} MB [{g.change_lo:.1f}–{g.change_hi:.1f}]",
        "exact (114 MB)",
        1,
    )
    white = [growth(t, 100 + rng.normal(0, 2, len(t)) + 10 * t / t[-1]) for _ in range(n)]
    inside = [w.change_lo <= 10.0 <= w.change_hi for w in white if w.change_lo is not None]
    row(
        "sparse series: 20 samples every 12 h, independent noise, +10% true",
        f"{np.mean(inside):.1%} ({sum(w.change_lo is None for w in white) / n:.0%} withheld)",
        "≥ 93%",
        n,
    )


def _group_edges(rng, reps: int, t: np.ndarray, share: float, phi: float, cv: float) -> tuple[np.ndarray, np.ndarray]:
    """Replica levels (lognormal, cv) × (ramp + AR(1) noise); edge levels as analysis takes them:
    medians over the first and last 5% of the window."""
    eff = sim.replica_levels(rng, 1, reps, 1.0, cv)[0]
    ys = eff[:, None] * sim.growing(rng, reps, t, share=share, phi=phi, sd_share=0.02, level=1.0)
    k = max(1, int(0.05 * len(t)))
    return np.median(ys[:, :k], axis=1), np.median(ys[:, -k:], axis=1)


def group_growth_test(rng: np.random.Generator, n: int) -> None:
    """The across-replica growth test (stats.group_growth) as the analysis uses it."""
    t = sim.times(6 * 3600.0, 60.0)
    for phi in (0.95, 0.99):
        for reps in (3, 5):
            false = 0
            for _ in range(n):
                edges = [_group_edges(rng, reps, t, 0.0, phi, 0.10) for _ in range(4)]
                gg = group_growth(
                    {f"g{k}": e[0] for k, e in enumerate(edges)},
                    {f"g{k}": e[1] for k, e in enumerate(edges)},
                    {f"g{k}": t[-1] for k in range(4)},
                )
                false += any(x.word is not None for x in gg.values())
            row(
                f"group growth test: Growing/Bloating on 4 flat groups (AR(1) φ={phi}, 2%, replica cv 10%), n={reps}, 6 h @ 60 s",
                f"{false / n:.1%}",
                "≤ 5%",
                n,
            )
    for reps in (3, 5):
        for phi in (0.95, 0.99):
            hit = 0
            for _ in range(n):
                a, b = _group_edges(rng, reps, t, 0.10, phi, 0.10)
                hit += group_growth({"g": a}, {"g": b}, {"g": t[-1]})["g"].word is not None
            row(
                f"group growth test: power for +10% growth, n={reps}, AR(1) φ={phi}, 2% noise, 6 h @ 60 s",
                f"{hit / n:.1%}",
                "stated",
                n,
            )


def growth_two_scale(rng: np.random.Generator, n: int) -> None:
    """Within-series growth interval under noise on two time scales (stats.growth directly)."""
    for label, window, dt in (
        ("1.5 d @ 10 min", 1.5 * 86400, 600.0),
        ("3 d @ 5 min", 3 * 86400, 300.0),
        ("9 d @ 15 min", 9 * 86400, 900.0),
    ):
        t = sim.times(window, dt)
        ys = sim.two_scale(rng, n, t, fast_phi=0.9)
        gs = [growth(t, y) for y in ys]
        k = sum(g.change_lo <= 0 <= g.change_hi for g in gs)
        row(
            f"growth interval coverage, flat, AR(1) 2% (φ 0.9) + slow wander 3% (τ 1.7 d), {label}",
            rate(k, n),
            "≥ 93%",
            n,
        )
        k = sum(classify(t, y, growth=g).word in ("Growing", "Bloating") for y, g in zip(ys, gs))
        row(f"… replica Growing/Bloating, {label}", rate(k, n), "≤ 1%", n)
        ys = sim.growing(rng, n, t, share=0.10, phi=0.95, sd_share=0.02)
        k = sum(growth(t, y).change_lo > 0 for y in ys)
        row(f"… power: interval above 0 for +10% (AR(1) φ 0.95, 2%), {label}", rate(k, n), "stated", n)


def growth_pooled(
    rng: np.random.Generator,
    n: int,
    sizes: tuple[int, ...] = (5, 3),
    designs=POOLED_DESIGNS,
    only: tuple[str, ...] | None = None,
) -> None:
    """Per-replica growth intervals set by the group's spread (stats.growth_pool / pooled: the own
    interval's slow part widened, narrowed where the group scatters less, widened to its peers'
    spread where they scatter more), and each replica alone (pooled(g, None): a group that cannot
    pool); in brackets session 9's rule on the same series (slow_widen 1).
    Groups of 3 and 5 replicas, each replica's own series; coverage and Growing on flat two-scale
    noise, power for +10% on one-scale AR(1) and on two-scale noise, a lone grower among flat
    replicas, flat AR(1) at φ 0.95 / 0.99, and a daily cycle every replica shares (the spread
    does not see it). `only`: the cells whose names start with these."""
    from alloclab.stats import growth_pool, pooled

    growing_words = ("Growing", "Bloating")

    cycle = shared_daily_cycle(0.01)

    def lone(rng_, m, t):
        y = sim.flat(rng_, m, t, phi=0.95, sd_share=0.02)
        y[0] += 10.0 * (t - t[0]) / (t[-1] - t[0])
        return y

    cells = (
        (
            "flat two-scale (AR(1) 2% φ 0.9 + slow wander 3%, τ 1.7 d)",
            lambda r, m, t: sim.two_scale(r, m, t, fast_phi=0.9),
            0.0,
        ),
        ("+10%, AR(1) 2% φ 0.95", lambda r, m, t: sim.growing(r, m, t, share=0.10, phi=0.95, sd_share=0.02), 10.0),
        (
            "+10% in two-scale noise (AR(1) 2% φ 0.9 + slow wander 3%, τ 1.7 d)",
            lambda r, m, t: sim.two_scale(r, m, t, fast_phi=0.9, share=0.10),
            10.0,
        ),
        ("flat AR(1) 2% φ 0.95", lambda r, m, t: sim.flat(r, m, t, phi=0.95, sd_share=0.02), 0.0),
        ("flat AR(1) 2% φ 0.99", lambda r, m, t: sim.flat(r, m, t, phi=0.99, sd_share=0.02), 0.0),
        ("daily cycle ±4% shared by the group (AR(1) 1% φ 0.9)", cycle, 0.0),
        ("one replica +10% among flat ones (AR(1) 2% φ 0.95): that replica", lone, None),
    )
    cells = tuple(c for c in cells if only is None or c[0].startswith(only))
    for m in sizes:
        for label, window, dt in designs:
            t = sim.times(window, dt)
            for name, make, truth in cells:
                cover = above = word = own_above = own_word = narrow_above = narrow_word = total = 0
                s9 = dict(cover=0, above=0, word=0, own_above=0, own_word=0)  # session 9: slow_widen 1
                for _ in range(n):
                    ys = make(rng, m, t)
                    gs = [growth(t, y) for y in ys]
                    pool = growth_pool([g.change_share for g in gs], [g.window_s for g in gs])
                    for i, (y, g) in enumerate(zip(ys, gs)):
                        if truth is None and i > 0:
                            continue
                        p = pooled(g, pool, key=i)
                        lone = pooled(g, None, key=i)  # the replica alone (its group not pooled)
                        true = (10.0 if i == 0 else 0.0) if truth is None else truth
                        accepted = growing_words  # Growing includes Growing in steps (classify's word)
                        cover += p.change_lo <= true <= p.change_hi
                        above += p.change_lo > 0
                        own_above += lone.change_lo > 0
                        q = pooled(g, pool, key=i, widen=0.0)  # the session-8 rule: narrowed only
                        narrow_above += q.change_lo > 0
                        word += classify(t, y, growth=p).word in accepted
                        if truth == 0.0:
                            own_word += classify(t, y, growth=lone).word in growing_words
                            narrow_word += classify(t, y, growth=q).word in growing_words
                        p9 = pooled(
                            g, pool, key=i, slow_widen=1.0
                        )  # session 9: the own interval's slow part as estimated
                        s9["cover"] += p9.change_lo <= true <= p9.change_hi
                        s9["above"] += p9.change_lo > 0
                        s9["own_above"] += g.change_lo > 0
                        s9["word"] += classify(t, y, growth=p9).word in accepted
                        if truth == 0.0:
                            s9["own_word"] += classify(t, y, growth=g).word in growing_words
                        total += 1
                was = (
                    f"session 9 on these series: {s9['word'] / total:.1%} pooled, {s9['own_word'] / total:.1%} own alone, "
                    f"coverage {s9['cover'] / total:.1%}"
                    if truth == 0.0
                    else f"session 9 on these series: {s9['above'] / total:.1%} pooled, {s9['own_above'] / total:.1%} own alone, "
                    f"a growth word {s9['word'] / total:.1%}"
                )
                if truth == 0.0:
                    row(f"pooled, n = {m}, {name}, {label}: interval coverage", rate(cover, total), "≥ 93%", total)
                    row(
                        f"pooled, n = {m}, {name}, {label}: replicas Growing/Bloating (alone, not pooled; narrowed only)",
                        f"{rate(word, total)} ({rate(own_word, total)}; {narrow_word / total:.1%}) [{was}]",
                        "≤ 1%",
                        total,
                    )
                else:
                    row(
                        f"pooled, n = {m}, {name}, {label}: interval above 0 (alone, not pooled; narrowed only)",
                        f"{rate(above, total)} ({rate(own_above, total)}; {narrow_above / total:.1%}); coverage {cover / total:.1%} [{was}]",
                        "stated" if "two-scale" in name else "stated (≈ 94% before the coarse scales)",
                        total,
                    )
                    row(
                        f"pooled, n = {m}, {name}, {label}: a growth word (Growing/Bloating/Ratcheting)",
                        rate(word, total),
                        "stated",
                        total,
                    )


def _bin_lag1(phi: float, m: float) -> float:
    """Lag-1 autocorrelation of means of m consecutive samples of an AR(1) with this φ."""
    if phi <= 0:
        return 0.0
    if phi >= 1 - 1e-9:
        return 1.0
    a = (1 - phi**m) / (1 - phi)
    return phi * a * a / (m * (1 + phi) / (1 - phi) - 2 * phi * a / (1 - phi))


def _interval_tested_trigger(t: np.ndarray, y: np.ndarray, q: float) -> tuple[float, float, float]:
    """The growth interval with the coarse scales' 90% bound used only where the coarse bins'
    lag-1 autocorrelation rejects the fine AR(1) at its bound (its q-level lower bound on φ above
    what that AR(1) gives at the scale): the alternative trigger of the frontier table."""
    import importlib
    import math

    g = importlib.import_module("alloclab.stats.growth")
    t = t - t[0]
    tb, yb = g.bin_series(t, y, 512)
    nb = len(tb)
    change = g.theil_sen_slope(tb, yb) * t[-1]
    var, phi_hi, _ = g.ar1_bound_var(tb, yb)
    for points in [k for k in (128, 32, 16) if 12 <= k < nb]:
        tk, yk = g.bin_series(tb, yb, points)
        r = yk - np.polyval(np.polyfit(tk, yk, 1), tk)
        if g.phi_for_lag1(float(np.sum(r[1:] * r[:-1]) / np.sum(r * r)), points, q) > _bin_lag1(phi_hi, nb / points):
            var = max(var, g.ar1_bound_var(tk, yk, 0.9)[0])
    half = 1.96 * math.sqrt(var) * t[-1]
    return change, change - half, change + half


def growth_frontier(rng: np.random.Generator, n: int) -> None:
    """Coverage under two-scale noise against power on one-scale AR(1), for the coarse-scale rule's
    settings (RULES growth_coarse_trigger / growth_phi_bound_coarse, scales used) and for a tested
    trigger: every setting on the same series. 'Growing' here: interval above 0 and change > 5%."""
    settings = [
        ("current: trigger 0.25, coarse bound 90%, 128/32/16 bins", 0.25, 0.90, (4, 16, 32)),
        ("trigger 0.35, coarse bound 85%", 0.35, 0.85, (4, 16, 32)),
        ("trigger 0.5, coarse bound 75%", 0.5, 0.75, (4, 16, 32)),
        ("trigger 0.25, coarse bound 90%, 128/32 bins (no 16)", 0.25, 0.90, (4, 16)),
        ("coarse median-unbiased variance always (no bound)", 0.0, 0.5, (4, 16, 32)),
        ("tested trigger (coarse lag-1 rejects the fine AR(1), 80% lower bound)", None, 0.8, None),
    ]
    designs = (
        ("1.5 d @ 10 min", 1.5 * 86400, 600.0),
        ("3 d @ 5 min", 3 * 86400, 300.0),
        ("9 d @ 15 min", 9 * 86400, 900.0),
    )
    data = []
    for label, window, dt in designs:
        t = sim.times(window, dt)
        data.append(
            (
                label,
                t,
                sim.two_scale(rng, n, t, fast_phi=0.9),
                sim.growing(rng, n, t, share=0.10, phi=0.95, sd_share=0.02),
            )
        )

    def measure(name, fn):
        for label, t, flat2, up in data:
            a = [fn(t, y) for y in flat2]
            cov = sum(lo <= 0 <= hi for _, lo, hi in a)
            grow = sum(lo > 0 and c > 5.0 for c, lo, _ in a)
            pw = sum(fn(t, y)[1] > 0 for y in up)
            row(
                f"frontier, {name}, {label}: coverage (two-scale, flat) / 'Growing' (two-scale) / power (+10%, AR(1) φ 0.95 2%)",
                f"{rate(cov, n)} / {rate(grow, n)} / {rate(pw, n)}",
                "≥ 93% / ≤ 1% / as before (94–97%)",
                n,
            )

    def interval(t, y):
        g = growth(t, y)
        return g.change_mb, g.change_lo, g.change_hi

    for name, trig, bound, divs in settings:
        if trig is None:  # its own interval: reads neither setting
            measure(name, lambda t, y, bound=bound: _interval_tested_trigger(t, y, bound))
        else:
            with rules_set(growth_coarse_trigger=trig, growth_phi_bound_coarse=bound), growth_scales(divs):
                measure(name, interval)
