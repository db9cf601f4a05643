"""Import and export in the layout of the 1AEO TorUtils memory experiments.

Export writes memory.csv (co-unified layout: a `group` column after `nickname`, one `relay` row
per replica sample and one `aggregate` row per sampling time, plus columns alloclab measures
beyond it), events.csv and diagnostics.csv. Import reads that layout, including the 5-way
variant whose groups live in groups/group_<L>_<allocator>[_historical].txt lists, into a run
store, so analysis and reports work on operators' existing data.
"""
from __future__ import annotations

import csv
import json
import re
from datetime import datetime, timezone
from pathlib import Path

from .errors import UserError
from .store import DB_NAME, Store

MEMORY_COLUMNS = ["timestamp", "server", "type", "fingerprint", "nickname", "group", "rss_kb", "vmsize_kb", "hwm_kb",
                  "frag_ratio", "count", "total_kb", "avg_kb", "min_kb", "max_kb"]
EXTRA_COLUMNS = ["pss_kb", "uss_kb", "anon_kb", "swap_kb", "cgroup_kb", "live_bytes", "ops", "cpu_s", "phase", "tier"]
EVENT_COLUMNS = ["timestamp", "event_type", "description", "group"]
DIAG_COLUMNS = ["date", "time", "hostname", "tor_version", "os_release", "kernel", "allocator", "mem_total_mb",
                "mem_free_mb", "mem_available_mb", "mem_cached_mb", "swap_total_mb", "swap_free_mb", "tcp_established",
                "tcp_total", "fd_limit", "relay_count", "relay_total_mb", "relay_avg_mb"]
MEMORY_FILES = ("memory_measurements.csv", "memory.csv", "measurements.csv")
_GROUP_FILE = re.compile(r"^group_([A-Za-z0-9]+)_([A-Za-z]+)(\d*)(_historical)?\.txt$")


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


# ---- export -------------------------------------------------------------------------------------

