"""`alloclab sweep`: a grid or list of settings (allocator versions × tunables) run as groups of
one experiment, in batches the machine can hold, each batch with the same baseline group.

A sweep file is an experiment file (command or [workload], phases, replicas, interval, ...) whose
groups come from a [sweep] table instead of [[group]]s:

    [sweep]
    allocators = ["mimalloc@3.0.1"]           # every allocator of the grid
    baseline = "mimalloc@3.0.1"               # optional: that allocator with its defaults (default: the first)
    max_groups_per_batch = 4                  # optional: else from cores and memory (see batch_limit)
    replica_mb = 300                          # optional: memory one replica needs, to size batches
    [sweep.tunables]                          # grid axes: each applies to the allocators of its family
    MIMALLOC_PURGE_DELAY = [0, 10, 100, 1000]
    [[sweep.point]]                           # and/or a list of explicit points
    allocator = "jemalloc@5.3.0"
    env = { MALLOC_CONF = "dirty_decay_ms:0,background_thread:true" }

The grid holds, for each allocator, every combination of its family's axes, each axis also at the
allocator's default (unset): MIMALLOC_PURGE_DELAY = [0, 10] on one mimalloc is 3 points. Every
mistake is one line naming the file, the key and the fix (exit code 2), as for experiment files.
"""

from __future__ import annotations

import itertools
import json
import os
import tomllib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from .. import stats
from ..allocators import catalog, tunables
from ..capture import sampler
from ..common import outputs
from ..common.errors import UserError
from ..experiment_file import MAX_GROUPS, _check_keys, _check_tree, _env, _typed, parse_experiment, show
from ..run.runner import Runner
from .derive import Base, Point, _v, derive, group_name

MAX_POINTS = 256
MAX_VALUES = 64  # per axis
PROCESSES_PER_CORE = 6  # replicas of one batch per core (the demo ran 12.5 per core and was CPU-saturated)
MEMORY_SHARE = 0.5  # of MemAvailable a batch may plan to use
DEFAULT_REPLICA_MB = 256.0
_SWEEP_KEYS = {"allocators", "baseline", "tunables", "point", "max_groups_per_batch", "replica_mb"}


@dataclass
class SweepSpec:
    points: list[Point]  # the baseline first
    max_groups_per_batch: int | None = None
    replica_mb: float | None = None


def family_of(allocator: str) -> str | None:
    if allocator == "glibc":
        return "glibc"
    m = catalog.ID_RE.match(allocator)
    return m["family"] if m else None


def _owner(key: str) -> str | None:
    return next((f for rx, f in tunables.FAMILY_OF_KEY if rx.match(key)), None)


def grid(
    allocators: list[str], axes: dict[str, list[str]], explicit: list[Point], baseline: Point | None, src: str
) -> list[Point]:
    """Every point of the grid and the list, the baseline first, each once."""
    families = {a: family_of(a) for a in allocators}
    for key in axes:
        owner = _owner(key)
        if owner is None:
            raise UserError(
                f"{src}: sweep.tunables.{key} is not an allocator tunable",
                "use e.g. MIMALLOC_PURGE_DELAY, MALLOC_ARENA_MAX, MALLOC_CONF, GLIBC_TUNABLES or TCMALLOC_...",
            )
        if allocators and not any(f == owner or (f is None) for f in families.values()):
            raise UserError(
                f"{src}: sweep.tunables.{key} tunes {owner}, but no allocator of the sweep is {owner}",
                f"add a {owner} allocator to sweep.allocators or remove {key}",
            )
    points: list[Point] = []
    for a in allocators:
        mine = [k for k in axes if _owner(k) == families[a] or families[a] is None and _owner(k) != "glibc"]
        for combo in itertools.product(*[[None, *axes[k]] for k in mine]):
            points.append(Point(a, {k: v for k, v in zip(mine, combo) if v is not None}))
    points += explicit
    base = baseline or (Point(allocators[0]) if allocators else points[0] if points else None)
    if base is None:
        raise UserError(
            f"{src}: the sweep has no points", "give sweep.allocators (with sweep.tunables) or [[sweep.point]]s"
        )
    out = [base]
    for p in points:
        if p not in out:
            out.append(p)
    if len(out) < 2:
        raise UserError(f"{src}: the sweep has only its baseline", "add tunable values, allocators or points")
    if len(out) > MAX_POINTS:
        raise UserError(
            f"{src}: the sweep has {len(out)} points", f"keep it to at most {MAX_POINTS} (fewer values per axis)"
        )
    return out


