"""`alloclab import prometheus`: a range of samples from a Prometheus server's HTTP API
(/api/v1/query_range) turned into a run that the same analysis and reporters read.

Each series is one unit on one host: its labels name the group (and allocator, version), the unit
and the host (label names are options, so process-exporter's or another exporter's series can be
read too). A replica is `HOST/UNIT`, with its host stored as a dimension (replicas.host), so the
analysis can warn when groups are unevenly spread over hosts. By default the series are the ones
`fleet collect --listen` exposes (metrics.py): every memtype, CPU, verification and restarts.
"""
from __future__ import annotations

import datetime as dt
import json
import math
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from .config import parse_duration
from .errors import UserError
from .metrics import MEMTYPES, PREFIX
from .store import DB_NAME, Store

MAX_POINTS = 11000                   # Prometheus refuses a range of more than 11,000 points per series
MAX_NAME = 200                       # label values that become group / replica names
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _name(value, what: str, query: str) -> str:
    """A label value that becomes a name in the store and the report: a printable, bounded string."""
    if not isinstance(value, str) or not value.strip() or _CONTROL.search(value) or len(value) > MAX_NAME:
        raise UserError(f"a series of {query!r} has {what} {str(value)[:40]!r}: empty, unprintable or too long",
                        f"relabel it in Prometheus to printable names of at most {MAX_NAME} characters")
    return value


@dataclass
class Labels:
    group: str = "group"
    unit: str = "unit"
    host: str = "host"
    allocator: str = "allocator"
    version: str = "version"


def default_queries(rss_query: str | None, match: str = "") -> dict[str, str]:
    """store column -> PromQL. `match` adds label matchers (e.g. 'job="alloclab"') to each."""
    extra = f",{match}" if match else ""
    sel = f"{{{match}}}" if match else ""

    def joined(series: str) -> str:
        # the layout since issue 25: figures by host+unit, identity in alloclab_unit_info; older
        # data has group, allocator and version on every series
        info = f"{PREFIX}unit_info{sel}"
        return (f"({series} * on(host, unit) group_left(group, allocator, version) {info}) "
                f"or {series[:-1] + ',' if series.endswith('}') else series + '{'}group!=\"\"}}")
    queries = {col: joined(f'{PREFIX}unit_memory_bytes{{memtype="{m}"{extra}}}') for col, m in MEMTYPES.items()}
    queries.update(cpu_s=joined(f"{PREFIX}unit_cpu_seconds_total{sel}"), nprocs=joined(f"{PREFIX}unit_num_procs{sel}"),
                   verified=joined(f"{PREFIX}unit_allocator_verified{sel}"),
                   restarts=joined(f"{PREFIX}unit_restarts_total{sel}"))
    if rss_query:                       # the operator's own series: only memory, in bytes
        queries = {"rss_kb": rss_query}
    return queries


def parse_time(value: str, what: str, now: float | None = None) -> float:
    """'now', 'now-10m' / '-10m', Unix seconds, or ISO 8601 (UTC when no offset is given)."""
    now = time.time() if now is None else now
    text = value.strip()
    if text == "now":
        return now
    if text.startswith("now-") or text.startswith("-"):
        return now - parse_duration(text.split("-", 1)[1], what)
    try:
        return float(text)
    except ValueError:
        pass
    try:
        stamp = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UserError(f"{what} {value!r} is not a time", "give now, now-1h, Unix seconds or 2026-11-22T08:00:00Z") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.timezone.utc)
    return stamp.timestamp()


