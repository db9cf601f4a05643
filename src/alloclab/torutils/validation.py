"""Checks of TorUtils files that may be hostile: sizes, text, headers, numbers, times, names and
an export's `alloclab` section; every problem is one UserError naming the file, line and
column, and what to do about it."""

from __future__ import annotations

import codecs
import csv
import io
import json
import math
import re
import stat
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path

from ..common.errors import UserError
from .layout import _GROUP_FIELDS, _PROCESS_FIELDS, _REPLICA_FIELDS, EXPORT_FORMAT, EXPORTED_META, PHASES

# ---- import: reading files that may be hostile ---------------------------------------------------
# Every file is read and checked completely before the output directory is created; every problem
# is one UserError naming the file, line and column, and what to do about it.

MAX_FILE_BYTES = 1 << 30  # 1 GiB per file: a TorUtils CSV of years of hourly rows is a few MB
MAX_NAME_CHARS = 128  # relay nicknames (tor: 19), replica and group names
MAX_TEXT_CHARS = 4096  # event descriptions, verification details
EARLIEST, LATEST = 631152000.0, 7258118400.0  # 1990-01-01 .. 2200-01-01 UTC
# column -> (kind, upper bound); kind "int" or "float"; every figure must be finite and >= 0
LIMITS: dict[str, tuple[str, float]] = {
    **{
        c: ("int", 1 << 36)
        for c in (
            "rss_kb",
            "hwm_kb",
            "pss_kb",
            "uss_kb",
            "anon_kb",
            "swap_kb",
            "lazyfree_kb",
            "cgroup_kb",
            "cgroup_peak_kb",
        )
    },  # 64 TiB
    "vmsize_kb": ("int", 1 << 40),
    "live_bytes": ("int", 1 << 50),
    "ops": ("int", 1 << 62),
    "cpu_s": ("float", 1e10),
    "nprocs": ("int", 1 << 22),
    **{c: ("int", 1 << 40) for c in ("mem_total_kb", "mem_available_kb", "swap_total_kb", "swap_free_kb")},
    "load1": ("float", 1e6),
    "sampler_cpu_s": ("float", 1e10),
    "unix_time": ("float", LATEST),
}
_NUMBER = re.compile(r"^[0-9]+(\.[0-9]*)?([eE][+-]?[0-9]{1,3})?$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _show(value: str) -> str:
    """A value as it can be shown on one line."""
    return repr(value[:40] + ("…" if len(value) > 40 else ""))


def _where(path: Path, line: int | None = None, column: str | None = None) -> str:
    out = path.name if path.parent.name != "groups" else f"groups/{path.name}"
    if line is not None:
        out += f" line {line}"
    if column is not None:
        out += f", column {column}"
    return out


def _check_file(path: Path, fix: str) -> None:
    """A regular file alloclab will read (not a directory, not larger than MAX_FILE_BYTES)."""
    try:
        st = path.stat()
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}", fix) from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise UserError(f"{path} is {kind}", f"replace it with the {path.name} file itself")
    if st.st_size > MAX_FILE_BYTES:
        raise UserError(
            f"{path} is {st.st_size >> 20} MiB, more than alloclab reads ({MAX_FILE_BYTES >> 20} MiB)",
            "split the experiment into several imports",
        )


def _read_text(path: Path, fix: str) -> str:
    """A whole small text file: a regular file, UTF-8 (a BOM is allowed), no NUL bytes."""
    _check_file(path, fix)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}", fix) from None
    nul = raw.find(b"\0")
    if nul >= 0:
        line = raw.count(b"\n", 0, nul) + 1
        raise UserError(
            f"{_where(path, line)}: holds a NUL byte (a binary or damaged file)",
            f"remove the NUL bytes or restore {path.name}",
        )
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise UserError(
            f"{_where(path, line)}: byte {raw[exc.start]:#04x} is not UTF-8", f"re-save {path.name} as UTF-8"
        ) from None


def _csv_rows(path: Path, required: set[str], fix: str) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """Header and (line number, row) of a CSV file; every row has as many fields as the header."""
    text = _read_text(path, fix)
    if not text.strip():
        raise UserError(f"{path} is empty", fix)
    rows: list[tuple[int, dict[str, str]]] = []
    header = _parse_csv(path, io.StringIO(text, newline=""), rows.append)
    _check_header(path, header, required, fix)
    return header, rows


