"""The allocator's own account of a process, read from the introspection helper's records.

The helper (native/introspect.c, preloaded after the allocator) rewrites one record per process,
`<dir>/<pid>-<start ticks>.bin`, under a sequence lock (native/alloclab_introspect.h). This
module reads a record (never waiting on the process: it is a file), turns the family's figures
into one decomposition — in use by the program, free but held by kind, what the allocator has
mapped — and says what it could not tell. Parsing the text the helper copies (glibc's
malloc_info XML, mimalloc's stats table) happens here, not in the process.
"""

from __future__ import annotations

import os
import re
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..store import HELD_KINDS  # the kinds of free-but-held memory are the store's held_* columns

HELPER = "liballoclab_introspect.so"
DIR_VAR = "ALLOCLAB_INTROSPECT"  # set for replicas: where records go
INTERVAL_VAR = "ALLOCLAB_INTROSPECT_INTERVAL"  # seconds between collections
BUDGET_VAR = "ALLOCLAB_INTROSPECT_BUDGET"  # share of one core a process's helper may use

MAGIC = 0x3154434550534E49
NFIELDS = 24
TEXT_MAX = 28 * 1024
HEADER = struct.Struct(f"<QIIQQQQQQ{NFIELDS}q192sII")  # mirrors struct alloclab_introspect up to text
RECORD_SIZE = HEADER.size + TEXT_MAX
FIELDS = (
    "in_use",
    "bins",
    "top",
    "dirty",
    "muzzy",
    "retained",
    "mapped",
    "resident",
    "committed",
    "metadata",
    "arenas",
    "mmapped",
    "free_chunks",
    "free_total",
    "dirty_decay_ms",
    "muzzy_decay_ms",
    "peak_committed",
)
FAMILIES = {0: "unknown", 1: "glibc", 2: "jemalloc", 3: "mimalloc", 4: "tcmalloc"}
TEXT_MALLOC_INFO, TEXT_MI_STATS = 1, 2


@dataclass
class Record:
    """One collection, as the helper wrote it."""

    family: str
    t: float  # wall clock of the collection
    collections: int
    helper_cpu_s: float
    last_cost_s: float
    interval_s: float
    fields: dict[str, int | None]
    malloc_file: str
    text_kind: int
    text: str


@dataclass
class Account:
    """One process's decomposition at one collection (bytes; None: the allocator does not tell)."""

    family: str
    t: float
    in_use: int | None
    held: dict[str, int] = field(default_factory=dict)  # kind -> bytes, see HELD_KINDS
    mapped: int | None = None  # what the allocator has mapped for the heap
    resident: int | None = None  # the allocator's own resident estimate (jemalloc)
    retained: int | None = None  # virtual, not resident (jemalloc retained, tcmalloc unmapped)
    arenas: int | None = None
    committed: int | None = None  # mimalloc
    reserved: int | None = None  # mimalloc
    pages_abandoned: int | None = None  # mimalloc: pages left by threads that exited
    purged: int | None = None  # mimalloc: bytes purged so far
    free_chunks: int | None = None  # glibc
    arena_free: list[int] = field(default_factory=list)  # glibc: free bytes per arena (malloc_info)
    tunables: dict[str, int] = field(default_factory=dict)  # settings the allocator reported (decay ms)
    helper_cpu_s: float = 0.0
    collections: int = 0
    interval_s: float = 0.0
    malloc_file: str = ""

    @property
    def held_total(self) -> int | None:
        return sum(self.held.values()) if self.held else None


def record_path(directory: Path | str, pid: int, start_ticks: int) -> Path:
    return Path(directory) / f"{pid}-{start_ticks}.bin"


def _seq(fd: int) -> int | None:
    raw = os.pread(fd, 24, 0)
    return struct.unpack_from("<Q", raw, 16)[0] if len(raw) == 24 else None


