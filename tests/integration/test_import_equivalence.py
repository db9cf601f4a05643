"""The streaming importer (issue 16 item 5) lands the same rows and names the same first problem as
the importer before it (tests/integration/torutils_before.py, a frozen copy): every table of the
run store compared row by row with each value's SQLite type, on the real 1AEO datasets and on
generated files with duplicates, gaps, unlisted relays, mixed allocators, extra columns and bad
cells; both through the columnar fast path and the row-by-row reader (fast=False)."""
from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from alloclab import torutils, torutils_fast
from alloclab.errors import UserError
from tests.conftest import DATASETS
from tests.integration import torutils_before
from tests.integration.test_hostile_csv import CASES, _prepare

GROUPS = {"Z": "glibc", "A": "jemalloc", "B": "mimalloc"}
START = 1_767_225_600                   # 2026-01-01T00:00:00Z


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
    (folder / "experiment.json").write_text(json.dumps(
        {"groups": {g: {"name": a, "config": {"allocator": a}} for g, a in GROUPS.items()}}))
    header = "timestamp,server,type,fingerprint,nickname,group,rss_kb,vmsize_kb,hwm_kb,frag_ratio,count,total_kb," \
             "avg_kb,min_kb,max_kb"
    if extras:
        header += ",phase,tier,cpu_s,ops,unix_time"
    relays = [(f"relay{i}", "ZAB"[i % 3]) for i in range(7)] + [("stray", "")]
    lines = [header]
    for k in range(times):
        t = START + 15 * k
        stamp = f"2026-01-01T{t // 3600 % 24:02d}:{t // 60 % 60:02d}:{t % 60:02d}"
        lines.append(f"{stamp},bench,aggregate,,,,,,,,7,1000,100,10,200" + (",,,,," if extras else ""))
        for i, (nick, group) in enumerate(relays):
            if i == 3 and 50 <= k < 90 or i == 5 and k % 7 == 0:          # gaps
                continue
            rss = "" if i == 4 and k % 11 == 0 else str(200_000 + 37 * k * (i + 1) + (k * 7919 % 1000))
            row = f"{stamp},bench,relay,FP{i},{nick},{group},{rss},{3_000_000 + k},{rss},7.5,,,,,"
            if extras:
                phase = ("warmup", "load", "idle", "")[k * 4 // times]
                tier = ("", "cheap", "full", "imported")[k % 4]
                row += f",{phase},{tier},{k * 0.25 + i},{k}.5e2,{t}.0"
            lines.append(row)
            if i == 2 and k in (30, 31):               # a second process under one nickname
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
    elif name == "mixed-line-ends":             # a lone CR ends a line for the csv reader: not for the fast path
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
                "\n".join(f"relay{i}" for i in range(7) if "ZAB"[i % 3] == g) + "\n")
        (lists / "group_Z_glibc_historical.txt").write_text("relay1\n")
        lines = [",".join(f for j, f in enumerate(ln.split(",")) if j != 5) for ln in text.splitlines()]
        p.write_text("\n".join(lines) + "\n")
    return folder


FAST = {"clean", "extras", "blank-lines-no-final-newline", "no-group-column", "crlf"}
VARIANTS = sorted(FAST | {"quoted", "blanks", "mixed-line-ends"})


def _three(folder: Path, tmp_path: Path, monkeypatch, fast_expected: bool | None = None) -> list[dict]:
    """Stores of the old importer, the new one and the new one without its fast path."""
    torutils_before.import_torutils(folder, tmp_path / "old")
    calls = []
    original = torutils._read_relay_rows
    monkeypatch.setattr(torutils, "_read_relay_rows", lambda *a, **k: calls.append(1) or original(*a, **k))
    torutils.import_torutils(folder, tmp_path / "new")
    if fast_expected is not None:
        assert (not calls) == fast_expected, "fast path taken" if calls == [] else "row-by-row reader taken"
    torutils.import_torutils(folder, tmp_path / "rows", fast=False)
    return [_dump(tmp_path / d / "run.db") for d in ("old", "new", "rows")]


@pytest.mark.parametrize("dataset", ["co-guard-2025-09", "co-unified-2025-12", "5way-2026-01"])
def test_the_1aeo_datasets_land_the_same_rows(dataset, tmp_path, monkeypatch):
    old, new, rows = _three(DATASETS / dataset, tmp_path, monkeypatch, fast_expected=True)
    assert old["samples"] and new == old and rows == old


