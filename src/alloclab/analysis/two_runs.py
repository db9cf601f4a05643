"""Two runs side by side (`alloclab compare`): each run analysed as `report` would, groups matched
by name (or by allocator family and version), run B tested against run A group by group with
stats.across_runs (replicas are the units), and what changed between the runs' provenance.

The CI gate (`--fail-on-increase PCT`) has three outcomes per group and for the whole comparison
(stats.across_runs.gate): "above" when a group's ratio interval lies wholly above 1 + PCT/100,
"within" when every group's interval lies at or below it, "inconclusive" otherwise; its false-fail
and false-pass rates are in docs/how-to/compare.md (benchmarks/compare_gate.py).

The comparison only: its text and JSON are reporters.two_runs (text_lines, to_json).
"""

from __future__ import annotations

import difflib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import stats
from ..common.errors import UserError
from ..stats.across_runs import GateResult, compare_pairs, gate
from ..store import Store
from . import RULES, analyse
from .replica import usable
from .warnings import LevelTime, Warning, times_of_day_differ

MATCH_BY = ("group", "allocator")
# run-level provenance shown when it differs (meta keys written by run/runner.py and capture/host.py)
RUN_FIELDS = (
    "host",
    "kernel",
    "os",
    "glibc",
    "cpu",
    "ncpu",
    "mem_total_kb",
    "alloclab_version",
    "python",
    "metric",
    "interval",
    "replicas_per_group",
    "phases",
    "seed",
    "cgroups",
    "source",
)
GROUP_FIELDS = (
    "allocator",
    "family",
    "version",
    "kind",
    "library_path",
    "library_sha256",
    "env_json",
    "command_json",
    "provenance_json",
)
EXPERIMENT_DIFF_LINES = 60
GATE_RULE = (
    "above when a group's whole ratio interval B/A (at its Holm level) lies above {limit:g}; within when every "
    "group's interval lies at or below it; inconclusive otherwise"
)


@dataclass
class RunInfo:
    path: str
    name: str
    started_at: float | None  # Unix time
    metric: str


@dataclass
class GroupDelta:
    key: str  # the matching key: group name, or "family version"
    group_a: str
    group_b: str
    n_a: int
    n_b: int
    level_a_mb: float | None  # the group's level exactly as `report` states it (GroupSummary.level_mb)
    level_b_mb: float | None
    comparison: stats.Comparison  # its ratio is of geometric means of the replica levels
    gate: GateResult | None = None  # only with --fail-on-increase

    @property
    def rose_beyond_gate(self) -> bool:
        return self.gate is not None and self.gate.outcome == "above"

    @property
    def verdict(self) -> str:
        c = self.comparison
        if not c.testable:
            return "untestable"
        if not c.significant:
            return "no significant change" + (" (equivalent)" if c.equivalent else "")
        return "higher" if c.status == "higher" else "lower"


@dataclass
class Change:
    scope: str  # "run", "experiment" or a matching key
    field: str
    a: Any  # typed as stored: numbers stay numbers, *_json fields are parsed
    b: Any


