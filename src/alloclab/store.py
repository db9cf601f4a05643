"""One SQLite file per run (WAL): metadata, groups, replicas, processes, samples, events.

Samples are committed every interval, so `kill -9` of alloclab loses at most one interval and
leaves a file any SQLite reader opens. Times are Unix seconds (REAL). Every table the analysis
reads is described in docs/reference/store.md.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import re
import shutil
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .common.errors import CutShortError, StoreError, UserError

if TYPE_CHECKING:  # numpy is imported where series_arrays needs it: a bad run path is refused before it loads
    import numpy as np

SCHEMA_VERSION = 7
DB_NAME = "run.db"

SAMPLES_INDEX = "CREATE INDEX IF NOT EXISTS samples_by_replica ON samples(replica_id, t)"
SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS groups(
    id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL, allocator TEXT NOT NULL, kind TEXT,
    library_path TEXT, library_sha256 TEXT, family TEXT, version TEXT,
    env_json TEXT, command_json TEXT, is_baseline INTEGER DEFAULT 0, provenance_json TEXT,
    hardening_json TEXT, tunables_json TEXT);
CREATE TABLE IF NOT EXISTS replicas(
    id INTEGER PRIMARY KEY, group_id INTEGER NOT NULL REFERENCES groups(id), idx INTEGER,
    name TEXT UNIQUE NOT NULL, workdir TEXT, start_order INTEGER, started_at REAL, ended_at REAL,
    exit_code INTEGER, root_pid INTEGER, cgroup TEXT,
    verified INTEGER, verify_detail TEXT, end_kind TEXT, host TEXT, embedded_json TEXT);
CREATE TABLE IF NOT EXISTS processes(
    id INTEGER PRIMARY KEY, replica_id INTEGER NOT NULL REFERENCES replicas(id),
    pid INTEGER, start_ticks INTEGER, ppid INTEGER, comm TEXT, cmdline TEXT,
    first_seen REAL, last_seen REAL, verified INTEGER, verify_detail TEXT, mapped_allocator TEXT,
    UNIQUE(pid, start_ticks));
CREATE TABLE IF NOT EXISTS verifications(
    t REAL, process_id INTEGER REFERENCES processes(id), verified INTEGER, detail TEXT,
    mapped_allocator TEXT);
CREATE TABLE IF NOT EXISTS process_samples(
    t REAL NOT NULL, process_id INTEGER NOT NULL REFERENCES processes(id), tier TEXT NOT NULL,
    rss_kb INTEGER, pss_kb INTEGER, uss_kb INTEGER, anon_kb INTEGER, swap_kb INTEGER,
    cpu_user_s REAL, cpu_sys_s REAL, minflt INTEGER, majflt INTEGER, threads INTEGER,
    lazyfree_kb INTEGER);
CREATE TABLE IF NOT EXISTS samples(
    t REAL NOT NULL, replica_id INTEGER NOT NULL REFERENCES replicas(id), phase TEXT,
    nprocs INTEGER, rss_kb INTEGER, pss_kb INTEGER, uss_kb INTEGER, anon_kb INTEGER, swap_kb INTEGER,
    cpu_s REAL, cgroup_kb INTEGER, cgroup_peak_kb INTEGER, live_bytes INTEGER, ops INTEGER,
    tier TEXT, vmsize_kb INTEGER, hwm_kb INTEGER, lazyfree_kb INTEGER);
{SAMPLES_INDEX};
CREATE TABLE IF NOT EXISTS host_samples(
    t REAL NOT NULL, mem_total_kb INTEGER, mem_available_kb INTEGER, swap_total_kb INTEGER,
    swap_free_kb INTEGER, load1 REAL, sampler_cpu_s REAL);
CREATE TABLE IF NOT EXISTS events(
    id INTEGER PRIMARY KEY, t REAL NOT NULL, kind TEXT NOT NULL, replica_id INTEGER,
    group_name TEXT, description TEXT);
-- imported data: every group list a replica appears in (current or historical), as evidence
-- for when it changed allocator
CREATE TABLE IF NOT EXISTS memberships(
    replica_id INTEGER NOT NULL REFERENCES replicas(id), group_name TEXT NOT NULL,
    list_kind TEXT NOT NULL, source TEXT);
-- the allocator's own account of each process (introspection helper, docs/how-to/introspection.md):
-- bytes; NULL where the allocator does not tell
CREATE TABLE IF NOT EXISTS alloc_stats(
    t REAL NOT NULL, process_id INTEGER NOT NULL REFERENCES processes(id),
    replica_id INTEGER NOT NULL REFERENCES replicas(id), family TEXT, in_use INTEGER,
    held_bins INTEGER, held_top INTEGER, held_dirty INTEGER, held_muzzy INTEGER, held_abandoned INTEGER,
    held_cached INTEGER, held_committed_free INTEGER, held_metadata INTEGER,
    mapped INTEGER, resident INTEGER, retained INTEGER, committed INTEGER, reserved INTEGER,
    arenas INTEGER, pages_abandoned INTEGER, purged INTEGER, free_chunks INTEGER,
    helper_cpu_s REAL, collections INTEGER, interval_s REAL, detail_json TEXT);
CREATE INDEX IF NOT EXISTS alloc_stats_by_replica ON alloc_stats(replica_id, t);
"""
# Columns added after schema 1: a store written by an older alloclab gets them (NULL) on open.
MIGRATIONS = {
    2: [
        "ALTER TABLE samples ADD COLUMN lazyfree_kb INTEGER",
        "ALTER TABLE process_samples ADD COLUMN lazyfree_kb INTEGER",
    ],
    3: ["ALTER TABLE replicas ADD COLUMN end_kind TEXT"],
    4: ["ALTER TABLE replicas ADD COLUMN host TEXT"],  # fleet and Prometheus imports: the machine
    5: [],  # alloc_stats: a new table, made by SCHEMA on open
    6: [
        "ALTER TABLE groups ADD COLUMN hardening_json TEXT"
    ],  # alloclab.allocators.hardening (docs/how-to/allocators.md)
    # what the analysis needs from the host, recorded at run time (docs/reference/store.md): the options the
    # preloaded library knows, and the allocators a replica's program carries itself
    7: ["ALTER TABLE groups ADD COLUMN tunables_json TEXT", "ALTER TABLE replicas ADD COLUMN embedded_json TEXT"],
}
# Kinds of free-but-held memory (alloc_stats' held_* columns), in the order charts stack them.
HELD_KINDS = tuple(re.findall(r"\bheld_(\w+) INTEGER", SCHEMA))
# How a run ends before its planned end (meta cut_short, event 'cut_short'); see docs/reference/store.md.
# 'killed' and 'disk-full' are also its end_reason and `run --resume` continues them; 'error' (the
# runner met an exception) has end_reason "error: TYPE: TEXT" and is not resumable: the runner
# itself stopped every replica and recorded the end.
CUT_SHORT_REASONS = ("killed", "disk-full", "error")
RESUMABLE_REASONS = ("killed", "disk-full")


