"""`alloclab bundle` on a store fixture whose groups replayed a trace: the trace goes in, and the
README says where; group env from the experiment goes in, the process environment never does."""

from __future__ import annotations

import json
import os
import tarfile

import pytest

from alloclab.common.errors import UserError
from alloclab.interchange.bundle import replayed_traces, write_bundle
from tests.unit.test_two_runs import make_run


def test_replayed_trace_is_bundled(tmp_path, monkeypatch):
    trace = tmp_path / "app.trace"
    trace.write_bytes(b"\x00trace bytes\x01" * 50)
    run = make_run(
        tmp_path / "run",
        {"glibc": [100, 101, 99], "je": [60, 61, 60.5]},
        command=["/opt/alloclab/native/replay", str(trace), "--speed", "1"],
    )
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "do-not-ship-this")
    assert replayed_traces(
        [
            {"command_json": json.dumps(["/x/replay", str(trace)])},
            {"command_json": json.dumps(["/x/frag", "--mb", "8"])},
        ]
    ) == [trace]
    out, names = write_bundle(run, tmp_path / "b.tar.gz", [trace])  # named by the user, not by the store
    with tarfile.open(out) as tar:
        assert tar.extractfile("run-bundle/trace/1-app.trace").read() == trace.read_bytes()
        readme = tar.extractfile("run-bundle/README.md").read().decode()
        prov = json.loads(tar.extractfile("run-bundle/provenance.json").read())
        blob = b"".join(tar.extractfile(m).read() for m in tar.getmembers())
    assert "trace/1-app.trace" in readme and str(trace) in readme
    assert prov["groups"][0]["env"] == {"MALLOC_ARENA_MAX": "2"}
    assert b"do-not-ship-this" not in blob and os.environ["AWS_SECRET_ACCESS_KEY"].encode() not in blob
    assert "run-bundle/report.md" in names  # the report was written first


def test_trace_not_named_by_the_user_is_said_not_read(tmp_path):
    run = make_run(tmp_path / "run", {"g": [100, 101]}, command=["/x/replay", str(tmp_path / "gone.trace")])
    out, names = write_bundle(run, tmp_path / "b.tar.gz")
    assert not any("/trace/" in n for n in names)
    with tarfile.open(out) as tar:
        assert "--trace FILE" in tar.extractfile("run-bundle/README.md").read().decode()


def test_output_in_missing_directory_is_refused(tmp_path):
    run = make_run(tmp_path / "run", {"g": [100, 101]})
    with pytest.raises(UserError, match="not a directory"):
        write_bundle(run, tmp_path / "no" / "b.tar.gz")


def test_bundle_carries_the_store_so_compare_reads_it_and_is_readable(tmp_path):
    """Issue 27: the bundle holds run.db (the extracted directory is a run `compare` reads), the
    archive is readable by its owner and group (0640, issue 46: the store is inside), and
    provenance.json keeps numbers as numbers."""
    from alloclab.analysis import two_runs
    from alloclab.reporters.two_runs import to_json

    run = make_run(tmp_path / "run", {"glibc": [100, 101, 99], "je": [60, 61, 60.5]})
    (run / "report.md").write_text("# report\n")  # a report exists: the bundle does not write one (speed)
    (run / "summary.json").write_text("{}")
    out, names = write_bundle(run, tmp_path / "b.tar.gz")
    assert "run-bundle/run.db" in names and os.stat(out).st_mode & 0o777 == 0o640
    with tarfile.open(out) as tar:
        tar.extractall(tmp_path / "x", filter="data")
        readme = tar.extractfile("run-bundle/README.md").read().decode()
    assert "alloclab compare run-bundle rerun" in readme
    prov = json.loads((tmp_path / "x" / "run-bundle" / "provenance.json").read_text())
    assert isinstance(prov["run"]["interval"], float) and isinstance(prov["run"]["seed"], int)
    assert isinstance(prov["run"]["started_at"], float) and prov["run"]["phases"]["load"] == 300.0
    assert isinstance(prov["run"]["kernel"], str)
    rc = two_runs.compare_runs(run, tmp_path / "x" / "run-bundle", fail_on_increase=5)
    assert [g.key for g in rc.groups] == ["glibc", "je"] and not rc.changes
    assert all(g.comparison.ratio == 1.0 for g in rc.groups)  # the very same samples
    d = json.loads(to_json(rc))
    assert isinstance(d["run_a"]["started_at"], float) and isinstance(d["groups"][0]["level_a_mb"], float)
