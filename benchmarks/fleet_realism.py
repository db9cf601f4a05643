"""Calibration of the verdict on what a fleet experiment looks like in practice (issue 49), through
the user path (a TorUtils folder imported with import_torutils, then alloclab.analysis.analyse,
what `alloclab report` renders):

- fresh: every relay starts when the data start and regrows to its level (what `fleet apply` does
  to every unit it moves): start at 30–70% of the level, regrowth time constant τ 1–12 h;
- group-restart: every relay of one group restarts at any point of the window, one recorded
  `restart` event labelled with the group (no relay named);
- fleet-restart: every relay restarts together in the window's first half, one event for "all";
- stagger: each relay sampled on its own clock (offsets within one sampling interval, per-host
  clock skew of up to ±30 s, 2% of ticks missed): the verdict beside the same data aligned;
- amplitude: group A's relays swing ±10% with the time of day, the others ±2%, equal day means,
  the window ending at any hour;
- leak: one group grows 3%/day over 1–2.5 days (power), 1%/day over 2–5 days (a slow leak), +8%
  over 1.5 days (n = 5 and 3), beside flat groups; every report counted where a group reads "Flat"
  beside its own "grows beyond the baseline";
- shapes: one group climbs +8% over 1.5 days smoothly, levelling off, or in five uneven steps (its
  relays' own step times): "Growing" and "in steps" by shape (the growth words, benchmarks/growth_words.md).

Truth: ratio 1.00 and flat unless stated. Every dataset is seeded from --seed.

    nice -n 10 .venv/bin/python benchmarks/fleet_realism.py --part fresh --datasets 40
    nice -n 10 .venv/bin/python benchmarks/fleet_realism.py --part all --datasets 40   # every part

Prints one markdown table (figure, measured rate with its 95% Clopper–Pearson interval, target, n).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests.simulated_series
from calibration_parts.common import clopper_pearson
from fleet_decision import wilson
from torutils_scenarios import GROUPS, T0, analyse_folder, relay_name, write_experiment

from alloclab.stats.added_growth import BEYOND
from tests import simulated_series as sim

GROWING = ("Growing", "Bloating", "Ratcheting")  # "Ratcheting": the word before it was retired (a before-run)


def in_steps(g) -> bool:
    """The group reads "Growing in steps" (before the word was retired: "Ratcheting")."""
    return g.status == "Ratcheting" or (g.status == "Growing" and getattr(g, "growth_shape", None) == "steps")


@dataclass
class Fleet:
    """One dataset's design."""

    n: int = 5
    days: float = 1.5
    step_s: float = 600.0
    start_hour: float = 0.0
    level_mb: float = 300.0
    cv: float = 0.10
    ar_share: float = 0.015
    ar_phi: float = 0.9
    cycle: dict[str, float] = field(default_factory=dict)  # group -> daily amplitude (shared phase: the clock)
    cycle_phase: float = 0.0
    growth_per_day: dict[str, float] = field(default_factory=dict)  # group -> linear growth, share of level a day
    climb: dict[str, str] = field(
        default_factory=dict
    )  # group -> "smooth" / "levelling" / "steps": +climb_share over the window
    climb_share: float = 0.08
    fresh: bool = False  # every relay starts with the data, regrowing
    low: tuple[float, float] = (0.3, 0.7)
    tau_h: tuple[float, float] = (1.0, 12.0)
    restart_groups: list[str] = field(default_factory=list)  # groups whose relays all restart at `restart_share`
    restart_share: float = 0.5
    restart_label: str = "group"  # "group": one event per group, labelled; "all": one event for every relay;
    # "replica": one event per relay naming it; "none": unrecorded
    stagger: bool = False  # per-relay sampling offsets, clock skew and missed ticks


def draw(rng: np.random.Generator, **fixed) -> Fleet:
    kw = dict(
        step_s=float(rng.choice([300.0, 600.0, 900.0])),
        ar_phi=float(rng.uniform(0.8, 0.95)),
        ar_share=float(rng.uniform(0.01, 0.02)),
        cv=float(rng.uniform(0.05, 0.15)),
        start_hour=float(rng.uniform(0, 24)),
        level_mb=float(rng.uniform(150, 600)),
    )
    kw.update(fixed)
    return Fleet(**kw)