@dataclass
class RunComparison:
    a: RunInfo
    b: RunInfo
    by: str
    groups: list[GroupDelta]
    only_a: list[str]
    only_b: list[str]
    changes: list[Change]
    experiment_diff: list[str]
    basis: str
    alpha: float
    fail_on_increase: float | None = None
    notes: list[str] = field(default_factory=list)
    warnings_a: list[Warning] = field(default_factory=list)  # each run's own analysis warnings
    warnings_b: list[Warning] = field(default_factory=list)
    warnings: list[Warning] = field(default_factory=list)  # the comparison's own (times-of-day-differ)

    @property
    def failed(self) -> list[GroupDelta]:
        return [g for g in self.groups if g.rose_beyond_gate]

    @property
    def inconclusive(self) -> list[GroupDelta]:
        return [g for g in self.groups if g.gate is not None and g.gate.outcome == "inconclusive"]

    @property
    def gate_outcome(self) -> str | None:
        """within | above | inconclusive for the whole comparison (None without --fail-on-increase):
        above when any group is shown above; inconclusive when none is but one is inconclusive, or
        no group was matched at all."""
        raw = self.gate_raw
        return "inconclusive" if raw and self.gate_held else raw

    @property
    def gate_raw(self) -> str | None:
        """The outcome from the intervals alone, before gate_held."""
        if self.fail_on_increase is None:
            return None
        if self.failed:
            return "above"
        return "inconclusive" if self.inconclusive or not self.groups else "within"

    @property
    def gate_held(self) -> list[Warning]:
        """Warnings that make any gate outcome inconclusive: levels taken at different times of day
        (a daily cycle alone moves B/A; calibration in docs/lab/calibration.md, "Issue 29 scenarios")."""
        return [w for w in self.warnings if w.kind == "times-of-day-differ"]

    @property
    def any_significant(self) -> bool:
        return any(g.comparison.significant for g in self.groups)

    def as_dict(self) -> dict:
        return {
            "run_a": asdict(self.a),
            "run_b": asdict(self.b),
            "matched_by": self.by,
            "basis": self.basis,
            "alpha": self.alpha,
            "fail_on_increase_pct": self.fail_on_increase,
            "gate": self.gate_outcome,
            "gate_before_warnings": self.gate_raw,
            "gate_rule": None
            if self.fail_on_increase is None
            else GATE_RULE.format(limit=1 + self.fail_on_increase / 100),
            "any_significant_change": self.any_significant,
            "groups": [
                {
                    "key": g.key,
                    "group_a": g.group_a,
                    "group_b": g.group_b,
                    "replicas_a": g.n_a,
                    "replicas_b": g.n_b,
                    "level_a_mb": g.level_a_mb,
                    "level_b_mb": g.level_b_mb,
                    "ratio": g.comparison.ratio,
                    "ratio_ci": g.comparison.ratio_ci,
                    "ci_level": g.comparison.ci_level,
                    "p_raw": g.comparison.p_raw,
                    "p_holm": g.comparison.p_adj,
                    "significant": g.comparison.significant,
                    "equivalent": g.comparison.equivalent,
                    "verdict": g.verdict,
                    "method": g.comparison.method,
                    "notes": g.comparison.notes,
                    "rose_beyond_gate": g.rose_beyond_gate,
                    "gate": None
                    if g.gate is None
                    else {
                        "outcome": g.gate.outcome,
                        "limit": g.gate.limit,
                        "allows_up_to_pct": g.gate.upper_pct,
                        "smallest_detectable_increase_pct": g.gate.detectable_pct,
                        "reason": g.gate.reason,
                    },
                }
                for g in self.groups
            ],
            "warnings": [w.as_dict() for w in self.warnings],
            "warnings_a": [w.as_dict() for w in self.warnings_a],
            "warnings_b": [w.as_dict() for w in self.warnings_b],
            "only_in_a": self.only_a,
            "only_in_b": self.only_b,
            "provenance_changes": [asdict(c) for c in self.changes],
            "experiment_diff": self.experiment_diff,
            "notes": self.notes,
        }


def _key(g: dict, by: str) -> str:
    if by == "group":
        return g["name"]
    return " ".join(x for x in (g["family"] or g["allocator"], g["version"]) if x)


def _keyed(groups: list[dict], by: str, which: str) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for g in groups:
        k = _key(g, by)
        if k in out:
            raise UserError(
                f"run {which} has two groups on {k} ({out[k]['name']}, {g['name']}): --by allocator cannot match them",
                "use --by group",
            )
        out[k] = g
    return out


def _typed(field_name: str, v) -> Any:
    """A group column as JSON: the *_json columns parsed, the rest as stored."""
    if field_name.endswith("_json") and isinstance(v, str):
        try:
            return json.loads(v)
        except ValueError:
            return v
    return v


def _open(run: str | Path, which: str) -> Store:
    store = Store.open_checked(run)
    if not store.groups():
        raise UserError(f"run {which} ({run}) has no groups", "give a run made by `alloclab run` or `alloclab import`")
    return store


def _level_time(an, meta: dict) -> LevelTime | None:
    """When the run's compared levels were taken: imported data at the comparable window's end; a
    fleet collector run or a merge as a mean over its replicas' steady windows (the medians of their
    starts and ends); None for an experiment of `alloclab run`, which makes its own load."""
    if an.imported:
        return None if an.window is None else LevelTime(an.window.start, an.window.end, averaged=False)
    if meta.get("source") == "run":
        return None  # an experiment makes its own load (command, [load]): the hour it ran at is no factor
    used = [r for r in an.replicas if usable(r)]
    if not used:
        return None
    return LevelTime(
        float(np.median([r.steady_start for r in used])), float(np.median([r.steady_end for r in used])), averaged=True
    )


