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

from .errors import UserError

MIMALLOC_OPTIONS = (
    "show_errors", "show_stats", "verbose", "eager_commit", "arena_eager_commit", "purge_decommits",
    "allow_large_os_pages", "large_os_pages", "reserve_huge_os_pages", "reserve_huge_os_pages_at", "reserve_os_memory",
    "segment_cache", "page_reset", "abandoned_page_purge", "abandoned_page_reset", "segment_reset", "eager_commit_delay",
    "purge_delay", "reset_delay", "reset_decommits", "use_numa_nodes", "disallow_os_alloc", "limit_os_alloc", "os_tag",
    "max_errors", "max_warnings", "max_segment_reclaim", "destroy_on_exit", "arena_reserve", "arena_purge_mult",
    "purge_extend_delay", "abandoned_reclaim_on_free", "disallow_arena_alloc", "retry_on_oom", "visit_abandoned",
    "guarded_min", "guarded_max", "guarded_precise", "guarded_sample_rate", "guarded_sample_seed",
    "target_segments_per_thread", "generic_collect", "page_reclaim_on_free", "page_full_retain", "page_max_candidates",
    "max_vabits", "pagemap_commit", "page_commit_on_demand", "page_max_reclaim", "page_cross_thread_max_reclaim",
    "allow_thp", "minimal_purge_size", "arena_max_object_size", "eager_region_commit", "allow_decommit",
    "decommit_delay", "decommit_extend_delay", "cache_reset", "os_tag", "purge_extend_delay",
)
JEMALLOC_CONF_KEYS = (
    "abort", "abort_conf", "cache_oblivious", "confirm_conf", "metadata_thp", "trust_madvise", "retain", "dss",
    "narenas", "percpu_arena", "oversize_threshold", "background_thread", "max_background_threads",
    "dirty_decay_ms", "muzzy_decay_ms", "lg_extent_max_active_fit", "stats_print", "stats_print_opts",
    "stats_interval", "stats_interval_opts", "junk", "zero", "utrace", "xmalloc", "tcache", "tcache_max",
    "lg_tcache_max", "tcache_nslots_small_min", "tcache_nslots_small_max", "tcache_nslots_large",
    "lg_tcache_nslots_mul", "tcache_gc_incr_bytes", "tcache_gc_delay_bytes", "lg_tcache_flush_small_div",
    "lg_tcache_flush_large_div", "thp", "hpa", "hpa_slab_max_alloc", "hpa_hugification_threshold",
    "hpa_dirty_mult", "hpa_sec_nshards", "prof", "prof_prefix", "prof_active", "prof_thread_active_init",
    "lg_prof_sample", "lg_prof_interval", "prof_gdump", "prof_final", "prof_leak", "prof_accum", "bin_shards",
    "slab_sizes", "experimental_infallible_new", "san_guard_small", "san_guard_large", "percpu_arena",
    "mutex_max_spin", "lg_san_uaf_align", "process_madvise_max_batch", "disable_large_size_classes",
)
GLIBC_TUNABLES = (
    "glibc.malloc.arena_max", "glibc.malloc.arena_test", "glibc.malloc.check", "glibc.malloc.hugetlb",
    "glibc.malloc.mmap_max", "glibc.malloc.mmap_threshold", "glibc.malloc.mxfast", "glibc.malloc.perturb",
    "glibc.malloc.tcache_count", "glibc.malloc.tcache_max", "glibc.malloc.tcache_unsorted_limit",
    "glibc.malloc.top_pad", "glibc.malloc.trim_threshold", "glibc.mem.tagging",
)
GLIBC_ENV = ("MALLOC_ARENA_MAX", "MALLOC_ARENA_TEST", "MALLOC_CHECK_", "MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_",
             "MALLOC_PERTURB_", "MALLOC_TOP_PAD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")
