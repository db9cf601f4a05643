"""A run stopped by an exception (not a full disk, not Ctrl-C) says why: end reason "error: TYPE:
TEXT", an `end` event, and cut short as `error` (a serious run-cut-short warning in the analysis);
its replicas are stopped, what it sampled is kept, and `run --resume` refuses it in one line."""

from __future__ import annotations

import os
import signal

import pytest

from alloclab.analysis import analyse
from alloclab.common.errors import UserError
from alloclab.experiment_file import parse_experiment
from alloclab.run.runner import Runner, resume
from alloclab.store import Store
from tests.experiments import experiment_toml

EXPERIMENT = experiment_toml(
    "fails",
    ["sleep", "30"],
    {"glibc": "glibc"},
    replicas=1,
    interval="0.1s",
    baseline="glibc",
    phases={"warmup": "0.2s", "load": "20s"},
)


def test_a_run_stopped_by_an_error_records_why(tmp_path):
    def fail_on_third_tick(runner, elapsed, phase):  # stands for a sampler or scenario that raises mid-run
        ticks.append(elapsed)
        if len(ticks) == 3:
            raise ValueError("the model's socket went away\nsecond line")

    ticks: list[float] = []
    runner = Runner(parse_experiment(EXPERIMENT, "fails.toml", tmp_path), tmp_path / "run", on_tick=fail_on_third_tick)
    with pytest.raises(ValueError):
        runner.run()
    store = Store.open(tmp_path / "run")
    meta = store.meta()
    reason = "error: ValueError: the model's socket went away"
    assert meta["end_reason"] == reason and meta["cut_short"] == "error", meta
    assert [e["description"] for e in store.events(["end"])] == [reason]
    [cut] = store.events(["cut_short"])
    assert "ValueError: the model's socket went away" in cut["description"]
    [replica] = store.replicas()
    assert replica["end_kind"] == "stopped" and len(store.series(replica["id"], ["t"])["t"]) >= 3
    with pytest.raises(ProcessLookupError):
        os.kill(replica["root_pid"], 0)  # the replica was ended, not left running
    [warning] = [w for w in analyse(store).warnings if w.kind == "run-cut-short"]
    assert warning.severity == "serious" and warning.data["reason"] == "error", warning
    store.close()
    with pytest.raises(UserError, match="stopped by an error: ValueError: .*nothing to resume.*alloclab report"):
        resume(tmp_path / "run")
    runner._on_signal(signal.SIGINT, None)  # Ctrl-C while the replicas are being stopped
    assert runner.stop_reason == reason, runner.stop_reason


def test_a_run_whose_store_fails_stops_its_replicas_and_raises_that_error(tmp_path):
    # the store's writes fail from the third tick on (an I/O error, not a full disk): the runner may not
    # commit or record an end, but it still stops every replica and raises the store's first error
    from alloclab.common.errors import StoreError

    def store_fails(runner, elapsed, phase):
        ticks.append(elapsed)
        if len(ticks) == 3:

            def broken(*args, **kwargs):
                raise StoreError("disk I/O error", sqlite_errorname="SQLITE_IOERR_WRITE", store=runner.store.path)

            for name in ("commit", "begin", "add_event", "set_meta", "update_replica", "mark_cut_short"):
                monkeypatch.setattr(runner.store, name, broken)
            raise StoreError(
                "disk I/O error (the first)", sqlite_errorname="SQLITE_IOERR_WRITE", store=runner.store.path
            )

    ticks: list[float] = []
    monkeypatch = pytest.MonkeyPatch()
    runner = Runner(parse_experiment(EXPERIMENT, "fails.toml", tmp_path), tmp_path / "run", on_tick=store_fails)
    try:
        with pytest.raises(StoreError, match="the first"):
            runner.run()
    finally:
        monkeypatch.undo()
    [replica] = runner.replicas
    with pytest.raises(ProcessLookupError):
        os.kill(replica.popen.pid, 0)  # stopped, although nothing more could be written
