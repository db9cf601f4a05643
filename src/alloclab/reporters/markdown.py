"""report.md: the run's metadata, recommendation, summary, growth, warnings, charts, groups with
their provenance, replicas, extra sections and how the status words are decided."""

from __future__ import annotations

from pathlib import Path

from ..allocators.hardening_summary import summary as hardening_summary
from ..analysis import Analysis
from ..common.outputs import write_output
from ..common.timefmt import utc
from ..stats import status_phrase
from .input import ReportInput, Section
from .png import CHART_FILES
from .tables import BESIDE_INTRO, STATUS_RULES, TABLE_HEADERS, beside_lines, fmt, md_table, table_cells


def metadata_rows(report: ReportInput) -> list[list[str]]:
    """The run's facts (shared with the HTML page)."""
    meta, a = report.meta, report.analysis
    return [
        ["source", meta.get("source", "run")],
        ["host", meta.get("host", "–")],
        ["kernel", meta.get("kernel", "–")],
        ["glibc", meta.get("glibc", "–")],
        ["CPU", f"{meta.get('cpu', '–')} ({meta.get('ncpu', '?')} cores)"],
        ["alloclab", meta.get("alloclab_version", "–")],
        ["started", utc(meta.get("started_at"))],
        ["ended", utc(meta.get("ended_at"))],
        ["end reason", meta.get("end_reason", "–")],
        ["interval", f"{meta.get('interval', '–')} s"],
        ["metric", a.metric.upper()],
        ["baseline", _baseline(report)],
        ["seed", meta.get("seed", "–")],
        ["phases", meta.get("phases", "–")],
        ["cgroups", meta.get("cgroups", "–")],
    ]


def _baseline(report: ReportInput) -> str:
    """The group every other is compared with; said so when `report --baseline` chose another than the run's."""
    run_baseline, chosen = report.meta.get("baseline"), report.analysis.baseline
    return chosen if run_baseline in (None, chosen) else f"{chosen} (chosen for this report; the run's: {run_baseline})"


def extra_table_rows(report: ReportInput) -> tuple[list[str], list[list[str]]]:
    """Secondary figures per group, with its heap hardening beside memory and CPU (the trade-off)."""
    hardening = {g.name: hardening_summary(g.hardening) or "–" for g in report.groups}
    return (
        [
            "group",
            "idle release",
            "release events",
            "frag. overhead MB",
            "ops/s",
            "CPU µs/op",
            "Cliff's δ",
            "heap hardening",
        ],
        [
            [
                r["group"],
                fmt(r["idle_released_share"], ".0%"),
                fmt(r["release_events"], ".0f"),
                fmt(r["frag_overhead_mb"]),
                fmt(r["ops_per_s"], ",.0f"),
                fmt(r["cpu_us_per_op"], ".3f"),
                fmt(r["cliffs_delta"], "+.2f"),
                hardening.get(r["group"], "–"),
            ]
            for r in report.rows
        ],
    )


def summary_note(a: Analysis) -> str:
    return (
        f"Figures: {a.level_basis}. "
        + (f"Comparable window: {a.window.basis}. " if a.window else "")
        + "Ratio intervals are at each comparison's Holm level (they exclude 1 exactly when the adjusted p is "
        "below 0.05); groups sharing a letter are not shown different. " + (a.metric_note or "")
    )


def group_rows(report: ReportInput) -> tuple[list[str], list[list[str]]]:
    return (
        ["group", "asked for", "kind", "reports itself as", "library", "sha256", "env"],
        [
            [
                g.name,
                g.asked_for,
                g.kind or "–",
                f"{g.family or ''} {g.version or ''}".strip() or "–",
                g.library_path or "–",
                (g.library_sha256 or "–")[:16],
                _env(g.env),
            ]
            for g in report.groups
        ],
    )


def _env(env: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in env.items()) or "–"


