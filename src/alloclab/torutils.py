"""Import and export in the layout of the 1AEO TorUtils memory experiments.

Export writes memory.csv (co-unified layout: a `group` column after `nickname`, one `relay` row
per replica sample and one `aggregate` row per sampling time, then the columns alloclab measures
beyond it), events.csv, diagnostics.csv and experiment.json (TorUtils' group labels, plus an
`alloclab` section with what the analysis reads: metadata, groups, replicas and their
verification). Import reads that layout, including the 5-way variant whose groups live in
groups/group_<L>_<allocator>[_historical].txt lists, into a run store, so analysis and reports
work on operators' existing data and an export imports back to the same analysis. Import reads
and checks every file before it creates anything (docs/store.md lists the rules).
"""
from __future__ import annotations

import codecs
import csv
import io
import itertools
import json
import math
import re
import shutil
import stat
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np

from . import outputs, torutils_fast
from .errors import UserError
from .store import DB_NAME, Store, StoreError
from .timefmt import utc_iso

MEMORY_COLUMNS = ["timestamp", "server", "type", "fingerprint", "nickname", "group", "rss_kb", "vmsize_kb", "hwm_kb",
                  "frag_ratio", "count", "total_kb", "avg_kb", "min_kb", "max_kb"]
# alloclab's own figures, after the TorUtils columns (docs/store.md); empty where not measured
# (unix_time: the exact time in seconds, which `timestamp` gives to the microsecond)
EXTRA_COLUMNS = ["pss_kb", "uss_kb", "anon_kb", "swap_kb", "lazyfree_kb", "cgroup_kb", "cgroup_peak_kb", "live_bytes",
                 "ops", "cpu_s", "nprocs", "phase", "tier", "unix_time"]
EVENT_COLUMNS = ["timestamp", "event_type", "description", "group"]
EVENT_EXTRA_COLUMNS = ["replica", "unix_time"]
DIAG_COLUMNS = ["date", "time", "hostname", "tor_version", "os_release", "kernel", "allocator", "mem_total_mb",
                "mem_free_mb", "mem_available_mb", "mem_cached_mb", "swap_total_mb", "swap_free_mb", "tcp_established",
                "tcp_total", "fd_limit", "relay_count", "relay_total_mb", "relay_avg_mb"]
DIAG_EXTRA_COLUMNS = ["unix_time", "mem_total_kb", "mem_available_kb", "swap_total_kb", "swap_free_kb", "load1",
                      "sampler_cpu_s"]
MEMORY_FILES = ("memory_measurements.csv", "memory.csv", "measurements.csv")
_GROUP_FILE = re.compile(r"^group_([A-Za-z0-9]+)_([A-Za-z]+)(\d*)(_historical)?\.txt$")


# ---- export -------------------------------------------------------------------------------------

def _cell(v: object) -> object:
    return "" if v is None else v


