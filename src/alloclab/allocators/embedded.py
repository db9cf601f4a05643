"""Allocators compiled into an executable or a loaded object, where LD_PRELOAD cannot reach them.

A Rust service with `#[global_allocator] MiMalloc`, a Go program, or a bundler's native binding
that links mimalloc privately (rolldown's exports no symbol of it) maps no allocator library: its
`/proc/PID/maps` looks like plain glibc, yet most of its heap is served by the allocator inside.
This module reads each mapped ELF file once (mmap, bounded) and looks for what an allocator's own
code leaves in a binary even when stripped and built with hidden visibility:

- its messages and option-parsing strings ("mimalloc: warning: ", "<jemalloc>: ", "TCMALLOC_..."),
- version strings ("gperftools 2.10"), Go's build-info magic,
- and, where a symbol table survives, a *defined* symbol of its API (`mi_malloc`, `mallctl`,
  `_rjem_malloc`, `rpmalloc_initialize`, ...). An undefined reference (a program that calls into
  a shared libmimalloc) does not count: that library is mapped and named on its own.

A family with string markers is reported when at least `needed` of them are present (its
defined symbols are then extra evidence: heaptrack's preload defines `mi_malloc` only to intercept
it); snmalloc and rpmalloc, which have none, when one of their symbols is defined. Only the
loaded, non-executable sections are read. Results are cached per (device, inode, size, mtime) so periodic verification
costs an open and an fstat per mapped file. The false-positive and detection figures are measured by
`benchmarks/embedded_scan.py` (docs/how-to/allocators.md).
"""

from __future__ import annotations

import mmap
import os
import stat
import struct
from collections import OrderedDict
from dataclasses import dataclass

SCAN_LIMIT = 1 << 30  # bytes of one file scanned; beyond 1 GiB an object is read only that far


@dataclass(frozen=True)
class Signature:
    family: str
    markers: tuple[bytes, ...]  # strings the allocator's code carries
    needed: int  # how many distinct markers make a finding
    symbols: tuple[str, ...] = ()  # API symbols: one defined is enough
    what: str = ""  # how to say it in a sentence, when not just the family name


SIGNATURES = (
    Signature(
        "mimalloc",
        (b"mimalloc: warning: ", b"mimalloc: error: ", b"mimalloc_%s"),
        2,
        ("mi_malloc", "mi_version", "mi_option_get", "mi_heap_new"),
    ),
    Signature(
        "jemalloc",
        (b"<jemalloc>: ", b"MALLOC_CONF", b"muzzy_decay_ms", b"abort_conf"),
        2,
        ("mallctl", "je_mallctl", "_rjem_mallctl", "je_malloc", "_rjem_malloc"),
    ),
    Signature(
        "tcmalloc",
        (
            b"TCMALLOC_SAMPLE_PARAMETER",
            b"TCMALLOC_RELEASE_RATE",
            b"tcmalloc: large alloc",
            b"gperftools ",
            b"TCMALLOC_MAX_PER_CPU_CACHE_SIZE",
        ),
        2,
        ("tc_malloc", "tc_version", "TCMallocInternalMalloc"),
    ),
    # snmalloc and rpmalloc print no distinctive messages, and their API names appear as plain
    # strings in any program that looks them up with dlsym (alloclab's own probe does): only a
    # defined symbol counts, so a stripped binary hiding one of them is not recognised.
    Signature("snmalloc", (), 1, ("sn_rust_alloc", "sn_malloc", "sn_rust_statistics")),
    Signature("rpmalloc", (), 1, ("rpmalloc", "rpmalloc_initialize", "rpmalloc_thread_initialize")),
    # Go's heap is its runtime's own; only cgo's C allocations go through malloc.
    Signature("go", (b"\xff Go buildinf:", b"runtime.mallocgc"), 2, (), "the Go runtime's allocator"),
)