def replica_rows(report: ReportInput, strong=lambda s: f"**{s}**") -> tuple[list[str], list[list[str]]]:
    """The replica table; `strong` marks what needs attention (markdown bold by default)."""
    verify = {r["name"]: r["verify_detail"] for r in report.replicas}
    return (
        [
            "replica",
            "group",
            "verified",
            "steady MB",
            "peak MB",
            "final MB",
            "change [95% CI]",
            "release events",
            "status",
            "verification / exclusion",
        ],
        [
            [
                r.name,
                r.group,
                {True: "yes", False: strong("no"), None: "?"}[r.verified],
                fmt(r.steady_mb),
                fmt(r.peak_mb),
                fmt(r.final_mb),
                f"{fmt(r.change_mb, '+.0f')} MB [{fmt(r.change_lo, '+.0f')}, {fmt(r.change_hi, '+.0f')}]",
                str(r.release_events),
                status_phrase(r.status, r.growth_shape),
                (verify.get(r.name) or "–") + (f"; {strong('excluded')}: {r.excluded}" if r.excluded else ""),
            ]
            for r in report.analysis.replicas
        ],
    )


METHOD_NOTE = (
    "Steady state is the post-warm-up part of the replica's last process on its group's allocator. Replicas "
    "are the statistical units: Welch's t on log levels, Holm across the comparisons to the baseline, "
    "geometric-mean ratio intervals at each comparison's Holm level, a compact letter display instead of "
    "ranks, and a group with one replica is untestable. See docs/method/index.md."
)


class MarkdownReporter:
    name = "markdown"

    def write(self, report: ReportInput, out_dir: Path) -> list[Path]:
        return [write_output(out_dir, "report.md", render(report, out_dir))]