TCMALLOC_ENV = (
    "TCMALLOC_RELEASE_RATE", "TCMALLOC_MAX_TOTAL_THREAD_CACHE_BYTES", "TCMALLOC_AGGRESSIVE_DECOMMIT",
    "TCMALLOC_SAMPLE_PARAMETER", "TCMALLOC_HEAP_LIMIT_MB", "TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD",
    "TCMALLOC_SKIP_SBRK", "TCMALLOC_SKIP_MMAP", "TCMALLOC_TRANSFER_NUM_OBJ", "TCMALLOC_OVERRIDE_PAGESIZE",
    "TCMALLOC_MEMFS_MALLOC_PATH", "TCMALLOC_MEMFS_LIMIT_MB", "TCMALLOC_MEMFS_ABORT_ON_FAIL", "TCMALLOC_MEMFS_MAP_PRIVATE",
    "TCMALLOC_MEMFS_DISABLE_FALLBACK", "TCMALLOC_DEBUG", "TCMALLOC_PAGE_FENCE", "TCMALLOC_MAX_FREE_QUEUE_SIZE",
)
# Which environment names belong to which family (a prefix or an exact name).
FAMILY_OF_KEY = [(re.compile(r"^MIMALLOC_"), "mimalloc"), (re.compile(r"^(MALLOC_CONF|JE_MALLOC_CONF|_RJEM_MALLOC_CONF)$"), "jemalloc"),
                 (re.compile(r"^TCMALLOC_"), "tcmalloc"), (re.compile(r"^(GLIBC_TUNABLES|MALLOC_[A-Z_]+_|MALLOC_ARENA_(MAX|TEST))$"), "glibc")]


@cache
def _library_strings(path: str) -> bytes:
    return Path(path).read_bytes()


def _present(names: tuple[str, ...], library: str | None) -> list[str]:
    if not library:
        return sorted(set(names))
    blob = _library_strings(library)
    return sorted({n for n in names if n.encode() in blob})


def validate(env: dict[str, str], family: str | None, library: str | None, group: str) -> None:
    """Raise UserError for a tunable the group's allocator does not know."""
    fam = family or "glibc"
    for key, value in env.items():
        owner = next((f for rx, f in FAMILY_OF_KEY if rx.match(key)), None)
        if owner is None:
            continue                      # the program's own environment: not ours to judge
        if owner == "glibc" and fam != "glibc" and key != "GLIBC_TUNABLES":
            raise UserError(f"group {group!r}: {key} tunes glibc malloc, but the group runs {fam}", "remove it or change the allocator")
        if owner not in (fam, "glibc"):
            raise UserError(f"group {group!r}: {key} is a {owner} option, but the group runs {fam}", "remove it or change the allocator")
        if owner == "mimalloc":
            name = key.removeprefix("MIMALLOC_").lower()
            known = _present(MIMALLOC_OPTIONS, library)
            if name not in known:
                raise UserError(f"group {group!r}: {key} is not an option of this mimalloc",
                                "known: " + ", ".join("MIMALLOC_" + k.upper() for k in known))
        elif owner == "jemalloc":
            known = _present(JEMALLOC_CONF_KEYS, library)
            for item in filter(None, value.split(",")):
                k = item.split(":", 1)[0].strip()
                if ":" not in item or k not in known:
                    raise UserError(f"group {group!r}: {key} entry {item!r} is not a known jemalloc option (key:value)",
                                    "known: " + ", ".join(known))
        elif owner == "tcmalloc":
            known = _present(TCMALLOC_ENV, library)
            if key not in known:
                raise UserError(f"group {group!r}: {key} is not a known gperftools option", "known: " + ", ".join(known))
        elif key == "GLIBC_TUNABLES":
            for item in filter(None, value.split(":")):
                k = item.split("=", 1)[0]
                if k.startswith("glibc.malloc.") and k not in GLIBC_TUNABLES:
                    raise UserError(f"group {group!r}: GLIBC_TUNABLES names unknown tunable {k}",
                                    "known: " + ", ".join(t for t in GLIBC_TUNABLES if t.startswith("glibc.malloc.")))
        elif key not in GLIBC_ENV:
            raise UserError(f"group {group!r}: {key} is not a glibc malloc variable", "known: " + ", ".join(GLIBC_ENV))