def _values(value: Any, where: str, src: str) -> list[str]:
    if not isinstance(value, list) or not value:
        raise UserError(
            f"{src}: {where} must be a non-empty list of values", f"write e.g. {where.split('.')[-1]} = [0, 10, 100]"
        )
    if len(value) > MAX_VALUES:
        raise UserError(f"{src}: {where} has {len(value)} values", f"give at most {MAX_VALUES}")
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise UserError(
                f"{src}: {where} value {show(v, 40)} must be a string or a number", 'write e.g. [0, 10] or ["a:1"]'
            )
        out.append(str(v))
    if len(set(out)) != len(out):
        raise UserError(f"{src}: {where} repeats a value", "give each value once")
    return out


def parse_sweep_table(table: Any, src: str) -> SweepSpec:
    if not isinstance(table, dict):
        raise UserError(f"{src}: sweep must be a table", "write it as [sweep]")
    _check_keys(table, _SWEEP_KEYS, "[sweep]", src)
    allocators = table.get("allocators", [])
    if not isinstance(allocators, list) or not all(isinstance(a, str) and a for a in allocators):
        raise UserError(
            f"{src}: sweep.allocators must be a list of allocators",
            'write e.g. allocators = ["mimalloc@3.0.1", "glibc"]',
        )
    if len(set(allocators)) != len(allocators):
        raise UserError(f"{src}: sweep.allocators repeats an allocator", "name each once")
    axes_t = _typed(table, "tunables", dict, src, "sweep.", default={})
    axes = {k: _values(v, f"sweep.tunables.{k}", src) for k, v in axes_t.items()}
    _env({k: "x" for k in axes}, "sweep", src)  # names: variable names, not reserved
    if axes and not allocators:
        raise UserError(f"{src}: sweep.tunables needs sweep.allocators", "say which allocators the tunables apply to")
    raw_points = table.get("point", [])
    if not isinstance(raw_points, list):
        raise UserError(f"{src}: sweep.point must be written [[sweep.point]]", "one table per point")
    explicit = []
    for i, p in enumerate(raw_points, 1):
        if not isinstance(p, dict):
            raise UserError(f"{src}: sweep point #{i} must be a table", "write it as [[sweep.point]]")
        _check_keys(p, {"allocator", "env"}, f"[[sweep.point]] #{i}", src)
        alloc = _typed(p, "allocator", str, src, f"sweep point #{i}: ")
        if not alloc:
            raise UserError(f"{src}: sweep point #{i} has no allocator", 'add allocator = "..."')
        env = _env(_typed(p, "env", dict, src, f"sweep point #{i}: ", default={}), f"sweep point #{i}", src)
        explicit.append(Point(alloc, env))
    baseline = None
    if "baseline" in table:
        b = _typed(table, "baseline", str, src, "sweep.")
        if b not in allocators and b not in {p.allocator for p in explicit}:
            raise UserError(
                f"{src}: sweep.baseline {show(b, 40)} is not an allocator of the sweep",
                f"use one of: {', '.join(allocators or [p.allocator for p in explicit])}",
            )
        baseline = Point(b)
    limit = _typed(table, "max_groups_per_batch", int, src, "sweep.", default=None)
    if limit is not None and not 2 <= limit <= MAX_GROUPS:
        raise UserError(
            f"{src}: sweep.max_groups_per_batch = {limit} is out of range",
            f"use 2 to {MAX_GROUPS} (the baseline and at least one point)",
        )
    replica_mb = _typed(table, "replica_mb", (int, float), src, "sweep.", default=None)
    if replica_mb is not None and not 0 < replica_mb <= 1 << 20:
        raise UserError(
            f"{src}: sweep.replica_mb = {replica_mb} is out of range", "give the MB one replica needs, e.g. 300"
        )
    return SweepSpec(grid(allocators, axes, explicit, baseline, src), limit, float(replica_mb) if replica_mb else None)


def _dict_to_toml(data: dict) -> str:
    """An experiment file's data back as TOML (top-level values, tables, arrays of tables)."""
    lines, tables = [], []
    for k, v in data.items():
        if isinstance(v, dict):
            tables += [f"[{json.dumps(k)}]"] + [f"{json.dumps(kk)} = {_v(vv)}" for kk, vv in v.items()]
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            for x in v:
                tables += [f"[[{json.dumps(k)}]]"] + [f"{json.dumps(kk)} = {_v(vv)}" for kk, vv in x.items()]
        else:
            lines.append(f"{json.dumps(k)} = {_v(v)}")
    return "\n".join(lines + tables) + "\n"