def read_record(path: Path | str, tries: int = 3) -> Record | None:
    """A consistent record (seq read, record read, seq read again: equal and even), or None when
    absent, torn every time, or not a record."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        for _ in range(tries):
            before = _seq(fd)
            raw = os.pread(fd, RECORD_SIZE, 0)
            after = _seq(fd)
            if before is None or before != after or before % 2 or len(raw) < HEADER.size:
                continue
            magic, version, family, seq, t_ns, coll, cpu, cost, interval, *rest = HEADER.unpack_from(raw)
            if magic != MAGIC or version != 1 or coll == 0:
                return None
            values, mfile, text_kind, text_len = rest[:NFIELDS], rest[NFIELDS], rest[NFIELDS + 1], rest[NFIELDS + 2]
            text = raw[HEADER.size : HEADER.size + min(text_len, TEXT_MAX)].decode(errors="replace")
            return Record(
                FAMILIES.get(family, "unknown"),
                t_ns / 1e9,
                coll,
                cpu / 1e9,
                cost / 1e9,
                interval / 1e9,
                {name: (v if v >= 0 else None) for name, v in zip(FIELDS, values)},
                mfile.split(b"\0", 1)[0].decode(errors="replace"),
                text_kind,
                text,
            )
        return None
    except OSError:
        return None
    finally:
        os.close(fd)


def is_stale(rec: Record, now: float | None = None) -> bool:
    """A record not rewritten for three of its own intervals (+2 s) belongs to an image that is gone
    (exec'd into a program without the helper, or stopped): its figures are not current."""
    now = time.time() if now is None else now
    return now - rec.t > 3 * max(rec.interval_s, 0.01) + 2.0


# ---- text parsers -------------------------------------------------------------------------------

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "ki": 1024,
    "kib": 1024,
    "m": 1000**2,
    "mi": 1024**2,
    "mib": 1024**2,
    "g": 1000**3,
    "gi": 1024**3,
    "gib": 1024**3,
    "t": 1000**4,
    "tib": 1024**4,
}


def _amount(token: str, unit: str = "") -> float | None:
    try:
        v = float(token)
    except ValueError:
        return None
    return v * _UNITS.get(unit.lower(), 1)


def _mi_row(text: str, label: str, column: int, section: str | None = None) -> float | None:
    """The `column`th figure (0 = peak, 2 = current in 3.6's tables; see below) of a mimalloc
    stats row. Figures are "<number> [unit]"; a unit-less 0 stands alone."""
    lines = text.splitlines()
    if section is not None:
        idx = next((i for i, ln in enumerate(lines) if ln.split()[:1] == [section] and "peak" in ln), None)
        if idx is None:
            return None
        lines = lines[idx + 1 :]
    for ln in lines:
        head, sep, rest = ln.partition(":")
        if not sep or head.strip() != label:
            continue
        toks = rest.split()
        values, i = [], 0
        while i < len(toks):
            unit = toks[i + 1] if i + 1 < len(toks) and re.fullmatch(r"(?i)[kmgt]i?b?|b", toks[i + 1]) else ""
            v = _amount(toks[i], unit)
            if v is None:
                break
            values.append(v)
            i += 2 if unit else 1
        return values[column] if column < len(values) else None
    return None


def parse_mi_stats(text: str) -> dict[str, int | None]:
    """mimalloc's `mi_stats_print_out` table, for 2.x/3.0 (one table: peak, total, freed, current)
    and 3.1+ (sections: peak, total, current). Current values, bytes or counts."""
    out: dict[str, int | None] = {}
    sectioned = "\n arenas" in text or text.lstrip().startswith("subproc")
    cur = 2 if sectioned else 3

    def get(label, section=None, column=cur):
        v = _mi_row(text, label, column, section)
        return int(v) if v is not None else None

    if sectioned:
        out["in_use"] = get("allocated")
        out["reserved"] = get("reserved", "arenas")
        out["committed"] = get("committed", "arenas")
        out["pages"] = get("pages", "pages")
        out["pages_abandoned"] = get("abandoned", "pages")
        out["purged"] = get("purged", "arenas", column=0)
    else:
        out["in_use"] = None  # release builds of 2.x/3.0 do not count bytes handed out
        out["reserved"] = get("reserved")
        out["committed"] = get("committed")
        lines = text.splitlines()  # "-abandoned:" rows follow "segments:" and "pages:"
        for i, ln in enumerate(lines[:-1]):
            if ln.split(":")[0].strip() == "pages" and lines[i + 1].lstrip().startswith("-abandoned:"):
                v = _mi_row(lines[i + 1], "-abandoned", cur)
                out["pages_abandoned"] = int(v) if v is not None else None
        out["purged"] = get("purged", column=0)
    return out