def export_csv(run: str | Path, out_dir: Path) -> list[Path]:
    store = Store.open_checked(run)
    meta = store.meta()
    host = meta.get("host", "")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create {out_dir}: {exc.strerror}", "choose a writable directory") from None
    rows = store.samples_by_time()
    memory = out_dir / "memory.csv"
    with open(memory, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(MEMORY_COLUMNS + EXTRA_COLUMNS)
        by_time: dict[float, list] = {}
        for r in rows:
            by_time.setdefault(r["t"], []).append(r)
        totals: dict[float, tuple[int, int | None]] = {}     # time -> (replica samples, summed RSS): diagnostics
        for t, batch in by_time.items():
            rss = [r["rss_kb"] for r in batch if r["rss_kb"] is not None]
            totals[t] = (len(batch), sum(rss) if rss else None)
            if rss:
                w.writerow([utc_iso(t), host, "aggregate", "", "", "", "", "", "", "", len(rss), sum(rss),
                            sum(rss) // len(rss), min(rss), max(rss)] + [""] * len(EXTRA_COLUMNS))
            for r in batch:
                vms = r["vmsize_kb"]
                frag = f"{vms / r['rss_kb']:.2f}" if vms and r["rss_kb"] else ""
                w.writerow([utc_iso(t), host, "relay", "", r["replica"], r["grp"], _cell(r["rss_kb"]), _cell(vms),
                            _cell(r["hwm_kb"]), frag, "", "", "", "", ""] +
                           [_cell(r[c]) for c in EXTRA_COLUMNS[:-1]] + [repr(t)])
    events = out_dir / "events.csv"
    with open(events, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(EVENT_COLUMNS + EVENT_EXTRA_COLUMNS)
        for e in store.events_with_names():
            w.writerow([utc_iso(e["t"]), e["kind"], _cell(e["description"]), e["g"], _cell(e["replica"]), repr(e["t"])])
    diagnostics = out_dir / "diagnostics.csv"
    groups = store.groups()
    allocators = "; ".join(f"{g['name']}={g['family'] or g['allocator']} {g['version'] or ''}".strip() for g in groups)
    with open(diagnostics, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(DIAG_COLUMNS + DIAG_EXTRA_COLUMNS)
        for h in store.host_samples():
            d = datetime.fromtimestamp(h["t"], timezone.utc)
            count, total = totals.get(h["t"], (0, 0))
            mb = lambda kb: "" if kb is None else kb // 1024  # noqa: E731
            w.writerow([d.strftime("%Y-%m-%d"), d.strftime("%H:%M:%S"), host, "", meta.get("os", ""), meta.get("kernel", ""),
                        allocators, mb(h["mem_total_kb"]), "", mb(h["mem_available_kb"]), "", mb(h["swap_total_kb"]),
                        mb(h["swap_free_kb"]), "", "", "", count, mb(total or 0), mb((total or 0) // count) if count else ""] +
                       [repr(h["t"])] + [_cell(h[c]) for c in DIAG_EXTRA_COLUMNS[1:]])
    experiment = out_dir / "experiment.json"
    section = {
        "format": EXPORT_FORMAT,
        "meta": {k: v for k, v in meta.items() if k in EXPORTED_META},
        "groups": [{k: g.get(k) for k in _GROUP_FIELDS} for g in groups],
        "replicas": [{"group": r["group"], **{k: r.get(k) for k in _REPLICA_FIELDS}}
                     for r in sorted(store.replicas(), key=lambda r: r["id"])],
        "processes": [{"replica": p["replica"], **{k: p[k] for k in _PROCESS_FIELDS}} for p in store.processes()],
        "verifications": store.verification_history(),
    }
    doc = {"id": Path(store.run_dir).name, "name": meta.get("name", ""),
           "description": "exported by alloclab: the TorUtils groups below, and under \"alloclab\" what an import "
                          "needs to reproduce the run's analysis",
           "groups": {g["name"]: {"name": g["name"], "config": {"allocator": g["family"] or g["allocator"],
                                                               "version": g["version"]}} for g in groups},
           "alloclab": section}
    experiment.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n")
    store.close()
    return [memory, events, diagnostics, experiment]


# ---- import: reading files that may be hostile ---------------------------------------------------
# Every file is read and checked completely before the output directory is created; every problem
# is one UserError naming the file, line and column, and what to do about it.

MAX_FILE_BYTES = 1 << 30          # 1 GiB per file: a TorUtils CSV of years of hourly rows is a few MB
MAX_NAME_CHARS = 128              # relay nicknames (tor: 19), replica and group names
MAX_TEXT_CHARS = 4096             # event descriptions, verification details
EARLIEST, LATEST = 631152000.0, 7258118400.0     # 1990-01-01 .. 2200-01-01 UTC
PHASES = ("warmup", "load", "idle")
TIERS = ("cheap", "full", "imported")
# column -> (kind, upper bound); kind "int" or "float"; every figure must be finite and >= 0
LIMITS: dict[str, tuple[str, float]] = {
    **{c: ("int", 1 << 36) for c in ("rss_kb", "hwm_kb", "pss_kb", "uss_kb", "anon_kb", "swap_kb", "lazyfree_kb",
                                     "cgroup_kb", "cgroup_peak_kb")},             # 64 TiB
    "vmsize_kb": ("int", 1 << 40), "live_bytes": ("int", 1 << 50), "ops": ("int", 1 << 62),
    "cpu_s": ("float", 1e10), "nprocs": ("int", 1 << 22),
    **{c: ("int", 1 << 40) for c in ("mem_total_kb", "mem_available_kb", "swap_total_kb", "swap_free_kb")},
    "load1": ("float", 1e6), "sampler_cpu_s": ("float", 1e10), "unix_time": ("float", LATEST),
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
        raise UserError(f"{path} is {st.st_size >> 20} MiB, more than alloclab reads ({MAX_FILE_BYTES >> 20} MiB)",
                        "split the experiment into several imports")


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
        raise UserError(f"{_where(path, line)}: holds a NUL byte (a binary or damaged file)",
                        f"remove the NUL bytes or restore {path.name}")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise UserError(f"{_where(path, line)}: byte {raw[exc.start]:#04x} is not UTF-8",
                        f"re-save {path.name} as UTF-8") from None


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
                continue                                    # blank line
            if len(fields) != len(header):
                lines_ = f"lines {start}–{end} (a quote left open?)" if end > start else f"line {end}"
                raise UserError(f"{_where(path)} {lines_}: {len(fields)} fields, the header has {len(header)}",
                                "fix the row's commas and quotes, or delete it")
            row((start, dict(zip(header, fields))))
    except csv.Error as exc:
        raise UserError(f"{_where(path, reader.line_num)}: not valid CSV ({exc})", "fix the row's quotes, or delete it") from None
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


def _memory_rows(path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row) of a memory CSV that _memory_structure has passed, streamed."""
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f)
        header = [h.strip() for h in next(reader)]
        end = reader.line_num
        for fields in reader:
            start, end = end + 1, reader.line_num
            if fields and not (fields == [""] * len(fields) and len(fields) <= 1):
                yield start, dict(zip(header, fields))


def _number(text: str, path: Path, line: int, column: str) -> int | float | None:
    """A figure of column `column` (see LIMITS): empty -> None; anything else must be a plain number."""
    text = text.strip()
    if not text:
        return None
    kind, limit = LIMITS[column]
    if not _NUMBER.match(text):             # the place is named only on error: this runs per cell
        if text.startswith("-") and _NUMBER.match(text[1:]):
            raise UserError(f"{_where(path, line, column)}: {_show(text)} is negative",
                            "memory, counts and times are >= 0: correct or delete the row")
        raise UserError(f"{_where(path, line, column)}: {_show(text)} is not a number",
                        "write a plain decimal number, or leave it empty")
    value = float(text)
    if not math.isfinite(value) or value > limit:
        raise UserError(f"{_where(path, line, column)}: {_show(text)} is larger than {limit:.4g}, no real {column}",
                        "correct or delete the row")
    return int(round(value)) if kind == "int" else value


_TIMES: dict[tuple[str, timezone], float] = {}      # a fleet's rows share their timestamps: parse each once


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
        raise UserError(f"{_where(path, line, 'unix_time')}: {exact} is not the time of the timestamp column",
                        "correct one of the two, or leave unix_time empty")
    return exact


def _name(text: str, path: Path, line: int, column: str, limit: int = MAX_NAME_CHARS) -> str:
    text = text.strip()
    if _CONTROL.search(text) or len(text) > limit:
        raise UserError(f"{_where(path, line, column)}: {_show(text)} has control characters or is over {limit} "
                        "characters", "correct it")
    return text


def naive_timezone(hours: float) -> timezone:
    """The zone of timestamps written without an offset, from --naive-utc-offset."""
    if not math.isfinite(hours) or not -24 < hours < 24:
        raise UserError(f"--naive-utc-offset {hours} is not a UTC offset", "give hours east of UTC between -23.99 and 23.99")
    return timezone(timedelta(hours=hours))


def _dotted(digits: str) -> str | None:
    return ".".join(digits) if digits else None


def _read_group_lists(folder: Path) -> tuple[dict[str, str], dict[str, tuple[str, str | None]], dict[str, set[str]]]:
    """nickname -> group from the current lists; group -> (family, version); nickname -> groups of every list."""
    assignment: dict[str, str] = {}
    labels: dict[str, tuple[str, str | None]] = {}
    seen_in: dict[str, set[str]] = {}
    for f in sorted(folder.glob("group_*.txt")):
        m = _GROUP_FILE.match(f.name)
        if not m:
            continue
        letter, family, digits, historical = m.groups()
        labels.setdefault(letter, (family, _dotted(digits)))
        for nick in (ln.strip() for ln in f.read_text().splitlines()):
            if not nick or nick.startswith("#"):
                continue
            seen_in.setdefault(nick, set()).add(letter)
            if not historical:
                if nick in assignment and assignment[nick] != letter:
                    raise UserError(f"{nick} is in two current group lists ({assignment[nick]} and {letter})",
                                    "fix the lists in groups/")
                assignment[nick] = letter
    return assignment, labels, seen_in




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


def _read_experiment_json(folder: Path) -> tuple[dict[str, tuple[str, str | None]], dict | None]:
    """group -> (allocator family, version) from experiment.json, and the section alloclab's export adds."""
    exp = folder / "experiment.json"
    if not exp.exists() and not exp.is_symlink():
        return {}, None
    fix = "fix experiment.json or move it away"
    try:
        doc = json.loads(_read_text(exp, fix))
    except (json.JSONDecodeError, RecursionError) as exc:
        detail = f"line {exc.lineno}: {exc.msg}" if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
        raise UserError(f"experiment.json is not valid JSON ({detail})", fix) from None
    if not isinstance(doc, dict):
        raise UserError("experiment.json is not a JSON object", fix)
    labels: dict[str, tuple[str, str | None]] = {}
    groups = doc.get("groups", {})
    if not isinstance(groups, dict):
        raise UserError("experiment.json: \"groups\" is not an object of group -> description", fix)
    for g, spec in groups.items():
        spec = spec if isinstance(spec, dict) else {}
        cfg = spec.get("config") if isinstance(spec.get("config"), dict) else {}
        label = [cfg.get("allocator") or spec.get("name") or g, cfg.get("version")]
        if not all(x is None or isinstance(x, (str, int, float)) and not isinstance(x, bool) for x in label):
            raise UserError(f"experiment.json: group {_show(g)} has an allocator or version that is not text", fix)
        labels[g] = (str(label[0])[:MAX_NAME_CHARS], None if label[1] is None else str(label[1])[:MAX_NAME_CHARS])
    section = doc.get("alloclab")
    if section is not None:
        section = _check_section(section)
    return labels, section


EXPORT_FORMAT = 1
# meta keys an export carries: what analysis and reports read, and the run's provenance
EXPORTED_META = ("name", "experiment", "seed", "interval", "metric", "baseline", "phases", "replicas_per_group",
                 "start_order", "smaps_budget", "host", "kernel", "glibc", "cpu", "ncpu", "mem_total_kb", "os",
                 "alloclab_version", "python", "cgroups", "started_at", "ended_at", "end_reason", "source",
                 "replicas_in_several_groups", "unlisted_relays", "naive_timezone", "duplicate_timestamps",
                 "fleet_main_processes", "original_source", "cut_short")
_GROUP_FIELDS = ("name", "allocator", "kind", "library_path", "library_sha256", "family", "version", "env_json",
                 "command_json", "is_baseline", "provenance_json", "hardening_json")
_REPLICA_FIELDS = ("name", "idx", "start_order", "started_at", "ended_at", "exit_code", "end_kind", "verified",
                   "verify_detail", "host")
_PROCESS_FIELDS = ("pid", "start_ticks", "ppid", "comm", "cmdline", "first_seen", "last_seen", "verified",
                   "verify_detail", "mapped_allocator")
_SECTION_FIELDS = {"groups": set(_GROUP_FIELDS), "replicas": {"group", *_REPLICA_FIELDS},
                   "processes": {"replica", *_PROCESS_FIELDS},
                   "verifications": {"t", "pid", "start_ticks", "verified", "detail", "mapped_allocator"}}
# field -> accepted JSON types (None: null allowed)
_FIELD_TYPES: dict[str, tuple] = {
    "name": (str,), "allocator": (str,), "kind": (str, None), "library_path": (str, None), "library_sha256": (str, None),
    "family": (str, None), "version": (str, None), "env_json": (str, None), "command_json": (str, None),
    "is_baseline": (int, None), "provenance_json": (str, None), "hardening_json": (str, None),
    "host": (str, None), "group": (str,), "replica": (str,),
    "idx": (int, None), "start_order": (int, None), "started_at": (float, None), "ended_at": (float, None),
    "exit_code": (int, None), "end_kind": (str, None), "verified": (int, None), "verify_detail": (str, None), "pid": (int,),
    "start_ticks": (int, None), "ppid": (int, None), "comm": (str, None), "cmdline": (str, None),
    "first_seen": (float, None), "last_seen": (float, None), "mapped_allocator": (str, None), "t": (float,),
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
    fix = "re-export the run with `alloclab export`, or delete the \"alloclab\" section"
    if not isinstance(section, dict) or section.get("format") != EXPORT_FORMAT:
        raise UserError(f"experiment.json: the \"alloclab\" section is not export format {EXPORT_FORMAT}", fix)
    meta = section.get("meta", {})
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise UserError("experiment.json: alloclab.meta is not an object of text values", fix)
    unknown = sorted(set(meta) - set(EXPORTED_META))
    if unknown:
        raise UserError(f"experiment.json: alloclab.meta has an unknown key {_show(unknown[0])}", fix)
    for part, fields in (("groups", ("name", "allocator")), ("replicas", ("name", "group")),
                         ("processes", ("replica", "pid")), ("verifications", ("pid", "t"))):
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
                    raise UserError(f"experiment.json: alloclab.{part}[{i}].{k} = {_show(str(v))} is not a valid value", fix)
    names = [g["name"] for g in section.get("groups", [])]
    replicas = [r["name"] for r in section.get("replicas", [])]
    for what, seq in (("group", names), ("replica", replicas)):
        for n in seq:
            if not n.strip() or _CONTROL.search(n) or len(n) > MAX_NAME_CHARS or seq.count(n) > 1:
                raise UserError(f"experiment.json: alloclab {what} name {_show(n)} is empty, unprintable, too long or "
                                "given twice", fix)
    for r in section.get("replicas", []):
        if r["group"] not in names:
            raise UserError(f"experiment.json: replica {_show(r['name'])} is in group {_show(r['group'])}, which "
                            "alloclab.groups does not list", fix)
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
    for part in ("groups", "replicas", "processes", "verifications"):      # a part left out is an empty one
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
        raise UserError(f"{where}interval, seed, ncpu, phases or replicas_in_several_groups cannot be read", fix) from None
    if not (math.isfinite(interval) and 0 < interval <= 86400) or not 0 <= seed < 1 << 63 or not 0 <= ncpu < 1 << 20:
        raise UserError(f"{where}interval, seed or ncpu is out of range", fix)
    if not isinstance(phases, dict) or not all(k in PHASES and (v is None or isinstance(v, (int, float)) and
                                                                 not isinstance(v, bool) and math.isfinite(v) and v >= 0)
                                               for k, v in phases.items()):
        raise UserError(f"{where}phases is not an object of phase -> seconds", fix)
    if not isinstance(several, list) or not all(isinstance(x, str) for x in several):
        raise UserError(f"{where}replicas_in_several_groups is not a list of names", fix)
    if "metric" in meta and meta["metric"] not in ("rss", "pss", "uss", "anon", "footprint"):
        raise UserError(f"{where}metric {_show(meta['metric'])} is not known", fix)


# ---- import: the run ------------------------------------------------------------------------------

# figures a memory row may carry, in the samples table's names; absent columns are stored as NULL
SAMPLE_FIGURES = ("rss_kb", "vmsize_kb", "hwm_kb", "pss_kb", "uss_kb", "anon_kb", "swap_kb", "lazyfree_kb", "cgroup_kb",
                  "cgroup_peak_kb", "live_bytes", "ops", "cpu_s", "nprocs")
SAMPLE_COLUMNS = ("t", "replica_id", "phase", "tier") + SAMPLE_FIGURES


def _list_memberships(folder: Path) -> dict[str, list[tuple[str, str, str]]]:
    """nickname -> (group, 'current' | 'historical', list file) for every list it appears in:
    the evidence analysis uses to tell when a relay changed allocator."""
    out: dict[str, list[tuple[str, str, str]]] = {}
    for f in sorted(folder.glob("group_*.txt")):
        m = _GROUP_FILE.match(f.name)
        if m:
            kind = "historical" if m.group(4) else "current"
            for nick in (ln.strip() for ln in f.read_text().splitlines()):
                if nick and not nick.startswith("#"):
                    out.setdefault(nick, []).append((m.group(1), kind, f.name))
    return out


def _default_baseline(groups: list[str], labels: dict[str, tuple[str, str | None]]) -> str:
    """The glibc group, else the one its experiment calls the control: never a treatment by accident."""
    for want in ("glibc", "control"):
        found = [g for g in groups if want in (labels.get(g, ("",))[0] or "").lower()]
        if found:
            return found[0]
    return groups[0] if groups else ""


MEMORY_FIX = "is it a TorUtils memory CSV? It needs the columns timestamp, type, nickname and rss_kb"
MEMORY_REQUIRED = {"timestamp", "type", "nickname", "rss_kb"}
PROGRESS_ROWS = 1_000_000           # a progress line per this many rows read or samples written


def import_torutils(folder: Path, out: Path, naive_tz: timezone = timezone.utc, baseline: str | None = None,
                    progress: Callable[[str], None] | None = None, fast: bool = True) -> Path:
    """A TorUtils experiment folder (or an `alloclab export`) as a new run in `out`. Every file is
    read and checked first; `out` is created only once all of it is sound. The memory CSV is
    streamed: a plain file by the columnar fast path (torutils_fast), anything else (or
    fast=False) row by row; both keep the checks, their order and the rows that land.
    `progress` gets a line per PROGRESS_ROWS rows read and samples written."""
    if not folder.is_dir():
        raise UserError(f"{folder} is not a directory", "give the folder holding memory.csv or memory_measurements.csv")
    memory = next((folder / n for n in MEMORY_FILES if (folder / n).exists() or (folder / n).is_symlink()), None)
    if memory is None:
        raise UserError(f"no memory CSV in {folder}", f"expected one of: {', '.join(MEMORY_FILES)}")
    _check_output(out)
    _check_file(memory, MEMORY_FIX)
    header = torutils_fast.header_line(memory) if fast else None
    if header is not None and _header_problem(memory, header, MEMORY_REQUIRED, MEMORY_FIX) is not None:
        header = None
    structure_checked = header is None
    if structure_checked:
        header = _memory_structure(memory, MEMORY_REQUIRED, MEMORY_FIX)
    try:
        has_group_column = "group" in header
        _check_group_list_files(folder / "groups")
        assignment, labels, seen_in = ({}, {}, {})
        memberships: dict[str, list[tuple[str, str, str]]] = {}
        if (folder / "groups").is_dir():
            assignment, labels, seen_in = _read_group_lists(folder / "groups")
            memberships = _list_memberships(folder / "groups")
        config_labels, section = _read_experiment_json(folder)
        labels.update({k: v for k, v in config_labels.items() if k not in labels})
        if not has_group_column and not assignment:
            raise UserError(f"{folder} has neither a group column nor groups/ lists", "add groups/group_<L>_<allocator>.txt files")
    except UserError:
        if not structure_checked:           # the memory CSV's own problems are named first, as ever
            _memory_structure(memory, MEMORY_REQUIRED, MEMORY_FIX)
        raise
    relays = None
    if not structure_checked:
        try:
            relays = _read_relay_columns(memory, header, naive_tz, has_group_column, assignment, section, progress)
        except torutils_fast.NotSimple:
            _memory_structure(memory, MEMORY_REQUIRED, MEMORY_FIX)
    if relays is None:
        relays = _read_relay_rows(memory, header, _memory_rows(memory), naive_tz, has_group_column, assignment, section,
                                  progress).table(header)
    group_of = relays.group_of
    events = _read_events(folder / "events.csv", naive_tz, set(group_of))
    host = _read_host_samples(folder / "diagnostics.csv", naive_tz)

    section_groups = [g["name"] for g in section["groups"]] if section else []
    groups = section_groups or sorted(set(group_of.values()))
    if not groups:
        raise UserError(f"{memory.name} has no relay row with a group", "give relays a group (column or groups/ lists)")
    all_t = relays.t
    if not len(all_t):
        raise UserError(f"{memory.name} has no relay row with an rss_kb value", "is it the right file?")
    exported_meta = section["meta"] if section else {}
    base = baseline or exported_meta.get("baseline") or _default_baseline(groups, labels)
    if base not in groups:
        raise UserError(f"baseline {base!r} is not a group of this data", f"use one of: {', '.join(groups)}")
    several = sorted(n for n, gs in seen_in.items() if len(gs) > 1)
    first_t = float(all_t.min())

    # everything is read and sound: only now is anything created
    created = _make_output(out)
    store = None
    try:
        store = Store.create(out / DB_NAME)
        with store.bulk_load():
            meta = {"name": folder.name, "metric": "rss", "seed": 0, "interval": _typical_interval(all_t),
                    "started_at": first_t, "ended_at": float(all_t.max()), "host": relays.server, "end_reason": "imported",
                    "replicas_in_several_groups": several, "unlisted_relays": sorted(relays.unlisted)}
            meta.update(exported_meta)
            meta.update(source=f"import torutils {folder}", baseline=base, naive_timezone=str(naive_tz))
            if exported_meta:
                meta["original_source"] = exported_meta.get("original_source") or exported_meta.get("source", "")
            if relays.duplicate_times:
                meta["duplicate_timestamps"] = relays.duplicate_times
            store.set_meta(**meta)
            gid = {}
            exported_groups = {g["name"]: g for g in section["groups"]} if section else {}
            for g in groups:
                family, version = labels.get(g, (g, None))
                row = exported_groups.get(g) or dict(name=g, allocator=family, kind="imported", family=family, version=version,
                                                     env_json="{}", command_json="[]")
                gid[g] = store.add_group(**{**row, "is_baseline": int(g == base)})
            rid = {}
            if section:
                for r in section["replicas"]:
                    rid[r["name"]] = store.add_replica(group_id=gid[r["group"]],
                                                  **{k: v for k, v in r.items() if k != "group"})
            written = reported = 0
            for i, nick in enumerate(relays.names):
                lo, hi = relays.bounds[i]
                if nick not in rid:
                    first, last = (float(relays.t[lo]), float(relays.t[hi - 1])) if hi > lo else (None, None)
                    rid[nick] = store.add_replica(group_id=gid[group_of[nick]], idx=i, name=nick, start_order=i,
                                             started_at=first, ended_at=last, verified=None,
                                             verify_detail="imported: allocator not verified by alloclab")
                for start in range(lo, hi, 200_000):
                    store.add_samples(relays.columns(), relays.rows(start, min(hi, start + 200_000), rid[nick]))
                written += hi - lo
                if progress and written - reported >= PROGRESS_ROWS:
                    reported = written
                    progress(f"wrote {written:,} of {len(all_t):,} samples")
                for group_name, kind, source in memberships.get(nick, [(group_of[nick], "current", memory.name)]):
                    store.add_membership(replica_id=rid[nick], group_name=group_name, list_kind=kind, source=source)
            if section:
                pid_of = {}
                for p in section["processes"]:
                    pid_of[(p["pid"], p.get("start_ticks"))] = store.add_process(
                        replica_id=rid[p["replica"]], **{k: v for k, v in p.items() if k != "replica"})
                for v in section["verifications"]:
                    store.add_verification(t=v["t"], process_id=pid_of[(v["pid"], v.get("start_ticks"))],
                                 verified=v.get("verified"), detail=v.get("detail"), mapped_allocator=v.get("mapped_allocator"))
            for t, kind, description, group, replica in events:
                store.add_event(t, kind, description, rid.get(replica) if replica else None, group_name=group)
            if host:
                store.add_host_samples(("t",) + tuple(DIAG_EXTRA_COLUMNS[1:]), host)
            if relays.unlisted:
                store.add_event(first_t, "note", f"{relays.unlisted_rows} rows of {len(relays.unlisted)} relays had no group "
                            "(other relays, or a relay before it joined a group) and were left out")
            if relays.duplicate_times:
                store.add_event(first_t, "note", f"{sum(relays.duplicate_times.values())} rows repeat a relay's timestamp with "
                            f"other figures ({', '.join(sorted(relays.duplicate_times)[:6])}): two processes under one nickname?")
        store.close()
    except BaseException as exc:
        if store is not None:
            store.discard()
        _remove_output(out, created)
        if isinstance(exc, (OSError, StoreError)):
            raise UserError(f"writing {out} failed ({exc}); nothing was kept", "check free space and permissions") from None
        raise
    return out


def _check_output(out: Path) -> None:
    if out.exists() or out.is_symlink():
        if not out.is_dir():
            raise UserError(f"output {out} exists and is not a directory", "choose another with -o")
        try:
            outputs.refuse_nonempty(out, "output")
        except OSError as exc:
            raise UserError(f"cannot read output {out}: {exc.strerror}", "choose another with -o") from None


def _make_output(out: Path) -> Path | None:
    """Create `out` (and missing parents); the topmost directory created, to remove on failure."""
    top = None
    p = out.absolute()
    while not p.exists() and p != p.parent:
        top, p = p, p.parent
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create {out}: {exc.strerror}", "choose a writable place with -o") from None
    return top


def _remove_output(out: Path, created: Path | None) -> None:
    if created is not None:
        shutil.rmtree(created, ignore_errors=True)
    else:                               # an empty directory given by the user: leave it empty
        for f in out.glob(DB_NAME + "*"):
            f.unlink(missing_ok=True)


class _Relays:
    def __init__(self) -> None:
        self.samples: dict[str, list[tuple]] = {}       # nickname -> (t, phase, tier, *SAMPLE_FIGURES)
        self.group_of: dict[str, str] = {}
        self.unlisted: set[str] = set()
        self.unlisted_rows = 0
        self.duplicate_times: dict[str, int] = {}        # nickname -> rows repeating one of its timestamps
        self.server = ""                                 # the first row's (of any type) non-blank server

    def table(self, header: list[str]) -> "_SampleTable":
        names = sorted(self.group_of)
        rank, t, phase, tier = [], [], [], []
        figures: list[list] = [[] for _ in SAMPLE_FIGURES]
        for i, nick in enumerate(names):
            for s in sorted(self.samples.get(nick, []), key=lambda s: s[0]):
                rank.append(i)
                t.append(s[0])
                phase.append(_PHASE_CODE[s[1]])
                tier.append(_TIER_CODE[s[2]])
                for column, v in zip(figures, s[3:]):
                    column.append(math.nan if v is None else v)
        columns = {"t": np.array(t, float), "phase": np.array(phase, np.int8), "tier": np.array(tier, np.int8)}
        for c, values in zip(SAMPLE_FIGURES, figures):
            v = np.array(values, float)
            if not np.all(np.isnan(v)):
                columns[c] = v
        return _SampleTable(names, np.array(rank, np.int64), columns, {}, self, self.duplicate_times)


_PHASE_CODE = {None: 0, "warmup": 1, "load": 2, "idle": 3}
_TIER_CODE = {"cheap": 1, "full": 2, "imported": 3}


class _SampleTable:
    """The samples to write as columns, ordered by relay (names sorted) and then time (rows of one
    time in file order), with what the rows said about relays and groups. `columns` holds t, phase
    and tier codes (torutils_fast) and the SAMPLE_FIGURES with any value (float64, NaN for none;
    integer kinds exact); `constant` figures have one value for every sample. The columns are
    taken from the dict one by one as they are sorted, so the caller should hold no other
    reference to them (ten million samples: each column copy is 80 MB)."""
    def __init__(self, names: list[str], rank: np.ndarray, columns: dict[str, np.ndarray], constant: dict[str, int],
                 relays: "_Relays | torutils_fast.RelayRows", duplicate_times: dict[str, int]) -> None:
        order = np.lexsort((columns["t"], rank))         # stable: equal times keep file order
        self.names = names
        self.columns_: dict[str, np.ndarray] = {}
        for c in list(columns):
            self.columns_[c] = columns.pop(c)[order]
        self.constant = constant
        ends = np.cumsum(np.bincount(rank, minlength=len(names)))
        self.bounds = list(zip([0, *ends[:-1].tolist()], ends.tolist()))
        self.group_of, self.unlisted, self.unlisted_rows = relays.group_of, relays.unlisted, relays.unlisted_rows
        self.server = relays.server
        self.duplicate_times = duplicate_times
        self.t = self.columns_["t"]
        self.has_phase = bool(self.columns_["phase"].any())

    def columns(self) -> tuple[str, ...]:
        """The SAMPLE_COLUMNS with any value: the others are left to their default, NULL (fewer
        values to bind per row: most of the time of writing ten million samples)."""
        phase = ("phase",) if self.has_phase else ()
        return ("t", "replica_id", *phase, "tier", *(c for c in SAMPLE_FIGURES if c in self.columns_ or c in self.constant))

    def rows(self, lo: int, hi: int, replica_id: int) -> Iterator[tuple]:
        """Samples lo..hi as tuples of Python values (None for NULL) in the order of columns()."""
        n = hi - lo
        out: list[Iterable] = [self.t[lo:hi].tolist(), itertools.repeat(replica_id, n)]
        if self.has_phase:
            out.append(torutils_fast.PHASE_VALUES[self.columns_["phase"][lo:hi]].tolist())
        out.append(torutils_fast.TIER_VALUES[self.columns_["tier"][lo:hi]].tolist())
        for c in SAMPLE_FIGURES:
            if c in self.constant:
                out.append(itertools.repeat(self.constant[c], n))
            elif c in self.columns_:
                out.append(_python_values(self.columns_[c][lo:hi], LIMITS[c][0]))
        return zip(*out)


def _python_values(v: np.ndarray, kind: str) -> list:
    empty = np.isnan(v)
    values = np.where(empty, 0, v).astype(np.int64) if kind == "int" else v
    if not empty.any():
        return values.tolist()
    boxed = values.astype(object)
    boxed[empty] = None
    return boxed.tolist()


def _read_relay_columns(path: Path, header: list[str], naive_tz: timezone, has_group_column: bool,
                        assignment: dict[str, str], section: dict | None,
                        progress: Callable[[str], None] | None) -> _SampleTable:
    """The fast path (torutils_fast.scan), then the one check it leaves: rows repeating a relay's
    time, found by sorting (relay, time) and judged by the row-by-row rules on just those rows."""
    exported = {r["name"]: r["group"] for r in section["replicas"]} if section else None
    shown = (lambda rows, done, size: progress(f"read {rows:,} rows of {path.name} ({100 * done // max(size, 1)}%)")) \
        if progress else None
    relays = torutils_fast.scan(path, header, LIMITS, SAMPLE_FIGURES,
                                lambda text: _timestamp(text, path, 0, "timestamp", naive_tz),
                                None if has_group_column else (lambda nick: assignment.get(nick, "")),
                                exported, MAX_NAME_CHARS, shown)
    duplicate_times = _repeated_times(path, relays, section is not None)
    measured = ~np.isnan(relays.figures["rss_kb"])       # no rss_kb: nothing measured at this time
    names = sorted(relays.group_of)
    rank_of_id = np.empty(len(relays.names), np.int64)
    id_of = {n: i for i, n in enumerate(relays.names)}
    rank_of_id[[id_of[n] for n in names]] = np.arange(len(names))
    every = bool(measured.all())
    rank = rank_of_id[relays.nick_id if every else relays.nick_id[measured]]
    columns = {"t": relays.t, "phase": relays.phase, "tier": relays.tier, **relays.figures}
    relays.t = relays.phase = relays.tier = relays.nick_id = relays.line = None      # free as they are sorted
    relays.figures = {}
    for c in list(columns):
        if not every:
            columns[c] = columns[c][measured]
        if c in SAMPLE_FIGURES and np.all(np.isnan(columns[c])):
            del columns[c]
    constant = {} if "nprocs" in header else {"nprocs": 1}           # a TorUtils row is one tor process
    return _SampleTable(names, rank, columns, constant, relays, duplicate_times)


def _repeated_times(path: Path, relays: torutils_fast.RelayRows, exported: bool) -> dict[str, int]:
    """Rows repeating a relay's time: only those rows are read again (by line number) and judged
    as the row-by-row reader does: a whole repeated row, or a second measured row of a time in an
    export, is an error; otherwise nickname -> rows repeating one of its times (first seen first)."""
    order = np.lexsort((relays.t, relays.nick_id))
    nick, t = relays.nick_id[order], relays.t[order]
    same = (nick[1:] == nick[:-1]) & (t[1:] == t[:-1])
    if not same.any():
        return {}
    involved = np.zeros(len(order), bool)
    involved[1:] |= same
    involved[:-1] |= same
    rows = np.sort(order[involved])                      # positions, in file order
    wanted = dict.fromkeys(relays.line[rows].tolist())
    with open(path, "rb") as f:                          # the fast path's files: one row per line
        for number, text in enumerate(f, 1):
            if number in wanted:
                wanted[number] = text.removesuffix(b"\n").removesuffix(b"\r").decode().split(",")
    seen_rows: dict[tuple, int] = {}
    first_line: dict[tuple, int] = {}
    out: dict[str, int] = {}
    measured = ~np.isnan(relays.figures["rss_kb"])
    for r in rows.tolist():
        line, name, when = int(relays.line[r]), relays.names[relays.nick_id[r]], float(relays.t[r])
        whole = (name, when, tuple(v.strip() for v in wanted[line]))
        if whole in seen_rows:
            raise UserError(f"{_where(path, line)}: repeats line {seen_rows[whole]}", "delete one of the two rows")
        seen_rows[whole] = line
        if not measured[r]:
            continue
        if (name, when) in first_line:
            if exported:
                raise UserError(f"{_where(path, line)}: relay {_show(name)} has a second row for the time of line "
                                f"{first_line[(name, when)]}", "delete one of the two rows")
            out[name] = out.get(name, 0) + 1
        first_line.setdefault((name, when), line)
    return out


def _read_relay_rows(path: Path, header: list[str], rows: Iterable[tuple[int, dict[str, str]]], naive_tz: timezone,
                     has_group_column: bool, assignment: dict[str, str], section: dict | None,
                     progress: Callable[[str], None] | None = None) -> _Relays:
    """Row by row, each cell checked in turn: the reader for files the fast path cannot decide,
    and the one that names the first bad cell."""
    out = _Relays()
    figures = [c for c in SAMPLE_FIGURES if c in header]
    exported = {r["name"]: r["group"] for r in section["replicas"]} if section else None
    first_line: dict[tuple, int] = {}
    seen_rows: dict[tuple, int] = {}        # (nickname, time, hash of the whole row) -> line: a row is not kept
    group_line: dict[str, int] = {}
    for count, (line, r) in enumerate(rows, 1):
        if progress and count % PROGRESS_ROWS == 0:
            progress(f"read {count:,} rows of {path.name}")
        if not out.server:
            out.server = (r.get("server") or "").strip()[:MAX_NAME_CHARS]
        kind = r["type"].strip()
        if kind == "aggregate":
            continue
        if kind != "relay":
            raise UserError(f"{_where(path, line, 'type')}: {_show(kind)} is neither relay nor aggregate",
                            "correct or delete the row")
        nick = _name(r["nickname"], path, line, "nickname")
        if not nick:
            raise UserError(f"{_where(path, line, 'nickname')}: a relay row without a nickname", "correct or delete the row")
        group = _name(r["group"], path, line, "group") if has_group_column else assignment.get(nick, "")
        t = _row_time(r, path, line, naive_tz)
        values = tuple(_number(r[c], path, line, c) if c in figures else None for c in SAMPLE_FIGURES)
        phase = (r.get("phase") or "").strip() or None      # no phase column: unknown (NULL), never guessed
        if phase is not None and phase not in PHASES:
            raise UserError(f"{_where(path, line, 'phase')}: {_show(phase)} is not a phase", f"use {', '.join(PHASES)} or leave it empty")
        tier = (r.get("tier") or "").strip() or "imported"
        if tier not in TIERS:
            raise UserError(f"{_where(path, line, 'tier')}: {_show(tier)} is not a tier", f"use {', '.join(TIERS)} or leave it empty")
        if not group:
            out.unlisted.add(nick)
            out.unlisted_rows += 1
            continue
        if exported is not None and exported.get(nick) != group:
            raise UserError(f"{_where(path, line, 'nickname')}: {_show(nick)} in group {_show(group)} is not a replica of "
                            "that group in experiment.json", "export the run again: the files do not belong together")
        previous = out.group_of.setdefault(nick, group)
        group_line.setdefault(nick, line)
        if previous != group:
            raise UserError(f"{_where(path, line, 'group')}: relay {_show(nick)} is in group {_show(group)} here and "
                            f"{_show(previous)} at line {group_line[nick]}",
                            "one relay, one group: give the relay a new nickname in its new group")
        whole = (nick, t, hash(tuple(v.strip() for v in r.values())))
        if whole in seen_rows:
            raise UserError(f"{_where(path, line)}: repeats line {seen_rows[whole]}", "delete one of the two rows")
        seen_rows[whole] = line
        if values[0] is None:            # no rss_kb: nothing measured at this time
            continue
        key = (nick, t)
        if key in first_line:
            if section is not None:
                raise UserError(f"{_where(path, line)}: relay {_show(nick)} has a second row for the time of line "
                                f"{first_line[key]}", "delete one of the two rows")
            out.duplicate_times[nick] = out.duplicate_times.get(nick, 0) + 1
        first_line.setdefault(key, line)
        if "nprocs" not in header:
            values = values[:-1] + (1,)              # a TorUtils row is one tor process
        out.samples.setdefault(nick, []).append((t, phase, tier, *values))
    return out


def _read_events(path: Path, naive_tz: timezone, replicas: set[str]) -> list[tuple]:
    """(t, kind, description, group, replica name or None) from events.csv, if there is one."""
    if not path.exists() and not path.is_symlink():
        return []
    header, rows = _csv_rows(path, {"timestamp"}, "events.csv needs a timestamp column (and event_type, description, group)")
    out = []
    for line, e in rows:
        t = _row_time(e, path, line, naive_tz)
        kind = _name(e.get("event_type", ""), path, line, "event_type") or "event"
        description = _name(e.get("description", ""), path, line, "description", MAX_TEXT_CHARS)
        group = _name(e.get("group", ""), path, line, "group") or "all"
        replica = _name(e.get("replica", ""), path, line, "replica") or None
        if replica is not None and replica not in replicas:
            raise UserError(f"{_where(path, line, 'replica')}: {_show(replica)} has no rows in the memory CSV",
                            "correct the name or leave the column empty")
        out.append((t, kind, description, group, replica))
    return out


def _read_host_samples(path: Path, naive_tz: timezone) -> list[tuple]:
    """Host memory from diagnostics.csv, only where it carries alloclab's exact columns (an export
    of a run); TorUtils' own diagnostics (MB, per day) are not read."""
    if not (path.exists() or path.is_symlink()):
        return []
    header, rows = _csv_rows(path, set(), "diagnostics.csv is optional: fix it or move it away")
    if not set(DIAG_EXTRA_COLUMNS) <= set(header):
        return []
    out = []
    for line, h in rows:
        t = _number(h["unix_time"], path, line, "unix_time")
        if t is None or t < EARLIEST:
            raise UserError(f"{_where(path, line, 'unix_time')}: {_show(h['unix_time'])} is not a time after 1990",
                            "correct or delete the row")
        out.append((t, *(_number(h[c], path, line, c) for c in DIAG_EXTRA_COLUMNS[1:])))
    return out


def _typical_interval(ts: np.ndarray) -> float:
    uniq = np.unique(np.asarray(ts, float))
    if len(uniq) < 2:
        return 1.0
    gaps = np.sort(np.diff(uniq))
    return float(gaps[len(gaps) // 2])
