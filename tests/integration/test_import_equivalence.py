"""The streaming importer (issue 16 item 5) lands the same rows and names the same first problem as
the importer before it (commit b5a2729): every table of the run store, row by row in rowid order
with each value's SQLite type, is digested and compared with tests/data/import_golden.json, which
that importer produced (benchmarks/make_import_golden.py) on the real 1AEO datasets, on generated
files with duplicates, gaps, unlisted relays, mixed allocators, extra columns and bad cells, and on
the hostile cases of test_hostile_csv.py; both through the columnar fast path and the row-by-row
reader (fast=False). The inputs are built here, deterministically, and their own digest is in the
golden file too, so a changed input is told apart from a changed importer."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from alloclab.common.errors import UserError
from alloclab.torutils import export, fastcsv, importer
from tests.conftest import DATASETS, REPO
from tests.integration.test_hostile_csv import CASES, _prepare

GROUPS = {"Z": "glibc", "A": "jemalloc", "B": "mimalloc"}
START = 1_767_225_600  # 2026-01-01T00:00:00Z


def _dump(db: Path) -> dict:
    """Every table's rows in rowid order, each value with its SQLite type, and the schema."""
    c = sqlite3.connect(db)
    out = {"schema": sorted(c.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall())}
    for (table,) in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
        cols = [r[1] for r in c.execute(f"PRAGMA table_info({table})")]
        sel = ", ".join(cols + [f"typeof({x})" for x in cols])
        out[table] = c.execute(f"SELECT rowid, {sel} FROM {table} ORDER BY rowid").fetchall()
    c.close()
    return out


def _generate(folder: Path, times: int = 240, extras: bool = True) -> Path:
    """A co-unified memory CSV: 7 relays in 3 allocator groups plus an unlisted one, an aggregate
    row per time, gaps, rows without rss_kb, a relay repeating a time with other figures, and
    (extras) phase, tier, cpu_s, ops with exponents and unix_time columns."""
    folder.mkdir(parents=True)
    (folder / "experiment.json").write_text(
        json.dumps({"groups": {g: {"name": a, "config": {"allocator": a}} for g, a in GROUPS.items()}})
    )
    header = (
        "timestamp,server,type,fingerprint,nickname,group,rss_kb,vmsize_kb,hwm_kb,frag_ratio,count,total_kb,"
        "avg_kb,min_kb,max_kb"
    )
    if extras:
        header += ",phase,tier,cpu_s,ops,unix_time"
    relays = [(f"relay{i}", "ZAB"[i % 3]) for i in range(7)] + [("stray", "")]
    lines = [header]
    for k in range(times):
        t = START + 15 * k
        stamp = f"2026-01-01T{t // 3600 % 24:02d}:{t // 60 % 60:02d}:{t % 60:02d}"
        lines.append(f"{stamp},bench,aggregate,,,,,,,,7,1000,100,10,200" + (",,,,," if extras else ""))
        for i, (nick, group) in enumerate(relays):
            if i == 3 and 50 <= k < 90 or i == 5 and k % 7 == 0:  # gaps
                continue
            rss = "" if i == 4 and k % 11 == 0 else str(200_000 + 37 * k * (i + 1) + (k * 7919 % 1000))
            row = f"{stamp},bench,relay,FP{i},{nick},{group},{rss},{3_000_000 + k},{rss},7.5,,,,,"
            if extras:
                phase = ("warmup", "load", "idle", "")[k * 4 // times]
                tier = ("", "cheap", "full", "imported")[k % 4]
                row += f",{phase},{tier},{k * 0.25 + i},{k}.5e2,{t}.0"
            lines.append(row)
            if i == 2 and k in (30, 31):  # a second process under one nickname
                lines.append(row.replace(f",{rss},", f",{int(rss) + 5},", 1))
    (folder / "memory.csv").write_text("\n".join(lines) + "\n")
    return folder


def _variant(name: str, tmp_path: Path) -> Path:
    base = tmp_path / "gen"
    if name == "clean":
        return _generate(base, extras=False)
    folder = _generate(base)
    p = folder / "memory.csv"
    text = p.read_text()
    if name == "crlf":
        p.write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode())
    elif name == "mixed-line-ends":  # a lone CR ends a line for the csv reader: not for the fast path
        p.write_text(text[:5000] + text[5000:].replace("\n", "\r", 3))
    elif name == "quoted":
        p.write_text(text.replace(",bench,", ',"bench",'))
    elif name == "blanks":
        p.write_text(text.replace(",relay,", ", relay,", 5))
    elif name == "blank-lines-no-final-newline":
        lines = text.splitlines()
        p.write_text("\n".join(lines[:40] + ["", ""] + lines[40:]))
    elif name == "no-group-column":
        lists = folder / "groups"
        lists.mkdir()
        for g, allocator in GROUPS.items():
            (lists / f"group_{g}_{allocator}.txt").write_text(
                "\n".join(f"relay{i}" for i in range(7) if "ZAB"[i % 3] == g) + "\n"
            )
        (lists / "group_Z_glibc_historical.txt").write_text("relay1\n")
        lines = [",".join(f for j, f in enumerate(ln.split(",")) if j != 5) for ln in text.splitlines()]
        p.write_text("\n".join(lines) + "\n")
    return folder