def _column_present(conn: sqlite3.Connection, stmt: str) -> bool:
    """An `ALTER TABLE t ADD COLUMN c` whose column is already there (a store written by a build
    that numbered its migrations differently) is skipped, not an error."""
    m = re.match(r"ALTER TABLE (\w+) ADD COLUMN (\w+)", stmt)
    return bool(m) and m.group(2) in {r[1] for r in conn.execute(f"PRAGMA table_info({m.group(1)})")}


@contextmanager
def new_run_directory(out: Path) -> Iterator[Path]:
    """`out` made (with any missing parents) for a new store (import, merge); when what runs inside
    fails, no half-made run is left: the directories made are removed, or, in an empty directory
    the user gave, the store's files."""
    top = None
    p = out.absolute()
    while not p.exists() and p != p.parent:
        top, p = p, p.parent
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create {out}: {exc.strerror}", "choose a writable place with -o") from None
    try:
        yield out
    except BaseException:
        if top is not None:
            shutil.rmtree(top, ignore_errors=True)
        else:
            for f in out.glob(DB_NAME + "*"):
                f.unlink(missing_ok=True)
        raise


def resolve_run(arg: str | Path) -> Path:
    """A run directory or its run.db -> path of run.db; UserError if it is not a run."""
    p = Path(arg)
    db = p / DB_NAME if p.is_dir() else p
    if not db.exists():
        raise UserError(
            f"{arg} is not an alloclab run (no {DB_NAME})",
            "give a directory made by `alloclab run` or `alloclab import`",
        )
    return db


# meta keys written as JSON (numbers, lists, objects: runner, host, torutils, fleet, prometheus_import)
JSON_META = frozenset(
    {
        "seed",
        "interval",
        "replicas_per_group",
        "phases",
        "start_order",
        "smaps_budget",
        "command_line",
        "runner",
        "started_at",
        "ended_at",
        "ncpu",
        "mem_total_kb",
        "ticks_skipped",
        "introspect_budget",
        "fleet_main_processes",
        "tor_network",
        "schema_version",
        "replicas_in_several_groups",
        "unlisted_relays",
        "duplicate_timestamps",
    }
)


def decode_meta(meta: dict[str, str]) -> dict[str, Any]:
    """Meta values written as numbers, lists or objects (JSON_META) decoded again; every other value
    stays the text it was written as (a host named "1234" stays a name)."""
    out: dict[str, Any] = {}
    for k, v in meta.items():
        try:
            out[k] = json.loads(v) if k in JSON_META and v else v
        except (TypeError, ValueError):
            out[k] = v
    return out


# ---- damaged stores ------------------------------------------------------------------------------
# A store is read by report, compare, export and bundle through Store.open_checked: read-only, every
# table present, every time finite and plausible. Damage found later (a page that reads as garbage
# mid-query) reaches the CLI as StoreError, which carries the store it came from, and is explained
# by the same check.
MAX_SPAN_S = 20 * 366 * 86400.0  # no run or import covers more than 20 years
MAX_TIME_S = 1e11  # Unix seconds: year 5138
TIMED_TABLES = ("samples", "process_samples", "host_samples", "events")
# memory figures (kB, live_bytes in bytes): a number from 0 to MAX_MEMORY (2^60, past any machine in
# either unit), or NULL. Text, 9.9e307 or inf in a store from elsewhere is damage, said in one
# line, not an overflow deep in the analysis (issue 46)
MEMORY_COLUMNS = {
    "samples": (
        "rss_kb",
        "pss_kb",
        "uss_kb",
        "anon_kb",
        "swap_kb",
        "cgroup_kb",
        "cgroup_peak_kb",
        "live_bytes",
        "vmsize_kb",
        "hwm_kb",
        "lazyfree_kb",
    ),
    "process_samples": ("rss_kb", "pss_kb", "uss_kb", "anon_kb", "swap_kb", "lazyfree_kb"),
    "host_samples": ("mem_total_kb", "mem_available_kb", "swap_total_kb", "swap_free_kb"),
}
MAX_MEMORY = float(1 << 60)


def _table_names(sql: str) -> list[str]:
    return re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", sql)


def _disk_full(exc: BaseException, db: Path | None = None) -> bool:
    """SQLite's "disk is full", or an I/O error on a file system with no free block left (opening a
    WAL store needs its -shm file: on a full disk that fails as a mere "disk I/O error")."""
    if "disk is full" in str(exc) or getattr(exc, "sqlite_errorname", "") == "SQLITE_FULL":
        return True
    try:
        return db is not None and os.statvfs(db.parent).f_bavail == 0
    except OSError:
        return False


def integrity_problem(db: Path) -> str | None:
    """What `PRAGMA integrity_check` says is wrong with the store (its first lines), or None."""
    try:
        conn = sqlite3.connect(f"file:{Path(db).resolve()}?mode=ro", uri=True)
        try:
            rows = [r[0] for r in conn.execute("PRAGMA integrity_check(5)")]
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        return str(exc)
    return None if rows == ["ok"] else "; ".join(rows)[:300]


def damaged(db: Path, what: str, found: str | None = None, *, checked: bool = False) -> UserError:
    """A damaged store given to read is bad input (exit code 2): one line naming it and the fix.
    `checked`: the caller has run integrity_problem(db) already and `found` is what it said."""
    found = found if checked else integrity_problem(db)
    check = f"integrity_check: {found}" if found else "integrity_check: ok"
    return UserError(
        f"{db} is damaged: {what} ({check})",
        "restore it from a backup or the run's bundle; `sqlite3 run.db .recover` may save what is left",
    )