def export_csv(run: str | Path, out_dir: Path) -> list[Path]:
    store = Store.open(run)
    meta = store.meta()
    host = meta.get("host", "")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create {out_dir}: {exc.strerror}", "choose a writable directory") from None
    rows = store.query("SELECT s.*, r.name AS replica, g.name AS grp FROM samples s JOIN replicas r ON r.id = s.replica_id "
                       "JOIN groups g ON g.id = r.group_id ORDER BY s.t, r.start_order, r.name")
    memory = out_dir / "memory.csv"
    with open(memory, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(MEMORY_COLUMNS + EXTRA_COLUMNS)
        by_time: dict[float, list] = {}
        for r in rows:
            by_time.setdefault(r["t"], []).append(r)
        for t, batch in by_time.items():
            rss = [r["rss_kb"] for r in batch if r["rss_kb"] is not None]
            if rss:
                w.writerow([_iso(t), host, "aggregate", "", "", "", "", "", "", "", len(rss), sum(rss),
                            sum(rss) // len(rss), min(rss), max(rss)] + [""] * len(EXTRA_COLUMNS))
            for r in batch:
                vms = r["vmsize_kb"]
                frag = f"{vms / r['rss_kb']:.2f}" if vms and r["rss_kb"] else ""
                w.writerow([_iso(t), host, "relay", "", r["replica"], r["grp"], r["rss_kb"], vms or "", r["hwm_kb"] or "",
                            frag, "", "", "", "", ""] +
                           ["" if r[c] is None else r[c] for c in EXTRA_COLUMNS])
    events = out_dir / "events.csv"
    with open(events, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(EVENT_COLUMNS)
        for e in store.query("SELECT e.t, e.kind, e.description, COALESCE(e.group_name, 'all') AS g FROM events e ORDER BY e.t, e.id"):
            w.writerow([_iso(e["t"]), e["kind"], e["description"], e["g"]])
    diagnostics = out_dir / "diagnostics.csv"
    allocators = "; ".join(f"{g['name']}={g['family'] or g['allocator']} {g['version'] or ''}".strip()
                           for g in store.query("SELECT * FROM groups ORDER BY id"))
    with open(diagnostics, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(DIAG_COLUMNS)
        totals = {r[0]: (r[1], r[2]) for r in store.query("SELECT t, COUNT(*), SUM(rss_kb) FROM samples GROUP BY t")}
        for h in store.query("SELECT * FROM host_samples ORDER BY t"):
            d = datetime.fromtimestamp(h["t"], timezone.utc)
            count, total = totals.get(h["t"], (0, 0))
            mb = lambda kb: "" if kb is None else kb // 1024  # noqa: E731
            w.writerow([d.strftime("%Y-%m-%d"), d.strftime("%H:%M:%S"), host, "", meta.get("os", ""), meta.get("kernel", ""),
                        allocators, mb(h["mem_total_kb"]), "", mb(h["mem_available_kb"]), "", mb(h["swap_total_kb"]),
                        mb(h["swap_free_kb"]), "", "", "", count, mb(total or 0), mb((total or 0) // count) if count else ""])
    store.conn.close()
    return [memory, events, diagnostics]


# ---- import -------------------------------------------------------------------------------------

def parse_timestamp(text: str, naive_tz: timezone) -> float:
    """ISO timestamp, with or without a UTC offset (naive ones are read in `naive_tz`)."""
    try:
        d = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UserError(f"timestamp {text!r} is not ISO 8601", "fix the row or the file") from None
    if d.tzinfo is None:
        d = d.replace(tzinfo=naive_tz)
    return d.timestamp()


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


def _group_labels_from_config(folder: Path) -> dict[str, tuple[str, str | None]]:
    """group -> (allocator family, version) from experiment.json / relay_config.csv, where present."""
    labels: dict[str, tuple[str, str | None]] = {}
    exp = folder / "experiment.json"
    if exp.exists():
        try:
            for g, spec in json.loads(exp.read_text()).get("groups", {}).items():
                cfg = spec.get("config", {})
                labels[g] = (cfg.get("allocator") or spec.get("name") or g, cfg.get("version"))
        except (json.JSONDecodeError, AttributeError):
            pass
    return labels


def import_torutils(folder: Path, out: Path, naive_tz: timezone = timezone.utc, baseline: str | None = None) -> Path:
    if not folder.is_dir():
        raise UserError(f"{folder} is not a directory", "give the folder holding memory.csv or memory_measurements.csv")
    memory = next((folder / n for n in MEMORY_FILES if (folder / n).exists()), None)
    if memory is None:
        raise UserError(f"no memory CSV in {folder}", f"expected one of: {', '.join(MEMORY_FILES)}")
    if out.exists() and any(out.iterdir()):
        raise UserError(f"output {out} already exists and is not empty", "choose another with -o")
    with open(memory, newline="") as f:
        reader = csv.DictReader(f)
        missing = {"timestamp", "type", "nickname", "rss_kb"} - set(reader.fieldnames or ())
        if missing:
            raise UserError(f"{memory.name} lacks columns {', '.join(sorted(missing))}", "is it a TorUtils memory CSV?")
        rows = [r for r in reader if r["type"] == "relay"]
        has_group_column = "group" in (reader.fieldnames or ())
    assignment, labels, seen_in = ({}, {}, {})
    memberships: dict[str, list[tuple[str, str, str]]] = {}
    if (folder / "groups").is_dir():
        assignment, labels, seen_in = _read_group_lists(folder / "groups")
        memberships = _list_memberships(folder / "groups")
    labels.update({k: v for k, v in _group_labels_from_config(folder).items() if k not in labels})
    if not has_group_column and not assignment:
        raise UserError(f"{folder} has neither a group column nor groups/ lists", "add groups/group_<L>_<allocator>.txt files")

    samples: dict[str, list[tuple[float, int, int | None, int | None]]] = {}
    group_of: dict[str, str] = {}
    unlisted: set[str] = set()
    unlisted_rows = 0
    for r in rows:
        nick = r["nickname"].strip()
        group = (r.get("group") or "").strip() if has_group_column else assignment.get(nick, "")
        if not group:
            unlisted.add(nick)
            unlisted_rows += 1
            continue
        group_of.setdefault(nick, group)
        rss = r["rss_kb"].strip()
        if not rss:
            continue
        intval = lambda k: int(float(r[k])) if r.get(k, "").strip() else None  # noqa: E731
        samples.setdefault(nick, []).append((parse_timestamp(r["timestamp"], naive_tz), int(float(rss)),
                                             intval("vmsize_kb"), intval("hwm_kb")))

    out.mkdir(parents=True, exist_ok=True)
    store = Store.create(out / DB_NAME)
    store.begin()
    groups = sorted(set(group_of.values()))
    base = baseline or _default_baseline(groups, labels)
    if base not in groups:
        raise UserError(f"baseline {base!r} is not a group of this data", f"use one of: {', '.join(groups)}")
    all_t = [s[0] for ss in samples.values() for s in ss]
    several = sorted(n for n, gs in seen_in.items() if len(gs) > 1)
    store.set_meta(name=folder.name, source=f"import torutils {folder}", metric="rss", baseline=base, seed=0,
                   interval=_typical_interval(all_t), started_at=min(all_t, default=0), ended_at=max(all_t, default=0),
                   replicas_in_several_groups=several, unlisted_relays=sorted(unlisted),
                   naive_timezone=str(naive_tz), host=_first_server(rows), end_reason="imported")
    gid = {}
    for g in groups:
        family, version = labels.get(g, (g, None))
        gid[g] = store.insert("groups", name=g, allocator=family, kind="imported", family=family, version=version,
                              env_json="{}", command_json="[]", is_baseline=int(g == base))
    for i, nick in enumerate(sorted(group_of)):
        ss = sorted(samples.get(nick, []))
        rid = store.insert("replicas", group_id=gid[group_of[nick]], idx=i, name=nick, start_order=i,
                           started_at=ss[0][0] if ss else None, ended_at=ss[-1][0] if ss else None,
                           verified=None, verify_detail="imported: allocator not verified by alloclab")
        store.insert_many("samples", ("t", "replica_id", "phase", "nprocs", "rss_kb", "vmsize_kb", "hwm_kb", "tier"),
                          [(t, rid, "load", 1, rss, vms, hwm, "imported") for t, rss, vms, hwm in ss])
        for group_name, kind, source in memberships.get(nick, [(group_of[nick], "current", memory.name)]):
            store.insert("memberships", replica_id=rid, group_name=group_name, list_kind=kind, source=source)
    events = folder / "events.csv"
    if events.exists():
        with open(events, newline="") as f:
            for e in csv.DictReader(f):
                store.event(parse_timestamp(e["timestamp"], naive_tz), e.get("event_type") or "event",
                            e.get("description") or "", group_name=e.get("group") or "all")
    if unlisted:
        store.event(min(all_t, default=0), "note", f"{unlisted_rows} rows of {len(unlisted)} relays had no group "
                    "(other relays, or a relay before it joined a group) and were left out")
    store.commit()
    store.close()
    return out


def _typical_interval(ts: list[float]) -> float:
    uniq = sorted(set(ts))
    if len(uniq) < 2:
        return 1.0
    gaps = sorted(b - a for a, b in zip(uniq, uniq[1:]))
    return float(gaps[len(gaps) // 2])


def _first_server(rows: list[dict]) -> str:
    return next((r.get("server", "") for r in rows if r.get("server")), "")