def make(rng: np.random.Generator, f: Fleet):
    """(per group: list of (times, MB) per relay, events rows)."""
    base_t = T0 + f.start_hour * 3600 + sim.times(f.days * 86400, f.step_s)
    rel = base_t - base_t[0]
    data: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    events: list[tuple[float, str, str, str, str]] = []
    restart_at = base_t[0] + f.restart_share * rel[-1]
    clocks = np.random.default_rng(int(rng.integers(2**31)))  # drawn either way: the same noise aligned or not
    for g in GROUPS:
        off = f.level_mb * np.exp(f.cv * rng.standard_normal(f.n))
        rows = []
        for i in range(f.n):
            t = base_t.copy()
            shift, keep = clocks.uniform(0, f.step_s * 0.5) + clocks.uniform(-30, 30), clocks.random(len(t)) >= 0.02
            keep[0] = keep[-1] = True
            u = t - base_t[0]
            shape = 1 + f.growth_per_day.get(g, 0.0) * u / 86400
            if g in f.climb:
                shape = shape + _climb(rng, f.climb[g], u / u[-1], f.climb_share)
            if g in f.cycle:
                shape = shape + f.cycle[g] * np.sin(2 * np.pi * t / 86400 + f.cycle_phase)
            shape = shape + sim.ar1(rng, 1, len(t), f.ar_phi, f.ar_share)[0]
            starts = []
            if f.fresh:
                starts.append(base_t[0] - 1.0)
            if g in f.restart_groups:
                starts.append(restart_at)
            for s0 in starts:
                low, tau = rng.uniform(*f.low), rng.uniform(*f.tau_h) * 3600
                since = t - s0
                young = low + (1 - low) * (1 - np.exp(-np.maximum(since, 0) / tau))
                shape = np.where(since >= 0, shape * young, shape)
                if s0 > base_t[0] and f.restart_label == "replica":
                    events.append((s0, "restart", f"{relay_name(g, i)} restarted", g, relay_name(g, i)))
            y = off[i] * np.maximum(shape, 0.05)
            rows.append((t, y) if not f.stagger else ((t + shift)[keep], y[keep]))
        data[g] = rows
        if g in f.restart_groups and f.restart_label == "group":
            events.append((restart_at, "restart", f"group {g} restarted", g, ""))
    if f.restart_groups and f.restart_label == "all":
        events.append((restart_at, "restart", "every relay restarted", "all", ""))
    return data, events


def _climb(rng: np.random.Generator, kind: str, x: np.ndarray, share: float) -> np.ndarray:
    """A climb of `share` of the level over x in [0, 1]: a line, one levelling off (1 − exp(−x/0.15),
    the calibration's levelling_off), or five uneven steps at the relay's own times (its staircase)."""
    if kind == "smooth":
        return share * x
    if kind == "levelling":
        return share * (1 - np.exp(-x / 0.15)) / (1 - np.exp(-1 / 0.15))
    at, size = np.sort(rng.uniform(0.0, 0.9, 5)), rng.dirichlet(np.ones(5)) * share
    return np.sum(size[:, None] * (x[None, :] >= at[:, None]), axis=0)


