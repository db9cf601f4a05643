"""Is a fleet comparison decided, and if not, how long until it is: the status of a live fleet run.

Looking often must not make a false decision likelier, so the decision is never taken when the
operator looks. It is taken on a fixed grid of looks from the experiment's start (every
`LookPlan.every_s`, 12 h by default, up to `horizon_s`, 14 days), each look computed from the data
up to its own time only. `fleet status` at any moment reports the grid looks that have passed:
looking every hour, every minute or once gives the same answer, and the rule is anytime-valid
however often and whenever anyone looks.

Look k tests every group against the baseline with the analysis's own comparison
(stats.compare_to_baseline: Welch's t on per-unit log levels, Holm across the groups) at
α·t_k / Σt — stats.SequentialTest's alpha spending for planned look times (α in proportion to the
look's elapsed time, all of it spent by the horizon), so the family-wise false-decision rate over
every look is at most α (Bonferroni over the looks). A group is decided at the first look whose
interval at that level excludes 1 (lower / higher) or lies within ±margin (equivalent), and stays
decided. Calibration (false decisions under hourly looks, power, time to decision):
benchmarks/fleet_decision.py.

A unit's level at look T: the mean of its memory over the second half of the time elapsed,
(T0 + (T − T0)/2, T], on its own group's allocator, leaving out the first `settle_s` of every
process (the regrowth after `fleet apply` restarted every moved unit, and after any later
restart). Every group's window is the same stretch of clock time, so a daily cycle or a
network-wide event that moves every relay moves both sides of the ratio.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace

import numpy as np
from scipy import special

from .. import stats
from ..common.timefmt import utc
from ..stats.across_runs import log_se
from ..stats.group_tests import welch
from ..stats.rules import RULES

DAY = 86400.0
HOLD_P = 0.2  # a gap still closing at this one-sided level holds a decision back (still_closing)


@dataclass(frozen=True)
class LookPlan:
    every_s: float = 12 * 3600.0  # the grid: a look every 12 h from the experiment's start
    horizon_s: float = 14 * DAY  # all of alpha is spent by here
    settle_s: float = 3600.0  # a process's first hour is regrowth, not a level
    alpha: float = RULES["alpha"]
    margin: float = 0.05  # equivalent: the ratio's interval within ±5%

    def times(self) -> list[float]:
        n = max(1, math.floor(self.horizon_s / self.every_s + 1e-9))
        return [self.every_s * k for k in range(1, n + 1)]

    def levels(self) -> list[float]:
        """Each look's level (stats.SequentialTest's spending in proportion to elapsed time)."""
        test = stats.SequentialTest(alpha=self.alpha, look_times_s=self.times())
        return [test.alpha_at(k) for k in range(1, len(self.times()) + 1)]


@dataclass
class ComparisonStatus:
    group: str
    baseline: str
    state: str  # decided | undecided
    outcome: str | None  # lower | higher | equivalent (decided only)
    ratio: float | None  # group / baseline, geometric means of the units' levels, at the look
    ratio_ci: tuple[float, float] | None  # at the look's level
    look: int  # the deciding look, or the last look made (0: none yet)
    look_s: float | None  # its elapsed time from the experiment's start
    level: float | None  # the look's alpha
    units: int  # this group's units in the look
    baseline_units: int
    expected_decision_s: float | None = None  # undecided: elapsed time of the look expected to decide
    replicas_needed: int | None = None  # units a group for 80% power at this effect and spread (one look at α)
    note: str = ""


@dataclass
class FleetStatus:
    elapsed_s: float
    looks_done: int
    plan: LookPlan
    comparisons: list[ComparisonStatus] = field(default_factory=list)
    started_at: float | None = None  # Unix time of the experiment's start (its first sample)

    @property
    def recommended(self) -> str | None:
        """The group to deploy, once every comparison is decided (or the horizon's looks are all
        spent): the decided-lower group with the lowest ratio; the baseline when every other group
        is decided higher or equivalent; None while that is not known (an undecided group could
        still turn out lower)."""
        if not self.comparisons or (
            any(c.state != "decided" for c in self.comparisons) and self.looks_done < len(self.plan.times())
        ):
            return None
        lower = [c for c in self.comparisons if c.outcome == "lower"]
        if lower:
            return min(lower, key=lambda c: c.ratio or 1.0).group
        if self.comparisons and all(c.outcome in ("higher", "equivalent") for c in self.comparisons):
            return self.comparisons[0].baseline
        return None

    @property
    def decided(self) -> bool:
        return self.recommended is not None

    def as_dict(self) -> dict:
        return {
            "started_at": self.started_at,
            "elapsed_s": self.elapsed_s,
            "looks_done": self.looks_done,
            "plan": asdict(self.plan),
            "recommended": self.recommended,
            "decided": self.decided,
            "comparisons": [asdict(c) for c in self.comparisons],
        }


def decide(
    looks: Iterable[tuple[float, dict[str, np.ndarray]]],
    baseline: str,
    plan: LookPlan,
    elapsed_s: float | None = None,
    groups: Iterable[str] = (),
) -> FleetStatus:
    """The status after the grid looks given: (elapsed seconds, LookData) of every
    look whose time has passed, in order; `groups`: every group of the run (one may have no units
    yet at the first looks). The same function the calibration runs."""
    expected = set(groups) - {baseline}
    levels = plan.levels()
    decided: dict[str, ComparisonStatus] = {}
    last: dict[str, ComparisonStatus] = {}
    ses: dict[str, list[tuple[float, float]]] = {}
    done, last_t = 0, 0.0
    for k, (t, look) in enumerate(looks, 1):
        if k > len(levels):
            break
        done, last_t, level = k, t, levels[k - 1]
        comps = stats.compare_to_baseline(look.levels, baseline, alpha=level, margin=plan.margin, cross_check=False)
        nb = comps[baseline].n if baseline in comps else 0
        for g, c in comps.items():
            if g == baseline or g in decided:
                continue
            se = log_se(c)
            if se is not None:
                ses.setdefault(g, []).append((t, se))
            s = ComparisonStatus(
                g,
                baseline,
                "undecided",
                None,
                c.ratio,
                c.ratio_ci,
                k,
                t,
                level,
                c.n,
                nb,
                replicas_needed=c.replicas_needed,
            )
            if c.status in ("lower", "higher", "equivalent"):
                if still_closing(look, g, baseline, c.ratio, c.status):
                    s.note = f"would be {c.status}, but the gap is still closing (start-up regrowth?): not decided yet"
                else:
                    s.state, s.outcome = "decided", c.status
                    decided[g] = s
            last[g] = s
        if last and len(decided) == len(last) and expected <= set(decided):  # all decided: later looks change nothing
            break
    out = FleetStatus(elapsed_s if elapsed_s is not None else last_t, done, plan)
    for g, s in last.items():
        if s.state == "undecided":
            _project(s, ses.get(g, []), plan, levels, done, max(1, len(last)))
        out.comparisons.append(s)
    return out


def _project(
    s: ComparisonStatus, ses: list[tuple[float, float]], plan: LookPlan, levels: list[float], done: int, m: int
) -> None:
    """The look expected to decide an undecided comparison if its ratio stays where it is and its
    spread keeps shrinking as it has: the standard error of the log ratio as a power of elapsed
    time fitted over the looks so far (between −1/2, the within-unit noise averaging out, and 0,
    units that differ by a fixed amount; −1/2 from one look), each future look's critical value at
    its level over the m comparisons (Bonferroni: a little later than Holm would decide)."""
    times = plan.times()
    if s.ratio is None or not ses or done >= len(times):
        s.note = "no look left before the horizon" if done >= len(times) else "not testable: fewer than 2 units a side"
        return
    t_now, se_now = ses[-1]
    slope = -0.5
    if len(ses) >= 2:
        x = np.log([t for t, _ in ses])
        y = np.log([v for _, v in ses])
        if np.ptp(x) > 0:
            slope = float(np.clip(np.polyfit(x, y, 1)[0], -0.5, 0.0))
    d, df = abs(math.log(s.ratio)), max(1.0, s.units + s.baseline_units - 2.0)
    for j in range(done, len(times)):
        se = se_now * (times[j] / t_now) ** slope
        q = float(special.stdtrit(df, 1 - levels[j] / (2 * m)))
        if d - q * se > 0 or d + q * se < math.log1p(plan.margin):
            s.expected_decision_s = times[j]
            return
    s.note = "not by the horizon at this effect and spread"


def status_line(s: ComparisonStatus, plan: LookPlan, started_at: float | None = None) -> str:
    """One plain line for a comparison (with started_at, the expected decision's date too)."""

    def when(t: float) -> str:
        return f"day {t / DAY:.1f}"

    head = f"{s.group} vs {s.baseline}: "
    if s.look == 0 or s.look_s is None:
        return f"{head}undecided — {s.note}"
    ratio = (
        ""
        if s.ratio is None
        else f"{s.ratio:.3f}×" + (f" [{s.ratio_ci[0]:.3f}–{s.ratio_ci[1]:.3f}]" if s.ratio_ci else "")
    )
    if s.state == "decided":
        word = {
            "lower": "uses less memory",
            "higher": "uses more memory",
            "equivalent": f"equivalent (within ±{plan.margin:.0%})",
        }[s.outcome]
        return (
            f"{head}DECIDED — {word}: {ratio} at look {s.look} ({when(s.look_s)}, level {s.level:.2g}; "
            f"{s.units} and {s.baseline_units} units)"
        )
    if s.expected_decision_s is not None:
        date = f", {utc(started_at + s.expected_decision_s, minutes=True)}" if started_at is not None else ""
        tail = (
            f"{s.note}; " if s.note else ""
        ) + f"expected at {when(s.expected_decision_s)}{date} at this effect and spread"
    else:
        tail = s.note or "not by the horizon"
        if s.replicas_needed:
            tail += f" (about {s.replicas_needed} units a group would decide it)"
    return f"{head}undecided — {ratio} at look {s.look} ({when(s.look_s)}); {tail}"


@dataclass
class LookData:
    """What one look reads: each group's per-unit levels (MB) and per-unit trends (the log change
    from the first to the second half of the unit's window: is the level still moving?)."""

    levels: dict[str, np.ndarray]
    trends: dict[str, np.ndarray]


def look_data(series, t0: float, t: float, settle_s: float) -> LookData:
    """Each group's per-unit levels at look time t (Unix seconds): a unit's mean over
    (t0 + (t − t0)/2, t] on its own group's allocator, without the first settle_s of each process;
    and its trend over the same samples (NaN where either half has none)."""
    lo = t0 + (t - t0) / 2
    mid = (lo + t) / 2
    levels: dict[str, list[float]] = {}
    trends: dict[str, list[float]] = {}
    for s in series:
        keep = np.zeros(len(s.t), dtype=bool)
        for seg in s.segments:
            if seg.group != s.group:
                continue
            start = max(lo, seg.start + settle_s if seg.new_process else seg.start)
            keep |= (s.t > start) & (s.t >= seg.start) & (s.t <= min(seg.end, t))
        keep &= (s.t > lo) & (s.t <= t) & np.isfinite(s.mb) & (s.mb > 0)
        if keep.any():
            levels.setdefault(s.group, []).append(float(s.mb[keep].mean()))
            early, late = s.mb[keep & (s.t <= mid)], s.mb[keep & (s.t > mid)]
            trends.setdefault(s.group, []).append(
                math.log(late.mean() / early.mean()) if len(early) and len(late) else math.nan
            )
    return LookData({g: np.array(v) for g, v in levels.items()}, {g: np.array(v) for g, v in trends.items()})


def unit_levels(series, t0: float, t: float, settle_s: float) -> dict[str, np.ndarray]:
    """The per-unit levels of look_data alone."""
    return look_data(series, t0, t, settle_s).levels


def still_closing(look: LookData, group: str, baseline: str, ratio: float, outcome: str) -> bool:
    """Is the gap a decision would rest on still closing — the group behind catching up, as a
    slower start-up regrowth does after apply's restart? Then the look does not decide: the units'
    trends (within-unit, so the relays' own spread cancels) differ towards 1 at one-sided HOLD_P (20%)
    (for `equivalent`, in either direction). Holding back only ever removes decisions, so the
    false-decision bound stands."""
    a, b = look.trends.get(group, np.array([])), look.trends.get(baseline, np.array([]))
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if len(a) < 2 or len(b) < 2:
        return False
    w = welch(a, b)
    if w is None:
        return False
    if outcome == "equivalent":
        return w.p < HOLD_P * 2
    toward_one = -1.0 if ratio > 1 else 1.0  # a ratio above 1 closes when the group's trend is below the baseline's
    return w.d * toward_one > 0 and w.p / 2 < HOLD_P


@dataclass
class FleetSeries:
    """A run's series as the status reads them, loaded once (a replay asks many times)."""

    series: list
    groups: list[str]
    baseline: str
    t0: float | None  # the experiment's start: its first sample
    t_last: float | None
    levels: dict = field(default_factory=dict)  # (look time, settle) -> LookData: a look's data never changes
    decided: dict = field(default_factory=dict)  # (plan, looks passed) -> the status those looks give

    def levels_at(self, t: float, settle_s: float) -> LookData:
        key = (t, settle_s)
        if key not in self.levels:
            self.levels[key] = look_data(self.series, self.t0, self.t0 + t, settle_s)
        return self.levels[key]


def load_run(store) -> FleetSeries:
    from ..analysis.duplicates import drop_duplicates
    from ..analysis.load import load_series, segment

    groups = store.groups()
    names = [g["name"] for g in groups]
    baseline = next((g["name"] for g in groups if g["is_baseline"]), names[0] if names else "")
    series = load_series(store, store.meta().get("metric", "rss") or "rss")
    drop_duplicates(series)  # one process sampled twice counts once, as in the analysis
    segment(store, series)
    filled = [s for s in series if len(s.t)]
    return FleetSeries(
        series,
        names,
        baseline,
        min((float(s.t[0]) for s in filled), default=None),
        max((float(s.t[-1]) for s in filled), default=None),
    )


def run_status(store, plan: LookPlan | None = None, now: float | None = None) -> FleetStatus:
    """The status of a run as it stands (or as it stood at `now`, Unix seconds: a replay)."""
    return status_at(load_run(store), plan, now)


def status_at(run: FleetSeries, plan: LookPlan | None = None, now: float | None = None) -> FleetStatus:
    plan = plan or LookPlan()
    placeholder = lambda g, note: ComparisonStatus(
        g, run.baseline, "undecided", None, None, None, 0, None, None, 0, 0, note=note
    )
    if run.t0 is None:
        return FleetStatus(0.0, 0, plan, [placeholder(g, "no samples yet") for g in run.groups if g != run.baseline])
    end = run.t_last if now is None else now
    elapsed = max(0.0, end - run.t0)
    passed = [t for t in plan.times() if t <= elapsed]
    key = (plan, len(passed))  # between two looks the status is the last look's: decided once
    if key not in run.decided:
        run.decided[key] = decide(
            ((t, run.levels_at(t, plan.settle_s)) for t in passed), run.baseline, plan, groups=run.groups
        )
    done = run.decided[key]
    st = FleetStatus(elapsed, len(passed), plan, [replace(c) for c in done.comparisons])
    st.started_at = run.t0
    seen = {c.group for c in st.comparisons}
    for g in run.groups:
        if g != run.baseline and g not in seen:
            st.comparisons.append(
                placeholder(
                    g,
                    f"no look yet: the first is at day {plan.times()[0] / DAY:.1f}"
                    if st.looks_done == 0
                    else "not testable: fewer than 2 units a side",
                )
            )
    return st
