"""Confounds as typed data: each check returns Warning objects naming the replicas and groups it
concerns; the verdict cites the ones it rests on. Thresholds are in RULES (docs/method/index.md).

`collect` runs CHECKS in order over one Context: each check is a small function of the context
that yields its warnings (none, one or several). A new check is one more function and one more
line in CHECKS, placed where its warning should appear in the report."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, cast

import numpy as np

from ..common.signalname import how_ended
from ..common.timefmt import span, utc
from ..stats.rules import RULES
from ..store import CUT_SHORT_REASONS, Store
from .duplicates import Duplicate, identical_pairs  # noqa: F401  (identical_pairs: re-exported)
from .load import LabelMapping, Series
from .replica import ReplicaStats
from .windows import EndFigure, Restart, Window, daily_swing


@dataclass
class Warning:  # the analysis' own warning type, not the builtin
    kind: str  # e.g. "mixed-allocators", "identical-series"
    severity: str  # info | caution | serious
    replicas: list[str]
    groups: list[str]
    message: str  # plain words
    data: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "severity": self.severity,
            "replicas": self.replicas,
            "groups": self.groups,
            "message": self.message,
            "data": self.data,
        }


def _names(xs: list[str], k: int = 8) -> str:
    return ", ".join(xs[:k]) + (f" and {len(xs) - k} more" if len(xs) > k else "")


@dataclass
class Context:
    """What every check may look at: the store (read only), the analysis so far, and derived facts
    read once."""

    store: Store
    series: list[Series]
    reps: list[ReplicaStats]
    window: Window | None
    figures: dict[str, EndFigure]
    mapping: dict[str, LabelMapping]
    groups: list[str]
    imported: bool
    duplicates: list[Duplicate] = field(default_factory=list)
    restarts: list[Restart] = field(default_factory=list)
    modelled: dict[str, Series] = field(default_factory=dict)  # young processes' series, regrowth added back

    @cached_property
    def meta(self) -> dict[str, str]:
        return self.store.meta()

    @cached_property
    def replica_rows(self) -> list[dict[str, Any]]:
        return self.store.replicas()

    @cached_property
    def host(self) -> dict[str, Any]:
        """The host's figures over the whole run (store.host_summary)."""
        return self.store.host_summary()

    @cached_property
    def embedded(self) -> dict[str, str]:
        """Replicas whose program carries its own allocator (recorded at run time, replicas.embedded_json),
        with their verification words."""
        return {r["name"]: r["verify_detail"] for r in self.replica_rows if json.loads(r.get("embedded_json") or "[]")}

    def series_groups(self, names: Iterable[str]) -> list[str]:
        """The groups of the series named."""
        names = set(names)
        return sorted({s.group for s in self.series if s.name in names})

    def replica_groups(self, names: Iterable[str]) -> list[str]:
        """The groups of the replicas named."""
        names = set(names)
        return sorted({r.group for r in self.reps if r.name in names})


Check = Callable[[Context], Iterator[Warning]]


def restart_in_window(c: Context) -> Iterator[Warning]:
    if c.restarts:
        yield restart_warning(c.restarts, c.window)


def regrowth(c: Context) -> Iterator[Warning]:
    """`regrowth` (info): processes that (re)started regrow to their level (analysis/regrowth.py); said
    in one line, with how much of the window the steep part takes, so the reader knows start-up was
    not read as growth."""
    grown = [r for r in c.reps if r.regrowth_share is not None]
    if not grown:
        return
    share = sorted(cast(float, r.regrowth_share) for r in grown)
    tau = sorted(cast(float, r.regrowth_tau_h) for r in grown)  # set with the share
    left = [r.warmup_end_s / 3600 for r in grown if r.warmup_end_s]
    cut = f", its steep part left out (the first {min(left):.1f}–{max(left):.1f} h of each)" if left else ""
    yield Warning(
        "regrowth",
        "info",
        sorted(r.name for r in grown),
        sorted({r.group for r in grown}),
        f"{len(grown)} replicas' processes regrow after a (re)start ({share[0]:.0%}–{share[-1]:.0%} below "
        f"their level, τ {tau[0]:.1f}–{tau[-1]:.1f} h): start-up is not read as growth{cut}, the rest "
        "of the regrowth modelled; growth and levels are those of the level they regrow to",
        {
            "replicas": [
                {
                    "replica": r.name,
                    "group": r.group,
                    "deficit_share": r.regrowth_share,
                    "tau_h": r.regrowth_tau_h,
                    "left_out_h": (r.warmup_end_s or 0) / 3600,
                }
                for r in grown
            ]
        },
    )