FAST = {"clean", "extras", "blank-lines-no-final-newline", "no-group-column", "crlf"}
VARIANTS = sorted(FAST | {"quoted", "blanks", "mixed-line-ends"})


def _bad(name: str, folder: Path) -> None:
    """Problems late in the generated file, and which of two problems is named first."""
    p = folder / "memory.csv"
    lines = p.read_text().splitlines()

    def cell(line: int, column: str, value: str) -> None:
        """Set `column` of the first relay row with a group at or after `line`."""
        while ",relay," not in lines[line - 1] or ",stray," in lines[line - 1]:
            line += 1
        header = lines[0].split(",")
        fields = lines[line - 1].split(",")
        fields[header.index(column)] = value
        lines[line - 1] = ",".join(fields)

    if name == "late-bad-rss":
        cell(1500, "rss_kb", "12x")
    elif name == "late-negative-cpu":
        cell(1700, "cpu_s", "-0.5")
    elif name == "bad-cell-then-bad-structure":  # structure is checked over the whole file first
        cell(100, "rss_kb", "x")
        lines[1800] += ",extra"
    elif name == "bad-cell-then-nul":
        cell(100, "rss_kb", "x")
        lines[1900] = lines[1900][:20] + "\0" + lines[1900][20:]
    elif name == "repeat-then-bad-cell":
        lines.insert(300, lines[250])
        cell(900, "vmsize_kb", "nan")
    elif name == "bad-cell-then-repeat":
        cell(200, "hwm_kb", "1e99")
        lines.insert(600, lines[550])
    elif name == "group-change-late":
        line = next(i for i in range(1990, len(lines)) if ",relay," in lines[i] and ",A," in lines[i]) + 1
        cell(line, "group", "B")
    elif name == "bad-phase":
        cell(1234, "phase", "lunch")
    elif name == "unix-time-off":
        cell(777, "unix_time", "1767225601.5")
    elif name == "bad-time":
        cell(1111, "timestamp", "2026-01-01T25:00:00")
    elif name == "control-in-nickname":
        cell(1300, "nickname", "re\x1blay")
    elif name == "bad-header-and-bad-structure":
        lines[0] = lines[0].replace("rss_kb", "rss")
        lines[1500] += ","
    p.write_text("\n".join(lines) + "\n")


BAD = [
    "late-bad-rss",
    "late-negative-cpu",
    "bad-cell-then-bad-structure",
    "bad-cell-then-nul",
    "repeat-then-bad-cell",
    "bad-cell-then-repeat",
    "group-change-late",
    "bad-phase",
    "unix-time-off",
    "bad-time",
    "control-in-nickname",
    "bad-header-and-bad-structure",
]


GOLDEN = REPO / "tests" / "data" / "import_golden.json"
BLOCK_ROWS = 1000  # rows per block digest: a mismatch names the first block that differs
HOSTILE = {c[0]: c for c in CASES}
CASE_IDS = (
    [f"dataset:{d}" for d in ("co-guard-2025-09", "co-unified-2025-12", "5way-2026-01")]
    + [f"generated:{v}" for v in VARIANTS]
    + [f"bad:{b}" for b in BAD]
    + [f"hostile:{h}" for h in HOSTILE]
    + ["export", "export-without-processes"]
)


