"""The live view of a real run (`alloclab run --serve`) opened in a real headless Chromium while the
run goes: no console errors, nothing fetched from anywhere but the run's own server, one chart line
per replica whose values are the store's samples, the line growing as the run goes, readable at
phone width, and a page that says so once the run (and its server) has ended. A screenshot is kept
as a test artefact."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from tests.browser import Browser
from tests.experiments import frag, write_experiment
from tests.integration.test_compare_live import free_port

pytestmark = [pytest.mark.browser]  # headless chromium

ARTEFACTS = Path(tempfile.gettempdir()) / "alloclab-test-artifacts" / "live-view"

READ_CHART = """
(function () {
  var el = document.getElementById('chart');
  return {lines: el.querySelectorAll('g.trace').length,
          data: (el.data || []).map(function (t) { return {name: t.name, y: t.y}; }),
          groups: Array.from(document.querySelectorAll('#groups tbody tr')).map(function (r) { return r.cells[0].textContent; }),
          replicas: document.querySelectorAll('#replicas tbody tr').length,
          status: document.getElementById('status').textContent,
          clock: document.getElementById('clock').textContent,
          final: document.getElementById('final').hidden ? null : document.getElementById('final').textContent,
          report: (document.querySelector('#final a') || {}).href || null,
          shapes: ((el.layout || {}).shapes || []).length,
          phaseNotes: ((el.layout || {}).annotations || []).map(function (a) { return a.text; }),
          states: Array.from(document.querySelectorAll('#replicas tbody tr')).map(function (r) { return r.cells[4].textContent; }),
          groupStates: Array.from(document.querySelectorAll('#groups tbody tr')).map(function (r) { return r.cells[3].textContent; })};
})()
"""


def _experiment(tmp: Path, native_dir: Path) -> Path:
    return write_experiment(
        tmp / "live.toml",
        "live",
        frag(native_dir, mb=8, idle=60),
        {"glibc": "glibc", "bigger": {"allocator": "glibc", "command": frag(native_dir, mb=16, idle=60)}},
        replicas=2,
        interval="0.5s",
        seed=7,
        baseline="glibc",
        phases={"warmup": "2s", "load": "14s", "idle": "2s"},
    )


def _state(port: int) -> dict | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/state", timeout=5) as r:
            return json.loads(r.read())
    except OSError:
        return None


def test_live_view_in_headless_chromium(tmp_path, native_dir, capsys):
    port = free_port()
    origin = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "alloclab",
            "run",
            str(_experiment(tmp_path, native_dir)),
            "-o",
            str(tmp_path / "run"),
            "--serve",
            f"127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    browser = Browser()
    try:
        deadline = time.monotonic() + 60
        while (s := _state(port)) is None or s["last_sample"] is None:
            assert proc.poll() is None and time.monotonic() < deadline, "the live view never answered"
            time.sleep(0.3)
        browser.open(origin + "/")
        browser.wait_for("(document.getElementById('chart').data || []).length === 4", timeout=30)
        first = browser.evaluate(READ_CHART)
        browser.pump(4.5)  # two more polls of the page (every 2 s)
        second = browser.evaluate(READ_CHART)
        assert proc.poll() is None, "the run ended before the page could follow it"
        ARTEFACTS.mkdir(parents=True, exist_ok=True)
        shot = browser.screenshot(ARTEFACTS / "live-desktop.png")
        browser.phone()
        browser.pump(0.5)
        narrow = browser.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
        browser.screenshot(ARTEFACTS / "live-phone.png")
        errors = list(browser.console_errors)
        # the run ends: the page shows its final state and the report's link while alloclab writes it
        browser.wait_for("document.querySelector('#final a') !== null", timeout=120)
        ended = browser.evaluate(READ_CHART)
        with urllib.request.urlopen(origin + "/report.html", timeout=10) as r:
            report_page = r.read().decode()
        browser.screenshot(ARTEFACTS / "live-ended-phone.png")
        proc.communicate(timeout=90)
        browser.pump(3.0)  # the page's next poll finds the server gone
        after = browser.evaluate(READ_CHART)
        late_errors, requests = browser.console_errors[len(errors) :], list(browser.requests)
    finally:
        browser.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, proc.stderr
    # the page only talks to the run's own server
    assert [u for u in requests if not u.startswith(origin) and not u.startswith(("data:", "blob:", "about:"))] == []
    assert errors == []  # while the run went (no 404 either, not even a favicon)
    assert all("ERR_CONNECTION_REFUSED" in e for e in late_errors), late_errors  # after: only the server gone
    # one line per replica, drawn, named by the replica; both groups listed
    assert sorted(t["name"] for t in second["data"]) == ["bigger-1", "bigger-2", "glibc-1", "glibc-2"]
    assert second["lines"] == 4 and second["replicas"] == 4
    assert [g.split(" ")[0] for g in second["groups"]] == ["glibc", "bigger"]
    assert "running" in first["status"]
    # phase and time left while it runs, phase lines on the chart
    assert re.search(r"(warmup|load|idle) · \d:\d\d:\d\d of 0:00:18 · \d:\d\d:\d\d left", first["clock"]), first[
        "clock"
    ]
    assert first["shapes"] == 2 and first["phaseNotes"] == ["load", "idle"]
    # the end: final state (no replica "running"), a link to the report, which the server serves
    assert ended["final"].startswith("The run has ended") and ended["report"] == origin + "/report.html"
    assert "running" not in " ".join(ended["states"] + ended["groupStates"]) and ended["clock"] == ""
    assert "<title>alloclab report: live</title>" in report_page
    # the page follows the run: more points at the second read
    n1 = {t["name"]: len(t["y"]) for t in first["data"]}
    n2 = {t["name"]: len(t["y"]) for t in second["data"]}
    assert all(n2[k] > n1[k] for k in n1), (n1, n2)
    # every point drawn is the stored sample, in order (the page draws RSS in MB)
    db = sqlite3.connect(tmp_path / "run" / "run.db")
    ids = {name: rid for rid, name in db.execute("SELECT id, name FROM replicas")}
    for t in second["data"]:
        stored = [
            kb / 1024
            for (kb,) in db.execute("SELECT rss_kb FROM samples WHERE replica_id = ? ORDER BY t", (ids[t["name"]],))
        ]
        assert t["y"] == pytest.approx(stored[: len(t["y"])]), t["name"]
    # the bigger program holds more at the end of what was drawn (it keeps 16 MB against 8)
    last = {t["name"]: t["y"][-1] for t in second["data"]}
    assert min(last["bigger-1"], last["bigger-2"]) > max(last["glibc-1"], last["glibc-2"])
    assert narrow, "the live page scrolls sideways at phone width"
    assert after["status"].startswith("alloclab has finished; this is the run's final state · report: "), after[
        "status"
    ]
    assert after["final"] == ended["final"]
    with capsys.disabled():
        print(f"\nlive view screenshots: {shot}, {ARTEFACTS / 'live-phone.png'}")
    shutil.rmtree(tmp_path / "run", ignore_errors=True)