def refuse_empty(conn: sqlite3.Connection, db: Path) -> None:
    """A run.db of 0 bytes, or an SQLite file with no table at all, holds no run: say so, rather
    than "not a run store" or "damaged" (the connection is closed then)."""
    if conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone() is None:
        conn.close()
        raise UserError(
            f"{db} is empty: no run was recorded in it",
            "give a run directory that `alloclab run`, `fleet collect` or `import` recorded into (merging: leave this one out)",
        )


# SQLite errors that say the store could not be used, not that it is damaged (extended names start so)
NOT_DAMAGE = ("SQLITE_READONLY", "SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_PERM", "SQLITE_CANTOPEN")
# ... and those that say its file is damaged
DAMAGE = ("SQLITE_CORRUPT", "SQLITE_NOTADB")


def explain_database_error(exc: StoreError) -> UserError:
    """One line for a database error: a full disk (exit code 3), or (2) the store it came from
    (exc.store, not the last one opened) called damaged where SQLite says so or its integrity check
    finds damage, else said to be unusable (read-only, locked, a constraint) with its SQLite error
    name: a healthy store is never sent to its backup."""
    db = Path(exc.store) if exc.store is not None else None
    if _disk_full(exc, db):
        return CutShortError("the disk is full: SQLite could not write", "free space on that file system, then retry")
    if db is None:
        return UserError(
            f"a run store could not be read: {exc}", "check it with: sqlite3 run.db 'PRAGMA integrity_check'"
        )
    name = exc.sqlite_errorname
    found = None if name.startswith(NOT_DAMAGE) else integrity_problem(db)
    if found or name.startswith(DAMAGE):
        return damaged(db, str(exc), found, checked=True)  # DAMAGE and NOT_DAMAGE are apart: it ran
    return UserError(
        f"{db} could not be used: {exc}" + (f" ({name})" if name else ""),
        "check that it and its directory are writable by this user and that no other program holds it, "
        "then retry (its integrity check found no damage)",
    )


def _given(args: dict[str, Any]) -> dict[str, Any]:
    """A typed write's arguments as a row (its `self` left out)."""
    return {k: v for k, v in args.items() if k != "self"}


def _check_columns(table: str, names: Iterable[str]) -> None:
    unknown = [c for c in names if c not in _COLUMNS[table]]
    if unknown:
        raise ValueError(f"not a {table} column: {', '.join(unknown)}")


def disk_full_error(exc: BaseException) -> bool:
    """A write failed because the disk (or quota) is full: SQLite's or the file system's."""
    if isinstance(exc, StoreError):
        return exc.disk_full
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


@contextmanager
def _sqlite_errors(db: Path) -> Iterator[None]:
    try:
        yield
    except sqlite3.Error as exc:
        raise _store_error(exc, db) from exc


def _store_error(exc: sqlite3.Error, db: Path | None) -> StoreError:
    name = getattr(exc, "sqlite_errorname", "")
    full = name == "SQLITE_FULL" or (isinstance(exc, sqlite3.OperationalError) and "full" in str(exc))
    return StoreError(str(exc), disk_full=full, sqlite_errorname=name, store=db)


def _raising_store_errors(cls: type) -> type:
    """Every public method of the class raises StoreError, never sqlite3's errors; a method of a
    store names that store's file in it (a classmethod: none)."""

    def wrap(fn):
        @functools.wraps(fn)
        def method(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except sqlite3.Error as exc:
                raise _store_error(exc, args[0].path if args and isinstance(args[0], cls) else None) from exc

        return method

    for name, attr in list(vars(cls).items()):
        if name.startswith("_"):
            continue
        if isinstance(attr, classmethod):
            setattr(cls, name, classmethod(wrap(attr.__func__)))
        elif callable(attr):
            setattr(cls, name, wrap(attr))
    return cls


# columns of each table (from SCHEMA): the typed writes check names before any SQL is built
_COLUMNS = {
    t: frozenset(re.findall(r"(?:^|[(,])\s*(\w+) (?:INTEGER|REAL|TEXT)", body))
    for t, body in re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)\((.*?)\);", SCHEMA, re.S)
}


