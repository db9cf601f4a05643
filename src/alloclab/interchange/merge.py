"""`alloclab merge H1/run H2/run ... -o RUN`: several hosts' run stores (fleet collectors, runs)
as one run, without losing what each recorded.

Each replica keeps its host (replicas.host; named HOST/NAME), its processes, verifications,
restart events and samples at the times its own host sampled them (no resampling onto a common
clock). The groups must be the same experiment's groups on every host (name, allocator, version,
library checksum, environment, baseline): a difference is refused in one line naming it. Every
source is kept as provenance (meta merged_from: path, host, source, name, seed, times, counts).
Checks run before the output exists; a failure while copying removes it.
"""

from __future__ import annotations

from pathlib import Path

from ..analysis.load import is_imported
from ..common.errors import UserError
from ..store import DB_NAME, Store, new_run_directory, resolve_run

# group fields that must agree between hosts (what makes two hosts' "jemalloc" the same treatment)
AGREE = ("allocator", "kind", "family", "version", "library_sha256", "env_json", "is_baseline")


def _host_of(store: Store, path: Path) -> str:
    hosts = {r["host"] for r in store.replicas() if r["host"]}
    if len(hosts) > 1:
        raise UserError(
            f"{path} already holds replicas of several hosts ({', '.join(sorted(hosts))})",
            "merge each host's own run store",
        )
    return hosts.pop() if hosts else store.meta().get("host") or path.resolve().name


def _check_groups(first: tuple[Path, list[dict]], other: tuple[Path, list[dict]]) -> None:
    (pa, ga), (pb, gb) = first, other
    a, b = {g["name"]: g for g in ga}, {g["name"]: g for g in gb}
    if set(a) != set(b):
        only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
        raise UserError(
            f"{pb} has other groups than {pa}: "
            + "; ".join(
                x
                for x in (
                    f"only in {pa}: {', '.join(only_a)}" if only_a else "",
                    f"only in {pb}: {', '.join(only_b)}" if only_b else "",
                )
                if x
            ),
            "merge runs of one experiment (the same plan or groups file on every host)",
        )
    for name in sorted(a):
        for key in AGREE:
            if (a[name][key] or None) != (b[name][key] or None):
                raise UserError(
                    f"group {name!r} differs between {pa} and {pb}: {key} {a[name][key]!r} against {b[name][key]!r}",
                    "merge runs of one experiment (same allocators, builds and settings on every host)",
                )


def _check_replicas(opened: list[tuple[Path, Store]], hosts: list[str]) -> None:
    """Before the output exists: every source's replicas belong to one of its groups, and no two
    sources' replicas get the same merged name (HOST/NAME). Each refusal names the source(s), not
    the output store (which would otherwise be called damaged)."""
    merged_from: dict[str, Path] = {}
    for (db, store), host in zip(opened, hosts):
        orphans = store.replica_names_without_group()
        if orphans:
            raise UserError(
                f"{db} is damaged: replica {orphans[0]!r}{f' and {len(orphans) - 1} more' if len(orphans) > 1 else ''} "
                "belongs to no group of its store",
                "restore that host's run from a backup, or merge without it",
            )
        for r in store.replicas():
            name = f"{r['host'] or host}/{r['name']}"
            if name in merged_from:
                raise UserError(
                    f"replica {name!r} of {db.parent} has the same merged name as one of {merged_from[name].parent}",
                    "give the hosts names that are not prefixes of each other's (fleet collect --host NAME)",
                )
            merged_from[name] = db


def merge_runs(sources: list[Path], out: Path, say=print) -> Path:
    if len(sources) < 2:
        raise UserError("merge needs at least two runs", "give every host's run directory, e.g. h1/run h2/run")
    dbs = [resolve_run(s) for s in sources]
    if len({d.resolve() for d in dbs}) < len(dbs):
        raise UserError("a run is given twice", "give each host's run once")
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} is a file, not a directory", "give a new directory with -o")
    if (out / DB_NAME).exists() or (out.exists() and any(out.iterdir())):
        raise UserError(f"{out} is not empty", "give a new directory with -o")
    opened = [(db, Store.open(db)) for db in dbs]
    try:
        hosts, metas, groups = [], [], []
        for db, store in opened:
            store.check_readable()  # (opened read-write: an older host's store is migrated first)
            hosts.append(_host_of(store, db.parent))
            metas.append(store.meta())
            groups.append((db.parent, store.groups()))
            if is_imported(store):
                raise UserError(
                    f"{db.parent} is imported data without alloclab's records",
                    "merge alloclab's own runs (fleet collect, run, import prometheus of alloclab's series)",
                )
        dup = sorted({h for h in hosts if hosts.count(h) > 1})
        if dup:
            raise UserError(f"host {dup[0]!r} appears in more than one run", "merge one run per host")
        _check_replicas(opened, hosts)
        for other in groups[1:]:
            _check_groups(groups[0], other)
        for key in ("metric",):
            values = {m.get(key) for m in metas}
            if len(values) > 1:
                raise UserError(
                    f"the runs differ in {key}: {', '.join(sorted(map(str, values)))}", "merge runs of one experiment"
                )
        with new_run_directory(out):
            merged = _write(out, opened, hosts, metas, groups[0][1], say)
    finally:
        for _, store in opened:
            store.close()
    return merged


def _write(
    out: Path, opened: list[tuple[Path, Store]], hosts: list[str], metas: list[dict], groups: list[dict], say
) -> Path:
    store = Store.create(out / DB_NAME, several_hosts=True)
    first = metas[0]
    provenance = []
    store.begin()
    gid = {g["name"]: store.add_group(**{k: v for k, v in g.items() if k != "id"}) for g in groups}
    store.commit()
    for (db, _), host, meta in zip(opened, hosts, metas):
        counts = store.absorb(db, host, gid)
        provenance.append(
            {
                "path": str(db.parent.resolve()),
                "host": host,
                "source": meta.get("source"),
                "name": meta.get("name"),
                "seed": meta.get("seed"),
                "started_at": meta.get("started_at"),
                "ended_at": meta.get("ended_at"),
                "end_reason": meta.get("end_reason"),
                "interval": meta.get("interval"),
                "alloclab_version": meta.get("alloclab_version"),
                "kernel": meta.get("kernel"),
                "rows": counts,
            }
        )
        say(
            f"  {host}: {counts['replicas']} replicas, {counts['samples']} samples, {counts['events']} events from {db.parent}"
        )
    starts = [float(m["started_at"]) for m in metas if m.get("started_at")]
    ends = [float(m["ended_at"]) for m in metas if m.get("ended_at")]
    intervals = [float(m["interval"]) for m in metas if m.get("interval")]
    store.begin()
    store.set_meta(
        name=first.get("name", "merged run"),
        source="merge",
        records="alloclab",
        metric=first.get("metric", "rss"),
        interval=max(intervals) if intervals else 0,
        baseline=first.get("baseline", ""),
        started_at=min(starts) if starts else None,
        ended_at=max(ends) if ends else None,
        end_reason="merged",
        hosts=sorted(hosts),
        merged_from=provenance,
        **({"seed": first["seed"]} if len({m.get("seed") for m in metas}) == 1 and first.get("seed") else {}),
        **({"phases": first["phases"]} if first.get("phases") else {}),
        **({"experiment": first["experiment"]} if first.get("experiment") else {}),
    )
    store.close()
    say(f"merged {len(hosts)} hosts ({', '.join(hosts)}) into {out}")
    return out
