"""TorUtils-like datasets through the user path (benchmarks/torutils_scenarios.py: a folder written,
imported with import_torutils and analysed with analyse): the words, comparisons and warnings an
operator gets under cycles, restarts and two-scale noise, the pooled intervals there, and false
Ratcheting when relays restart: --part scenarios, cycles, user-path, pooled-path and
ratchet-restarts of benchmarks/calibration.py.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from .common import STEPS, rate, row, shown


def _draw(rng: np.random.Generator, **fixed):
    """A TorUtils-like dataset design with its nuisance parameters drawn (so the figures hold across
    them, not at one setting): sampling 5/10/15 min, AR(1) φ 0.8–0.98 per sample at 1–2%, relay
    offsets lognormal or heavy-tailed (t4) with spread 5–15%, window start at any hour."""
    import torutils_scenarios as ts

    kw = dict(
        step_s=float(rng.choice([300.0, 600.0, 900.0])),
        ar_phi=float(rng.uniform(0.8, 0.98)),
        ar_share=float(rng.uniform(0.01, 0.02)),
        cv=float(rng.uniform(0.05, 0.15)),
        heavy=bool(rng.random() < 0.5),
        start_hour=float(rng.uniform(0, 24)),
        level_mb=float(rng.uniform(150, 600)),
    )
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
        return dict(
            group=(k_group, k_groups), rep=(k_rep, k_reps), sig=(k_sig, n), warn=(k_warn, n), bloat=(k_bloat, k_b)
        )

    c = count(
        lambda: _draw(
            rng, n=5, days=1.5, cycle_share=float(rng.uniform(0.02, 0.08)), cycle_phase=float(rng.uniform(0, 2 * np.pi))
        ),
        "cycle",
    )
    row(
        "daily cycle 2–8% (shared phase), no trend, 1.5 d, n = 5, window start at any hour: groups Growing/Bloating",
        rate(*c["group"]),
        "≤ 1%",
        n,
    )
    row("… replicas Growing/Bloating", rate(*c["rep"]), "stated", n)
    row("… datasets with a significant comparison (family-wise, Holm)", rate(*c["sig"]), "≤ 5%", n)
    c = count(
        lambda: _draw(
            rng,
            n=5,
            days=float(rng.uniform(1.5, 4)),
            cycle_share=float(rng.uniform(0.02, 0.08)),
            cycle_period_s=43200.0,
            cycle_phase=float(rng.uniform(0, 2 * np.pi)),
        ),
        "cycle12",
    )
    row("12-hour cycle 2–8%, 1.5–4 d, n = 5: groups Growing/Bloating", rate(*c["group"]), "≤ 1%", n)
    row("… replicas Growing/Bloating", rate(*c["rep"]), "stated", n)
    row("… datasets with a significant comparison (family-wise, Holm)", rate(*c["sig"]), "≤ 5%", n)
    if cycles_only:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
        return
    c = count(
        lambda: _draw(
            rng,
            n=5,
            days=1.5,
            restart_before_end_s={"B": (2 * 3600.0, 5 * 3600.0)},
            restart_low=float(rng.uniform(0.25, 0.6)),
            restart_regrow_s=float(rng.uniform(3, 12)) * 3600,
        ),
        "late",
    )
    row(
        "every relay of group B restarts 2–5 h before the end, no event, n = 5: datasets with a significant comparison",
        rate(*c["sig"]),
        "≤ 5%",
        n,
    )
    row("… restart-in-window warning", rate(*c["warn"]), "100%", n)
    row("… B relays called Bloating", rate(*c["bloat"]), "0%", n)
    c = count(
        lambda: _draw(
            rng,
            n=3,
            days=1.5,
            restart_before_end_s={"B": (3 * 3600.0, 30 * 3600.0)},
            restart_low=float(rng.uniform(0.25, 0.6)),
            restart_regrow_s=float(rng.uniform(3, 12)) * 3600,
        ),
        "any",
    )
    row(
        "every relay of B restarts at any position (3–30 h before the end of 36 h), no event, n = 3: significant comparison",
        rate(*c["sig"]),
        "≤ 5%",
        n,
    )
    row("… restart-in-window warning", rate(*c["warn"]), "100%", n)
    row("… B relays called Bloating", rate(*c["bloat"]), "stated", n)
    c = count(
        lambda: _draw(
            rng,
            n=5,
            days=float(rng.uniform(1.5, 9)),
            slow_share=0.03,
            ar_share=0.02,
            slow_tau_s=1.7 * 86400,
            step_s=900.0,
        ),
        "twoscale",
    )
    row(
        "two-scale noise (AR(1) 2% + slow wander 3%, τ 1.7 d), flat, 1.5–9 d @ 15 min, n = 5: replicas Growing/Bloating",
        rate(*c["rep"]),
        "stated",
        n,
    )
    row("… groups Growing/Bloating", rate(*c["group"]), "≤ 1%", n)
    for reps in (3, 5):
        c = count(lambda: _draw(rng, n=reps, days=float(rng.uniform(1, 9)), heavy=True, cv=0.2), "heavy")
        row(
            f"null, heavy-tailed relay offsets (t4, spread 20%), n = {reps}: significant comparison",
            rate(*c["sig"]),
            "≤ 5%",
            n,
        )
        c = count(lambda: _draw(rng, n=reps, days=2.0, cv=0.2, ratio={"B": 0.7}), "power")
        row(
            f"power: B at 0.70×, spread 20%, n = {reps}: datasets with a significant comparison",
            rate(*c["sig"]),
            "stated",
            n,
        )
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
        sc = _draw(
            rng,
            n=3,
            days=1.5,
            cycle_share=0.04 if kind == 0 else 0.0,
            restart_before_end_s={"B": (2 * 3600.0, 5 * 3600.0)} if kind == 1 else {},
            staircase={"A": (5, 0.08)} if kind == 2 else {},
        )
        t, mb, _ = ts.series(rng, sc)
        with tempfile.TemporaryDirectory(prefix="alloclab-userpath-") as tmp:
            folder = ts.write_folder(Path(tmp) / "data", t, mb)
            a = ts.analyse_folder(folder)
            subprocess.run(
                [exe, "import", "torutils", str(folder), "-o", str(Path(tmp) / "run")], check=True, capture_output=True
            )
            subprocess.run(
                [exe, "report", str(Path(tmp) / "run"), "-o", str(Path(tmp) / "rep")], check=True, capture_output=True
            )
            doc = json.loads((Path(tmp) / "rep" / "summary.json").read_text())
        fast = {
            (
                g.name,
                g.status,
                g.comparison.status if g.comparison else None,
                None if g.comparison is None or g.comparison.p_holm is None else round(g.comparison.p_holm, 9),
            )
            for g in a.groups
        }
        slow = {
            (g["group"], g["status"], g["comparison"], None if g["p_holm"] is None else round(g["p_holm"], 9))
            for g in doc["groups"]
        }
        kinds_fast, kinds_slow = sorted(w.kind for w in a.warnings), sorted(w["kind"] for w in doc["warnings"])
        same += fast == slow and kinds_fast == kinds_slow
        if not (fast == slow and kinds_fast == kinds_slow):
            print(f"  differs: {fast ^ slow} {kinds_fast} {kinds_slow}", file=sys.stderr)
    row(
        "user path: import_torutils + analyse against `alloclab import torutils` + `alloclab report` (summary.json): "
        "same words, comparisons, Holm p and warning kinds",
        f"{same} of {n} datasets",
        "all",
        n,
    )


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
    row(
        "through import + analyse, flat two-scale, 3 d @ 15 min, n = 5: replica interval coverage",
        rate(cover, total),
        "≥ 93%",
        total,
    )
    row("… replicas Growing/Bloating", rate(word, total), "≤ 1%", total)
    row("… groups Growing/Bloating", rate(grp, groups), "≤ 1%", groups)
    above = word = total = 0
    for i in range(n):
        print(f"  pooled path, +10%: dataset {i + 1} of {n}", file=sys.stderr, flush=True)
        a, _ = ts.run_scenario(rng, _draw(rng, n=5, days=3.0, step_s=900.0, ar_share=0.02, growth={"A": 0.10}), work)
        reps = [r for r in a.replicas if r.group == "A" and r.excluded is None and r.change_lo is not None]
        above += sum(r.change_lo > 0 for r in reps)
        word += sum(r.status in growing for r in reps)  # Growing includes Growing in steps
        total += len(reps)
    row("… group A +10%, AR(1) 2% φ 0.8–0.98: replica interval above 0", rate(above, total), "stated", total)
    row("… A replicas with a growth word", rate(word, total), "stated", total)
    shutil.rmtree(work, ignore_errors=True)


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
    base = int(rng.integers(2**62))
    thirds = ("early", "middle", "late")

    def design(r, noise, rec, relays, group, stair):
        # stair: the staircase cells' AR(1) SD (their group A steps), else False
        return ts.Scenario(
            n=5,
            days=1.5,
            step_s=600.0,
            ar_phi=0.9,
            ar_share=stair or 0.02,
            cv=float(r.uniform(0.05, 0.15)),
            heavy=bool(r.random() < 0.5),
            start_hour=float(r.uniform(0, 24)),
            level_mb=float(r.uniform(150, 600)),
            cycle_share=0.04 if noise == "cycle" else 0.0,
            cycle_phase=float(r.uniform(0, 2 * np.pi)),
            restart_share={group: (0.05, 0.95)} if relays else {},
            restart_relays={group: relays},
            restart_recorded=rec,
            restart_low=float(r.uniform(0.25, 0.6)),
            restart_regrow_s=float(r.uniform(3, 12)) * 3600,
            staircase={"A": (5, 0.08)} if stair else {},
        )

    specs = []
    for noise in ("flat", "cycle"):
        for rec in (False, True):
            for relays in (1, 5):
                specs.append(
                    (
                        f"{'cycle ±4% + ' if noise == 'cycle' else 'flat '}AR(1) 2% φ 0.9; "
                        f"{'recorded' if rec else 'unrecorded'}; {'one relay' if relays == 1 else 'every relay'} of B",
                        noise,
                        rec,
                        relays,
                        "B",
                        False,
                    )
                )
    for rec, relays, sd in ((False, 0, 0.01), (False, 5, 0.01), (True, 5, 0.01), (False, 1, 0.01), (False, 0, 0.02)):
        specs.append(
            (
                f"staircase +8% in A, AR(1) {sd:.0%} φ 0.9; {'no restart' if not relays else ('recorded' if rec else 'unrecorded')}"
                f"{'' if not relays else '; one relay' if relays == 1 else '; every relay'} of A",
                "flat",
                rec,
                relays,
                "A",
                sd,
            )
        )
    for k, (cell, noise, rec, relays, group, stair) in enumerate(specs):
        if cells and not cell.startswith(cells):
            continue
        r = np.random.default_rng([base, k])
        restarted = {q: [0, 0, 0] for q in thirds}  # per third: relays, Ratcheting, of those by the group route
        other = [0, 0, 0]  # relays not restarted: relays, Ratcheting, by the group route
        groups = [0, 0]  # groups Ratcheting (the group's word), groups
        g_restarted = [0, 0]  # the restarted group's word Ratcheting, datasets
        found = [0, 0, 0, 0]  # staircase relays: restarted found, restarted, not restarted found, not
        stair_by = {q: [0, 0] for q in thirds}  # restarted staircase relays per third: relays, found
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
                    share_at = (at - ts.T0 - sc.start_hour * 3600) / (sc.days * 86400)  # of the data's span
                    q = thirds[min(2, max(0, int(share_at * 3)))]
                if stair and g == "A":
                    j = 0 if at is not None else 2
                    found[j] += said
                    found[j + 1] += 1
                    if q:
                        stair_by[q][0] += 1
                        stair_by[q][1] += said
                    continue
                if said:  # a false call: say which relay, where it restarted and why (to read the cause)
                    print(
                        f"  Ratcheting: dataset {i + 1} {rep.name}, restart at {q or '-'} "
                        f"({'' if at is None else f'{share_at:.0%}'}): {rep.status_reason}",
                        file=sys.stderr,
                        flush=True,
                    )
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
                row(
                    f"ratchet-restarts, {cell}: restarted A relays found Ratcheting",
                    rate(found[0], found[1]),
                    "stated",
                    found[1],
                )
                for q in thirds:
                    if stair_by[q][0]:
                        row(
                            f"… restarted in the {q} third",
                            rate(stair_by[q][1], stair_by[q][0]),
                            "stated",
                            stair_by[q][0],
                        )
            row(
                f"ratchet-restarts, {cell}: A relays not restarted found Ratcheting",
                rate(found[2], found[3]) if found[3] else "–",
                "≥ 80%",
                found[3],
            )
            row("… A's group word Ratcheting", rate(g_restarted[0], g_restarted[1]), "stated", g_restarted[1])
        else:
            for q in thirds:
                k_, said, grp_ = restarted[q]
                if k_:
                    row(
                        f"ratchet-restarts, {cell}: restarted relays ({q} third) Ratcheting (by the group route)",
                        f"{rate(said, k_)} ({grp_})",
                        "≤ 1%",
                        k_,
                    )
            k_ = sum(v[0] for v in restarted.values())
            row(
                "… every restarted relay Ratcheting (by the group route)",
                f"{rate(sum(v[1] for v in restarted.values()), k_)} ({sum(v[2] for v in restarted.values())})",
                "≤ 1%",
                k_,
            )
            row(
                "… relays not restarted Ratcheting (by the group route)",
                f"{rate(other[1], other[0])} ({other[2]})",
                "≤ 1%",
                other[0],
            )
            row(
                "… groups whose word is Ratcheting (B's)",
                f"{rate(groups[0], groups[1])} ({g_restarted[0]} of {g_restarted[1]})",
                "≤ 1%",
                groups[1],
            )
        if relays:
            row("… restart-in-window warning", rate(warned, n), "100%", n)
        print(f"  ({took:.1f} s a dataset)", file=sys.stderr, flush=True)
    shutil.rmtree(work, ignore_errors=True)
