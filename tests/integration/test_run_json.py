"""`alloclab run --json` (issue 52): the progress and the summary table go to stderr, and stdout is
one JSON document naming the run, how it ended and its report's summary (summary.json's)."""

from __future__ import annotations

import json

from tests.conftest import run_cli
from tests.unit.test_check_as_run import SHORT

# test_check_as_run's two glibc groups, sampled twice a second for a 3-second load
EXPERIMENT = SHORT.replace('interval = "10s"', 'interval = "0.5s"').replace('load = "60s"', 'load = "3s"')


def test_run_json_is_the_run_and_its_summary(tmp_path):
    exp = tmp_path / "e.toml"
    exp.write_text(EXPERIMENT)
    p = run_cli("run", str(exp), "-o", str(tmp_path / "run"), "--json", timeout=300)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["run"] == str((tmp_path / "run").resolve()) and doc["interrupted"] is False and doc["end_reason"]
    assert doc["summary"] == json.loads((tmp_path / "run" / "summary.json").read_text())
    assert "run ended" in p.stderr and "report:" in p.stderr  # what the console said, on stderr