def compare_runs(
    run_a: str | Path,
    run_b: str | Path,
    *,
    metric: str | None = None,
    by: str = "group",
    fail_on_increase: float | None = None,
) -> RunComparison:
    if by not in MATCH_BY:
        raise UserError(f"--by {by!r} is not known", f"use one of: {', '.join(MATCH_BY)}")
    if fail_on_increase is not None and not (0 <= fail_on_increase < 1000):
        raise UserError(
            f"--fail-on-increase {fail_on_increase:g} is out of range", "give a percentage from 0 to 999, e.g. 5"
        )
    sa, sb = _open(run_a, "A"), _open(run_b, "B")
    ma, mb = sa.typed_meta(), sb.typed_meta()
    metric = metric or ma.get("metric", "rss")
    aa, ab = analyse(sa, metric), analyse(sb, metric)
    ga, gb = _keyed(sa.groups(), by, "A"), _keyed(sb.groups(), by, "B")
    common = [k for k in ga if k in gb]
    pairs = {
        k: (aa.levels.get(ga[k]["name"], np.array([])), ab.levels.get(gb[k]["name"], np.array([]))) for k in common
    }
    comps = compare_pairs(
        pairs, alpha=RULES["alpha"], margin=RULES["equivalence_margin"], seed=int(mb.get("seed", "0") or 0)
    )
    deltas = []
    for k in common:
        la, lb = pairs[k]
        d = GroupDelta(
            k,
            ga[k]["name"],
            gb[k]["name"],
            len(la),
            len(lb),
            aa.group(ga[k]["name"]).level_mb,
            ab.group(gb[k]["name"]).level_mb,
            comps[k],
        )
        if fail_on_increase is not None:
            d.gate = gate(comps[k], fail_on_increase)
        deltas.append(d)
    changes = [Change("run", f, ma.get(f), mb.get(f)) for f in RUN_FIELDS if ma.get(f) != mb.get(f)]
    for k in common:
        for f in GROUP_FIELDS:
            if ga[k].get(f) != gb[k].get(f):
                changes.append(Change(k, f, _typed(f, ga[k].get(f)), _typed(f, gb[k].get(f))))
        if bool(ga[k]["is_baseline"]) != bool(gb[k]["is_baseline"]):
            changes.append(Change(k, "is_baseline", bool(ga[k]["is_baseline"]), bool(gb[k]["is_baseline"])))
    diff = list(
        difflib.unified_diff(
            (ma.get("experiment") or "").splitlines(),
            (mb.get("experiment") or "").splitlines(),
            "A/experiment",
            "B/experiment",
            lineterm="",
            n=1,
        )
    )
    notes = []
    if aa.level_basis != ab.level_basis:
        notes.append(f"the runs' levels are not the same figure: A uses the {aa.level_basis}, B the {ab.level_basis}")
    if not common:
        notes.append(f"no group of A matches a group of B by {by}" + (" (try --by allocator)" if by == "group" else ""))
    untestable = [d.key for d in deltas if not d.comparison.testable]
    if untestable:
        notes.append(
            f"untestable (fewer than 2 usable replicas in a run): {', '.join(untestable)}"
            + ("; the gate calls them inconclusive" if fail_on_increase is not None else "")
        )
    info = lambda path, m: RunInfo(str(path), str(m.get("name", Path(path).name)), m.get("started_at"), metric)
    out = RunComparison(
        info(run_a, ma),
        info(run_b, mb),
        by,
        deltas,
        [k for k in ga if k not in gb],
        [k for k in gb if k not in ga],
        changes,
        diff[:EXPERIMENT_DIFF_LINES]
        + ([f"... {len(diff) - EXPERIMENT_DIFF_LINES} more lines"] if len(diff) > EXPERIMENT_DIFF_LINES else []),
        aa.level_basis,
        RULES["alpha"],
        fail_on_increase,
        notes,
        aa.warnings,
        ab.warnings,
    )
    clock = times_of_day_differ(_level_time(aa, ma), _level_time(ab, mb))
    out.warnings += [clock] if clock else []
    sa.close()
    sb.close()
    return out