def daily_swing_differs(c: Context) -> Iterator[Warning]:
    """`daily-swing-differs` (caution): groups whose relays swing with the time of day by different
    amounts (median fitted daily swing, windows.daily_swing): a level read at one hour would favour
    whichever group is at its low then; the comparison uses day levels (windows.day_level)."""
    if c.window is None or not c.imported:
        return
    swing: dict[str, list[float]] = {}
    for s in c.series:
        fig = c.figures.get(s.group)
        if (
            fig is not None
            and s.name in fig.clean
            and (v := daily_swing(c.modelled.get(s.name, s), c.window)) is not None
        ):
            swing.setdefault(s.group, []).append(v)
    med = {g: float(np.median(v)) for g, v in swing.items() if v}
    if len(med) < 2:
        return
    hi, lo = max(med, key=lambda g: med[g]), min(med, key=lambda g: med[g])
    if med[hi] >= RULES["swing_differs_min_share"] and med[hi] >= RULES["swing_differs_ratio"] * med[lo]:
        others = [g for g in med if g != hi]
        yield Warning(
            "daily-swing-differs",
            "caution",
            [],
            sorted(med),
            f"{hi}'s relays swing ±{med[hi]:.1%} with the time of day, {', '.join(others)}'s "
            f"±{min(med[g] for g in others):.1%}–{max(med[g] for g in others):.1%}: levels are compared as "
            "day levels (hourly means over the window's last day), as a figure at one hour would "
            "follow the clock",
            {"swing": med},
        )


def mixed_allocators(c: Context) -> Iterator[Warning]:
    """A group's published figure includes data from other allocators."""
    for g, f in c.figures.items():
        mixed = [w for w in f.why if "data end at" not in w]  # ended early: named elsewhere, not a mix
        if mixed:
            moved = [w.split(":")[0] for w in mixed]
            yield Warning(
                "mixed-allocators",
                "caution",
                moved,
                [g],
                f"group {g}'s published-style figure (every listed replica) includes {len(moved)} "
                f"replicas not on {g}'s allocator throughout the window: {'; '.join(mixed[:6])}"
                + (" …" if len(mixed) > 6 else ""),
                {"published_mb": f.published_mb, "clean_mb": f.clean_mb},
            )


def unknown_allocator_excluded(c: Context) -> Iterator[Warning]:
    unknown = [s.name for s in c.series if any(seg.group is None for seg in s.segments)]
    if unknown:
        yield Warning(
            "unknown-allocator-excluded",
            "info",
            unknown,
            c.series_groups(unknown),
            f"{len(unknown)} replicas have spans whose allocator the evidence does not establish "
            f"(excluded from every figure): {_names(unknown)}",
        )


def level_shift(c: Context) -> Iterator[Warning]:
    shifted = [s.name for s in c.series if any(not seg.reason.startswith("unrecorded") for seg in s.segments[1:])]
    if shifted:
        yield Warning(
            "level-shift",
            "info",
            shifted,
            c.series_groups(shifted),
            f"{len(shifted)} replicas change level at a recorded event (an allocator change or "
            f"restart): their series are cut there, e.g. {_names(shifted, 6)}",
        )


def not_on_allocator_at_end(c: Context) -> Iterator[Warning]:
    offclean = [s.name for s in c.series if s.clean is None and len(s.t)]
    if offclean:
        yield Warning(
            "not-on-allocator-at-end",
            "caution",
            offclean,
            c.series_groups(offclean),
            f"{len(offclean)} replicas do not end on their group's allocator and are left out: {_names(offclean)}",
        )


