"""Turns an Analysis into report.md, summary.json/csv and PNG charts, and the terminal table."""
from __future__ import annotations

import csv
import json
import math
from dataclasses import asdict
from pathlib import Path

import numpy as np

from .analysis import STATUS_ORDER, Analysis, analyse
from .stats import RULES as STATS_RULES
from .timefmt import span as fmt_span, utc
from .store import Store

STATUS_RULES = {
    "Unverified": "the process did not map the group's allocator (or mapped another): excluded from statistics",
    "Too short": f"fewer than {STATS_RULES['min_samples']:.0f} steady samples or a window under {STATS_RULES['min_window_s']:.0f} s",
    "Bloating": f"Growing, and by at least {STATS_RULES['bloating_window_share']:.0%} of its level within the analysed window",
    "Growing": f"the change over the window (Theil–Sen × window) has a 95% interval above zero that survives "
               f"autocorrelation, is ≥ {STATS_RULES['growing_min_change_mb']:.0f} MB and > {STATS_RULES['flat_max_growth_share']:.0%} of the level",
    "Ratcheting": f"not Growing, but climbed ≥ {STATS_RULES['ratchet_min_climb_share']:.0%} of its level with no release for "
                  f"≥ {STATS_RULES['ratchet_min_quiet_s'] / 60:.0f} min and ≥ {STATS_RULES['ratchet_min_quiet_share']:.0%} of the steady window, "
                  "up to its end: the early sign of long-run growth",
    "Variable": f"interquartile range of the steady window > {STATS_RULES['variable_iqr_share']:.0%} of its median",
    "Flat": "none of the above",
}


def _f(x: float | None, fmt: str = ".1f", dash: str = "–") -> str:
    return dash if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def summary_rows(a: Analysis) -> list[dict]:
    """One dict per group: the figures of the summary table (also written as CSV/JSON)."""
    rows = []
    for g in a.groups:
        c = g.comparison
        rows.append({
            "group": g.name, "allocator": g.allocator, "version": g.version, "baseline": g.is_baseline,
            "replicas": g.replicas, "verified": g.verified,
            "level_mb": g.level_mb, "published_mb": g.published_mb,
            "steady_mean_mb": g.steady_mean_mb, "steady_median_mb": g.steady_median_mb,
            "peak_mb": g.peak_mb, "final_mb": g.final_mb, "change_mb": g.change_mb, "change_share": g.change_share,
            "window_h": g.window_h, "growth_mb_per_h": g.growth_mb_h,
            "footprint_mb": g.footprint_mb, "lazyfree_share": g.lazyfree_share,
            "ratio_to_baseline": c.ratio if c else None,
            "ratio_ci_low": c.ratio_ci[0] if c and c.ratio_ci else None,
            "ratio_ci_high": c.ratio_ci[1] if c and c.ratio_ci else None,
            "ci_level": c.ci_level if c else None, "comparison": c.status if c else None,
            "letters": c.letters if c else None, "replicas_needed": c.replicas_needed if c else None,
            "p_holm": c.p_holm if c else None, "cliffs_delta": c.cliffs_delta if c else None,
            "rank": c.rank if c else None, "idle_released_share": g.idle_released_share,
            "release_events": g.release_events, "frag_overhead_mb": g.frag_overhead_mb,
            "ops_per_s": g.ops_per_s, "cpu_us_per_op": g.cpu_us_per_op, "status": g.status,
        })
    return rows


def _ratio_cell(row: dict) -> str:
    if row["baseline"]:
        return "baseline"
    if row["ratio_to_baseline"] is None:
        return "–"
    ci = f" [{row['ratio_ci_low']:.2f}–{row['ratio_ci_high']:.2f}]" if row["ratio_ci_low"] is not None else ""
    tag = " (untestable)" if row["comparison"] == "untestable" else " (equivalent)" if row["comparison"] == "equivalent" else ""
    return f"{row['ratio_to_baseline']:.2f}×{ci}{tag}"