@_raising_store_errors
class Store:
    """A run's store. Writes go through the typed `add_*` / `update_*` methods, inside
    `transaction()` or, for the runner's sampling ticks, `tick()`."""

    def __init__(self, conn: sqlite3.Connection, path: Path):
        conn.row_factory = sqlite3.Row
        self.conn, self.path = conn, path
        self.closed = False

    # ---- open / create ----
    @classmethod
    def create(cls, path: Path, several_hosts: bool = False) -> Store:
        """A new store. `several_hosts` (a merge): a process is identified by (pid, start time) on
        its own host only, so the identity is unique per replica, not across the store."""
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")  # WAL+NORMAL survives a killed process
        conn.executescript(
            SCHEMA.replace("UNIQUE(pid, start_ticks)", "UNIQUE(replica_id, pid, start_ticks)")
            if several_hosts
            else SCHEMA
        )
        store = cls(conn, path)
        store.set_meta(schema_version=SCHEMA_VERSION)
        return store

    @classmethod
    def open(cls, arg: str | Path) -> Store:
        db = resolve_run(arg)
        try:
            # Not opened read-only: a read-only handle cannot recover the WAL index of a store whose
            # writer was killed, and recovering it is exactly what a crashed run needs.
            conn = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
            refuse_empty(conn, db)
            version = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        except sqlite3.DatabaseError:
            raise UserError(
                f"{db} is not an alloclab run store", "give a run made by `alloclab run` or `alloclab import`"
            ) from None
        if version is None:
            raise UserError(f"{db} has no schema version", "it was not written by alloclab")
        if int(version[0]) > SCHEMA_VERSION:
            raise UserError(
                f"{db} has schema {version[0]}, newer than this alloclab ({SCHEMA_VERSION})", "upgrade alloclab"
            )
        if int(version[0]) < SCHEMA_VERSION:
            for v in range(int(version[0]) + 1, SCHEMA_VERSION + 1):
                for stmt in MIGRATIONS.get(v, []):
                    if not _column_present(conn, stmt):
                        conn.execute(stmt)
            conn.executescript(SCHEMA)
            conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        return cls(conn, db)

    @classmethod
    def open_checked(cls, arg: str | Path) -> Store:
        """A store opened to be read (report, compare, export, bundle): read-only unless a killed
        writer left a WAL to recover (Store.open recovers it), then checked: every table present,
        every sample and event time finite and plausible. Damage is one UserError naming the store
        and what `PRAGMA integrity_check` says (exit code 2), never a traceback or a MemoryError."""
        db = resolve_run(arg)
        wal = db.with_name(db.name + "-wal")
        try:
            if wal.exists() and wal.stat().st_size > 0:
                store = cls.open(db)
            else:
                conn = sqlite3.connect(
                    f"file:{db.resolve()}?mode=ro", uri=True, isolation_level=None, check_same_thread=False
                )
                store = cls(conn, db)
                refuse_empty(conn, db)
                version = store.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
                if version is None:
                    raise UserError(f"{db} has no schema version", "it was not written by alloclab")
                if str(version[0]).isdigit() and int(version[0]) < SCHEMA_VERSION:
                    # an older alloclab's store lacks what later schemas add (alloc_stats from 5):
                    # upgraded in place as `merge` and a resumed run do, not called damaged
                    store.conn.close()
                    store = cls._upgraded(db, int(version[0]))
        except (sqlite3.DatabaseError, StoreError) as exc:  # StoreError: from Store.open
            if _disk_full(exc, db):
                raise CutShortError(
                    f"the disk is full: SQLite cannot open {db} ({exc})", "free space on that file system, then retry"
                ) from None
            if "file is not a database" in str(exc):  # no SQLite header at all: the wrong file
                raise UserError(
                    f"{db} is not an alloclab run store (not an SQLite file)",
                    "give a run made by `alloclab run` or `alloclab import`",
                ) from None
            raise damaged(db, str(exc)) from None
        store.check_readable()
        return store

    @classmethod
    def _upgraded(cls, db: Path, version: int) -> Store:
        """An older schema's store opened through Store.open, which adds what later schemas have;
        one line where the store cannot be written (a read-only copy)."""
        if not os.access(db, os.W_OK) or not os.access(db.parent, os.W_OK):
            raise UserError(
                f"{db} has schema {version}, older than this alloclab's ({SCHEMA_VERSION}), and cannot be "
                "upgraded where it is (not writable)",
                "copy its run directory somewhere writable and give that",
            )
        return cls.open(db)

    def check_readable(self) -> None:
        """Refuse damage (a missing table, a time that is not a plausible Unix time) with one
        UserError naming this store, closing it (a database error met later names the store it
        came from: StoreError.store, explain_database_error)."""
        try:
            self._check_shape(self.path)
        except sqlite3.DatabaseError as exc:
            self.discard()
            raise damaged(self.path, str(exc)) from None
        except UserError:
            self.discard()
            raise

    def _check_shape(self, db: Path) -> None:
        present = {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        missing = [t for t in _table_names(SCHEMA) if t not in present]
        if missing:
            raise damaged(db, f"table {', '.join(missing)} is missing")
        for table in TIMED_TABLES:
            lo, hi, bad = self.conn.execute(
                f"SELECT min(t), max(t), sum(t IS NULL OR typeof(t) NOT IN ('real', 'integer') OR abs(t) > ?) FROM {table}",
                (MAX_TIME_S,),
            ).fetchone()
            if bad or (lo is not None and hi - lo > MAX_SPAN_S):
                raise damaged(
                    db,
                    f"{table} holds a time that is not a plausible Unix time "
                    f"(from {lo!r} to {hi!r}; at most {MAX_TIME_S:g} and a {MAX_SPAN_S / 86400 / 366:g}-year span)",
                )
        for table, columns in MEMORY_COLUMNS.items():
            present_cols = {r[1] for r in self.conn.execute(f"PRAGMA table_info({table})")}
            columns = [c for c in columns if c in present_cols]
            if not columns:
                continue
            try:
                counts = self.conn.execute(
                    "SELECT "
                    + ", ".join(
                        f"sum({c} IS NOT NULL AND (typeof({c}) NOT IN ('integer', 'real') OR {c} < 0 OR {c} > ?))"
                        for c in columns
                    )
                    + f" FROM {table}",
                    (MAX_MEMORY,) * len(columns),
                ).fetchone()
            except sqlite3.DatabaseError:
                continue  # a damaged page: named by the read that meets it (explain_database_error), as before

            for c, n in zip(columns, counts):
                if n:
                    raise damaged(
                        db,
                        f"{table}.{c} holds {n} value{'s' if n != 1 else ''} that {'are' if n != 1 else 'is'} "
                        "not a memory figure (text, negative, or over 2^60)",
                    )

    @classmethod
    def open_readonly(cls, db: Path) -> Store:
        """A read-only handle on a store another process is writing (the live view): it never
        migrates or writes, and sees each committed interval (WAL)."""
        conn = sqlite3.connect(
            f"file:{Path(db).resolve()}?mode=ro", uri=True, isolation_level=None, check_same_thread=False
        )
        conn.execute("PRAGMA query_only=ON")
        return cls(conn, Path(db))

    @property
    def run_dir(self) -> Path:
        return self.path.parent

    # ---- transactions: one per sampling interval ----
    def begin(self) -> None:
        self.conn.execute("BEGIN")

    def commit(self) -> None:
        if self.conn.in_transaction:
            self.conn.execute("COMMIT")

    def rollback(self) -> None:
        """Drop what the open transaction wrote (nothing happens outside one)."""
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")

    @contextmanager
    def tick(self) -> Iterator[None]:
        """One sampling tick's writes, committed together at its end. When the tick fails, what it
        wrote so far is kept (committed) — unless the failure is a full disk, where the write
        cannot go on: it is rolled back, so the run's end can still be recorded (see runner)."""
        self.begin()
        try:
            yield
        except BaseException as exc:
            self.rollback() if disk_full_error(exc) else self.commit()
            raise
        try:
            self.commit()
        except StoreError as exc:
            if exc.disk_full:
                self.rollback()
            raise

    @contextmanager
    def read_snapshot(self):
        """Reads inside see one committed state (one read transaction): e.g. one whole sampling
        tick while the runner writes the next. Inside a transaction already: that one."""
        with _sqlite_errors(self.path):
            if self.conn.in_transaction:
                yield
                return
            self.conn.execute("BEGIN")
            try:
                yield
            finally:
                self.conn.execute("COMMIT")

    def close(self) -> None:
        """Commit and close; a store closed already (check_readable refused it) stays closed, so a
        caller's cleanup does not replace that refusal with an error of its own."""
        if not self.closed:
            self.commit()
            self.conn.close()
            self.closed = True

    def discard(self) -> None:
        """Close without committing: what an open transaction wrote is dropped (a store being
        thrown away, or one whose last write failed)."""
        self.conn.close()
        self.closed = True

    def copy_to(self, path: Path) -> None:
        """One consistent copy of the whole store in a single file (SQLite's online backup: WAL
        pages included, no -wal/-shm beside it), e.g. for `alloclab bundle`."""
        dst = sqlite3.connect(str(path))
        try:
            self.conn.backup(dst)
            dst.execute("PRAGMA journal_mode=DELETE")
        finally:
            dst.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One transaction: committed at the end, rolled back on any exception."""
        self.begin()
        try:
            yield
            self.commit()
        except BaseException:
            self.rollback()
            raise

    @contextmanager
    def bulk_load(self) -> Iterator[None]:
        """One transaction for filling a new store at once (an import of millions of samples):
        no fsync and a 256 MiB page cache while it lasts, and the samples index built once at the
        end instead of row by row (the schema ends up the same). Both settings are restored after;
        on an exception the transaction is rolled back (the caller removes a new store)."""
        with _sqlite_errors(self.path):
            self.conn.execute("PRAGMA synchronous=OFF")
            self.conn.execute("PRAGMA cache_size=-262144")
            try:
                self.conn.execute("DROP INDEX IF EXISTS samples_by_replica")
                with self.transaction():
                    yield
                    self.conn.execute(SAMPLES_INDEX)
            finally:
                self.conn.execute("PRAGMA cache_size=-2000")  # SQLite's default
                self.conn.execute("PRAGMA synchronous=NORMAL")  # as Store.create sets it

    # ---- metadata ----
    def set_meta(self, **items: Any) -> None:
        for k, v in items.items():
            value = v if isinstance(v, str) else json.dumps(v)
            self.conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (k, value))

    def typed_meta(self) -> dict[str, Any]:
        """meta() with the values written as numbers, lists or objects decoded again (decode_meta)."""
        return decode_meta(self.meta())

    def meta(self) -> dict[str, str]:
        return {r[0]: r[1] for r in self.conn.execute("SELECT key, value FROM meta")}

    # ---- writes: one typed method per kind of row; table names and SQL stay in here ----
    def add_group(
        self,
        *,
        name: str,
        allocator: str,
        kind: str | None = None,
        library_path: str | None = None,
        library_sha256: str | None = None,
        family: str | None = None,
        version: str | None = None,
        env_json: str | None = None,
        command_json: str | None = None,
        is_baseline: int = 0,
        provenance_json: str | None = None,
        hardening_json: str | None = None,
        tunables_json: str | None = None,
    ) -> int:
        """A group (one allocator setting); returns its id."""
        return self._insert("groups", **_given(locals()))

    def add_replica(
        self,
        *,
        group_id: int,
        name: str,
        idx: int | None = None,
        workdir: str | None = None,
        start_order: int | None = None,
        started_at: float | None = None,
        ended_at: float | None = None,
        exit_code: int | None = None,
        root_pid: int | None = None,
        cgroup: str | None = None,
        verified: int | None = None,
        verify_detail: str | None = None,
        end_kind: str | None = None,
        host: str | None = None,
        embedded_json: str | None = None,
    ) -> int:
        """A replica (one sampled instance: a started program, a fleet unit, an imported relay); returns its id."""
        return self._insert("replicas", **_given(locals()))

    def add_process(
        self,
        *,
        replica_id: int,
        pid: int | None = None,
        start_ticks: int | None = None,
        ppid: int | None = None,
        comm: str | None = None,
        cmdline: str | None = None,
        first_seen: float | None = None,
        last_seen: float | None = None,
        verified: int | None = None,
        verify_detail: str | None = None,
        mapped_allocator: str | None = None,
    ) -> int:
        """A process of a replica, known by (pid, start ticks); returns its id."""
        return self._insert("processes", **_given(locals()))

    def add_verification(
        self,
        *,
        t: float,
        process_id: int,
        verified: int | bool | None,
        detail: str | None = None,
        mapped_allocator: str | None = None,
    ) -> None:
        """A verdict on which allocator a process has mapped (stored when it changes)."""
        self._insert("verifications", **_given(locals()))

    def add_membership(self, *, replica_id: int, group_name: str, list_kind: str, source: str | None = None) -> None:
        """An imported group list a replica appears in ('current' or 'historical')."""
        self._insert("memberships", **_given(locals()))

    def add_host_sample(
        self,
        *,
        t: float,
        mem_total_kb: int | None = None,
        mem_available_kb: int | None = None,
        swap_total_kb: int | None = None,
        swap_free_kb: int | None = None,
        load1: float | None = None,
        sampler_cpu_s: float | None = None,
    ) -> None:
        self._insert("host_samples", **_given(locals()))

    def add_event(
        self, t: float, kind: str, description: str, replica_id: int | None = None, group_name: str | None = None
    ) -> None:
        self._insert("events", t=t, kind=kind, description=description, replica_id=replica_id, group_name=group_name)

    # many rows at once (a tick's samples, an import's series): `columns` names each tuple's values
    def add_samples(self, columns: tuple[str, ...], rows: Iterable[tuple]) -> None:
        self._insert_many("samples", columns, rows)

    def add_process_samples(self, columns: tuple[str, ...], rows: Iterable[tuple]) -> None:
        self._insert_many("process_samples", columns, rows)

    def add_host_samples(self, columns: tuple[str, ...], rows: Iterable[tuple]) -> None:
        self._insert_many("host_samples", columns, rows)

    def add_alloc_stats(self, columns: tuple[str, ...], rows: Iterable[tuple]) -> None:
        self._insert_many("alloc_stats", columns, rows)

    def update_group(self, group_id: int, **values: Any) -> None:
        self._update("groups", group_id, values)

    def update_replica(self, replica_id: int, **values: Any) -> None:
        self._update("replicas", replica_id, values)

    def update_process(self, process_id: int, **values: Any) -> None:
        self._update("processes", process_id, values)

    def _insert(self, table: str, **row: Any) -> int:
        _check_columns(table, row)
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        return self.conn.execute(f"INSERT INTO {table}({cols}) VALUES ({marks})", tuple(row.values())).lastrowid

    def _insert_many(self, table: str, columns: tuple[str, ...], rows: Iterable[tuple]) -> None:
        _check_columns(table, columns)
        marks = ", ".join("?" for _ in columns)
        self.conn.executemany(f"INSERT INTO {table}({', '.join(columns)}) VALUES ({marks})", rows)

    def _update(self, table: str, row_id: int, values: dict[str, Any]) -> None:
        _check_columns(table, values)
        sets = ", ".join(f"{k} = ?" for k in values)
        self.conn.execute(f"UPDATE {table} SET {sets} WHERE id = ?", (*values.values(), row_id))

    def processes_seen(self, t: float, process_ids: Iterable[int]) -> None:
        """last_seen = t for many processes rows in one statement run once (the ids handed over as
        one JSON array): at 2,000 a tick half the CPU of the UPDATE executed per id
        (benchmarks/store_tick_cost.py)."""
        ids = [int(i) for i in process_ids]
        if ids:
            self.conn.execute(
                "UPDATE processes SET last_seen = ? WHERE id IN (SELECT value FROM json_each(?))", (t, json.dumps(ids))
            )

    def process_row(self, pid: int, start_ticks: int) -> int | None:
        """The id of the processes row of (pid, start ticks), if it was recorded."""
        found = self.conn.execute(
            "SELECT id FROM processes WHERE pid = ? AND start_ticks = ?", (pid, start_ticks)
        ).fetchone()
        return found[0] if found else None

    def mark_cut_short(self, reason: str, t: float, description: str, end_reason: str | None = None) -> bool:
        """Record that the run ended before its end (reason in CUT_SHORT_REASONS): end reason
        (`reason` unless given), end time (the last sample), a 'cut_short' event, and every
        replica still open closed at its last sample. An end reason already recorded is kept
        (False then)."""
        self.commit()
        self.begin()
        if self.meta().get("end_reason"):
            self.commit()
            return False
        last = self.conn.execute("SELECT MAX(t) FROM samples").fetchone()[0]
        self.set_meta(end_reason=end_reason or reason, ended_at=last or t, cut_short=reason)
        self.conn.execute(
            "UPDATE replicas SET end_kind = 'cut-short', ended_at = COALESCE("
            "(SELECT MAX(s.t) FROM samples s WHERE s.replica_id = replicas.id), ?) WHERE ended_at IS NULL",
            (last or t,),
        )
        self.add_event(t, "cut_short", description)
        self.commit()
        return True

    # ---- reads ----
    def query(self, sql: str, params: tuple = ()) -> list[sqlite3.Row]:
        return self.conn.execute(sql, params).fetchall()

    # ---- read API: the only SQL the analysis and reporters depend on ----
    def groups(self) -> list[dict]:
        return [dict(r) for r in self.query("SELECT * FROM groups ORDER BY id")]

    def process_curve(self, replica: str, pid: int, start_ticks: int) -> list[tuple[float, int]]:
        """(t, rss_kb) of a replica's samples taken while one of its processes (pid, start ticks)
        lived, in time order: a fleet unit's level along its old main process's life (the canary
        guard compares a new process with it at the same age)."""
        return [
            (r[0], r[1])
            for r in self.query(
                "SELECT s.t, s.rss_kb FROM samples s JOIN replicas r ON r.id = s.replica_id "
                "JOIN processes p ON p.replica_id = r.id AND p.pid = ? AND p.start_ticks = ? "
                "WHERE r.name = ? AND s.t BETWEEN p.first_seen AND p.last_seen AND s.rss_kb IS NOT NULL ORDER BY s.t",
                (pid, start_ticks, replica),
            )
        ]

    def replica_names_without_group(self) -> list[str]:
        """Replicas whose group_id names no group (damage in a store from elsewhere: `merge` says so
        of the source, not of its output)."""
        return [
            r[0]
            for r in self.query(
                "SELECT name FROM replicas WHERE group_id IS NULL OR group_id NOT IN "
                "(SELECT id FROM groups) ORDER BY name"
            )
        ]

    def replicas(self) -> list[dict]:
        """Every replica with its group's name as `group` (ordered by group, then index)."""
        return [
            dict(r)
            for r in self.query(
                'SELECT r.*, g.name AS "group" FROM replicas r JOIN groups g ON g.id = r.group_id ORDER BY g.id, r.idx, r.name'
            )
        ]

    def series(self, replica_id: int, columns: Iterable[str], not_null: str | None = None) -> dict[str, list]:
        """Columns of `samples` for one replica in time order, as lists (column -> values);
        `not_null` keeps only the rows where that column has a value."""
        cols = ["t", *[c for c in columns if c != "t"]]
        known = set(self._columns("samples"))
        bad = [c for c in cols + ([not_null] if not_null else []) if c not in known]
        if bad:
            raise ValueError(f"not a samples column: {', '.join(bad)}")
        where = f" AND {not_null} IS NOT NULL" if not_null else ""
        cur = self.conn.cursor()
        cur.row_factory = None  # plain tuples, transposed in C: 10M samples read in seconds
        rows = cur.execute(
            f"SELECT {', '.join(cols)} FROM samples WHERE replica_id = ?{where} ORDER BY t", (replica_id,)
        ).fetchall()
        columns = list(zip(*rows)) if rows else [() for _ in cols]
        return {c: list(v) for c, v in zip(cols, columns)}

    def mean_between(self, replica_id: int, column: str, start: float, end: float) -> tuple[float | None, int]:
        """(mean of `column`, samples it covers) of one replica's samples with start <= t < end
        (the fleet collector's level of a unit before a deploy)."""
        if column not in self._columns("samples"):
            raise ValueError(f"not a samples column: {column}")
        mean, n = self.query(
            f"SELECT AVG({column}), COUNT({column}) FROM samples WHERE replica_id = ? AND t >= ? AND t < ?",
            (replica_id, start, end),
        )[0]
        return mean, n

    def series_arrays(
        self, replica_id: int, columns: Iterable[str], not_null: str | None = None
    ) -> dict[str, np.ndarray]:
        """`series` as numpy arrays: number columns as float64 (NULL -> NaN), text columns as object
        arrays. Numbers come from one query straight into one array (no Python list per column,
        no transposition in Python): at 10 M samples this is most of a report's reading time."""
        import numpy as np

        cols = ["t", *dict.fromkeys(c for c in columns if c != "t")]
        types = {r[1]: (r[2] or "").upper() for r in self.query("PRAGMA table_info(samples)")}
        bad = [c for c in cols + ([not_null] if not_null else []) if c not in types]
        if bad:
            raise ValueError(f"not a samples column: {', '.join(bad)}")
        text = [c for c in cols if "TEXT" in types[c]]
        numbers = [c for c in cols if c not in text]
        where = f" AND {not_null} IS NOT NULL" if not_null else ""
        cur = self.conn.cursor()
        cur.row_factory = None

        def read(names: list[str], dtype: type) -> np.ndarray:
            rows = cur.execute(
                f"SELECT {', '.join(names)} FROM samples WHERE replica_id = ?{where} ORDER BY t", (replica_id,)
            ).fetchall()
            # one C conversion of the row tuples, then one copy so each column is contiguous
            return np.array(rows, dtype=dtype).reshape(len(rows), len(names)).T.copy()

        out = dict(zip(numbers, read(numbers, float)))
        if text:
            out.update(zip(text, read(text, object)))
        return {c: out[c] for c in cols}

    def sample_columns_with_values(self, columns: Iterable[str]) -> set[str]:
        """Which of these `samples` columns hold a value anywhere (one scan, in SQLite): the
        analysis skips reading columns that are empty for the whole run (most of an import)."""
        cols = [c for c in columns if c in set(self._columns("samples"))]
        if not cols:
            return set()
        row = self.conn.execute(f"SELECT {', '.join(f'COUNT({c})' for c in cols)} FROM samples").fetchone()
        return {c for c, n in zip(cols, row) if n}

    def events(self, kinds: Iterable[str] | None = None, exclude: Iterable[str] | None = None) -> list[dict]:
        """Events in time order, optionally only of `kinds` or without `exclude`."""
        sql, params = "SELECT * FROM events", []
        conds = []
        if kinds is not None:
            kinds = list(kinds)
            conds.append(f"kind IN ({', '.join('?' for _ in kinds)})")
            params += kinds
        if exclude is not None:
            exclude = list(exclude)
            conds.append(f"kind NOT IN ({', '.join('?' for _ in exclude)})")
            params += exclude
        if conds:
            sql += " WHERE " + " AND ".join(conds)
        return [dict(r) for r in self.query(sql + " ORDER BY t, id", tuple(params))]

    def verifications(self) -> list[dict]:
        """Every verification with its process's replica, in time order."""
        return [
            dict(r)
            for r in self.query(
                "SELECT v.t, v.process_id, v.verified, v.detail, v.mapped_allocator, p.replica_id, p.pid, "
                "p.first_seen, p.last_seen FROM verifications v JOIN processes p ON p.id = v.process_id ORDER BY v.t"
            )
        ]

    def latest_samples(self) -> list[dict]:
        """Each replica's newest sample row (the `samples` columns), with its replica's name as
        `replica` (fleet metrics; the live view reads one column of it). One pass over the
        (replica_id, t) index, not a subquery per row."""
        return [
            dict(r)
            for r in self.query(
                "SELECT s.*, r.name AS replica FROM samples s JOIN replicas r ON r.id = s.replica_id "
                "JOIN (SELECT replica_id, MAX(t) AS t FROM samples GROUP BY replica_id) m "
                "ON m.replica_id = s.replica_id AND m.t = s.t"
            )
        ]

    def latest_sample_values(self, column: str) -> dict[int, tuple[float, Any]]:
        """Each replica's newest sample: replica id -> (t, value of `column`) (live view)."""
        if column not in self._columns("samples"):
            raise ValueError(f"not a samples column: {column}")
        return {r["replica_id"]: (r["t"], r[column]) for r in self.latest_samples()}

    def samples_since(self, t: float, column: str) -> list[tuple[int, float, Any]]:
        """(replica id, t, value of `column`) of every sample after t, in time order (live view)."""
        if column not in self._columns("samples"):
            raise ValueError(f"not a samples column: {column}")
        return [
            (r[0], r[1], r[2])
            for r in self.query(f"SELECT replica_id, t, {column} FROM samples WHERE t > ? ORDER BY t, replica_id", (t,))
        ]

    def last_sample_time(self) -> float | None:
        return self.query("SELECT MAX(t) FROM samples")[0][0]

    def cgroup_paths(self) -> list[str]:
        """The cgroups the runner made for replicas (resume and cleanup)."""
        return [r[0] for r in self.query("SELECT cgroup FROM replicas WHERE cgroup IS NOT NULL")]

    def processes(self, replica_id: int | None = None) -> list[dict]:
        """Recorded processes with their replica's name as `replica` (of one replica, or all)."""
        where, params = ("WHERE p.replica_id = ?", (replica_id,)) if replica_id is not None else ("", ())
        return [
            dict(r)
            for r in self.query(
                f"SELECT p.*, r.name AS replica FROM processes p JOIN replicas r ON r.id = p.replica_id {where} ORDER BY p.id",
                params,
            )
        ]

    def verification_history(self) -> list[dict]:
        """Every verification with its process's identity (pid, start ticks), in recorded order."""
        return [
            dict(r)
            for r in self.query(
                "SELECT v.t, p.pid, p.start_ticks, v.verified, v.detail, v.mapped_allocator FROM verifications v "
                "JOIN processes p ON p.id = v.process_id ORDER BY v.t, p.id"
            )
        ]

    def samples_by_time(self) -> list[sqlite3.Row]:
        """Every replica sample with `replica` and `grp` names, by time then start order (export)."""
        return self.query(
            "SELECT s.*, r.name AS replica, g.name AS grp FROM samples s JOIN replicas r ON r.id = s.replica_id "
            "JOIN groups g ON g.id = r.group_id ORDER BY s.t, r.start_order, r.name"
        )

    def events_with_names(self) -> list[dict]:
        """Events with their group label ('all' when none) as `g` and replica name as `replica` (export)."""
        return [
            dict(r)
            for r in self.query(
                "SELECT e.t, e.kind, e.description, COALESCE(e.group_name, 'all') AS g, r.name AS replica "
                "FROM events e LEFT JOIN replicas r ON r.id = e.replica_id ORDER BY e.t, e.id"
            )
        ]

    def host_samples(self) -> list[sqlite3.Row]:
        return self.query("SELECT * FROM host_samples ORDER BY t")

    def memberships(self) -> list[dict]:
        """Imported group lists: replica, group name, 'current' or 'historical', source file."""
        return [
            dict(r)
            for r in self.query(
                "SELECT m.replica_id, r.name AS replica, m.group_name, m.list_kind, m.source FROM memberships m "
                "JOIN replicas r ON r.id = m.replica_id ORDER BY m.replica_id, m.list_kind, m.group_name"
            )
        ]

    def host_summary(self, start: float | None = None, end: float | None = None) -> dict[str, float | None]:
        """Host samples (within [start, end] when given): lowest available-memory share, most swap
        used (kB), highest and median 1-minute load."""
        lo, hi = (start if start is not None else float("-inf")), (end if end is not None else float("inf"))
        r = self.query(
            "SELECT MIN(mem_available_kb * 1.0 / mem_total_kb), MAX(swap_total_kb - swap_free_kb), "
            "MAX(load1), COUNT(*) FROM host_samples WHERE t BETWEEN ? AND ?",
            (lo, hi),
        )[0]
        loads = sorted(
            x[0]
            for x in self.query(
                "SELECT load1 FROM host_samples WHERE load1 IS NOT NULL AND t BETWEEN ? AND ?", (lo, hi)
            )
        )
        median = (loads[(len(loads) - 1) // 2] + loads[len(loads) // 2]) / 2 if loads else None
        return {
            "min_available_share": r[0],
            "max_swap_used_kb": r[1],
            "max_load1": r[2],
            "median_load1": median,
            "samples": r[3],
        }

    def alloc_stats(self, replica_id: int | None = None) -> list[dict]:
        """The allocator's own account (introspection), per process and collection, with the
        replica's name and group, in time order; [] for a store without it (imported data)."""
        where, params = ("WHERE a.replica_id = ?", (replica_id,)) if replica_id is not None else ("", ())
        return [
            dict(r)
            for r in self.query(
                'SELECT a.*, r.name AS replica, g.name AS "group" FROM alloc_stats a JOIN replicas r ON r.id = a.replica_id '
                f"JOIN groups g ON g.id = r.group_id {where} ORDER BY a.t, a.process_id",
                params,
            )
        ]

    def _columns(self, table: str) -> list[str]:
        return [r[1] for r in self.query(f"PRAGMA table_info({table})")]

    # ---- merge (alloclab.interchange.merge): another run store's rows copied in, ids renumbered ----
    def absorb(self, source: Path, host: str, group_ids: dict[str, int]) -> dict[str, int]:
        """Copy every replica of the store at `source` (with its processes, verifications, samples,
        process samples, allocator statistics, events and host samples) into this one: replicas are
        named HOST/NAME and keep `host`; groups are mapped by name to `group_ids`; times are kept
        as recorded. One transaction; returns the rows copied per table. A database error names
        `source` where the source's integrity check finds damage and this store's does not (the
        source is only read); any other (a full disk, a lock, a read-only file) stays this store's."""
        try:
            with _sqlite_errors(self.path):
                return self._absorb(source, host, group_ids)
        except StoreError as exc:
            if (
                not exc.disk_full
                and not exc.sqlite_errorname.startswith(NOT_DAMAGE)
                and integrity_problem(Path(source)) is not None
                and integrity_problem(self.path) is None
            ):
                exc.store = Path(source)
            raise

    def _absorb(self, source: Path, host: str, group_ids: dict[str, int]) -> dict[str, int]:
        self.conn.execute("ATTACH DATABASE ? AS src", (str(Path(source).resolve()),))  # only read from
        counts: dict[str, int] = {}
        try:
            with self.transaction():
                roff = self.conn.execute("SELECT COALESCE(MAX(id), 0) FROM replicas").fetchone()[0]
                poff = self.conn.execute("SELECT COALESCE(MAX(id), 0) FROM processes").fetchone()[0]
                order = self.conn.execute("SELECT COALESCE(MAX(start_order) + 1, 0) FROM replicas").fetchone()[0]
                mapping = " ".join(
                    f"WHEN {int(g[0])} THEN {int(group_ids[g[1]])}"
                    for g in self.conn.execute("SELECT id, name FROM src.groups").fetchall()
                )

                def copy(
                    table: str, changes: dict[str, str], skip: tuple[str, ...] = (), params: dict | None = None
                ) -> None:
                    cols = [c for c in self._columns(table) if c not in skip and c in self._attached_columns(table)]
                    cur = self.conn.execute(
                        f"INSERT INTO main.{table}({', '.join(cols)}) SELECT "
                        f"{', '.join(changes.get(c, c) for c in cols)} FROM src.{table}",
                        params or {},
                    )
                    counts[table] = cur.rowcount

                copy(
                    "replicas",
                    {
                        "id": f"id + {roff}",
                        "group_id": f"CASE group_id {mapping} END",
                        "name": ":host || '/' || name",
                        "start_order": f"COALESCE(start_order, 0) + {order}",
                        "host": "COALESCE(host, :host)",
                    },
                    params={"host": host},
                )
                copy("processes", {"id": f"id + {poff}", "replica_id": f"replica_id + {roff}"})
                copy("verifications", {"process_id": f"process_id + {poff}"})
                copy("samples", {"replica_id": f"replica_id + {roff}"})
                copy("process_samples", {"process_id": f"process_id + {poff}"})
                copy("alloc_stats", {"process_id": f"process_id + {poff}", "replica_id": f"replica_id + {roff}"})
                copy("events", {"replica_id": f"replica_id + {roff}"}, skip=("id",))
                copy("host_samples", {})
        finally:
            self.conn.execute("DETACH DATABASE src")
        return counts

    def _attached_columns(self, table: str) -> set[str]:
        return {r[1] for r in self.query(f"PRAGMA src.table_info({table})")}