def load_sweep_file(path: Path) -> tuple[Base, SweepSpec] | None:
    """(the base experiment, the sweep) of a sweep file; None when the file has no [sweep] table
    (an ordinary experiment file: the sweep then comes from the command line)."""
    load_experiment_text = path.read_bytes().decode("utf-8", errors="replace") if path.is_file() else ""
    if "sweep" not in load_experiment_text:
        return None
    try:
        data = tomllib.loads(load_experiment_text)
    except tomllib.TOMLDecodeError:
        return None  # load_experiment says what is wrong, in its words
    if "sweep" not in data:
        return None
    src = str(path)
    _check_tree(data, src)
    spec = parse_sweep_table(data.pop("sweep"), src)
    if "group" in data:
        raise UserError(f"{src}: a sweep file's groups come from [sweep]", "remove the [[group]] tables")
    data["group"] = [{"name": "base", "allocator": spec.points[0].allocator}]
    exp = parse_experiment(_dict_to_toml(data), src, path.resolve().parent)
    return Base(replace(exp, source_text=load_experiment_text), spec.points[0].allocator, {}, None), spec


def spec_from_flags(allocators: tuple[str, ...], settings: tuple[str, ...], base: Base) -> SweepSpec:
    """--allocator A (repeatable) and --set NAME=V1,V2,... (repeatable)."""
    axes: dict[str, list[str]] = {}
    for item in settings:
        key, sep, values = item.partition("=")
        if not sep or not key or not values:
            raise UserError(
                f"--set {item!r} is not NAME=VALUE[,VALUE...]", "write e.g. --set MIMALLOC_PURGE_DELAY=0,10,100,1000"
            )
        if key in axes:
            raise UserError(f"--set {key} is given twice", "give all of its values in one --set")
        axes[key] = _values(values.split(","), f"--set {key}", "command line")
    allocs = list(allocators) or [base.allocator]
    return parse_sweep_table({"allocators": allocs, "tunables": axes}, "command line")


# ---- batches ---------------------------------------------------------------------------------------