_HEAP = re.compile(r'<heap nr="(\d+)">(.*?)</heap>', re.S)


def parse_malloc_info(text: str) -> list[int]:
    """Free bytes per glibc arena, from malloc_info's XML (fast bins + bins: `<total type="fast"`
    and `type="rest"`); the number of entries is the arena count."""
    out = []
    for m in _HEAP.finditer(text):
        body = m.group(2)
        free = sum(int(x.group(1)) for x in re.finditer(r'<total type="(?:fast|rest)" count="\d+" size="(\d+)"', body))
        out.append(free)
    return out


def account(rec: Record) -> Account:
    """The family's figures as one decomposition."""
    f = rec.fields
    a = Account(
        rec.family,
        rec.t,
        f.get("in_use"),
        helper_cpu_s=rec.helper_cpu_s,
        collections=rec.collections,
        interval_s=rec.interval_s,
        malloc_file=rec.malloc_file,
    )
    held: dict[str, int | None] = {}
    if rec.family == "glibc":
        held = {"bins": f.get("bins"), "top": f.get("top")}
        a.mapped, a.free_chunks = f.get("mapped"), f.get("free_chunks")
        if rec.text_kind == TEXT_MALLOC_INFO:
            a.arena_free = parse_malloc_info(rec.text)
            a.arenas = len(a.arena_free) or None
    elif rec.family == "jemalloc":
        held = {"bins": f.get("bins"), "dirty": f.get("dirty"), "muzzy": f.get("muzzy"), "metadata": f.get("metadata")}
        a.mapped, a.resident, a.retained, a.arenas = (
            f.get("mapped"),
            f.get("resident"),
            f.get("retained"),
            f.get("arenas"),
        )
        a.tunables = {k: f[k] for k in ("dirty_decay_ms", "muzzy_decay_ms") if f.get(k) is not None}
    elif rec.family == "tcmalloc":
        held = {"cached": f.get("bins"), "dirty": f.get("dirty")}
        a.mapped, a.retained = f.get("mapped"), f.get("retained")
    elif rec.family == "mimalloc":
        mi = parse_mi_stats(rec.text) if rec.text_kind == TEXT_MI_STATS else {}
        a.committed = f.get("committed") if f.get("committed") is not None else mi.get("committed")
        a.reserved, a.pages_abandoned, a.purged = mi.get("reserved"), mi.get("pages_abandoned"), mi.get("purged")
        a.in_use = mi.get("in_use")
        a.mapped = a.committed
        if a.in_use is not None and a.committed is not None:
            held = {"committed_free": max(0, a.committed - a.in_use)}
    a.held = {k: v for k, v in held.items() if v is not None}
    return a


# ---- during a run: which helper, whether it is mapped, rows for the store ---------------------


def helper_path() -> Path:
    from ..native import build

    return build.program(HELPER)


def preload_with_helper(allocator_path: str | None, helper: Path | str) -> str:
    """LD_PRELOAD for a replica: the allocator under test first (it serves malloc), the helper after."""
    return f"{allocator_path} {helper}" if allocator_path else str(helper)


def helper_env(directory: Path, interval: float, budget: float) -> dict[str, str]:
    return {DIR_VAR: str(directory), INTERVAL_VAR: f"{interval:g}", BUDGET_VAR: f"{budget:g}"}