@dataclass(frozen=True)
class Finding:
    family: str
    evidence: tuple[str, ...]  # the markers and symbols found, for the record
    # An allocator compiled in but used only when the process's environment selects it: CPython
    # 3.13+ carries mimalloc yet uses pymalloc + malloc unless PYTHONMALLOC=mimalloc (its
    # free-threaded build always uses mimalloc, and gets no such exemption).
    selected_by: str | None = None

    @property
    def what(self) -> str:
        sig = next(s for s in SIGNATURES if s.family == self.family)
        return sig.what or self.family


def _defined_symbols(mm: mmap.mmap, size: int, names: set[str]) -> set[str]:
    """Which of `names` are defined (not merely referenced) in the ELF64 symbol tables of the file."""
    if size < 64 or mm[:4] != b"\x7fELF" or mm[4] != 2 or mm[5] != 1:  # ELF64, little-endian only
        return set()
    (shoff,) = struct.unpack_from("<Q", mm, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", mm, 0x3A)
    if shoff == 0 or shentsize != 64 or shoff + shnum * 64 > size:
        return set()
    sections = [struct.unpack_from("<IIQQQQIIQQ", mm, shoff + i * 64) for i in range(shnum)]
    found: set[str] = set()
    for _sh_name, sh_type, _f, _a, off, sz, link, _i, _al, entsize in sections:
        if sh_type not in (2, 11) or entsize != 24 or link >= shnum:  # SHT_SYMTAB, SHT_DYNSYM
            continue
        str_off, str_size = sections[link][4], sections[link][5]
        if off + sz > size or str_off + str_size > size:
            continue
        for name in names - found:
            needle = b"\0" + name.encode() + b"\0"
            at = mm.find(needle, str_off, str_off + str_size)
            if at < 0:
                continue
            st_name = struct.pack("<I", at + 1 - str_off)
            pos = mm.find(st_name, off, off + sz)
            while pos >= 0:
                if (pos - off) % 24 == 0:
                    (shndx,) = struct.unpack_from("<H", mm, pos + 6)
                    if shndx != 0:  # SHN_UNDEF: only a reference to someone else's definition
                        found.add(name)
                        break
                pos = mm.find(st_name, pos + 1, off + sz)
    return found


def _data_spans(mm: mmap.mmap, size: int) -> list[tuple[int, int]]:
    """Where an ELF64 object keeps its loaded, non-executable data (.rodata, .data, Go's tables):
    the strings looked for live there, and skipping code and debug sections halves the reading
    or better. The whole file when there is no usable section table."""
    whole = [(0, min(size, SCAN_LIMIT))]
    if mm[4] != 2 or mm[5] != 1:
        return whole
    (shoff,) = struct.unpack_from("<Q", mm, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", mm, 0x3A)
    if shoff == 0 or shentsize != 64 or shnum == 0 or shoff + shnum * 64 > size:
        return whole
    spans: list[tuple[int, int]] = []
    for i in range(shnum):
        sh_type, flags, _a, off, sz = struct.unpack_from("<IQQQQ", mm, shoff + i * 64 + 4)
        if sh_type == 8 or not flags & 0x2 or flags & 0x4 or sz == 0:  # NOBITS, not ALLOC, EXECINSTR
            continue
        start, end = off, min(off + sz, size, SCAN_LIMIT)
        if start >= end:
            continue
        if spans and start - spans[-1][1] <= 4096 and start >= spans[-1][0]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], end))
        else:
            spans.append((start, end))
    return spans or whole


