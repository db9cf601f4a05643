"""Ratios between pairs of a run's groups whose denominators differ, e.g. glibc against mimalloc
2.0.9 at each tor thread count (issue 26; docs/lab/results.md). Each pair is the report's own
comparison (analysis.comparisons.compare_groups: the replica levels as analysed, Welch's t on log
levels, geometric-mean ratio with its 95% interval), on the two groups alone; p is also
Holm-adjusted over the pairs given. Every group against one group: `alloclab report RUN --baseline GROUP`.

    python benchmarks/tor_pair_ratios.py RUN NUMERATOR:DENOMINATOR [...]
"""

from __future__ import annotations

import sys

from alloclab.analysis import analyse
from alloclab.analysis.comparisons import compare_groups
from alloclab.stats.group_tests import holm
from alloclab.store import Store


def pair_ratios(run: str, pairs: list[tuple[str, str]]) -> list[str]:
    a = analyse(Store.open(run))
    compared = [compare_groups({den: a.levels[den], num: a.levels[num]}, den) for num, den in pairs]
    p_adj = (
        holm([c[num].p_raw for c, (num, _) in zip(compared, pairs)])
        if len(pairs) > 1
        else [c[num].p_raw for c, (num, _) in zip(compared, pairs)]
    )
    out = []
    for (num, den), c, p in zip(pairs, compared, p_adj):
        n, d = c[num], c[den]
        out.append(
            f"{num} / {den}: {n.ratio:.2f}x [{n.ratio_ci[0]:.2f}-{n.ratio_ci[1]:.2f}] "
            f"({n.geo_mean_mb:.1f} MB against {d.geo_mean_mb:.1f} MB; p {n.p_raw:.2g}, Holm over the pairs {p:.2g})"
        )
    return out


if __name__ == "__main__":
    if len(sys.argv) < 3 or any(":" not in p for p in sys.argv[2:]):
        print("usage: python benchmarks/tor_pair_ratios.py RUN NUMERATOR:DENOMINATOR [...]", file=sys.stderr)
        sys.exit(2)
    for line in pair_ratios(sys.argv[1], [tuple(p.split(":", 1)) for p in sys.argv[2:]]):
        print(line)
