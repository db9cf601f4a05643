"""Does the order replicas start in line up with groups, and does it show in the readings?

    python benchmarks/start_order.py design            # pure: the groups' mean start positions
    python benchmarks/start_order.py runs [--seeds 6 11 22 24] [--replicas 4] [--seconds 40]

`design`: over 1,000 seeds, the gap between the groups' mean start positions (0 = no group starts
earlier on average) for the runner's order (runner.start_order: blocks of one replica per group,
the seeded group order reversed every other block) against a whole-run seeded shuffle (the order
before it).

`runs`: real A/A runs: two groups on the same allocator (glibc) and the same worker-pool model,
under each order and each seed; from the analysis' per-replica steady levels, the slope of the log
level on the start position (% per position: the physical start-order effect) and the groups'
log ratio b/a (0 in truth: every difference is noise or order). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alloclab import analysis
from alloclab.experiment_file import load_experiment
from alloclab.run import runner
from alloclab.store import Store
from tests.experiments import write_experiment

WORKLOAD = {"name": "worker-pool", "threads": 2, "modules": 800, "gap": 3}


def whole_shuffle(groups: list[str], replicas: int, seed: int) -> list[tuple[str, int]]:
    """The order before runner.start_order: one seeded shuffle of every replica."""
    order = [(g, i) for g in groups for i in range(1, replicas + 1)]
    random.Random(seed).shuffle(order)
    return order


ORDERS = {"blocked": runner.start_order, "shuffle": whole_shuffle}


def position_gap(order: list[tuple[str, int]]) -> float:
    pos: dict[str, list[int]] = {}
    for n, (g, _) in enumerate(order):
        pos.setdefault(g, []).append(n)
    means = [statistics.mean(p) for p in pos.values()]
    return max(means) - min(means)


def design() -> dict:
    out = {}
    for n_groups, replicas in ((2, 2), (2, 3), (2, 4), (3, 3), (5, 5)):
        groups = [chr(ord("a") + k) for k in range(n_groups)]
        row = {}
        for name, order in ORDERS.items():
            gaps = [position_gap(order(groups, replicas, s)) for s in range(1000)]
            row[name] = {
                "mean_gap": round(statistics.mean(gaps), 3),
                "max_gap": round(max(gaps), 3),
                "share_gap_ge_1": sum(g >= 1 for g in gaps) / len(gaps),
            }
        out[f"{n_groups}x{replicas}"] = row
    return out


def one_run(order_name: str, seed: int, replicas: int, seconds: int, root: Path) -> dict:
    runner.start_order = ORDERS[order_name]  # the benchmark's only seam: which order the runner uses
    warmup = max(10, seconds // 3)
    exp_file = write_experiment(
        root / f"{order_name}-{seed}.toml",
        "start-order-aa",
        None,
        {"a": "glibc", "b": "glibc"},
        replicas=replicas,
        interval="1s",
        baseline="a",
        seed=seed,
        phases={"warmup": f"{warmup}s", "load": f"{seconds - warmup}s"},
        tables={"workload": WORKLOAD},
    )
    result = runner.Runner(load_experiment(exp_file), root / f"{order_name}-{seed}").run()
    store = Store.open_readonly(result.run_dir / "run.db")
    position = {r["name"]: r["start_order"] for r in store.replicas()}
    levels = [
        (position[r.name], r.group, r.steady_mean_mb) for r in analysis.analyse(store).replicas if r.steady_mean_mb
    ]
    pos = np.array([p for p, _, _ in levels], float)
    log_level = np.log([v for _, _, v in levels])
    slope = float(np.polyfit(pos, log_level, 1)[0]) if len(set(pos)) > 1 else float("nan")
    by_group = {g: [math.log(v) for _, gg, v in levels if gg == g] for g in ("a", "b")}
    order = ORDERS[order_name](["a", "b"], replicas, seed)
    return {
        "order": order_name,
        "seed": seed,
        "position_gap": position_gap(order),
        "a_first": statistics.mean(n for n, (g, _) in enumerate(order) if g == "a")
        < statistics.mean(n for n, (g, _) in enumerate(order) if g == "b"),
        "slope_pct_per_position": round(100 * (math.exp(slope) - 1), 3),
        "log_ratio_b_a_pct": round(
            100 * (math.exp(statistics.mean(by_group["b"]) - statistics.mean(by_group["a"])) - 1), 3
        ),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("design", "runs"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[6, 11, 22, 24])
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--seconds", type=int, default=40)
    args = ap.parse_args()
    if args.what == "design":
        print(json.dumps(design(), indent=1))
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="alloclab-start-order-") as tmp:
        for seed in args.seeds:
            for order_name in ORDERS:
                rows.append(one_run(order_name, seed, args.replicas, args.seconds, Path(tmp)))
                print(json.dumps(rows[-1]), file=sys.stderr)
    summary = {
        name: {
            "mean_abs_ratio_pct": round(
                statistics.mean(abs(r["log_ratio_b_a_pct"]) for r in rows if r["order"] == name), 3
            ),
            "mean_slope_pct_per_position": round(
                statistics.mean(r["slope_pct_per_position"] for r in rows if r["order"] == name), 3
            ),
        }
        for name in ORDERS
    }
    print(json.dumps({"runs": rows, "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