def started_late(c: Context) -> Iterator[Warning]:
    if c.window is None:
        return
    late = [
        s.name for s in c.series if s.clean is not None and s.treatment_start and s.treatment_start > c.window.start + 1
    ]
    if late:
        yield Warning(
            "started-late",
            "caution",
            late,
            c.series_groups(late),
            f"{len(late)} replicas began their treatment after the comparable window opened "
            f"({utc(c.window.start, minutes=True)}) and are left out of its figures: {_names(late)}",
        )


def age_skew(c: Context) -> Iterator[Warning]:
    w = c.window
    if w is None:
        return
    ages = {s.name: w.start - s.clean.start for s in c.series if s.clean is not None and s.clean.start <= w.start}
    if ages and w.end > w.start:
        spread = max(ages.values()) - min(ages.values())
        if spread > RULES["age_skew_share"] * (w.end - w.start):
            young = sorted(ages, key=lambda n: ages[n])[:5]
            yield Warning(
                "age-skew",
                "caution",
                sorted(ages),
                c.series_groups(ages),
                f"process ages at the window's start differ by {span(spread)} "
                f"(youngest: {', '.join(young)}): compare at matched age too (the age table)",
                {"spread_h": spread / 3600},
            )


def groups_started_apart(c: Context) -> Iterator[Warning]:
    starts = c.window.group_starts if c.window is not None else None
    if starts and max(starts.values()) - min(starts.values()) > RULES["start_skew_intervals"] * float(
        c.meta.get("interval", 1) or 1
    ):
        first = min(starts, key=lambda g: starts[g])
        yield Warning(
            "groups-started-apart",
            "caution",
            [],
            sorted(starts),
            f"groups began their treatments up to {span(max(starts.values()) - min(starts.values()))} "
            f"apart ({', '.join(f'{g}: {utc(t, minutes=True)}' for g, t in sorted(starts.items(), key=lambda x: x[1]))}); "
            f"figures use the common window only (earliest: {first})",
        )


def replica_in_several_groups(c: Context) -> Iterator[Warning]:
    several = json.loads(c.meta.get("replicas_in_several_groups", "[]") or "[]")
    if several:
        yield Warning(
            "replica-in-several-groups",
            "caution",
            several,
            [],
            f"{len(several)} replicas are listed in more than one group (e.g. {_names(several, 6)}); "
            "each is analysed in the group of its current list, on the spans the evidence attributes to it",
        )


def identical_series(c: Context) -> Iterator[Warning]:
    for d in c.duplicates:
        yield Warning(
            "identical-series",
            "serious",
            [d.dropped_from, d.kept],
            c.series_groups((d.dropped_from, d.kept)),
            f"{d.dropped_from} = {d.kept}: equal at {d.equal} of {d.shared} shared timestamps (one process "
            f"sampled twice under two names); rule applied: those {d.equal} samples are dropped from "
            f"{d.dropped_from} ({d.rule}), which keeps {d.remaining}, so the process counts once",
            {
                "equal": d.equal,
                "shared": d.shared,
                "dropped_from": d.dropped_from,
                "kept": d.kept,
                "dropped_samples": d.equal,
                "remaining": d.remaining,
            },
        )


def too_few_replicas(c: Context) -> Iterator[Warning]:
    small = [
        g
        for g in c.groups
        if sum(1 for r in c.reps if r.group == g and r.steady_mb is not None) < RULES["min_replicas"]
    ]
    if small:
        yield Warning(
            "too-few-replicas",
            "caution",
            [],
            small,
            f"fewer than {RULES['min_replicas']} usable replicas in {', '.join(small)}: "
            "a difference may not be shown significant",
        )


def too_short(c: Context) -> Iterator[Warning]:
    short = [r.name for r in c.reps if r.status == "Too short"]
    if short:
        yield Warning(
            "too-short",
            "info",
            short,
            c.replica_groups(short),
            f"{len(short)} replicas have too few steady samples: run longer or sample more often",
        )


