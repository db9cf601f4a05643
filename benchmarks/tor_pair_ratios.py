"""Ratios between pairs of a run's groups, each pair compared as the report compares a group with
its baseline (replica levels as analysed, Welch's t on log levels, geometric-mean ratio with its
95% interval; p also Holm-adjusted over the pairs given) — for runs whose question is not "against one baseline", e.g.
glibc against mimalloc 2.0.9 at each tor thread count (issue 26; docs/results.md).

    python benchmarks/tor_pair_ratios.py RUN NUMERATOR:DENOMINATOR [...]
"""
from __future__ import annotations

import sys

import numpy as np

from alloclab import stats
from alloclab.stats.compare import holm
from alloclab.analysis import analyse
from alloclab.analysis.rules import RULES
from alloclab.store import Store


def pair_ratios(run: str, pairs: list[tuple[str, str]]) -> list[str]:
    a = analyse(Store.open(run))
    out = []
    raw = [stats.compare_to_baseline({den: a.levels[den], num: a.levels[num]}, den, alpha=RULES["alpha"],
                                     margin=RULES["equivalence_margin"])[num] for num, den in pairs]
    p_adj = holm([c.p_raw for c in raw]) if len(raw) > 1 else [c.p_raw for c in raw]
    for (num, den), c, p in zip(pairs, raw, p_adj):
        out.append(f"{num} / {den}: {c.ratio:.2f}x [{c.ratio_ci[0]:.2f}-{c.ratio_ci[1]:.2f}] "
                   f"({c.geo_mean_mb:.1f} MB against {float(np.exp(np.mean(np.log(a.levels[den])))):.1f} MB; p {c.p_raw:.2g}, Holm over the pairs {p:.2g})")
    return out


if __name__ == "__main__":
    if len(sys.argv) < 3 or any(":" not in p for p in sys.argv[2:]):
        print("usage: python benchmarks/tor_pair_ratios.py RUN NUMERATOR:DENOMINATOR [...]", file=sys.stderr)
        sys.exit(2)
    for line in pair_ratios(sys.argv[1], [tuple(p.split(":", 1)) for p in sys.argv[2:]]):
        print(line)