def _stamp(x: float) -> str:
    return datetime.fromtimestamp(x, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def write(folder: Path, data, events) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for g, relays in data.items():
        for i, (t, y) in enumerate(relays):
            rows += [(x, f"{_stamp(x)},syn,relay,,{relay_name(g, i)},{g},{int(v * 1024)}") for x, v in zip(t, y)]
    rows.sort(key=lambda r: r[0])
    (folder / "memory.csv").write_text(
        "timestamp,server,type,fingerprint,nickname,group,rss_kb\n" + "\n".join(r for _, r in rows) + "\n"
    )
    if events:
        ev = ["timestamp,event_type,description,group,replica"]
        ev += [f"{_stamp(t)},{k},{d},{g},{r}" for t, k, d, g, r in sorted(events)]
        (folder / "events.csv").write_text("\n".join(ev) + "\n")
    return write_experiment(folder)


def analyse_data(work: Path, data, events):
    folder = write(Path(tempfile.mkdtemp(prefix="fleet-", dir=work)), data, events)
    try:
        return analyse_folder(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def beyond(a) -> int:
    """Comparisons whose growth beside the baseline reads "grows beyond the baseline"."""
    return sum(1 for g in a.groups if g.growth_beside is not None and g.growth_beside.word == BEYOND)


def flat_beyond(a) -> int:
    """Groups whose report reads "Flat" beside their own "grows beyond the baseline" (issue 49 item B)."""
    return sum(
        1 for g in a.groups if g.status == "Flat" and g.growth_beside is not None and g.growth_beside.word == BEYOND
    )


def outcome(a) -> dict:
    return dict(
        growing=sum(g.status in GROWING for g in a.groups),
        groups=len(a.groups),
        steps=sum(in_steps(g) for g in a.groups),
        flat_beyond=flat_beyond(a),
        steps_of={g.name for g in a.groups if in_steps(g)},
        beyond=beyond(a),
        compared=sum(1 for g in a.groups if g.growth_beside is not None),
        sig=any(g.comparison is not None and g.comparison.significant for g in a.groups),
        statuses={g.name: g.status for g in a.groups},
        sig_groups={g.name for g in a.groups if g.comparison is not None and g.comparison.significant},
        headline=a.recommendation.headline() if a.recommendation else "",
        kinds=sorted({w.kind for w in a.warnings}),
    )


ROWS: list[tuple[str, str, str, int]] = []


def rate(k: int, n: int, how: str = "cp") -> str:
    """k of n with its 95% interval: Clopper–Pearson ("cp"), or Wilson's ("wilson": the growth-word parts)."""
    if not n:
        return "–"
    lo, hi = clopper_pearson(k, n) if how == "cp" else wilson(k, n)
    return f"{k / n:.1%} [{lo:.1%}–{hi:.1%}] ({k}/{n})"


def tally(rng, work, n, what, design, *, show=False):
    tot = dict(growing=0, groups=0, beyond=0, compared=0, sig=0, steps=0, flat_beyond=0, warned={})
    outs = []
    for i in range(n):
        print(f"  {what}: dataset {i + 1} of {n}", file=sys.stderr, flush=True)
        f = design()
        o = outcome(analyse_data(work, *make(rng, f)))
        outs.append((f, o))
        for k in ("growing", "groups", "beyond", "compared", "sig", "steps", "flat_beyond"):
            tot[k] += int(o[k])
        for k in o["kinds"]:
            tot["warned"][k] = tot["warned"].get(k, 0) + 1
        if show:
            print(
                f"    {o['statuses']} sig={sorted(o['sig_groups'])} beyond={o['beyond']} | {o['headline'][:140]}",
                file=sys.stderr,
            )
    return tot, outs


def part_fresh(rng, work, n):
    tot, _ = tally(rng, work, n, "fresh", lambda: draw(rng, fresh=True, days=float(rng.uniform(1.0, 3.0))))
    ROWS.append(
        (
            "every relay starts with the data (from 30–70% of its level, τ 1–12 h), flat, 1–3 d, n = 5: groups "
            "Growing (any growth word)",
            rate(tot["growing"], tot["groups"]),
            "≤ 1%",
            n,
        )
    )
    ROWS.append(('… comparisons "grows beyond the baseline"', rate(tot["beyond"], tot["compared"]), "≤ 5%", n))
    ROWS.append(("… datasets with a significant comparison", rate(tot["sig"], n), "≤ 5%", n))


def part_group_restart(rng, work, n):
    for label, within in (("group", (0.05, 0.95)), ("none", (0.05, 0.95)), ("replica", (0.05, 0.5))):
        tot, _ = tally(
            rng,
            work,
            n,
            f"group-restart ({label})",
            lambda: draw(
                rng,
                restart_groups=[str(rng.choice(list(GROUPS)))],
                restart_share=float(rng.uniform(*within)),
                restart_label=label,
                days=float(rng.uniform(1.0, 3.0)),
            ),
        )
        how = {
            "group": "one recorded event labelled with the group",
            "none": "no event",
            "replica": "one recorded event naming each relay",
        }[label]
        ROWS.append(
            (
                f"one group's relays all restart at {within[0]:.0%}–{within[1]:.0%} of 1–3 d, {how}, n = 5: "
                "groups Growing",
                rate(tot["growing"], tot["groups"]),
                "≤ 1%",
                n,
            )
        )
        ROWS.append(('… comparisons "grows beyond the baseline"', rate(tot["beyond"], tot["compared"]), "≤ 5%", n))
        ROWS.append(("… datasets with a significant comparison", rate(tot["sig"], n), "≤ 5%", n))


def part_fleet_restart(rng, work, n):
    tot, _ = tally(
        rng,
        work,
        n,
        "fleet-restart",
        lambda: draw(
            rng,
            restart_groups=list(GROUPS),
            restart_share=float(rng.uniform(0.05, 0.5)),
            restart_label="all",
            days=float(rng.uniform(1.0, 3.0)),
        ),
    )
    ROWS.append(
        (
            "every relay restarts together in the first half (one event for all), 1–3 d, n = 5: groups Growing",
            rate(tot["growing"], tot["groups"]),
            "≤ 1%",
            n,
        )
    )
    ROWS.append(('… comparisons "grows beyond the baseline"', rate(tot["beyond"], tot["compared"]), "≤ 5%", n))
    ROWS.append(("… datasets with a significant comparison", rate(tot["sig"], n), "≤ 5%", n))


def part_stagger(rng, work, n):
    same = errors = 0
    for i in range(n):
        print(f"  stagger: dataset {i + 1} of {n}", file=sys.stderr, flush=True)
        seed = int(rng.integers(2**31))
        kw = dict(ratio_b=float(rng.choice([1.0, 0.8])))
        f = draw(np.random.default_rng(seed), n=3, days=float(rng.uniform(1.0, 3.0)))
        outs = []
        for stagger in (False, True):
            f.stagger = stagger
            r = np.random.default_rng(seed)
            data, ev = make(r, f)
            if kw["ratio_b"] != 1.0:
                data["B"] = [(t, y * kw["ratio_b"]) for t, y in data["B"]]
            try:
                a = analyse_data(work, data, ev)
            except Exception as e:  # an internal error on imported data is what this part looks for
                errors += 1
                print(f"    error: {type(e).__name__}: {e}", file=sys.stderr)
                outs.append(None)
                continue
            outs.append(
                (
                    {
                        g.name: (g.status, g.usable, g.comparison.significant if g.comparison else None)
                        for g in a.groups
                    },
                    a.recommendation.winner if a.recommendation else None,
                )
            )
        same += outs[0] is not None and outs[0] == outs[1]
        if outs[0] != outs[1]:
            print(f"    differs: {outs[0]} / {outs[1]}", file=sys.stderr)
    ROWS.append(
        (
            "staggered samples (own offsets, ±30 s clocks, 2% ticks missed) against the same data aligned, n = 3, "
            "B at 1.0× or 0.8×: same words, usable counts, significance and winner",
            rate(same, n),
            "≥ 98%",
            n,
        )
    )
    ROWS.append(("… datasets ending in an internal error", rate(errors, 2 * n), "0", n))


def part_amplitude(rng, work, n):
    tot, outs = tally(
        rng,
        work,
        n,
        "amplitude",
        lambda: draw(
            rng,
            cycle={"A": 0.10, "B": 0.02, "C": 0.02, "Z": 0.02},
            cycle_phase=float(rng.uniform(0, 2 * np.pi)),
            days=float(rng.uniform(1.0, 3.0)),
        ),
    )
    a_sig = sum("A" in o["sig_groups"] for _, o in outs)
    warned = sum("daily-swing-differs" in o["kinds"] for _, o in outs)
    ROWS.append(
        (
            "group A swings ±10% with the time of day, the others ±2%, equal day means, 1–3 d ending at any hour, "
            "n = 5: A significantly different",
            rate(a_sig, n),
            "≤ 5%",
            n,
        )
    )
    ROWS.append(("… datasets with a significant comparison", rate(tot["sig"], n), "≤ 5%", n))
    ROWS.append(("… groups Growing", rate(tot["growing"], tot["groups"]), "≤ 1%", n))
    ROWS.append(("… daily-swing-differs warning", rate(warned, n), "100%", n))


def part_leak(rng, work, n):
    for per_day, days, fresh, m in (
        (0.03, (1.0, 2.5), False, 5),
        (0.08 / 1.5, (1.5, 1.5), False, 5),
        (0.08 / 1.5, (1.5, 1.5), False, 3),
        (0.01, (2.0, 5.0), False, 5),
        (0.08 / 1.5, (1.5, 1.5), True, 5),
        (0.08 / 1.5, (3.0, 3.0), True, 5),
    ):
        tot, outs = tally(
            rng,
            work,
            n,
            "leak",
            lambda: draw(
                rng, n=m, growth_per_day={"B": per_day}, days=float(rng.uniform(*days)), ar_share=0.02, fresh=fresh
            ),
        )
        b = sum(o["statuses"]["B"] in GROWING for _, o in outs)
        other = sum(sum(w in GROWING for g, w in o["statuses"].items() if g != "B") for _, o in outs)
        what = (
            f"{per_day:.1%}/day over {days[0]:g}–{days[1]:g} d"
            if days[0] != days[1]
            else f"+{per_day * days[0]:.0%} over {days[0]:g} d"
        )
        what += ", every relay starting with the data (τ 1–12 h)" if fresh else ""
        ROWS.append(
            (
                f"group B leaks {what} at 2% noise, n = {m}: B Growing (power)",
                rate(b, n, "wilson"),
                "≥ 80%" if per_day > 0.05 and not fresh else "stated",
                n,
            )
        )
        ROWS.append(("… flat groups Growing", rate(other, 3 * n, "wilson"), "≤ 1%", n))
        ROWS.append(
            (
                '… groups reading "Flat" beside their own "grows beyond the baseline"',
                rate(tot["flat_beyond"], tot["groups"], "wilson"),
                "0",
                n,
            )
        )


def part_shapes(rng, work, n):
    for kind in ("steps", "smooth", "levelling"):
        for m in (5, 3):
            tot, outs = tally(
                rng,
                work,
                n,
                f"shapes ({kind}, n = {m})",
                lambda: draw(rng, n=m, climb={"B": kind}, days=1.5, ar_share=0.02),
            )
            b = sum(o["statuses"]["B"] in GROWING for _, o in outs)
            steps = sum("B" in o["steps_of"] for _, o in outs)
            other = sum(sum(w in GROWING for g, w in o["statuses"].items() if g != "B") for _, o in outs)
            what = {
                "steps": "in five uneven steps (each relay its own times)",
                "smooth": "smoothly (a line)",
                "levelling": "levelling off (τ 15% of the window)",
            }[kind]
            ROWS.append(
                (
                    f"group B climbs +8% over 1.5 d {what} at 2% noise, n = {m}: B Growing (any growth word)",
                    rate(b, n, "wilson"),
                    "≥ 80%" if m == 5 else "stated",
                    n,
                )
            )
            ROWS.append(
                ('… B "in steps"', rate(steps, n, "wilson"), "stated (power)" if kind == "steps" else "≤ 1%", n)
            )
            ROWS.append(("… flat groups Growing", rate(other, 3 * n, "wilson"), "≤ 1%", n))
            ROWS.append(
                (
                    '… groups reading "Flat" beside their own "grows beyond the baseline"',
                    rate(tot["flat_beyond"], tot["groups"], "wilson"),
                    "0",
                    n,
                )
            )


PARTS = {
    "fresh": part_fresh,
    "group-restart": part_group_restart,
    "fleet-restart": part_fleet_restart,
    "stagger": part_stagger,
    "amplitude": part_amplitude,
    "leak": part_leak,
    "shapes": part_shapes,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", default="all", choices=["all", *PARTS])
    ap.add_argument("--datasets", type=int, default=40)
    ap.add_argument("--seed", type=int, default=20261128)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="alloclab-fleet-realism-"))
    t0 = time.time()
    try:
        for name, part in PARTS.items():
            if args.part in ("all", name):
                part(np.random.default_rng([args.seed, list(PARTS).index(name)]), work, args.datasets)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("| figure | measured | target | datasets |\n|---|---|---|---|")
    for r in ROWS:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} |")
    print(f"\n{time.time() - t0:.0f} s, seed {args.seed}, load {open('/proc/loadavg').read().split()[0]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