def helper_mapped(pid: int, helper: Path | str) -> bool | None:
    """Whether the helper (that very file: device and inode) is mapped in pid; None if pid is gone."""
    from ..allocators.library import mapped_files

    try:
        st = os.stat(helper)
        maps = mapped_files(pid)
    except OSError:
        return None
    return any(
        m.inode == st.st_ino and (m.dev == st.st_dev or os.path.realpath(m.path) == os.path.realpath(helper))
        for m in maps
    )


ALLOC_COLUMNS = (
    "t",
    "process_id",
    "replica_id",
    "family",
    "in_use",
    *(f"held_{k}" for k in HELD_KINDS),
    "mapped",
    "resident",
    "retained",
    "committed",
    "reserved",
    "arenas",
    "pages_abandoned",
    "purged",
    "free_chunks",
    "helper_cpu_s",
    "collections",
    "interval_s",
    "detail_json",
)


def row(acc: Account, process_id: int, replica_id: int) -> tuple:
    import json

    detail = {"malloc_file": acc.malloc_file}
    if acc.arena_free:
        detail["arena_free"] = acc.arena_free
    if acc.tunables:
        detail["tunables"] = acc.tunables
    return (
        acc.t,
        process_id,
        replica_id,
        acc.family,
        acc.in_use,
        *(acc.held.get(k) for k in HELD_KINDS),
        acc.mapped,
        acc.resident,
        acc.retained,
        acc.committed,
        acc.reserved,
        acc.arenas,
        acc.pages_abandoned,
        acc.purged,
        acc.free_chunks,
        acc.helper_cpu_s,
        acc.collections,
        acc.interval_s,
        json.dumps(detail, sort_keys=True),
    )


@dataclass
class Collector:
    """Reads the helper's record of every sampled process at each tick and stores each new
    collection once (a record rewritten more slowly than the sampler ticks is not stored twice).
    Confirms the helper is mapped in every process when first seen and every `verify_every`
    seconds, recording an `introspect_absent` event when it is not (a static binary, a wrapper
    that drops LD_PRELOAD): its figures are then absent, nothing waits for them."""

    store: object
    helper: Path
    verify_every: float = 30.0
    rows: list[tuple] = field(default_factory=list)
    last: dict[tuple[int, int], int] = field(default_factory=dict)  # identity -> collections stored
    checked: dict[tuple[int, int], float] = field(default_factory=dict)
    mapped: dict[tuple[int, int], bool] = field(default_factory=dict)

    def observe(
        self,
        directory: Path,
        replica_id: int,
        replica_name: str,
        group: str,
        processes: dict[tuple[int, int], int],
        identities: set[tuple[int, int]],
        now: float,
    ) -> None:
        from . import sampler

        for key in identities:
            proc_id = processes.get(key)
            if proc_id is None:
                continue
            if now - self.checked.get(key, -1e18) >= self.verify_every and sampler.process_age(key[1]) >= 1.0:
                state = helper_mapped(key[0], self.helper)
                if state is not None and sampler.is_alive(key):
                    self.checked[key] = now
                    if self.mapped.get(key) is not state and state is False:
                        self.store.add_event(
                            now,
                            "introspect_absent",
                            f"{replica_name} pid {key[0]}: the introspection "
                            "helper is not mapped (static binary, or LD_PRELOAD dropped): no allocator "
                            "figures for this process",
                            replica_id,
                            group,
                        )
                    self.mapped[key] = state
            rec = read_record(record_path(directory, *key))
            if rec is None or rec.collections == self.last.get(key) or is_stale(rec, now):
                continue
            self.last[key] = rec.collections
            self.rows.append(row(account(rec), proc_id, replica_id))

    def flush(self) -> None:
        if self.rows:
            self.store.add_alloc_stats(ALLOC_COLUMNS, self.rows)
            self.rows = []
