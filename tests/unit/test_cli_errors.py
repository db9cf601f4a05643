"""Bad input and environment failures through the CLI's one error path (alloclab.cli.main, in this
process): one line naming the problem and the fix, exit code 2 (3 only for a full disk), no
traceback, nothing recorded lost. The stores are made directly (test_merge.host_run)."""

from __future__ import annotations

import errno
import hashlib
import sqlite3
import sys

import pytest

from tests.integration.test_damaged_store import zero_samples_root
from tests.unit.test_cli_outputs import alloclab, one_line
from tests.unit.test_merge import host_run


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def two_hosts(tmp_path):
    return host_run(tmp_path / "h1", "h1", 1000.0), host_run(tmp_path / "h2", "h2", 1000.3)


@pytest.mark.parametrize("damage", ["DROP TABLE events", "UPDATE samples SET t = 1e300 WHERE rowid = 3"])
def test_a_damaged_store_is_bad_input_to_every_reader(monkeypatch, capsys, tmp_path, two_hosts, damage):
    a, b = two_hosts
    conn = sqlite3.connect(b / "run.db")
    conn.execute(damage)
    conn.commit()
    conn.close()
    before = _digest(b / "run.db")
    for argv in (
        ["merge", str(a), str(b), "-o", str(tmp_path / "m")],
        ["report", str(b)],
        ["compare", str(a), str(b)],
        ["export", str(b), "--csv", str(tmp_path / "csv")],
    ):
        one_line(*alloclab(monkeypatch, capsys, *argv), f"{b / 'run.db'} is damaged", "integrity_check", "restore it")
    assert _digest(b / "run.db") == before and not (tmp_path / "m").exists() and not (b / "report.md").exists()


def test_a_store_damaged_past_opening_is_named_not_the_last_one_opened(monkeypatch, capsys, tmp_path, two_hosts):
    a, b = two_hosts
    zero_samples_root(a / "run.db")
    from alloclab.store import Store

    Store.open_checked(a).close()  # the damage is met at a read after both stores are open
    before = _digest(a / "run.db")
    for argv in (["compare", str(a), str(b)], ["merge", str(a), str(b), "-o", str(tmp_path / "m")]):
        code, err = alloclab(monkeypatch, capsys, *argv)
        one_line(code, err, f"{a / 'run.db'} is damaged", "malformed", "restore it")
        assert str(b) not in err, err
    assert _digest(a / "run.db") == before and not (tmp_path / "m").exists()


def test_a_store_that_cannot_be_written_is_not_called_damaged(two_hosts):
    from alloclab.common.errors import StoreError
    from alloclab.store import Store, explain_database_error

    store = Store.open_readonly(two_hosts[0] / "run.db")  # query_only: a write fails as SQLITE_READONLY
    with pytest.raises(StoreError) as failed:
        store.set_meta(note="x")
    store.close()
    said = str(explain_database_error(failed.value))
    assert (
        said.startswith(f"{two_hosts[0] / 'run.db'} could not be used: attempt to write a readonly database")
        and "damaged" not in said
    ), said


def test_a_constraint_error_on_a_whole_store_is_not_called_damaged(two_hosts):
    # only SQLite's own damage codes, or damage its integrity check finds, send a store to its backup
    import sqlite3

    from alloclab.store import _store_error, explain_database_error

    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY)")
    conn.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(sqlite3.IntegrityError) as failed:
        conn.execute("INSERT INTO t VALUES (1)")
    said = str(explain_database_error(_store_error(failed.value, two_hosts[0] / "run.db")))
    assert (
        said.startswith(f"{two_hosts[0] / 'run.db'} could not be used: UNIQUE constraint failed")
        and "SQLITE_CONSTRAINT" in said
        and "damaged" not in said
    ), said


