"""The summary figures and cells every reporter shares: one row per group, its table cells, the
status rules in words. Pure functions of an Analysis (no store, no files)."""

from __future__ import annotations

import math

from ..analysis import Analysis
from ..analysis.verdict import group_change
from ..common.timefmt import span as fmt_span
from ..stats import RULES, status_phrase

STATUS_RULES = {
    "Unverified": "the process did not map the group's allocator (or mapped another): excluded from statistics",
    "Too short": f"fewer than {RULES['min_samples']:.0f} steady samples or a window under {RULES['min_window_s']:.0f} s",
    "Bloating": f"Growing, and by at least {RULES['bloating_window_share']:.0%} of its level within the analysed window",
    "Growing": f"the change over the window (Theil–Sen × window) has a 95% interval above zero that survives "
    f"autocorrelation, is ≥ {RULES['growing_min_change_mb']:.0f} MB and > {RULES['flat_max_growth_share']:.0%} "
    f"of the level, or over a window of a day or more > {RULES['growing_min_rate_share_day']:.0%} of the level "
    'a day (a leak judged by its rate); or it climbs in steps ("Growing in steps", below); a group that '
    "grows beyond the baseline with a change above zero of its own is Growing",
    "Growing in steps": f"not Bloating, and climbed ≥ {RULES['ratchet_min_climb_share']:.0%} of its level in "
    f"≥ {RULES['ratchet_min_steps']:.0f} sudden steps beyond its noise, with no step down of "
    f"≥ {RULES['ratchet_max_drawdown']:.0%} of that climb (on its own series, or on its group's "
    "step evidence together): the early sign of long-run growth; a group is in steps when more of "
    "its Growing replicas are than are not",
    "Variable": f"interquartile range of the steady window > {RULES['variable_iqr_share']:.0%} of its median",
    "Flat": "none of the above",
}


def fmt(x: float | None, spec: str = ".1f", dash: str = "–") -> str:
    """A figure in `spec`, or a dash for a missing one (None, NaN)."""
    return dash if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def summary_rows(a: Analysis) -> list[dict]:
    """One dict per group: the figures of the summary table (also written as CSV/JSON). Change is
    analysis.verdict.group_change (the group's growth across replicas where computed), the same
    figure the recommendation and the growth section state."""
    rows = []
    for g in a.groups:
        c = g.comparison
        change_mb, change_share, window_h = group_change(g)
        rows.append(
            {
                "group": g.name,
                "allocator": g.allocator,
                "version": g.version,
                "baseline": g.is_baseline,
                "replicas": g.replicas,
                "verified": g.verified,
                "level_mb": g.level_mb,
                "published_mb": g.published_mb,
                "steady_mean_mb": g.steady_mean_mb,
                "steady_median_mb": g.steady_median_mb,
                "peak_mb": g.peak_mb,
                "final_mb": g.final_mb,
                "change_mb": change_mb,
                "change_share": change_share,
                "window_h": window_h,
                "growth_mb_per_h": g.growth_mb_h,
                "footprint_mb": g.footprint_mb,
                "lazyfree_share": g.lazyfree_share,
                "ratio_to_baseline": c.ratio if c else None,
                "ratio_ci_low": c.ratio_ci[0] if c and c.ratio_ci else None,
                "ratio_ci_high": c.ratio_ci[1] if c and c.ratio_ci else None,
                "ci_level": c.ci_level if c else None,
                "comparison": c.status if c else None,
                "letters": c.letters if c else None,
                "replicas_needed": c.replicas_needed if c else None,
                "p_holm": c.p_holm if c else None,
                "cliffs_delta": c.cliffs_delta if c else None,
                "rank": c.rank if c else None,
                "idle_released_share": g.idle_released_share,
                "release_events": g.release_events,
                "frag_overhead_mb": g.frag_overhead_mb,
                "ops_per_s": g.ops_per_s,
                "cpu_us_per_op": g.cpu_us_per_op,
                "status": g.status,
                "status_reason": g.status_reason,
                **_beside_fields(g.growth_beside),
                "growth_shape": g.growth_shape,  # "steps": the status reads "Growing in steps" (stats.status_phrase)
            }
        )
    return rows


