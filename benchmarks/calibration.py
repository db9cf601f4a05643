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

# the parts live in calibration_parts/, one module a topic; this file is the command that runs them
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests.simulated_series
from calibration_parts.beside import beside, beside_cycle_restart
from calibration_parts.common import POOLED_DESIGNS, ROWS, SHORT_DESIGNS, group_curve, rules_set
from calibration_parts.comparisons import comparisons, gates, identical, sequential, tor_verdict
from calibration_parts.fleet import fleet_realism
from calibration_parts.growth_words import (
    group_growth_test,
    growth_coverage,
    growth_frontier,
    growth_pooled,
    growth_two_scale,
    status_words,
)
from calibration_parts.ratchet import (
    noise_shapes,
    ratchet_climbs,
    ratchet_group_cal,
    ratchet_shape,
    ratchet_shared_cal,
    staircase_reach,
    staircases,
)
from calibration_parts.ratchet_designs import ratchet_bound, ratchet_ceiling, ratchet_combine, ratchet_curve
from calibration_parts.scenarios import pooled_path, ratchet_restarts, scenarios, user_path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke test: fewer simulations")
    ap.add_argument(
        "--datasets",
        type=int,
        default=0,
        help="datasets per scenario row (--part scenarios / cycles / user-path; default 200 / 100 / 30), "
        "simulations per row (--part gates / growth-frontier / staircases; 1000 / 200 / 400), groups per row (--part pooled / pooled-short; 200), datasets per cell (--part beside; 100)",
    )
    ap.add_argument("--replicas", default="5,3", help="group sizes of --part pooled / beside (comma-separated)")
    ap.add_argument(
        "--cells",
        action="append",
        default=[],
        metavar="PREFIX",
        help="--part pooled / pooled-short / beside / ratchet-group / ratchet-shared / ratchet-combine / ratchet-curve: only the series (beside: the cells) whose names "
        "start with PREFIX; repeat the option for more (a name may hold a comma: --cells 'flat two-scale' "
        "--cells '+10%%, AR(1)')",
    )
    ap.add_argument(
        "--designs",
        action="append",
        default=[],
        metavar="PREFIX",
        help="--part ratchet-group / ratchet-shared / ratchet-combine / ratchet-curve / noise-shapes: only the designs whose labels start with PREFIX; repeat the option for "
        "more (--designs '1.5 d' --designs '9 d'); the short windows of --part pooled-short ('0.5 d', '1 d @', '1.7 d') only when named",
    )
    ap.add_argument("--seed", type=int, default=20261122, help="seed of every simulation")
    ap.add_argument(
        "--smooth-degree",
        type=int,
        default=None,
        help="Ratcheting's smooth curve for this run (RULES ratchet_smooth_degree; default the rule's): "
        "1 measures the rule before session 11, a step beside a straight line",
    )
    ap.add_argument(
        "--group-alpha",
        type=float,
        default=None,
        help="the group route's level for this run (RULES ratchet_group_alpha; default the rule's): 0.005 "
        "measures the level session 15 first ran, whose 0.25%% column is the rule's",
    )
    ap.add_argument(
        "--group-curve",
        default="rule",
        choices=["rule", "cubic", "no-cycle", "bic"],
        help="the group route's smooth curve for this run (status.ratchet_group): 'cubic' without the "
        "levelling term, 'no-cycle' without the day's harmonics — what each costs; 'bic' the "
        "levelling term only where it earns its column (session 18)",
    )
    ap.add_argument(
        "--part",
        default="all",
        choices=[
            "all",
            "status",
            "growth",
            "compare",
            "sequential",
            "identical",
            "tor-verdict",
            "scenarios",
            "cycles",
            "two-scale",
            "staircases",
            "user-path",
            "gates",
            "staircase-reach",
            "growth-frontier",
            "pooled",
            "pooled-path",
            "pooled-short",
            "beside",
            "ratchet-group",
            "ratchet-bound",
            "ratchet-restarts",
            "beside-cycle-restart",
            "ratchet-climbs",
            "ratchet-shared",
            "ratchet-ceiling",
            "ratchet-shape",
            "ratchet-combine",
            "ratchet-curve",
            "noise-shapes",
            "fleet-realism",
        ],
        help="run one part only",
    )
    args = ap.parse_args()
    if args.group_alpha is not None and not 0 < args.group_alpha < 1:
        print(
            f"calibration.py: --group-alpha {args.group_alpha:g} is not a level — give one between 0 and 1 (e.g. 0.005)",
            file=sys.stderr,
        )
        return 2
    # this run's rules (RULES, shared with alloclab) and the group route's curve: set around the parts, restored after
    rules = {}
    if args.smooth_degree is not None:
        rules["ratchet_smooth_degree"] = args.smooth_degree
    if args.group_alpha is not None:
        rules["ratchet_group_alpha"] = args.group_alpha
    n = 60 if args.quick else 1000
    cells = tuple(c.strip() for c in args.cells if c.strip()) or None
    designs = tuple(d.strip() for d in args.designs if d.strip())
    # --designs' rows: the pooled designs, and the short ones only when a prefix names them (session 17)
    design_rows = tuple(d for d in POOLED_DESIGNS if not designs or d[0].startswith(designs)) + tuple(
        d for d in SHORT_DESIGNS if designs and d[0].startswith(designs)
    )
    unknown = [d for d in designs if not any(label.startswith(d) for label, *_ in POOLED_DESIGNS + SHORT_DESIGNS)]
    if unknown:  # before any simulation: a prefix that selects nothing (e.g. the old '1.5 d,3 d')
        print(
            f"calibration.py: no design label starts with {', '.join(map(repr, unknown))} — give one prefix per "
            f"--designs (repeat the option for more) of: {', '.join(label for label, *_ in POOLED_DESIGNS + SHORT_DESIGNS)}",
            file=sys.stderr,
        )
        return 2
    started = time.monotonic()
    parts = {  # each part has its own stream, so a part's figures do not depend on which others ran
        "status": lambda rng: status_words(rng, n // 2 if args.quick else 400),
        "growth": lambda rng: (
            growth_coverage(rng, n // 2 if args.quick else 400),
            group_growth_test(rng, n // 2 if args.quick else 1000),
        ),
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
        "pooled": lambda rng: growth_pooled(
            rng,
            args.datasets or (20 if args.quick else 200),
            tuple(int(k) for k in args.replicas.split(",")),
            POOLED_DESIGNS,
            cells,
        ),
        "pooled-short": lambda rng: growth_pooled(
            rng,
            args.datasets or (20 if args.quick else 200),
            tuple(int(k) for k in args.replicas.split(",")),
            SHORT_DESIGNS,
            cells or ("flat two-scale", "+10% in two-scale", "+10%, AR(1)"),
        ),
        "beside": lambda rng: beside(
            rng, args.datasets or (10 if args.quick else 100), tuple(int(k) for k in args.replicas.split(",")), cells
        ),
        "ratchet-group": lambda rng: ratchet_group_cal(
            rng,
            args.datasets or (20 if args.quick else 100),
            tuple(int(k) for k in args.replicas.split(",")),
            design_rows,
            cells,
        ),
        "ratchet-bound": lambda rng: ratchet_bound(rng, args.datasets or (200 if args.quick else 2000)),
        "ratchet-restarts": lambda rng: ratchet_restarts(rng, args.datasets or (4 if args.quick else 40), cells),
        "ratchet-climbs": lambda rng: ratchet_climbs(rng, args.datasets or (100 if args.quick else 750)),
        "beside-cycle-restart": lambda rng: beside_cycle_restart(
            rng, args.datasets or (4 if args.quick else 100), tuple(int(k) for k in args.replicas.split(",")), cells
        ),
        "ratchet-shared": lambda rng: ratchet_shared_cal(
            rng,
            args.datasets or (10 if args.quick else 50),
            tuple(int(k) for k in args.replicas.split(",")),
            design_rows,
            cells,
        ),
        "ratchet-ceiling": lambda rng: ratchet_ceiling(rng, args.datasets or (60 if args.quick else 600)),
        "ratchet-combine": lambda rng: ratchet_combine(
            rng, args.datasets or (10 if args.quick else 100), design_rows, cells
        ),
        "ratchet-curve": lambda rng: ratchet_curve(
            rng, args.datasets or (10 if args.quick else 100), design_rows, cells
        ),
        "noise-shapes": lambda rng: noise_shapes(
            rng,
            args.datasets or (20 if args.quick else 200),
            tuple(int(k) for k in args.replicas.split(",")),
            design_rows,
            cells,
        ),
        # last: every earlier part keeps its stream
        "ratchet-shape": lambda rng: ratchet_shape(rng, args.datasets or (100 if args.quick else 1000)),
        "fleet-realism": lambda rng: fleet_realism(rng, args.datasets or (10 if args.quick else 40)),
    }
    names = list(parts)
    names.insert(
        names.index("pooled-path"), "ratchet-pooled"
    )  # retired; its stream number kept so later parts reproduce
    stream = {name: names.index(name) for name in parts}
    # beside and ratchet-group were written side by side (session 10), each measured on the stream after
    # pooled-short's: both keep it so their documented figures reproduce (different simulations, so the
    # shared stream correlates nothing either claims)
    stream["ratchet-group"], stream["ratchet-bound"] = stream["beside"], stream["beside"] + 1
    ROWS.clear()  # this run's rows only (main may run more than once in one process: the tests call it)
    with rules_set(**rules), group_curve(args.group_curve):
        for name, part in parts.items():
            k = stream[name]
            if args.part == name or (
                args.part == "all"
                and name
                not in (
                    "cycles",
                    "pooled-short",
                    "ratchet-group",
                    "ratchet-bound",
                    "ratchet-restarts",
                    "beside-cycle-restart",
                    "ratchet-climbs",
                    "ratchet-shared",
                    "ratchet-ceiling",
                    "ratchet-combine",
                    "ratchet-curve",
                    "noise-shapes",
                    "ratchet-shape",
                    "fleet-realism",
                )
            ):  # cycles: a larger run of scenarios' first rows
                part(np.random.default_rng([args.seed, k]))
    print("| figure | measured | target | simulations |\n|---|---|---|---|")
    for name, value, target, k in ROWS:
        print(f"| {name} | {value} | {target} | {k} |")
    print(
        f"\nseed {args.seed}, {'quick' if args.quick else 'full'}, {time.monotonic() - started:.0f} s"
        + ("" if args.group_curve == "rule" else f", group route's curve: {args.group_curve}")
    )
    unmatched = [c for c in cells or () if not any(c in name for name, *_ in ROWS)]
    if unmatched:
        print(
            f"calibration.py: no row of --part {args.part} is a cell starting with {', '.join(map(repr, unmatched))}: "
            "give one name prefix per --cells (repeat the option for more)",
            file=sys.stderr,
        )
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
