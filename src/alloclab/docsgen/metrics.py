"""docs/reference/metrics-and-alerts.md, generated: every metric the collector exports (read from
the exposition itself: names, types, labels and HELP of one full snapshot) and every alert rule of
monitoring/prometheus/alloclab-rules.yml (its expression, `for`, severity, and the comment above it).
Written with the rest of the reference by `python -m alloclab.docsgen.reference`."""

from __future__ import annotations

import re
from pathlib import Path

from ..serve import metrics

RULES = Path(__file__).resolve().parents[3] / "monitoring" / "prometheus" / "alloclab-rules.yml"
SUFFIX = {"counter": "_total"}  # the name a counter is exposed under


def _full_snapshot() -> metrics.Snapshot:
    """One unit with every figure present, so every family has a sample to read its labels from."""
    return metrics.Snapshot(
        t=1.0,
        host="h",
        units=[
            metrics.UnitFigures(
                "u.service",
                "g",
                "glibc",
                "",
                1,
                {c: 1 for c in metrics.MEMTYPES},
                1.0,
                True,
                0,
                start_time=1.0,
                generation="g1",
                generation_number=1,
                generation_time=1.0,
                pre_deploy_kb=1.0,
            )
        ],
    )


def exported() -> list[tuple[str, str, list[str], str]]:
    """(exposed name, type, labels, HELP) of every alloclab metric, in exposition order."""
    health = metrics.CollectorHealth()
    families = [metrics.build_info(), *metrics.families(_full_snapshot())]
    families += [f for c in health.collectors() for f in c.collect()]
    out = []
    for f in families:
        labels = sorted(
            {k for s in f.samples for k in s.labels if k != "le"}, key=lambda k: (k not in ("host", "unit"), k)
        )
        out.append((f.name + SUFFIX.get(f.type, ""), f.type, labels, f.documentation))
    return out


def rules(path: Path = RULES) -> list[dict]:
    """Each alert of the rules file with the comment written above its expression."""
    import yaml

    text = path.read_text()
    comments: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        m = re.match(r"\s*- alert:\s*(\S+)", line)
        if m:
            current = m.group(1)
            comments[current] = ""
        elif current and re.match(r"\s*#", line):
            comments[current] += " " + line.strip().lstrip("#").strip()
        elif current and line.strip().startswith("expr:"):
            current = None
    out = []
    for group in yaml.safe_load(text)["groups"]:
        for r in group["rules"]:
            if "alert" in r:
                out.append(
                    {
                        "alert": r["alert"],
                        "expr": " ".join(r["expr"].split()),
                        "for": r.get("for", "—"),
                        "severity": r.get("labels", {}).get("severity", ""),
                        "why": comments[r["alert"]].strip(),
                    }
                )
    return out


def table_cell(text: str) -> str:
    """One Markdown table cell: whitespace folded to single spaces, pipes escaped (both references' tables)."""
    return " ".join(text.split()).replace("|", "\\|")


def markdown(generated: str) -> str:
    lines = [
        "# Metrics and alert rules",
        "",
        generated,
        "",
        "What `alloclab fleet collect --listen ADDR` serves on `/metrics` (and `alloclab run --metrics ADDR`, the "
        "same layout for a run's replicas), and the alert rules shipped in "
        "`monitoring/prometheus/alloclab-rules.yml`. Figures carry only `host` and `unit`, so a unit's series "
        "survive a deploy or a rollback; what the unit runs is one `alloclab_unit_info` series joined on `host` "
        "and `unit`, labelled with the `generation` (the apply or deploy) it follows. How to use them after a "
        "deploy: [watch after a deploy](../how-to/watch-after-deploy.md).",
        "",
        "## Metrics",
        "",
        "| metric | type | labels | meaning |",
        "|---|---|---|---|",
    ]
    for name, kind, labels, help_ in exported():
        lines.append(f"| `{name}` | {kind} | {', '.join(labels) or '—'} | {table_cell(help_)} |")
    lines += [
        "| `process_*` | | | the collector process's own CPU, memory, descriptors and start time "
        "(prometheus_client's) |",
        "",
        "`memtype` is one of " + ", ".join(f"`{v}`" for v in metrics.MEMTYPES.values()) + ". A unit without a "
        "process is absent from every figure and `alloclab_unit_up` 0, never 0 bytes.",
        "",
        "## Alert rules",
        "",
        "| alert | for | severity | expression | why |",
        "|---|---|---|---|---|",
    ]
    for r in rules():
        lines.append(
            f"| `{r['alert']}` | {r['for']} | {r['severity']} | `{table_cell(r['expr'])}` | {table_cell(r['why'])} |"
        )
    lines += [
        "",
        "`promtool test rules alloclab-rules.test.yml` (in `monitoring/prometheus/`) runs each rule on its "
        "cases, firing and not.",
    ]
    return "\n".join(lines) + "\n"