def _beside_fields(b) -> dict:
    """The group's growth beside the baseline's (stats.added_growth) as flat summary fields (None: not compared)."""
    return {
        "growth_beside": b.word if b else None,
        "excess_growth_mb": b.excess_mb if b else None,
        "excess_growth_share": b.excess_share if b else None,
        "excess_growth_lo_mb": b.excess_lo if b else None,
        "excess_growth_hi_mb": b.excess_hi if b else None,
        "excess_growth_ci_level": b.ci_level if b else None,
        "excess_growth_margin_mb": b.margin_mb if b else None,
        "excess_growth_p_holm": b.p_adj if b else None,
        "baseline_change_mb": b.baseline_change_mb if b else None,
    }


BESIDE_INTRO = (
    "Beside the baseline, in MB: each group's per-replica changes against the baseline's over the window "
    "common to the two (Welch's t, Holm across groups, the interval at its Holm level; a workload growth "
    f'every group shares cancels). "As the baseline does": the interval within ±'
    f"{RULES['beside_margin_share']:.0%} of the group's level at the window's start (over a window under a day, 95% of that: the edge medians' "
    "change spans 95% of it); the status word stays what the series shows."
)


def beside_lines(a: Analysis) -> list[tuple[str, str, str]]:
    """(group, word, reason) for each group compared with the baseline's growth."""
    return [(g.name, g.growth_beside.word, g.growth_beside.reason) for g in a.groups if g.growth_beside]


def _ratio_cell(row: dict) -> str:
    if row["baseline"]:
        return "baseline"
    if row["ratio_to_baseline"] is None:
        return "–"
    ci = f" [{row['ratio_ci_low']:.2f}–{row['ratio_ci_high']:.2f}]" if row["ratio_ci_low"] is not None else ""
    tag = (
        " (untestable)"
        if row["comparison"] == "untestable"
        else " (equivalent)"
        if row["comparison"] == "equivalent"
        else ""
    )
    return f"{row['ratio_to_baseline']:.2f}×{ci}{tag}"


def _growth_cell(row: dict) -> str:
    """Change over the window in MB and % of level with the window's length; a rate only where supported."""
    if row["change_mb"] is None:
        return "–"
    span = fmt_span((row["window_h"] or 0) * 3600)
    rate = f", {row['growth_mb_per_h']:+.2f} MB/h" if row["growth_mb_per_h"] is not None else ""
    return f"{row['change_mb']:+.0f} MB ({fmt(row['change_share'], '+.0%')}) / {span}{rate}"


def _allocator_cell(row: dict) -> str:
    return f"{row['allocator']} {row['version']}" if row["version"] else str(row["allocator"])


# The key columns first (group, level, ratio with its interval, status): a narrow page or a
# scrolled table still shows them whole (tests/integration/test_report_html_browser.py measures it)
TABLE_HEADERS = [
    "group",
    "level MB",
    "vs baseline [CI]",
    "status",
    "allocator",
    "verified",
    "footprint MB",
    "steady median MB",
    "peak MB",
    "final MB",
    "change over window",
    "p (Holm)",
    "letters",
]
KEY_COLUMNS = 4


def table_cells(row: dict) -> list[str]:
    verified = (
        f"{row['verified']}/{row['replicas']}"
        if row["verified"] or row["status"] == "Unverified"
        else f"n/a ({row['replicas']})"
    )  # imported data: nobody checked
    return [
        row["group"],
        fmt(row["level_mb"]),
        _ratio_cell(row),
        status_phrase(row["status"], row.get("growth_shape")),
        _allocator_cell(row),
        verified,
        fmt(row["footprint_mb"]),
        fmt(row["steady_median_mb"]),
        fmt(row["peak_mb"]),
        fmt(row["final_mb"]),
        _growth_cell(row),
        fmt(row["p_holm"], ".3g"),
        row["letters"] or "–",
    ]


def md_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(lines)
