"""Calibration of host as a factor (analysis/hosts.py): false-positive rate of group comparisons
when hosts differ, balanced and unbalanced, pooled (the headline Welch + Holm) against blocked
(group effects within hosts, two-way model on log levels + Holm), and the F test of "no host
effect" when hosts do not differ.

Fleets as issue 24 describes them: 4 groups (baseline + 3), 8 units per host, no true group effect;
hosts differ by a log-normal host effect (sd 0.15: hosts ~15% apart) and units by noise (sd 0.08).
A false positive is any group called different from the baseline (family-wise, Holm at 5%).

    .venv/bin/python benchmarks/host_blocking.py [--sims 2000] [--seed 1]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from alloclab.analysis.hosts import host_factor
from alloclab.stats import compare_to_baseline

GROUPS = ["glibc", "a", "b", "c"]
# host -> units per group (GROUPS order), 8 units per host
LAYOUTS = {
    "balanced, 2 hosts": [[2, 2, 2, 2], [2, 2, 2, 2]],
    "balanced, 3 hosts": [[2, 2, 2, 2]] * 3,
    "unbalanced, 2 hosts": [[3, 2, 2, 1], [1, 2, 2, 3]],
    "strongly unbalanced, 2 hosts": [[4, 2, 1, 1], [0, 2, 3, 3]],
    "unbalanced, 3 hosts": [[4, 2, 1, 1], [2, 2, 2, 2], [0, 2, 3, 3]],
}


def simulate(layout, host_sd: float, noise_sd: float, rng) -> list[tuple[str, str, float]]:
    rows = []
    for h, counts in enumerate(layout):
        effect = rng.normal(0, host_sd)
        for g, n in zip(GROUPS, counts):
            rows += [(g, f"h{h}", float(100 * np.exp(effect + rng.normal(0, noise_sd)))) for _ in range(n)]
    return rows


def rates(layout, host_sd: float, noise_sd: float, sims: int, rng) -> dict[str, float]:
    pooled = blocked = host_hits = fitted = 0
    for _ in range(sims):
        rows = simulate(layout, host_sd, noise_sd, rng)
        levels = {g: np.array([v for gg, _, v in rows if gg == g]) for g in GROUPS}
        comps = compare_to_baseline(levels, "glibc", seed=int(rng.integers(1 << 30)))
        pooled += any(c.significant for g, c in comps.items() if g != "glibc")
        hf = host_factor(rows, "glibc")
        if hf is not None:
            fitted += 1
            blocked += any(c.significant for c in hf.group_effects)
            host_hits += hf.host_p is not None and hf.host_p < 0.05
    return {"pooled": pooled / sims, "blocked": blocked / max(fitted, 1), "host_test": host_hits / max(fitted, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sims", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    began = time.time()
    print(f"{args.sims} fleets per row, no true group effect; family-wise false-positive rate (Holm, alpha 0.05)")
    print(f"{'layout':32} {'host sd':>7} {'pooled':>7} {'blocked':>8} {'host F test rejects':>20}")
    for name, layout in LAYOUTS.items():
        for host_sd in (0.0, 0.15):
            r = rates(layout, host_sd, 0.08, args.sims, rng)
            print(f"{name:32} {host_sd:7.2f} {r['pooled']:7.3f} {r['blocked']:8.3f} {r['host_test']:20.3f}")
    print(f"({time.time() - began:.0f} s)")


if __name__ == "__main__":
    main()
