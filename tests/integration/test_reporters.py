"""Every reporter on one fixed analysis result of a real short run (tests/integration/report_fixture.py):
what each writes is checked against the analysis, the store and the files the run used."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from alloclab.common import outputs
from alloclab.reporters import Reporter, Section, Table, default_reporters, write_all
from alloclab.reporters.csv_tables import CsvReporter
from alloclab.reporters.html import HtmlReporter, plotly_js
from alloclab.reporters.json_summary import JsonReporter
from alloclab.reporters.markdown import MarkdownReporter
from alloclab.reporters.plots import live_bytes, memory_over_time, trajectories
from alloclab.reporters.png import PngReporter, _Ctx, distribution_figure, fragmentation_figure, timeseries_figure
from alloclab.reporters.report import prepare
from alloclab.reporters.terminal import print_summary
from alloclab.reporters.torutils_csv import TorUtilsCsvReporter
from alloclab.store import Store
from tests.integration.report_fixture import HOSTILE_COMMENT

GROUPS = ["glibc", "jemalloc", "lazy"]


def test_every_default_reporter_has_the_interface_and_writes_the_listed_files(report_input, tmp_path):
    reporters = default_reporters()
    assert all(isinstance(r, Reporter) for r in reporters)
    assert len({r.name for r in reporters}) == len(reporters)
    written = write_all(report_input, tmp_path)
    top = {p.relative_to(tmp_path).parts[0] + ("/" if p.parent != tmp_path else "") for p in written}
    assert top == set(outputs.REPORT_FILES)
    assert all(p.exists() and p.stat().st_size > 0 for p in written)


def test_json_carries_metadata_provenance_host_and_the_exact_experiment(report_input, report_run, tmp_path, jemalloc):
    [path] = JsonReporter().write(report_input, tmp_path)
    doc = json.loads(path.read_text())
    a = report_input.analysis
    assert doc["format"] == 2 and doc["metric"] == "rss" and doc["baseline"] == "glibc"
    assert [g["group"] for g in doc["groups"]] == GROUPS
    for row, g in zip(doc["groups"], a.groups):
        assert row["level_mb"] == pytest.approx(g.level_mb)
    assert doc["experiment"] == (report_run.parent / "exp.toml").read_text()
    assert doc["experiment"].startswith(HOSTILE_COMMENT)
    assert doc["run"]["name"] == "reporters" and "experiment" not in doc["run"]["meta"]
    assert doc["host"]["kernel"] == os.uname().release and doc["host"]["ncpu"] == os.cpu_count()  # a number, not text
    builds = {b["name"]: b for b in doc["allocator_builds"]}
    real = os.path.realpath(jemalloc)
    assert builds["jemalloc"]["library_sha256"] == hashlib.sha256(Path(real).read_bytes()).hexdigest()
    assert os.path.realpath(builds["jemalloc"]["library_path"]) == real
    assert builds["glibc"]["is_baseline"] and not builds["jemalloc"]["is_baseline"]
    assert {w["kind"] for w in doc["warnings"]} == {w.kind for w in a.warnings}


def test_csv_rows_equal_the_analysis(report_input, tmp_path):
    summary, replicas = CsvReporter().write(report_input, tmp_path)
    rows = list(csv.DictReader(open(summary)))
    assert [r["group"] for r in rows] == GROUPS
    for r, g in zip(rows, report_input.analysis.groups):
        assert float(r["level_mb"]) == pytest.approx(g.level_mb) and r["status"] == g.status
    reps = list(csv.DictReader(open(replicas)))
    assert sorted(r["name"] for r in reps) == sorted(f"{g}-{i}" for g in GROUPS for i in range(1, 5))


def test_markdown_has_every_part_and_a_contributed_section(report_input, tmp_path):
    drawn = []

    def draw(path: Path) -> None:
        drawn.append(path)
        shutil.copy(Path(__file__).parent.parent.parent / "tests" / "data" / "README.md", path)  # any file will do

    extra = Section(
        key="sweep-pareto",
        title="Sweep: memory against throughput",
        paragraphs=["Front of **3** points."],
        table=Table(["config", "MB"], [["a|b", "1.0"]]),
        pngs=[("pareto.png", draw)],
        data={"points": 3},
    )
    report = replace(report_input, sections=[extra])
    PngReporter().write(report, tmp_path)
    [path] = MarkdownReporter().write(report, tmp_path)
    md = path.read_text()
    assert [p.name for p in drawn] == ["pareto.png"] and (tmp_path / "charts" / "pareto.png").is_file()
    assert report_input.analysis.recommendation.text() in md
    for name in ("timeseries", "distribution", "trajectories", "idle_release", "fragmentation"):
        assert f"](charts/{name}.png)" in md and (tmp_path / "charts" / f"{name}.png").exists()
    assert "[report.html](report.html)" in md
    assert "## Sweep: memory against throughput" in md and "| a\\|b | 1.0 |" in md and "](charts/pareto.png)" in md
    # the experiment file verbatim, in a fence it cannot close
    assert "```toml\n" + (report.experiment_text.rstrip("\n")) + "\n```" in md
    for g in GROUPS:
        assert f"| {g} |" in md


def _data_json(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="alloclab-data">(.*?)</script>', page, re.S)
    return json.loads(m.group(1))


def test_html_is_self_contained_and_escapes_the_experiment(report_input, tmp_path):
    [path] = HtmlReporter().write(report_input, tmp_path)
    page = path.read_text()
    own = page.replace(plotly_js(), "")
    assert page.count(plotly_js()) == 1  # plotly.js inline, once
    assert not re.search(r"<(script|img|link|iframe)[^>]*\s(src|href)=", own, re.I)
    assert "http://" not in own and "https://" not in own
    assert own.count("<script") == 3  # data, plotly.js, the renderer: nothing injected
    assert (
        "&lt;/script&gt;&lt;script&gt;window.__pwned = 1&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt; &lt;/pre&gt;"
        in own
    )
    data = _data_json(page)
    assert [f["id"] for f in data["figures"]] == [
        "memory",
        "trajectories",
        "distribution",
        "idle-release",
        "live-bytes",
        "footprint",
    ]
    for sev in {w.severity for w in report_input.analysis.warnings}:
        assert f'class="sev-{sev}"' in own
    assert 'name="viewport"' in own and "@media (max-width:640px)" in own


def hostile_copy(run: Path, tmp: Path, name: str) -> Path:
    """The run with its jemalloc group renamed (through the store API) to `name`."""
    copy = tmp / "hostile"
    copy.mkdir()
    for f in run.glob("run.db*"):
        shutil.copy(f, copy / f.name)
    store = Store.open(copy)
    gid = next(g["id"] for g in store.groups() if g["name"] == "jemalloc")
    store.begin()
    store.update_group(gid, name=name)
    store.close()
    return copy


HOSTILE_NAME = "<script>window.__pwned=2</script>%{y}"


def test_html_renders_a_hostile_group_name_as_text(report_run, tmp_path):
    report = prepare(hostile_copy(report_run, tmp_path, HOSTILE_NAME))
    [path] = HtmlReporter().write(report, tmp_path)
    own = path.read_text().replace(plotly_js(), "")
    assert "<script>window.__pwned=2" not in own
    assert "&lt;script&gt;window.__pwned=2&lt;/script&gt;" in own
    assert own.count("<script") == 3
    data = _data_json(path.read_text())  # in the data: plotly shows entities as text
    names = {t.get("name") for f in data["figures"] for t in f["figure"]["data"]}
    assert any(n and n.startswith("&lt;script&gt;window.__pwned=2&lt;/script&gt;%\u200b{y}") for n in names)


@pytest.mark.parametrize("width", [80, 120])
def test_terminal_summary_fits_and_keeps_key_cells_whole(report_input, width):
    from rich.console import Console

    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    print_summary(report_input.analysis, console, report_input.rows)
    text = console.export_text()
    assert max(len(ln) for ln in text.splitlines()) <= width
    assert "…" not in text
    for row in report_input.rows:
        assert row["group"] in text and row["status"] in text
        assert f"{row['level_mb']:.1f}" in text
        if not row["baseline"]:
            assert f"{row['ratio_to_baseline']:.2f}×" in text
            assert f"[{row['ratio_ci_low']:.2f}–{row['ratio_ci_high']:.2f}]" in text.replace("\n", " ") or (
                f"[{row['ratio_ci_low']:.2f}–" in text and f"{row['ratio_ci_high']:.2f}]" in text
            )
    header = next(ln for ln in text.splitlines() if "status" in ln and "group" in ln)
    if width == 120:
        assert "allocator" in header and "p Holm" in header
    else:
        assert "change" not in header  # a secondary column made room


def test_terminal_wide_console_keeps_every_column(report_input):
    from rich.console import Console

    console = Console(width=200, record=True, file=io.StringIO(), color_system=None)
    print_summary(report_input.analysis, console, report_input.rows)
    header = next(ln for ln in console.export_text().splitlines() if "status" in ln and "group" in ln)
    for h in ("allocator", "verified", "final MB", "change", "× baseline [CI]", "p Holm", "letters"):
        assert h in header


def _fewer(report_input, group: str, keep: int):
    a = report_input.analysis
    names = sorted(s.name for s in a.series if s.group == group)[:keep]
    series = [s for s in a.series if s.group != group or s.name in names]
    return replace(report_input, analysis=replace(a, series=series))


def test_png_charts_label_phases_start_at_zero_and_band_only_from_four(report_input, tmp_path):
    paths = PngReporter().write(report_input, tmp_path)
    assert {p.name for p in paths} == {
        "timeseries.png",
        "distribution.png",
        "trajectories.png",
        "idle_release.png",
        "fragmentation.png",
    }
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)
    c = _Ctx(_fewer(report_input, "jemalloc", 2))
    fig = timeseries_figure(c)
    ax = fig.axes[0]
    assert {t.get_text() for t in ax.texts} >= {"load", "idle"}  # phase lines carry their names
    bands = {coll.get_label() for coll in ax.collections}
    assert "glibc interquartile band" in bands and "jemalloc interquartile band" not in bands
    jem = [ln for ln in ax.lines if ln.get_color() == c.colors["jemalloc"]]
    assert len(jem) == 2  # each replica drawn instead
    assert distribution_figure(c).axes[0].get_ylim()[0] == 0
    frag = fragmentation_figure(c)
    assert [a.get_title() for a in frag.axes if a.axison] == [
        "glibc",
        "jemalloc",
    ]  # small multiples, lazy has no live bytes
    c.plt.close("all")


def test_html_band_only_from_four_replicas(report_input):
    fig = memory_over_time(_fewer(report_input, "jemalloc", 2).analysis, report_input.events)
    fills = [t["name"] for t in fig["data"] if t.get("fill")]
    assert fills == ["glibc Q3", "lazy Q3"]
    lines = [t for t in fig["data"] if t.get("legendgroup") == "jemalloc"]
    assert len(lines) == 2 and {t["customdata"][0][0] for t in lines} == {"jemalloc-1", "jemalloc-2"}
    labels = {n["text"] for n in fig["layout"]["annotations"]}
    assert {"load", "idle"} <= labels


def _with_spike(report_input, name: str, samples: int = 5_000, at: int = 2_347, mb: float = 10_000.0):
    """The report input with replica `name` resampled to `samples` samples over its own span, one of
    them (`at`, which an even 600-point sample skips) a spike of `mb`."""
    a = report_input.analysis
    s = next(s for s in a.series if s.name == name)
    t = np.linspace(s.t[0], s.t[-1], samples)
    src = np.clip(np.searchsorted(s.t, t, side="right") - 1, 0, len(s.t) - 1)
    mbs = s.mb[src].copy()
    mbs[at] = mb
    long = replace(
        s,
        t=t,
        mb=mbs,
        phase=s.phase[src],
        live_mb=s.live_mb[src],
        ops=s.ops[src],
        cpu_s=s.cpu_s[src],
        lazyfree_mb=s.lazyfree_mb[src],
    )
    return replace(report_input, analysis=replace(a, series=[long if x is s else x for x in a.series]))


def test_a_one_sample_spike_survives_in_the_html_and_png_chart_data(report_input):
    spiked = _with_spike(_fewer(report_input, "jemalloc", 2), "jemalloc-1")
    a, events = spiked.analysis, spiked.events

    def peaks(fig):  # the highest point of each HTML line drawn for jemalloc-1
        return [
            max(v for v in tr["y"] if v is not None)
            for tr in fig["data"]
            if tr.get("customdata") and tr["customdata"][0][0] == "jemalloc-1" and tr["type"] == "scatter"
        ]

    for fig in (memory_over_time(a, events), trajectories(a, events), live_bytes(a, events)):
        drawn = [tr for tr in fig["data"] if tr.get("customdata") and tr["customdata"][0][0] == "jemalloc-1"]
        assert drawn and all(len(tr["x"]) <= 1_200 for tr in drawn)  # thinned: 2 points per bucket and series
        assert 10_000.0 in peaks(fig), fig["layout"]["title"]
    c = _Ctx(spiked)
    frag = fragmentation_figure(c)
    jem = next(ax for ax in frag.axes if ax.get_title() == "jemalloc")
    assert any(10_000.0 in ln.get_ydata() for ln in jem.lines)
    assert max(len(ln.get_ydata()) for ln in jem.lines) <= 1_200
    ts = timeseries_figure(c)
    assert any(10_000.0 in ln.get_ydata() for ln in ts.axes[0].lines)
    c.plt.close("all")


def test_torutils_csv_reporter_writes_the_export_layout(report_input, tmp_path):
    paths = TorUtilsCsvReporter().write(report_input, tmp_path)
    assert [p.name for p in paths] == ["memory.csv", "events.csv", "diagnostics.csv", "experiment.json"]
    rows = list(csv.DictReader(open(paths[0])))
    assert {r["group"] for r in rows if r.get("group")} >= set(GROUPS)


def test_terminal_80_columns_with_long_group_names_cuts_nothing(report_run, tmp_path):
    from rich.console import Console

    run = hostile_copy(report_run, tmp_path, "jemalloc-5.3.0-background-thread-and-a-long-name")
    report = prepare(run)
    console = Console(width=80, record=True, file=io.StringIO(), color_system=None)
    print_summary(report.analysis, console, report.rows)
    text = console.export_text()
    assert max(len(ln) for ln in text.splitlines()) <= 80 and "…" not in text
    for row in report.rows:
        assert row["status"] in text and f"{row['level_mb']:.1f}" in text
        if not row["baseline"]:
            assert f"{row['ratio_to_baseline']:.2f}×" in text and f"{row['ratio_ci_high']:.2f}]" in text


def test_report_baseline_compares_every_group_with_another_group(report_input, report_run, tmp_path):
    """`report --baseline jemalloc`: the same run, its ratios and verdict against jemalloc, no re-run."""
    other = prepare(report_run, baseline="jemalloc")
    [summary], [md] = JsonReporter().write(other, tmp_path), MarkdownReporter().write(other, tmp_path)
    own = {r["group"]: r for r in report_input.rows}
    rows = {r["group"]: r for r in json.loads(summary.read_text())["groups"]}
    assert other.analysis.baseline == other.analysis.recommendation.baseline == "jemalloc"
    assert rows["jemalloc"]["baseline"] and not rows["glibc"]["baseline"]
    assert rows["glibc"]["ratio_to_baseline"] == pytest.approx(1 / own["jemalloc"]["ratio_to_baseline"])
    assert rows["jemalloc"]["level_mb"] == pytest.approx(own["jemalloc"]["level_mb"])  # the levels stay
    assert "| baseline | jemalloc (chosen for this report; the run's: glibc) |" in md.read_text()


def test_report_baseline_not_a_group_is_one_line(report_run, monkeypatch, capsys):
    from alloclab import cli  # the CLI's own entry point, in this process (no interpreter start)

    monkeypatch.setattr(sys, "argv", ["alloclab", "report", str(report_run), "--baseline", "jemaloc"])
    with pytest.raises(SystemExit) as exited:
        cli.main()
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "Traceback" not in err
    [line] = [ln for ln in err.splitlines() if ln.strip()]
    assert "'jemaloc' is not a group of this run" in line and "did you mean 'jemalloc'?" in line