def make_export(tmp: Path) -> Path:
    """An alloclab export of co-guard, with the same bytes on every machine: the export names the
    folder it was imported from, written here relative to the repository."""
    export.export_csv(importer.import_torutils(DATASETS / "co-guard-2025-09", tmp / "run"), tmp / "csv")
    doc = tmp / "csv" / "experiment.json"
    text = doc.read_text()
    assert str(REPO) + "/" in text
    # the golden's inputs were made before the export carried the columns added since (schema 7)
    data = json.loads(text.replace(str(REPO) + "/", ""))
    for part, column in ADDED_SINCE_GOLDEN.items():
        for row in data["alloclab"][part]:
            row.pop(column, None)
    doc.write_text(json.dumps(data, indent=1, allow_nan=False) + "\n")  # as export.export_csv writes it
    return tmp / "csv"


def build_case(case_id: str, tmp: Path, exported: Path) -> Path:
    """The input folder of one golden case, made under the empty folder `tmp`."""
    kind, _, name = case_id.partition(":")
    if kind == "dataset":
        return DATASETS / name
    if kind == "generated":
        return _variant(name, tmp)
    if kind == "bad":
        folder = _variant("extras", tmp)
        _bad(name, folder)
        return folder
    if kind == "hostile":
        _, base, mutate, _fragment = HOSTILE[name]
        folder = _prepare(tmp, base, exported)
        mutate(folder)
        return folder
    if kind == "export":
        return exported
    assert kind == "export-without-processes", case_id
    folder = tmp / "in"
    shutil.copytree(exported, folder)
    doc = json.loads((folder / "experiment.json").read_text())
    for part in ("processes", "verifications"):
        del doc["alloclab"][part]
    (folder / "experiment.json").write_text(json.dumps(doc))
    return folder


def _local(text: str, folder: Path) -> str:
    """Paths of this machine made neutral: the input folder, then the repository."""
    return text.replace(str(folder), "{in}").replace(str(REPO), "{repo}")


def input_digest(folder: Path) -> str:
    """sha256 over the input folder: relative names, kinds, bytes (links by target, fifos by kind)."""
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        h.update(repr(str(p.relative_to(folder))).encode())
        if p.is_symlink():
            h.update(b"link " + _local(os.readlink(p), folder).encode())
        elif p.is_fifo():
            h.update(b"fifo")
        elif p.is_file():
            h.update(b"file " + p.read_bytes())
        else:
            h.update(b"dir")
    return h.hexdigest()


def _row_text(row: tuple, types: tuple, folder: Path) -> str:
    """One row as (SQLite type, value) pairs; floats by Python repr, the same on every machine."""
    return repr(tuple((t, _local(v, folder) if isinstance(v, str) else v) for t, v in zip(types, row))) + "\n"


# Columns the store gained after the golden records were made (schema 7, issue 28: facts about the
# host recorded at run time). The importer before could not write them, so the golden cannot speak
# for them: they are left out of the digest (and of the schema text), with schema_version read as
# the golden's 6. A TorUtils folder has no such facts (NULL, checked); an export carries them
# (test_roundtrip checks they survive).
GOLDEN_SCHEMA = "6"
ADDED_SINCE_GOLDEN = {"groups": "tunables_json", "replicas": "embedded_json"}


def _as_golden_schema(c: sqlite3.Connection) -> str:
    """The sqlite_master query, with the columns added since the golden cut out of the tables' SQL."""
    sql = "sql"
    for column in ADDED_SINCE_GOLDEN.values():
        sql = f"replace({sql}, ', {column} TEXT', '')"
    exported = c.execute("SELECT COUNT(*) FROM meta WHERE key = 'original_source'").fetchone()[0]
    for table, column in ADDED_SINCE_GOLDEN.items():
        present = column in {r[1] for r in c.execute(f"PRAGMA table_info({table})")}  # not in the golden's own store
        if present and not exported:
            assert c.execute(f"SELECT COUNT(*) FROM {table} WHERE {column} IS NOT NULL").fetchone()[0] == 0, (
                table,
                column,
            )
    return (
        f"SELECT type, name, tbl_name, {sql}, typeof(type), typeof(name), typeof(tbl_name), typeof(sql) "
        "FROM sqlite_master ORDER BY type, name"
    )


