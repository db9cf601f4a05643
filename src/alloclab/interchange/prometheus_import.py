"""`alloclab import prometheus`: a range of samples from a Prometheus server's HTTP API
(/api/v1/query_range) turned into a run that the same analysis and reporters read.

Two kinds of data, read differently:
- alloclab's own series (`fleet collect --listen`, `run --metrics`; the default): imported *with
  their meaning*. Identity (group, allocator, version, library) comes from `alloclab_unit_info`
  joined by host+unit (the collector's contract, docs/how-to/fleet.md), or from the group/allocator/version
  labels every series carried in older collectors; restarts from `alloclab_unit_restarts_total` and
  `alloclab_unit_process_start_time_seconds`; verification from `alloclab_unit_allocator_verified`;
  up from `alloclab_unit_up`. They are stored as a run (processes, verifications, restart events),
  so the analysis reads them exactly as the collector's own store: no fall is guessed to be a
  restart, and a replica's level is its steady mean over the window, not one sample. Each imported
  point is the mean of the scrapes within its step (avg_over_time), so a coarse --step averages
  release cycles instead of picking one phase of them.
- `--query` (anyone's memory series): there is no such record, so the series are read with the
  rules for imported data (a large fall is an unrecorded restart; the level at the window's end).

A replica is `HOST/UNIT`, with its host stored (replicas.host): host is a factor in the analysis.
Everything the server sends is bounded and checked before the run directory exists: each answer's
size (streamed, refused at the cap), its JSON nesting, the whole import's time (a deadline that also
ends a server trickling a byte a second), and every timestamp and value.
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import math
import re
import socket
import threading
import time
import urllib.parse
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..common.errors import UserError
from ..common.timefmt import utc
from ..experiment_file import parse_duration
from ..serve.metrics import MEMTYPES, PREFIX
from ..store import DB_NAME, Store, new_run_directory

MAX_POINTS = 11000  # Prometheus refuses a range of more than 11,000 points per series
MAX_NAME = 200  # label values that become group / replica names
MAX_LABELS = 64  # labels on one series
MAX_SERIES = 100_000  # series in one answer
MAX_DEPTH = 16  # a matrix answer nests 6 deep
DEFAULT_MAX_BYTES = 64 << 20  # one answer
DEFAULT_DEADLINE = 120.0  # the whole import, seconds
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)

# column -> (metric, function over each step) of alloclab's own series; memory columns by memtype
OWN_SERIES = {
    "cpu_s": ("unit_cpu_seconds_total", "max_over_time"),
    "nprocs": ("unit_num_procs", "max_over_time"),
    "verified": ("unit_allocator_verified", "min_over_time"),
    "restarts": ("unit_restarts_total", "max_over_time"),
    "start_time": ("unit_process_start_time_seconds", "max_over_time"),
    "up": ("unit_up", "min_over_time"),
}
INFO = "unit_info"
IDENTITY = ("group", "allocator", "version", "library_sha256")


def _name(value, what: str, query: str) -> str:
    """A label value that becomes a name in the store and the report: a printable, bounded string."""
    if not isinstance(value, str) or not value.strip() or _CONTROL.search(value) or len(value) > MAX_NAME:
        raise UserError(
            f"a series of {query!r} has {what} {str(value)[:40]!r}: empty, unprintable or too long",
            f"relabel it in Prometheus to printable names of at most {MAX_NAME} characters",
        )
    return value


@dataclass
class Labels:
    group: str = "group"
    unit: str = "unit"
    host: str = "host"
    allocator: str = "allocator"
    version: str = "version"


@dataclass
class Limits:
    """What one import accepts from the server (docs/how-to/fleet.md, benchmarks/fuzz_prometheus.py)."""

    max_bytes: int = DEFAULT_MAX_BYTES
    deadline_s: float = DEFAULT_DEADLINE
    max_depth: int = MAX_DEPTH


def default_queries(rss_query: str | None, match: str = "", step: float | None = None) -> dict[str, str]:
    """store column -> PromQL. `match` adds label matchers (e.g. 'job="alloclab"') to each. alloclab's
    own series are taken over each step (avg_over_time for memory: the mean of the step's scrapes)
    when `step` is given; `--query` is taken as written."""
    if rss_query:  # the operator's own series: only memory, in bytes
        return {"rss_kb": rss_query}
    extra = f",{match}" if match else ""
    sel = f"{{{match}}}" if match else ""

    def over(fn: str, selector: str) -> str:
        return f"{fn}({selector}[{step:g}s])" if step else selector

    queries = {
        col: over("avg_over_time", f'{PREFIX}unit_memory_bytes{{memtype="{m}"{extra}}}') for col, m in MEMTYPES.items()
    }
    queries.update({col: over(fn, f"{PREFIX}{metric}{sel}") for col, (metric, fn) in OWN_SERIES.items()})
    queries["info"] = over("last_over_time", f"{PREFIX}{INFO}{sel}")
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
        seconds = float(text)
    except ValueError:
        seconds = None
    if seconds is not None:
        if not math.isfinite(seconds) or not 0 <= seconds < 1e11:
            raise UserError(f"{what} {value!r} is not a time", "give now, now-1h, Unix seconds or 2026-11-22T08:00:00Z")
        return seconds
    try:
        stamp = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UserError(
            f"{what} {value!r} is not a time", "give now, now-1h, Unix seconds or 2026-11-22T08:00:00Z"
        ) from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.UTC)
    return stamp.timestamp()


# ---- the server's answers, bounded ------------------------------------------------------------------


class Client:
    """GET requests to one Prometheus server under one deadline (time.monotonic) for the whole import."""

    def __init__(self, url: str, limits: Limits = Limits()):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UserError(
                f"{url!r} is not a Prometheus server's URL", "give its base URL, e.g. http://127.0.0.1:9090"
            )
        self.url, self.parts, self.limits = url, parts, limits
        self.deadline = time.monotonic() + limits.deadline_s

    def _fail(self, why: str) -> UserError:
        return UserError(
            f"cannot read {self.url} as a Prometheus server: {why}",
            "give the server's base URL, e.g. http://127.0.0.1:9090",
        )

    def get(self, path: str, params: dict[str, str]) -> dict:
        """The JSON answer of one GET: read in pieces up to limits.max_bytes, the connection shut
        when the deadline passes (however the server dribbles), nesting checked before parsing."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise self._timeout()
        p = self.parts
        cls = http.client.HTTPSConnection if p.scheme == "https" else http.client.HTTPConnection
        conn = cls(p.hostname, p.port, timeout=remaining)
        expired = threading.Event()

        def shut() -> None:  # a blocked read returns at once when the socket is shut
            expired.set()
            if conn.sock is not None:
                try:
                    conn.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        timer = threading.Timer(remaining, shut)
        timer.daemon = True
        timer.start()
        try:
            conn.request(
                "GET",
                p.path.rstrip("/") + path + "?" + urllib.parse.urlencode(params),
                headers={"Accept": "application/json"},
            )
            resp = conn.getresponse()
            declared = resp.getheader("Content-Length")
            if declared and declared.isdigit() and int(declared) > self.limits.max_bytes:
                raise self._too_big(int(declared))
            body = bytearray()
            while True:
                piece = resp.read1(1 << 16)
                if expired.is_set() or time.monotonic() > self.deadline:
                    raise self._timeout()
                if not piece:
                    break
                body += piece
                if len(body) > self.limits.max_bytes:
                    raise self._too_big(len(body))
            status = resp.status
        except UserError:
            raise
        except (OSError, http.client.HTTPException, ValueError) as exc:
            if expired.is_set():
                raise self._timeout() from None
            raise self._fail(str(getattr(exc, "reason", exc)) or type(exc).__name__) from None
        finally:
            timer.cancel()
            conn.close()
        answer = self._parse(bytes(body))
        if status != 200:
            detail = answer.get("error", "") if isinstance(answer, dict) else ""
            raise UserError(
                f"Prometheus refused {params.get('query', path)!r}: {status} {str(detail)[:200]}".strip(),
                "check the query and the time range",
            )
        return answer

    def _parse(self, body: bytes):
        if _depth(body) > self.limits.max_depth:
            raise self._fail(f"its answer nests deeper than {self.limits.max_depth} levels")
        try:
            return json.loads(body)
        except (ValueError, RecursionError):
            raise self._fail("its answer is not JSON") from None

    def _timeout(self) -> UserError:
        return UserError(
            f"{self.url} did not answer within {self.limits.deadline_s:g} s (the whole import's deadline)",
            "check the server, or give a longer --timeout or a shorter range",
        )

    def _too_big(self, size: int) -> UserError:
        return UserError(
            f"{self.url} sent an answer of more than {self.limits.max_bytes / 2**20:g} MiB ({size / 2**20:.1f} MiB so far)",
            "import a shorter range, a longer --step, fewer series (--match), or raise --max-answer-mb",
        )


def _depth(body: bytes) -> int:
    """The deepest nesting of arrays and objects in a JSON text (strings skipped), in numpy."""
    bare = np.frombuffer(_JSON_STRING.sub(b'""', body), dtype=np.uint8)
    steps = ((bare == ord("[")) | (bare == ord("{"))).astype(np.int8) - (
        (bare == ord("]")) | (bare == ord("}"))
    ).astype(np.int8)
    return int(np.cumsum(steps, dtype=np.int32).max(initial=0))


Point = tuple[float, float]


@dataclass
class Series:
    labels: dict[str, str]
    points: list[Point] = field(default_factory=list)  # (t, value): finite values only


def query_range(client: Client, query: str, start: float, end: float, step: float) -> list[Series]:
    """The matrix of one range query, checked: labels printable strings, times finite and inside
    the range, values numbers (NaN/Inf and negative values dropped: not figures)."""
    answer = client.get(
        "/api/v1/query_range", {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
    )
    data = answer.get("data") if isinstance(answer, dict) else None
    if (
        not isinstance(answer, dict)
        or answer.get("status") != "success"
        or not isinstance(data, dict)
        or data.get("resultType") != "matrix"
    ):
        why = answer.get("error", answer.get("status")) if isinstance(answer, dict) else type(answer).__name__
        raise UserError(
            f"Prometheus answered {query!r} with no range data: {str(why)[:200]}",
            "give a range query over series (an instant vector selector)",
        )
    result = data.get("result")
    if not isinstance(result, list) or len(result) > MAX_SERIES:
        raise _malformed(query, f"a result that is not a list of at most {MAX_SERIES} series")
    lo, hi = start - step - 1.0, end + 1.0
    out = []
    for item in result:
        labels = item.get("metric") if isinstance(item, dict) else None
        values = item.get("values") if isinstance(item, dict) else None
        if (
            not isinstance(labels, dict)
            or not isinstance(values, list)
            or len(labels) > MAX_LABELS
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items())
        ):
            raise _malformed(query, "a series without string labels and a list of values")
        if len(values) > MAX_POINTS + 1:
            raise _malformed(query, f"a series of {len(values)} points for at most {MAX_POINTS}")
        s = Series(labels)
        for pair in values:
            if (
                not isinstance(pair, list)
                or len(pair) != 2
                or isinstance(pair[0], bool)
                or not isinstance(pair[0], (int, float))
                or not isinstance(pair[1], str)
            ):
                raise _malformed(query, f'a point {str(pair)[:60]} that is not [time, "value"]')
            t = float(pair[0])
            if not math.isfinite(t) or not lo <= t <= hi:
                raise _malformed(query, f"a sample time {str(pair[0])[:30]} outside the range asked for")
            try:
                v = float(pair[1])
            except ValueError:
                raise _malformed(query, f"a value {pair[1][:30]!r} that is not a number") from None
            if math.isfinite(v) and v >= 0:
                s.points.append((t, v))
        out.append(s)
    return out


def _malformed(query: str, what: str) -> UserError:
    return UserError(f"Prometheus answered {query!r} with {what}", "check the URL points at Prometheus")


# ---- alloclab's own series, joined --------------------------------------------------------------------


@dataclass
class Unit:
    """One unit on one host in one group over the range: column -> t -> value."""

    host: str
    unit: str
    group: str
    values: dict[str, dict[float, float]] = field(default_factory=dict)


def _identity_at(infos: list[tuple[dict[str, str], set[float]]], t: float) -> dict[str, str] | None:
    """The info labels a unit had at t: the series with a point at t, else the latest before, else the first."""
    for labels, times in infos:
        if t in times:
            return labels
    before = [(max(x for x in times if x <= t), labels) for labels, times in infos if any(x <= t for x in times)]
    if before:
        return max(before, key=lambda b: b[0])[1]
    return min(((min(times), labels) for labels, times in infos if times), key=lambda b: b[0], default=(0, None))[1]


def join_own(
    answers: dict[str, list[Series]], labels: Labels, queries: dict[str, str]
) -> tuple[dict[tuple[str, str, str], Unit], dict[str, dict[str, str]], str]:
    """alloclab's answers -> units (host, unit, group) and group identities; the layout read:
    "info" (identity joined from alloclab_unit_info) or "labelled" (group on every series)."""
    infos: dict[tuple[str, str], list[tuple[dict[str, str], set[float]]]] = {}
    for s in answers.get("info", []):
        key = (s.labels.get(labels.host, ""), s.labels.get(labels.unit))
        if key[1] is None or labels.group not in s.labels:
            continue
        ident = {k: s.labels.get(getattr(labels, k, k), "") for k in IDENTITY}
        infos.setdefault(key, []).append((ident, {t for t, _ in s.points}))
    facts: dict[str, dict[str, str]] = {}
    units: dict[tuple[str, str, str], Unit] = {}
    layouts = set()
    for col, series in answers.items():
        if col == "info":
            continue
        query = queries[col]
        for s in series:
            m = s.labels
            if m.get(labels.unit) is None:
                raise UserError(
                    f"series {str(m)[:200]} of {query!r} has no {labels.unit!r} label",
                    "name the label with --unit-label",
                )
            host = _name(m[labels.host], labels.host, query) if labels.host in m else ""
            unit = _name(m[labels.unit], labels.unit, query)
            for t, v in s.points:
                if labels.group in m:  # the older layout: identity on every series
                    ident = {
                        "group": m[labels.group],
                        "allocator": m.get(labels.allocator, m[labels.group]),
                        "version": m.get(labels.version, ""),
                        "library_sha256": m.get("library_sha256", ""),
                    }
                    layouts.add("labelled")
                else:
                    ident = _identity_at(infos.get((host, unit), []), t)
                    if ident is None:
                        continue  # no identity recorded for it: not attributable
                    layouts.add("info")
                group = _name(ident["group"], labels.group, query)
                facts.setdefault(
                    group,
                    {
                        "allocator": _name(ident["allocator"] or group, labels.allocator, query),
                        "version": str(ident["version"])[:MAX_NAME],
                        "library_sha256": str(ident["library_sha256"])[:MAX_NAME],
                    },
                )
                u = units.setdefault((host, unit, group), Unit(host, unit, group))
                u.values.setdefault(col, {})[t] = v
    return units, facts, "+".join(sorted(layouts)) or "none"


@dataclass
class Lineage:
    """One main process of a unit as the collector saw it, from its start time or restart counter."""

    first: float
    last: float
    start_time: float | None
    verified: list[tuple[float, bool]] = field(default_factory=list)  # changes only


def lineages(u: Unit) -> tuple[list[Lineage], list[tuple[float, str]]]:
    """A unit's processes and its restarts (t, description): a new process where the start time
    changes or the restart counter rises; verification changes per process."""
    v = u.values
    times = sorted(set().union(*(d.keys() for d in v.values())))
    procs: list[Lineage] = []
    restarts: list[tuple[float, str]] = []
    last_start = last_count = None
    for t in times:
        if v.get("up", {}).get(t) == 0 and t not in v.get("rss_kb", {}):
            continue  # down: no process this step
        start, count = v.get("start_time", {}).get(t), v.get("restarts", {}).get(t)
        new = not procs
        why = None
        if start is not None and last_start is not None and abs(start - last_start) > 0.5:
            new, why = True, f"{u.unit}: process start time {last_start:.0f} -> {start:.0f}"
        elif count is not None and last_count is not None and count > last_count:
            new, why = True, f"{u.unit}: restarts counter {last_count:g} -> {count:g}"
        if why:
            restarts.append((t, why))
        if new:
            procs.append(Lineage(first=start if start is not None and start <= t else t, last=t, start_time=start))
        p = procs[-1]
        p.last = t
        ok = v.get("verified", {}).get(t)
        if ok is not None and (not p.verified or p.verified[-1][1] != bool(ok)):
            p.verified.append((t, bool(ok)))
        last_start = start if start is not None else last_start
        last_count = count if count is not None else last_count
    return procs, restarts


# ---- the import ---------------------------------------------------------------------------------------


def fetch(
    client: Client, queries: dict[str, str], start: float, end: float, step: float, say=print
) -> dict[str, list[Series]]:
    answers = {}
    for i, (col, query) in enumerate(queries.items(), 1):
        answers[col] = query_range(client, query, start, end, step)
        say(f"  {i}/{len(queries)} {query}: {len(answers[col])} series")
    return answers


def import_prometheus(
    url: str,
    out: Path,
    start: float,
    end: float,
    step: float,
    queries: dict[str, str],
    labels: Labels = Labels(),
    baseline: str | None = None,
    say=print,
    limits: Limits = Limits(),
    own: bool | None = None,
) -> Path:
    """Read, check and join every answer first; only then make the run directory (never half-made)."""
    if not (math.isfinite(start) and math.isfinite(end) and math.isfinite(step)) or step <= 0:
        raise UserError(
            "--from, --to and --step must be finite times and a positive step", "give e.g. --from now-1h --step 15s"
        )
    if end <= start:
        raise UserError(
            f"--from is not before --to ({utc(start)} >= {utc(end)})", "give a range that ends after it starts"
        )
    if (end - start) / step > MAX_POINTS:
        raise UserError(
            f"{(end - start) / step:.0f} points per series is more than Prometheus returns ({MAX_POINTS})",
            "give a longer --step or a shorter range",
        )
    if (out / DB_NAME).exists():
        raise UserError(f"{out} already holds a run", "give a new directory with -o")
    own = "info" in queries if own is None else own
    first = start
    if own:
        # each point is the mean over the step before it: points end at --to, and the earliest
        # one's step starts at or after --from (no point reaches outside the range asked for)
        steps = math.floor((end - start) / step + 1e-9)
        if steps < 1:
            raise UserError(
                f"--step {step:g}s is longer than the range ({end - start:.0f} s)",
                "give a shorter --step or a longer range",
            )
        first = end - (steps - 1) * step
    client = Client(url, limits)
    answers = fetch(client, queries, first, end, step, say)
    if own:
        units, facts, layout = join_own(answers, labels, queries)
    else:
        units, facts, layout = _join_foreign(answers, labels, queries), {}, "query"
        for u in units.values():
            facts.setdefault(u.group, {"allocator": u.group, "version": "", "library_sha256": ""})
        for s in answers["rss_kb"]:
            g = s.labels.get(labels.group)
            if g in facts:
                facts[g].update(
                    allocator=_name(s.labels.get(labels.allocator, g), labels.allocator, queries["rss_kb"]),
                    version=s.labels.get(labels.version, "")[:MAX_NAME],
                )
    units = {k: u for k, u in units.items() if u.values.get("rss_kb")}
    if not units:
        raise UserError(
            f"no series in {url} between {utc(start)} and {utc(end)} for {next(iter(queries.values()))!r}"
            + (" with a group (alloclab_unit_info or a group label)" if own else ""),
            "check the time range (--from/--to), --match and the query",
        )
    recorded = own and all("restarts" in u.values or "start_time" in u.values for u in units.values())
    if own and not recorded:
        say("  some units have no restart counter or process start time: read with the rules for imported data")
    groups = sorted({u.group for u in units.values()})
    base = baseline or next((g for g in groups if "glibc" in (g + facts[g]["allocator"]).lower()), groups[0])
    if base not in groups:
        raise UserError(f"--baseline {base!r} is not a group of the import", f"groups: {', '.join(groups)}")
    with new_run_directory(out):  # e.g. a full disk: no half-made run is left behind
        n = _write(
            out,
            units,
            facts,
            groups,
            base,
            recorded,
            dict(
                name=f"prometheus import ({len(units)} series)",
                source="import-prometheus",
                metric="rss",
                interval=step,
                baseline=base,
                started_at=start,
                ended_at=end,
                end_reason="imported",
                prometheus_url=url,
                prometheus_queries=queries,
                prometheus_layout=layout,
                hosts=sorted({u.host for u in units.values()}),
                records="alloclab" if recorded else "none",
            ),
        )
    hosts = {u.host for u in units.values()}
    say(
        f"imported {len(units)} series ({n} samples, {len(hosts)} hosts, groups {', '.join(groups)}; "
        f"{'alloclab records: restarts, verification' if recorded else 'no records: restarts guessed from falls'}) into {out}"
    )
    return out


def _join_foreign(
    answers: dict[str, list[Series]], labels: Labels, queries: dict[str, str]
) -> dict[tuple[str, str, str], Unit]:
    units: dict[tuple[str, str, str], Unit] = {}
    query = queries["rss_kb"]
    for s in answers["rss_kb"]:
        m = s.labels
        if m.get(labels.group) is None or m.get(labels.unit) is None:
            raise UserError(
                f"series {str(m)[:200]} of {query!r} has no {labels.group!r} or {labels.unit!r} label",
                "name the labels with --group-label and --unit-label",
            )
        group, unit = _name(m[labels.group], labels.group, query), _name(m[labels.unit], labels.unit, query)
        host = _name(m[labels.host], labels.host, query) if labels.host in m else ""
        u = units.setdefault((host, unit, group), Unit(host, unit, group))
        u.values.setdefault("rss_kb", {}).update(s.points)
    return units


def _write(
    out: Path,
    units: dict[tuple[str, str, str], Unit],
    facts: dict,
    groups: list[str],
    base: str,
    recorded: bool,
    meta: dict,
) -> int:
    store = Store.create(out / DB_NAME)
    per_unit = Counter((h, u) for h, u, _ in units)
    several = {k for k, n in per_unit.items() if n > 1}
    columns = (
        "t",
        "replica_id",
        "phase",
        "nprocs",
        "rss_kb",
        "pss_kb",
        "uss_kb",
        "anon_kb",
        "swap_kb",
        "lazyfree_kb",
        "cgroup_kb",
        "cpu_s",
        "tier",
    )
    n_samples = 0
    with store.bulk_load():
        store.set_meta(**meta)
        gid = {
            g: store.add_group(
                name=g,
                allocator=facts[g]["allocator"],
                kind="prometheus" if recorded else "imported",
                version=facts[g]["version"],
                library_sha256=facts[g].get("library_sha256") or None,
                env_json="{}",
                command_json="[]",
                is_baseline=int(g == base),
            )
            for g in groups
        }
        for i, ((host, unit, group), u) in enumerate(sorted(units.items())):
            name = f"{host}/{unit}" if host else unit
            if (host, unit) in several:  # moved between groups within the range: one replica per group
                name += f"#{group}"
            v = u.values
            times = sorted(v["rss_kb"])
            procs, restarts = lineages(u) if recorded else ([], [])
            last_verified = next((p.verified[-1][1] for p in reversed(procs) if p.verified), None)
            rid = store.add_replica(
                group_id=gid[group],
                idx=i,
                name=name,
                start_order=i,
                started_at=times[0],
                ended_at=times[-1],
                host=host or None,
                verified=last_verified,
                end_kind="imported",
            )
            for p in procs:
                pid = store.add_process(
                    replica_id=rid,
                    first_seen=p.first,
                    last_seen=p.last,
                    verified=None if not p.verified else int(p.verified[-1][1]),
                )
                for t, ok in p.verified:
                    store.add_verification(
                        t=t,
                        process_id=pid,
                        verified=int(ok),
                        detail=None if ok else "alloclab_unit_allocator_verified = 0 (Prometheus)",
                    )
            for t, why in restarts:
                store.add_event(t, "process_restart", why, rid, group)
            rows = []
            for t in times:
                kb = {c: (round(v[c][t] / 1024) if t in v.get(c, {}) else None) for c in MEMTYPES}
                nprocs = v.get("nprocs", {}).get(t)
                rows.append(
                    (
                        t,
                        rid,
                        "load",
                        int(nprocs) if nprocs is not None else None,
                        kb["rss_kb"],
                        kb["pss_kb"],
                        kb["uss_kb"],
                        kb["anon_kb"],
                        kb["swap_kb"],
                        kb["lazyfree_kb"],
                        kb["cgroup_kb"],
                        v.get("cpu_s", {}).get(t),
                        "full" if kb["pss_kb"] is not None else "cheap",
                    )
                )
            store.add_samples(columns, rows)
            n_samples += len(rows)
    store.close()
    return n_samples