def hosts_unbalanced(c: Context) -> Iterator[Warning]:
    yield from host_spread(c.replica_rows, c.groups)


def embedded_allocator(c: Context) -> Iterator[Warning]:
    """A program that carries its own allocator: LD_PRELOAD does not reach its allocations."""
    embedded = c.embedded
    if embedded:
        first = next(iter(embedded.values())).split("; ")[0]
        yield Warning(
            "embedded-allocator",
            "serious",
            sorted(embedded),
            c.replica_groups(embedded),
            f"{len(embedded)} replicas run a program that carries its own allocator, so the group's "
            f"allocator does not serve them (excluded): {_names(sorted(embedded))} — {first}",
            {"details": embedded},
        )


def unverified(c: Context) -> Iterator[Warning]:
    names = [r.name for r in c.reps if r.verified is False and r.name not in c.embedded]
    if names:
        yield Warning(
            "unverified",
            "serious",
            names,
            sorted({r.group for r in c.reps if r.verified is False}),
            f"excluded, not running the expected allocator: {_names(names)}",
        )


def _ended(c: Context, kind: str, ends: tuple[str | None, ...]) -> Iterator[Warning]:
    """Replicas that crashed or exited before the planned end, by name (docs/reference/store.md)."""
    hit = [
        s
        for s in c.series
        if not c.imported
        and len(s.t)
        and (s.end_kind in ends if s.end_kind is not None else (None in ends and s.exit_code not in (None, 0)))
    ]
    if not hit:
        return
    excluded = {r.name: r.excluded for r in c.reps if r.excluded}
    parts = []
    for s in hit:
        fate = (
            "excluded from the comparison, data shown" if s.name in excluded else "compared (it ended after the window)"
        )
        parts.append(
            f"{s.name} ({s.group}): {how_ended(s.exit_code)} at {utc(s.ended_at or float(s.t[-1]), minutes=True)}, {fate}"
        )
    verb = "crashed" if kind == "replica-crashed" else "exited before the planned end"
    yield Warning(
        kind,
        "serious",
        [s.name for s in hit],
        sorted({s.group for s in hit}),
        f"{len(hit)} replicas {verb}: " + "; ".join(parts[:8]) + (" …" if len(parts) > 8 else ""),
        {
            "replicas": {
                s.name: {
                    "end_kind": s.end_kind,
                    "exit_code": s.exit_code,
                    "ended_at": s.ended_at,
                    "excluded": excluded.get(s.name),
                }
                for s in hit
            }
        },
    )


def replica_crashed(c: Context) -> Iterator[Warning]:
    yield from _ended(c, "replica-crashed", ("crashed",))


def replica_exited(c: Context) -> Iterator[Warning]:
    yield from _ended(c, "replica-exited", ("exited-early", None))


def run_cut_short(c: Context) -> Iterator[Warning]:
    meta = c.meta
    reason = meta.get("end_reason", "")
    cut = meta.get("cut_short", "")
    if not c.imported and (cut or reason in CUT_SHORT_REASONS):
        evs = [e for e in c.store.events(kinds=("cut_short",))]
        what = evs[-1]["description"] if evs else ""
        yield Warning(
            "run-cut-short",
            "serious",
            [],
            [],
            f"the run was cut short ({cut or reason}" + (f": {what}" if what else "") + f") at "
            f"{utc(float(meta['ended_at']), minutes=True) if meta.get('ended_at') else 'an unknown time'}: "
            "every figure covers less than planned",
            {"reason": cut or reason, "event": what},
        )
    elif (
        reason
        and not c.imported
        and reason not in ("planned duration reached", "all replicas exited")
        and not reason.startswith("stopped early")
    ):
        yield Warning(
            "run-cut-short", "caution", [], [], f"the run ended early ({reason}): figures cover less than planned"
        )