def batch_limit(replicas: int, replica_mb: float, cores: int | None = None, available_mb: float | None = None) -> int:
    """Groups per batch (the baseline included): at most PROCESSES_PER_CORE replicas per core and
    MEMORY_SHARE of the available memory at replica_mb per replica; never fewer than 2."""
    cores = cores or os.cpu_count() or 1
    if available_mb is None:
        available_mb = sampler.read_meminfo().get("mem_available_kb", 0) / 1024
    by_cpu = PROCESSES_PER_CORE * cores // max(1, replicas)
    by_memory = int(MEMORY_SHARE * available_mb // max(1.0, replica_mb * replicas))
    return max(2, min(by_cpu, by_memory, MAX_GROUPS))


def batches(points: list[Point], limit: int) -> list[list[Point]]:
    """The points after the baseline in chunks, each with the baseline first; chunks as even as possible."""
    rest = points[1:]
    per = max(1, limit - 1)
    n = max(1, -(-len(rest) // per))
    size = -(-len(rest) // n)
    return [[points[0], *rest[i : i + size]] for i in range(0, len(rest), size)]


# ---- running ---------------------------------------------------------------------------------------


@dataclass
class PointResult:
    label: str
    allocator: str
    env: dict[str, str]
    batch: int
    group: str
    is_baseline: bool
    version: str | None = None
    memory_mb: float | None = None  # steady mean of the experiment's metric (mean over replicas)
    memory_ratio: float | None = None  # geometric-mean ratio to the batch's baseline
    memory_ci: tuple[float, float] | None = None
    memory_p: float | None = None  # Holm-adjusted, within the batch
    cpu_us_per_op: float | None = None
    cpu_ratio: float | None = None
    cpu_ci: tuple[float, float] | None = None
    cpu_p: float | None = None
    ops_per_s: float | None = None
    ops_ratio: float | None = None
    replicas: int = 0
    status: str = ""
    on_front: bool = False


@dataclass
class SweepResult:
    name: str
    metric: str
    baseline: str
    points: list[PointResult] = field(default_factory=list)
    batch_dirs: list[str] = field(default_factory=list)
    limit: int = 0
    limit_basis: str = ""
    warnings: dict[str, list[str]] = field(default_factory=dict)  # batch directory -> its run's warnings

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "metric": self.metric,
            "baseline": self.baseline,
            "groups_per_batch": self.limit,
            "batch_limit_basis": self.limit_basis,
            "batches": self.batch_dirs,
            "warnings": self.warnings,
            "points": [asdict(p) for p in self.points],
        }


def _cpu_levels(a, group: str) -> np.ndarray:
    return np.array(
        [
            r.cpu_us_per_op
            for r in a.replicas
            if r.group == group
            and r.verified is not False
            and r.excluded is None
            and r.cpu_us_per_op
            and r.cpu_us_per_op > 0
        ],
        dtype=float,
    )


def collect(a, batch: int, labels: dict[str, Point]) -> list[PointResult]:
    """One batch's figures per point, ratios and intervals against the batch's baseline (the
    comparisons of the analysis: Welch on log levels, Holm within the batch)."""
    from ..analysis import RULES

    cpu = {g.name: _cpu_levels(a, g.name) for g in a.groups}
    cpu_cmp = (
        stats.compare_to_baseline(cpu, a.baseline, alpha=RULES["alpha"]) if any(len(v) for v in cpu.values()) else {}
    )
    base = a.group(a.baseline)
    out = []
    for g in a.groups:
        p, c, cc = labels[g.name], g.comparison, cpu_cmp.get(g.name)
        out.append(
            PointResult(
                p.label,
                p.allocator,
                dict(p.env),
                batch,
                g.name,
                g.is_baseline,
                g.version,
                g.steady_mean_mb,
                1.0 if g.is_baseline else (c.ratio if c else None),
                c.ratio_ci if c else None,
                c.p_holm if c else None,
                g.cpu_us_per_op if (g.cpu_us_per_op or 0) > 0 else None,
                1.0 if g.is_baseline and cc else (cc.ratio if cc else None),
                cc.ratio_ci if cc else None,
                cc.p_adj if cc else None,
                g.ops_per_s,
                g.ops_per_s / base.ops_per_s if g.ops_per_s and base.ops_per_s else None,
                g.usable,
                stats.status_phrase(g.status, g.growth_shape),
            )
        )
    return out


def run_sweep(
    base: Base,
    spec: SweepSpec,
    out: Path,
    *,
    load_s: float | None = None,
    write_reports: bool = True,
    on_batch: Callable[[int, int, Runner], None] | None = None,
) -> SweepResult:
    from .. import analysis
    from ..reporters import sweep as sweep_report
    from ..run import preflight

    exp0 = base.experiment
    named = [(group_name(i, p.label), p) for i, p in enumerate(spec.points)]
    # every point checked (allocators built, tunables known) before anything is created
    preflight.prepare(derive(base, exp0.name, named[:MAX_GROUPS], named[0][0], load_s=load_s))
    for k in range(MAX_GROUPS, len(named), MAX_GROUPS - 1):
        preflight.prepare(
            derive(base, exp0.name, [named[0], *named[k : k + MAX_GROUPS - 1]], named[0][0], load_s=load_s)
        )
    outputs.new_output(out)
    outputs.writable_directory(out)
    replica_mb = spec.replica_mb or DEFAULT_REPLICA_MB
    res = SweepResult(exp0.name, exp0.metric, spec.points[0].label)
    remaining = spec.points[1:]
    k = 0
    while remaining:
        k += 1
        limit = spec.max_groups_per_batch or batch_limit(exp0.replicas, replica_mb)
        res.limit = limit
        res.limit_basis = (
            f"set in the sweep file ({limit})"
            if spec.max_groups_per_batch
            else f"{os.cpu_count()} cores × {PROCESSES_PER_CORE} replicas, {MEMORY_SHARE:.0%} of available memory at "
            f"{replica_mb:.0f} MB per replica, {exp0.replicas} replicas per group"
        )
        chunk = batches([spec.points[0], *remaining], limit)[0]
        remaining = remaining[len(chunk) - 1 :]
        labels = {group_name(spec.points.index(p), p.label): p for p in chunk}
        exp = derive(base, f"{exp0.name}-b{k:02d}"[:64], list(labels.items()), next(iter(labels)), load_s=load_s)
        run_dir = out / "batches" / f"batch-{k:02d}"
        runner = Runner(exp, run_dir)
        if on_batch:
            on_batch(k, len(chunk), runner)
        result = runner.run()
        res.batch_dirs.append(str(run_dir))
        if write_reports and not result.cut_short:
            from ..reporters import report

            report.write_report(run_dir)
        from ..store import Store

        store = Store.open(run_dir)
        a = analysis.analyse(store)
        store.close()
        res.points += [p for p in collect(a, k, labels) if not (p.is_baseline and k > 1)]
        res.warnings[run_dir.name] = [f"{w.kind} ({w.severity}): {w.message}" for w in a.warnings]
        peaks = [r.peak_mb for r in a.replicas if r.peak_mb]
        if peaks and not spec.replica_mb:
            replica_mb = max(peaks) * 1.25  # later batches sized by what this one used
        (out / "sweep.json").write_text(json.dumps(res.as_dict(), indent=2, default=str))
        if result.interrupted:
            break
    sweep_report.write(res, out)
    return res
