"""Allocator tunables passed through a group's environment, validated before anything runs.

An unknown key is an error that lists the known ones, because a misspelt MIMALLOC_PURGE_DELAY is
silently ignored by the allocator and would make two groups that "differ in tunables" identical.
For mimalloc and jemalloc the known names are the candidates below that appear as strings in the
very library being preloaded, so an option a given version does not have is refused too.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import NamedTuple

from ..common.errors import UserError
from .library import version_key

MIMALLOC_OPTIONS = (
    "show_errors",
    "show_stats",
    "verbose",
    "eager_commit",
    "arena_eager_commit",
    "purge_decommits",
    "allow_large_os_pages",
    "large_os_pages",
    "reserve_huge_os_pages",
    "reserve_huge_os_pages_at",
    "reserve_os_memory",
    "segment_cache",
    "page_reset",
    "abandoned_page_purge",
    "abandoned_page_reset",
    "segment_reset",
    "eager_commit_delay",
    "purge_delay",
    "reset_delay",
    "reset_decommits",
    "use_numa_nodes",
    "disallow_os_alloc",
    "limit_os_alloc",
    "os_tag",
    "max_errors",
    "max_warnings",
    "max_segment_reclaim",
    "destroy_on_exit",
    "arena_reserve",
    "arena_purge_mult",
    "purge_extend_delay",
    "abandoned_reclaim_on_free",
    "disallow_arena_alloc",
    "retry_on_oom",
    "visit_abandoned",
    "guarded_min",
    "guarded_max",
    "guarded_precise",
    "guarded_sample_rate",
    "guarded_sample_seed",
    "target_segments_per_thread",
    "generic_collect",
    "page_reclaim_on_free",
    "page_full_retain",
    "page_max_candidates",
    "max_vabits",
    "pagemap_commit",
    "page_commit_on_demand",
    "page_max_reclaim",
    "page_cross_thread_max_reclaim",
    "allow_thp",
    "minimal_purge_size",
    "arena_max_object_size",
    "eager_region_commit",
    "allow_decommit",
    "decommit_delay",
    "decommit_extend_delay",
    "cache_reset",
    "os_tag",
    "purge_extend_delay",
)
JEMALLOC_CONF_KEYS = (
    "abort",
    "abort_conf",
    "cache_oblivious",
    "confirm_conf",
    "metadata_thp",
    "trust_madvise",
    "retain",
    "dss",
    "narenas",
    "percpu_arena",
    "oversize_threshold",
    "background_thread",
    "max_background_threads",
    "dirty_decay_ms",
    "muzzy_decay_ms",
    "lg_extent_max_active_fit",
    "stats_print",
    "stats_print_opts",
    "stats_interval",
    "stats_interval_opts",
    "junk",
    "zero",
    "utrace",
    "xmalloc",
    "tcache",
    "tcache_max",
    "lg_tcache_max",
    "tcache_nslots_small_min",
    "tcache_nslots_small_max",
    "tcache_nslots_large",
    "lg_tcache_nslots_mul",
    "tcache_gc_incr_bytes",
    "tcache_gc_delay_bytes",
    "lg_tcache_flush_small_div",
    "lg_tcache_flush_large_div",
    "thp",
    "hpa",
    "hpa_slab_max_alloc",
    "hpa_hugification_threshold",
    "hpa_dirty_mult",
    "hpa_sec_nshards",
    "prof",
    "prof_prefix",
    "prof_active",
    "prof_thread_active_init",
    "lg_prof_sample",
    "lg_prof_interval",
    "prof_gdump",
    "prof_final",
    "prof_leak",
    "prof_accum",
    "bin_shards",
    "slab_sizes",
    "experimental_infallible_new",
    "san_guard_small",
    "san_guard_large",
    "percpu_arena",
    "mutex_max_spin",
    "lg_san_uaf_align",
    "process_madvise_max_batch",
    "disable_large_size_classes",
)
GLIBC_TUNABLES = (
    "glibc.malloc.arena_max",
    "glibc.malloc.arena_test",
    "glibc.malloc.check",
    "glibc.malloc.hugetlb",
    "glibc.malloc.mmap_max",
    "glibc.malloc.mmap_threshold",
    "glibc.malloc.mxfast",
    "glibc.malloc.perturb",
    "glibc.malloc.tcache_count",
    "glibc.malloc.tcache_max",
    "glibc.malloc.tcache_unsorted_limit",
    "glibc.malloc.top_pad",
    "glibc.malloc.trim_threshold",
    "glibc.mem.tagging",
)
GLIBC_ENV = (
    "MALLOC_ARENA_MAX",
    "MALLOC_ARENA_TEST",
    "MALLOC_CHECK_",
    "MALLOC_MMAP_MAX_",
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_PERTURB_",
    "MALLOC_TOP_PAD_",
    "MALLOC_TRIM_THRESHOLD_",
    "GLIBC_TUNABLES",
)
TCMALLOC_ENV = (
    "TCMALLOC_RELEASE_RATE",
    "TCMALLOC_MAX_TOTAL_THREAD_CACHE_BYTES",
    "TCMALLOC_AGGRESSIVE_DECOMMIT",
    "TCMALLOC_SAMPLE_PARAMETER",
    "TCMALLOC_HEAP_LIMIT_MB",
    "TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD",
    "TCMALLOC_SKIP_SBRK",
    "TCMALLOC_SKIP_MMAP",
    "TCMALLOC_TRANSFER_NUM_OBJ",
    "TCMALLOC_OVERRIDE_PAGESIZE",
    "TCMALLOC_MEMFS_MALLOC_PATH",
    "TCMALLOC_MEMFS_LIMIT_MB",
    "TCMALLOC_MEMFS_ABORT_ON_FAIL",
    "TCMALLOC_MEMFS_MAP_PRIVATE",
    "TCMALLOC_MEMFS_DISABLE_FALLBACK",
    "TCMALLOC_DEBUG",
    "TCMALLOC_PAGE_FENCE",
    "TCMALLOC_MAX_FREE_QUEUE_SIZE",
)


# ---- value types: what each option's parser reads, checked before anything runs ----------------------
# A value of the wrong type is refused by name: the allocator would only warn inside the measured
# process (mimalloc, jemalloc) or ignore it silently (glibc), and the group would run on defaults.
# mimalloc (options.c): every option is a C long read with strtol in base 10, or one of the words
# 1/true/yes/on, 0/false/no/off (any case; empty is on; what a word is depends on the version:
# MIMALLOC_WHOLE_WORDS_FROM); its sizes in KiB also take a unit (K, M, G, T, with iB or B). jemalloc
# (ctl's CONF_HANDLE_*): booleans are exactly true/false, numbers malloc_strtoumax's (base 0: 0x
# hex), a few options name a mode. glibc's tunables and their MALLOC_* aliases are
# integers in base 0. Ranges (and tcmalloc's values, and options not listed) stay with the
# allocator's own verdict (validate_values).
class ValueType(NamedTuple):
    pattern: re.Pattern
    takes: str  # "takes ..." in the refusal
    example: str


def _type(regex: str, takes: str, example: str, flags: int = 0) -> ValueType:
    return ValueType(re.compile(regex, flags), takes, example)


_WORDS = "1|0|true|false|yes|no|on|off"
_BASE0 = r"\s*[+-]?(0[xX][0-9a-fA-F]+|[0-9]+)"
MIMALLOC_NUMBER = _type(rf"\s*[+-]?[0-9]+|{_WORDS}", "a whole number, or on/off, true/false, yes/no", "1", re.I)
MIMALLOC_SIZE = _type(
    rf"\s*[+-]?[0-9]+([KMGT](IB|B)?)?|{_WORDS}", "a size in KiB, or with a unit such as 512MiB or 1GiB", "1GiB", re.I
)
MIMALLOC_SIZES_KIB = frozenset({"reserve_os_memory", "arena_reserve", "minimal_purge_size", "arena_max_object_size"})
JEMALLOC_BOOL = _type("true|false", "true or false", "true")
JEMALLOC_NUMBER = _type(_BASE0, "a whole number", "0")
GLIBC_NUMBER = _type(_BASE0, "a whole number (0x... for hexadecimal)", "2")


# mimalloc's on/off words, upper-cased (mi_option_init). Before 1.9.9, 2.3.1 and 3.3.1 a value was
# on when it was any part of _MIMALLOC_ON (strstr) and off when any part of _MIMALLOC_OFF, so "E",
# "N" and ";" were on and "F" or "OF" off; from those versions on only the whole words count and a
# part is invalid (warned about, the option left at its default; upstream issue #1271). The whole
# words and numbers read alike in every version: a part of a word is refused by name (the same file
# would mean on under one version and the default under the next), see _refuse_word_part.
_MIMALLOC_ON, _MIMALLOC_OFF = "1;TRUE;YES;ON", "0;FALSE;NO;OFF"
MIMALLOC_WHOLE_WORDS_FROM = {1: "1.9.9", 2: "2.3.1", 3: "3.3.1"}  # first version of each major


def mimalloc_reads_word_parts(version: str | None) -> bool | None:
    """Whether this mimalloc version reads a part of an on/off word ("E", "OF") as on/off (True)
    or only whole words (False); None when the version is not known."""
    key = version_key(version or "")
    if not key:
        return None
    first = MIMALLOC_WHOLE_WORDS_FROM.get(key[0])
    if first is None:  # a later major reads whole words; an earlier one is not mimalloc's
        return False if key[0] > max(MIMALLOC_WHOLE_WORDS_FROM) else None
    return key < version_key(first)


def _choice(*names: str) -> ValueType:
    return _type("|".join(names), "one of " + ", ".join(names), names[0])


JEMALLOC_TYPES = {
    **dict.fromkeys(
        (
            "abort",
            "abort_conf",
            "cache_oblivious",
            "confirm_conf",
            "trust_madvise",
            "retain",
            "background_thread",
            "stats_print",
            "utrace",
            "xmalloc",
            "tcache",
            "hpa",
            "prof",
            "prof_active",
            "prof_thread_active_init",
            "prof_gdump",
            "prof_final",
            "prof_leak",
            "prof_accum",
            "zero",
            "experimental_infallible_new",
            "disable_large_size_classes",
        ),
        JEMALLOC_BOOL,
    ),
    **dict.fromkeys(
        (
            "narenas",
            "oversize_threshold",
            "max_background_threads",
            "dirty_decay_ms",
            "muzzy_decay_ms",
            "lg_extent_max_active_fit",
            "stats_interval",
            "tcache_max",
            "lg_tcache_max",
            "tcache_nslots_small_min",
            "tcache_nslots_small_max",
            "tcache_nslots_large",
            "lg_tcache_nslots_mul",
            "tcache_gc_incr_bytes",
            "tcache_gc_delay_bytes",
            "lg_tcache_flush_small_div",
            "lg_tcache_flush_large_div",
            "hpa_slab_max_alloc",
            "hpa_hugification_threshold",
            "hpa_sec_nshards",
            "lg_prof_sample",
            "lg_prof_interval",
            "san_guard_small",
            "san_guard_large",
            "mutex_max_spin",
            "lg_san_uaf_align",
            "process_madvise_max_batch",
        ),
        JEMALLOC_NUMBER,
    ),
    "hpa_dirty_mult": _type(r"-1|[0-9]+(\.[0-9]*)?", "a fraction such as 0.25, or -1", "0.25"),
    "dss": _choice("disabled", "primary", "secondary"),
    "percpu_arena": _choice("disabled", "percpu", "phycpu"),
    "thp": _choice("default", "always", "never"),
    "metadata_thp": _choice("disabled", "auto", "always"),
    "junk": _choice("true", "false", "alloc", "free"),
}


def value_type(family: str, option: str) -> ValueType | None:
    """The type of `option`'s value ("purge_delay", "dirty_decay_ms", "glibc.malloc.arena_max"),
    or None where alloclab does not know it (the allocator judges those)."""
    if family == "mimalloc":
        return MIMALLOC_SIZE if option in MIMALLOC_SIZES_KIB else MIMALLOC_NUMBER
    if family == "jemalloc":
        return JEMALLOC_TYPES.get(option)
    if family == "glibc" and (option.startswith("glibc.malloc.") or option == "glibc.mem.tagging"):
        return GLIBC_NUMBER
    return None


def _refuse_word_part(option: str, value: str, written_as: str, group: str, version: str | None) -> None:
    """UserError for a mimalloc value that is a part of an on/off word but not a whole one ("E",
    "OF"), naming how this version reads it; nothing for any other value."""
    upper = value.upper()
    on, off = upper in _MIMALLOC_ON, upper in _MIMALLOC_OFF
    if not value or not (on or off):
        return
    word, reading = (_MIMALLOC_ON, "on (1)") if on else (_MIMALLOC_OFF, "off (0)")
    firsts = ", ".join(MIMALLOC_WHOLE_WORDS_FROM.values())
    parts = mimalloc_reads_word_parts(version)
    if parts:
        first = MIMALLOC_WHOLE_WORDS_FROM[version_key(version)[0]]
        rule = (
            f"mimalloc {version} reads any part of {word} as {reading}, so it would take this as {reading} "
            f"(from {first} on, mimalloc ignores it)"
        )
    elif parts is False:
        rule = (
            f"mimalloc {version} reads only whole words (1/true/yes/on, 0/false/no/off) and would ignore it, "
            f"running on its default (before {firsts}, mimalloc read it as {reading})"
        )
    else:
        rule = (
            f"mimalloc before {firsts} reads it as {reading} (any part of {word}), later versions ignore it, "
            "and this library's version is not known"
        )
    raise UserError(
        f"group {group!r}: {written_as}{value} is only a part of an on/off word: {rule}",
        f"write the whole word: {written_as}{'1' if on else '0'} (or {'on, true, yes' if on else 'off, false, no'})",
    )


def _refuse_wrong_type(
    family: str, option: str, value: str, written_as: str, group: str, within: str = "", version: str | None = None
) -> None:
    """UserError for a value `option` cannot take; `written_as`: what precedes the value
    ("MIMALLOC_PURGE_DELAY=", "dirty_decay_ms:"), `within`: the variable holding it, `version`:
    the library's (mimalloc's on/off words depend on it)."""
    kind = value_type(family, option)
    if kind is None or kind.pattern.fullmatch(value) or (family == "mimalloc" and value == ""):  # mimalloc: "" is on
        return
    if family == "mimalloc":
        _refuse_word_part(option, value, written_as, group, version)
    raise UserError(
        f"group {group!r}: {within}{written_as}{value} is not a valid value: {option} takes {kind.takes}",
        f"give e.g. {written_as}{kind.example}; {family} would ignore it and run on its default",
    )


# Which environment names belong to which family (a prefix or an exact name).
FAMILY_OF_KEY = [
    (re.compile(r"^MIMALLOC_"), "mimalloc"),
    (re.compile(r"^(MALLOC_CONF|JE_MALLOC_CONF|_RJEM_MALLOC_CONF)$"), "jemalloc"),
    (re.compile(r"^TCMALLOC_"), "tcmalloc"),
    (re.compile(r"^(GLIBC_TUNABLES|MALLOC_[A-Z_]+_|MALLOC_ARENA_(MAX|TEST))$"), "glibc"),
]


@cache
def _library_strings(path: str) -> bytes:
    return Path(path).read_bytes()


def _present(names: tuple[str, ...], library: str | None) -> list[str]:
    if not library:
        return sorted(set(names))
    blob = _library_strings(library)
    return sorted({n for n in names if n.encode() in blob})


# The candidate option names per family: the ones a library knows are those found in its bytes.
CANDIDATES = {"mimalloc": MIMALLOC_OPTIONS, "jemalloc": JEMALLOC_CONF_KEYS, "tcmalloc": TCMALLOC_ENV}


def known_options(family: str | None, library: str) -> list[str]:
    """The options of `family` that the library at `library` knows (its own strings); [] for a
    family whose options are not read from its library."""
    names = CANDIDATES.get(family or "")
    return _present(names, library) if names else []


def validate(
    env: dict[str, str], family: str | None, library: str | None, group: str, version: str | None = None
) -> None:
    """Raise UserError for a tunable the group's allocator does not know, or a value of the wrong
    type; `version`: the library's, as it reports it (mimalloc's on/off words depend on it)."""
    fam = family or "glibc"
    for key, value in env.items():
        owner = next((f for rx, f in FAMILY_OF_KEY if rx.match(key)), None)
        if owner is None:
            continue  # the program's own environment: not ours to judge
        if owner == "glibc" and fam != "glibc" and key != "GLIBC_TUNABLES":
            raise UserError(
                f"group {group!r}: {key} tunes glibc malloc, but the group runs {fam}",
                "remove it or change the allocator",
            )
        if owner not in (fam, "glibc"):
            raise UserError(
                f"group {group!r}: {key} is a {owner} option, but the group runs {fam}",
                "remove it or change the allocator",
            )
        if owner == "mimalloc":
            name = key.removeprefix("MIMALLOC_").lower()
            known = _present(MIMALLOC_OPTIONS, library)
            if name not in known:
                raise UserError(
                    f"group {group!r}: {key} is not an option of this mimalloc",
                    "known: " + ", ".join("MIMALLOC_" + k.upper() for k in known),
                )
            _refuse_wrong_type("mimalloc", name, value, f"{key}=", group, version=version)
        elif owner == "jemalloc":
            known = _present(JEMALLOC_CONF_KEYS, library)
            for item in filter(None, value.split(",")):
                k = item.split(":", 1)[0].strip()
                if ":" not in item or k not in known:
                    raise UserError(
                        f"group {group!r}: {key} entry {item!r} is not a known jemalloc option (key:value)",
                        "known: " + ", ".join(known),
                    )
                _refuse_wrong_type("jemalloc", k, item.split(":", 1)[1], f"{k}:", group, f"{key} entry ")
        elif owner == "tcmalloc":
            known = _present(TCMALLOC_ENV, library)
            if key not in known:
                raise UserError(
                    f"group {group!r}: {key} is not a known gperftools option", "known: " + ", ".join(known)
                )
        elif key == "GLIBC_TUNABLES":
            for item in filter(None, value.split(":")):
                k = item.split("=", 1)[0]
                if k.startswith("glibc.malloc.") and k not in GLIBC_TUNABLES:
                    raise UserError(
                        f"group {group!r}: GLIBC_TUNABLES names unknown tunable {k}",
                        "known: " + ", ".join(t for t in GLIBC_TUNABLES if t.startswith("glibc.malloc.")),
                    )
                _refuse_wrong_type("glibc", k, item.partition("=")[2], f"{k}=", group, "GLIBC_TUNABLES entry ")
        elif key not in GLIBC_ENV:
            raise UserError(f"group {group!r}: {key} is not a glibc malloc variable", "known: " + ", ".join(GLIBC_ENV))
        else:
            _refuse_wrong_type("glibc", GLIBC_ALIASES[key], value, f"{key}=", group)


# ---- values: asked of the allocator itself ------------------------------------------------------------
# Names are checked above; values only the allocator can judge. A probe process runs under the
# group's allocator with the group's allocator settings, and what the allocator says about them is
# the verdict: jemalloc prints "<jemalloc>: Invalid conf value: ..." for MALLOC_CONF, mimalloc
# "mimalloc: warning: environment option ... has an invalid value." (shown with
# MIMALLOC_SHOW_ERRORS=1), and glibc, which ignores a malformed or out-of-range tunable silently,
# is asked through its loader (`ld.so --list-tunables` under the same environment) which value it
# took: a tunable whose effective value is not the one asked for was ignored.

JEMALLOC_COMPLAINT = re.compile(r"^<jemalloc>: (Invalid conf|Malformed conf|Conf string ends)")
MIMALLOC_COMPLAINT = re.compile(r"^mimalloc: (warning|error): environment option .*(invalid|unknown)", re.I)
TUNABLE_LINE = re.compile(r"^(glibc\.[\w.]+): (\S+) \(min: (\S+), max: (\S+)\)")
# The environment aliases glibc maps onto its tunables (elf/dl-tunables.list).
GLIBC_ALIASES = {
    "MALLOC_ARENA_MAX": "glibc.malloc.arena_max",
    "MALLOC_ARENA_TEST": "glibc.malloc.arena_test",
    "MALLOC_CHECK_": "glibc.malloc.check",
    "MALLOC_MMAP_MAX_": "glibc.malloc.mmap_max",
    "MALLOC_MMAP_THRESHOLD_": "glibc.malloc.mmap_threshold",
    "MALLOC_PERTURB_": "glibc.malloc.perturb",
    "MALLOC_TOP_PAD_": "glibc.malloc.top_pad",
    "MALLOC_TRIM_THRESHOLD_": "glibc.malloc.trim_threshold",
}


def _owned(env: dict[str, str]) -> dict[str, str]:
    """The group's variables that belong to an allocator (the program's own are left out)."""
    return {k: v for k, v in env.items() if any(rx.match(k) for rx, _ in FAMILY_OF_KEY)}


def loader_path() -> str | None:
    """The dynamic loader this machine's programs use (PT_INTERP of a system program)."""
    import struct

    for exe in ("/bin/sh", "/usr/bin/env"):
        try:
            data = Path(exe).read_bytes()
        except OSError:
            continue
        if data[:4] != b"\x7fELF" or data[4] != 2:
            continue
        (phoff,) = struct.unpack_from("<Q", data, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
        for i in range(phnum):
            p_type, _flags, off, _va, _pa, filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
            if p_type == 3:  # PT_INTERP
                return data[off : off + filesz].rstrip(b"\0").decode()
    return None


def _int(text: str) -> int | None:
    """The integer glibc reads (base 0, as strtoul: 0x hexadecimal, a leading 0 octal), or None."""
    try:
        return int(text, 8) if re.fullmatch(r"\s*[+-]?0[0-7]+\s*", text) else int(text, 0)
    except ValueError:
        return None


def glibc_effective(env: dict[str, str]) -> dict[str, tuple[str, str, str]]:
    """{tunable: (effective value, min, max)} as glibc's loader reads this environment."""
    import subprocess

    from ..common import settings

    ld = loader_path()
    if not ld:
        return {}
    run_env = {**settings.environment_without_preload(), **env}
    proc = subprocess.run([ld, "--list-tunables"], env=run_env, capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        return {}  # a glibc before 2.33 has no --list-tunables: values are not checked
    return {m[1]: (m[2], m[3], m[4]) for m in map(TUNABLE_LINE.match, proc.stdout.splitlines()) if m}


def _glibc_requested(env: dict[str, str]) -> list[tuple[str, str, str]]:
    """(as written, tunable, requested value) for GLIBC_TUNABLES items and the MALLOC_* aliases."""
    out = []
    for item in filter(None, env.get("GLIBC_TUNABLES", "").split(":")):
        name, _, value = item.partition("=")
        out.append((f"GLIBC_TUNABLES {item}", name, value))
    for key, tunable in GLIBC_ALIASES.items():
        if key in env:
            out.append((f"{key}={env[key]}", tunable, env[key]))
    return out


def _glibc_problems(env: dict[str, str]) -> list[str]:
    requested = _glibc_requested(env)
    if not requested:
        return []
    effective = glibc_effective(env)
    problems = []
    for written, tunable, value in requested:
        if tunable not in effective:
            continue  # not a tunable this glibc lists (the name check above already ran)
        got, lo, hi = effective[tunable]
        want = _int(value)
        if want is None or want != _int(got):
            problems.append(f"glibc ignored {written}: its loader reports {tunable}: {got} (min: {lo}, max: {hi})")
    return problems


def allocator_complaints(env: dict[str, str], family: str | None, library: str | None) -> list[str]:
    """What the allocator itself says about the group's settings (empty: it took them all)."""
    import subprocess

    from ..common import settings
    from ..native import build

    owned = _owned(env)
    if not owned:
        return []
    fam = family or "glibc"
    problems = _glibc_problems(owned)
    if fam in ("jemalloc", "mimalloc") and library:
        run_env = {**settings.environment_without_preload(), **owned, "LD_PRELOAD": library}
        if fam == "mimalloc":
            run_env.setdefault("MIMALLOC_SHOW_ERRORS", "1")
        proc = subprocess.run([str(build.program("probe"))], env=run_env, capture_output=True, text=True, timeout=30)
        pattern = JEMALLOC_COMPLAINT if fam == "jemalloc" else MIMALLOC_COMPLAINT
        problems += [ln.strip() for ln in proc.stderr.splitlines() if pattern.match(ln.strip())]
    return problems


def validate_values(env: dict[str, str], family: str | None, library: str | None, group: str) -> None:
    """Raise UserError when the group's allocator rejects one of its settings, in its own words."""
    problems = allocator_complaints(env, family, library)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise UserError(
            f"group {group!r}: the allocator rejects a setting: {problems[0]}{more}",
            "fix the value (see the allocator's documentation of that option) or remove it",
        )
