"""Issue 46, items 1-2: `bundle` archives only files alloclab wrote (never through a link, never a
path the store names; mode 0640), `report` never writes through a link planted in a run directory,
and `run -o` refuses an existing directory someone else owns or can write."""

from __future__ import annotations

import os
import tarfile

import pytest

from alloclab.common.errors import UserError
from alloclab.common.outputs import new_output, write_output
from alloclab.interchange.bundle import write_bundle
from tests.unit.test_two_runs import make_run

SECRET = b"root:$6$not-for-upstream:19000:0:99999:7:::\n"


def _secret(tmp_path):
    s = tmp_path / "shadow"
    s.write_bytes(SECRET)
    s.chmod(0o600)
    return s


def _with_report(run):
    (run / "report.md").write_text("# report\n")  # a report exists: the bundle writes none (speed)
    (run / "summary.json").write_text("{}")
    return run


def _archived(out) -> bytes:
    with tarfile.open(out) as tar:
        return b"".join(tar.extractfile(m).read() for m in tar.getmembers() if m.isfile())


@pytest.mark.parametrize("where", ["report.html", "charts/timeseries.png"])
def test_bundle_refuses_a_link_to_another_file(tmp_path, where):
    run = _with_report(make_run(tmp_path / "run", {"g": [100, 101]}))
    (run / "charts").mkdir()
    (run / where).symlink_to(_secret(tmp_path))
    with pytest.raises(UserError, match="symbolic link"):
        write_bundle(run, tmp_path / "b.tar.gz")
    assert not (tmp_path / "b.tar.gz").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".bundle-")]


def test_bundle_refuses_a_hard_link(tmp_path):
    run = _with_report(make_run(tmp_path / "run", {"g": [100, 101]}))
    os.link(_secret(tmp_path), run / "replicas.csv")
    with pytest.raises(UserError, match="hard links"):
        write_bundle(run, tmp_path / "b.tar.gz")


def test_bundle_never_reads_a_trace_the_store_names(tmp_path):
    secret = _secret(tmp_path)
    run = _with_report(make_run(tmp_path / "run", {"g": [100, 101]}, command=["/x/replay", str(secret)]))
    out, names = write_bundle(run, tmp_path / "b.tar.gz")
    assert SECRET not in _archived(out) and not any("/trace/" in n for n in names)
    assert os.stat(out).st_mode & 0o777 == 0o640


def test_report_replaces_a_planted_link_and_refuses_a_linked_directory(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").symlink_to(victim)
    write_output(out, "report.md", "# new\n")
    assert victim.read_text() == "keep me\n" and not (out / "report.md").is_symlink()
    assert (out / "report.md").read_text() == "# new\n"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (out / "charts").symlink_to(elsewhere)
    with pytest.raises(UserError, match="symbolic link"):
        write_output(out, "charts/timeseries.png", b"png")
    assert list(elsewhere.iterdir()) == []


def test_report_command_does_not_write_through_links(tmp_path):
    from alloclab.reporters import report

    run = make_run(tmp_path / "run", {"g": [100, 101], "h": [60, 61]})
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    (run / "summary.json").symlink_to(victim)
    report.write_report(run)
    assert (
        victim.read_text() == "keep me\n"
        and (run / "summary.json").is_file()
        and not (run / "summary.json").is_symlink()
    )


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_output_directory_of_another_user_is_refused(tmp_path):
    d = tmp_path / "theirs"
    d.mkdir()
    os.chown(d, 65534, 65534)
    with pytest.raises(UserError, match="uid 65534"):
        new_output(d)


def test_output_directory_others_can_write_is_refused(tmp_path):
    d = tmp_path / "open"
    d.mkdir()
    d.chmod(0o777)
    with pytest.raises(UserError, match="writable by others"):
        new_output(d)
    d.chmod(0o755)
    new_output(d)  # the user's own, empty: fine


@pytest.mark.parametrize("name", ["memory.csv", "events.csv", "diagnostics.csv"])
def test_export_does_not_write_through_links(tmp_path, name):
    """`export --csv DIR` wrote with a plain open(): a link planted among an earlier export's files
    (which an export again overwrites) was written through."""
    from alloclab.torutils.export import export_csv

    run = make_run(tmp_path / "run", {"g": [100, 101]})
    out = tmp_path / "csv"
    export_csv(run, out)
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    (out / name).unlink()
    (out / name).symlink_to(victim)
    export_csv(run, out)
    assert victim.read_text() == "keep me\n" and (out / name).is_file() and not (out / name).is_symlink()
