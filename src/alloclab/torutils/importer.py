"""`alloclab import torutils`: a TorUtils folder (or an `alloclab export`) read, checked in full,
and only then written as a new run."""

from __future__ import annotations

import csv
import itertools
import json
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, timedelta, timezone
from pathlib import Path

import numpy as np

from ..common import outputs
from ..common.errors import UserError
from ..store import DB_NAME, Store, StoreError, new_run_directory
from . import fastcsv
from .layout import _GROUP_FILE, DIAG_EXTRA_COLUMNS, MEMORY_FILES, PHASES, SAMPLE_FIGURES, TIERS
from .validation import (
    EARLIEST,
    LIMITS,
    MAX_NAME_CHARS,
    MAX_TEXT_CHARS,
    MEMORY_FIX,
    MEMORY_REQUIRED,
    _check_file,
    _check_group_list_files,
    _check_section,
    _csv_rows,
    _header_problem,
    _memory_structure,
    _name,
    _number,
    _read_text,
    _row_time,
    _show,
    _timestamp,
    _where,
)


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


def naive_timezone(hours: float) -> timezone:
    """The zone of timestamps written without an offset, from --naive-utc-offset."""
    if not math.isfinite(hours) or not -24 < hours < 24:
        raise UserError(
            f"--naive-utc-offset {hours} is not a UTC offset", "give hours east of UTC between -23.99 and 23.99"
        )
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
                    raise UserError(
                        f"{nick} is in two current group lists ({assignment[nick]} and {letter})",
                        "fix the lists in groups/",
                    )
                assignment[nick] = letter
    return assignment, labels, seen_in


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
        raise UserError('experiment.json: "groups" is not an object of group -> description', fix)
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


PROGRESS_ROWS = 1_000_000  # a progress line per this many rows read or samples written


def import_torutils(
    folder: Path,
    out: Path,
    naive_tz: timezone = UTC,
    baseline: str | None = None,
    progress: Callable[[str], None] | None = None,
    fast: bool = True,
) -> Path:
    """A TorUtils experiment folder (or an `alloclab export`) as a new run in `out`. Every file is
    read and checked first; `out` is created only once all of it is sound. The memory CSV is
    streamed: a plain file by the columnar fast path (torutils.fastcsv), anything else (or
    fast=False) row by row; both keep the checks, their order and the rows that land.
    `progress` gets a line per PROGRESS_ROWS rows read and samples written."""
    data = _read_folder(folder, out, naive_tz, baseline, progress, fast)
    # everything is read and sound: only now is anything created
    with new_run_directory(out):
        store = None
        try:
            store = Store.create(out / DB_NAME)
            with store.bulk_load():
                _write_run(store, data, progress)
            store.close()
        except BaseException as exc:
            if store is not None:
                store.discard()
            if isinstance(exc, (OSError, StoreError)):
                raise UserError(
                    f"writing {out} failed ({exc}); nothing was kept", "check free space and permissions"
                ) from None
            raise
    return out


@dataclass
class _GroupSources:
    """What says which relay is in which group, besides the memory CSV's own group column."""

    assignment: dict[str, str]  # relay -> group, from groups/ lists
    labels: dict[str, tuple[str, str | None]]  # group -> (allocator family, version)
    seen_in: dict[str, set[str]]  # relay -> every group list naming it
    memberships: dict[str, list[tuple[str, str, str]]]  # relay -> (group, list kind, source)
    section: dict | None  # an export's "alloclab" section

    def exported_groups(self) -> dict[str, str] | None:
        """An export's relay -> group (its section's replicas); None for data not exported by alloclab."""
        return {r["name"]: r["group"] for r in self.section["replicas"]} if self.section else None


@dataclass
class _Folder:
    """A TorUtils folder read and checked in full: everything the import writes."""

    folder: Path
    memory: Path
    naive_tz: timezone
    relays: _SampleTable
    sources: _GroupSources
    events: list[tuple]
    host: list[tuple]
    groups: list[str]
    baseline: str


