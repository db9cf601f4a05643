"""Calibration of alloclab's statistics by simulation (outside the default test run).

    python benchmarks/calibration.py            # full: the figures in docs/analysis.md
    python benchmarks/calibration.py --quick    # smoke test, ~1 minute, wider error bars
    python benchmarks/calibration.py --part P   # one part; the issue-29 parts and their commands
                                                # are listed in docs/analysis.md ("Issue 29 scenarios")
    python benchmarks/calibration.py --part fleet-realism --datasets 40   # issue 49 (benchmarks/fleet_realism.py)

Prints one markdown table: each figure, what was measured, its target and the number of
simulations. Every simulation is seeded (--seed, default 20261122).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from alloclab.stats import (
    SequentialTest,
    calibration as sim,
    classify,
    compare_to_baseline,
    group_growth,
    growth,
    identical_series,
)
from alloclab.stats.group_tests import holm
from alloclab.stats.rules import RULES
from alloclab.stats.status import status_phrase, truncated_product_p

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


def status_words(rng: np.random.Generator, n: int) -> None:
    for label, window, dt in DESIGNS:
        t = sim.times(window, dt)
        for phi in (0.9, 0.99):
            ws = words(t, sim.flat(rng, n, t, phi=phi, sd_share=0.02))
            row(f"Growing/Bloating on flat AR(1) φ={phi}, 2% noise, {label}", f"{share(ws, 'Growing', 'Bloating'):.1%}", "≤ 5%", n)
            row(f"Ratcheting on flat AR(1) φ={phi}, {label}", f"{share(ws, STEPS):.1%}", "≤ 5%", n)
        ws = words(t, sim.growing(rng, n, t, share=0.10, phi=0.9, sd_share=0.02))
        row(f"power: 10% true growth, AR(1) φ=0.9, 2% noise, {label}", f"{share(ws, 'Growing', 'Bloating', STEPS):.1%} "
            f"(Growing {share(ws, 'Growing'):.0%})", "stated", n)
        ws = words(t, sim.sinusoid(rng, n, t, amplitude_share=0.03, period_s=window / 4))
        row(f"Ratcheting on a sinusoid (3%, 4 periods), {label}", f"{share(ws, STEPS):.1%}", "≤ 5%", n)
        ws = words(t, sim.staircase(rng, n, t, climb_share=0.08, steps=6))
        row(f"Ratcheting on a staircase (6 steps, +8%), {label}", f"{share(ws, STEPS):.1%}", "≥ 90%", n)
        ws = words(t, sim.staircase(rng, n, t, climb_share=0.04, steps=4, sd_share=0.002))
        row(f"Ratcheting on a small staircase (4 steps, +4%), {label}", f"{share(ws, STEPS):.1%}", "stated", n)
    t = sim.times(6 * 3600.0, 60.0)
    ws = words(t, sim.restarts(rng, n, t))
    row("Growing/Bloating/Ratcheting on a restart and regrowth (whole window, 6 h @ 60 s)",
        f"{share(ws, 'Growing', 'Bloating', STEPS):.1%}", "stated (segmenting is analysis' job)", n)


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
            row(f"growth interval coverage where given (5% true, AR(1) φ={phi}, {taus:.0f} true autocorrelation "
                f"times), {label}", f"{cov} ({none / n:.0%} withheld; interval above 0 in {sig / n:.0%})", "≥ 93%", n)
    t = np.arange(20.0) * 43200
    g = growth(t, 100 + 0.5 * t / 3600)
    row("exact line, 20 samples every 12 h", f"change {g.change_mb:.1f} MB [{g.change_lo:.1f}–{g.change_hi:.1f}]",
        "exact (114 MB)", 1)
    white = [growth(t, 100 + rng.normal(0, 2, len(t)) + 10 * t / t[-1]) for _ in range(n)]
    inside = [w.change_lo <= 10.0 <= w.change_hi for w in white if w.change_lo is not None]
    row("sparse series: 20 samples every 12 h, independent noise, +10% true", f"{np.mean(inside):.1%} "
        f"({sum(w.change_lo is None for w in white) / n:.0%} withheld)", "≥ 93%", n)


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
                gg = group_growth({f"g{k}": e[0] for k, e in enumerate(edges)}, {f"g{k}": e[1] for k, e in enumerate(edges)},
                                  {f"g{k}": t[-1] for k in range(4)})
                false += any(x.word is not None for x in gg.values())
            row(f"group growth test: Growing/Bloating on 4 flat groups (AR(1) φ={phi}, 2%, replica cv 10%), n={reps}, 6 h @ 60 s",
                f"{false / n:.1%}", "≤ 5%", n)
    for reps in (3, 5):
        for phi in (0.95, 0.99):
            hit = 0
            for _ in range(n):
                a, b = _group_edges(rng, reps, t, 0.10, phi, 0.10)
                hit += group_growth({"g": a}, {"g": b}, {"g": t[-1]})["g"].word is not None
            row(f"group growth test: power for +10% growth, n={reps}, AR(1) φ={phi}, 2% noise, 6 h @ 60 s", f"{hit / n:.1%}",
                "stated", n)


def comparisons(rng: np.random.Generator, n: int) -> None:
    for reps in (3, 5):
        for dist in ("lognormal", "heavy"):
            a = sim.replica_levels(rng, n, reps, 0.8, 0.10, dist=dist)
            b = sim.replica_levels(rng, n, reps, 1.0, 0.10, dist=dist)
            cov = []
            for x, y in zip(a, b):
                c = compare_to_baseline({"b": y, "a": x}, "b")["a"]
                cov.append(c.ratio_ci[0] <= 0.8 <= c.ratio_ci[1])
            row(f"ratio interval coverage, n={reps}, {dist}, cv 10%, one comparison", f"{np.mean(cov):.1%}", "≥ 93%", n)
        # family: baseline + 3 groups, two truly different
        cov, fam = [], []
        lv = [sim.replica_levels(rng, n, reps, r, 0.10, dist="heavy") for r in (1.0, 1.0, 0.9, 1.2)]
        for i in range(n):
            cs = compare_to_baseline({"base": lv[0][i], "same": lv[1][i], "low": lv[2][i], "high": lv[3][i]}, "base")
            cov.append(all(cs[g].ratio_ci[0] <= r <= cs[g].ratio_ci[1] for g, r in (("same", 1.0), ("low", 0.9), ("high", 1.2))))
        row(f"all three ratio intervals cover, n={reps}, heavy tails, 4 groups", f"{np.mean(cov):.1%}", "≥ 93% (simultaneous)", n)
        lv = [sim.replica_levels(rng, n, reps, 1.0, 0.10) for _ in range(4)]
        for i in range(n):
            cs = compare_to_baseline({f"g{k}": lv[k][i] for k in range(4)}, "g0")
            fam.append(any(c.significant for c in cs.values()))
        row(f"family-wise false positives, 4 groups on one allocator, n={reps}", f"{np.mean(fam):.1%}", "≤ 5%", n)
    for reps, ratio, cv, label in ((3, 0.44, 0.03, "0.44×, cv 3% (the tor relays)"), (3, 0.44, 0.15, "0.44×, cv 15%"),
                                   (5, 0.90, 0.05, "0.90×, cv 5%"), (3, 0.90, 0.05, "0.90×, cv 5%")):
        a, b = sim.replica_levels(rng, n, reps, ratio, cv), sim.replica_levels(rng, n, reps, 1.0, cv)
        sig = [compare_to_baseline({"b": y, "a": x}, "b")["a"].significant for x, y in zip(a, b)]
        row(f"power, n={reps}, {label}", f"{np.mean(sig):.1%}", "stated", n)
    # 3 vs 3 real-data shape: jemalloc 0.44x glibc, 0.42-0.45 spread
    c = compare_to_baseline({"glibc": np.array([100.0, 103.0, 98.0]), "jemalloc": np.array([43.0, 45.0, 44.5])}, "glibc")["jemalloc"]
    row("3 vs 3 at 0.44× (example)", f"p_adj {c.p_adj:.2g}, {c.ratio:.2f}× [{c.ratio_ci[0]:.2f}–{c.ratio_ci[1]:.2f}], "
        f"permutation p {c.p_permutation:.2g}", "significant", 1)
    for reps in (5, 10):
        a, b = sim.replica_levels(rng, n, reps, 1.05, 0.03), sim.replica_levels(rng, n, reps, 1.0, 0.03)
        eq = [compare_to_baseline({"b": y, "a": x}, "b")["a"].equivalent for x, y in zip(a, b)]
        row(f"equivalence claimed when the truth is 1.05× (the margin), n={reps}, cv 3%", f"{np.mean(eq):.1%}", "≤ 5%", n)
        a, b = sim.replica_levels(rng, n, reps, 1.0, 0.03), sim.replica_levels(rng, n, reps, 1.0, 0.03)
        eq = [compare_to_baseline({"b": y, "a": x}, "b")["a"].equivalent for x, y in zip(a, b)]
        row(f"equivalence shown when the truth is 1.00×, n={reps}, cv 3%", f"{np.mean(eq):.1%}", "stated", n)


def _welch_p(la: np.ndarray, lb: np.ndarray) -> np.ndarray:
    """Vectorised Welch p over the last axis (for the naive-peeking reference only)."""
    from scipy import stats as sps
    na, nb = la.shape[-1], lb.shape[-1]
    va, vb = la.var(axis=-1, ddof=1) / na, lb.var(axis=-1, ddof=1) / nb
    se = np.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (na - 1) + vb ** 2 / (nb - 1))
    return 2 * sps.t.sf(np.abs(la.mean(-1) - lb.mean(-1)) / se, df)


def sequential(rng: np.random.Generator, n: int) -> None:
    """3 groups × 5 replicas, 24 h at 60 s, replica effects (cv 5%), AR(1) noise (φ=0.99/min,
    5%) and a drift shared by all replicas; a replica's level at a look is the mean of its series
    so far. Looks every 10 minutes (144); the spending rule spends at doublings from 10 min."""
    t = sim.times(24 * 3600.0, 60.0)[1:]
    look_idx = np.arange(9, len(t), 10)
    for _label, ratio in (("null", 1.0), ("10% lower", 0.9)):
        false_naive = stops = 0
        stop_h, fixed = [], 0
        for _ in range(n):
            eff = sim.replica_levels(rng, 1, 15, 1.0, 0.05)[0]
            eff[5:10] *= ratio
            drift = 1 + 0.05 * (t / t[-1])
            ys = eff[:, None] * drift[None, :] * (1 + sim.ar1(rng, 15, len(t), 0.99, 0.05))
            run_mean = np.cumsum(ys, axis=1) / np.arange(1, len(t) + 1)
            lv = np.log(run_mean[:, look_idx]).T            # looks × replicas
            p1, p2 = _welch_p(lv[:, 5:10], lv[:, :5]), _welch_p(lv[:, 10:], lv[:, :5])
            padj = np.array([holm([a, b]) for a, b in zip(p1, p2)])
            false_naive += bool(np.any(padj.min(axis=1) < 0.05))
            fixed += bool(padj[-1, 0] < 0.05)
            test = SequentialTest(0.05, 2, max_looks=8, first_look_s=600.0)   # 10 min · 2^7 ≤ 24 h
            for _j, i in enumerate(look_idx):
                d = test.update({"base": run_mean[:5, i], "a": run_mean[5:10, i], "b": run_mean[10:, i]}, "base",
                                elapsed_s=float(t[i]))
                if d.stop:
                    stops += 1
                    stop_h.append(t[i] / 3600)
                    break
        if ratio == 1.0:
            row("sequential: false stop, null, 144 looks over 24 h (alpha spending at 8 doublings)", f"{stops / n:.1%}", "≤ 5%", n)
            row("naive peeking (Holm at 0.05 at every look), same data", f"{false_naive / n:.1%}", "reference", n)
        else:
            med = f", median stop {np.median(stop_h):.1f} h" if stop_h else ""
            row("sequential: power for a 10% lower group within 24 h", f"{stops / n:.1%}{med}", "stated", n)
            row("fixed-length 24 h test, same data (group a, Holm)", f"{fixed / n:.1%}", "reference", n)


def _tor_like(rng, n_sims: int, n: int, ratio: float, t: np.ndarray, *, b_like_a: bool,
              seed_share: tuple[float, float] = (0.0, 0.9), rise: float = 0.06) -> tuple[np.ndarray, np.ndarray]:
    """(n_sims, n, len(t)) series of two groups shaped like the Tor model's levels on real runs
    (benchmarks/seed_pairing.py on a 4+4 run and three 5-replica demo runs): group a (glibc-like)
    rises `rise` over the first minutes (time constant 120 s) and keeps a persistent per-replica
    offset (log-sd 3.4%); group b (jemalloc-like) is flat with a log-sd 1.2% offset; seed_share[i]
    of group i's offset variance is replica i's seed, shared with the other group's replica of the
    same index (measured: ~0% for glibc, ~90% for jemalloc). AR(1) noise φ = 0.95 per 2 s sample,
    1.5%; a quarter of the replicas take a ±2% level shift at a random time. b_like_a: b is drawn
    exactly like a (glibc against glibc), at `ratio`."""
    seed_part = rng.normal(size=(n_sims, n))                 # replica i's seed, the same in both groups

    def group(sd, share, rise_, level):
        own = rng.normal(size=(n_sims, n)) * sd * np.sqrt(1 - share)
        off = np.exp(seed_part * sd * np.sqrt(share) + own)
        ys = level * off[..., None] * (1 - rise_ * np.exp(-t / 120.0))[None, None, :]
        ys = ys * (1 + sim.ar1(rng, n_sims * n, len(t), 0.95, 0.015).reshape(n_sims, n, len(t)))
        shift = (rng.random((n_sims, n)) < 0.25)[..., None] * rng.choice([-0.02, 0.02], size=(n_sims, n, 1))
        at = rng.uniform(t[0], t[-1], size=(n_sims, n, 1))
        return ys * (1 + shift * (t[None, None, :] >= at))
    a = group(0.034, seed_share[0], rise, 100.0)
    b = group(0.034, seed_share[0], rise, 100.0 * ratio) if b_like_a else group(0.012, seed_share[1], 0.0, 100.0 * ratio)
    return a, b


def _levels_at(ys: np.ndarray, t: np.ndarray, warm_s: float, looks: list[float]) -> np.ndarray:
    """log of each replica's mean since warm-up at each look: (looks, sims, n)."""
    w = t >= warm_s
    c, k = np.cumsum(np.where(w, ys, 0.0), axis=-1), np.cumsum(w)
    return np.stack([np.log(c[..., i] / k[i]) for i in (int(np.searchsorted(t, x)) for x in looks)])