def query_range(url: str, query: str, start: float, end: float, step: float, timeout: float = 30.0) -> list[dict]:
    """The matrix of one range query: [{"metric": {labels}, "values": [[t, "v"], ...]}, ...]."""
    endpoint = url.rstrip("/") + "/api/v1/query_range?" + urllib.parse.urlencode(
        {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"})
    try:
        with urllib.request.urlopen(endpoint, timeout=timeout) as resp:
            body = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        try:
            detail = json.loads(exc.read()).get("error", "")
        except ValueError:
            detail = ""
        raise UserError(f"Prometheus refused {query!r}: {exc.code} {detail}".strip(), "check the query and the time range") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise UserError(f"cannot read {url} as a Prometheus server: {getattr(exc, 'reason', exc)}",
                        "give the server's base URL, e.g. http://127.0.0.1:9090") from None
    if body.get("status") != "success" or body.get("data", {}).get("resultType") != "matrix":
        raise UserError(f"Prometheus answered {query!r} with no range data: {body.get('error', body.get('status'))}",
                        "give a range query over series (an instant vector selector)")
    return body["data"]["result"]


def import_prometheus(url: str, out: Path, start: float, end: float, step: float, queries: dict[str, str],
                      labels: Labels = Labels(), baseline: str | None = None, say=print) -> Path:
    if end <= start:
        raise UserError(f"--from is not before --to ({start:.0f} >= {end:.0f})", "give a range that ends after it starts")
    if (end - start) / step > MAX_POINTS:
        raise UserError(f"{(end - start) / step:.0f} points per series is more than Prometheus returns ({MAX_POINTS})",
                        "give a longer --step or a shorter range")
    if (out / DB_NAME).exists():
        raise UserError(f"{out} already holds a run", "give a new directory with -o")
    rows: dict[tuple[str, str, str], dict[float, dict]] = {}          # (host, unit, group) -> t -> column -> value
    facts: dict[str, dict[str, str]] = {}                              # group -> allocator, version
    for col, query in queries.items():
        for series in query_range(url, query, start, end, step):
            try:
                m = series.get("metric", {})
                group, unit = m.get(labels.group), m.get(labels.unit)
                if group is None or unit is None:
                    raise UserError(f"series {str(m)[:200]} of {query!r} has no {labels.group!r} or {labels.unit!r} label",
                                    "name the labels with --group-label and --unit-label")
                group, unit = _name(group, labels.group, query), _name(unit, labels.unit, query)
                host = _name(m[labels.host], labels.host, query) if labels.host in m else ""
                facts.setdefault(group, {"allocator": _name(m.get(labels.allocator, group), labels.allocator, query),
                                         "version": str(m.get(labels.version, ""))[:MAX_NAME]})
                per_t = rows.setdefault((host, unit, group), {})
                for t, v in series.get("values", []):
                    value = float(v)
                    if math.isnan(value) or math.isinf(value) or value < 0:
                        continue                  # stale markers and nonsense: not a memory figure
                    per_t.setdefault(float(t), {})[col] = value
            except (AttributeError, TypeError, ValueError):
                raise UserError(f"Prometheus answered {query!r} with a malformed series", "check the URL points at Prometheus") from None
    if not rows:
        raise UserError(f"no series in {url} between {start:.0f} and {end:.0f} for {next(iter(queries.values()))!r}",
                        "check the time range (--from/--to) and the query")
    groups = sorted(facts)
    base = baseline or next((g for g in groups if "glibc" in (g + facts[g]["allocator"]).lower()), groups[0])
    if base not in facts:
        raise UserError(f"--baseline {base!r} is not a group of the import", f"groups: {', '.join(groups)}")
    several = {(h, u) for h, u, _ in rows if sum(1 for h2, u2, _ in rows if (h2, u2) == (h, u)) > 1}
    out.mkdir(parents=True, exist_ok=True)
    store = Store.create(out / DB_NAME)
    store.begin()
    hosts = sorted({h for h, _, _ in rows})
    store.set_meta(name=f"prometheus import ({len(rows)} series)", source="import-prometheus", metric="rss", interval=step,
                   baseline=base, started_at=start, ended_at=end, end_reason="imported", prometheus_url=url,
                   prometheus_queries=queries, hosts=hosts)
    gid = {g: store.insert("groups", name=g, allocator=facts[g]["allocator"], kind="imported", version=facts[g]["version"],
                           env_json="{}", command_json="[]", is_baseline=int(g == base)) for g in groups}
    columns = ("t", "replica_id", "phase", "nprocs", "rss_kb", "pss_kb", "uss_kb", "anon_kb", "swap_kb", "lazyfree_kb",
               "cgroup_kb", "cpu_s", "tier")
    n_samples = 0
    for i, ((host, unit, group), per_t) in enumerate(sorted(rows.items())):
        name = f"{host}/{unit}" if host else unit
        if (host, unit) in several:                  # moved between groups within the range: one replica per group
            name += f"#{group}"
        times = sorted(per_t)
        last = per_t[times[-1]]
        verified = None if "verified" not in last else bool(last["verified"])
        rid = store.insert("replicas", group_id=gid[group], idx=i, name=name, start_order=i, started_at=times[0],
                           ended_at=times[-1], host=host or None, verified=verified, end_kind="imported")
        samples, restarts = [], None
        for t in times:
            v = per_t[t]
            if "rss_kb" not in v:
                continue
            kb = {c: (round(v[c] / 1024) if c in v else None) for c in MEMTYPES}
            samples.append((t, rid, "load", int(v["nprocs"]) if "nprocs" in v else None, kb["rss_kb"], kb["pss_kb"],
                            kb["uss_kb"], kb["anon_kb"], kb["swap_kb"], kb["lazyfree_kb"], kb["cgroup_kb"], v.get("cpu_s"),
                            "full" if kb["pss_kb"] is not None else "cheap"))
            if "restarts" in v:
                if restarts is not None and v["restarts"] > restarts:
                    store.event(t, "process_restart", f"{unit}: restarts counter {restarts:g} -> {v['restarts']:g}", rid, group)
                restarts = v["restarts"]
        store.insert_many("samples", columns, samples)
        n_samples += len(samples)
    store.commit()
    store.close()
    say(f"imported {len(rows)} series ({n_samples} samples, {len(hosts)} hosts, groups {', '.join(groups)}) into {out}")
    return out