def _read_folder(
    folder: Path,
    out: Path,
    naive_tz: timezone,
    baseline: str | None,
    progress: Callable[[str], None] | None,
    fast: bool,
) -> _Folder:
    """Every file of the folder read and checked, in the order the problems are named; UserError
    on the first."""
    if not folder.is_dir():
        raise UserError(f"{folder} is not a directory", "give the folder holding memory.csv or memory_measurements.csv")
    memory = next((folder / n for n in MEMORY_FILES if (folder / n).exists() or (folder / n).is_symlink()), None)
    if memory is None:
        raise UserError(f"no memory CSV in {folder}", f"expected one of: {', '.join(MEMORY_FILES)}")
    _check_output(out)
    _check_file(memory, MEMORY_FIX)
    header = fastcsv.header_line(memory) if fast else None
    if header is not None and _header_problem(memory, header, MEMORY_REQUIRED, MEMORY_FIX) is not None:
        header = None
    structure_checked = header is None
    if structure_checked:
        header = _memory_structure(memory, MEMORY_REQUIRED, MEMORY_FIX)
    try:
        sources = _read_group_sources(folder, "group" in header)
    except UserError:
        if not structure_checked:  # the memory CSV's own problems are named first, as ever
            _memory_structure(memory, MEMORY_REQUIRED, MEMORY_FIX)
        raise
    relays = _read_relays(memory, header, structure_checked, naive_tz, sources, progress)
    events = _read_events(folder / "events.csv", naive_tz, set(relays.group_of))
    host = _read_host_samples(folder / "diagnostics.csv", naive_tz)
    section = sources.section
    groups = [g["name"] for g in section["groups"]] if section else []
    groups = groups or sorted(set(relays.group_of.values()))
    if not groups:
        raise UserError(f"{memory.name} has no relay row with a group", "give relays a group (column or groups/ lists)")
    if not len(relays.t):
        raise UserError(f"{memory.name} has no relay row with an rss_kb value", "is it the right file?")
    base = baseline or (section["meta"] if section else {}).get("baseline") or _default_baseline(groups, sources.labels)
    if base not in groups:
        raise UserError(f"baseline {base!r} is not a group of this data", f"use one of: {', '.join(groups)}")
    return _Folder(folder, memory, naive_tz, relays, sources, events, host, groups, base)


def _read_group_sources(folder: Path, has_group_column: bool) -> _GroupSources:
    """The groups/ lists and experiment.json (an export's section included)."""
    _check_group_list_files(folder / "groups")
    sources = _GroupSources({}, {}, {}, {}, None)
    if (folder / "groups").is_dir():
        sources.assignment, sources.labels, sources.seen_in = _read_group_lists(folder / "groups")
        sources.memberships = _list_memberships(folder / "groups")
    config_labels, sources.section = _read_experiment_json(folder)
    sources.labels.update({k: v for k, v in config_labels.items() if k not in sources.labels})
    if not has_group_column and not sources.assignment:
        raise UserError(
            f"{folder} has neither a group column nor groups/ lists", "add groups/group_<L>_<allocator>.txt files"
        )
    return sources


def _read_relays(
    memory: Path,
    header: list[str],
    structure_checked: bool,
    naive_tz: timezone,
    sources: _GroupSources,
    progress: Callable[[str], None] | None,
) -> _SampleTable:
    """The memory CSV's relay rows: by the fast path when its header was simple and the file turns
    out so, else row by row (after the structure checks the fast path skipped)."""
    if not structure_checked:
        try:
            return _read_relay_columns(memory, header, naive_tz, sources, progress)
        except fastcsv.NotSimple:
            _memory_structure(memory, MEMORY_REQUIRED, MEMORY_FIX)
    return _read_relay_rows(memory, header, _memory_rows(memory), naive_tz, sources, progress).table(header)