def _growth_cell(row: dict) -> str:
    """Change over the window in MB and % of level with the window's length; a rate only where supported."""
    if row["change_mb"] is None:
        return "–"
    span = fmt_span((row["window_h"] or 0) * 3600)
    rate = f", {row['growth_mb_per_h']:+.2f} MB/h" if row["growth_mb_per_h"] is not None else ""
    return f"{row['change_mb']:+.0f} MB ({_f(row['change_share'], '+.0%')}) / {span}{rate}"


def _allocator_cell(row: dict) -> str:
    return f"{row['allocator']} {row['version']}" if row["version"] else str(row["allocator"])


TABLE_HEADERS = ["group", "allocator", "verified", "level MB", "footprint MB", "steady median MB", "peak MB", "final MB",
                 "change over window", "vs baseline [CI]", "p (Holm)", "letters", "status"]


def table_cells(row: dict) -> list[str]:
    verified = f"{row['verified']}/{row['replicas']}" if row["verified"] or row["status"] == "Unverified" \
        else f"n/a ({row['replicas']})"   # imported data: nobody checked
    return [row["group"], _allocator_cell(row), verified, _f(row["level_mb"]), _f(row["footprint_mb"]),
            _f(row["steady_median_mb"]), _f(row["peak_mb"]), _f(row["final_mb"]), _growth_cell(row),
            _ratio_cell(row), _f(row["p_holm"], ".3g"), row["letters"] or "–", row["status"]]


TERMINAL_COLUMNS = ["group", "allocator", "verified", "level MB", "final MB", "change over window",
                    "vs baseline [CI]", "p (Holm)", "letters", "status"]


def print_summary(a: Analysis, console) -> None:
    """The report's summary table, narrowed to fit a terminal."""
    from rich.table import Table
    table = Table(title=f"{a.metric.upper()} by group (baseline: {a.baseline}; {a.level_basis})")
    keep = [TABLE_HEADERS.index(h) for h in TERMINAL_COLUMNS]
    short = {"change over window": "change", "vs baseline [CI]": "× baseline [CI]", "p (Holm)": "p Holm"}
    for h in TERMINAL_COLUMNS:
        table.add_column(short.get(h, h), justify="left" if h in ("group", "allocator", "status") else "right")
    for row in summary_rows(a):
        cells = table_cells(row)
        table.add_row(*(cells[i] for i in keep))
    console.print(table)
    for w in a.warnings:
        console.print(f"[yellow]warning[/yellow] {w.kind} ({w.severity}): {w.message}")
    console.print(a.recommendation.text().replace("**", "").replace("*", ""))


