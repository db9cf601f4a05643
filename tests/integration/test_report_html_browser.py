"""report.html of a real short run opened in a real headless Chromium: no console errors, no
network requests, every chart drawn with the run's data (checked against summary.json), readable
at phone width, the experiment file shown exactly, hostile names shown as text. Screenshots are
kept as test artefacts (the path is printed)."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from statistics import median

import pytest

from alloclab.reporters import write_all
from alloclab.reporters.html import HtmlReporter
from alloclab.reporters.json_summary import JsonReporter
from alloclab.reporters.report import prepare
from alloclab.reporters.tables import KEY_COLUMNS
from tests.browser import Browser
from tests.integration.test_reporters import HOSTILE_NAME, hostile_copy

pytestmark = [pytest.mark.browser]  # headless chromium

ARTEFACTS = Path(tempfile.gettempdir()) / "alloclab-test-artifacts" / "report-html"
CHARTS = ["memory", "trajectories", "distribution", "idle-release", "live-bytes", "footprint"]

# what plotly drew, read back from each chart's graph div (its data and the SVG it rendered)
READ_CHARTS = """
Array.from(document.querySelectorAll('.chart')).map(function (el) {
  return {id: el.id.replace('chart-', ''), drawn: el.getAttribute('data-drawn'),
          svg: el.querySelectorAll('svg.main-svg').length,
          traces: el.querySelectorAll('g.trace').length,
          legend: Array.from(el.querySelectorAll('.legendtext')).map(function (t) { return t.textContent; }),
          notes: Array.from(el.querySelectorAll('.annotation-text')).map(function (t) { return t.textContent; }),
          data: (el.data || []).map(function (t) { return {name: t.name, type: t.type, x: t.x, y: t.y}; })};
})
"""
ALL_DRAWN = (
    "document.querySelectorAll('.chart').length > 0 && "
    "document.querySelectorAll('.chart').length === document.querySelectorAll('.chart[data-drawn=yes]').length"
)


@pytest.fixture(scope="module")
def browser():
    b = Browser()
    yield b
    b.close()


# JavaScript: braces everywhere, so the one number is put in by replace()
KEY_BOXES = r"""
(function () {
  var view = document.documentElement.clientWidth, cells = [];
  document.querySelectorAll('table.summary tr').forEach(function (tr) {
    for (var i = 0; i < %d; i++) {
      var c = tr.cells[i]; if (!c) continue;
      var r = c.getBoundingClientRect(), broken = [];
      // every word (a number, a status word, a bracketed interval) on one line: its range has one box
      var text = c.textContent, re = /\S+/g, m, node = c.firstChild;
      var walker = document.createTreeWalker(c, NodeFilter.SHOW_TEXT), t;
      while ((t = walker.nextNode())) {
        while ((m = re.exec(t.data)) !== null) {
          var range = document.createRange(); range.setStart(t, m.index); range.setEnd(t, m.index + m[0].length);
          if (range.getClientRects().length > 1) broken.push(m[0]);
        }
        re.lastIndex = 0;
      }
      cells.push({text: text, right: r.right, fits: c.scrollWidth <= c.clientWidth + 1, broken: broken});
    }
  });
  return {view: view, cells: cells};
})()
""".replace("%d", str(KEY_COLUMNS))

# every chart's legend box and plotly's toolbar (shown on hover: forced visible here) must not overlap
MODEBAR_OVERLAPS = """
(function () {
  var out = [];
  document.querySelectorAll('.chart').forEach(function (el) {
    var bar = el.querySelector('.modebar'), legend = el.querySelector('g.legend');
    if (!bar || !legend) return;
    bar.style.opacity = 1;
    var a = bar.getBoundingClientRect(), b = legend.getBoundingClientRect();
    if (a.width && b.width && a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom)
      out.push(el.id);
  });
  return out;
})()
"""


def _key_columns_whole_and_visible(browser, width: int) -> None:
    boxes = browser.evaluate(KEY_BOXES)
    assert boxes["cells"] and all(b["right"] <= boxes["view"] + 0.5 and b["fits"] for b in boxes["cells"]), (
        width,
        boxes,
    )
    assert [b for b in boxes["cells"] if b["broken"]] == [], width
    assert browser.evaluate(MODEBAR_OVERLAPS) == [], width


def test_report_html_in_headless_chromium(report_input, report_run, browser, tmp_path, capsys):
    out = tmp_path / "report"
    write_all(report_input, out, [JsonReporter(), HtmlReporter()])
    summary = json.loads((out / "summary.json").read_text())
    browser.call("Emulation.setDeviceMetricsOverride", width=1400, height=900, deviceScaleFactor=1, mobile=False)
    browser.open((out / "report.html").as_uri())
    browser.wait_for(ALL_DRAWN)
    browser.pump(0.5)
    assert browser.console_errors == []
    assert browser.external_requests() == []
    charts = {c["id"]: c for c in browser.evaluate(READ_CHARTS)}
    assert list(charts) == CHARTS
    for c in charts.values():
        assert c["drawn"] == "yes" and c["svg"] >= 1 and c["traces"] >= 1, c["id"]

    groups = {g["group"]: g for g in summary["groups"]}
    # distribution: the group levels drawn are summary.json's, each box holds the replicas whose mean is the level
    dist = charts["distribution"]["data"]
    level = next(t for t in dist if t["name"] == "group level (summary)")
    assert level["x"] == list(groups)
    for name, y in zip(level["x"], level["y"]):
        assert y == pytest.approx(groups[name]["level_mb"], abs=1e-3)
    for t in dist:
        if t["type"] == "box":
            assert len(t["y"]) == groups[t["name"]]["verified"]
            assert sum(t["y"]) / len(t["y"]) == pytest.approx(groups[t["name"]]["steady_mean_mb"], abs=1e-3)
    # idle release: bars at the summary's median share
    for t in charts["idle-release"]["data"]:
        if t["type"] == "bar":
            assert t["y"][0] == pytest.approx(groups[t["x"][0]]["idle_released_share"], abs=1e-6)
    # memory over time: one median per group (4 replicas each), in the range of the group's replicas; phases labelled
    medians = {
        t["name"].split(" median")[0]: t["y"] for t in charts["memory"]["data"] if " median" in (t["name"] or "")
    }
    assert set(medians) == set(groups)
    for g, ys in medians.items():
        ys = [y for y in ys if y is not None]
        assert groups[g]["steady_median_mb"] * 0.5 <= median(ys) <= groups[g]["peak_mb"] * 1.01
    assert {"load", "idle"} <= set(charts["memory"]["notes"])
    assert {f"{g} median (n=4)" for g in groups} <= set(charts["memory"]["legend"])
    # small multiples: one panel title per group
    assert set(groups) <= {n for n in charts["trajectories"]["notes"]}
    # live bytes where the workload reports them (frag: glibc, jemalloc), LazyFree where sampled (lazyfree)
    assert set(charts["live-bytes"]["notes"]) & set(groups) == {"glibc", "jemalloc"}
    assert "lazy" in charts["footprint"]["notes"]
    # the page's text: summary, warnings, exact experiment file, no script from it ran
    assert browser.evaluate("document.getElementById('experiment-text').textContent") == report_input.experiment_text
    assert browser.evaluate("typeof window.__pwned") == "undefined"
    warnings = browser.evaluate(
        "Array.from(document.querySelectorAll('ul.warnings li')).map(function (l) { return l.dataset.kind; })"
    )
    assert sorted(warnings) == sorted(w["kind"] for w in summary["warnings"])
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    desktop = browser.screenshot(tmp_path / "report-desktop.png")

    # the key columns (group, level, ratio with interval, status) whole and on screen without scrolling,
    # at every width from a phone to a desktop; no chart legend under plotly's toolbar
    # (1,400 px here, 390 px with the phone below)
    _key_columns_whole_and_visible(browser, 1400)

    # a phone: the page does not scroll sideways (wide tables scroll inside their box), charts redrawn
    browser.phone()
    browser.open((out / "report.html").as_uri())
    browser.wait_for(ALL_DRAWN)
    _key_columns_whole_and_visible(browser, 390)
    assert browser.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    assert browser.evaluate(
        "Math.max.apply(null, Array.from(document.querySelectorAll('.chart svg.main-svg'))"
        ".map(function (s) { return s.getBoundingClientRect().width; })) <= window.innerWidth"
    )
    phone = browser.screenshot(tmp_path / "report-phone.png")
    assert browser.console_errors == [] and browser.external_requests() == []
    for shot in (desktop, phone):
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
        shutil.copy(shot, ARTEFACTS / shot.name)
    with capsys.disabled():
        print(f"\nreport.html screenshots: {ARTEFACTS}/report-desktop.png, report-phone.png")


def test_hostile_group_name_shows_as_text_in_the_browser(report_run, browser, tmp_path):
    run = hostile_copy(report_run, tmp_path, HOSTILE_NAME)
    out = tmp_path / "report"
    write_all(prepare(run), out, [HtmlReporter()])
    browser.open((out / "report.html").as_uri())
    browser.wait_for(ALL_DRAWN)
    browser.pump(0.3)
    assert browser.console_errors == [] and browser.external_requests() == []
    assert browser.evaluate("typeof window.__pwned") == "undefined"
    cells = browser.evaluate(
        "Array.from(document.querySelectorAll('table.summary td:first-child')).map(function (c) { return c.textContent; })"
    )
    assert HOSTILE_NAME in cells
    legend = browser.evaluate(
        "Array.from(document.querySelectorAll('#chart-distribution .legendtext')).map(function (t) { return t.textContent.replace(/\\u200b/g, ''); })"
    )
    assert HOSTILE_NAME in legend