def _write_run(store: Store, data: _Folder, progress: Callable[[str], None] | None) -> None:
    """The checked folder as a run: meta, groups, replicas with their samples and memberships, an
    export's processes and verifications, events, host samples and notes."""
    store.set_meta(**_run_meta(data))
    gid = _write_groups(store, data)
    rid = _write_replicas(store, data, gid, progress)
    section, relays, first_t = data.sources.section, data.relays, float(data.relays.t.min())
    if section:
        pid_of = {}
        for p in section["processes"]:
            pid_of[(p["pid"], p.get("start_ticks"))] = store.add_process(
                replica_id=rid[p["replica"]], **{k: v for k, v in p.items() if k != "replica"}
            )
        for v in section["verifications"]:
            store.add_verification(
                t=v["t"],
                process_id=pid_of[(v["pid"], v.get("start_ticks"))],
                verified=v.get("verified"),
                detail=v.get("detail"),
                mapped_allocator=v.get("mapped_allocator"),
            )
    for t, kind, description, group, replica in data.events:
        store.add_event(t, kind, description, rid.get(replica) if replica else None, group_name=group)
    if data.host:
        store.add_host_samples(("t",) + tuple(DIAG_EXTRA_COLUMNS[1:]), data.host)
    if relays.unlisted:
        store.add_event(
            first_t,
            "note",
            f"{relays.unlisted_rows} rows of {len(relays.unlisted)} relays had no group "
            "(other relays, or a relay before it joined a group) and were left out",
        )
    if relays.duplicate_times:
        store.add_event(
            first_t,
            "note",
            f"{sum(relays.duplicate_times.values())} rows repeat a relay's timestamp with "
            f"other figures ({', '.join(sorted(relays.duplicate_times)[:6])}): two processes under one nickname?",
        )


def _run_meta(data: _Folder) -> dict:
    """The run's meta: what the data says, an export's own meta over it, then where it came from."""
    relays, all_t = data.relays, data.relays.t
    exported_meta = data.sources.section["meta"] if data.sources.section else {}
    meta = {
        "name": data.folder.name,
        "metric": "rss",
        "seed": 0,
        "interval": _typical_interval(all_t),
        "started_at": float(all_t.min()),
        "ended_at": float(all_t.max()),
        "host": relays.server,
        "end_reason": "imported",
        "replicas_in_several_groups": sorted(n for n, gs in data.sources.seen_in.items() if len(gs) > 1),
        "unlisted_relays": sorted(relays.unlisted),
    }
    meta.update(exported_meta)
    meta.update(source=f"import torutils {data.folder}", baseline=data.baseline, naive_timezone=str(data.naive_tz))
    if exported_meta:
        meta["original_source"] = exported_meta.get("original_source") or exported_meta.get("source", "")
    if relays.duplicate_times:
        meta["duplicate_timestamps"] = relays.duplicate_times
    return meta


def _write_groups(store: Store, data: _Folder) -> dict[str, int]:
    """Each group's row (an export's own, else one made from its label); group -> id."""
    exported_groups = {g["name"]: g for g in data.sources.section["groups"]} if data.sources.section else {}
    gid = {}
    for g in data.groups:
        family, version = data.sources.labels.get(g, (g, None))
        row = exported_groups.get(g) or dict(
            name=g, allocator=family, kind="imported", family=family, version=version, env_json="{}", command_json="[]"
        )
        gid[g] = store.add_group(**{**row, "is_baseline": int(g == data.baseline)})
    return gid


def _write_replicas(
    store: Store, data: _Folder, gid: dict[str, int], progress: Callable[[str], None] | None
) -> dict[str, int]:
    """An export's replicas, then one per relay not among them, each with its samples and
    memberships; replica name -> id."""
    relays, section = data.relays, data.sources.section
    rid = {}
    if section:
        for r in section["replicas"]:
            rid[r["name"]] = store.add_replica(group_id=gid[r["group"]], **{k: v for k, v in r.items() if k != "group"})
    written = reported = 0
    for i, nick in enumerate(relays.names):
        lo, hi = relays.bounds[i]
        if nick not in rid:
            first, last = (float(relays.t[lo]), float(relays.t[hi - 1])) if hi > lo else (None, None)
            rid[nick] = store.add_replica(
                group_id=gid[relays.group_of[nick]],
                idx=i,
                name=nick,
                start_order=i,
                started_at=first,
                ended_at=last,
                verified=None,
                verify_detail="imported: allocator not verified by alloclab",
            )
        for start in range(lo, hi, 200_000):
            store.add_samples(relays.columns(), relays.rows(start, min(hi, start + 200_000), rid[nick]))
        written += hi - lo
        if progress and written - reported >= PROGRESS_ROWS:
            reported = written
            progress(f"wrote {written:,} of {len(relays.t):,} samples")
        for group_name, kind, source in data.sources.memberships.get(
            nick, [(relays.group_of[nick], "current", data.memory.name)]
        ):
            store.add_membership(replica_id=rid[nick], group_name=group_name, list_kind=kind, source=source)
    return rid