@pytest.mark.parametrize("empty", ["0 bytes", "no tables"])
def test_an_empty_store_is_called_empty(monkeypatch, capsys, tmp_path, two_hosts, empty):
    a, _ = two_hosts
    db = tmp_path / "h3" / "run.db"
    db.parent.mkdir()
    db.touch()
    if empty == "no tables":  # an SQLite file (header written) that holds nothing
        conn = sqlite3.connect(db)
        conn.execute("PRAGMA user_version = 1")
        conn.close()
        assert db.stat().st_size > 0
    for argv in (["merge", str(a), str(db.parent), "-o", str(tmp_path / "m")], ["report", str(db.parent)]):
        one_line(
            *alloclab(monkeypatch, capsys, *argv), f"{db} is empty: no run was recorded in it", "leave this one out"
        )
    assert not (tmp_path / "m").exists()


def test_an_os_error_no_command_handled_is_one_line(monkeypatch, capsys, tmp_path, two_hosts):
    run, _ = two_hosts
    before = _digest(run / "run.db")
    out = tmp_path / "out"
    (out / "report.md").mkdir(parents=True)  # a directory where the report goes
    one_line(
        *alloclab(monkeypatch, capsys, "report", str(run), "-o", str(out)),
        f"Is a directory: {out / 'report.md'}",
        "move it or choose another path",
    )
    assert _digest(run / "run.db") == before


@pytest.mark.parametrize(
    "raised,code,needle",
    [
        (
            OSError(errno.EMFILE, "Too many open files"),
            2,
            "Too many open files — alloclab ran out of open files: raise the limit (ulimit -n)",
        ),
        (
            OSError(errno.EROFS, "Read-only file system", "/srv/runs/x"),
            2,
            "Read-only file system: /srv/runs/x — that file system is read-only",
        ),
        (KeyboardInterrupt(), 130, ""),  # Ctrl-C is not swallowed by the OSError line
    ],
)
def test_the_cli_turns_os_errors_into_one_line_but_not_ctrl_c(monkeypatch, capsys, tmp_path, raised, code, needle):
    import alloclab.commands.report as report_command

    def fail(*args, **kwargs):
        raise raised

    monkeypatch.setattr(report_command, "report_command", fail)
    got, err = alloclab(monkeypatch, capsys, "report", str(tmp_path))  # the verb's function raises
    assert got == code and "Traceback" not in err and needle in err and err.count("\n") <= 1, err


def test_a_fault_in_alloclab_is_one_line_with_its_traceback_kept(monkeypatch, capsys, tmp_path):
    import alloclab.commands.report as report_command

    def fail(*args, **kwargs):
        raise RuntimeError("an invariant broke")

    monkeypatch.setattr(report_command, "report_command", fail)
    monkeypatch.setenv("ALLOCLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ALLOCLAB_DEBUG", raising=False)
    got, err = alloclab(monkeypatch, capsys, "report", str(tmp_path))
    assert got == 70 and "Traceback" not in err and err.count("\n") <= 1, err
    assert "internal error: RuntimeError: an invariant broke" in err and "not in what you gave it" in err
    kept = list((tmp_path / "cache" / "crashes").glob("alloclab-crash-*.txt"))
    assert len(kept) == 1 and str(kept[0]) in err
    assert kept[0].stat().st_mode & 0o077 == 0  # the owner's alone
    text = kept[0].read_text()
    assert text.startswith("alloclab report ") and "Traceback" in text and "an invariant broke" in text
    monkeypatch.setenv("ALLOCLAB_DEBUG", "1")  # asked for: the traceback itself
    with pytest.raises(RuntimeError, match="an invariant broke"):
        alloclab(monkeypatch, capsys, "report", str(tmp_path))