def _parse_csv(path: Path, lines: Iterable[str], row: Callable[[tuple[int, dict[str, str]]], None]) -> list[str]:
    """The header of CSV text; each row, as (line number, row), goes to `row`. A row without the
    header's number of fields, or text that is not CSV, is a UserError."""
    reader = csv.reader(lines)
    try:
        header = [h.strip() for h in next(reader)]
        end = reader.line_num
        for fields in reader:
            start, end = end + 1, reader.line_num
            if not fields or fields == [""] * len(fields) and len(fields) <= 1:
                continue  # blank line
            if len(fields) != len(header):
                lines_ = f"lines {start}–{end} (a quote left open?)" if end > start else f"line {end}"
                raise UserError(
                    f"{_where(path)} {lines_}: {len(fields)} fields, the header has {len(header)}",
                    "fix the row's commas and quotes, or delete it",
                )
            row((start, dict(zip(header, fields))))
    except csv.Error as exc:
        raise UserError(
            f"{_where(path, reader.line_num)}: not valid CSV ({exc})", "fix the row's quotes, or delete it"
        ) from None
    return header


def _header_problem(path: Path, header: list[str], required: set[str], fix: str) -> UserError | None:
    bad = next((h for h in header if not h or _CONTROL.search(h)), None)
    if bad is not None:
        return UserError(f"{_where(path, 1)}: header has an empty or unprintable column name {_show(bad)}", fix)
    dupes = sorted({h for h in header if header.count(h) > 1})
    if dupes:
        return UserError(f"{_where(path, 1)}: header names column {dupes[0]} twice", "keep one of them")
    missing = required - set(header)
    if missing:
        return UserError(f"{path.name} lacks column{'s' if len(missing) > 1 else ''} {', '.join(sorted(missing))}", fix)
    return None


def _check_header(path: Path, header: list[str], required: set[str], fix: str) -> None:
    problem = _header_problem(path, header, required, fix)
    if problem is not None:
        raise problem


# ---- the memory CSV, streamed: at ten million rows it is never held whole -------------------------


def _check_memory_text(path: Path, fix: str) -> None:
    """What _read_text checks (a regular UTF-8 file without NUL bytes, not blank), block by block;
    on a problem _read_text itself reads the file to name it with its line."""
    _check_file(path, fix)
    decoder = codecs.getincrementaldecoder("utf-8-sig")()
    blank = True
    try:
        with open(path, "rb") as f:
            while block := f.read(16 << 20):
                if b"\0" in block:
                    _read_text(path, fix)
                blank = blank and not decoder.decode(block).strip()
            blank = blank and not decoder.decode(b"", final=True).strip()
    except UnicodeDecodeError:
        _read_text(path, fix)
        raise
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}", fix) from None
    if blank:
        raise UserError(f"{path} is empty", fix)


def _memory_structure(path: Path, required: set[str], fix: str) -> list[str]:
    """The memory CSV's header, once the whole file is known to be sound CSV with a sound header:
    the checks (and messages) of _csv_rows, in its order, without keeping any row."""
    _check_memory_text(path, fix)
    with open(path, encoding="utf-8-sig", newline="") as f:
        header = _parse_csv(path, f, lambda row: None)
    _check_header(path, header, required, fix)
    return header


def _number(text: str, path: Path, line: int, column: str) -> int | float | None:
    """A figure of column `column` (see LIMITS): empty -> None; anything else must be a plain number."""
    text = text.strip()
    if not text:
        return None
    kind, limit = LIMITS[column]
    if not _NUMBER.match(text):  # the place is named only on error: this runs per cell
        if text.startswith("-") and _NUMBER.match(text[1:]):
            raise UserError(
                f"{_where(path, line, column)}: {_show(text)} is negative",
                "memory, counts and times are >= 0: correct or delete the row",
            )
        raise UserError(
            f"{_where(path, line, column)}: {_show(text)} is not a number",
            "write a plain decimal number, or leave it empty",
        )
    value = float(text)
    if not math.isfinite(value) or value > limit:
        raise UserError(
            f"{_where(path, line, column)}: {_show(text)} is larger than {limit:.4g}, no real {column}",
            "correct or delete the row",
        )
    return int(round(value)) if kind == "int" else value


_TIMES: dict[tuple[str, timezone], float] = {}  # a fleet's rows share their timestamps: parse each once