def _check_output(out: Path) -> None:
    if out.exists() or out.is_symlink():
        if not out.is_dir():
            raise UserError(f"output {out} exists and is not a directory", "choose another with -o")
        try:
            outputs.refuse_nonempty(out, "output")
        except OSError as exc:
            raise UserError(f"cannot read output {out}: {exc.strerror}", "choose another with -o") from None


class _Relays:
    def __init__(self) -> None:
        self.samples: dict[str, list[tuple]] = {}  # nickname -> (t, phase, tier, *SAMPLE_FIGURES)
        self.group_of: dict[str, str] = {}
        self.unlisted: set[str] = set()
        self.unlisted_rows = 0
        self.duplicate_times: dict[str, int] = {}  # nickname -> rows repeating one of its timestamps
        self.server = ""  # the first row's (of any type) non-blank server

    def table(self, header: list[str]) -> _SampleTable:
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
    and tier codes (fastcsv) and the SAMPLE_FIGURES with any value (float64, NaN for none;
    integer kinds exact); `constant` figures have one value for every sample. The columns are
    taken from the dict one by one as they are sorted, so the caller should hold no other
    reference to them (ten million samples: each column copy is 80 MB)."""

    def __init__(
        self,
        names: list[str],
        rank: np.ndarray,
        columns: dict[str, np.ndarray],
        constant: dict[str, int],
        relays: _Relays | fastcsv.RelayRows,
        duplicate_times: dict[str, int],
    ) -> None:
        order = np.lexsort((columns["t"], rank))  # stable: equal times keep file order
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
        return (
            "t",
            "replica_id",
            *phase,
            "tier",
            *(c for c in SAMPLE_FIGURES if c in self.columns_ or c in self.constant),
        )

    def rows(self, lo: int, hi: int, replica_id: int) -> Iterator[tuple]:
        """Samples lo..hi as tuples of Python values (None for NULL) in the order of columns()."""
        n = hi - lo
        out: list[Iterable] = [self.t[lo:hi].tolist(), itertools.repeat(replica_id, n)]
        if self.has_phase:
            out.append(fastcsv.PHASE_VALUES[self.columns_["phase"][lo:hi]].tolist())
        out.append(fastcsv.TIER_VALUES[self.columns_["tier"][lo:hi]].tolist())
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


def _read_relay_columns(
    path: Path, header: list[str], naive_tz: timezone, sources: _GroupSources, progress: Callable[[str], None] | None
) -> _SampleTable:
    """The fast path (fastcsv.scan), then the one check it leaves: rows repeating a relay's
    time, found by sorting (relay, time) and judged by the row-by-row rules on just those rows.
    The same inputs as the row-by-row reader's (the group column's presence read from the header)."""
    shown = (
        (lambda rows, done, size: progress(f"read {rows:,} rows of {path.name} ({100 * done // max(size, 1)}%)"))
        if progress
        else None
    )
    relays = fastcsv.scan(
        path,
        header,
        LIMITS,
        SAMPLE_FIGURES,
        lambda text: _timestamp(text, path, 0, "timestamp", naive_tz),
        None if "group" in header else (lambda nick: sources.assignment.get(nick, "")),
        sources.exported_groups(),
        MAX_NAME_CHARS,
        shown,
    )
    duplicate_times = _repeated_times(path, relays, sources.section is not None)
    measured = ~np.isnan(relays.figures["rss_kb"])  # no rss_kb: nothing measured at this time
    names = sorted(relays.group_of)
    rank_of_id = np.empty(len(relays.names), np.int64)
    id_of = {n: i for i, n in enumerate(relays.names)}
    rank_of_id[[id_of[n] for n in names]] = np.arange(len(names))
    every = bool(measured.all())
    rank = rank_of_id[relays.nick_id if every else relays.nick_id[measured]]
    columns = {"t": relays.t, "phase": relays.phase, "tier": relays.tier, **relays.figures}
    relays.t = relays.phase = relays.tier = relays.nick_id = relays.line = None  # free as they are sorted
    relays.figures = {}
    for c in list(columns):
        if not every:
            columns[c] = columns[c][measured]
        if c in SAMPLE_FIGURES and np.all(np.isnan(columns[c])):
            del columns[c]
    constant = {} if "nprocs" in header else {"nprocs": 1}  # a TorUtils row is one tor process
    return _SampleTable(names, rank, columns, constant, relays, duplicate_times)


def _repeated_times(path: Path, relays: fastcsv.RelayRows, exported: bool) -> dict[str, int]:
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
    rows = np.sort(order[involved])  # positions, in file order
    wanted = dict.fromkeys(relays.line[rows].tolist())
    with open(path, "rb") as f:  # the fast path's files: one row per line
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
                raise UserError(
                    f"{_where(path, line)}: relay {_show(name)} has a second row for the time of line "
                    f"{first_line[(name, when)]}",
                    "delete one of the two rows",
                )
            out[name] = out.get(name, 0) + 1
        first_line.setdefault((name, when), line)
    return out


def _read_relay_rows(
    path: Path,
    header: list[str],
    rows: Iterable[tuple[int, dict[str, str]]],
    naive_tz: timezone,
    sources: _GroupSources,
    progress: Callable[[str], None] | None = None,
) -> _Relays:
    """Row by row, each cell checked in turn: the reader for files the fast path cannot decide,
    and the one that names the first bad cell."""
    reader = _RelayRowReader(path, header, naive_tz, sources)
    for count, (line, r) in enumerate(rows, 1):
        if progress and count % PROGRESS_ROWS == 0:
            progress(f"read {count:,} rows of {path.name}")
        reader.add(line, r)
    return reader.out


class _RelayRowReader:
    """One memory CSV read row by row into _Relays; each step raises the UserError naming the
    first bad cell, in the order the cells are checked (type, nickname, group, time, figures, phase,
    tier; then membership, repeats)."""

    def __init__(self, path: Path, header: list[str], naive_tz: timezone, sources: _GroupSources) -> None:
        self.path, self.naive_tz = path, naive_tz
        self.figures = [c for c in SAMPLE_FIGURES if c in header]
        self.has_group_column, self.has_nprocs = "group" in header, "nprocs" in header
        self.assignment = sources.assignment
        self.exported = sources.exported_groups()
        self.from_export = sources.section is not None
        self.first_line: dict[tuple, int] = {}
        self.seen_rows: dict[tuple, int] = {}  # (nickname, time, hash of the whole row) -> line: a row is not kept
        self.group_line: dict[str, int] = {}
        self.out = _Relays()

    def add(self, line: int, r: dict[str, str]) -> None:
        if not self.out.server:
            self.out.server = (r.get("server") or "").strip()[:MAX_NAME_CHARS]
        if not self._is_relay(line, r):
            return
        nick, group = self._relay(line, r)
        t, phase, tier, values = self._sample(line, r)
        if not group:
            self.out.unlisted.add(nick)
            self.out.unlisted_rows += 1
            return
        self._check_membership(line, nick, group)
        self._check_not_repeated(line, r, nick, t)
        if values[0] is None:  # no rss_kb: nothing measured at this time
            return
        self._note_second_row_at(line, nick, t)
        if not self.has_nprocs:
            values = values[:-1] + (1,)  # a TorUtils row is one tor process
        self.out.samples.setdefault(nick, []).append((t, phase, tier, *values))

    def _is_relay(self, line: int, r: dict[str, str]) -> bool:
        """A relay row; False for an aggregate row (not read), an error for any other type."""
        kind = r["type"].strip()
        if kind == "aggregate":
            return False
        if kind != "relay":
            raise UserError(
                f"{_where(self.path, line, 'type')}: {_show(kind)} is neither relay nor aggregate",
                "correct or delete the row",
            )
        return True

    def _relay(self, line: int, r: dict[str, str]) -> tuple[str, str]:
        """(nickname, group): the group column's, else the groups/ lists' ("" for a relay in none)."""
        nick = _name(r["nickname"], self.path, line, "nickname")
        if not nick:
            raise UserError(
                f"{_where(self.path, line, 'nickname')}: a relay row without a nickname", "correct or delete the row"
            )
        group = _name(r["group"], self.path, line, "group") if self.has_group_column else self.assignment.get(nick, "")
        return nick, group

    def _sample(self, line: int, r: dict[str, str]) -> tuple[float, str | None, str, tuple]:
        """(time, phase, tier, SAMPLE_FIGURES values), each cell checked."""
        path = self.path
        t = _row_time(r, path, line, self.naive_tz)
        values = tuple(_number(r[c], path, line, c) if c in self.figures else None for c in SAMPLE_FIGURES)
        phase = (r.get("phase") or "").strip() or None  # no phase column: unknown (NULL), never guessed
        if phase is not None and phase not in PHASES:
            raise UserError(
                f"{_where(path, line, 'phase')}: {_show(phase)} is not a phase",
                f"use {', '.join(PHASES)} or leave it empty",
            )
        tier = (r.get("tier") or "").strip() or "imported"
        if tier not in TIERS:
            raise UserError(
                f"{_where(path, line, 'tier')}: {_show(tier)} is not a tier",
                f"use {', '.join(TIERS)} or leave it empty",
            )
        return t, phase, tier, values

    def _check_membership(self, line: int, nick: str, group: str) -> None:
        """One relay, one group, and (in an export) the group experiment.json gives it."""
        if self.exported is not None and self.exported.get(nick) != group:
            raise UserError(
                f"{_where(self.path, line, 'nickname')}: {_show(nick)} in group {_show(group)} is not a replica of "
                "that group in experiment.json",
                "export the run again: the files do not belong together",
            )
        previous = self.out.group_of.setdefault(nick, group)
        self.group_line.setdefault(nick, line)
        if previous != group:
            raise UserError(
                f"{_where(self.path, line, 'group')}: relay {_show(nick)} is in group {_show(group)} here and "
                f"{_show(previous)} at line {self.group_line[nick]}",
                "one relay, one group: give the relay a new nickname in its new group",
            )

    def _check_not_repeated(self, line: int, r: dict[str, str], nick: str, t: float) -> None:
        whole = (nick, t, hash(tuple(v.strip() for v in r.values())))
        if whole in self.seen_rows:
            raise UserError(
                f"{_where(self.path, line)}: repeats line {self.seen_rows[whole]}", "delete one of the two rows"
            )
        self.seen_rows[whole] = line

    def _note_second_row_at(self, line: int, nick: str, t: float) -> None:
        """A relay's second row at one time: an error in an export, else two processes under one
        nickname, counted (TorUtils data)."""
        key = (nick, t)
        if key in self.first_line:
            if self.from_export:
                raise UserError(
                    f"{_where(self.path, line)}: relay {_show(nick)} has a second row for the time of line "
                    f"{self.first_line[key]}",
                    "delete one of the two rows",
                )
            self.out.duplicate_times[nick] = self.out.duplicate_times.get(nick, 0) + 1
        self.first_line.setdefault(key, line)


def _read_events(path: Path, naive_tz: timezone, replicas: set[str]) -> list[tuple]:
    """(t, kind, description, group, replica name or None) from events.csv, if there is one."""
    if not path.exists() and not path.is_symlink():
        return []
    header, rows = _csv_rows(
        path, {"timestamp"}, "events.csv needs a timestamp column (and event_type, description, group)"
    )
    out = []
    for line, e in rows:
        t = _row_time(e, path, line, naive_tz)
        kind = _name(e.get("event_type", ""), path, line, "event_type") or "event"
        description = _name(e.get("description", ""), path, line, "description", MAX_TEXT_CHARS)
        group = _name(e.get("group", ""), path, line, "group") or "all"
        replica = _name(e.get("replica", ""), path, line, "replica") or None
        if replica is not None and replica not in replicas:
            raise UserError(
                f"{_where(path, line, 'replica')}: {_show(replica)} has no rows in the memory CSV",
                "correct the name or leave the column empty",
            )
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
            raise UserError(
                f"{_where(path, line, 'unix_time')}: {_show(h['unix_time'])} is not a time after 1990",
                "correct or delete the row",
            )
        out.append((t, *(_number(h[c], path, line, c) for c in DIAG_EXTRA_COLUMNS[1:])))
    return out


def _typical_interval(ts: np.ndarray) -> float:
    uniq = np.unique(np.asarray(ts, float))
    if len(uniq) < 2:
        return 1.0
    gaps = np.sort(np.diff(uniq))
    return float(gaps[len(gaps) // 2])