def store_digest(db: Path, folder: Path) -> dict[str, dict]:
    """Per table (and the schema as "sqlite_master"): row count, sha256 over the rows in rowid order
    with types, and a short digest per BLOCK_ROWS rows."""
    c = sqlite3.connect(db)
    selects = {"sqlite_master": _as_golden_schema(c)}
    for (table,) in c.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").fetchall():
        cols = ["rowid"] + [
            r[1] for r in c.execute(f"PRAGMA table_info({table})") if r[1] != ADDED_SINCE_GOLDEN.get(table)
        ]
        values = (
            cols
            if table != "meta"
            else [
                f"CASE WHEN key = 'schema_version' THEN '{GOLDEN_SCHEMA}' ELSE value END" if x == "value" else x
                for x in cols
            ]
        )
        selects[table] = f"SELECT {', '.join(values + [f'typeof({x})' for x in cols])} FROM {table} ORDER BY rowid"
    out = {}
    for table, sql in selects.items():
        whole, block, blocks, n = hashlib.sha256(), hashlib.sha256(), [], 0
        for row in c.execute(sql):
            half = len(row) // 2
            text = _row_text(row[:half], row[half:], folder).encode()
            whole.update(text)
            block.update(text)
            n += 1
            if n % BLOCK_ROWS == 0:
                blocks.append(block.hexdigest()[:16])
                block = hashlib.sha256()
        if n % BLOCK_ROWS:
            blocks.append(block.hexdigest()[:16])
        out[table] = {"rows": n, "sha256": whole.hexdigest(), "blocks": blocks}
    c.close()
    return out


def outcome(run, folder: Path, out: Path) -> dict:
    """What an importer makes of `folder`: the store's digest, or its one-line message."""
    try:
        run(folder, out)
    except UserError as exc:
        assert not out.exists(), f"{out} left behind"
        return {"error": _local(str(exc), folder)}
    return {"error": None, "tables": store_digest(out / "run.db", folder)}


def _differences(got: dict, want: dict, db: Path, folder: Path) -> str:
    """Which table differs, its counts, and (from the store at `db`) the first row of the first
    block that differs."""
    if got.get("error") != want.get("error") or want.get("error") is not None:
        return f"message {got.get('error')!r}, golden {want.get('error')!r}"
    out = []
    for table in sorted(set(got["tables"]) | set(want["tables"])):
        g, w = got["tables"].get(table), want["tables"].get(table)
        if g == w:
            continue
        if g is None or w is None:
            out.append(f"table {table} {'missing' if g is None else 'not in the golden record'}")
            continue
        line = f"table {table}: {g['rows']} rows, golden {w['rows']}"
        block = next((i for i, (a, b) in enumerate(zip(g["blocks"], w["blocks"])) if a != b), None)
        if block is not None and table != "sqlite_master":
            c = sqlite3.connect(db)
            row = c.execute(
                f"SELECT rowid, * FROM {table} ORDER BY rowid LIMIT 1 OFFSET ?", (block * BLOCK_ROWS,)
            ).fetchone()
            c.close()
            line += (
                f"; rows {block * BLOCK_ROWS + 1}-{(block + 1) * BLOCK_ROWS} differ, the first of them here is {row!r}"
            )
        out.append(line)
    return "; ".join(out)


_golden_cache: dict = {}


def golden(case_id: str) -> dict:
    if not _golden_cache:
        _golden_cache.update(json.loads(GOLDEN.read_text())["cases"])
    assert case_id in _golden_cache, f"{case_id} is not in {GOLDEN.name}: run tests/data/make_import_golden.py"
    return _golden_cache[case_id]


