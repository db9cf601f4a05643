"""Damaged stores: report, compare, export and bundle open a store read-only and checked
(Store.open_checked), so a zeroed page, a missing table or an absurd time is bad input: one line
naming the store and integrity_check, exit code 2, the store untouched (docs/reference/security.md, "Damaged
stores"); merge: tests/unit/test_cli_errors.py. A full disk stays exit code 3 (cut short)."""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from alloclab import cli
from tests.conftest import run_cli

DATA = Path(__file__).resolve().parents[1] / "data" / "1aeo-torutils" / "co-guard-2025-09"


@pytest.fixture(scope="module")
def intact(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("damaged") / "intact"
    r = run_cli("import", "torutils", str(DATA), "-o", str(run))
    assert r.returncode == 0, r.stderr
    return run


def zero_samples_root(db: Path) -> None:
    """The samples table's own page zeroed: opening checks pass (their time scan reads only the
    covering index samples_by_replica); a read of a memory column fails as "malformed"."""
    conn = sqlite3.connect(db)
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name='samples'").fetchone()[0]
    conn.close()
    with open(db, "r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(b"\0" * page_size)


def _sql(statement: str):
    def damage(db: Path) -> None:
        conn = sqlite3.connect(db)
        conn.execute(statement)
        conn.commit()
        conn.close()

    return damage


DAMAGE = {
    "zeroed-page": zero_samples_root,
    "missing-table": _sql("DROP TABLE samples"),
    "time-1e300": _sql("UPDATE samples SET t = 1e300 WHERE rowid = (SELECT max(rowid) FROM samples)"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_every_reader_turns_damage_into_one_line(intact, tmp_path, damage, capsys, monkeypatch):
    run = tmp_path / "run"
    shutil.copytree(intact, run)
    DAMAGE[damage](run / "run.db")
    before = hashlib.sha256((run / "run.db").read_bytes()).hexdigest()
    for args in (
        ["report", str(run)],
        ["compare", str(intact), str(run)],
        ["export", str(run), "--csv", str(tmp_path / "csv")],
        ["bundle", str(run), "-o", str(tmp_path / "b.tar.gz")],
    ):
        monkeypatch.setattr("sys.argv", ["alloclab", *args])  # the CLI's own entry point, in this process
        with pytest.raises(SystemExit) as end:
            cli.main()
        err = capsys.readouterr().err
        assert end.value.code == 2, (args, end.value.code, err[-2000:])
        assert (
            len(err.strip().splitlines()) == 1 and "integrity_check" in err and f"{run / 'run.db'} is damaged" in err
        ), err
    assert hashlib.sha256((run / "run.db").read_bytes()).hexdigest() == before, "a reader wrote to the store"
    assert not (tmp_path / "b.tar.gz").exists()


@pytest.mark.root  # mounts a tmpfs
def test_report_on_a_full_disk_says_the_disk_is_full(intact, tmp_path, capsys, monkeypatch):
    mnt = tmp_path / "full"
    mnt.mkdir()
    if (
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True).returncode
        != 0
    ):
        pytest.skip("cannot mount a tmpfs (needs root)")
    try:
        shutil.copytree(intact, mnt / "run", ignore=shutil.ignore_patterns("report*", "summary*", "*.png", "*.csv"))
        with open(mnt / "filler", "wb") as f, contextlib.suppress(OSError):  # take every free byte
            while True:
                f.write(b"x" * 65536)
                f.flush()
        monkeypatch.setattr("sys.argv", ["alloclab", "report", str(mnt / "run")])
        with pytest.raises(SystemExit) as end:
            cli.main()
        err = capsys.readouterr().err
        assert end.value.code == 3 and "disk is full" in err and len(err.strip().splitlines()) == 1, err
        assert "not an alloclab run store" not in err
    finally:
        subprocess.run(["umount", "-l", str(mnt)])