def _timestamp(text: str, path: Path, line: int, column: str, naive_tz: timezone) -> float:
    known = _TIMES.get((text, naive_tz))
    if known is not None:
        return known
    where = _where(path, line, column)
    try:
        d = datetime.fromisoformat(text.strip())
        if d.tzinfo is None:
            d = d.replace(tzinfo=naive_tz)
        t = d.timestamp()
    except (ValueError, OverflowError):
        raise UserError(f"{where}: {_show(text)} is not an ISO 8601 time", "write e.g. 2025-12-26T08:39:37") from None
    if not EARLIEST <= t < LATEST:
        raise UserError(f"{where}: {_show(text)} is outside 1990–2200", "correct the date") from None
    if len(_TIMES) > 1_000_000:
        _TIMES.clear()
    _TIMES[(text, naive_tz)] = t
    return t


def _row_time(row: dict[str, str], path: Path, line: int, naive_tz: timezone) -> float:
    """The row's time: `timestamp`, or the exact `unix_time` an export adds beside it."""
    t = _timestamp(row["timestamp"], path, line, "timestamp", naive_tz)
    exact = _number(row.get("unix_time", ""), path, line, "unix_time")
    if exact is None:
        return t
    if abs(exact - t) > 1e-3:
        raise UserError(
            f"{_where(path, line, 'unix_time')}: {exact} is not the time of the timestamp column",
            "correct one of the two, or leave unix_time empty",
        )
    return exact


def _name(text: str, path: Path, line: int, column: str, limit: int = MAX_NAME_CHARS) -> str:
    text = text.strip()
    if _CONTROL.search(text) or len(text) > limit:
        raise UserError(
            f"{_where(path, line, column)}: {_show(text)} has control characters or is over {limit} characters",
            "correct it",
        )
    return text


def _check_group_list_files(folder: Path) -> None:
    """Every groups/group_*.txt is a readable UTF-8 text file of one printable name per line."""
    if not folder.exists():
        return
    if not folder.is_dir():
        raise UserError(f"{folder} is not a directory", "groups/ holds group_<L>_<allocator>.txt lists")
    for f in sorted(folder.glob("group_*.txt")):
        text = _read_text(f, "one relay nickname per line")
        for i, ln in enumerate(text.splitlines(), 1):
            if not ln.strip().startswith("#"):
                _name(ln, f, i, "nickname")


_SECTION_FIELDS = {
    "groups": set(_GROUP_FIELDS),
    "replicas": {"group", *_REPLICA_FIELDS},
    "processes": {"replica", *_PROCESS_FIELDS},
    "verifications": {"t", "pid", "start_ticks", "verified", "detail", "mapped_allocator"},
}
# field -> accepted JSON types (None: null allowed)
_FIELD_TYPES: dict[str, tuple] = {
    "name": (str,),
    "allocator": (str,),
    "kind": (str, None),
    "library_path": (str, None),
    "library_sha256": (str, None),
    "family": (str, None),
    "version": (str, None),
    "env_json": (str, None),
    "command_json": (str, None),
    "is_baseline": (int, None),
    "provenance_json": (str, None),
    "hardening_json": (str, None),
    "tunables_json": (str, None),
    "embedded_json": (str, None),
    "host": (str, None),
    "group": (str,),
    "replica": (str,),
    "idx": (int, None),
    "start_order": (int, None),
    "started_at": (float, None),
    "ended_at": (float, None),
    "exit_code": (int, None),
    "end_kind": (str, None),
    "verified": (int, None),
    "verify_detail": (str, None),
    "pid": (int,),
    "start_ticks": (int, None),
    "ppid": (int, None),
    "comm": (str, None),
    "cmdline": (str, None),
    "first_seen": (float, None),
    "last_seen": (float, None),
    "mapped_allocator": (str, None),
    "t": (float,),
    "detail": (str, None),
}


def _json_value_ok(v: object, types: tuple) -> bool:
    if v is None:
        return None in types
    if isinstance(v, bool):
        return False
    if isinstance(v, str):
        return str in types and len(v) <= 1 << 20 and "\0" not in v
    if isinstance(v, int):
        return (int in types or float in types) and abs(v) < 1 << 62
    if isinstance(v, float):
        return float in types and math.isfinite(v) and abs(v) < 1e13
    return False