def tor_verdict(rng: np.random.Generator, n_sims: int) -> None:
    """The Tor model's verdict (glibc against jemalloc 5.3.0, ~4% apart) in a 12-minute run
    (2 s samples), the same Welch-log test at each look. Before: warm-up 20 s, looks at 60, 120, 240,
    480 s at α/(k(k+1)) (no planned end). After (what `run --until-significant --max-duration 12m`
    now does, with the benchmark's warm-up of 120 s): looks at 140, 280, 560 and 710 s, at α·t_k/Σt
    (SequentialTest look_times_s). A replica's level at a look is its mean since warm-up. Then a
    paired test by seed (replica i of every group shares its seed) against Welch at 8 min: on the
    measured variance structure, and on one where the seed is half of both groups' spread."""
    from scipy import stats as sps
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from alloclab.run.stopping import planned_look_times
    t = np.arange(0.0, 720.0 + 1, 2.0)
    designs = {"before (warm-up 20 s, looks 60–480 s, α/(k(k+1)))": (20.0, [60.0, 120.0, 240.0, 480.0], SequentialTest(0.05, 1)),
               "after (warm-up 120 s, planned looks 140/280/560/710 s)":
               (120.0, planned_look_times(140.0, 720.0, 2.0), SequentialTest(0.05, 1, look_times_s=planned_look_times(140.0, 720.0, 2.0)))}
    for n in (6, 12, 16, 20):
        for ratio in (1.0, 0.96):
            a, b = _tor_like(rng, n_sims, n, ratio, t, b_like_a=ratio == 1.0)
            for name, (warm, looks, test) in designs.items():
                if n in (12, 20) and name.startswith("before"):
                    continue
                la, lb = _levels_at(a, t, warm, looks), _levels_at(b, t, warm, looks)
                p = _welch_p(lb, la)                                 # (looks, sims)
                hit = p < np.array([test.alpha_at(k + 1) for k in range(len(looks))])[:, None]
                stopped = hit.any(0)
                first = np.where(stopped, hit.argmax(0), 0)
                if ratio == 1.0:
                    row(f"Tor-like verdict, null (glibc against glibc), {n}+{n}, {name}: false stop within 12 min",
                        f"{stopped.mean():.1%}", "≤ 5%", n_sims)
                    continue
                lower = (lb.mean(-1) < la.mean(-1))[first, np.arange(n_sims)]
                right = stopped & lower
                when = np.array(looks)[first[right]] if right.any() else np.array([np.nan])
                row(f"Tor-like verdict, jemalloc-like 4% lower, {n}+{n}, {name}: verdict within 12 min",
                    f"{right.mean():.1%} (median at {np.nanmedian(when):.0f} s; wrong winner {(stopped & ~right).mean():.1%})",
                    "stated", n_sims)
    at8 = [480.0]
    for label, share, both in (("seed 0% of glibc's, 90% of jemalloc's spread (measured)", (0.0, 0.9), False),
                               ("seed half of both groups' spread", (0.5, 0.5), True)):
        for ratio in (1.0, 0.96):
            n = 6
            a, b = _tor_like(rng, n_sims, n, ratio, t, b_like_a=both, seed_share=share, rise=0.0)
            la, lb = _levels_at(a, t, 20.0, at8)[0], _levels_at(b, t, 20.0, at8)[0]
            pw = _welch_p(lb, la)
            d = lb - la
            se = d.std(-1, ddof=1) / np.sqrt(n)
            pp = 2 * sps.t.sf(np.abs(d.mean(-1)) / se, n - 1)
            cover = (np.abs(d.mean(-1) - np.log(ratio)) <= sps.t.ppf(0.975, n - 1) * se).mean()
            what = "false positives at 0.05" if ratio == 1.0 else "power at 0.05"
            row(f"paired-by-seed t against Welch, one look at 8 min, {n}+{n}, {'null' if ratio == 1.0 else '4% lower'}, "
                f"{label}: {what}", f"paired {np.mean(pp < 0.05):.1%} / Welch {np.mean(pw < 0.05):.1%} "
                f"(paired 95% ratio interval covers {cover:.1%})", "≤ 5%" if ratio == 1.0 else "stated", n_sims)


