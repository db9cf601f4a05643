"""Groups against a baseline: replicas are the units, the test is Welch's t on log levels."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .rules import RULES


@dataclass
class Comparison:
    group: str
    n: int
    geo_mean_mb: float | None
    mean_mb: float | None
    status: str = "untestable"        # baseline | lower | higher | equivalent | inconclusive | untestable
    testable: bool = False            # n ≥ 2 in both this group and the baseline
    ratio: float | None = None        # geometric-mean ratio group / baseline
    ratio_ci: tuple[float, float] | None = None   # at ci_level (the comparison's Holm level)
    ci_level: float | None = None     # e.g. 0.975 when Holm tested this one at α/2
    diff_mb: float | None = None      # difference of arithmetic means
    p_raw: float | None = None
    p_adj: float | None = None        # Holm across the comparisons to the baseline
    significant: bool = False         # p_adj < alpha  ⇔  ratio_ci excludes 1
    equivalent: bool = False          # ratio_ci inside [1/(1+margin), 1+margin]
    margin: float = 0.05
    method: str = ""                  # "welch-log" or a fallback, e.g. "permutation-log (degenerate variance)"
    df: float | None = None           # Welch–Satterthwaite degrees of freedom
    cliffs_delta: float | None = None
    replicas_needed: int | None = None    # per group for 80% power (ratio, or the margin when near 1)
    p_permutation: float | None = None    # exact/sampled permutation p on log levels (cross-check)
    notes: list[str] = field(default_factory=list)   # assumption checks that failed or are weak


def compare_to_baseline(levels: dict[str, np.ndarray], baseline: str, *, alpha: float = 0.05,
                        margin: float = 0.05, seed: int = 0) -> dict[str, Comparison]:
    """Compare every group's per-replica steady levels (MB) with the baseline's."""
    raise NotImplementedError


def letters(levels: dict[str, np.ndarray], *, alpha: float = 0.05) -> dict[str, str]:
    """Compact letter display from all pairwise Welch-log tests, Holm over all pairs: groups that
    share a letter are not shown different, groups that share none are. Groups are lettered in
    order of increasing geometric mean ("a" = lowest)."""
    raise NotImplementedError


def design_min_p(replicas, baseline: str | None = None, *, method: str = "welch") -> float:
    """Smallest adjusted p the design can reach. `replicas` is {group: n} or (n_groups,
    n_per_group). Welch: 0 when every group has ≥ 2 replicas (the t statistic is unbounded), 1 when
    one has a single replica. Permutation: Holm factor × 2 / C(n_a + n_b, n_a)."""
    raise NotImplementedError


def design_warning(replicas, baseline: str | None = None, *, alpha: float = 0.05) -> str | None:
    """None, or one sentence on why a significant result is impossible or very unlikely."""
    raise NotImplementedError