def _check(
    case_id: str,
    tmp_path: Path,
    monkeypatch,
    exported: Path,
    fast_expected: bool | None = None,
    golden_id: str | None = None,
) -> Path:
    """The new importer, with and without its fast path, against the golden record; returns the store."""
    want = golden(golden_id or case_id)
    folder = build_case(case_id, tmp_path / "case", exported)
    assert input_digest(folder) == want["input"], f"{case_id}: the input is not the one the golden record was made from"
    calls = []
    original = importer._read_relay_rows
    monkeypatch.setattr(importer, "_read_relay_rows", lambda *a, **k: calls.append(1) or original(*a, **k))
    for name, run in (
        ("new", importer.import_torutils),
        ("rows", lambda f, o: importer.import_torutils(f, o, fast=False)),
    ):
        got = outcome(run, folder, tmp_path / name)
        if name == "new" and fast_expected is not None:
            assert (not calls) == fast_expected, "fast path taken" if calls == [] else "row-by-row reader taken"
        assert got == {k: v for k, v in want.items() if k not in ("input", "note")}, (
            f"{case_id} ({name}): " + _differences(got, want, tmp_path / name / "run.db", folder)
        )
    return tmp_path / "new" / "run.db"


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    return make_export(tmp_path_factory.mktemp("exported"))


@pytest.mark.parametrize("dataset", ["co-guard-2025-09", "co-unified-2025-12", "5way-2026-01"])
def test_the_1aeo_datasets_land_the_same_rows(dataset, tmp_path, monkeypatch, exported):
    _check(f"dataset:{dataset}", tmp_path, monkeypatch, exported, fast_expected=True)
    assert golden(f"dataset:{dataset}")["tables"]["samples"]["rows"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_generated_files_land_the_same_rows(variant, tmp_path, monkeypatch, exported):
    db = _check(f"generated:{variant}", tmp_path, monkeypatch, exported, fast_expected=variant in FAST)
    new = _dump(db)
    assert len(new["samples"]) > 1000
    meta = dict((r[1], r[2]) for r in new["meta"])
    assert json.loads(meta["duplicate_timestamps"]) == {"relay2": 2}
    if variant != "no-group-column":
        assert json.loads(meta["unlisted_relays"]) == ["stray"]


def test_blocks_cut_anywhere_land_the_same_rows(tmp_path, monkeypatch, exported):
    """Blocks of 1,000 bytes cut rows in the middle: the carried-over part must join the next block."""
    monkeypatch.setattr(fastcsv, "BLOCK_BYTES", 1000)
    _check("generated:extras", tmp_path, monkeypatch, exported, fast_expected=True)


def test_progress_lines(tmp_path, monkeypatch):
    monkeypatch.setattr(fastcsv, "BLOCK_BYTES", 4096)
    monkeypatch.setattr(fastcsv, "PROGRESS_ROWS", 500)
    monkeypatch.setattr(importer, "PROGRESS_ROWS", 500)
    lines: list[str] = []
    importer.import_torutils(_variant("extras", tmp_path), tmp_path / "run", progress=lines.append)
    read = [ln for ln in lines if ln.startswith("read ")]
    wrote = [ln for ln in lines if ln.startswith("wrote ")]
    assert len(read) >= 3 and "of memory.csv (" in read[0] and len(wrote) >= 2, lines
    assert wrote[-1].endswith(f" of {len(_dump(tmp_path / 'run' / 'run.db')['samples']):,} samples"), wrote


@pytest.mark.parametrize("name", BAD)
def test_generated_problems_are_named_as_before(name, tmp_path, monkeypatch, exported):
    _check(f"bad:{name}", tmp_path, monkeypatch, exported)
    assert golden(f"bad:{name}")["error"]


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_cases_are_named_as_before(case, tmp_path, monkeypatch, exported):
    _check(f"hostile:{case}", tmp_path, monkeypatch, exported)
    assert golden(f"hostile:{case}")["error"]


def test_an_export_imports_to_the_same_rows(tmp_path, monkeypatch, exported):
    _check("export", tmp_path, monkeypatch, exported, fast_expected=True)


def test_an_export_section_without_processes_imports(tmp_path, monkeypatch, exported):
    """A part of the "alloclab" section left out is an empty list (the importer before crashed with a
    KeyError: the golden record holds the new, intended store)."""
    db = _check("export-without-processes", tmp_path, monkeypatch, exported)
    assert len(_dump(db)["samples"]) == 72
