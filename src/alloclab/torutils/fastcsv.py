"""The fast path of `import torutils` for the memory CSV: the file is read in blocks of bytes and
each block is cut into columns with numpy (newline and comma positions, one gather per column),
so ten million rows are never Python objects. It only accepts what it can decide exactly: a file
of plain ASCII without quotes or NUL bytes (carriage returns only in CRLF line ends), every line with the header's number
of fields, and every cell already in the form the row-by-row checks accept (no surrounding blanks,
plain numbers within LIMITS, known type, phase and tier, ISO times). Anything else raises
`NotSimple`, and the caller reads the file again with the row-by-row checks of torutils, which
name the first bad cell exactly as before; the same rows land either way (tests compare stores).
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

BLOCK_BYTES = 16 << 20
PROGRESS_ROWS = 1_000_000  # a progress call per this many rows read
PHASE_CODES = {b"": 0, b"warmup": 1, b"load": 2, b"idle": 3}
TIER_CODES = {b"": 3, b"cheap": 1, b"full": 2, b"imported": 3}  # empty: imported
PHASE_VALUES = np.array([None, "warmup", "load", "idle"], dtype=object)
TIER_VALUES = np.array([None, "cheap", "full", "imported"], dtype=object)
_NUMBER = re.compile(rb"[0-9]+(\.[0-9]*)?([eE][+-]?[0-9]{1,3})?")
_WIDEST_NUMBER = 64  # a wider cell is left to the row-by-row checks


class NotSimple(Exception):
    """The fast path cannot decide this file: read it row by row."""


@dataclass
class RelayRows:
    """Every relay row with a group, in file order, as columns. `figures` holds the SAMPLE_FIGURES
    columns the file has (float64, NaN where empty; integer kinds already rounded)."""

    names: list[str] = field(default_factory=list)  # nickname by id, in order of first row
    nick_id: np.ndarray = field(default_factory=lambda: np.empty(0, np.int32))
    t: np.ndarray = field(default_factory=lambda: np.empty(0))
    line: np.ndarray = field(default_factory=lambda: np.empty(0, np.int32))
    phase: np.ndarray = field(default_factory=lambda: np.empty(0, np.int8))
    tier: np.ndarray = field(default_factory=lambda: np.empty(0, np.int8))
    figures: dict[str, np.ndarray] = field(default_factory=dict)
    group_of: dict[str, str] = field(default_factory=dict)
    unlisted: set[str] = field(default_factory=set)
    unlisted_rows: int = 0
    server: str = ""
    rows: int = 0  # data lines read (all types)


def header_line(path: Path) -> list[str] | None:
    """The header's column names if the first line is simple (ASCII, no quotes), else None."""
    with open(path, "rb") as f:
        first = f.readline(1 << 20)
    if first.startswith(b"\xef\xbb\xbf"):
        first = first[3:]
    first = first[:-2] + b"\n" if first.endswith(b"\r\n") else first
    if not first.endswith(b"\n") or not first.isascii() or any(c in first for c in (b'"', b"\r", b"\0")):
        return None
    return [h.strip() for h in first[:-1].decode().split(",")]


def scan(
    path: Path,
    header: list[str],
    limits: dict[str, tuple[str, float]],
    figures: tuple[str, ...],
    time_of: Callable[[str], float],
    groups: Callable[[str], str] | None,
    exported: dict[str, str] | None,
    max_name: int,
    progress: Callable[[int, int, int], None] | None = None,
) -> RelayRows:
    """All relay rows of the memory CSV as columns. `time_of(text)` parses a timestamp (raising
    on a bad one), `groups(nick)` gives the group when there is no group column; `exported` is the
    replica -> group map of an export. Raises NotSimple on anything it cannot decide."""
    scan = _Scan(header, limits, figures, time_of, groups, exported, max_name)
    size = path.stat().st_size
    done = 0
    line_no = 1  # the header is line 1
    reported = 0
    with open(path, "rb") as f:
        done += len(f.readline())
        pending = b""
        while True:
            chunk = f.read(BLOCK_BYTES)
            if not chunk:
                if pending:  # the last line, without its newline
                    line_no = scan.block(pending + b"\n", line_no)
                break
            data = pending + chunk
            cut = data.rfind(b"\n") + 1
            pending = data[cut:]
            if len(pending) > 4 * BLOCK_BYTES:
                raise NotSimple("a line longer than 64 MiB")
            done += cut
            if cut:
                line_no = scan.block(data[:cut], line_no)
            if progress and scan.out.rows - reported >= PROGRESS_ROWS:
                reported = scan.out.rows
                progress(scan.out.rows, min(done, size), size)
    return scan.finish()


