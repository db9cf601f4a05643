"""A stored heap-hardening record (groups.hardening_json, a build's provenance "hardening", made by
alloclab.allocators.hardening) in one line, for reports, package metadata and `alloclab allocators list`.
Reads the record only: nothing is probed, so a report shows what was measured at run time."""

from __future__ import annotations


def summary(h: dict | None) -> str:
    """One line for tables and reports, e.g. "double free: aborts; invalid free: aborts; secure 4"."""
    if not h:
        return ""
    parts = [f"double free: {h.get('double_free')}", f"invalid free: {h.get('invalid_free')}"]
    if h.get("mimalloc_secure_level") is not None:
        parts.append(f"secure level {h['mimalloc_secure_level']}")
    if h.get("jemalloc_opt_junk") not in (None, "false"):
        parts.append(f"junk {h['jemalloc_opt_junk']}")
    if h.get("jemalloc_opt_zero"):
        parts.append("zero")
    if h.get("glibc.malloc.perturb") not in (None, "0", "0x0"):
        parts.append(f"perturb {h['glibc.malloc.perturb']}")
    return "; ".join(parts)