def _md_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def write_report(run: str | Path, out_dir: Path | None = None, metric: str | None = None) -> tuple[Path, Analysis]:
    """Analyse a run and write report.md, summary.{csv,json}, replicas.csv and charts/*.png;
    returns the report's path and the analysis (for the terminal summary)."""
    store = Store.open(run)
    a = analyse(store, metric)
    out = Path(out_dir) if out_dir else store.run_dir
    (out / "charts").mkdir(parents=True, exist_ok=True)
    rows = summary_rows(a)
    (out / "summary.json").write_text(json.dumps({"metric": a.metric, "baseline": a.baseline, "groups": rows,
                                                   "basis": a.level_basis,
                                                   "window": {"start": a.window.start, "end": a.window.end} if a.window else None,
                                                   "warnings": [w.as_dict() for w in a.warnings],
                                                   "recommendation": a.recommendation.as_dict()}, indent=2, default=str))
    with open(out / "summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["group"])
        w.writeheader()
        w.writerows(rows)
    with open(out / "replicas.csv", "w", newline="") as f:
        reps = [asdict(r) for r in a.replicas]
        w = csv.DictWriter(f, fieldnames=list(reps[0]) if reps else ["name"])
        w.writeheader()
        w.writerows(reps)
    charts = draw_charts(store, a, out / "charts")
    meta = store.meta()
    md = [f"# alloclab report: {meta.get('name', store.run_dir.name)}", ""]
    md.append(_md_table(["", ""], [
        ["source", meta.get("source", "run")], ["host", meta.get("host", "–")], ["kernel", meta.get("kernel", "–")],
        ["glibc", meta.get("glibc", "–")], ["CPU", f"{meta.get('cpu', '–')} ({meta.get('ncpu', '?')} cores)"],
        ["alloclab", meta.get("alloclab_version", "–")], ["started", utc(meta.get("started_at"))],
        ["ended", utc(meta.get("ended_at"))], ["end reason", meta.get("end_reason", "–")],
        ["interval", f"{meta.get('interval', '–')} s"], ["metric", a.metric.upper()], ["seed", meta.get("seed", "–")],
        ["phases", meta.get("phases", "–")], ["cgroups", meta.get("cgroups", "–")]]))
    md += ["", "## Recommendation", "", a.recommendation.text(), "", "## Summary", "",
           f"Figures: {a.level_basis}. "
           + (f"Comparable window: {a.window.basis}. " if a.window else "")
           + "Ratio intervals are at each comparison's Holm level (they exclude 1 exactly when the adjusted p is "
             "below 0.05); groups sharing a letter are not shown different. " + (a.metric_note or ""), "",
           _md_table(TABLE_HEADERS, [table_cells(r) for r in rows]), ""]
    md += _published_section(a) + _age_section(a) + _segments_section(a)
    if meta.get("tor_network"):
        from .tornet import report_lines
        md += report_lines(meta, store.replicas())
    extra = [[r["group"], _f(r["idle_released_share"], ".0%"), _f(r["release_events"], ".0f"),
              _f(r["frag_overhead_mb"]), _f(r["ops_per_s"], ",.0f"), _f(r["cpu_us_per_op"], ".3f"),
              _f(r["cliffs_delta"], "+.2f")] for r in rows]
    md += [_md_table(["group", "idle release", "release events", "frag. overhead MB", "ops/s", "CPU µs/op", "Cliff's δ"], extra), ""]
    md += ["## Growth across replicas", "",
           "Each group's change over its common window, tested across its clean replicas (log end/start, one-sample t, "
           "Holm across groups); this decides a group's Growing/Bloating.", ""]
    md += [f"- **{g.name}** ({g.status}): {g.growth.reason or 'not tested'}" for g in a.groups if g.growth] or ["- no common window"]
    left = [(g.name, r) for g in a.groups for r in a.replicas if r.group == g.name and r.excluded]
    if left:
        md += ["", "Left out of the comparison (data shown in the replica table):", ""]
        md += [f"- {r.name} ({g}): {r.excluded}" for g, r in left]
    if a.duplicates:
        md += ["", "Duplicated samples dropped (one process sampled under two names):", ""]
        md += [f"- {d.dropped_from}: {d.equal} samples equal to {d.kept}'s dropped ({d.rule}); {d.remaining} kept"
               for d in a.duplicates]
    md += ["", "## Warnings", ""]
    md += [f"- **{w.kind}** ({w.severity}): {w.message}" for w in a.warnings] or ["- none"]
    md += ["", "## Charts", ""] + [f"![{c.stem}](charts/{c.name})" for c in charts]
    md += ["", "## Groups", ""]
    grows = store.groups()
    md.append(_md_table(["group", "asked for", "kind", "reports itself as", "library", "sha256", "env"],
                        [[g["name"], g["allocator"], g["kind"] or "–", f"{g['family'] or ''} {g['version'] or ''}".strip() or "–",
                          g["library_path"] or "–", (g["library_sha256"] or "–")[:16], g["env_json"] or "{}"] for g in grows]))
    md += ["", "## Replicas", ""]
    verify = {r["name"]: r["verify_detail"] for r in store.replicas()}
    md.append(_md_table(["replica", "group", "verified", "steady MB", "peak MB", "final MB", "change [95% CI]",
                         "release events", "status", "verification / exclusion"],
                        [[r.name, r.group, {True: "yes", False: "**no**", None: "?"}[r.verified], _f(r.steady_mb),
                          _f(r.peak_mb), _f(r.final_mb),
                          f"{_f(r.change_mb, '+.0f')} MB [{_f(r.change_lo, '+.0f')}, {_f(r.change_hi, '+.0f')}]",
                          r.release_events, r.status,
                          (verify.get(r.name) or "–") + (f"; **excluded**: {r.excluded}" if r.excluded else "")]
                         for r in a.replicas]))
    md += ["", "## How the status words are decided", ""]
    md += [f"- **{w}**: {STATUS_RULES[w]}" for w in STATUS_ORDER]
    md += ["", "Steady state is the post-warm-up part of the replica's last process on its group's allocator. Replicas "
           "are the statistical units: Welch's t on log levels, Holm across the comparisons to the baseline, "
           "geometric-mean ratio intervals at each comparison's Holm level, a compact letter display instead of ranks, "
           "and a group with one replica is untestable. See docs/analysis.md.", ""]
    (out / "report.md").write_text("\n".join(md))
    store.conn.close()
    return out / "report.md", a


def _published_section(a: Analysis) -> list[str]:
    differing = [f for f in a.end_figures.values() if f.differs or f.why]
    if not differing:
        return []
    md = ["## Published-style against clean figures", "",
          "Published style: every replica listed for the group, whatever ran at the time. Clean: only replicas on the "
          "group's allocator throughout the comparable window. The verdict uses the clean figures.", ""]
    md.append(_md_table(["group", "published-style MB (n)", "clean MB (n)", "why they differ"],
                        [[f.group, f"{_f(f.published_mb)} ({len(f.published)})", f"{_f(f.clean_mb)} ({len(f.clean)})",
                          "; ".join(f.why[:12]) + (" …" if len(f.why) > 12 else "")] for f in differing]))
    return md + [""]


def _age_section(a: Analysis) -> list[str]:
    t = a.ages
    if t is None or not t.points:
        return []
    md = [f"## By process age on the treatment ({t.unit} {' / '.join(f'{p:g}' for p in t.points)})", "",
          f"Median {a.metric.upper()} MB (replicas) at each age since the replica's last process on its group's allocator "
          "started; clean segments only. Matched age, where the summary above compares at one calendar time.", ""]
    md.append(_md_table(["group"] + [f"{t.unit} {p:g}" for p in t.points],
                        [[g] + [f"{v:.0f} ({n})" if v is not None else "–" for v, n in cells] for g, cells in t.cells.items()]))
    return md + [""]


def _segments_section(a: Analysis) -> list[str]:
    md = []
    if a.label_mapping:
        md += ["## Event labels", "", _md_table(["label in events file", "taken to mean", "evidence"],
               [[m.label, ", ".join(m.groups) or "no group", m.evidence] for m in a.label_mapping.values()]), ""]
    cut = [s for s in a.series if len(s.segments) > 1 or (s.segments and s.segments[0].group != s.group)]
    if cut:
        md += ["## Segments", "", f"{len(cut)} replicas are cut where the allocator serving them changed or the process "
               "restarted; only segments on the group's own allocator enter its figures; spans of unknown allocator are "
               "excluded.", ""]
        rows = []
        for s in cut[:60]:
            rows.append([s.name, s.group, "<br>".join(f"{utc(g.start, minutes=True)} → {utc(g.end, minutes=True)}: {g.label} ({g.reason})"
                                                       for g in s.segments)])
        md.append(_md_table(["replica", "group", "segments"], rows))
        if len(cut) > 60:
            md.append(f"\n… and {len(cut) - 60} more (replicas.csv)")
        md.append("")
    return md


# ---- charts -------------------------------------------------------------------------------------

def _time_unit(span_s: float) -> tuple[str, float]:
    for name, sec in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if span_s >= 3 * sec:
            return name, sec
    return "seconds", 1.0


def draw_charts(store: Store, a: Analysis, out: Path) -> list[Path]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = [s for s in a.series if len(s.t)]
    if not series:
        return []
    t0 = min(s.t[0] for s in series)
    unit, scale = _time_unit(max(s.t[-1] for s in series) - t0)
    groups = [g.name for g in a.groups]
    colors = {g: plt.cm.tab10(i % 10) for i, g in enumerate(groups)}
    paths = []
    label = f"{a.metric.upper()} (MB)"

    # 1. median and interquartile band per group over time, events as vertical lines
    fig, ax = plt.subplots(figsize=(10, 5.5))
    for g in groups:
        # each replica from when it began its final stretch on the group's allocator: no mixed spans
        ss = [s for s in series if s.group == g and s.verified is not False and s.treatment_start is not None]
        if not ss:
            continue
        lo, hi = min(s.treatment_start for s in ss), max(s.t[-1] for s in ss)
        grid = np.linspace(lo, hi, 300)
        stack = np.vstack([np.where((grid >= s.treatment_start) & (grid <= s.t[-1]), np.interp(grid, s.t, s.mb), np.nan)
                           for s in ss])
        with np.errstate(all="ignore"):
            import warnings
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                med = np.nanmedian(stack, axis=0)
                q1, q3 = np.nanpercentile(stack, [25, 75], axis=0)
        x = (grid - t0) / scale
        ax.plot(x, med, color=colors[g], label=f"{g} (n={len(ss)})", lw=1.8)
        ax.fill_between(x, q1, q3, color=colors[g], alpha=0.2)
    for e in store.events(exclude=("start", "end", "replica_end")):
        if e["kind"] == "phase":
            ax.axvline((e["t"] - t0) / scale, color="grey", ls=":", lw=0.8)
        else:
            ax.axvline((e["t"] - t0) / scale, color="black", ls="--", lw=0.6, alpha=0.5)
    ax.set_xlabel(f"time since start ({unit})")
    ax.set_ylabel(label)
    ax.set_title("Memory over time on each group's own allocator: median and IQR over replicas\n(dotted: phases, dashed: events)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    paths.append(_save(fig, out / "timeseries.png"))

    # 2. distribution of steady-state level per replica, by group
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(groups) + 2), 5))
    data = [[r.steady_mean_mb for r in a.replicas if r.group == g and r.steady_mean_mb is not None and r.verified is not False]
            for g in groups]
    ax.boxplot([d if d else [np.nan] for d in data], showfliers=False)
    ax.set_xticks(range(1, len(groups) + 1), groups, rotation=20)
    rng = np.random.default_rng(0)
    for i, (g, d) in enumerate(zip(groups, data), 1):
        ax.scatter(i + rng.uniform(-0.12, 0.12, len(d)), d, color=colors[g], zorder=3, s=18)
    ax.set_ylabel(f"steady {label}")
    ax.set_title("Steady-state memory per replica")
    ax.grid(alpha=0.3, axis="y")
    paths.append(_save(fig, out / "distribution.png"))

    # 3. per-replica trajectories, one panel per group
    cols = min(3, len(groups))
    rows = math.ceil(len(groups) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), sharey=True, squeeze=False)
    for ax, g in zip(axes.flat, groups):
        for s in series:
            if s.group == g:
                unverified = s.verified is False
                for seg in s.segments or []:
                    m = (s.t >= seg.start) & (s.t <= seg.end)
                    other = unverified or seg.group != g      # another or an unknown allocator: not the group's data
                    ax.plot((s.t[m] - t0) / scale, s.mb[m], lw=0.8, color="black" if other else colors[g],
                            ls="--" if other else "-", alpha=0.5 if other else 0.8)
        ax.set_title(g, fontsize=9)
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(groups):]:
        ax.axis("off")
    fig.supxlabel(f"time since start ({unit})")
    fig.supylabel(label)
    fig.suptitle("Per-replica trajectories (black dashed: unverified or another/unknown allocator, excluded)")
    paths.append(_save(fig, out / "trajectories.png"))

    # 4. fragmentation: memory against live requested bytes, where the workload reports them
    with_live = [s for s in series if np.any(~np.isnan(s.live_mb))]
    if with_live:
        fig, ax = plt.subplots(figsize=(10, 5))
        for s in with_live:
            ax.plot((s.t - t0) / scale, s.mb, color=colors[s.group], lw=0.9, alpha=0.8)
            ax.plot((s.t - t0) / scale, s.live_mb, color=colors[s.group], lw=0.8, ls="--", alpha=0.6)
        for g in groups:
            ax.plot([], [], color=colors[g], label=g)
        ax.plot([], [], color="black", ls="--", label="live requested bytes")
        ax.set_xlabel(f"time since start ({unit})")
        ax.set_ylabel("MB")
        ax.set_title(f"{a.metric.upper()} (solid) against live requested bytes (dashed): the gap is allocator overhead")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        paths.append(_save(fig, out / "fragmentation.png"))
    return paths


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt
    plt.close(fig)
    return path