def lazyfree_material(c: Context) -> Iterator[Warning]:
    lazy = [r for r in c.reps if r.lazyfree_share is not None and r.lazyfree_share > RULES["lazyfree_material_share"]]
    if lazy:
        yield Warning(
            "lazyfree-material",
            "caution",
            [r.name for r in lazy],
            sorted({r.group for r in lazy}),
            f"LazyFree (pages freed with MADV_FREE, reclaimable) is over {RULES['lazyfree_material_share']:.0%} "
            f"of the metric in {len(lazy)} replicas: RSS overstates what they hold; see the footprint column",
            {"max_share": max(cast(float, r.lazyfree_share) for r in lazy)},
        )


def host_memory(c: Context) -> Iterator[Warning]:
    """memory-pressure and swap-used, over the whole run."""
    host = c.host
    if not host["samples"]:
        return
    if host["min_available_share"] is not None and host["min_available_share"] < 0.1:
        yield Warning(
            "memory-pressure",
            "caution",
            [],
            [],
            f"host memory available fell to {host['min_available_share']:.0%}: the kernel may have reclaimed pages",
        )
    if host["max_swap_used_kb"]:
        yield Warning(
            "swap-used",
            "caution",
            [],
            [],
            f"up to {host['max_swap_used_kb'] / 1024:.0f} MB of swap in use: RSS understates memory",
        )


def cpu_load(c: Context) -> Iterator[Warning]:
    """cpu-saturated or cpu-burst. CPU saturation is judged where the figures come from: the
    comparison window. A start-up burst (every replica initialising at once) lifts the 1-minute
    load for a while but is not a saturated measurement; a median above the rule over the window is."""
    host = c.host
    if not host["samples"]:
        return
    compared = c.store.host_summary(c.window.start, c.window.end) if c.window is not None else host
    ncpu = int(c.meta.get("ncpu", "0") or 0)
    limit = RULES["cpu_saturated_load_per_core"] * ncpu
    if ncpu and compared["median_load1"] is not None and compared["median_load1"] > limit:
        yield Warning(
            "cpu-saturated",
            "caution",
            [],
            [],
            f"load average was {compared['median_load1']:.1f} (median; peak {compared['max_load1']:.1f}) on "
            f"{ncpu} cores over the compared window: throughput and time-based allocator behaviour "
            "are distorted",
            {"median_load1": compared["median_load1"], "max_load1": compared["max_load1"]},
        )
    elif ncpu and host["max_load1"] and host["max_load1"] > limit:
        yield Warning(
            "cpu-burst",
            "info",
            [],
            [],
            f"load average peaked at {host['max_load1']:.1f} on {ncpu} cores (e.g. while replicas started) "
            f"but stayed at {compared['median_load1'] or 0:.1f} (median) over the compared window",
            {"max_load1": host["max_load1"], "median_load1": compared["median_load1"]},
        )


def ticks_skipped(c: Context) -> Iterator[Warning]:
    meta = c.meta
    skipped = int(meta.get("ticks_skipped", "0") or 0)
    if not skipped:
        return
    interval = float(meta.get("interval", "0") or 0)
    started, ended = float(meta.get("started_at", "0") or 0), float(meta.get("ended_at", "0") or 0)
    ticks = (ended - started) / interval + 1 if interval > 0 and ended > started else skipped
    share = min(1.0, skipped / max(ticks, 1.0))
    yield Warning(
        "ticks-skipped",
        "caution" if share > RULES["ticks_skipped_share"] else "info",
        [],
        [],
        f"the sampler skipped {skipped} of about {ticks:.0f} ticks ({share:.1%}): a tick took longer "
        "than the interval (a busy host, or too many processes for it); series have gaps there",
        {"skipped": skipped, "ticks": round(ticks), "share": share},
    )


def event_label_unmapped(c: Context) -> Iterator[Warning]:
    guessed = [m for m in c.mapping.values() if m.evidence.startswith(("label is", "no evidence"))]
    if guessed:
        yield Warning(
            "event-label-unmapped",
            "info",
            [],
            [],
            "event labels mapped without evidence: "
            + "; ".join(f"{m.label} → {', '.join(m.groups) or 'none'}" for m in guessed),
        )


