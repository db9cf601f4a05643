"""Growth beside the baseline (stats.added_growth) through the user path: the workload's own growth
shared by every group, with cycles and restarts: --part beside and beside-cycle-restart of
benchmarks/calibration.py.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from .common import rate, row

BESIDE_DESIGNS = (("1 h @ 5 s", 1 / 24, 5.0, 20 * 60.0), ("1.5 d @ 10 min", 1.5, 600.0, 1.7 * 86400))


def _beside_dataset(rng, days, step, slow_tau, m, slow, quiet, growth, **extra):
    """One --part beside design: the glibc baseline Z at 400–900 MB, A, B, C at 0.25×, every relay
    growing by the workload's own MB (the same in every group); `extra` sets further Scenario fields
    (a cycle, restarts) without drawing, so a dataset with and without them shares its draws."""
    import dataclasses

    import torutils_scenarios as ts

    level = float(rng.uniform(400, 900))
    sc = ts.Scenario(
        n=m,
        days=days,
        step_s=step,
        level_mb=level,
        ratio={"A": 0.25, "B": 0.25, "C": 0.25},
        cv=float(rng.uniform(0.03, 0.10)),
        ar_phi=float(rng.uniform(0.8, 0.98)),
        ar_share=float(rng.uniform(0.003, 0.005) if quiet else rng.uniform(0.01, 0.02)),
        slow_share=0.03 if slow else 0.0,
        slow_tau_s=slow_tau,
        start_hour=float(rng.uniform(0, 24)),
        shared_growth_mb=0.25 * level * float(rng.uniform(0.10, 0.25)),
        shared_growth_cv=0.1,
        growth=growth,
    )
    return dataclasses.replace(sc, **extra)


BESIDE_CYCLE_DESIGNS = (("1.5 d @ 10 min", 1.5, 600.0), ("3 d @ 10 min", 3.0, 600.0))


def beside_cycle_restart(
    rng: np.random.Generator, n: int, sizes: tuple[int, ...] = (5, 3), cells: tuple[str, ...] | None = None
) -> None:
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
    base = int(rng.integers(2**62))
    specs = [
        (f"{label}; n = {m}; cycle ±4%", days, step, m, "cycle")
        for label, days, step in BESIDE_CYCLE_DESIGNS
        for m in sizes
    ]
    specs += [
        (f"1.5 d @ 10 min; n = {m}; every relay of A restarts 2–5 h before the end, {how}", 1.5, 600.0, m, how)
        for m in sizes
        for how in ("unrecorded", "recorded")
    ]
    for k, (cell, days, step, m, kind) in enumerate(specs):
        if cells and not cell.startswith(cells):
            continue
        r = np.random.default_rng([base, k])
        beyond = less = plain_beyond = plain_less = 0
        said = dict.fromkeys((BEYOND, LESS, AS, NO_MORE, UNKNOWN, None), 0)
        shift, plain = [], []  # the cycle's effect on each excess (share of the level), the excess without it
        power = {"A": 0, "B": 0, "C": 0}
        warned = groups = 0
        started = time.monotonic()
        for i in range(n):
            print(f"  beside {cell}: dataset {i + 1} of {n}", file=sys.stderr, flush=True)
            seed = int(r.integers(2**62))
            if kind == "cycle":
                extra = dict(cycle_share=0.04)
            else:
                extra = dict(
                    restart_before_end_s={"A": (2 * 3600.0, 5 * 3600.0)},
                    restart_low=float(r.uniform(0.25, 0.6)),
                    restart_regrow_s=float(r.uniform(3, 12)) * 3600,
                    restart_recorded=kind == "recorded",
                )
            a, _ = ts.run_scenario(
                np.random.default_rng([seed, 1]),
                _beside_dataset(np.random.default_rng([seed, 0]), days, step, 0.0, m, False, False, {}, **extra),
                work,
            )
            got = {g.name: g.growth_beside for g in a.groups if g.name != "Z"}
            beyond += any(b is not None and b.word == BEYOND for b in got.values())
            less += any(b is not None and b.word == LESS for b in got.values())
            for b in got.values():
                said[None if b is None else b.word] += 1
            groups += len(got)
            warned += bool(a.warning("restart-in-window"))
            if kind == "cycle":
                a0, _ = ts.run_scenario(
                    np.random.default_rng([seed, 1]),
                    _beside_dataset(np.random.default_rng([seed, 0]), days, step, 0.0, m, False, False, {}),
                    work,
                )
                plain_beyond += any(g.growth_beside is not None and g.growth_beside.word == BEYOND for g in a0.groups)
                plain_less += any(g.growth_beside is not None and g.growth_beside.word == LESS for g in a0.groups)
                for g in a0.groups:
                    b0, b = g.growth_beside, got.get(g.name)
                    if b0 is not None and b is not None and b0.level_mb > 0:
                        shift.append((b.excess_mb - b0.excess_mb) / b0.level_mb)
                        plain.append(b0.excess_mb / b0.level_mb)
                seed2 = int(r.integers(2**62))
                a1, _ = ts.run_scenario(
                    np.random.default_rng([seed2, 1]),
                    _beside_dataset(
                        np.random.default_rng([seed2, 0]),
                        days,
                        step,
                        0.0,
                        m,
                        False,
                        False,
                        {"A": 0.05, "B": 0.10, "C": 0.25},
                        **extra,
                    ),
                    work,
                )
                for g in a1.groups:
                    if g.name in power:
                        power[g.name] += g.growth_beside is not None and g.growth_beside.word == BEYOND
        took = (time.monotonic() - started) / n
        row(
            f'beside, {cell}, true excess 0: datasets with a false "grows beyond the baseline" / "grows less than" '
            "(family-wise, 3 groups)",
            f"{rate(beyond, n)} / {rate(less, n)}",
            "≤ 5%",
            n,
        )
        row(
            "… groups: as / no more than / less than / beyond / cannot tell / not compared",
            " / ".join(f"{said[w] / groups:.1%}" for w in (AS, NO_MORE, LESS, BEYOND, UNKNOWN, None)),
            "stated",
            groups,
        )
        if kind == "cycle":
            sh, pl = np.array(shift), np.array(plain)
            row(
                '… the same datasets without the cycle: false "grows beyond" / "grows less than"',
                f"{rate(plain_beyond, n)} / {rate(plain_less, n)}",
                "≤ 5%",
                n,
            )
            row(
                "… the cycle's effect on the excess (with − without, share of the level): mean / SD / largest |·|; "
                "the excess's own SD without the cycle",
                f"{sh.mean():+.2%} / {sh.std(ddof=1):.2%} / {np.abs(sh).max():.2%}; {pl.std(ddof=1):.2%}",
                "≈ 0",
                len(sh),
            )
            row(
                f'beside, {cell}: power, "grows beyond" for A +5% / B +10% / C +25% of the level beyond the baseline',
                " / ".join(rate(power[g], n) for g in "ABC"),
                "stated",
                n,
            )
        else:
            row("… restart-in-window warning", rate(warned, n), "100%", n)
        print(f"  ({took:.1f} s a dataset)", file=sys.stderr, flush=True)
    shutil.rmtree(work, ignore_errors=True)


def beside(
    rng: np.random.Generator, n: int, sizes: tuple[int, ...] = (3, 5), cells: tuple[str, ...] | None = None
) -> None:
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

    base = int(rng.integers(2**62))
    dataset = _beside_dataset

    for d, (label, days, step, slow_tau) in enumerate(BESIDE_DESIGNS):
        for m in sizes:
            for k, (noise, slow, quiet) in enumerate(
                (("AR(1)", False, False), ("two-scale", True, False), ("quiet AR(1)", False, True))
            ):
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
                    a, _ = ts.run_scenario(
                        rng, dataset(rng, days, step, slow_tau, m, slow, quiet, {"A": 0.10, "B": 0.25, "C": 0.05}), work
                    )
                    b = {g.name: g.growth_beside for g in a.groups}
                    words["A"] += b["A"] is not None and b["A"].word == BEYOND
                    words["B"] += b["B"] is not None and b["B"].word == BEYOND
                    words["C"] += b["C"] is not None and b["C"].word in NOT_BEYOND
                row(
                    f'beside, {cell}, shared workload growth only: datasets with a false "grows beyond the baseline" '
                    "(family-wise, 3 groups)",
                    rate(k_null, n),
                    "≤ 5%",
                    n,
                )
                row(
                    "… datasets whose small groups' status says Growing/Bloating (the workload's growth)",
                    rate(k_growing, n),
                    "stated",
                    n,
                )
                row(
                    "… groups shown to grow as / less than / no more than the baseline (the caution rephrased)",
                    rate(k_said, k_groups),
                    "stated",
                    k_groups,
                )
                row(f"beside, {cell}: power, +10% of its level beyond the workload", rate(words["A"], n), "stated", n)
                row(f"beside, {cell}: power, +25%", rate(words["B"], n), "stated", n)
                row(
                    f"beside, {cell}: excess at the margin (+5%): called as / less than / no more than the baseline",
                    rate(words["C"], n),
                    "≤ 5%",
                    n,
                )
    shutil.rmtree(work, ignore_errors=True)