@pytest.mark.parametrize(
    "allocator,env,needles",
    [
        (
            "jemalloc@5.3.0",
            "MALLOC_CONF=dirty_decay_ms:abc",
            ["MALLOC_CONF entry dirty_decay_ms:abc", "takes a whole number"],
        ),
        (
            "mimalloc",
            "MIMALLOC_RESET_DELAY=1.5",
            ["MIMALLOC_RESET_DELAY=1.5 is not a valid value", "e.g. MIMALLOC_RESET_DELAY=1"],
        ),
        # Debian's mimalloc 2.0.9 takes a part of an on/off word (test_mimalloc_word_parts_follow_the_version)
        (
            "mimalloc",
            "MIMALLOC_EAGER_COMMIT_DELAY=of",
            [
                "MIMALLOC_EAGER_COMMIT_DELAY=of is only a part of an on/off word",
                "mimalloc 2.0.9 reads any part of 0;FALSE;NO;OFF as off (0)",
                "write the whole word: MIMALLOC_EAGER_COMMIT_DELAY=0",
            ],
        ),
    ],
)
def test_fleet_deploy_refuses_a_wrong_typed_tunable(monkeypatch, capsys, tmp_path, mimalloc, allocator, env, needles):
    from tests.unit.test_cli_outputs import local_units

    monkeypatch.chdir(tmp_path)
    argv = [
        "fleet",
        "deploy",
        mimalloc if allocator == "mimalloc" else allocator,
        "--units",
        "tor@*",
        "--env",
        env,
        "--dry-run",
        *local_units(tmp_path / "root"),
    ]
    one_line(*alloclab(monkeypatch, capsys, *argv), *needles)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root"]  # no plan written


# values each allocator's own parser takes or refuses (allocator_complaints asks it): the types
# alloclab checks before a run must give the same verdict
TYPED_CASES = (
    [
        ("mimalloc", "MIMALLOC_RESET_DELAY", v)
        for v in ("10", "-1", " 5", "OFF", "Yes", "", "abc", "1.5", "0x10", "10ms")
    ]
    + [("mimalloc", "MIMALLOC_RESERVE_OS_MEMORY", v) for v in ("65536", "1GiB", "512m", "1.5G", "64x")]
    + [
        ("jemalloc", "MALLOC_CONF", f"{k}:{v}")
        for k, v in (
            ("dirty_decay_ms", "-1"),
            ("dirty_decay_ms", "0x10"),
            ("dirty_decay_ms", "abc"),
            ("dirty_decay_ms", "1.5"),
            ("dirty_decay_ms", ""),
            ("background_thread", "true"),
            ("background_thread", "True"),
            ("thp", "never"),
            ("thp", "sometimes"),
            ("hpa_dirty_mult", "0.25"),
            ("hpa_dirty_mult", "x"),
            ("junk", "free"),
            ("junk", "maybe"),
        )
    ]
    + [
        ("glibc", key, v if key == "MALLOC_ARENA_MAX" else f"glibc.malloc.arena_max={v}")
        for key in ("MALLOC_ARENA_MAX", "GLIBC_TUNABLES")
        for v in ("2", "0x2", "+2", "010", "abc", "2x")
    ]
)


def test_tunable_types_agree_with_the_allocators_own_parsers(mimalloc, jemalloc):
    from alloclab.allocators import tunables
    from alloclab.common.errors import UserError

    library = {"mimalloc": mimalloc, "jemalloc": jemalloc, "glibc": None}
    disagree, refused = [], 0
    for family, key, value in TYPED_CASES:
        env = {key: value}
        try:
            tunables.validate(env, family, library[family], "g")
            ours = True
        except UserError:
            ours = False
        theirs = not tunables.allocator_complaints(env, family, library[family])
        refused += not ours
        if ours != theirs:
            disagree.append((key, value, "alloclab takes it" if ours else "alloclab refuses it"))
    assert not disagree and refused == 17, (disagree, refused)