def facts_not_recorded(c: Context) -> Iterator[Warning]:
    """A store written before the run recorded which replicas carry their own allocator
    (replicas.embedded_json, schema 7): their unverified replicas cannot be told apart."""
    missing = [r["name"] for r in c.replica_rows if r["verified"] == 0 and r.get("embedded_json") is None]
    if missing and not c.imported:
        yield Warning(
            "facts-not-recorded",
            "info",
            missing,
            c.replica_groups(missing),
            f"this run was recorded before alloclab stored whether a program carries its own allocator: "
            f"{_names(missing)} are reported as unverified, which may be that cause (their verification "
            "words say)",
            {"missing": ["replicas.embedded_json"]},
        )


# The checks, in the order their warnings appear.
CHECKS: tuple[Check, ...] = (
    restart_in_window,
    regrowth,
    daily_swing_differs,
    mixed_allocators,
    unknown_allocator_excluded,
    level_shift,
    not_on_allocator_at_end,
    started_late,
    age_skew,
    groups_started_apart,
    replica_in_several_groups,
    identical_series,
    too_few_replicas,
    too_short,
    hosts_unbalanced,
    embedded_allocator,
    unverified,
    replica_crashed,
    replica_exited,
    run_cut_short,
    lazyfree_material,
    host_memory,
    cpu_load,
    ticks_skipped,
    event_label_unmapped,
    facts_not_recorded,
)


def collect(
    store: Store,
    series: list[Series],
    reps: list[ReplicaStats],
    window: Window | None,
    figures: dict[str, EndFigure],
    mapping: dict[str, LabelMapping],
    groups: list[str],
    imported: bool,
    duplicates: list[Duplicate] | None = None,
    restarts: list[Restart] | None = None,
    modelled: dict[str, Series] | None = None,
) -> list[Warning]:
    """Every check's warnings, in CHECKS order."""
    c = Context(
        store,
        series,
        reps,
        window,
        figures,
        mapping,
        groups,
        imported,
        duplicates or [],
        restarts or [],
        modelled or {},
    )
    return [w for check in CHECKS for w in check(c)]


def restart_warning(restarts: list[Restart], window: Window | None) -> Warning:
    """`restart-in-window` (caution): processes restarted inside the comparison window, recorded
    or not, by name, and what the analysis did about each (docs/method/index.md)."""
    cut = [r for r in restarts if r.after_end]
    left = [r for r in restarts if r.excluded]
    kept = [r for r in restarts if not r.after_end and not r.excluded]
    parts = []
    if cut and window is not None:
        parts.append(
            f"the window now ends at {utc(window.end, minutes=True)}, before "
            f"{_names(sorted({r.replica for r in cut}))} restarted, so their levels are the processes "
            "that ran through it"
        )
    if left:
        parts.append(
            f"{_names(sorted({r.replica for r in left}))} "
            f"{'are' if len({r.replica for r in left}) > 1 else 'is'} left out of the comparison, growth test "
            "and status vote (restarted in the window's second half; the group keeps enough replicas)"
        )
    if kept:
        parts.append(
            f"{_names(sorted({r.replica for r in kept}))} still compared (restarted in the window's first "
            "half, or in a group that restarts as a pattern): read their levels as those of processes "
            "of that age (the age table)"
        )
    unrecorded = sum(not r.recorded for r in restarts)
    first = restarts[0]
    return Warning(
        "restart-in-window",
        "caution",
        sorted({r.replica for r in restarts}),
        sorted({r.group for r in restarts}),
        f"{len({r.replica for r in restarts})} replicas' processes restarted inside the comparison window "
        f"({unrecorded} with no recorded event; first: {first.replica} at {utc(first.t, minutes=True)}, "
        f"{first.reason}): a young process's level is not its allocator's; " + "; ".join(parts),
        {
            "restarts": [
                {
                    "replica": r.replica,
                    "group": r.group,
                    "t": r.t,
                    "reason": r.reason,
                    "recorded": r.recorded,
                    "excluded": r.excluded,
                    "after_window": r.after_end,
                }
                for r in restarts
            ]
        },
    )