def _check_section(section: object) -> dict:
    """The "alloclab" section of an exported experiment.json, every field of the type the store holds."""
    fix = 're-export the run with `alloclab export`, or delete the "alloclab" section'
    if not isinstance(section, dict) or section.get("format") != EXPORT_FORMAT:
        raise UserError(f'experiment.json: the "alloclab" section is not export format {EXPORT_FORMAT}', fix)
    meta = section.get("meta", {})
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise UserError("experiment.json: alloclab.meta is not an object of text values", fix)
    unknown = sorted(set(meta) - set(EXPORTED_META))
    if unknown:
        raise UserError(f"experiment.json: alloclab.meta has an unknown key {_show(unknown[0])}", fix)
    for part, fields in (
        ("groups", ("name", "allocator")),
        ("replicas", ("name", "group")),
        ("processes", ("replica", "pid")),
        ("verifications", ("pid", "t")),
    ):
        allowed = _SECTION_FIELDS[part]
        items = section.get(part, [])
        if not isinstance(items, list):
            raise UserError(f"experiment.json: alloclab.{part} is not a list", fix)
        for i, item in enumerate(items):
            if not isinstance(item, dict) or any(f not in item for f in fields):
                raise UserError(f"experiment.json: alloclab.{part}[{i}] lacks {' or '.join(fields)}", fix)
            for k, v in item.items():
                if k not in allowed:
                    raise UserError(f"experiment.json: alloclab.{part}[{i}] has an unknown field {_show(str(k))}", fix)
                if not _json_value_ok(v, _FIELD_TYPES[k]) or k in ("verified", "is_baseline") and v not in (0, 1, None):
                    raise UserError(
                        f"experiment.json: alloclab.{part}[{i}].{k} = {_show(str(v))} is not a valid value", fix
                    )
    names = [g["name"] for g in section.get("groups", [])]
    replicas = [r["name"] for r in section.get("replicas", [])]
    for what, seq in (("group", names), ("replica", replicas)):
        for n in seq:
            if not n.strip() or _CONTROL.search(n) or len(n) > MAX_NAME_CHARS or seq.count(n) > 1:
                raise UserError(
                    f"experiment.json: alloclab {what} name {_show(n)} is empty, unprintable, too long or given twice",
                    fix,
                )
    for r in section.get("replicas", []):
        if r["group"] not in names:
            raise UserError(
                f"experiment.json: replica {_show(r['name'])} is in group {_show(r['group'])}, which "
                "alloclab.groups does not list",
                fix,
            )
    for p in section.get("processes", []):
        if p["replica"] not in replicas:
            raise UserError(f"experiment.json: a process of unknown replica {_show(p['replica'])}", fix)
    keys = {(p["pid"], p.get("start_ticks")) for p in section.get("processes", [])}
    if len(keys) != len(section.get("processes", [])):
        raise UserError("experiment.json: alloclab.processes lists one (pid, start_ticks) twice", fix)
    for v in section.get("verifications", []):
        if (v["pid"], v.get("start_ticks")) not in keys:
            raise UserError(f"experiment.json: a verification of unknown process {v['pid']}", fix)
    _check_meta(meta, fix)
    for part in ("groups", "replicas", "processes", "verifications"):  # a part left out is an empty one
        section.setdefault(part, [])
    section.setdefault("meta", {})
    return section


def _check_meta(meta: dict[str, str], fix: str) -> None:
    """The meta values analysis parses."""
    where = "experiment.json: alloclab.meta."
    try:
        interval = float(meta.get("interval", "1"))
        seed = int(meta.get("seed", "0"))
        phases = json.loads(meta.get("phases", "{}"))
        several = json.loads(meta.get("replicas_in_several_groups", "[]"))
        ncpu = int(meta.get("ncpu", "0") or 0)
    except (ValueError, RecursionError):
        raise UserError(
            f"{where}interval, seed, ncpu, phases or replicas_in_several_groups cannot be read", fix
        ) from None
    if not (math.isfinite(interval) and 0 < interval <= 86400) or not 0 <= seed < 1 << 63 or not 0 <= ncpu < 1 << 20:
        raise UserError(f"{where}interval, seed or ncpu is out of range", fix)
    if not isinstance(phases, dict) or not all(
        k in PHASES
        and (v is None or isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0)
        for k, v in phases.items()
    ):
        raise UserError(f"{where}phases is not an object of phase -> seconds", fix)
    if not isinstance(several, list) or not all(isinstance(x, str) for x in several):
        raise UserError(f"{where}replicas_in_several_groups is not a list of names", fix)
    if "metric" in meta and meta["metric"] not in ("rss", "pss", "uss", "anon", "footprint"):
        raise UserError(f"{where}metric {_show(meta['metric'])} is not known", fix)


MEMORY_FIX = "is it a TorUtils memory CSV? It needs the columns timestamp, type, nickname and rss_kb"
MEMORY_REQUIRED = {"timestamp", "type", "nickname", "rss_kb"}
