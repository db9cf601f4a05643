"""`alloclab bisect` and `alloclab sweep` end to end: real programs, real allocators, real runs."""

from __future__ import annotations

import json
import os

import pytest

from alloclab.store import Store
from tests.conftest import run_cli

# sawtooth with a period longer than the run retains --mb MB: RSS ≈ mb + a small constant, so
# against mb = 8 a threshold of 2x is crossed between 14 (≈ 1.6x) and 48 (≈ 5x) by construction.
AXIS = ["8", "10", "12", "14", "48", "64", "96", "128"]
FIRST_BAD, LAST_GOOD = "48", "14"
FAST = ["--replicas", "3", "--interval", "0.5s", "--warmup", "2s"]
# a step's ceiling: the sequential rule decides at its first looks (7 s, 14 s) on a quiet machine, and
# the same looks come at the same times under any ceiling; a starved machine fills the sawtooth
# slower and needs the later looks (28 s, 50 s) that a ceiling of 25 s did not have
MAX_STEP_S = 60


def test_direct_run_establishes_the_boundary(tmp_path):
    groups = "".join(
        f'\n[[group]]\nname = "mb{mb}"\nallocator = "glibc"\ncommand = ["{{stressors}}", "--pattern", "sawtooth", '
        f'"--load", "60", "--period", "1000", "--seed", "{{{{seed}}}}", "--mb", "{mb}"]\n'
        for mb in ("8", LAST_GOOD, FIRST_BAD)
    )
    from alloclab.native import build

    exp = tmp_path / "direct.toml"
    exp.write_text(
        (
            'name = "direct"\nreplicas = 3\ninterval = "0.5s"\nbaseline = "mb8"\n[phases]\nwarmup = "2s"\nload = "6s"\n'
            + groups
        ).replace("{stressors}", str(build.program("stressors")))
    )
    proc = run_cli("run", str(exp), "-o", str(tmp_path / "run"), "--no-report")
    assert proc.returncode == 0, proc.stderr
    from alloclab.analysis import analyse
    from alloclab.store import Store

    a = analyse(Store.open(tmp_path / "run"))
    ratio = {g.name: g.comparison.ratio for g in a.groups if not g.is_baseline}
    assert ratio[f"mb{LAST_GOOD}"] < 2.0 < ratio[f"mb{FIRST_BAD}"]
    assert all(g.comparison.significant for g in a.groups if not g.is_baseline)