def provenance_value(key: str, value) -> str:
    """One build-provenance value for a reader: times (*_at, Unix seconds) in UTC, lists joined,
    nested records as `key=value` pairs, text and hashes in code spans; never a Python repr."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)) and key.endswith("_at"):
        return utc(float(value))
    if isinstance(value, (int, float)):
        return f"{value:g}"
    if isinstance(value, list):
        return ", ".join(provenance_value(key, v) for v in value) or "–"
    if isinstance(value, dict):
        return "; ".join(f"{k}={provenance_value(k, v)}" for k, v in sorted(value.items()) if v not in (None, ""))
    text = str(value).replace("`", "'")
    return f"`{text}`"


def render(report: ReportInput, out_dir: Path) -> str:
    a = report.analysis
    md = [f"# alloclab report: {report.run_name}", "", md_table(["", ""], metadata_rows(report))]
    md += [
        "",
        "## Recommendation",
        "",
        a.recommendation.text(),
        "",
        "## Summary",
        "",
        summary_note(a),
        "",
        md_table(TABLE_HEADERS, [table_cells(r) for r in report.rows]),
        "",
    ]
    md += _published_section(a) + _age_section(a) + _segments_section(a)
    md += [md_table(*extra_table_rows(report)), ""]
    md += [
        "## Growth across replicas",
        "",
        "Each group's change over its common window, tested across its clean replicas (log end/start, one-sample t, "
        "Holm across groups); this decides a group's Growing/Bloating.",
        "",
    ]
    md += [
        f"- **{g.name}** ({status_phrase(g.status, g.growth_shape)}): {g.growth.reason or 'not tested'}"
        for g in a.groups
        if g.growth
    ] or ["- no common window"]
    beside = beside_lines(a)
    if beside:
        md += ["", BESIDE_INTRO, ""] + [f"- **{name}** {word}: {why}" for name, word, why in beside]
    left = [(g.name, r) for g in a.groups for r in a.replicas if r.group == g.name and r.excluded]
    if left:
        md += ["", "Left out of the comparison (data shown in the replica table):", ""]
        md += [f"- {r.name} ({g}): {r.excluded}" for g, r in left]
    if a.duplicates:
        md += ["", "Duplicated samples dropped (one process sampled under two names):", ""]
        md += [
            f"- {d.dropped_from}: {d.equal} samples equal to {d.kept}'s dropped ({d.rule}); {d.remaining} kept"
            for d in a.duplicates
        ]
    md += ["", "## Warnings", ""]
    md += [f"- **{w.kind}** ({w.severity}): {w.message}" for w in a.warnings] or ["- none"]
    charts = [n for n in CHART_FILES if (out_dir / "charts" / n).exists()]
    md += ["", "## Charts", "", "Interactive versions (hover, zoom, toggle groups): [report.html](report.html).", ""]
    md += [f"![{Path(n).stem}](charts/{n})" for n in charts]
    for s in report.sections:
        md += [""] + section_markdown(s, out_dir)
    md += ["", "## Groups", "", md_table(*group_rows(report))]
    built = [g for g in report.groups if g.provenance]
    if built:
        md += ["", "Allocator builds (catalog provenance):", ""]
        for g in built:
            md += [f"- **{g.name}**:"] + [
                f"  - {k}: {provenance_value(k, v)}"
                for k, v in sorted(g.provenance.items())
                if v not in (None, "", [], {})
            ]
    md += ["", "## Replicas", "", md_table(*replica_rows(report))]
    md += ["", "## How the status words are decided", ""]
    md += [f"- **{w}**: {rule}" for w, rule in STATUS_RULES.items()]
    md += ["", METHOD_NOTE, ""]
    if report.experiment_text is not None:
        fence = "```"
        while fence in report.experiment_text:  # a fence the file cannot close
            fence += "`"
        md += ["## Experiment file", "", fence + "toml", report.experiment_text.rstrip("\n"), fence, ""]
    return "\n".join(md)


def section_markdown(s: Section, out_dir: Path) -> list[str]:
    md = [f"## {s.title}", ""]
    for p in s.paragraphs:
        md += [p, ""]
    if s.table:
        md += [md_table(s.table.headers, s.table.rows), ""]
    md += [f"![{Path(n).stem}](charts/{n})" for n, _ in s.pngs if (out_dir / "charts" / n).exists()]
    return md


def _published_section(a: Analysis) -> list[str]:
    differing = [f for f in a.end_figures.values() if f.differs or f.why]
    if not differing:
        return []
    md = [
        "## Published-style against clean figures",
        "",
        "Published style: every replica listed for the group, whatever ran at the time. Clean: only replicas on the "
        "group's allocator throughout the comparable window. The verdict uses the clean figures.",
        "",
    ]
    md.append(
        md_table(
            ["group", "published-style MB (n)", "clean MB (n)", "why they differ"],
            [
                [
                    f.group,
                    f"{fmt(f.published_mb)} ({len(f.published)})",
                    f"{fmt(f.clean_mb)} ({len(f.clean)})",
                    "; ".join(f.why[:12]) + (" …" if len(f.why) > 12 else ""),
                ]
                for f in differing
            ],
        )
    )
    return md + [""]


def _age_section(a: Analysis) -> list[str]:
    t = a.ages
    if t is None or not t.points:
        return []
    md = [
        f"## By process age on the treatment ({t.unit} {' / '.join(f'{p:g}' for p in t.points)})",
        "",
        f"Median {a.metric.upper()} MB (replicas) at each age since the replica's last process on its group's allocator "
        "started; clean segments only. Matched age, where the summary above compares at one calendar time.",
        "",
    ]
    md.append(
        md_table(
            ["group"] + [f"{t.unit} {p:g}" for p in t.points],
            [[g] + [f"{v:.0f} ({n})" if v is not None else "–" for v, n in cells] for g, cells in t.cells.items()],
        )
    )
    return md + [""]


def _segments_section(a: Analysis) -> list[str]:
    md = []
    if a.label_mapping:
        md += [
            "## Event labels",
            "",
            md_table(
                ["label in events file", "taken to mean", "evidence"],
                [[m.label, ", ".join(m.groups) or "no group", m.evidence] for m in a.label_mapping.values()],
            ),
            "",
        ]
    cut = [s for s in a.series if len(s.segments) > 1 or (s.segments and s.segments[0].group != s.group)]
    if cut:
        md += [
            "## Segments",
            "",
            f"{len(cut)} replicas are cut where the allocator serving them changed or the process "
            "restarted; only segments on the group's own allocator enter its figures; spans of unknown allocator are "
            "excluded.",
            "",
        ]
        rows = []
        for s in cut[:60]:
            rows.append(
                [
                    s.name,
                    s.group,
                    "<br>".join(
                        f"{utc(g.start, minutes=True)} → {utc(g.end, minutes=True)}: {g.label} ({g.reason})"
                        for g in s.segments
                    ),
                ]
            )
        md.append(md_table(["replica", "group", "segments"], rows))
        if len(cut) > 60:
            md.append(f"\n… and {len(cut) - 60} more (replicas.csv)")
        md.append("")
    return md