def scan_file(fd: int) -> tuple[Finding, ...]:
    """The allocators compiled into the ELF object open at fd (nothing for a non-ELF file)."""
    size = os.fstat(fd).st_size
    if size < 64:
        return ()
    with mmap.mmap(fd, 0, prot=mmap.PROT_READ) as mm:
        if mm[:4] != b"\x7fELF":
            return ()
        spans = _data_spans(mm, size)

        def has(marker: bytes) -> bool:
            return any(mm.find(marker, a, b) >= 0 for a, b in spans)

        symbols = _defined_symbols(mm, size, {n for s in SIGNATURES for n in s.symbols})
        out = []
        for sig in SIGNATURES:
            marks: list[bytes] = []
            for i, m in enumerate(sig.markers):  # stop once `needed` can no longer be reached
                if len(marks) + len(sig.markers) - i < sig.needed:
                    break
                if has(m):
                    marks.append(m)
            syms = [n for n in sig.symbols if n in symbols]
            # A defined symbol alone proves nothing for a family that has messages: heaptrack's
            # preload defines mi_malloc to intercept it. It is evidence only where no string exists.
            if (len(marks) >= sig.needed) if sig.markers else syms:
                cpython = (
                    sig.family == "mimalloc"
                    and has(b"PYTHONMALLOC")
                    and has(b"pymalloc")
                    and not has(b"free-threading build")
                )
                out.append(
                    Finding(
                        sig.family,
                        tuple(m.decode("latin-1").strip() for m in marks) + tuple(syms),
                        "PYTHONMALLOC" if cpython else None,
                    )
                )
        return tuple(out)


_CACHE: OrderedDict[tuple[int, int, int, int], tuple[Finding, ...]] = OrderedDict()
_CACHE_SIZE = 4096


def scan_path(path: str, inode: int | None = None) -> tuple[Finding, ...] | None:
    """Findings for one file, read once per (device, inode, size, mtime): a later verification
    costs an open and an fstat (size and mtime guard against an inode reused by a rebuilt file).
    None when it cannot be read or is not the expected inode (the caller then tries another way)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if inode is not None and st.st_ino != inode:
            return None
        if not stat.S_ISREG(st.st_mode):
            return ()
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
        try:
            result = scan_file(fd)
        except (OSError, ValueError, struct.error):
            return None
        _CACHE[key] = result
        if len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
        return result
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Embedded:
    """An allocator found inside one mapped object of a process."""

    family: str
    what: str
    object_path: str
    is_executable: bool
    evidence: tuple[str, ...]

    @property
    def where(self) -> str:
        return "the executable" if self.is_executable else os.path.basename(self.object_path)


def _openers(pid: int, path: str, span: str | None) -> list[str]:
    """Ways to open the very file a process maps, also across mount namespaces or after replacement."""
    out = [f"/proc/{pid}/map_files/{span}"] if span else []
    return out + [f"/proc/{pid}/root{path}", path]


def _environ(pid: int) -> dict[str, str]:
    """The environment a process started with, PYTHONMALLOC="" when unset. Empty when it cannot be
    read: the variable is then absent and a dormant allocator counts (no false "verified")."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    env = dict(kv.split(b"=", 1) for kv in raw.split(b"\0") if b"=" in kv)
    values = {k.decode("latin-1"): v.decode("latin-1") for k, v in env.items()}
    return {"PYTHONMALLOC": "", **values}  # unset is the default: not selected


def scan_process(pid: int, mappings, skip) -> list[Embedded]:
    """Allocators embedded in the executable or any mapped object of pid. `mappings` are
    allocators.library.Mapping items; `skip(mapping)` says which to leave out (libc, the loader, the
    preloaded library, allocator libraries already named by their file name)."""
    try:
        exe_ino = os.stat(f"/proc/{pid}/exe").st_ino
    except OSError:
        exe_ino = None
    found: list[Embedded] = []
    environ: dict[str, str] | None = None
    for m in mappings:
        if skip(m):
            continue
        hits = None
        for opener in _openers(pid, m.path, m.span):
            hits = scan_path(opener, m.inode)
            if hits is not None:
                break
        for h in hits or ():
            if h.selected_by:
                environ = _environ(pid) if environ is None else environ
                if h.selected_by in environ and not environ[h.selected_by].startswith(h.family):
                    continue  # compiled in, not selected: the process does not use it
            found.append(Embedded(h.family, h.what, m.path, m.inode == exe_ino, h.evidence))
    return found