def test_bisect_finds_the_first_bad_value_in_fewer_steps_than_exhaustive(tmp_path):
    out = tmp_path / "bisect"
    proc = run_cli(
        "bisect",
        "sawtooth",
        "--param",
        "mb",
        "--values",
        ",".join(AXIS),
        "--workload-param",
        "period=1000",
        "--threshold-ratio",
        "2",
        *FAST,
        "--max-step",
        f"{MAX_STEP_S}s",
        "--first-look",
        "5s",
        "-o",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    res = json.loads((out / "bisect.json").read_text())
    assert (res["status"], res["first_bad"], res["last_good"]) == ("found", FIRST_BAD, LAST_GOOD)
    assert res["steps_run"] < res["exhaustive_steps"] == len(AXIS) - 1
    for step in res["steps"]:
        # each step a normal run with its report, stopped by the sequential rule before its maximum
        assert os.path.exists(os.path.join(step["run_dir"], "report.md")) and os.path.exists(
            os.path.join(step["run_dir"], "run.db")
        )
        assert step["verdict"] == ("bad" if AXIS.index(step["value"]) >= AXIS.index(FIRST_BAD) else "good"), step
        # on the run's own clock (its samples), not the step's wall time, which also holds process
        # start-up and the report and grows with the machine's load
        span = Store.open(step["run_dir"]).query("SELECT MAX(t) - MIN(t) FROM samples")[0][0]
        assert span < MAX_STEP_S and "step decided" in step["end_reason"], (span, step["end_reason"])
        assert (step["ratio"] > 2) == (step["verdict"] == "bad")
    assert (out / "bisect.png").stat().st_size > 10_000
    assert f"First bad workload mb: **{FIRST_BAD}**" in (out / "bisect.md").read_text()
    assert f"First bad workload mb: {FIRST_BAD}" in proc.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["sawtooth", "--threshold-ratio", "2"], "say what to bisect"),
        (
            ["sawtooth", "--family", "mimalloc", "--good", "2.0.9", "--bad", "9.9.9"],
            "--bad mimalloc 9.9.9 is not a known version",
        ),
        (["sawtooth", "--param", "mb", "--values", "8"], "needs at least two comma-separated values"),
        (["sawtooth", "--param", "mb", "--values", "1,2", "--replicas", "0"], "replicas = 0 is out of range"),
        (
            ["sawtooth", "--tunable", "MIMALLOC_PURGE_DELAY", "--values", "0,10"],
            "is a mimalloc option, but the group runs glibc",
        ),
    ],
)
def test_bisect_bad_input_is_one_line(tmp_path, args, message):
    proc = run_cli("bisect", *args, "-o", str(tmp_path / "out"))
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_sweep_purge_delay_on_the_tor_model(tmp_path):
    """mimalloc 3.0.1 with MIMALLOC_PURGE_DELAY=0 against its default: less memory, more CPU per
    operation (docs/lab/results.md measured 0.74x 2.0.9's memory at 2.18x the CPU per operation)."""
    out = tmp_path / "sweep"
    proc = run_cli(
        "sweep",
        "tor-dircache",
        "--allocator",
        "mimalloc@3.0.1",
        "--set",
        "MIMALLOC_PURGE_DELAY=0",
        "--workload-param",
        "hour=6",
        "--replicas",
        "3",
        "--interval",
        "1s",
        "--warmup",
        "8s",
        "--load",
        "20s",
        "-o",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    res = json.loads((out / "sweep.json").read_text())
    by = {p["label"]: p for p in res["points"]}
    zero, default = by["mimalloc@3.0.1 MIMALLOC_PURGE_DELAY=0"], by["mimalloc@3.0.1"]
    assert default["is_baseline"] and zero["batch"] == default["batch"] == 1
    assert zero["memory_ratio"] < 1 and zero["memory_ci"][1] < 1  # less memory, shown
    assert zero["cpu_ratio"] > 1 and zero["cpu_ci"][0] > 1  # more CPU per operation, shown
    assert zero["on_front"] and default["on_front"]  # a trade-off: both on the front
    assert res["cost_axis"].startswith("CPU per operation")
    assert (out / "pareto.png").stat().st_size > 10_000 and (out / "batches" / "batch-01" / "report.md").exists()
    assert "MIMALLOC_PURGE_DELAY=0" in (out / "sweep.md").read_text()


def test_sweep_file_mistakes_are_one_line(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text(
        '[workload]\nname = "sawtooth"\n[sweep]\nallocators = ["glibc"]\n[sweep.tunables]\nMIMALLOC_PURGE_DELAY = [0]\n'
    )
    proc = run_cli("sweep", str(f), "-o", str(tmp_path / "out"))
    assert proc.returncode == 2 and "no allocator of the sweep is mimalloc" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_sweep_purge_delays_slow(tmp_path):
    """The full axis (docs/how-to/bisect-sweep.md): delay 0 lowest memory and highest CPU per operation."""
    out = tmp_path / "sweep"
    proc = run_cli(
        "sweep",
        "tor-dircache",
        "--allocator",
        "mimalloc@3.0.1",
        "--set",
        "MIMALLOC_PURGE_DELAY=0,10,100,1000",
        "--workload-param",
        "hour=6",
        "--replicas",
        "3",
        "--warmup",
        "20s",
        "--load",
        "60s",
        "-o",
        str(out),
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stderr
    by = {p["label"]: p for p in json.loads((out / "sweep.json").read_text())["points"]}
    zero = by["mimalloc@3.0.1 MIMALLOC_PURGE_DELAY=0"]
    assert zero["memory_ratio"] == min(p["memory_ratio"] for p in by.values())
    assert zero["cpu_ratio"] > 1 and zero["memory_ratio"] < 1
