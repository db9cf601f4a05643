"""One number for one thing (issue 27): every output of one real run — the terminal summary,
report.md, report.html, summary.json, summary.csv and `compare` — states the same level, change,
footprint and idle release for each group, under the same names."""

from __future__ import annotations

import csv
import html
import io
import json
import re

import pytest

from alloclab.analysis import two_runs
from alloclab.analysis.verdict import group_change
from alloclab.reporters import report as report_module
from alloclab.reporters.tables import TABLE_HEADERS, fmt


def _md_summary(md: str) -> list[dict]:
    lines = md.split("## Summary", 1)[1].splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("| group |"))
    head = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = []
    for ln in lines[start + 2 :]:
        if not ln.startswith("|"):
            break
        rows.append(dict(zip(head, (c.strip() for c in ln.strip("|").split("|")))))
    return rows


def _html_summary(page: str) -> list[dict]:
    table = re.search(r'<table class="summary">(.*?)</table>', page, re.S).group(1)
    head = [html.unescape(re.sub("<[^>]+>", "", h)) for h in re.findall(r"<th[^>]*>(.*?)</th>", table, re.S)]
    rows = []
    for tr in re.findall(r"<tr>(.*?)</tr>", table.split("<tbody>", 1)[1], re.S):
        cells = [html.unescape(re.sub("<[^>]+>", "", c)) for c in re.findall(r"<td[^>]*>(.*?)</td>", tr, re.S)]
        rows.append(dict(zip(head, cells)))
    return rows


@pytest.fixture(scope="module")
def outputs(report_run, tmp_path_factory):
    from rich.console import Console

    out = tmp_path_factory.mktemp("agree")
    path, report = report_module.report_run(report_run, out)
    from alloclab.reporters.terminal import print_summary

    console = Console(width=400, record=True, file=io.StringIO(), color_system=None)
    print_summary(report.analysis, console, report.rows)
    return {
        "analysis": report.analysis,
        "md": (out / "report.md").read_text(),
        "html": (out / "report.html").read_text(),
        "json": json.loads((out / "summary.json").read_text()),
        "csv": list(csv.DictReader(open(out / "summary.csv"))),
        "terminal": console.export_text(),
        "compare": two_runs.compare_runs(report_run, report_run),
    }


def test_every_output_states_the_same_figures_under_the_same_names(outputs):
    a = outputs["analysis"]
    md, page = _md_summary(outputs["md"]), _html_summary(outputs["html"])
    assert list(md[0]) == TABLE_HEADERS and list(page[0]) == TABLE_HEADERS  # same names, same order
    doc = {g["group"]: g for g in outputs["json"]["groups"]}
    csv_rows = {r["group"]: r for r in outputs["csv"]}
    compared = {d.key: d for d in outputs["compare"].groups}
    for g, mrow, hrow in zip(a.groups, md, page):
        assert mrow["group"] == hrow["group"] == g.name
        level = fmt(g.level_mb)
        # level: the same figure in every output (compare included: it states the report's level)
        assert mrow["level MB"] == hrow["level MB"] == level
        assert fmt(doc[g.name]["level_mb"]) == fmt(float(csv_rows[g.name]["level_mb"])) == level
        assert fmt(compared[g.name].level_a_mb) == fmt(compared[g.name].level_b_mb) == level
        assert level in outputs["terminal"]
        # change: one definition (the group's growth across replicas where computed)
        mb, share, hours = group_change(g)
        assert mrow["change over window"] == hrow["change over window"]
        if mb is not None:
            assert mrow["change over window"].startswith(f"{mb:+.0f} MB ({share:+.0%})")
            assert doc[g.name]["change_mb"] == pytest.approx(mb)
            if g.growth is not None and g.growth.change_mb is not None:
                assert mb == pytest.approx(g.growth.change_mb)
        # footprint: level − LazyFree with the level's own estimator, so never above the level
        assert mrow["footprint MB"] == hrow["footprint MB"] == fmt(g.footprint_mb)
        if g.footprint_mb is not None:
            assert g.footprint_mb <= g.level_mb + 1e-9
            if (g.lazyfree_share or 0) == 0:
                assert fmt(g.footprint_mb) == level
        # idle release: the same share in JSON and CSV, and the recommendation's words when it cites it
        if g.idle_released_share is not None:
            assert doc[g.name]["idle_released_share"] == pytest.approx(g.idle_released_share)
            assert float(csv_rows[g.name]["idle_released_share"]) == pytest.approx(g.idle_released_share)
    rec = a.recommendation
    best = a.group(rec.winner)
    if best.idle_released_share is not None:
        assert f"idle release {best.idle_released_share:.0%}" in rec.text()
    # the headline comes first everywhere the recommendation is shown
    assert outputs["md"].split("## Recommendation", 1)[1].strip().startswith(rec.headline())
    assert rec.headline().replace("**", "") in " ".join(outputs["terminal"].split())
    assert outputs["json"]["recommendation"]["headline"] == rec.headline()
