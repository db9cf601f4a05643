"""Would a paired test (replica i of every group against replica i of the baseline: same seed)
beat Welch's test on these runs? Measured on real run directories, not assumed.

    python benchmarks/seed_pairing.py RUN [RUN ...]

For each run and each group against the baseline, from the analysis' per-replica levels (the
steady mean, as the comparison uses): the correlation of log levels by replica index, each side's
log-SD, the SE of the mean paired log ratio against Welch's SE, and both p-values. Over runs of the
same experiment with the same seed (e.g. three `alloclab demo` runs), the share of each group's
replica-to-replica variance that is the seed's: a one-way random-effects split of log levels by
replica index (between-index variance beyond what the within-index spread explains). A paired test
only gains where both sides' spread is largely the seed's. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from alloclab import analysis
from alloclab.store import Store


def levels_by_index(db: Path) -> tuple[str, str, dict[str, dict[int, float]]]:
    store = Store.open_readonly(db)
    a = analysis.analyse(store)
    idx = {r["name"]: r["idx"] for r in store.replicas()}
    seed = store.meta().get("seed", "")
    out: dict[str, dict[int, float]] = defaultdict(dict)
    for r in a.replicas:
        if r.steady_mean_mb is None or r.verified is False or r.excluded is not None:
            continue
        out[r.group][int(idx[r.name])] = r.steady_mean_mb
    return a.baseline, seed, dict(out)


def seed_share(runs: list[dict[int, float]]) -> float | None:
    """Share of the variance of log levels that is between replica indices (the seed), from a
    one-way random-effects ANOVA over runs (method of moments, floored at 0)."""
    common = sorted(set.intersection(*(set(r) for r in runs))) if runs else []
    if len(runs) < 2 or len(common) < 2:
        return None
    x = np.log(np.array([[r[i] for i in common] for r in runs]))  # runs × indices
    k = x.shape[0]
    within = x.var(axis=0, ddof=1).mean()
    between = max(0.0, x.mean(axis=0).var(ddof=1) - within / k)
    total = between + within
    return float(between / total) if total > 0 else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run directories or run.db files")
    args = ap.parse_args()
    out: dict = {"runs": [], "seed_share": {}}
    by_seed: dict[tuple[str, str], list[dict[int, float]]] = defaultdict(list)
    for run in args.runs:
        db = run / "run.db" if run.is_dir() else run
        if not db.exists():
            print(f"error: no run.db at {db}; give a run directory made by `alloclab run`", file=sys.stderr)
            return 2
        base, seed, lv = levels_by_index(db)
        for g, by_idx in lv.items():
            by_seed[(seed, g)].append(by_idx)
        for g in lv:
            if g == base:
                continue
            common = sorted(set(lv[g]) & set(lv.get(base, {})))
            if len(common) < 3:
                continue
            x, y = np.log([lv[g][i] for i in common]), np.log([lv[base][i] for i in common])
            d = x - y
            out["runs"].append(
                {
                    "run": str(db),
                    "group": g,
                    "baseline": base,
                    "n": len(common),
                    "ratio": round(math.exp(d.mean()), 4),
                    "corr_by_seed": round(float(np.corrcoef(x, y)[0, 1]), 3),
                    "log_sd": [round(float(x.std(ddof=1)), 4), round(float(y.std(ddof=1)), 4)],
                    "se_paired": round(float(d.std(ddof=1) / math.sqrt(len(d))), 4),
                    "se_welch": round(math.sqrt(x.var(ddof=1) / len(x) + y.var(ddof=1) / len(y)), 4),
                    "p_paired": float(f"{sps.ttest_rel(x, y).pvalue:.3g}"),
                    "p_welch": float(f"{sps.ttest_ind(x, y, equal_var=False).pvalue:.3g}"),
                }
            )
    for (seed, g), runs in by_seed.items():
        share = seed_share(runs)
        if share is not None:
            out["seed_share"][f"{g} (seed {seed}, {len(runs)} runs)"] = round(share, 2)
    rs = out["runs"]
    if rs:
        out["median_corr_by_seed"] = float(np.median([r["corr_by_seed"] for r in rs]))
        out["median_se_ratio_paired_over_welch"] = round(
            float(np.median([r["se_paired"] / r["se_welch"] for r in rs])), 3
        )
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