@pytest.mark.parametrize("variant", VARIANTS)
def test_generated_files_land_the_same_rows(variant, tmp_path, monkeypatch):
    folder = _variant(variant, tmp_path)
    old, new, rows = _three(folder, tmp_path, monkeypatch, fast_expected=variant in FAST)
    assert len(old["samples"]) > 1000 and new == old and rows == old
    meta = dict((r[1], r[2]) for r in old["meta"])
    assert json.loads(meta["duplicate_timestamps"]) == {"relay2": 2}
    if variant != "no-group-column":
        assert json.loads(meta["unlisted_relays"]) == ["stray"]


def test_blocks_cut_anywhere_land_the_same_rows(tmp_path, monkeypatch):
    """Blocks of 1,000 bytes cut rows in the middle: the carried-over part must join the next block."""
    monkeypatch.setattr(torutils_fast, "BLOCK_BYTES", 1000)
    folder = _variant("extras", tmp_path)
    old, new, rows = _three(folder, tmp_path, monkeypatch, fast_expected=True)
    assert new == old and rows == old


def test_progress_lines(tmp_path, monkeypatch):
    monkeypatch.setattr(torutils_fast, "BLOCK_BYTES", 4096)
    monkeypatch.setattr(torutils_fast, "PROGRESS_ROWS", 500)
    monkeypatch.setattr(torutils, "PROGRESS_ROWS", 500)
    lines: list[str] = []
    torutils.import_torutils(_variant("extras", tmp_path), tmp_path / "run", progress=lines.append)
    read = [ln for ln in lines if ln.startswith("read ")]
    wrote = [ln for ln in lines if ln.startswith("wrote ")]
    assert len(read) >= 3 and "of memory.csv (" in read[0] and len(wrote) >= 2, lines
    assert wrote[-1].endswith(f" of {len(_dump(tmp_path / 'run' / 'run.db')['samples']):,} samples"), wrote


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
    elif name == "bad-cell-then-bad-structure":     # structure is checked over the whole file first
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


BAD = ["late-bad-rss", "late-negative-cpu", "bad-cell-then-bad-structure", "bad-cell-then-nul", "repeat-then-bad-cell",
       "bad-cell-then-repeat", "group-change-late", "bad-phase", "unix-time-off", "bad-time", "control-in-nickname",
       "bad-header-and-bad-structure"]


def _errors(folder: Path, tmp_path: Path) -> list[str]:
    out = []
    for name, run in (("old", torutils_before.import_torutils), ("new", torutils.import_torutils),
                      ("rows", lambda f, o: torutils.import_torutils(f, o, fast=False))):
        with pytest.raises(UserError) as err:
            run(folder, tmp_path / "out" / name)
        out.append(str(err.value))
    assert not (tmp_path / "out").exists()
    return out


@pytest.mark.parametrize("name", BAD)
def test_generated_problems_are_named_as_before(name, tmp_path):
    folder = _variant("extras", tmp_path)
    _bad(name, folder)
    old, new, rows = _errors(folder, tmp_path)
    assert new == old and rows == old, (old, new)


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("exported")
    torutils.export_csv(torutils.import_torutils(DATASETS / "co-guard-2025-09", tmp / "run"), tmp / "csv")
    return tmp / "csv"


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_hostile_cases_are_named_as_before(case, tmp_path, exported):
    _, base, mutate, _fragment = case
    folder = _prepare(tmp_path, base, exported)
    mutate(folder)
    old, new, rows = _errors(folder, tmp_path)
    assert new == old and rows == old, (old, new)


def test_an_export_imports_to_the_same_rows(tmp_path, monkeypatch, exported):
    old, new, rows = _three(exported, tmp_path, monkeypatch, fast_expected=True)
    assert new == old and rows == old


def test_an_export_section_without_processes_imports(tmp_path, exported):
    """A part of the "alloclab" section left out is an empty list (the importer before crashed)."""
    folder = tmp_path / "in"
    shutil.copytree(exported, folder)
    doc = json.loads((folder / "experiment.json").read_text())
    for part in ("processes", "verifications"):
        del doc["alloclab"][part]
    (folder / "experiment.json").write_text(json.dumps(doc))
    torutils.import_torutils(folder, tmp_path / "run")
    assert len(_dump(tmp_path / "run" / "run.db")["samples"]) == 72
