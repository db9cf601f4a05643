"""Comparisons between groups and runs on simulated levels: the ratio intervals and their family
(stats.compare_to_baseline), sequential looks (SequentialTest), the Tor model's verdict, identical
series, and the gates (host factor, `compare --fail-on-increase`, the canary start-up guard):
--part compare, sequential, tor-verdict, identical and gates of benchmarks/calibration.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from alloclab.stats import SequentialTest, compare_to_baseline, identical_series
from alloclab.stats.group_tests import holm
from tests import simulated_series as sim

from .common import rate, row


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
            cov.append(
                all(
                    cs[g].ratio_ci[0] <= r <= cs[g].ratio_ci[1] for g, r in (("same", 1.0), ("low", 0.9), ("high", 1.2))
                )
            )
        row(
            f"all three ratio intervals cover, n={reps}, heavy tails, 4 groups",
            f"{np.mean(cov):.1%}",
            "≥ 93% (simultaneous)",
            n,
        )
        lv = [sim.replica_levels(rng, n, reps, 1.0, 0.10) for _ in range(4)]
        for i in range(n):
            cs = compare_to_baseline({f"g{k}": lv[k][i] for k in range(4)}, "g0")
            fam.append(any(c.significant for c in cs.values()))
        row(f"family-wise false positives, 4 groups on one allocator, n={reps}", f"{np.mean(fam):.1%}", "≤ 5%", n)
    for reps, ratio, cv, label in (
        (3, 0.44, 0.03, "0.44×, cv 3% (the tor relays)"),
        (3, 0.44, 0.15, "0.44×, cv 15%"),
        (5, 0.90, 0.05, "0.90×, cv 5%"),
        (3, 0.90, 0.05, "0.90×, cv 5%"),
    ):
        a, b = sim.replica_levels(rng, n, reps, ratio, cv), sim.replica_levels(rng, n, reps, 1.0, cv)
        sig = [compare_to_baseline({"b": y, "a": x}, "b")["a"].significant for x, y in zip(a, b)]
        row(f"power, n={reps}, {label}", f"{np.mean(sig):.1%}", "stated", n)
    # 3 vs 3 real-data shape: jemalloc 0.44x glibc, 0.42-0.45 spread
    c = compare_to_baseline(
        {"glibc": np.array([100.0, 103.0, 98.0]), "jemalloc": np.array([43.0, 45.0, 44.5])}, "glibc"
    )["jemalloc"]
    row(
        "3 vs 3 at 0.44× (example)",
        f"p_adj {c.p_adj:.2g}, {c.ratio:.2f}× [{c.ratio_ci[0]:.2f}–{c.ratio_ci[1]:.2f}], "
        f"permutation p {c.p_permutation:.2g}",
        "significant",
        1,
    )
    for reps in (5, 10):
        a, b = sim.replica_levels(rng, n, reps, 1.05, 0.03), sim.replica_levels(rng, n, reps, 1.0, 0.03)
        eq = [compare_to_baseline({"b": y, "a": x}, "b")["a"].equivalent for x, y in zip(a, b)]
        row(
            f"equivalence claimed when the truth is 1.05× (the margin), n={reps}, cv 3%",
            f"{np.mean(eq):.1%}",
            "≤ 5%",
            n,
        )
        a, b = sim.replica_levels(rng, n, reps, 1.0, 0.03), sim.replica_levels(rng, n, reps, 1.0, 0.03)
        eq = [compare_to_baseline({"b": y, "a": x}, "b")["a"].equivalent for x, y in zip(a, b)]
        row(f"equivalence shown when the truth is 1.00×, n={reps}, cv 3%", f"{np.mean(eq):.1%}", "stated", n)


def _welch_p(la: np.ndarray, lb: np.ndarray) -> np.ndarray:
    """Vectorised Welch p over the last axis (for the naive-peeking reference only)."""
    from scipy import stats as sps

    na, nb = la.shape[-1], lb.shape[-1]
    va, vb = la.var(axis=-1, ddof=1) / na, lb.var(axis=-1, ddof=1) / nb
    se = np.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1))
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
            lv = np.log(run_mean[:, look_idx]).T  # looks × replicas
            p1, p2 = _welch_p(lv[:, 5:10], lv[:, :5]), _welch_p(lv[:, 10:], lv[:, :5])
            padj = np.array([holm([a, b]) for a, b in zip(p1, p2)])
            false_naive += bool(np.any(padj.min(axis=1) < 0.05))
            fixed += bool(padj[-1, 0] < 0.05)
            test = SequentialTest(0.05, 2, max_looks=8, first_look_s=600.0)  # 10 min · 2^7 ≤ 24 h
            for _j, i in enumerate(look_idx):
                d = test.update(
                    {"base": run_mean[:5, i], "a": run_mean[5:10, i], "b": run_mean[10:, i]},
                    "base",
                    elapsed_s=float(t[i]),
                )
                if d.stop:
                    stops += 1
                    stop_h.append(t[i] / 3600)
                    break
        if ratio == 1.0:
            row(
                "sequential: false stop, null, 144 looks over 24 h (alpha spending at 8 doublings)",
                f"{stops / n:.1%}",
                "≤ 5%",
                n,
            )
            row("naive peeking (Holm at 0.05 at every look), same data", f"{false_naive / n:.1%}", "reference", n)
        else:
            med = f", median stop {np.median(stop_h):.1f} h" if stop_h else ""
            row("sequential: power for a 10% lower group within 24 h", f"{stops / n:.1%}{med}", "stated", n)
            row("fixed-length 24 h test, same data (group a, Holm)", f"{fixed / n:.1%}", "reference", n)


def _tor_like(
    rng,
    n_sims: int,
    n: int,
    ratio: float,
    t: np.ndarray,
    *,
    b_like_a: bool,
    seed_share: tuple[float, float] = (0.0, 0.9),
    rise: float = 0.06,
) -> tuple[np.ndarray, np.ndarray]:
    """(n_sims, n, len(t)) series of two groups shaped like the Tor model's levels on real runs
    (benchmarks/seed_pairing.py on a 4+4 run and three 5-replica demo runs): group a (glibc-like)
    rises `rise` over the first minutes (time constant 120 s) and keeps a persistent per-replica
    offset (log-sd 3.4%); group b (jemalloc-like) is flat with a log-sd 1.2% offset; seed_share[i]
    of group i's offset variance is replica i's seed, shared with the other group's replica of the
    same index (measured: ~0% for glibc, ~90% for jemalloc). AR(1) noise φ = 0.95 per 2 s sample,
    1.5%; a quarter of the replicas take a ±2% level shift at a random time. b_like_a: b is drawn
    exactly like a (glibc against glibc), at `ratio`."""
    seed_part = rng.normal(size=(n_sims, n))  # replica i's seed, the same in both groups

    def group(sd, share, rise_, level):
        own = rng.normal(size=(n_sims, n)) * sd * np.sqrt(1 - share)
        off = np.exp(seed_part * sd * np.sqrt(share) + own)
        ys = level * off[..., None] * (1 - rise_ * np.exp(-t / 120.0))[None, None, :]
        ys = ys * (1 + sim.ar1(rng, n_sims * n, len(t), 0.95, 0.015).reshape(n_sims, n, len(t)))
        shift = (rng.random((n_sims, n)) < 0.25)[..., None] * rng.choice([-0.02, 0.02], size=(n_sims, n, 1))
        at = rng.uniform(t[0], t[-1], size=(n_sims, n, 1))
        return ys * (1 + shift * (t[None, None, :] >= at))

    a = group(0.034, seed_share[0], rise, 100.0)
    b = (
        group(0.034, seed_share[0], rise, 100.0 * ratio)
        if b_like_a
        else group(0.012, seed_share[1], 0.0, 100.0 * ratio)
    )
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

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    from alloclab.run.stopping import planned_look_times

    t = np.arange(0.0, 720.0 + 1, 2.0)
    designs = {
        "before (warm-up 20 s, looks 60–480 s, α/(k(k+1)))": (
            20.0,
            [60.0, 120.0, 240.0, 480.0],
            SequentialTest(0.05, 1),
        ),
        "after (warm-up 120 s, planned looks 140/280/560/710 s)": (
            120.0,
            planned_look_times(140.0, 720.0, 2.0),
            SequentialTest(0.05, 1, look_times_s=planned_look_times(140.0, 720.0, 2.0)),
        ),
    }
    for n in (6, 12, 16, 20):
        for ratio in (1.0, 0.96):
            a, b = _tor_like(rng, n_sims, n, ratio, t, b_like_a=ratio == 1.0)
            for name, (warm, looks, test) in designs.items():
                if n in (12, 20) and name.startswith("before"):
                    continue
                la, lb = _levels_at(a, t, warm, looks), _levels_at(b, t, warm, looks)
                p = _welch_p(lb, la)  # (looks, sims)
                hit = p < np.array([test.alpha_at(k + 1) for k in range(len(looks))])[:, None]
                stopped = hit.any(0)
                first = np.where(stopped, hit.argmax(0), 0)
                if ratio == 1.0:
                    row(
                        f"Tor-like verdict, null (glibc against glibc), {n}+{n}, {name}: false stop within 12 min",
                        f"{stopped.mean():.1%}",
                        "≤ 5%",
                        n_sims,
                    )
                    continue
                lower = (lb.mean(-1) < la.mean(-1))[first, np.arange(n_sims)]
                right = stopped & lower
                when = np.array(looks)[first[right]] if right.any() else np.array([np.nan])
                row(
                    f"Tor-like verdict, jemalloc-like 4% lower, {n}+{n}, {name}: verdict within 12 min",
                    f"{right.mean():.1%} (median at {np.nanmedian(when):.0f} s; wrong winner {(stopped & ~right).mean():.1%})",
                    "stated",
                    n_sims,
                )
    at8 = [480.0]
    for label, share, both in (
        ("seed 0% of glibc's, 90% of jemalloc's spread (measured)", (0.0, 0.9), False),
        ("seed half of both groups' spread", (0.5, 0.5), True),
    ):
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
            row(
                f"paired-by-seed t against Welch, one look at 8 min, {n}+{n}, {'null' if ratio == 1.0 else '4% lower'}, "
                f"{label}: {what}",
                f"paired {np.mean(pp < 0.05):.1%} / Welch {np.mean(pw < 0.05):.1%} "
                f"(paired 95% ratio interval covers {cover:.1%})",
                "≤ 5%" if ratio == 1.0 else "stated",
                n_sims,
            )


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
    row(
        f"identical-series false alarms, {relays} relays × {days:g} days at 1 min",
        f"{false} of {pairs} pairs",
        "0",
        pairs,
    )
    keep = rng.random(len(t)) > 0.05
    hit = bool(identical_series(t, ys[0], t[keep], ys[0][keep]))
    row(
        "identical-series: one relay sampled twice (5% of samples missing)",
        "detected" if hit else "MISSED",
        "detected",
        1,
    )


def _clock_series(
    rng: np.random.Generator, k: int, t: np.ndarray, kind: str, start_hour: float, cycle_share: float = 0.04
) -> np.ndarray:
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

    window = 1.5 * 86400  # levels: each replica's last sample (imported data's basis)
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
                        got = [
                            gate(c, 5.0).outcome
                            for c in compare_pairs({f"g{j}": (a[j], b[j]) for j in range(3)}).values()
                        ]
                        outcome = "above" if "above" in got else "inconclusive" if "inconclusive" in got else "within"
                        counts[outcome] += 1
                        held = times_of_day_differ(
                            LevelTime(ha * 3600, ha * 3600 + window, averaged=False),
                            LevelTime(hb * 3600, hb * 3600 + window, averaged=False),
                        )
                        ruled["inconclusive" if held else outcome] += 1
                    if kind == "two-scale" and hours == "same":
                        continue  # no clock component: the start hour does not matter
                    for label, c in (("intervals alone", counts), ("with times-of-day-differ", ruled)):
                        err = (
                            ("false fail " + rate(c["above"], n))
                            if up <= 1.05
                            else ("false pass " + rate(c["within"], n))
                        )
                        row(
                            f"compare --fail-on-increase 5, {kind} series, n = {reps}, run B started at "
                            f"{'any hour' if hours == 'any' else 'the same hour'}, one of 3 groups {up - 1:+.0%}, "
                            f"{label}: within / above / inconclusive",
                            f"{c['within'] / n:.1%} / {c['above'] / n:.1%} / {c['inconclusive'] / n:.1%}; {err}",
                            "false fail ≤ 2.5%, false pass ≤ 5%",
                            n,
                        )


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
    layouts = {
        "balanced, 2 hosts (2 2 2 2 / 2 2 2 2)": [[2, 2, 2, 2], [2, 2, 2, 2]],
        "strongly unbalanced, 2 hosts (4 2 1 1 / 0 2 3 3)": [[4, 2, 1, 1], [0, 2, 3, 3]],
    }
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
                row(
                    f"host factor, {kind} series, {name}, host SD {host_sd}: family-wise false significance, blocked / pooled",
                    f"{rate(blocked, n)} / {rate(pooled, n)}",
                    "blocked ≤ 5%",
                    n,
                )
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
                    if kind == "cycle":  # ±4% with the clock; the restart at any hour
                        clock = rng.uniform(0, 86400)
                        part = lambda at: 1 + 0.04 * np.sin(2 * np.pi * (clock + at) / 86400)
                        now, hist = part(ages), part(old_ages - old_age)
                    else:  # slow wander 3% (τ 1.7 d): its value now and old_age earlier
                        z = rng.normal()
                        rho = np.exp(-old_age / slow_tau)
                        now = 1 + 0.03 * z
                        hist = 1 + 0.03 * (rho * z + np.sqrt(1 - rho * rho) * rng.normal())
                    new = shape(ages) * now * (1 + sim.ar1(rng, 1, len(ages), 0.9, 0.02)[0])
                    old_level = float(
                        shape(np.array([old_age]))[0]
                        * (now if np.isscalar(now) else now[0])
                        * (1 + 0.02 * rng.normal())
                    )
                    old_curve = shape(old_ages) * hist * (1 + sim.ar1(rng, 1, len(old_ages), 0.9, 0.02)[0])
                    trips["warmup"] += rollout.memory_trip(list(new), old_level, guards, list(ages), warmup) is not None
                    trips["curve"] += (
                        rollout.memory_trip(
                            list(new), old_level, guards, list(ages), warmup, list(zip(old_ages, old_curve))
                        )
                        is not None
                    )
                row(
                    f"canary guard --max-increase 25%, persist 3, same allocator redeployed, {kind} series, start-up "
                    f"{1 + k_:g}× (τ {tau:g} s), old process {old_age:g} s: false trips, --warmup auto / same age from "
                    f"--history",
                    f"{rate(trips['warmup'], n)} / {rate(trips['curve'], n)}",
                    "stated",
                    n,
                )