def identical(rng: np.random.Generator, relays: int, days: float) -> None:
    """Relays sampled every minute for `days`: RSS in kB (4 kB pages), long plateaus at a few
    shared configuration-driven levels, occasional steps: chance coincidences are common."""
    t = np.arange(0.0, days * 86400, 60.0)
    ys = []
    for _ in range(relays):
        base = rng.choice([400_000, 420_000, 450_000]) + 4 * rng.integers(0, 250)
        steps = np.cumsum(rng.random(len(t)) < 1 / 240) * 4 * rng.integers(1, 50)
        wobble = 4 * np.round(sim.ar1(rng, 1, len(t), 0.999, 3.0)[0])
        ys.append(base + steps + wobble)
    false = pairs = 0
    for i in range(relays):
        for j in range(i + 1, relays):
            pairs += 1
            false += bool(identical_series(t, ys[i], t, ys[j]))
    row(f"identical-series false alarms, {relays} relays × {days:g} days at 1 min", f"{false} of {pairs} pairs", "0", pairs)
    keep = rng.random(len(t)) > 0.05
    hit = bool(identical_series(t, ys[0], t[keep], ys[0][keep]))
    row("identical-series: one relay sampled twice (5% of samples missing)", "detected" if hit else "MISSED", "detected", 1)


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    from scipy import stats as sps
    a = 1 - level
    lo = 0.0 if k == 0 else float(sps.beta.ppf(a / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(sps.beta.ppf(1 - a / 2, k + 1, n - k))
    return lo, hi


def shared_daily_cycle(sd: float):
    """A group's series (make(rng, m, t)) with a daily cycle ±4% every replica shares (one phase a
    group, any hour) in each replica's own AR(1) noise at φ 0.9 and this marginal SD."""
    def make(rng_, m, t):
        phase = rng_.uniform(0, 2 * np.pi)
        return 100 * (1 + 0.04 * np.sin(2 * np.pi * t / 86400.0 + phase) + sim.ar1(rng_, m, len(t), 0.9, sd))
    return make


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


def _draw(rng: np.random.Generator, **fixed):
    """A TorUtils-like dataset design with its nuisance parameters drawn (so the figures hold across
    them, not at one setting): sampling 5/10/15 min, AR(1) φ 0.8–0.98 per sample at 1–2%, relay
    offsets lognormal or heavy-tailed (t4) with spread 5–15%, window start at any hour."""
    import torutils_scenarios as ts
    kw = dict(step_s=float(rng.choice([300.0, 600.0, 900.0])), ar_phi=float(rng.uniform(0.8, 0.98)),
              ar_share=float(rng.uniform(0.01, 0.02)), cv=float(rng.uniform(0.05, 0.15)), heavy=bool(rng.random() < 0.5),
              start_hour=float(rng.uniform(0, 24)), level_mb=float(rng.uniform(150, 600)))
    kw.update(fixed)
    return ts.Scenario(**kw)


def scenarios(rng: np.random.Generator, n: int, cycles_only: bool = False) -> None:
    """Through the user path: each dataset written as a TorUtils folder (memory.csv, experiment.json),
    imported with alloclab.torutils.importer.import_torutils and analysed with alloclab.analysis.analyse (what
    `alloclab report` renders into summary.json / replicas.csv / report.md); 4 groups (A, B, C and
    the glibc baseline Z), true ratio 1.00 unless stated."""
    import tempfile

    import torutils_scenarios as ts
    work = Path(tempfile.mkdtemp(prefix="alloclab-calibration-"))
    growing = ("Growing", "Bloating")

    def count(make, what):
        k_group = k_groups = k_rep = k_reps = k_sig = k_warn = k_bloat = k_b = 0
        for i in range(n):
            print(f"  {what}: dataset {i + 1} of {n}", file=sys.stderr, flush=True)
            sc = make()
            a, _ = ts.run_scenario(rng, sc, work)
            k_group += sum(g.status in growing for g in a.groups)
            k_groups += len(a.groups)
            reps = [r for r in a.replicas if r.excluded is None]
            k_rep += sum(r.status in growing for r in reps)
            k_reps += len(reps)
            k_sig += any(g.comparison is not None and g.comparison.significant for g in a.groups)
            k_warn += bool(a.warning("restart-in-window"))
            b = [r for r in a.replicas if r.group == "B"]
            k_bloat += sum(r.status == "Bloating" for r in b)
            k_b += len(b)
        return dict(group=(k_group, k_groups), rep=(k_rep, k_reps), sig=(k_sig, n), warn=(k_warn, n), bloat=(k_bloat, k_b))

    c = count(lambda: _draw(rng, n=5, days=1.5, cycle_share=float(rng.uniform(0.02, 0.08)),
                            cycle_phase=float(rng.uniform(0, 2 * np.pi))), "cycle")
    row("daily cycle 2–8% (shared phase), no trend, 1.5 d, n = 5, window start at any hour: groups Growing/Bloating",
        rate(*c["group"]), "≤ 1%", n)
    row("… replicas Growing/Bloating", rate(*c["rep"]), "stated", n)
    row("… datasets with a significant comparison (family-wise, Holm)", rate(*c["sig"]), "≤ 5%", n)
    c = count(lambda: _draw(rng, n=5, days=float(rng.uniform(1.5, 4)), cycle_share=float(rng.uniform(0.02, 0.08)),
                            cycle_period_s=43200.0, cycle_phase=float(rng.uniform(0, 2 * np.pi))), "cycle12")
    row("12-hour cycle 2–8%, 1.5–4 d, n = 5: groups Growing/Bloating", rate(*c["group"]), "≤ 1%", n)
    row("… replicas Growing/Bloating", rate(*c["rep"]), "stated", n)
    row("… datasets with a significant comparison (family-wise, Holm)", rate(*c["sig"]), "≤ 5%", n)
    if cycles_only:
        import shutil
        shutil.rmtree(work, ignore_errors=True)
        return
    c = count(lambda: _draw(rng, n=5, days=1.5, restart_before_end_s={"B": (2 * 3600.0, 5 * 3600.0)},
                            restart_low=float(rng.uniform(0.25, 0.6)), restart_regrow_s=float(rng.uniform(3, 12)) * 3600), "late")
    row("every relay of group B restarts 2–5 h before the end, no event, n = 5: datasets with a significant comparison",
        rate(*c["sig"]), "≤ 5%", n)
    row("… restart-in-window warning", rate(*c["warn"]), "100%", n)
    row("… B relays called Bloating", rate(*c["bloat"]), "0%", n)
    c = count(lambda: _draw(rng, n=3, days=1.5, restart_before_end_s={"B": (3 * 3600.0, 30 * 3600.0)},
                            restart_low=float(rng.uniform(0.25, 0.6)), restart_regrow_s=float(rng.uniform(3, 12)) * 3600), "any")
    row("every relay of B restarts at any position (3–30 h before the end of 36 h), no event, n = 3: significant comparison",
        rate(*c["sig"]), "≤ 5%", n)
    row("… restart-in-window warning", rate(*c["warn"]), "100%", n)
    row("… B relays called Bloating", rate(*c["bloat"]), "stated", n)
    c = count(lambda: _draw(rng, n=5, days=float(rng.uniform(1.5, 9)), slow_share=0.03, ar_share=0.02,
                            slow_tau_s=1.7 * 86400, step_s=900.0), "twoscale")
    row("two-scale noise (AR(1) 2% + slow wander 3%, τ 1.7 d), flat, 1.5–9 d @ 15 min, n = 5: replicas Growing/Bloating",
        rate(*c["rep"]), "stated", n)
    row("… groups Growing/Bloating", rate(*c["group"]), "≤ 1%", n)
    for reps in (3, 5):
        c = count(lambda: _draw(rng, n=reps, days=float(rng.uniform(1, 9)), heavy=True, cv=0.2), "heavy")
        row(f"null, heavy-tailed relay offsets (t4, spread 20%), n = {reps}: significant comparison", rate(*c["sig"]), "≤ 5%", n)
        c = count(lambda: _draw(rng, n=reps, days=2.0, cv=0.2, ratio={"B": 0.7}), "power")
        row(f"power: B at 0.70×, spread 20%, n = {reps}: datasets with a significant comparison", rate(*c["sig"]), "stated", n)
    import shutil
    shutil.rmtree(work, ignore_errors=True)


def user_path(rng: np.random.Generator, n: int) -> None:
    """The faster path (import_torutils + analyse) against the users' (the `alloclab import torutils`
    and `alloclab report` commands, then summary.json): the same group words, comparisons, p-values
    and warning kinds on every dataset (cycles, late restarts and staircases mixed)."""
    import json
    import subprocess
    import tempfile

    import torutils_scenarios as ts
    exe = str(Path(sys.executable).with_name("alloclab"))
    same = 0
    for k in range(n):
        print(f"  user path: dataset {k + 1} of {n}", file=sys.stderr, flush=True)
        kind = k % 3
        sc = _draw(rng, n=3, days=1.5, cycle_share=0.04 if kind == 0 else 0.0,
                   restart_before_end_s={"B": (2 * 3600.0, 5 * 3600.0)} if kind == 1 else {},
                   staircase={"A": (5, 0.08)} if kind == 2 else {})
        t, mb, _ = ts.series(rng, sc)
        with tempfile.TemporaryDirectory(prefix="alloclab-userpath-") as tmp:
            folder = ts.write_folder(Path(tmp) / "data", t, mb)
            a = ts.analyse_folder(folder)
            subprocess.run([exe, "import", "torutils", str(folder), "-o", str(Path(tmp) / "run")], check=True,
                           capture_output=True)
            subprocess.run([exe, "report", str(Path(tmp) / "run"), "-o", str(Path(tmp) / "rep")], check=True,
                           capture_output=True)
            doc = json.loads((Path(tmp) / "rep" / "summary.json").read_text())
        fast = {(g.name, g.status, g.comparison.status if g.comparison else None,
                 None if g.comparison is None or g.comparison.p_holm is None else round(g.comparison.p_holm, 9))
                for g in a.groups}
        slow = {(g["group"], g["status"], g["comparison"], None if g["p_holm"] is None else round(g["p_holm"], 9))
                for g in doc["groups"]}
        kinds_fast, kinds_slow = sorted(w.kind for w in a.warnings), sorted(w["kind"] for w in doc["warnings"])
        same += fast == slow and kinds_fast == kinds_slow
        if not (fast == slow and kinds_fast == kinds_slow):
            print(f"  differs: {fast ^ slow} {kinds_fast} {kinds_slow}", file=sys.stderr)
    row("user path: import_torutils + analyse against `alloclab import torutils` + `alloclab report` (summary.json): "
        "same words, comparisons, Holm p and warning kinds", f"{same} of {n} datasets", "all", n)


def growth_two_scale(rng: np.random.Generator, n: int) -> None:
    """Within-series growth interval under noise on two time scales (stats.growth directly)."""
    for label, window, dt in (("1.5 d @ 10 min", 1.5 * 86400, 600.0), ("3 d @ 5 min", 3 * 86400, 300.0),
                              ("9 d @ 15 min", 9 * 86400, 900.0)):
        t = sim.times(window, dt)
        ys = sim.two_scale(rng, n, t, fast_phi=0.9)
        gs = [growth(t, y) for y in ys]
        k = sum(g.change_lo <= 0 <= g.change_hi for g in gs)
        row(f"growth interval coverage, flat, AR(1) 2% (φ 0.9) + slow wander 3% (τ 1.7 d), {label}", rate(k, n), "≥ 93%", n)
        k = sum(classify(t, y, growth=g).word in ("Growing", "Bloating") for y, g in zip(ys, gs))
        row(f"… replica Growing/Bloating, {label}", rate(k, n), "≤ 1%", n)
        ys = sim.growing(rng, n, t, share=0.10, phi=0.95, sd_share=0.02)
        k = sum(growth(t, y).change_lo > 0 for y in ys)
        row(f"… power: interval above 0 for +10% (AR(1) φ 0.95, 2%), {label}", rate(k, n), "stated", n)


def staircases(rng: np.random.Generator, n: int) -> None:
    """Ratcheting (stats.status.classify, both routes) at realistic noise: +8% in five uneven steps
    with AR(1) 1–2% at φ 0.5 / 0.9 per sample; and how often it is said of flat AR(1) (φ 0.5–0.99),
    flat two-scale noise (AR(1) 2% φ 0.9 + slow wander 3%, τ 1.7 d), a daily cycle ±4% (phase
    drawn per series, AR(1) 1% φ 0.9), a smooth +10% climb (AR(1) 2% φ 0.9: Growing, not
    Ratcheting), climbs that level off, and a slow wander with white measurement noise
    (JITTERED); last, staircases in near-white noise (φ 0 and 0.2), in the TorUtils designs. 95% Clopper–Pearson intervals."""
    def said(t, ys, *accepted):
        ws = words(t, ys)
        return rate(sum(w in accepted for w in ws), len(ws))
    for label, window, dt in POOLED_DESIGNS:
        t = sim.times(window, dt)
        for sd, phi in ((0.01, 0.5), (0.01, 0.9), (0.02, 0.5), (0.02, 0.9)):
            row(f"Ratcheting on +8% five-step staircases, AR(1) {sd:.0%} φ {phi}, {label}",
                said(t, sim.staircase(rng, n, t, climb_share=0.08, steps=5, sd_share=sd, phi=phi), STEPS), "≥ 80%", n)
        for phi in (0.5, 0.9, 0.95, 0.99):
            row(f"Ratcheting on flat AR(1) 2% φ {phi}, {label}", said(t, sim.flat(rng, n, t, phi=phi, sd_share=0.02), STEPS),
                "≤ 1%", n)
        row(f"Ratcheting on flat two-scale noise (AR(1) 2% φ 0.9 + slow wander 3%, τ 1.7 d), {label}",
            said(t, sim.two_scale(rng, n, t, fast_phi=0.9), STEPS), "≤ 1%", n)
        row(f"Ratcheting on a daily cycle ±4% (any phase) with AR(1) 1% φ 0.9, {label}",
            said(t, sim.sinusoid(rng, n, t, amplitude_share=0.04, period_s=86400.0, sd_share=0.01, phi=0.9), STEPS), "≤ 1%", n)
        ys = sim.growing(rng, n, t, share=0.10, phi=0.9, sd_share=0.02)
        ws = words(t, ys)
        row(f"Ratcheting on a smooth +10% climb, AR(1) 2% φ 0.9, {label} (Growing/Bloating)",
            f"{rate(ws.count(STEPS), n)} ({share(ws, 'Growing', 'Bloating'):.1%})", "≤ 1%", n)
        for tau, sd, phi in LEVELLING_OFF:
            row(f"Ratcheting on a climb that levels off (+15%, τ {tau:.0%} of the window), AR(1) {sd:.0%} φ {phi}, {label}",
                said(t, sim.levelling_off(rng, n, t, tau_share=tau, sd_share=sd, phi=phi), STEPS), "≤ 1%", n)
    # session 16's cells after every design's earlier ones, so that those draw as before
    for label, window, dt in POOLED_DESIGNS:
        t = sim.times(window, dt)
        for phi, sd, white in JITTERED:
            row(f"Ratcheting on a flat slow wander with measurement noise (AR(1) {sd:.0%} φ {phi} + white {white:.1%}), {label}",
                said(t, sim.jittered(rng, n, t, sd_share=sd, phi=phi, white_share=white), STEPS), "≤ 1%", n)
        for sd, phi in ((0.01, 0.0), (0.015, 0.2)):   # what reading a wander in the residuals costs (status._step_noise)
            row(f"Ratcheting on +8% five-step staircases in near-white noise, AR(1) {sd:.1%} φ {phi}, {label}",
                said(t, sim.staircase(rng, n, t, climb_share=0.08, steps=5, sd_share=sd, phi=phi), STEPS), "stated", n)


# a slow wander sampled with white measurement noise (φ, SD, white SD): the step fit's lag-1 read it as fast
# noise until status._step_noise (own route 1.0–3.2% Ratcheting at φ 0.995, 0–2.0% at φ 0.98)
JITTERED = ((0.995, 0.02, 0.005), (0.98, 0.01, 0.005))


def jittered_maker(phi: float, sd: float, white: float):
    """A cell's series maker (rng, series, t) for AR(1) at φ and SD plus white noise (sim.jittered)."""
    return lambda r, m, t: sim.jittered(r, m, t, sd_share=sd, phi=phi, white_share=white)


def staircase_maker(sd: float, phi: float):
    """A cell's series maker (rng, series, t) for +8% five-step staircases in AR(1) noise at SD and φ."""
    return lambda r, m, t: sim.staircase(r, m, t, climb_share=0.08, steps=5, sd_share=sd, phi=phi)
# climbs that level off (a relay approaching its ceiling): fast and slow bends, quiet and noisy
LEVELLING_OFF = ((0.15, 0.01, 0.9), (0.3, 0.02, 0.95), (1.0, 0.02, 0.95))


POOLED_DESIGNS = (("1.5 d @ 10 min", 1.5 * 86400, 600.0), ("3 d @ 5 min", 3 * 86400, 300.0),
                  ("9 d @ 15 min", 9 * 86400, 900.0))
# windows as long as the slow wander's autocorrelation time (1.7 d) or shorter
SHORT_DESIGNS = (("0.5 d @ 5 min", 0.5 * 86400, 300.0), ("1 d @ 5 min", 86400.0, 300.0),
                 ("1.7 d @ 10 min", 1.7 * 86400, 600.0))


def growth_pooled(rng: np.random.Generator, n: int, sizes: tuple[int, ...] = (5, 3), designs=POOLED_DESIGNS,
                  only: tuple[str, ...] | None = None) -> None:
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
    cells = (("flat two-scale (AR(1) 2% φ 0.9 + slow wander 3%, τ 1.7 d)", lambda r, m, t: sim.two_scale(r, m, t, fast_phi=0.9), 0.0),
             ("+10%, AR(1) 2% φ 0.95", lambda r, m, t: sim.growing(r, m, t, share=0.10, phi=0.95, sd_share=0.02), 10.0),
             ("+10% in two-scale noise (AR(1) 2% φ 0.9 + slow wander 3%, τ 1.7 d)",
              lambda r, m, t: sim.two_scale(r, m, t, fast_phi=0.9, share=0.10), 10.0),
             ("flat AR(1) 2% φ 0.95", lambda r, m, t: sim.flat(r, m, t, phi=0.95, sd_share=0.02), 0.0),
             ("flat AR(1) 2% φ 0.99", lambda r, m, t: sim.flat(r, m, t, phi=0.99, sd_share=0.02), 0.0),
             ("daily cycle ±4% shared by the group (AR(1) 1% φ 0.9)", cycle, 0.0),
             ("one replica +10% among flat ones (AR(1) 2% φ 0.95): that replica", lone, None))
    cells = tuple(c for c in cells if only is None or c[0].startswith(only))
    for m in sizes:
        for label, window, dt in designs:
            t = sim.times(window, dt)
            for name, make, truth in cells:
                cover = above = word = own_above = own_word = narrow_above = narrow_word = total = 0
                s9 = dict(cover=0, above=0, word=0, own_above=0, own_word=0)   # session 9: slow_widen 1
                for _ in range(n):
                    ys = make(rng, m, t)
                    gs = [growth(t, y) for y in ys]
                    pool = growth_pool([g.change_share for g in gs], [g.window_s for g in gs])
                    for i, (y, g) in enumerate(zip(ys, gs)):
                        if truth is None and i > 0:
                            continue
                        p = pooled(g, pool, key=i)
                        lone = pooled(g, None, key=i)                 # the replica alone (its group not pooled)
                        true = (10.0 if i == 0 else 0.0) if truth is None else truth
                        accepted = growing_words     # Growing includes Growing in steps (classify's word)
                        cover += p.change_lo <= true <= p.change_hi
                        above += p.change_lo > 0
                        own_above += lone.change_lo > 0
                        q = pooled(g, pool, key=i, widen=0.0)         # the session-8 rule: narrowed only
                        narrow_above += q.change_lo > 0
                        word += classify(t, y, growth=p).word in accepted
                        if truth == 0.0:
                            own_word += classify(t, y, growth=lone).word in growing_words
                            narrow_word += classify(t, y, growth=q).word in growing_words
                        p9 = pooled(g, pool, key=i, slow_widen=1.0)   # session 9: the own interval's slow part as estimated
                        s9["cover"] += p9.change_lo <= true <= p9.change_hi
                        s9["above"] += p9.change_lo > 0
                        s9["own_above"] += g.change_lo > 0
                        s9["word"] += classify(t, y, growth=p9).word in accepted
                        if truth == 0.0:
                            s9["own_word"] += classify(t, y, growth=g).word in growing_words
                        total += 1
                was = (f"session 9 on these series: {s9['word'] / total:.1%} pooled, {s9['own_word'] / total:.1%} own alone, "
                       f"coverage {s9['cover'] / total:.1%}" if truth == 0.0 else
                       f"session 9 on these series: {s9['above'] / total:.1%} pooled, {s9['own_above'] / total:.1%} own alone, "
                       f"a growth word {s9['word'] / total:.1%}")
                if truth == 0.0:
                    row(f"pooled, n = {m}, {name}, {label}: interval coverage", rate(cover, total), "≥ 93%", total)
                    row(f"pooled, n = {m}, {name}, {label}: replicas Growing/Bloating (alone, not pooled; narrowed only)",
                        f"{rate(word, total)} ({rate(own_word, total)}; {narrow_word / total:.1%}) [{was}]", "≤ 1%", total)
                else:
                    row(f"pooled, n = {m}, {name}, {label}: interval above 0 (alone, not pooled; narrowed only)",
                        f"{rate(above, total)} ({rate(own_above, total)}; {narrow_above / total:.1%}); coverage {cover / total:.1%} [{was}]",
                        "stated" if "two-scale" in name else "stated (≈ 94% before the coarse scales)", total)
                    row(f"pooled, n = {m}, {name}, {label}: a growth word (Growing/Bloating/Ratcheting)", rate(word, total), "stated", total)


def pooled_path(rng: np.random.Generator, n: int) -> None:
    """The pooled replica intervals through the user path (import_torutils + analyse): 4 groups of
    5 relays over 3 days at 15 minutes, nuisance parameters drawn as in --part scenarios; flat
    two-scale noise (AR(1) 2% + slow wander 3%, τ 1.7 d), then group A growing +10% with one-scale
    AR(1) 2% (φ 0.8–0.98 per sample)."""
    import shutil
    import tempfile

    import torutils_scenarios as ts
    work = Path(tempfile.mkdtemp(prefix="alloclab-calibration-"))
    growing = ("Growing", "Bloating")
    cover = word = grp = total = groups = 0
    for i in range(n):
        print(f"  pooled path, two-scale: dataset {i + 1} of {n}", file=sys.stderr, flush=True)
        a, _ = ts.run_scenario(rng, _draw(rng, n=5, days=3.0, step_s=900.0, slow_share=0.03, ar_share=0.02), work)
        reps = [r for r in a.replicas if r.excluded is None and r.change_lo is not None]
        cover += sum(r.change_lo <= 0 <= r.change_hi for r in reps)
        word += sum(r.status in growing for r in reps)
        total += len(reps)
        grp += sum(g.status in growing for g in a.groups)
        groups += len(a.groups)
    row("through import + analyse, flat two-scale, 3 d @ 15 min, n = 5: replica interval coverage", rate(cover, total), "≥ 93%", total)
    row("… replicas Growing/Bloating", rate(word, total), "≤ 1%", total)
    row("… groups Growing/Bloating", rate(grp, groups), "≤ 1%", groups)
    above = word = total = 0
    for i in range(n):
        print(f"  pooled path, +10%: dataset {i + 1} of {n}", file=sys.stderr, flush=True)
        a, _ = ts.run_scenario(rng, _draw(rng, n=5, days=3.0, step_s=900.0, ar_share=0.02, growth={"A": 0.10}), work)
        reps = [r for r in a.replicas if r.group == "A" and r.excluded is None and r.change_lo is not None]
        above += sum(r.change_lo > 0 for r in reps)
        word += sum(r.status in growing for r in reps)     # Growing includes Growing in steps
        total += len(reps)
    row("… group A +10%, AR(1) 2% φ 0.8–0.98: replica interval above 0", rate(above, total), "stated", total)
    row("… A replicas with a growth word", rate(word, total), "stated", total)
    shutil.rmtree(work, ignore_errors=True)


BESIDE_DESIGNS = (("1 h @ 5 s", 1 / 24, 5.0, 20 * 60.0), ("1.5 d @ 10 min", 1.5, 600.0, 1.7 * 86400))


def _beside_dataset(rng, days, step, slow_tau, m, slow, quiet, growth, **extra):
    """One --part beside design: the glibc baseline Z at 400–900 MB, A, B, C at 0.25×, every relay
    growing by the workload's own MB (the same in every group); `extra` sets further Scenario fields
    (a cycle, restarts) without drawing, so a dataset with and without them shares its draws."""
    import dataclasses

    import torutils_scenarios as ts
    level = float(rng.uniform(400, 900))
    sc = ts.Scenario(n=m, days=days, step_s=step, level_mb=level, ratio={"A": 0.25, "B": 0.25, "C": 0.25},
                     cv=float(rng.uniform(0.03, 0.10)), ar_phi=float(rng.uniform(0.8, 0.98)),
                     ar_share=float(rng.uniform(0.003, 0.005) if quiet else rng.uniform(0.01, 0.02)),
                     slow_share=0.03 if slow else 0.0,
                     slow_tau_s=slow_tau, start_hour=float(rng.uniform(0, 24)),
                     shared_growth_mb=0.25 * level * float(rng.uniform(0.10, 0.25)), shared_growth_cv=0.1,
                     growth=growth)
    return dataclasses.replace(sc, **extra)


BESIDE_CYCLE_DESIGNS = (("1.5 d @ 10 min", 1.5, 600.0), ("3 d @ 10 min", 3.0, 600.0))


def beside_cycle_restart(rng: np.random.Generator, n: int, sizes: tuple[int, ...] = (5, 3),
                         cells: tuple[str, ...] | None = None) -> None:
    """Growth beside the baseline (stats.added_growth) through import_torutils + analyse, on --part
    beside's design (AR(1) 1–2% φ 0.8–0.98, the workload's growth the same MB in every group, true
    excess 0) with (a) a ±4% daily cycle every relay shares (a share of its own level, on the UTC
    clock; the window starts at any hour), 1.5 d and 3 d at 10 min: each null dataset analysed
    again without the cycle on the same draws, so the cycle's effect on the MB difference is
    measured pair by pair; power for A +5%, B +10%, C +25% of their level beyond the baseline under
    the cycle; (b) every relay of group A restarting 2–5 h before the end (a young level 25–60%,
    regrowth 3–12 h), unrecorded or recorded in events.csv, 1.5 d @ 10 min, true excess 0. Rates of
    each word, family-wise over the 3 groups for the false "grows beyond" / "grows less than"."""
    import shutil
    import tempfile

    import torutils_scenarios as ts

    from alloclab.stats.added_growth import AS, BEYOND, LESS, NO_MORE, UNKNOWN
    work = Path(tempfile.mkdtemp(prefix="alloclab-calibration-"))
    base = int(rng.integers(2 ** 62))
    specs = [(f"{label}; n = {m}; cycle ±4%", days, step, m, "cycle") for label, days, step in BESIDE_CYCLE_DESIGNS for m in sizes]
    specs += [(f"1.5 d @ 10 min; n = {m}; every relay of A restarts 2–5 h before the end, {how}", 1.5, 600.0, m, how)
              for m in sizes for how in ("unrecorded", "recorded")]
    for k, (cell, days, step, m, kind) in enumerate(specs):
        if cells and not cell.startswith(cells):
            continue
        r = np.random.default_rng([base, k])
        beyond = less = plain_beyond = plain_less = 0
        said = dict.fromkeys((BEYOND, LESS, AS, NO_MORE, UNKNOWN, None), 0)
        shift, plain = [], []        # the cycle's effect on each excess (share of the level), the excess without it
        power = {"A": 0, "B": 0, "C": 0}
        warned = groups = 0
        started = time.monotonic()
        for i in range(n):
            print(f"  beside {cell}: dataset {i + 1} of {n}", file=sys.stderr, flush=True)
            seed = int(r.integers(2 ** 62))
            if kind == "cycle":
                extra = dict(cycle_share=0.04)
            else:
                extra = dict(restart_before_end_s={"A": (2 * 3600.0, 5 * 3600.0)}, restart_low=float(r.uniform(0.25, 0.6)),
                             restart_regrow_s=float(r.uniform(3, 12)) * 3600, restart_recorded=kind == "recorded")
            a, _ = ts.run_scenario(np.random.default_rng([seed, 1]), _beside_dataset(np.random.default_rng([seed, 0]), days, step, 0.0,
                                                                                m, False, False, {}, **extra), work)
            got = {g.name: g.growth_beside for g in a.groups if g.name != "Z"}
            beyond += any(b is not None and b.word == BEYOND for b in got.values())
            less += any(b is not None and b.word == LESS for b in got.values())
            for b in got.values():
                said[None if b is None else b.word] += 1
            groups += len(got)
            warned += bool(a.warning("restart-in-window"))
            if kind == "cycle":
                a0, _ = ts.run_scenario(np.random.default_rng([seed, 1]), _beside_dataset(np.random.default_rng([seed, 0]), days, step,
                                                                                     0.0, m, False, False, {}), work)
                plain_beyond += any(g.growth_beside is not None and g.growth_beside.word == BEYOND for g in a0.groups)
                plain_less += any(g.growth_beside is not None and g.growth_beside.word == LESS for g in a0.groups)
                for g in a0.groups:
                    b0, b = g.growth_beside, got.get(g.name)
                    if b0 is not None and b is not None and b0.level_mb > 0:
                        shift.append((b.excess_mb - b0.excess_mb) / b0.level_mb)
                        plain.append(b0.excess_mb / b0.level_mb)
                seed2 = int(r.integers(2 ** 62))
                a1, _ = ts.run_scenario(np.random.default_rng([seed2, 1]), _beside_dataset(
                    np.random.default_rng([seed2, 0]), days, step, 0.0, m, False, False, {"A": 0.05, "B": 0.10, "C": 0.25}, **extra), work)
                for g in a1.groups:
                    if g.name in power:
                        power[g.name] += g.growth_beside is not None and g.growth_beside.word == BEYOND
        took = (time.monotonic() - started) / n
        row(f"beside, {cell}, true excess 0: datasets with a false \"grows beyond the baseline\" / \"grows less than\" "
            "(family-wise, 3 groups)", f"{rate(beyond, n)} / {rate(less, n)}", "≤ 5%", n)
        row("… groups: as / no more than / less than / beyond / cannot tell / not compared",
            " / ".join(f"{said[w] / groups:.1%}" for w in (AS, NO_MORE, LESS, BEYOND, UNKNOWN, None)), "stated", groups)
        if kind == "cycle":
            sh, pl = np.array(shift), np.array(plain)
            row("… the same datasets without the cycle: false \"grows beyond\" / \"grows less than\"",
                f"{rate(plain_beyond, n)} / {rate(plain_less, n)}", "≤ 5%", n)
            row("… the cycle's effect on the excess (with − without, share of the level): mean / SD / largest |·|; "
                "the excess's own SD without the cycle", f"{sh.mean():+.2%} / {sh.std(ddof=1):.2%} / {np.abs(sh).max():.2%}; "
                f"{pl.std(ddof=1):.2%}", "≈ 0", len(sh))
            row(f"beside, {cell}: power, \"grows beyond\" for A +5% / B +10% / C +25% of the level beyond the baseline",
                " / ".join(rate(power[g], n) for g in "ABC"), "stated", n)
        else:
            row("… restart-in-window warning", rate(warned, n), "100%", n)
        print(f"  ({took:.1f} s a dataset)", file=sys.stderr, flush=True)
    shutil.rmtree(work, ignore_errors=True)


def beside(rng: np.random.Generator, n: int, sizes: tuple[int, ...] = (3, 5), cells: tuple[str, ...] | None = None) -> None:
    """The growth beside the baseline's (stats.added_growth) through import_torutils + analyse: the
    glibc baseline Z at 400–900 MB, groups A, B, C at 0.25× (levels 4× apart, as in the tor run),
    every relay growing by the workload's own MB (the same in every group: 10–25% of the small
    groups' level over the window, each relay's within ±10% of it), AR(1) noise 1–2% of the level
    (φ 0.8–0.98 per sample), or that plus a slow wander of 3% (τ 20 min in the hour, 1.7 d over
    1.5 days), or quiet AR(1) of 0.3–0.5% (the 16-thread tor hour's relays: glibc's changes
    scattered by 3 MB on 770). Null: no allocator growth — a "grows beyond" for any group is false (family-wise).
    Alternatives in one dataset: A grows +10% of its level beyond the workload, B +25%, C +5% (the
    margin: any word that rephrases the caution, as / less than / no more than, is false there).
    Each cell has its own stream, so `--cells "1 h @ 5 s; n = 3"` reproduces that cell's figures
    (the cells can run in parallel processes)."""
    import shutil
    import tempfile

    import torutils_scenarios as ts

    from alloclab.stats.added_growth import BEYOND, NOT_BEYOND
    work = Path(tempfile.mkdtemp(prefix="alloclab-calibration-"))

    base = int(rng.integers(2 ** 62))
    dataset = _beside_dataset

    for d, (label, days, step, slow_tau) in enumerate(BESIDE_DESIGNS):
        for m in sizes:
            for k, (noise, slow, quiet) in enumerate((("AR(1)", False, False), ("two-scale", True, False),
                                                      ("quiet AR(1)", False, True))):
                cell = f"{label}; n = {m}; {noise}"
                if cells and not cell.startswith(cells):
                    continue
                rng = np.random.default_rng([base, d, m, k])
                k_null = k_growing = k_said = k_groups = 0
                words = {"A": 0, "B": 0, "C": 0}
                for i in range(n):
                    print(f"  beside {cell}: dataset {i + 1} of {n}", file=sys.stderr, flush=True)
                    a, _ = ts.run_scenario(rng, dataset(rng, days, step, slow_tau, m, slow, quiet, {}), work)
                    k_null += any(g.growth_beside is not None and g.growth_beside.word == BEYOND for g in a.groups)
                    k_growing += any(g.status in ("Growing", "Bloating") for g in a.groups if g.name != "Z")
                    k_said += sum(g.growth_beside is not None and g.growth_beside.word in NOT_BEYOND for g in a.groups)
                    k_groups += sum(g.name != "Z" for g in a.groups)
                    a, _ = ts.run_scenario(rng, dataset(rng, days, step, slow_tau, m, slow, quiet, {"A": 0.10, "B": 0.25, "C": 0.05}),
                                           work)
                    b = {g.name: g.growth_beside for g in a.groups}
                    words["A"] += b["A"] is not None and b["A"].word == BEYOND
                    words["B"] += b["B"] is not None and b["B"].word == BEYOND
                    words["C"] += b["C"] is not None and b["C"].word in NOT_BEYOND
                row(f"beside, {cell}, shared workload growth only: datasets with a false \"grows beyond the baseline\" "
                    "(family-wise, 3 groups)", rate(k_null, n), "≤ 5%", n)
                row("… datasets whose small groups' status says Growing/Bloating (the workload's growth)",
                    rate(k_growing, n), "stated", n)
                row("… groups shown to grow as / less than / no more than the baseline (the caution rephrased)",
                    rate(k_said, k_groups), "stated", k_groups)
                row(f"beside, {cell}: power, +10% of its level beyond the workload", rate(words["A"], n), "stated", n)
                row(f"beside, {cell}: power, +25%", rate(words["B"], n), "stated", n)
                row(f"beside, {cell}: excess at the margin (+5%): called as / less than / no more than the baseline",
                    rate(words["C"], n), "≤ 5%", n)
    shutil.rmtree(work, ignore_errors=True)


def staircase_reach(rng: np.random.Generator, n: int) -> None:
    """What the Ratcheting rule reaches at 2% AR noise: the same five-step staircases with a taller
    climb (+8 / +16 / +24%), and at 1.5% noise, in the two TorUtils designs."""
    for label, window, dt in (("1.5 d @ 10 min", 1.5 * 86400, 600.0), ("9 d @ 15 min", 9 * 86400, 900.0)):
        t = sim.times(window, dt)
        for sd, phi in ((0.015, 0.5), (0.015, 0.9), (0.02, 0.5), (0.02, 0.9)):
            for climb in (0.08, 0.16, 0.24):
                if sd == 0.015 and climb != 0.08:
                    continue
                ws = words(t, sim.staircase(rng, n, t, climb_share=climb, steps=5, sd_share=sd, phi=phi))
                row(f"Ratcheting on +{climb:.0%} five-step staircases, AR(1) {sd:.1%} φ {phi}, {label}",
                    rate(sum(w == STEPS for w in ws), n), "stated (what is reachable)", n)


def ratchet_restarts(rng: np.random.Generator, n: int, cells: tuple[str, ...] | None = None) -> None:
    """False Ratcheting when replicas restart inside the window, through the user path (a TorUtils
    folder imported with import_torutils and analysed with analyse: the words an operator gets,
    own route and group route together). 4 groups of 5 relays, 1.5 d @ 10 min, window at any hour,
    relay offsets lognormal or t4 (spread 5–15%), levels 150–600 MB; noise AR(1) 2% φ 0.9, alone
    (flat) or under a ±4% daily cycle shared by every relay (the clock). Restarts of one relay of
    group B or of every relay of B, each at its own position (5–95% of the window, counted by third:
    early / middle / late), recorded (events.csv, a `restart` naming the relay) or not: a fall to a
    young level (25–60% of the old) regrowing towards it (time constant 3–12 h). Counted per relay
    (Ratcheting, and by which route: the group route's reason names its combined p) and per group
    (the group's word). Then a +8% five-step staircase in group A (AR(1) 1% φ 0.9) with every relay
    of A restarting, or one, or none: is it still found? And the staircase at AR(1) 2% φ 0.9 with no
    restart (issue 29's audit cell, as an operator gets it). Each cell its own stream (`--cells`); every
    Ratcheting relay is printed to stderr with its restart's position and its reason."""
    import shutil
    import tempfile

    import torutils_scenarios as ts
    work = Path(tempfile.mkdtemp(prefix="alloclab-calibration-"))
    base = int(rng.integers(2 ** 62))
    thirds = ("early", "middle", "late")

    def design(r, noise, rec, relays, group, stair):
        # stair: the staircase cells' AR(1) SD (their group A steps), else False
        return ts.Scenario(n=5, days=1.5, step_s=600.0, ar_phi=0.9, ar_share=stair or 0.02,
                           cv=float(r.uniform(0.05, 0.15)), heavy=bool(r.random() < 0.5), start_hour=float(r.uniform(0, 24)),
                           level_mb=float(r.uniform(150, 600)), cycle_share=0.04 if noise == "cycle" else 0.0,
                           cycle_phase=float(r.uniform(0, 2 * np.pi)),
                           restart_share={group: (0.05, 0.95)} if relays else {}, restart_relays={group: relays},
                           restart_recorded=rec, restart_low=float(r.uniform(0.25, 0.6)),
                           restart_regrow_s=float(r.uniform(3, 12)) * 3600,
                           staircase={"A": (5, 0.08)} if stair else {})

    specs = []
    for noise in ("flat", "cycle"):
        for rec in (False, True):
            for relays in (1, 5):
                specs.append((f"{'cycle ±4% + ' if noise == 'cycle' else 'flat '}AR(1) 2% φ 0.9; "
                              f"{'recorded' if rec else 'unrecorded'}; {'one relay' if relays == 1 else 'every relay'} of B",
                              noise, rec, relays, "B", False))
    for rec, relays, sd in ((False, 0, 0.01), (False, 5, 0.01), (True, 5, 0.01), (False, 1, 0.01), (False, 0, 0.02)):
        specs.append((f"staircase +8% in A, AR(1) {sd:.0%} φ 0.9; {'no restart' if not relays else ('recorded' if rec else 'unrecorded')}"
                      f"{'' if not relays else '; one relay' if relays == 1 else '; every relay'} of A", "flat", rec, relays, "A", sd))
    for k, (cell, noise, rec, relays, group, stair) in enumerate(specs):
        if cells and not cell.startswith(cells):
            continue
        r = np.random.default_rng([base, k])
        restarted = {q: [0, 0, 0] for q in thirds}     # per third: relays, Ratcheting, of those by the group route
        other = [0, 0, 0]                                # relays not restarted: relays, Ratcheting, by the group route
        groups = [0, 0]                                   # groups Ratcheting (the group's word), groups
        g_restarted = [0, 0]                              # the restarted group's word Ratcheting, datasets
        found = [0, 0, 0, 0]                              # staircase relays: restarted found, restarted, not restarted found, not
        stair_by = {q: [0, 0] for q in thirds}           # restarted staircase relays per third: relays, found
        warned = 0
        started = time.monotonic()
        for i in range(n):
            print(f"  ratchet-restarts {cell}: dataset {i + 1} of {n}", file=sys.stderr, flush=True)
            sc = design(r, noise, rec, relays, group, stair)
            a, when = ts.run_scenario(r, sc, work)
            warned += bool(a.warning("restart-in-window")) if relays else 0
            for rep in a.replicas:
                g = rep.group
                idx = int(rep.name[-2:])
                at = when.get(g, [None] * 5)[idx]
                said = shown(rep) == STEPS
                by_group = said and "combined p" in (rep.status_reason or "")
                q = None
                if at is not None:
                    share_at = (at - ts.T0 - sc.start_hour * 3600) / (sc.days * 86400)   # of the data's span
                    q = thirds[min(2, max(0, int(share_at * 3)))]
                if stair and g == "A":
                    j = 0 if at is not None else 2
                    found[j] += said
                    found[j + 1] += 1
                    if q:
                        stair_by[q][0] += 1
                        stair_by[q][1] += said
                    continue
                if said:      # a false call: say which relay, where it restarted and why (to read the cause)
                    print(f"  Ratcheting: dataset {i + 1} {rep.name}, restart at {q or '-'} "
                          f"({'' if at is None else f'{share_at:.0%}'}): {rep.status_reason}", file=sys.stderr, flush=True)
                if at is not None:
                    restarted[q][0] += 1
                    restarted[q][1] += said
                    restarted[q][2] += by_group
                else:
                    other[0] += 1
                    other[1] += said
                    other[2] += by_group
            for grp in a.groups:
                groups[0] += shown(grp) == STEPS
                groups[1] += 1
                if grp.name == group:
                    g_restarted[0] += shown(grp) == STEPS
                    g_restarted[1] += 1
        took = (time.monotonic() - started) / n
        if stair:
            if relays:
                row(f"ratchet-restarts, {cell}: restarted A relays found Ratcheting", rate(found[0], found[1]), "stated", found[1])
                for q in thirds:
                    if stair_by[q][0]:
                        row(f"… restarted in the {q} third", rate(stair_by[q][1], stair_by[q][0]), "stated", stair_by[q][0])
            row(f"ratchet-restarts, {cell}: A relays not restarted found Ratcheting", rate(found[2], found[3]) if found[3] else "–",
                "≥ 80%", found[3])
            row("… A's group word Ratcheting", rate(g_restarted[0], g_restarted[1]), "stated", g_restarted[1])
        else:
            for q in thirds:
                k_, said, grp_ = restarted[q]
                if k_:
                    row(f"ratchet-restarts, {cell}: restarted relays ({q} third) Ratcheting (by the group route)",
                        f"{rate(said, k_)} ({grp_})", "≤ 1%", k_)
            k_ = sum(v[0] for v in restarted.values())
            row("… every restarted relay Ratcheting (by the group route)",
                f"{rate(sum(v[1] for v in restarted.values()), k_)} ({sum(v[2] for v in restarted.values())})", "≤ 1%", k_)
            row("… relays not restarted Ratcheting (by the group route)", f"{rate(other[1], other[0])} ({other[2]})", "≤ 1%", other[0])
            row("… groups whose word is Ratcheting (B's)", f"{rate(groups[0], groups[1])} ({g_restarted[0]} of {g_restarted[1]})",
                "≤ 1%", groups[1])
        if relays:
            row("… restart-in-window warning", rate(warned, n), "100%", n)
        print(f"  ({took:.1f} s a dataset)", file=sys.stderr, flush=True)
    shutil.rmtree(work, ignore_errors=True)


def ratchet_climbs(rng: np.random.Generator, n: int) -> None:
    """The own route (classify) on smooth +10% climbs (a line plus AR(1) noise: Growing, never
    Ratcheting) across the noise the TorUtils designs see — AR(1) 1% and 2% at φ 0.5 / 0.9 / 0.95 /
    0.98 per sample — over 1.5 d @ 10 min (217 samples) and 3 d @ 5 min (865), with the +8%
    five-step staircases at 1% beside them; `n` series a cell, 2n for the calibration's own cell
    (2%, φ 0.9) over 1.5 days. Also the step fit's median φ against the true one: the steps absorb
    the wander's largest excursions, so φ comes out low where the noise is slow against the window,
    and a step beside a straight line looks sharper than it is."""
    from alloclab.stats.status import step_fit
    for label, window, dt in (("1.5 d @ 10 min", 1.5 * 86400, 600.0), ("3 d @ 5 min", 3 * 86400, 300.0)):
        t = sim.times(window, dt)
        for phi in (0.5, 0.9, 0.95, 0.98):
            for sd in (0.02, 0.01):
                k = 2 * n if (sd, phi) == (0.02, 0.9) and label.startswith("1.5") else n
                ys = sim.growing(rng, k, t, share=0.10, phi=phi, sd_share=sd)
                ws = words(t, ys)
                est = np.median([step_fit(t, y, float(np.median(y))).phi for y in ys[:200]])
                row(f"own route, smooth +10% climb, AR(1) {sd:.0%} φ {phi}, {label}: Ratcheting (the step fit's median φ)",
                    f"{rate(ws.count(STEPS), k)} ({est:.3f})", "≤ 1%", k)
        for phi in (0.5, 0.9):
            ws = words(t, sim.staircase(rng, n, t, climb_share=0.08, steps=5, sd_share=0.01, phi=phi))
            row(f"own route, +8% five-step staircases, AR(1) 1% φ {phi}, {label}: Ratcheting", rate(ws.count(STEPS), n),
                "≥ 80%", n)


RATCHET_REPLICA_P = (0.1, 0.25, 0.5, 1.0)
RATCHET_GROUP_ALPHA = (0.001, 0.0025)   # group levels stricter than RULES ratchet_group_alpha, on the same groups (a
                                        # level at or above the rule's is not printed: a group is simulated only where it can reach the rule's)


def ratchet_group_cal(rng: np.random.Generator, n: int, sizes: tuple[int, ...] = (5, 3), designs=POOLED_DESIGNS,
                      only: tuple[str, ...] | None = None) -> None:
    """Ratcheting with the group route (stats.status.ratchet_group): groups of 3 and 5 replicas, each
    replica its own series (a staircase: its own step times and sizes). A replica's word is
    Ratcheting on its own evidence (classify's route) or on its group's. Detection on +8% five-step
    staircases at AR(1) 1–2%, φ 0.5 / 0.9; false Ratcheting on flat AR(1) 2% φ 0.5–0.99, flat
    two-scale noise, a daily cycle ±4% shared by the group (one phase a group, any hour; AR(1) 1% and
    2% φ 0.9), a smooth +10% climb shared by the group (AR(1) 2% φ 0.9: the session-9 prototype's
    failure), and the flat replicas of a group whose one replica is a staircase. `only`: the cells
    whose names start with these. Per replica, with grouped_rate's interval (a found group calls its replicas together); also the simulations a group cost."""
    from alloclab.stats.status import ratchet_group, step_evidence

    cycle = shared_daily_cycle

    def lone(rng_, m, t):
        ys = sim.flat(rng_, m, t, phi=0.9, sd_share=0.02)
        ys[0] = sim.staircase(rng_, 1, t, climb_share=0.08, steps=5, sd_share=0.02, phi=0.9)[0]
        return ys
    stairs = _ratchet_cells(((0.02, 0.5), (0.02, 0.9), (0.01, 0.5), (0.01, 0.9)), climbs=False)
    nulls = [(f"flat AR(1) 2% φ {phi}", (lambda phi_: lambda r, m, t: sim.flat(r, m, t, phi=phi_, sd_share=0.02))(phi), "≤ 1%")
             for phi in (0.5, 0.9, 0.95, 0.99)]
    nulls += [("flat two-scale (AR(1) 2% φ 0.9 + slow wander 3%, τ 1.7 d)", lambda r, m, t: sim.two_scale(r, m, t, fast_phi=0.9), "≤ 1%"),
              ("daily cycle ±4% shared by the group, any phase, AR(1) 1% φ 0.9", cycle(0.01), "≤ 1%"),
              ("daily cycle ±4% shared by the group, any phase, AR(1) 2% φ 0.9", cycle(0.02), "≤ 1%"),
              ("smooth +10% climb shared by the group, AR(1) 2% φ 0.9", lambda r, m, t: sim.growing(r, m, t, share=0.10, phi=0.9, sd_share=0.02), "≤ 1%"),
              ("one +8% staircase (2% φ 0.9) among flat AR(1) 2% φ 0.9 replicas: the flat ones", lone, "≤ 1%")]
    nulls += [(f"a climb that levels off shared by the group (+15%, τ {tau:.0%} of the window), AR(1) {sd:.0%} φ {phi}",
               (lambda tau_, sd_, phi_: lambda r, m, t: sim.levelling_off(r, m, t, tau_share=tau_, sd_share=sd_, phi=phi_))(tau, sd, phi),
               "≤ 1%") for tau, sd, phi in LEVELLING_OFF[:2]]
    nulls += [(f"flat slow wander with measurement noise (AR(1) {sd:.0%} φ {phi} + white {white:.1%})",
               jittered_maker(phi, sd, white), "≤ 1%") for phi, sd, white in JITTERED]
    # last, so that the cells above draw as before: what the step fit's lag-2 floor keeps (status._step_noise)
    near_white = [(f"+8% five-step staircases in near-white noise, AR(1) {sd:.1%} φ {phi}",
                   staircase_maker(sd, phi),
                   "stated") for sd, phi in ((0.01, 0.0), (0.015, 0.2))]
    # last (session 18): groups where most replicas step and the rest do not — what the per-replica bar
    # (RULES ratchet_group_replica_p) guards once the group is found; the replicas counted are the rest.
    # Last, so that a run of one design (every documented one) draws each earlier cell as before; over
    # several designs one rng runs through them all, so the later designs' rows shift (as near_white's did)
    mixed = [(f"{others}: +8% five-step staircases (2% φ 0.9) in ⌈m/2⌉ replicas, {kind} in the others: the others",
              (lambda make_: lambda r, m, t: np.vstack([staircase_maker(0.02, 0.9)(r, m - m // 2, t), make_(r, m // 2, t)]))(make),
              target)
             for others, kind, make, target in (
                 ("mixed, flat", "flat AR(1) 2% φ 0.9", lambda r, k, t: sim.flat(r, k, t, phi=0.9, sd_share=0.02), "≤ 1%"),
                 ("mixed, smooth", "a smooth +10% climb (AR(1) 2% φ 0.9)",
                  lambda r, k, t: sim.growing(r, k, t, share=0.10, phi=0.9, sd_share=0.02), "stated (Growing is right)"))]
    mixed_makers = {make for _, make, _ in mixed}
    cells = [c for c in stairs + nulls + near_white + mixed if only is None or c[0].startswith(only)]
    for label, window, dt in designs:
        t = sim.times(window, dt)
        for name, make, target in cells:
            for m in sizes:
                said, own, total, sims, by_all = [], 0, 0, 0, 0
                alt = dict.fromkeys(RATCHET_REPLICA_P, 0)
                stricter = dict.fromkeys((a for a in RATCHET_GROUP_ALPHA if a < RULES["ratchet_group_alpha"]), 0)
                started = time.monotonic()
                for _ in range(n):
                    ys = make(rng, m, t)
                    g = ratchet_group([step_evidence(t, y) for y in ys])
                    keep = range(1, m) if make is lone else range(m - m // 2, m) if make in mixed_makers else range(m)
                    said.append(sum(g.own[i] or g.called[i] for i in keep))
                    own += sum(g.own[i] for i in keep)
                    total += len(keep)
                    sims += g.simulations
                    found = g.p is not None and g.p <= RULES["ratchet_group_alpha"]
                    for q in alt:      # the same groups under another per-replica bar (RULES ratchet_group_replica_p)
                        alt[q] += sum(g.own[i] or (found and g.shaped_p[i] is not None and g.shaped_p[i] <= q) for i in keep)
                    # ... and called by the replica's p among ALL its simulations, as until session 19 (its
                    # p among the shaped ones is never below it, so these calls hold the rule's)
                    by_all += sum(g.own[i] or (found and g.own_p[i] is not None and g.own_p[i] <= RULES["ratchet_group_replica_p"])
                                  for i in keep)
                    for a in stricter:  # ... and under a group level stricter than RULES ratchet_group_alpha (called
                        # already asks the rule's level, so only a lower one can be read from it)
                        stricter[a] += sum(g.own[i] or g.called[i] and g.p <= a for i in keep)
                row(f"group route, n = {m}, {name}, {label}: Ratcheting (own route alone; replica p ≤ "
                    f"{' / '.join(f'{q:g}' for q in alt)} among the simulations with the shape; group p ≤ "
                    f"{' / '.join(f'{a:.2%}' for a in stricter) or '–'}; called by the p among all simulations, until session 19)",
                    f"{grouped_rate(said, len(keep))} ({own / total:.1%}; {' / '.join(f'{k / total:.1%}' for k in alt.values())}; "
                    f"{' / '.join(f'{k / total:.1%}' for k in stricter.values()) or '–'}; {by_all / total:.1%}); "
                    f"{sims / n:.0f} simulated fits and {(time.monotonic() - started) / n:.2f} s a group", target, total)


def noise_shapes(rng: np.random.Generator, n: int, sizes: tuple[int, ...] = (5, 3), designs=POOLED_DESIGNS,
                 only: tuple[str, ...] | None = None) -> None:
    """Flat series whose noise is not the one AR(1) the rules' nulls simulate (session 16): AR(1)
    with heavy-tailed innovations (t, 3 and 2.5 degrees of freedom), two short AR(1) scales, and a
    slow wander read with white measurement noise (the case that needed status._step_noise).
    Groups of 5 and 3, each replica its own series: per replica the word classify gives (Ratcheting
    on its own evidence, Growing/Bloating) and Ratcheting with the group route (status.ratchet_group)."""
    from alloclab.stats.status import ratchet_group, step_evidence
    cells = [(f"AR(1) {sd:.0%} φ {phi}, t{df:g} innovations",
              (lambda sd_, phi_, df_: lambda r, m, t: 100 * (1 + sim.ar1(r, m, len(t), phi_, sd_, df=df_)))(sd, phi, df))
             for df in (3.0, 2.5) for sd, phi in ((0.02, 0.9), (0.02, 0.5), (0.01, 0.9))]
    cells += [("AR(1) 1.5% φ 0.5 + AR(1) 1.5% φ 0.98",
               lambda r, m, t: 100 * (1 + sim.ar1(r, m, len(t), 0.5, 0.015) + sim.ar1(r, m, len(t), 0.98, 0.015))),
              ("AR(1) 1% φ 0.9 + white 2%", jittered_maker(0.9, 0.01, 0.02)),
              ("AR(1) 1.5% φ 0.97 + white 1%", jittered_maker(0.97, 0.015, 0.01)),
              ("AR(1) 2% φ 0.99 + white 0.5%", jittered_maker(0.99, 0.02, 0.005))]
    cells = [c for c in cells if only is None or c[0].startswith(only)]
    for label, window, dt in designs:
        t = sim.times(window, dt)
        for name, make in cells:
            for m in sizes:
                said, own, growing = [], 0, 0
                for _ in range(n):
                    ys = make(rng, m, t)
                    calls = [classify(t, y) for y in ys]
                    g = ratchet_group([c.ratchet if c.ratchet is not None else step_evidence(t, y) for c, y in zip(calls, ys)])
                    said.append(sum(a or b for a, b in zip(g.own, g.called)))
                    own += sum(g.own)
                    growing += sum(c.word in ("Growing", "Bloating") and c.shape is None for c in calls)
                row(f"flat {name}, n = {m}, {label}: Ratcheting (own route alone; Growing/Bloating)",
                    f"{grouped_rate(said, m)} ({own / (n * m):.1%}; {rate(growing, n * m)})", "≤ 1%", n * m)


def ratchet_shared_cal(rng: np.random.Generator, n: int, sizes: tuple[int, ...] = (5, 3), designs=POOLED_DESIGNS,
                       only: tuple[str, ...] | None = None) -> None:
    """Ratcheting on steps a group shares in time (stats.ratchet_shared) beside each replica's own
    route (status._ratchet_in_noise): groups of 5 and 3. Detection per replica (own or shared) on +8%
    five-step staircases with step times shared by the group at AR(1) 1–2%, φ 0.5 / 0.9, and on
    staircases with their own step times (the shared route may only add); false Ratcheting added by
    the shared route on flat AR(1) 2% φ 0.5–0.99, two-scale noise (own wander, and a slow wander
    COMMON to the group), a daily cycle the group shares, a smooth climb it shares, one shared step,
    a shared step up and down (a release), the flat replica of a group whose others share a
    staircase (and the flat ones beside one staircase), and slow wanders read with white noise
    (JITTERED, session 16). `only`: the cells whose names start with
    these. Per replica, with grouped_rate's intervals; also the groups the shared test passed and the cost."""
    from alloclab.stats.ratchet_shared import ratchet_shared
    from alloclab.stats.status import step_evidence

    def own_word(t, y):
        return step_evidence(t, y).ratcheting

    cycle = shared_daily_cycle

    def wander(rng_, m, t):        # own AR(1) 2% φ 0.9 + a slow 3% wander (τ 1.7 d) COMMON to the group
        slow_phi = float(np.exp(-float(np.median(np.diff(t))) / (1.7 * 86400)))
        return 100 * (1 + sim.ar1(rng_, m, len(t), 0.9, 0.02) + sim.ar1(rng_, 1, len(t), slow_phi, 0.03))

    def one_step(rng_, m, t):      # one +8% level shift at the same time for the group
        at = t[0] + rng_.uniform(0.2, 0.8) * (t[-1] - t[0])
        return 100 * (1 + 0.08 * (t >= at)[None, :] + sim.ar1(rng_, m, len(t), 0.9, 0.02))

    def up_down(rng_, m, t):       # +8% up, then back down: a release the group shares
        a, b = np.sort(t[0] + rng_.uniform(0.1, 0.9, 2) * (t[-1] - t[0]))
        return 100 * (1 + 0.08 * ((t >= a) & (t < b))[None, :] + sim.ar1(rng_, m, len(t), 0.9, 0.02))

    def flat_among_shared(rng_, m, t):
        ys = sim.shared_staircase(rng_, m, t, sd_share=0.02, phi=0.9)
        ys[0] = sim.flat(rng_, 1, t, phi=0.9, sd_share=0.02)[0]
        return ys

    def lone(rng_, m, t):
        ys = sim.flat(rng_, m, t, phi=0.9, sd_share=0.02)
        ys[0] = sim.staircase(rng_, 1, t, climb_share=0.08, steps=5, sd_share=0.02, phi=0.9)[0]
        return ys
    first, rest = (0,), None                         # which replicas a cell counts (None: all)
    stairs = [(f"+8% five-step staircases, step times shared by the group, AR(1) {sd:.0%} φ {phi}", (lambda sd_, phi_: lambda r, m, t: sim.shared_staircase(r, m, t, sd_share=sd_, phi=phi_))(sd, phi), "≥ 80%", rest)
              for sd, phi in ((0.02, 0.5), (0.02, 0.9), (0.01, 0.5), (0.01, 0.9))]
    stairs += [("+8% five-step staircases, each replica its own step times, AR(1) 2% φ 0.9",
                lambda r, m, t: sim.staircase(r, m, t, climb_share=0.08, steps=5, sd_share=0.02, phi=0.9), "not worse", rest)]
    nulls = [(f"flat AR(1) 2% φ {phi}", (lambda phi_: lambda r, m, t: sim.flat(r, m, t, phi=phi_, sd_share=0.02))(phi), "≤ 1%", rest)
             for phi in (0.5, 0.9, 0.95, 0.99)]
    nulls += [("flat two-scale (AR(1) 2% φ 0.9 + slow wander 3%, τ 1.7 d, each its own)", lambda r, m, t: sim.two_scale(r, m, t, fast_phi=0.9), "≤ 1%", rest),
              ("shared slow wander (AR(1) 2% φ 0.9 own + slow wander 3%, τ 1.7 d, common to the group)", wander, "≤ 1%", rest),
              ("daily cycle ±4% shared by the group, any phase, AR(1) 1% φ 0.9", cycle(0.01), "≤ 1%", rest),
              ("daily cycle ±4% shared by the group, any phase, AR(1) 2% φ 0.9", cycle(0.02), "≤ 1%", rest),
              ("smooth +10% climb shared by the group, AR(1) 2% φ 0.9", lambda r, m, t: sim.growing(r, m, t, share=0.10, phi=0.9, sd_share=0.02), "≤ 1%", rest),
              ("shared +10% climb levelling off (τ 15% of the window), AR(1) 2% φ 0.9",
               lambda r, m, t: sim.levelling_off(r, m, t, rise_share=0.10, tau_share=0.15, sd_share=0.02, phi=0.9), "≤ 1%", rest),
              ("shared +10% climb levelling off (τ 30% of the window), AR(1) 2% φ 0.9",
               lambda r, m, t: sim.levelling_off(r, m, t, rise_share=0.10, tau_share=0.30, sd_share=0.02, phi=0.9), "≤ 1%", rest),
              ("one shared +8% step, AR(1) 2% φ 0.9", one_step, "≤ 1%", rest),
              ("shared +8% step up and down again, AR(1) 2% φ 0.9", up_down, "≤ 1%", rest),
              ("one flat AR(1) 2% φ 0.9 replica among replicas sharing a +8% staircase (2% φ 0.9): the flat one", flat_among_shared, "≤ 1%", first),
              ("one +8% staircase (2% φ 0.9) among flat AR(1) 2% φ 0.9 replicas: the flat ones", lone, "≤ 1%", None)]
    nulls += [(f"flat slow wander with measurement noise (AR(1) {sd:.0%} φ {phi} + white {white:.1%}, each its own)",
               jittered_maker(phi, sd, white), "≤ 1%", rest) for phi, sd, white in JITTERED]
    cells = [c for c in stairs + nulls if only is None or c[0].startswith(only)]
    for label, window, dt in designs:
        t = sim.times(window, dt)
        for name, make, target, counted in cells:
            for m in sizes:
                said, added, own, total, sims, passed = [], [], 0, 0, 0, 0
                started = time.monotonic()
                for _ in range(n):
                    ys = make(rng, m, t)
                    g = ratchet_shared([(t, y) for y in ys])
                    keep = counted if counted is not None else (range(1, m) if make is lone else range(m))
                    mine = [own_word(t, ys[i]) for i in keep]
                    said.append(sum(o or g.called[i] for o, i in zip(mine, keep)))
                    own += sum(mine)
                    added.append(sum(g.called[i] and not o for o, i in zip(mine, keep)))
                    total += len(keep)
                    sims += g.simulations
                    passed += g.found
                row(f"shared route, n = {m}, {name}, {label}: Ratcheting, own or shared (own route alone; added by the shared route)",
                    f"{grouped_rate(said, len(keep))} ({own / total:.1%}; {grouped_rate(added, len(keep))}); groups passing the shared test {passed}/{n}; "
                    f"{sims / n:.0f} simulated fits and {(time.monotonic() - started) / n:.2f} s a group", target, total)


def _whitener(phi: float, sd: float):
    """Rows of a matrix (index = time) whitened for AR(1) noise of this φ and marginal SD: the noise
    becomes N(0, 1) (Prais–Winsten, divided by the innovations' SD)."""
    sig_e = sd * np.sqrt(1 - phi * phi)

    def white(m: np.ndarray) -> np.ndarray:
        out = m.copy()
        out[1:] = m[1:] - phi * m[:-1]
        out[0] = m[0] * np.sqrt(1 - phi * phi)
        return out / sig_e
    return white


def _white_staircase(rng: np.random.Generator, t: np.ndarray, white) -> np.ndarray:
    """One +8% five-step staircase's mean (sim.staircase's uneven steps at random times, no noise),
    whitened by `white` (_whitener)."""
    at = np.sort(rng.uniform(t[0], t[-1] * 0.9, 5))
    size = rng.dirichlet(np.ones(5)) * 0.08
    return white(np.sum(size[:, None] * (t[None, :] >= at[:, None]), axis=0)[:, None])[:, 0]


def ratchet_bound(rng: np.random.Generator, n: int) -> None:
    """What any test could reach on these staircases: the +8% five-step staircase (the generator's
    uneven steps at random times), each series under AR(1) noise at its TRUE φ and SD, against the
    null "a straight line (flat or a smooth climb) plus that noise", at a 1% false rate per series.
    Generalised least squares on the samples (no binning). Two oracles, averaged over n staircase
    draws: step times known, sizes unknown (a 5-df χ² test of the steps beside the line), and the
    whole staircase known (Neyman–Pearson, one-sided z): power Φ(δ − z₀.₉₉) with δ the staircase's
    length beyond the line in the noise's metric. No test that must find the step times can beat
    the second; the first is the ceiling of any fit that finds them exactly. A third oracle
    measures what SEARCHING for the times costs when nothing else is estimated (_scan_bound)."""
    from scipy.stats import chi2, ncx2, norm
    for label, window, dt in POOLED_DESIGNS:
        t = sim.times(window, dt)
        u = (t - t[0]) / (t[-1] - t[0])
        for sd, phi in ((0.02, 0.5), (0.02, 0.9), (0.015, 0.9), (0.01, 0.5), (0.01, 0.9)):
            white = _whitener(phi, sd)
            line = white(np.column_stack([np.ones(len(t)), u]))
            q, _ = np.linalg.qr(line)
            known_pos = known_all = 0.0
            draws = []
            for _ in range(n):
                mu = _white_staircase(rng, t, white)
                draws.append(mu)
                beyond = mu - q @ (q.T @ mu)
                d2 = float(beyond @ beyond)
                known_all += norm.sf(norm.isf(0.01) - np.sqrt(d2))
                known_pos += ncx2.sf(chi2.isf(0.01, 5), 5, d2)
            row(f"bound: +8% five-step staircases, AR(1) {sd:.1%} φ {phi}, {label}: detection at 1% false, "
                f"step times known / whole staircase known", f"{known_pos / n:.1%} / {known_all / n:.1%}",
                "stated (the ceiling)", n)
            sharpest, five = _scan_bound(rng, white(np.tril(np.ones((len(t), len(t))))[:, 2:len(t) - 1]), q, np.array(draws))
            row(f"bound: +8% five-step staircases, AR(1) {sd:.1%} φ {phi}, {label}: detection at 1% false, "
                f"step times SEARCHED with φ, SD and the line known: the sharpest up-step / five forward-selected "
                f"up-steps", f"{sharpest:.1%} / {five:.1%}", "stated (the search's cost)", n)


def _scan_bound(rng: np.random.Generator, steps: np.ndarray, line: np.ndarray, means: np.ndarray) -> tuple[float, float]:
    """Power of two scans over every step position on whitened data (noise N(0, 1) after
    whitening at the true φ and SD), beside the line (`line`: its whitened columns,
    orthonormal), each at its 99th percentile under the null simulated with the same noise:
    the sharpest one-sided step z (the own route's statistic without estimating anything) and
    the χ² of five up-steps chosen forward (each the sharpest beside the line and the steps
    before it). `steps`: the whitened step columns (a step at each sample after the first);
    `means`: each staircase draw's whitened mean. (sharpest's power, five's power.)"""
    s = _unit_steps(steps, line)
    m = len(means)
    null = np.array([_scan_stats(s, line, rng.standard_normal(s.shape[0])) for _ in range(m)])
    bar = np.quantile(null, 0.99, axis=0)
    alt = np.array([_scan_stats(s, line, mu + rng.standard_normal(s.shape[0])) for mu in means])
    return float(np.mean(alt[:, 0] > bar[0])), float(np.mean(alt[:, 1] > bar[1]))


def _unit_steps(steps: np.ndarray, line: np.ndarray) -> np.ndarray:
    """The whitened step columns beside the line's (orthonormal) columns, each of length 1."""
    s = steps - line @ (line.T @ steps)
    return s / np.maximum(np.linalg.norm(s, axis=0), 1e-12)


def _scan_stats(s: np.ndarray, line: np.ndarray, e: np.ndarray) -> tuple[float, float]:
    """The two scans of _scan_bound on one whitened series e: the sharpest up-step's z beside the
    line, and the χ² of five up-steps chosen forward. `s`: _unit_steps."""
    e = e - line @ (line.T @ e)
    cols, total, first = s.copy(), 0.0, None
    for _ in range(5):
        z = cols.T @ e
        k = int(np.argmax(z))
        if z[k] <= 0:
            break
        first = z[k] if first is None else first
        total += z[k] ** 2
        c = cols[:, k].copy()
        e = e - z[k] * c                   # the chosen step out of the data and of every other column
        cols -= np.outer(c, c @ cols)
        norms = np.linalg.norm(cols, axis=0)
        cols[:, norms < 1e-6] = 0
        cols /= np.maximum(norms, 1e-12)
    return (first or 0.0), total


# the group route's level up to session 14 (Fisher's method without the smallest p), at which
# --part ratchet-ceiling, ratchet-combine and ratchet-curve measured what other designs would buy
FISHER_ALPHA = 0.01


def ratchet_ceiling(rng: np.random.Generator, n: int) -> None:
    """What the group route's design could reach if nothing had to be estimated: each replica's p
    from the scans of _scan_bound (φ, SD and the smooth curve's basis known; p among 2,000 null
    series of the same whitened noise), beside a straight line and beside the cubic the rules use
    (RULES ratchet_smooth_degree: what keeps a climb that levels off from being called Ratcheting);
    the group's p Fisher's without the smallest, a replica Ratcheting at its own p ≤ 1% or at p ≤
    ratchet_group_replica_p when the group's p ≤ FISHER_ALPHA (status.ratchet_group's design up to
    session 14); and the same with the group's p by the truncated product (truncated_product_p) at
    ratchet_group_alpha (the design since session 15; no staircase-shape gate, p's down to 1/2,001). Per replica, groups of 5 and 3 made of
    consecutive staircase draws; n draws a cell."""
    alpha, replica_p = FISHER_ALPHA, RULES["ratchet_group_replica_p"]
    for label, window, dt in POOLED_DESIGNS:
        t = sim.times(window, dt)
        u = (t - t[0]) / (t[-1] - t[0])
        for sd, phi in ((0.02, 0.5), (0.02, 0.9), (0.01, 0.5)):
            white = _whitener(phi, sd)
            means = [_white_staircase(rng, t, white) for _ in range(n)]
            steps = white(np.tril(np.ones((len(t), len(t))))[:, 2:len(t) - 1])
            curves = (("a straight line", np.column_stack([np.ones(len(t)), u])),
                      (f"a polynomial of degree {int(RULES['ratchet_smooth_degree'])}",
                       np.polynomial.legendre.legvander(2 * u - 1, int(RULES["ratchet_smooth_degree"]))))
            for curve, basis in curves:
                line, _ = np.linalg.qr(white(basis))
                s = _unit_steps(steps, line)
                null = np.array([_scan_stats(s, line, rng.standard_normal(len(t))) for _ in range(2000)])
                alt = np.array([_scan_stats(s, line, mu + rng.standard_normal(len(t))) for mu in means])
                for k, stat in ((0, "the sharpest up-step"), (1, "five forward-selected up-steps")):
                    p = (1 + (null[None, :, k] >= alt[:, None, k]).sum(1)) / (len(null) + 1)
                    found, product = [], []
                    for m in (5, 3):
                        g = p[: (n // m) * m].reshape(-1, m)
                        group_p = fisher_without_smallest_p(g, m)
                        called = (g <= alpha) | ((group_p[:, None] <= alpha) & (g <= replica_p))
                        found.append(f"{called.mean():.1%} (groups {np.mean(group_p <= alpha):.0%})")
                        # the design since session 15: the truncated product at the rule's group level
                        group_p = truncated_product_p(g)
                        called = (g <= alpha) | ((group_p[:, None] <= RULES["ratchet_group_alpha"]) & (g <= replica_p))
                        product.append(f"{called.mean():.1%} (groups {np.mean(group_p <= RULES['ratchet_group_alpha']):.0%})")
                    row(f"ceiling: +8% five-step staircases, AR(1) {sd:.0%} φ {phi}, {label}, beside {curve}, "
                        f"{stat}, φ, SD and curve known: one series at 1% false / the group route's design up to session 14 "
                        f"(Fisher's ≤ 1%), per replica, groups of 5 / 3 / the design since session 15 (truncated product "
                        f"≤ {RULES['ratchet_group_alpha']:.2%}), groups of 5 / 3",
                        f"{np.mean(p <= alpha):.1%} / {found[0]} / {found[1]} / {product[0]} / {product[1]}", "stated (the ceiling)", n)


def one_step_shape(fit) -> bool:
    """The group route's staircase shape (status._group_shape) with one up-step enough: what a call
    on one visible step would ask of a replica (--part ratchet-combine's "relaxed" calls, ratchet-shape)."""
    from alloclab.stats.status import _group_shape
    return _group_shape(fit, min_steps=1)


def ratchet_shape(rng: np.random.Generator, n: int) -> None:
    """How many replicas show the staircase's shape on their own step fit (status._group_shape: ≥ 2
    up-steps beyond the noise climbing ≥ 2% together, no release as sharp as the own bar): a rule
    that calls a replica Ratcheting only with that shape (both routes: the own route's shape is the
    stricter) finds at most this share, whatever its group's evidence. n series a cell, +8% five-step
    staircases at AR(1) 1–2%, and flat and smoothly climbing series beside them. Beside it the share
    with one up-step enough (one_step_shape): what a call on one visible step would let through, of
    staircases and of flat series (session 19)."""
    from alloclab.stats.status import _group_shape, step_evidence
    cells = [(f"+8% five-step staircases, AR(1) {sd:.0%} φ {phi}",
              staircase_maker(sd, phi))
             for sd, phi in ((0.02, 0.5), (0.02, 0.9), (0.01, 0.5), (0.01, 0.9))]
    cells += [("flat AR(1) 2% φ 0.9", lambda r, k, t: sim.flat(r, k, t, phi=0.9, sd_share=0.02)),
              ("smooth +10% climb, AR(1) 2% φ 0.9", lambda r, k, t: sim.growing(r, k, t, share=0.10, phi=0.9, sd_share=0.02))]
    # session 19's flat cells, drawn after every earlier row so that those keep their draws
    later = [("flat AR(1) 2% φ 0.5", lambda r, k, t: sim.flat(r, k, t, phi=0.5, sd_share=0.02)),
             ("flat AR(1) 1% φ 0.9", lambda r, k, t: sim.flat(r, k, t, phi=0.9, sd_share=0.01))]
    for batch in (cells, later):
        for label, window, dt in POOLED_DESIGNS:
            t = sim.times(window, dt)
            for name, make in batch:
                fits = [step_evidence(t, y).fit for y in make(rng, n, t)]
                shaped = sum(f is not None and _group_shape(f) for f in fits)
                one = sum(f is None or int((f.sizes > 0).sum()) < RULES["ratchet_min_steps"] for f in fits)
                single = sum(f is not None and one_step_shape(f) for f in fits)
                row(f"the staircase's shape (status._group_shape) on {name}, {label} (fewer than 2 up-steps beyond the noise) "
                    f"/ one up-step enough (one_step_shape)",
                    f"{rate(shaped, n)} ({rate(one, n)}) / {rate(single, n)}", "stated (a bound on Ratcheting found)", n)


def _levelling_basis_by_bic(x: np.ndarray, cycle: np.ndarray | None = None, bases: list[np.ndarray] | None = None) -> np.ndarray:
    """--group-curve bic (session 18's exploration, not the rule): status._levelling_basis choosing
    among the cubic (+ the day's harmonics) alone and each levelling curve by BIC on the fit
    prewhitened at the cubic's residual φ, so the levelling term enters only where it earns its column."""
    from alloclab.stats import status
    bases = status._levelling_bases(len(x), cycle) if bases is None else bases
    cubic = bases[0][:, :-1]
    phi = status._residual_phi(x - cubic @ np.linalg.lstsq(cubic, x, rcond=None)[0])
    xt = status._quasi_difference(x, phi)

    def bic(b: np.ndarray) -> float:
        bt = status._quasi_difference(b, phi)
        r = xt - bt @ np.linalg.lstsq(bt, xt, rcond=None)[0]
        return len(x) * np.log(max(float(r @ r), 1e-300) / len(x)) + b.shape[1] * np.log(len(x))
    return min([cubic] + list(bases), key=bic)


def fisher_without_smallest_p(ps: np.ndarray, m: int) -> np.ndarray:
    """Each row's p by Fisher's method on its m − 1 largest p's (session 14's status.ratchet_group group p)."""
    from scipy.stats import chi2
    return chi2.sf(-2 * np.log(np.sort(ps, axis=-1)[..., 1:]).sum(-1), 2 * (m - 1))


def _called(found: np.ndarray, own: np.ndarray, shape: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Per replica (groups × replicas), as status.ratchet_group calls them: Ratcheting on its own, or
    in a found group with the staircase's shape and its p ≤ ratchet_group_replica_p."""
    return own | (found[:, None] & shape & (p <= RULES["ratchet_group_replica_p"]))


def _ratchet_cells(stairs, climbs: bool = True) -> list:
    """(name, make(rng, m, t), target) cells: +8% five-step staircases at each (AR(1) SD, φ) of
    `stairs`, then (climbs) the two levelling-off climbs and the smooth +10% climb, shared by the group."""
    cells = [(f"+8% five-step staircases, AR(1) {sd:.0%} φ {phi}",
              staircase_maker(sd, phi),
              "≥ 80%") for sd, phi in stairs]
    if climbs:
        cells += [(f"a climb that levels off shared by the group (+15%, τ {tau_:.0%} of the window), AR(1) {sd:.0%} φ {phi}",
                   (lambda tau__, sd_, phi_: lambda r, m, t: sim.levelling_off(r, m, t, tau_share=tau__, sd_share=sd_, phi=phi_))(tau_, sd, phi),
                   "≤ 1%") for tau_, sd, phi in LEVELLING_OFF[:2]]
        cells += [("smooth +10% climb shared by the group, AR(1) 2% φ 0.9",
                   lambda r, m, t: sim.growing(r, m, t, share=0.10, phi=0.9, sd_share=0.02), "≤ 1%")]
    return cells


def ratchet_combine(rng: np.random.Generator, n: int, designs=POOLED_DESIGNS, only: tuple[str, ...] | None = None) -> None:
    """What combining a group's replicas otherwise would buy (staircases) and cost (climbs that level
    off, shifts, cycles), measured in session 14 against the rule of then: each replica's p beside
    its own cubic (status._null_p: its sharpest step among simulations of its cubic + its noise,
    AR(1), since session 16 AR(1) + white, since session 17 fitted by Whittle's likelihood — the
    docs' figures are session 14's — that also have the staircase's shape) from 399 simulations instead of 99; then the group by Fisher's method (that rule's) or by
    the truncated product of the p's ≤ 0.05 (a replica without the shape costs nothing), each
    without the smallest p, at FISHER_ALPHA and at half of it; a found group's replicas
    called as the rule calls them (the shape and p ≤ ratchet_group_replica_p), or also, "relaxed",
    a replica with one up-step beyond the noise that climbs ≥ ratchet_min_climb_share without a
    release, at its ungated p ≤ ratchet_group_replica_p. The rule itself (ratchet_group, now the
    levelling curve and the truncated product) on the same groups. Groups of 5, and of 3 made of their first three replicas;
    per replica with grouped_rate's intervals; n groups a cell."""
    from alloclab.stats.status import _group_shape, _null_p, ratchet_group, step_evidence
    sims, tau = 399, 0.05
    alpha, replica_p = FISHER_ALPHA, RULES["ratchet_group_replica_p"]

    def shifts(rng_, m, t):
        at = t[0] + rng_.uniform(0.1, 0.9, m) * (t[-1] - t[0])     # sim.level_shift's times are 0.2–0.8 and shared
        return 100 * (1 + 0.08 * (t[None, :] >= at[:, None]) + sim.ar1(rng_, m, len(t), 0.9, 0.02))
    cells = _ratchet_cells(((0.02, 0.9), (0.02, 0.5), (0.01, 0.5)))
    cells += [("flat AR(1) 2% φ 0.9", lambda r, m, t: sim.flat(r, m, t, phi=0.9, sd_share=0.02), "≤ 1%"),
              ("daily cycle ±4% shared by the group, any phase, AR(1) 2% φ 0.9", shared_daily_cycle(0.02), "≤ 1%"),
              ("one +8% shift, each replica at its own time, AR(1) 2% φ 0.9", shifts, "stated")]
    cells = [c for c in cells if only is None or c[0].startswith(only)]
    for label, window, dt in designs:
        t = sim.times(window, dt)
        for name, make, target in cells:
            started = time.monotonic()
            cols = []         # per replica: shape, own, gated p, relaxed shape, ungated p; the rule's call for 5 / 3
            for _ in range(n):
                ev = [step_evidence(t, y) for y in make(rng, 5, t)]
                rule5, rule3 = ratchet_group(ev), ratchet_group(ev[:3])
                for i, e in enumerate(ev):
                    shape = e.fit is not None and _group_shape(e.fit)
                    relaxed = e.fit is not None and not shape and not e.ratcheting and one_step_shape(e.fit)
                    p = _null_p(e.x, e.fit.sharp_t, rng, sims)[0] if shape and not e.ratcheting else 1.0
                    q = _null_p(e.x, e.fit.sharp_t, rng, sims, gated=False)[0] if relaxed else 1.0
                    cols.append((shape, e.ratcheting, p, relaxed, q, rule5.own[i] or rule5.called[i],
                                 i < 3 and (rule3.own[i] or rule3.called[i])))
            a = np.array(cols, dtype=float).reshape(n, 5, 7)
            for m in (5, 3):
                b = a[:, :m]
                shape, own, relaxed = b[..., 0] > 0, b[..., 1] > 0, b[..., 3] > 0
                p = np.where(own, 1 / (sims + 1), b[..., 2])
                fisher = fisher_without_smallest_p(p, m) <= alpha
                tpm = truncated_product_p(p, m, tau)
                strict = lambda found: _called(found, own, shape, p)
                loose = lambda found: strict(found) | (found[:, None] & relaxed & (b[..., 4] <= replica_p))
                said = [("the rule", b[..., 5 if m == 5 else 6] > 0), ("Fisher's at 399 simulations", strict(fisher))]
                for level in (alpha, alpha / 2):
                    said += [(f"truncated product ≤ {level:.1%}", strict(tpm <= level)),
                             ("… relaxed", loose(tpm <= level))]
                row(f"combining a group, n = {m}, {name}, {label}: Ratcheting per replica by "
                    + " / ".join(k for k, _ in said),
                    "; ".join(grouped_rate(c.sum(1), m) for _, c in said)
                    + f"; staircase shape {shape.mean():.0%}, one up-step only {relaxed.mean():.0%}; {(time.monotonic() - started) / n:.1f} s a group",
                    target, n * m)


def ratchet_curve(rng: np.random.Generator, n: int, designs=POOLED_DESIGNS, only: tuple[str, ...] | None = None) -> None:
    """Does a smooth curve that a climb levelling off fits (status._levelling_basis) take away the false
    Ratcheting the truncated product added on such climbs (--part ratchet-combine), and at what
    cost in staircases found? Each replica with the staircase's shape gets its p beside the cubic
    (status._null_p) and beside the levelling curve (status._levelling_null_p), 399 simulations each; the
    group by Fisher's method (session 14's rule) and by the truncated product at half FISHER_ALPHA,
    without the smallest p; a found group's replicas called as the rule calls them. An exploration
    of a direction, not a rule: per replica, groups of 5 and of 3 (their first three), grouped
    intervals, n groups a cell."""
    from alloclab.stats.status import _group_shape, _levelling_null_p, _null_p, step_evidence
    sims, tau, alpha = 399, 0.05, FISHER_ALPHA
    cells = _ratchet_cells(((0.02, 0.9), (0.01, 0.5)))
    cells = [c for c in cells if only is None or c[0].startswith(only)]
    for label, window, dt in designs:
        t = sim.times(window, dt)
        for name, make, target in cells:
            cols = []          # per replica: shape, own, p beside the cubic, p beside the levelling curve
            for _ in range(n):
                for e in (step_evidence(t, y) for y in make(rng, 5, t)):
                    shape = e.fit is not None and _group_shape(e.fit) and not e.ratcheting
                    cols.append((shape, e.ratcheting, _null_p(e.x, e.fit.sharp_t, rng, sims)[0] if shape else 1.0,
                                 _levelling_null_p(e.x, e.fit, rng, sims).p if shape else 1.0))
            a = np.array(cols, dtype=float).reshape(n, 5, 4)
            for m in (5, 3):
                b = a[:, :m]
                shape, own = b[..., 0] > 0, b[..., 1] > 0
                said = []
                for col, curve in ((2, "the cubic"), (3, "the saturating curve")):
                    p = np.where(own, 1 / (sims + 1), b[..., col])
                    fisher = fisher_without_smallest_p(p, m) <= alpha
                    product = truncated_product_p(p, m, tau) <= alpha / 2
                    for how, found in (("Fisher's", fisher), (f"truncated product ≤ {alpha / 2:.1%}", product)):
                        said.append((f"{how} beside {curve}", _called(found, own, shape, p)))
                row(f"smooth curve, n = {m}, {name}, {label}: Ratcheting per replica by " + " / ".join(k for k, _ in said),
                    "; ".join(grouped_rate(c.sum(1), m) for _, c in said) + f"; own route alone {own.mean():.1%}", target, n * m)


def _bin_lag1(phi: float, m: float) -> float:
    """Lag-1 autocorrelation of means of m consecutive samples of an AR(1) with this φ."""
    if phi <= 0:
        return 0.0
    if phi >= 1 - 1e-9:
        return 1.0
    a = (1 - phi ** m) / (1 - phi)
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
    var, phi_hi, _ = g._ar1_bound_var(tb, yb)
    for points in [k for k in (128, 32, 16) if 12 <= k < nb]:
        tk, yk = g.bin_series(tb, yb, points)
        r = yk - np.polyval(np.polyfit(tk, yk, 1), tk)
        if g.phi_for_lag1(float(np.sum(r[1:] * r[:-1]) / np.sum(r * r)), points, q) > _bin_lag1(phi_hi, nb / points):
            var = max(var, g._ar1_bound_var(tk, yk, 0.9)[0])
    half = 1.96 * math.sqrt(var) * t[-1]
    return change, change - half, change + half


def growth_frontier(rng: np.random.Generator, n: int) -> None:
    """Coverage under two-scale noise against power on one-scale AR(1), for the coarse-scale rule's
    settings (RULES growth_coarse_trigger / growth_phi_bound_coarse, scales used) and for a tested
    trigger: every setting on the same series. 'Growing' here: interval above 0 and change > 5%."""
    import importlib

    from alloclab.stats.rules import RULES
    gm = importlib.import_module("alloclab.stats.growth")
    settings = [("current: trigger 0.25, coarse bound 90%, 128/32/16 bins", 0.25, 0.90, (4, 16, 32)),
                ("trigger 0.35, coarse bound 85%", 0.35, 0.85, (4, 16, 32)),
                ("trigger 0.5, coarse bound 75%", 0.5, 0.75, (4, 16, 32)),
                ("trigger 0.25, coarse bound 90%, 128/32 bins (no 16)", 0.25, 0.90, (4, 16)),
                ("coarse median-unbiased variance always (no bound)", 0.0, 0.5, (4, 16, 32)),
                ("tested trigger (coarse lag-1 rejects the fine AR(1), 80% lower bound)", None, 0.8, None)]
    saved = dict(RULES), gm._scales
    designs = (("1.5 d @ 10 min", 1.5 * 86400, 600.0), ("3 d @ 5 min", 3 * 86400, 300.0), ("9 d @ 15 min", 9 * 86400, 900.0))
    data = []
    for label, window, dt in designs:
        t = sim.times(window, dt)
        data.append((label, t, sim.two_scale(rng, n, t, fast_phi=0.9), sim.growing(rng, n, t, share=0.10, phi=0.95, sd_share=0.02)))
    try:
        for name, trig, bound, divs in settings:
            if trig is None:
                fn = lambda t, y: _interval_tested_trigger(t, y, bound)
            else:
                RULES["growth_coarse_trigger"], RULES["growth_phi_bound_coarse"] = trig, bound
                gm._scales = lambda nb, divs=divs: [nb] + [k for k in (int(RULES["growth_max_points"]) // d for d in divs)
                                                         if RULES["growth_min_scale_points"] <= k < nb]

                def fn(t, y):
                    g = gm.growth(t, y)
                    return g.change_mb, g.change_lo, g.change_hi
            for label, t, flat2, up in data:
                a = [fn(t, y) for y in flat2]
                cov = sum(lo <= 0 <= hi for _, lo, hi in a)
                grow = sum(lo > 0 and c > 5.0 for c, lo, _ in a)
                pw = sum(fn(t, y)[1] > 0 for y in up)
                row(f"frontier, {name}, {label}: coverage (two-scale, flat) / 'Growing' (two-scale) / power (+10%, AR(1) φ 0.95 2%)",
                    f"{rate(cov, n)} / {rate(grow, n)} / {rate(pw, n)}", "≥ 93% / ≤ 1% / as before (94–97%)", n)
    finally:
        RULES.clear()
        RULES.update(saved[0])
        gm._scales = saved[1]


def _clock_series(rng: np.random.Generator, k: int, t: np.ndarray, kind: str, start_hour: float,
                  cycle_share: float = 0.04) -> np.ndarray:
    """(k, len(t)) series around level 1: 'cycle' — a daily cycle shared by every series (the UTC
    clock, window starting at start_hour) plus AR(1) 1.5% (φ 0.9 per sample); 'two-scale' — AR(1)
    2% (φ 0.9) plus a slow wander 3% (τ 1.7 d), each series its own."""
    if kind == "cycle":
        clock = 2 * np.pi * (t + start_hour * 3600) / 86400.0
        return 1 + cycle_share * np.sin(clock)[None, :] + sim.ar1(rng, k, len(t), 0.9, 0.015)
    return sim.two_scale(rng, k, t, fast_phi=0.9, level=1.0)


def compare_gate(rng: np.random.Generator, n: int, levels) -> None:
    """The `compare --fail-on-increase 5` gate: run B is run A's design started at another hour (or
    the same hour); each outcome from the intervals alone and with the comparison's
    times-of-day-differ warning (analysis.warnings, real rule), which makes it inconclusive."""
    from alloclab.analysis.warnings import LevelTime, times_of_day_differ
    from alloclab.stats.across_runs import compare_pairs, gate
    window = 1.5 * 86400                    # levels: each replica's last sample (imported data's basis)
    for kind in ("cycle", "two-scale"):
        for reps in (3, 5):
            for hours in ("any", "same"):
                for up in (1.0, 1.05, 1.20):
                    counts = dict.fromkeys(("within", "above", "inconclusive"), 0)
                    ruled = dict(counts)
                    for _ in range(n):
                        ha = float(rng.uniform(0, 24))
                        hb = ha if hours == "same" else float(rng.uniform(0, 24))
                        a = levels(kind, (3, reps), ha)
                        b = levels(kind, (3, reps), hb, ratios=[up, 1.0, 1.0])
                        got = [gate(c, 5.0).outcome for c in compare_pairs({f"g{j}": (a[j], b[j]) for j in range(3)}).values()]
                        outcome = "above" if "above" in got else "inconclusive" if "inconclusive" in got else "within"
                        counts[outcome] += 1
                        held = times_of_day_differ(LevelTime(ha * 3600, ha * 3600 + window, averaged=False),
                                                   LevelTime(hb * 3600, hb * 3600 + window, averaged=False))
                        ruled["inconclusive" if held else outcome] += 1
                    if kind == "two-scale" and hours == "same":
                        continue                    # no clock component: the start hour does not matter
                    for label, c in (("intervals alone", counts), ("with times-of-day-differ", ruled)):
                        err = ("false fail " + rate(c["above"], n)) if up <= 1.05 else ("false pass " + rate(c["within"], n))
                        row(f"compare --fail-on-increase 5, {kind} series, n = {reps}, run B started at "
                            f"{'any hour' if hours == 'any' else 'the same hour'}, one of 3 groups {up - 1:+.0%}, "
                            f"{label}: within / above / inconclusive", f"{c['within'] / n:.1%} / {c['above'] / n:.1%} / "
                            f"{c['inconclusive'] / n:.1%}; {err}", "false fail ≤ 2.5%, false pass ≤ 5%", n)


def gates(rng: np.random.Generator, n: int) -> None:
    """The host-blocking factor, the `compare --fail-on-increase` gate and the canary start-up
    guard on daily-cycle and two-scale series. Levels as analysis takes them from imported data:
    each replica's last sample of a 1.5-day window at 10 minutes, times a lognormal replica offset
    (cv 5%)."""
    from alloclab.analysis.hosts import host_factor
    from alloclab.fleet import rollout
    from alloclab.stats import compare_to_baseline
    t = sim.times(1.5 * 86400, 600.0)

    def levels(kind: str, shape: tuple[int, ...], start_hour: float, ratios=None) -> np.ndarray:
        k = int(np.prod(shape))
        end = _clock_series(rng, k, t, kind, start_hour)[:, -1].reshape(shape)
        out = 100.0 * end * np.exp(0.05 * rng.normal(size=shape))
        return out if ratios is None else out * np.asarray(ratios)[:, None]

    groups = ["glibc", "a", "b", "c"]
    layouts = {"balanced, 2 hosts (2 2 2 2 / 2 2 2 2)": [[2, 2, 2, 2], [2, 2, 2, 2]],
               "strongly unbalanced, 2 hosts (4 2 1 1 / 0 2 3 3)": [[4, 2, 1, 1], [0, 2, 3, 3]]}
    for kind in ("cycle", "two-scale"):
        for name, layout in layouts.items():
            for host_sd in (0.0, 0.15):
                blocked = pooled = 0
                for _ in range(n):
                    hour = float(rng.uniform(0, 24))
                    rows = []
                    for h, counts in enumerate(layout):
                        effect = np.exp(rng.normal(0, host_sd))
                        for g, c in zip(groups, counts):
                            rows += [(g, f"h{h}", float(v * effect)) for v in levels(kind, (c,), hour)] if c else []
                    hf = host_factor(rows, "glibc")
                    blocked += hf is not None and any(e.significant for e in hf.group_effects)
                    by = {g: np.array([v for gg, _, v in rows if gg == g]) for g in groups}
                    pooled += any(c.significant for c in compare_to_baseline(by, "glibc").values())
                row(f"host factor, {kind} series, {name}, host SD {host_sd}: family-wise false significance, blocked / pooled",
                    f"{rate(blocked, n)} / {rate(pooled, n)}", "blocked ≤ 5%", n)
    compare_gate(rng, n, levels)
    # the canary start-up guard (--warmup auto; and the same-age rule, whose old curve the collector
    # recorded over the old process's life, old_age to 0 s before the restart, at other clock times)
    guards = rollout.Guards(max_increase=0.25, persist=3)
    ages = sim.times(60.0, 5.0)[1:]
    slow_tau = 1.7 * 86400
    for kind in ("cycle", "two-scale"):
        for k_, tau in ((4.0, 10.0), (1.0, 30.0)):
            for old_age in (300.0, 3600.0):
                trips = {"warmup": 0, "curve": 0}
                shape = lambda a: 100.0 * (1 + k_ * np.exp(-a / tau))
                warmup = rollout.effective_warmup(guards, old_age, 60.0)
                old_ages = np.arange(1.0, old_age + 1e-9, 5.0)
                for _ in range(n):
                    if kind == "cycle":       # ±4% with the clock; the restart at any hour
                        clock = rng.uniform(0, 86400)
                        part = lambda at: 1 + 0.04 * np.sin(2 * np.pi * (clock + at) / 86400)
                        now, hist = part(ages), part(old_ages - old_age)
                    else:                     # slow wander 3% (τ 1.7 d): its value now and old_age earlier
                        z = rng.normal()
                        rho = np.exp(-old_age / slow_tau)
                        now = 1 + 0.03 * z
                        hist = 1 + 0.03 * (rho * z + np.sqrt(1 - rho * rho) * rng.normal())
                    new = shape(ages) * now * (1 + sim.ar1(rng, 1, len(ages), 0.9, 0.02)[0])
                    old_level = float(shape(np.array([old_age]))[0] * (now if np.isscalar(now) else now[0])
                                      * (1 + 0.02 * rng.normal()))
                    old_curve = shape(old_ages) * hist * (1 + sim.ar1(rng, 1, len(old_ages), 0.9, 0.02)[0])
                    trips["warmup"] += rollout.memory_trip(list(new), old_level, guards, list(ages), warmup) is not None
                    trips["curve"] += rollout.memory_trip(list(new), old_level, guards, list(ages), warmup,
                                                          list(zip(old_ages, old_curve))) is not None
                row(f"canary guard --max-increase 25%, persist 3, same allocator redeployed, {kind} series, start-up "
                    f"{1 + k_:g}× (τ {tau:g} s), old process {old_age:g} s: false trips, --warmup auto / same age from "
                    f"--history", f"{rate(trips['warmup'], n)} / {rate(trips['curve'], n)}", "stated", n)


def fleet_realism(rng: np.random.Generator, n: int) -> None:
    """What a fleet experiment looks like (issue 49): fresh starts, group and fleet restarts, staggered
    samples, a group-specific daily swing and slow leaks, through the user path — the generators
    and parts of benchmarks/fleet_realism.py, each part on its own stream from `rng`, n datasets a row."""
    import shutil
    import tempfile

    import fleet_realism as fr
    work = Path(tempfile.mkdtemp(prefix="alloclab-calibration-fleet-"))
    try:
        for k, part in enumerate(fr.PARTS.values()):
            part(np.random.default_rng([int(rng.integers(2 ** 31)), k]), work, n)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ROWS.extend(fr.ROWS)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke test: fewer simulations")
    ap.add_argument("--datasets", type=int, default=0, help="datasets per scenario row (--part scenarios / cycles / user-path; default 200 / 100 / 30), "
                    "simulations per row (--part gates / growth-frontier / staircases; 1000 / 200 / 400), groups per row (--part pooled / pooled-short; 200), datasets per cell (--part beside; 100)")
    ap.add_argument("--replicas", default="5,3", help="group sizes of --part pooled / beside (comma-separated)")
    ap.add_argument("--cells", action="append", default=[], metavar="PREFIX",
                    help="--part pooled / pooled-short / beside / ratchet-group / ratchet-shared / ratchet-combine / ratchet-curve: only the series (beside: the cells) whose names "
                         "start with PREFIX; repeat the option for more (a name may hold a comma: --cells 'flat two-scale' "
                         "--cells '+10%%, AR(1)')")
    ap.add_argument("--designs", action="append", default=[], metavar="PREFIX",
                    help="--part ratchet-group / ratchet-shared / ratchet-combine / ratchet-curve / noise-shapes: only the designs whose labels start with PREFIX; repeat the option for "
                         "more (--designs '1.5 d' --designs '9 d'); the short windows of --part pooled-short ('0.5 d', '1 d @', '1.7 d') only when named")
    ap.add_argument("--seed", type=int, default=20261122, help="seed of every simulation")
    ap.add_argument("--smooth-degree", type=int, default=None,
                    help="Ratcheting's smooth curve for this run (RULES ratchet_smooth_degree; default the rule's): "
                         "1 measures the rule before session 11, a step beside a straight line")
    ap.add_argument("--group-alpha", type=float, default=None,
                    help="the group route's level for this run (RULES ratchet_group_alpha; default the rule's): 0.005 "
                         "measures the level session 15 first ran, whose 0.25%% column is the rule's")
    ap.add_argument("--group-curve", default="rule", choices=["rule", "cubic", "no-cycle", "bic"],
                    help="the group route's smooth curve for this run (status.ratchet_group): 'cubic' without the "
                         "levelling term, 'no-cycle' without the day's harmonics — what each costs; 'bic' the "
                         "levelling term only where it earns its column (session 18)")
    ap.add_argument("--part", default="all", choices=["all", "status", "growth", "compare", "sequential", "identical", "tor-verdict",
                                                      "scenarios", "cycles", "two-scale", "staircases", "user-path", "gates", "staircase-reach", "growth-frontier", "pooled", "pooled-path", "pooled-short", "beside", "ratchet-group", "ratchet-bound",
                                                      "ratchet-restarts", "beside-cycle-restart", "ratchet-climbs", "ratchet-shared",
                                                      "ratchet-ceiling", "ratchet-shape", "ratchet-combine", "ratchet-curve", "noise-shapes",
                                                      "fleet-realism"],
                    help="run one part only")
    args = ap.parse_args()
    if args.smooth_degree is not None:
        RULES["ratchet_smooth_degree"] = args.smooth_degree
    if args.group_curve != "rule":
        from alloclab.stats import status
        if args.group_curve == "cubic":
            # the rule's curves without their last column, the levelling term: the cubic (+ the day's harmonics)
            status._levelling_bases = lambda n, cycle=None, rule=status._levelling_bases: [rule(n, cycle)[0][:, :-1]]
        elif args.group_curve == "bic":
            status._levelling_basis = _levelling_basis_by_bic
        else:
            status._cycle_of = lambda e: None
    if args.group_alpha is not None:
        if not 0 < args.group_alpha < 1:
            print(f"calibration.py: --group-alpha {args.group_alpha:g} is not a level — give one between 0 and 1 (e.g. 0.005)",
                  file=sys.stderr)
            return 2
        RULES["ratchet_group_alpha"] = args.group_alpha
    n = 60 if args.quick else 1000
    cells = tuple(c.strip() for c in args.cells if c.strip()) or None
    designs = tuple(d.strip() for d in args.designs if d.strip())
    # --designs' rows: the pooled designs, and the short ones only when a prefix names them (session 17)
    design_rows = (tuple(d for d in POOLED_DESIGNS if not designs or d[0].startswith(designs))
                   + tuple(d for d in SHORT_DESIGNS if designs and d[0].startswith(designs)))
    unknown = [d for d in designs if not any(label.startswith(d) for label, *_ in POOLED_DESIGNS + SHORT_DESIGNS)]
    if unknown:       # before any simulation: a prefix that selects nothing (e.g. the old '1.5 d,3 d')
        print(f"calibration.py: no design label starts with {', '.join(map(repr, unknown))} — give one prefix per "
              f"--designs (repeat the option for more) of: {', '.join(label for label, *_ in POOLED_DESIGNS + SHORT_DESIGNS)}",
              file=sys.stderr)
        return 2
    started = time.monotonic()
    parts = {   # each part has its own stream, so a part's figures do not depend on which others ran
        "status": lambda rng: status_words(rng, n // 2 if args.quick else 400),
        "growth": lambda rng: (growth_coverage(rng, n // 2 if args.quick else 400),
                               group_growth_test(rng, n // 2 if args.quick else 1000)),
        "compare": lambda rng: comparisons(rng, n),
        "sequential": lambda rng: sequential(rng, 40 if args.quick else 400),
        "identical": lambda rng: identical(rng, 30 if args.quick else 200, 2 if args.quick else 9),
        "tor-verdict": lambda rng: tor_verdict(rng, 200 if args.quick else 2000),
        "scenarios": lambda rng: scenarios(rng, args.datasets or (20 if args.quick else 200)),
        "user-path": lambda rng: user_path(rng, args.datasets or (6 if args.quick else 30)),
        "two-scale": lambda rng: growth_two_scale(rng, 60 if args.quick else 400),
        "staircases": lambda rng: staircases(rng, args.datasets or (60 if args.quick else 400)),
        "cycles": lambda rng: scenarios(rng, args.datasets or (20 if args.quick else 100), cycles_only=True),
        "gates": lambda rng: gates(rng, args.datasets or (100 if args.quick else 1000)),
        "staircase-reach": lambda rng: staircase_reach(rng, 60 if args.quick else 200),
        "growth-frontier": lambda rng: growth_frontier(rng, args.datasets or (40 if args.quick else 200)),
        "pooled-path": lambda rng: pooled_path(rng, args.datasets or (10 if args.quick else 40)),
        "pooled": lambda rng: growth_pooled(rng, args.datasets or (20 if args.quick else 200),
                                            tuple(int(k) for k in args.replicas.split(",")), POOLED_DESIGNS, cells),
        "pooled-short": lambda rng: growth_pooled(rng, args.datasets or (20 if args.quick else 200),
                                                  tuple(int(k) for k in args.replicas.split(",")), SHORT_DESIGNS,
                                                  cells or ("flat two-scale", "+10% in two-scale", "+10%, AR(1)")),
        "beside": lambda rng: beside(rng, args.datasets or (10 if args.quick else 100),
                                     tuple(int(k) for k in args.replicas.split(",")), cells),
        "ratchet-group": lambda rng: ratchet_group_cal(
            rng, args.datasets or (20 if args.quick else 100), tuple(int(k) for k in args.replicas.split(",")),
            design_rows,
            cells),
        "ratchet-bound": lambda rng: ratchet_bound(rng, args.datasets or (200 if args.quick else 2000)),
        "ratchet-restarts": lambda rng: ratchet_restarts(rng, args.datasets or (4 if args.quick else 40), cells),
        "ratchet-climbs": lambda rng: ratchet_climbs(rng, args.datasets or (100 if args.quick else 750)),
        "beside-cycle-restart": lambda rng: beside_cycle_restart(rng, args.datasets or (4 if args.quick else 100),
                                                                 tuple(int(k) for k in args.replicas.split(",")), cells),
        "ratchet-shared": lambda rng: ratchet_shared_cal(
            rng, args.datasets or (10 if args.quick else 50), tuple(int(k) for k in args.replicas.split(",")),
            design_rows,
            cells),
        "ratchet-ceiling": lambda rng: ratchet_ceiling(rng, args.datasets or (60 if args.quick else 600)),
        "ratchet-combine": lambda rng: ratchet_combine(
            rng, args.datasets or (10 if args.quick else 100),
            design_rows, cells),
        "ratchet-curve": lambda rng: ratchet_curve(
            rng, args.datasets or (10 if args.quick else 100),
            design_rows, cells),
        "noise-shapes": lambda rng: noise_shapes(
            rng, args.datasets or (20 if args.quick else 200), tuple(int(k) for k in args.replicas.split(",")),
            design_rows, cells),
        # last: every earlier part keeps its stream
        "ratchet-shape": lambda rng: ratchet_shape(rng, args.datasets or (100 if args.quick else 1000)),
        "fleet-realism": lambda rng: fleet_realism(rng, args.datasets or (10 if args.quick else 40)),
    }
    names = list(parts)
    names.insert(names.index("pooled-path"), "ratchet-pooled")   # retired; its stream number kept so later parts reproduce
    stream = {name: names.index(name) for name in parts}
    # beside and ratchet-group were written side by side (session 10), each measured on the stream after
    # pooled-short's: both keep it so their documented figures reproduce (different simulations, so the
    # shared stream correlates nothing either claims)
    stream["ratchet-group"], stream["ratchet-bound"] = stream["beside"], stream["beside"] + 1
    for name, part in parts.items():
        k = stream[name]
        if args.part == name or (args.part == "all" and name not in ("cycles", "pooled-short", "ratchet-group", "ratchet-bound",
                                                                                "ratchet-restarts", "beside-cycle-restart",
                                                                                "ratchet-climbs", "ratchet-shared", "ratchet-ceiling",
                                                                                "ratchet-combine", "ratchet-curve", "noise-shapes",
                                                                                "ratchet-shape", "fleet-realism")):   # cycles: a larger run of scenarios' first rows
            part(np.random.default_rng([args.seed, k]))
    print("| figure | measured | target | simulations |\n|---|---|---|---|")
    for name, value, target, k in ROWS:
        print(f"| {name} | {value} | {target} | {k} |")
    print(f"\nseed {args.seed}, {'quick' if args.quick else 'full'}, {time.monotonic() - started:.0f} s"
          + ("" if args.group_curve == "rule" else f", group route's curve: {args.group_curve}"))
    unmatched = [c for c in cells or () if not any(c in name for name, *_ in ROWS)]
    if unmatched:
        print(f"calibration.py: no row of --part {args.part} is a cell starting with {', '.join(map(repr, unmatched))}: "
              "give one name prefix per --cells (repeat the option for more)", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