def _check_plain(block: bytes) -> int:
    """Refuse what the fast path cannot read exactly; returns the number of carriage returns."""
    if not block.isascii() or b'"' in block or b"\0" in block:
        raise NotSimple("not plain ASCII without quotes")
    crlf = block.count(b"\r")  # a carriage return only as part of a CRLF line end
    if crlf and crlf != block.count(b"\r\n"):
        raise NotSimple("a carriage return inside a line")
    return crlf


@dataclass
class _Fields:
    """One block's non-blank lines cut at their commas: each field's byte offsets, by row and column."""

    block: bytes
    buf: np.ndarray  # the block as bytes
    col: dict[str, int]
    start: np.ndarray  # (rows, columns): where each field starts
    end: np.ndarray  # ...and ends (exclusive)
    lines: np.ndarray  # each row's line number in the file
    max_name: int

    def cells(
        self, name: str, rows: np.ndarray | slice = slice(None), widest: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The column's cells as fixed-width bytes (NUL-padded) and their byte matrix."""
        widest = self.max_name if widest is None else widest
        i = self.col[name]
        s, e = self.start[rows, i], self.end[rows, i]
        lengths = e - s
        width = int(lengths.max()) if len(lengths) else 0
        if width > widest:
            raise NotSimple(f"a {name} cell wider than {widest}")
        if width == 0:
            return np.zeros(len(s), "S1"), np.zeros((len(s), 1), np.uint8)
        offsets = np.arange(width, dtype=np.int32)
        matrix = self.buf.take(s.astype(np.int32)[:, None] + offsets, mode="clip")
        matrix[offsets >= lengths[:, None]] = 0  # NUL padding: what numpy's bytes type strips
        return matrix.view(f"S{width}").ravel(), matrix

    def first_server(self) -> str:
        """The first non-blank server cell of the block ("" when none)."""
        i = self.col["server"]
        for r in np.flatnonzero(self.end[:, i] > self.start[:, i]).tolist():
            text = self.block[self.start[r, i] : self.end[r, i]].decode().strip()
            if text:
                return text[: self.max_name]
        return ""

    def relay_rows(self) -> np.ndarray:
        """The rows of type relay (the others must be aggregate)."""
        kinds, _ = self.cells("type")
        relay = kinds == b"relay"
        if not np.all(relay | (kinds == b"aggregate")):
            raise NotSimple("a type other than relay or aggregate")
        return np.flatnonzero(relay)

    def names(self, column: str, rows: np.ndarray, may_be_empty: bool) -> tuple[np.ndarray, np.ndarray]:
        """Distinct values of a name column and each row's index into them."""
        values, matrix = self.cells(column, rows)
        printable = ((matrix > 32) & (matrix < 127)) | (matrix == 0)
        if not np.all(printable) or not may_be_empty and np.any(values == b""):
            raise NotSimple(f"a {column} with blanks, control characters or empty")
        return np.unique(values, return_inverse=True)


def _fields(block: bytes, first_line: int, ncols: int, col: dict[str, int], max_name: int, crlf: int) -> _Fields:
    """Cut a block of whole lines into fields, refusing a line without the header's number of fields."""
    buf = np.frombuffer(block, np.uint8)
    newlines = np.flatnonzero(buf == 10)
    starts = np.empty(len(newlines), np.int64)
    starts[0] = 0
    starts[1:] = newlines[:-1] + 1
    ends = newlines
    if crlf:
        ends = newlines - (buf[np.maximum(newlines - 1, 0)] == 13) * (newlines > 0)
    lines = first_line + 1 + np.arange(len(newlines))
    filled = ends > starts  # blank lines are skipped, as the csv reader's are
    starts, ends, lines = starts[filled], ends[filled], lines[filled]
    commas = np.flatnonzero(buf == 44)
    per_line = np.diff(np.searchsorted(commas, np.concatenate([starts[:1], ends])))
    if len(commas) != len(starts) * (ncols - 1) or np.any(per_line != ncols - 1):
        raise NotSimple("a line without the header's number of fields")
    commas = commas.reshape(len(starts), ncols - 1) if ncols > 1 else np.empty((len(starts), 0), np.int64)
    field_start = np.concatenate([starts[:, None], commas + 1], axis=1)
    field_end = np.concatenate([commas, ends[:, None]], axis=1)
    if len(starts) and int((field_end - field_start).max()) >= csv.field_size_limit():
        raise NotSimple("a field longer than the csv module reads")
    return _Fields(block, buf, col, field_start, field_end, lines, max_name)


class _Scan:
    """What a scan carries from block to block: the file's columns, the checks it was given, the
    relay ids and parsed times so far, and each column's blocks of rows."""

    def __init__(
        self,
        header: list[str],
        limits: dict[str, tuple[str, float]],
        figures: tuple[str, ...],
        time_of: Callable[[str], float],
        groups: Callable[[str], str] | None,
        exported: dict[str, str] | None,
        max_name: int,
    ):
        self.col = {h: i for i, h in enumerate(header)}
        self.ncols = len(header)
        self.present = [c for c in figures if c in self.col]
        self.limits, self.time_of, self.groups, self.exported, self.max_name = (
            limits,
            time_of,
            groups,
            exported,
            max_name,
        )
        self.out = RelayRows()
        self.ids: dict[str, int] = {}
        self.times: dict[bytes, float] = {}
        self.parts: dict[str, list[np.ndarray]] = {
            k: [] for k in ("nick_id", "t", "line", "phase", "tier", *self.present)
        }

    def block(self, block: bytes, first_line: int) -> int:
        """One block of whole lines; returns the number of the next line."""
        crlf = _check_plain(block)
        next_line = first_line + block.count(b"\n")
        f = _fields(block, first_line, self.ncols, self.col, self.max_name, crlf)
        self.out.rows += len(f.lines)
        if not self.out.server and "server" in self.col:
            self.out.server = f.first_server()
        rows = f.relay_rows()
        if not len(rows):
            return next_line
        pair_index, pair_nick, pair_group = self._pairs(f, rows)
        t = self._times(f, rows)
        values = {c: _numbers(f.cells(c, rows, _WIDEST_NUMBER), c, self.limits) for c in self.present}
        phase = (
            _codes(f.cells("phase", rows, 16)[0], PHASE_CODES) if "phase" in self.col else np.zeros(len(rows), np.int8)
        )
        tier = (
            _codes(f.cells("tier", rows, 16)[0], TIER_CODES) if "tier" in self.col else np.full(len(rows), 3, np.int8)
        )
        keep, pair_id = self._relay_ids(pair_nick, pair_group)
        grouped = keep[pair_index]
        self.out.unlisted_rows += int(len(grouped) - grouped.sum())
        for name, column in (
            ("nick_id", pair_id[pair_index]),
            ("t", t),
            ("line", f.lines[rows].astype(np.int32)),
            ("phase", phase),
            ("tier", tier),
            *((c, values[c]) for c in self.present),
        ):
            self.parts[name].append(column[grouped])
        return next_line

    def _pairs(self, f: _Fields, rows: np.ndarray) -> tuple[np.ndarray, list[str], list[str]]:
        """Each row's index into the block's distinct (nickname, group) pairs, and the pairs."""
        nick_values, nick_index = f.names("nickname", rows, False)
        nicks = [v.decode() for v in nick_values]
        if "group" not in self.col:
            return nick_index, nicks, [self.groups(n) for n in nicks] if self.groups else [""] * len(nicks)
        group_values, group_index = f.names("group", rows, True)
        pair_code = nick_index.astype(np.int64) * len(group_values) + group_index
        pairs, pair_index = np.unique(pair_code, return_inverse=True)
        return (
            pair_index,
            [nicks[p // len(group_values)] for p in pairs],
            [group_values[p % len(group_values)].decode() for p in pairs],
        )

    def _times(self, f: _Fields, rows: np.ndarray) -> np.ndarray:
        """Each row's time: rows of one sampling time are adjacent, so each distinct text is parsed
        once; an exact unix_time, where given, must agree with it and is used."""
        stamps, _ = f.cells("timestamp", rows, 64)
        change = np.ones(len(stamps), bool)
        change[1:] = stamps[1:] != stamps[:-1]
        distinct = stamps[change]
        parsed = np.empty(len(distinct))
        for k, text in enumerate(distinct.tolist()):
            known = self.times.get(text)
            if known is None:
                try:
                    known = self.time_of(text.decode())
                except Exception as exc:  # the row-by-row checks name it
                    raise NotSimple("a bad timestamp") from exc
                if len(self.times) > 1_000_000:
                    self.times.clear()
                self.times[text] = known
            parsed[k] = known
        t = parsed[np.cumsum(change) - 1]
        if "unix_time" in self.col:
            exact = _numbers(f.cells("unix_time", rows, _WIDEST_NUMBER), "unix_time", self.limits)
            given = ~np.isnan(exact)
            if np.any(np.abs(exact[given] - t[given]) > 1e-3):
                raise NotSimple("unix_time is not the time of the timestamp")
            t = np.where(given, exact, t)
        return t

    def _relay_ids(self, pair_nick: list[str], pair_group: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """One check per distinct (nickname, group) of the block: which pairs are kept (a group
        given) and each kept relay's id, in order of first row."""
        keep = np.ones(len(pair_nick), bool)
        pair_id = np.empty(len(pair_nick), np.int32)
        for k, (nick, group) in enumerate(zip(pair_nick, pair_group)):
            if not group:
                keep[k] = False
                self.out.unlisted.add(nick)
                continue
            if self.exported is not None and self.exported.get(nick) != group:
                raise NotSimple("a relay that is not in experiment.json")
            if self.out.group_of.setdefault(nick, group) != group:
                raise NotSimple("a relay in two groups")
            pair_id[k] = self.ids.setdefault(nick, len(self.ids))
        return keep, pair_id

    def finish(self) -> RelayRows:
        """The rows as whole columns, one column at a time: the blocks are freed as it goes."""
        out = self.out
        out.names = list(self.ids)
        for k, v in self.parts.items():
            if k in self.present:
                out.figures[k] = np.concatenate(v) if v else np.empty(0)
            elif v:
                setattr(out, k, np.concatenate(v))
            v.clear()
        return out


def _numbers(cell: tuple[np.ndarray, np.ndarray], column: str, limits: dict[str, tuple[str, float]]) -> np.ndarray:
    """A figure column as float64 (NaN where empty), integer kinds rounded half to even like round()."""
    values, matrix = cell
    digits = ((matrix >= 48) & (matrix <= 57)) | (matrix == 0)
    # decimals or exponents: each checked by the pattern
    if not np.all(digits) and not all(not v or _NUMBER.fullmatch(v) for v in values.tolist()):
        raise NotSimple(f"a {column} that is not a plain number")
    empty = values == b""
    out = np.where(empty, b"0", values).astype(np.float64)
    kind, limit = limits[column]
    if np.any(~np.isfinite(out) | (out > limit)):
        raise NotSimple(f"a {column} out of range")
    if kind == "int":
        out = np.rint(out)
    out[empty] = np.nan
    return out


def _codes(values: np.ndarray, codes: dict[bytes, int]) -> np.ndarray:
    distinct, index = np.unique(values, return_inverse=True)
    try:
        table = np.array([codes[v] for v in distinct.tolist()], np.int8)
    except KeyError:
        raise NotSimple("an unknown phase or tier") from None
    return table[index]
