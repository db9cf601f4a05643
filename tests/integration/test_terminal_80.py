"""`report`, `compare` and `run` as a person sees them in an 80-column terminal (a real tmux pane):
no line wider than the pane, no word or number broken across lines (every word of the capture is
a word of the same output rendered 250 columns wide), the run's progress a bar with its phase and
time left (issue 27). Each test saves its captures for a person to look at under
$TMPDIR/alloclab-test-artifacts/terminal/ (fresh every run: a capture kept in the tree went stale)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

ARTEFACTS = Path(tempfile.gettempdir()) / "alloclab-test-artifacts" / "terminal"
BOX = re.compile(r"^[\u2500-\u259f\s…]+$")  # box drawing / bar characters: not words


def _tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=True, timeout=30).stdout


def _pane(cmd: list[str], width: int, *, until: str | None = None, deadline_s: float = 90.0) -> str:
    """Run cmd in a fresh detached tmux pane of `width` columns; return the pane's text once
    `until` shows (a live display; the command is still let finish), else once it has finished."""
    name = f"alloclab-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    done = f"__done_{uuid.uuid4().hex[:6]}__"
    shell = f"{shlex.join(cmd)}; echo {done}; sleep 600"
    _tmux(
        "new-session",
        "-d",
        "-s",
        name,
        "-x",
        str(width),
        "-y",
        "200",
        "-e",
        "PYTHONPATH=" + os.environ.get("PYTHONPATH", ""),
        "sh",
        "-c",
        shell,
    )
    seen = None
    try:
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            text = _tmux("capture-pane", "-p", "-t", name, "-S", "-200")
            if until and seen is None and until in text:
                seen = text
            if done in text:
                return (seen or text).replace(done, "").rstrip() + "\n"
            time.sleep(0.2)
        raise AssertionError(f"{cmd} did not finish within {deadline_s} s:\n{text}")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True, timeout=30)


def _keep(name: str, capture: str) -> None:
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    (ARTEFACTS / name).write_text(capture)


def _words(text: str) -> set[str]:
    return {w for w in text.split() if not BOX.match(w)}


def _check_fits(narrow: str, wide: str, width: int = 80) -> None:
    lines = narrow.splitlines()
    assert max(len(ln) for ln in lines) <= width, max(lines, key=len)
    broken = _words(narrow) - _words(wide)
    assert not broken, f"words or numbers broken at {width} columns: {sorted(broken)[:10]}"


pytestmark = pytest.mark.skipif(
    subprocess.run(["which", "tmux"], capture_output=True).returncode != 0,
    reason="tmux is installed by scripts/install.sh --test",
)
CLI = [sys.executable, "-m", "alloclab"]


def _wide(verb: str, run: Path) -> str:
    """The same output unwrapped (report: 250 columns wide; compare: its 80-column layout, lines not
    wrapped), in this process (no second terminal needed)."""
    import io

    from rich.console import Console

    from alloclab.analysis import two_runs
    from alloclab.reporters.report import prepare
    from alloclab.reporters.terminal import print_summary
    from alloclab.reporters.two_runs import text_lines

    if verb == "compare":
        return "\n".join(text_lines(two_runs.compare_runs(run, run, fail_on_increase=5), 80, wrap=False))
    console = Console(width=250, record=True, file=io.StringIO(), color_system=None)
    report = prepare(run)
    print_summary(report.analysis, console, report.rows)
    return console.export_text() + f" report: {run}/report.md (interactive: {run}/report.html)"


def test_report_and_compare_fit_80_columns(report_run, tmp_path):
    for verb, args in (
        ("report", [str(report_run), "-o", str(tmp_path / "r")]),
        ("compare", [str(report_run), str(report_run), "--fail-on-increase", "5"]),
    ):
        narrow = _pane([*CLI, verb, *args], 80)
        _keep(f"{verb}-80.txt", narrow)
        _check_fits(narrow.replace(str(tmp_path / "r"), str(report_run)), _wide(verb, report_run))
        assert "Traceback" not in narrow
        if verb == "compare":
            assert re.search(r"gate (PASSED|INCONCLUSIVE)", narrow) and "warnings" in narrow
        else:
            assert "status" in narrow and ("Run " in narrow or "Keep " in narrow)  # the headline


def test_run_progress_is_a_bar_with_phase_and_time_left(tmp_path):
    exp = tmp_path / "e.toml"
    exp.write_text(
        'name = "progress"\ncommand = ["/bin/sleep", "60"]\nreplicas = 2\ninterval = "0.5s"\n'
        '[phases]\nwarmup = "1s"\nload = "3s"\n[[group]]\nname = "glibc"\nallocator = "glibc"\n'
        '[[group]]\nname = "glibc-arenas-two"\nallocator = "glibc"\nenv = { MALLOC_ARENA_MAX = "2" }\n'
    )
    narrow = _pane([*CLI, "run", str(exp), "-o", str(tmp_path / "run"), "--no-report"], 80, until="load ends in")
    _keep("run-80.txt", narrow)
    lines = narrow.splitlines()
    assert max(len(ln) for ln in lines) <= 80, max(lines, key=len)
    bar = next(ln for ln in lines if "load ends in" in ln)
    assert "━" in bar and re.search(
        r"load \d:\d\d:\d\d / 0:00:04, \d:\d\d:\d\d left \(load ends in \d:\d\d:\d\d\)", bar
    )
    assert any(ln.split()[:1] == ["glibc-arenas-two"] for ln in lines)  # the group table, whole names
    # not a terminal (a CI log): plain lines as it goes, not one panel at the end
    proc = subprocess.run(
        [*CLI, "run", str(exp), "-o", str(tmp_path / "run2"), "--no-report"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    plain = [ln for ln in proc.stderr.splitlines() if ln.startswith("alloclab run progress: ")]
    assert len(plain) >= 2 and any(": warmup " in ln for ln in plain) and any(": load " in ln for ln in plain)
    assert "━" not in proc.stderr and "median RSS MB" not in proc.stderr  # no redrawn display in a log
