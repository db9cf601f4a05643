"""Each group's growth in MB beside the baseline's, from a reported run's replicas.csv.

`python benchmarks/tor_growth_beside.py RUN [--baseline GROUP]` prints every group's per-replica
change over the window (MB, from `alloclab report`'s replicas.csv) and Welch's t against the
baseline's changes. Why MB and not the share of the level: where the workload itself grows (tor's
descriptor store under a compressed churn, the same megabytes under every allocator), the same
+45 MB is +6% of a 750 MB glibc relay and +21% of a 200 MB mimalloc one, so the status words'
shares call the small relays Growing for the workload's growth. A difference in MB from the
baseline's is what the allocator adds. A diagnostic for docs/lab/results.md (issue 26) on the
replicas' own Theil–Sen changes; the analysis now makes the same judgement as a calibrated rule
(stats.growth_beside, "Growth beside the baseline" in docs/method/index.md, the report's Growth across
replicas section), on the start/end levels of the growth test across replicas.
"""

from __future__ import annotations

import argparse
import collections
import csv
import sys
from pathlib import Path

from scipy import stats


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a run directory with replicas.csv (alloclab report RUN)")
    ap.add_argument("--baseline", default="glibc", help="the group to compare with (default glibc)")
    args = ap.parse_args()
    table = args.run / "replicas.csv"
    if not table.is_file():
        print(f"{table}: not found; run `alloclab report {args.run}` first", file=sys.stderr)
        return 2
    changes: dict[str, list[float]] = collections.defaultdict(list)
    for row in csv.DictReader(table.open()):
        if row.get("change_mb"):
            changes[row["group"]].append(float(row["change_mb"]))
    if args.baseline not in changes:
        print(
            f"--baseline {args.baseline}: no group of that name with changes; groups: {', '.join(changes)}",
            file=sys.stderr,
        )
        return 2
    base = changes[args.baseline]
    for group, mb in changes.items():
        line = f"{group}: {', '.join(f'{x:+.0f}' for x in mb)} MB (mean {sum(mb) / len(mb):+.0f})"
        if group != args.baseline and len(mb) >= 2 and len(base) >= 2:
            diff = sum(mb) / len(mb) - sum(base) / len(base)
            p = stats.ttest_ind(mb, base, equal_var=False).pvalue
            line += f"; {diff:+.0f} MB beside {args.baseline}, Welch p {p:.2g}"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