def host_spread(replicas: list[dict[str, Any]], groups: list[str]) -> list[Warning]:
    """Replicas on several hosts (fleet collectors, Prometheus imports): a host is a confound when
    groups are spread over hosts unevenly, i.e. some host's share of a group's replicas differs
    from its share of all replicas by more than RULES["host_share_gap"]."""
    placed = [r for r in replicas if r.get("host") and r["group"] in groups]
    hosts = sorted({r["host"] for r in placed})
    if len(hosts) < 2:
        return []
    overall = {h: sum(r["host"] == h for r in placed) / len(placed) for h in hosts}
    table: dict[str, dict[str, int]] = {}
    gaps = []
    for g in groups:
        mine = [r for r in placed if r["group"] == g]
        if not mine:
            continue
        table[g] = {h: sum(r["host"] == h for r in mine) for h in hosts}
        for h in hosts:
            gap = table[g][h] / len(mine) - overall[h]
            if abs(gap) > RULES["host_share_gap"]:
                gaps.append((g, h, gap))
    if not gaps:
        return []
    spread = "; ".join(f"{g}: " + ", ".join(f"{h} {n}" for h, n in by_host.items()) for g, by_host in table.items())
    worst = max(gaps, key=lambda x: abs(x[2]))
    return [
        Warning(
            "hosts-unbalanced",
            "caution",
            [],
            sorted({g for g, _, _ in gaps}),
            f"groups are spread unevenly over {len(hosts)} hosts ({spread}): a difference between groups may be "
            f"a difference between hosts (largest gap: {worst[0]} on {worst[1]}, {worst[2]:+.0%} of its replicas "
            f"against the fleet's share); compare within a host, or re-plan each host with every group",
            {"replicas_per_host": table, "hosts": hosts},
        )
    ]


@dataclass
class LevelTime:
    """When a run's levels were taken (compare): over the window [start, end] (Unix s), as a mean
    over it (`averaged`) or at its end."""

    start: float
    end: float
    averaged: bool

    @property
    def day_average(self) -> bool:
        return self.averaged and (self.end - self.start) / 3600 >= RULES["day_average_hours"]

    @property
    def at(self) -> float:
        """The time of day the level stands for: the window's middle for a mean, else its end."""
        return (self.start + self.end) / 2 if self.averaged else self.end

    def words(self) -> str:
        clock: Callable[[float], str] = lambda t: utc(t, minutes=True)[11:16]
        how = f"mean over {span(self.end - self.start)}" if self.averaged else "level at its end"
        return f"{clock(self.start)}–{clock(self.end)} UTC ({how}, stands for {clock(self.at)} UTC)"


def times_of_day_differ(a: LevelTime | None, b: LevelTime | None) -> Warning | None:
    """Two runs' levels taken at different times of day (more than RULES clock_skew_hours apart), or
    one a day average and the other not: a daily cycle in memory shifts one run against the other,
    so a ratio B/A can move by the cycle alone. None when both levels average ≥ day_average_hours."""
    if a is None or b is None or (a.day_average and b.day_average):
        return None
    apart = abs((a.at - b.at) / 3600) % 24
    apart = min(apart, 24 - apart)
    if a.day_average == b.day_average and apart <= RULES["clock_skew_hours"]:
        return None
    why = (
        f"{apart:.1f} h apart in time of day"
        if a.day_average == b.day_average
        else "one run's level is a day average, the other's is taken at one time of day"
    )
    return Warning(
        "times-of-day-differ",
        "caution",
        [],
        [],
        f"the runs' levels cover different parts of the day ({why}): A {a.words()}, B {b.words()}; a daily "
        f"cycle in memory moves B/A by itself, so the gate calls such a comparison inconclusive. Start both "
        f"runs at the same hour (within {RULES['clock_skew_hours']:g} h), or run each ≥ 24 h",
        {
            "a": {"start": a.start, "end": a.end, "averaged": a.averaged, "at": a.at},
            "b": {"start": b.start, "end": b.end, "averaged": b.averaged, "at": b.at},
            "hours_apart": round(apart, 2),
            "limit_hours": RULES["clock_skew_hours"],
            "day_average_hours": RULES["day_average_hours"],
        },
    )