def test_mimalloc_word_parts_follow_the_version(mimalloc):
    """mimalloc before 1.9.9, 2.3.1 and 3.3.1 reads any part of "1;TRUE;YES;ON" as on and of
    "0;FALSE;NO;OFF" as off (strstr), later ones only whole words: a part is refused by name
    with the version's reading, whole words and numbers are taken under every version."""
    from alloclab.allocators import options, tunables
    from alloclab.common.errors import UserError

    read = options.library_options(
        "mimalloc",
        mimalloc,
        {
            "MIMALLOC_EAGER_COMMIT_DELAY": "of",  # default 1
            "MIMALLOC_DESTROY_ON_EXIT": "N",
        },
    )  # default 0
    assert (read["eager_commit_delay"], read["destroy_on_exit"]) == ("0", "1"), read  # the real 2.0.9 took them
    said = {}
    for version in ("2.0.9", "3.0.1", "3.3.0", "2.3.1", "3.6.1", None):
        for value in ("of", "N", ";"):
            with pytest.raises(UserError) as refused:
                tunables.validate({"MIMALLOC_DESTROY_ON_EXIT": value}, "mimalloc", mimalloc, "g", version)
            said[version, value] = str(refused.value)
        for value in ("", "1", "Off", "yes", "-3", " 7"):
            tunables.validate({"MIMALLOC_DESTROY_ON_EXIT": value}, "mimalloc", mimalloc, "g", version)
    assert "mimalloc 3.0.1 reads any part of 1;TRUE;YES;ON as on (1)" in said["3.0.1", "N"], said
    assert "(from 3.3.1 on, mimalloc ignores it)" in said["3.3.0", ";"], said
    assert (
        "mimalloc 2.3.1 reads only whole words" in said["2.3.1", "of"]
        and "running on its default" in said["2.3.1", "of"]
    )
    assert (
        "before 1.9.9, 2.3.1, 3.3.1 reads it as off (0)" in said[None, "of"]
        and "version is not known" in said[None, "of"]
    )
    assert all("write the whole word: MIMALLOC_DESTROY_ON_EXIT=" in line for line in said.values())


def _calibration():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[2] / "benchmarks" / "calibration.py"
    spec = importlib.util.spec_from_file_location("calibration_script", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_calibration_designs_is_a_repeated_option_like_cells(monkeypatch, capsys):
    calibration = _calibration()
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "calibration.py",
            "--part",
            "ratchet-group",
            "--quick",
            "--datasets",
            "1",
            "--designs",
            "1.5 d",
            "--designs",
            "9 d",
            "--cells",
            "flat two-scale",
        ],
    )
    assert calibration.main() == 0
    rows = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("| group route")]
    assert len(rows) == 4 and sum("1.5 d @" in r for r in rows) == 2 and sum("9 d @" in r for r in rows) == 2, rows
    monkeypatch.setattr(sys, "argv", ["calibration.py", "--part", "ratchet-group", "--designs", "1.5 d,3 d"])
    assert calibration.main() == 2  # the old comma form selects nothing: said before any simulation
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1 and "one prefix per --designs" in out.err, out
    # a short window only when named: the default rows stay the pooled designs'
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "calibration.py",
            "--part",
            "ratchet-group",
            "--quick",
            "--datasets",
            "1",
            "--designs",
            "0.5 d",
            "--cells",
            "flat AR(1) 2% φ 0.5",
        ],
    )
    assert calibration.main() == 0
    rows = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("| group route") and "φ 0.5," in ln]
    assert len(rows) == 2 and all("0.5 d @ 5 min" in r for r in rows), rows  # (the table repeats earlier calls' rows)


def test_report_opens_the_store_once(monkeypatch, capsys, two_hosts):
    from alloclab.store import Store

    opened = []
    open_checked = Store.open_checked.__func__

    def counting(cls, arg):
        opened.append(arg)
        return open_checked(cls, arg)

    monkeypatch.setattr(Store, "open_checked", classmethod(counting))
    monkeypatch.setattr(sys, "argv", ["alloclab", "report", str(two_hosts[0]), "--metric", "rss"])
    with pytest.raises(SystemExit) as end:
        from alloclab.cli import main

        main()
    assert end.value.code == 0, capsys.readouterr().err
    assert len(opened) == 1 and (two_hosts[0] / "report.md").exists(), opened


def test_calibration_group_alpha_outside_zero_to_one_is_refused_in_one_line(monkeypatch, capsys):
    calibration = _calibration()
    monkeypatch.setattr(sys, "argv", ["calibration.py", "--part", "ratchet-group", "--group-alpha", "5"])
    assert calibration.main() == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1 and "--group-alpha" in out.err, out
