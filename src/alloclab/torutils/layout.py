"""The TorUtils file layout both directions share: file and column names, and the `alloclab`
section of an export's experiment.json."""

from __future__ import annotations

import re

MEMORY_COLUMNS = [
    "timestamp",
    "server",
    "type",
    "fingerprint",
    "nickname",
    "group",
    "rss_kb",
    "vmsize_kb",
    "hwm_kb",
    "frag_ratio",
    "count",
    "total_kb",
    "avg_kb",
    "min_kb",
    "max_kb",
]
# alloclab's own figures, after the TorUtils columns (docs/reference/store.md); empty where not measured
# (unix_time: the exact time in seconds, which `timestamp` gives to the microsecond)
EXTRA_COLUMNS = [
    "pss_kb",
    "uss_kb",
    "anon_kb",
    "swap_kb",
    "lazyfree_kb",
    "cgroup_kb",
    "cgroup_peak_kb",
    "live_bytes",
    "ops",
    "cpu_s",
    "nprocs",
    "phase",
    "tier",
    "unix_time",
]
EVENT_COLUMNS = ["timestamp", "event_type", "description", "group"]
EVENT_EXTRA_COLUMNS = ["replica", "unix_time"]
DIAG_COLUMNS = [
    "date",
    "time",
    "hostname",
    "tor_version",
    "os_release",
    "kernel",
    "allocator",
    "mem_total_mb",
    "mem_free_mb",
    "mem_available_mb",
    "mem_cached_mb",
    "swap_total_mb",
    "swap_free_mb",
    "tcp_established",
    "tcp_total",
    "fd_limit",
    "relay_count",
    "relay_total_mb",
    "relay_avg_mb",
]
DIAG_EXTRA_COLUMNS = [
    "unix_time",
    "mem_total_kb",
    "mem_available_kb",
    "swap_total_kb",
    "swap_free_kb",
    "load1",
    "sampler_cpu_s",
]
MEMORY_FILES = ("memory_measurements.csv", "memory.csv", "measurements.csv")
_GROUP_FILE = re.compile(r"^group_([A-Za-z0-9]+)_([A-Za-z]+)(\d*)(_historical)?\.txt$")
PHASES = ("warmup", "load", "idle")
TIERS = ("cheap", "full", "imported")


EXPORT_FORMAT = 1
# meta keys an export carries: what analysis and reports read, and the run's provenance
# (tests/unit/test_exported_meta.py checks that every key the code reads is here or below)
EXPORTED_META = (
    "name",
    "experiment",
    "seed",
    "interval",
    "metric",
    "baseline",
    "phases",
    "replicas_per_group",
    "start_order",
    "smaps_budget",
    "host",
    "kernel",
    "glibc",
    "cpu",
    "ncpu",
    "mem_total_kb",
    "os",
    "alloclab_version",
    "python",
    "cgroups",
    "started_at",
    "ended_at",
    "end_reason",
    "source",
    "replicas_in_several_groups",
    "unlisted_relays",
    "naive_timezone",
    "duplicate_timestamps",
    "fleet_main_processes",
    "original_source",
    "cut_short",
    "ticks_skipped",
    "records",
    "tor_network",
    "network_namespace",
    "hosts",
    "merged_from",
    "plan",
    "command_line",
    "introspect",
    "introspect_budget",
    "planned_warmup",
    "prometheus_url",
    "prometheus_queries",
    "prometheus_layout",
)
# meta keys an export leaves out: they name the recording machine's live processes (`recover` reads
# them to find a killed run's survivors), or the store file's own layout (an import writes its own)
NOT_EXPORTED_META = ("run_token", "runner", "schema_version")
_GROUP_FIELDS = (
    "name",
    "allocator",
    "kind",
    "library_path",
    "library_sha256",
    "family",
    "version",
    "env_json",
    "command_json",
    "is_baseline",
    "provenance_json",
    "hardening_json",
    "tunables_json",
)
_REPLICA_FIELDS = (
    "name",
    "idx",
    "start_order",
    "started_at",
    "ended_at",
    "exit_code",
    "end_kind",
    "verified",
    "verify_detail",
    "host",
    "embedded_json",
)
_PROCESS_FIELDS = (
    "pid",
    "start_ticks",
    "ppid",
    "comm",
    "cmdline",
    "first_seen",
    "last_seen",
    "verified",
    "verify_detail",
    "mapped_allocator",
)


# ---- import: the run ------------------------------------------------------------------------------

# figures a memory row may carry, in the samples table's names; absent columns are stored as NULL
SAMPLE_FIGURES = (
    "rss_kb",
    "vmsize_kb",
    "hwm_kb",
    "pss_kb",
    "uss_kb",
    "anon_kb",
    "swap_kb",
    "lazyfree_kb",
    "cgroup_kb",
    "cgroup_peak_kb",
    "live_bytes",
    "ops",
    "cpu_s",
    "nprocs",
)
SAMPLE_COLUMNS = ("t", "replica_id", "phase", "tier") + SAMPLE_FIGURES
