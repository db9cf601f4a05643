"""A canary judged against its peers (`fleet deploy`'s default where enough units are untouched).

The guards (rollout.py) compare each canary unit with its own old level, so a fresh process's
start-up, a daily cycle or an event that moves every unit can trip them, or hide a real increase.
Here the canary batch is compared with a baseline cohort of still-untouched units of the same host,
restarted at the same moment (or not: the operator's choice) on their current allocator, so
whatever moves every unit moves both sides of the ratio.

The quantity: each unit's level at look time T (mean of its memory samples over (T/2, T], the
second half of the time since the restarts, as fleet status takes a look's level) divided by its
own level just before the restarts. Dividing by its own old level takes the units' differences out
(relays differ ~20%; their changes much less); the canary's change against the baseline's change
is then the canary's effect.

The test: the ratio of the two cohorts' geometric means, canary / baseline, against 1 + tolerance,
by stats.ThresholdTest (Welch's t on log levels, the analysis's test, with the bisect's alpha
spending over looks at doublings of the elapsed time, first_look·2^(k−1), up to the maximum settle
time): FAIL when the ratio is shown above 1 + tolerance, PASS when shown below it, each wrong call
with probability ≤ alpha however many looks. Neither by the last look: MORE TIME, then the outcome
the operator chose (hold: keep the canary and stop; fail: roll back; pass: go on). A baseline not
restarted keeps its settled processes while the canary starts up: there a decision whose gap is
still closing is held back, as fleet status holds one back (decision.still_closing).

The default (`--baseline auto`): a baseline as large as the canary, or every untouched unit when
fewer, wherever that is 2 or more and the host has numpy and scipy; else the guards alone, said
in the deploy's output. Calibrated in benchmarks/canary_peers.py (simulation and real processes;
figures in benchmarks/canary_peers.md).
"""

from __future__ import annotations

import importlib.util
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ..common.errors import UserError

PASS, FAIL, MORE_TIME = "pass", "fail", "more-time"
UNDECIDED_CHOICES = ("hold", "fail", "pass")
# A fleet host may run alloclab without the analysis' packages (the Ansible role installs none):
# the judgement needs the analysis' statistics, so there it is off unless they are installed.
NEEDS = ("numpy", "scipy")


def missing_packages() -> list[str]:
    out = []
    for name in NEEDS:
        try:
            if importlib.util.find_spec(name) is None:
                out.append(name)
        except ImportError:
            out.append(name)
    return out


@dataclass(frozen=True)
class PeerRule:
    first_look_s: float  # the first look (then doublings)
    max_settle_s: float  # the last look no later than this
    tolerance: float = 0.10  # FAIL above canary/baseline = 1 + tolerance, PASS below
    alpha: float | None = None  # None: the analysis's alpha (RULES)
    undecided: str = "hold"  # at the last look without a decision: hold | fail | pass

    @property
    def max_looks(self) -> int:
        return math.floor(math.log2(max(self.max_settle_s, self.first_look_s) / self.first_look_s) + 1e-9) + 1

    def look_times(self) -> list[float]:
        return [self.first_look_s * 2**k for k in range(self.max_looks)]


def rule_for(
    settle_s: float,
    max_settle_s: float | None,
    tolerance: float = 0.10,
    undecided: str = "hold",
    alpha: float | None = None,
) -> PeerRule:
    """The looks of a deploy: the first at half the settle time, doublings up to the maximum settle
    time (default 4 × the settle time: looks at ½, 1, 2 and 4 settle times)."""
    if undecided not in UNDECIDED_CHOICES:
        raise UserError(f"--undecided {undecided!r} is not known", "use hold, fail or pass")
    if settle_s <= 0:
        raise UserError(
            "a canary judged against its peers needs a --settle above 0", "give e.g. --settle 60s, or --baseline none"
        )
    max_settle_s = 4 * settle_s if max_settle_s is None else max_settle_s
    if max_settle_s < settle_s:
        raise UserError(
            f"--max-settle ({max_settle_s:g} s) is shorter than --settle ({settle_s:g} s)",
            "give a maximum settle time at least as long as the settle time",
        )
    return PeerRule(settle_s / 2, max_settle_s, tolerance, alpha, undecided)


def baseline_size(spec: str, canary: int, untouched: int) -> tuple[int, str]:
    """How many untouched units form the baseline, and why: `auto` (the canary's size where that
    many are untouched, else all of them; none below 2, Welch's t needs two a side), N, P% of the
    untouched units, or `none`."""
    text = str(spec).strip().lower()
    if text == "none":
        return 0, "peer judgement off (--baseline none): the guards alone judge the canary"
    if missing := missing_packages():
        why = f"this host has no {' or '.join(missing)}, which the peer judgement's statistics need"
        if text == "auto":
            return 0, why + ": the guards alone judge the canary"
        raise UserError(
            f"--baseline {spec}: {why}",
            "install them on this host (Debian: python3-numpy python3-scipy), or give --baseline none",
        )
    if canary < 2:
        why = f"a canary of {canary} unit cannot be compared with peers (2 a side at least)"
        if text == "auto":
            return 0, why + ": the guards alone judge it"
        raise UserError(why, "give --batch 2 or more, or --baseline none")
    if text == "auto":
        n = min(canary, untouched)
        if n < 2:
            return (
                0,
                f"{untouched} untouched unit(s) beside the canary (2 needed for a baseline): the guards alone judge it",
            )
        return (
            n,
            f"{n} untouched units restarted beside the canary's {canary}"
            if n == canary
            else f"{n} untouched units (all there are) beside the canary's {canary}",
        )
    try:
        n = max(1, math.floor(untouched * float(text[:-1]) / 100)) if text.endswith("%") else int(text)
    except ValueError:
        raise UserError(
            f"--baseline {spec!r} is not a count, a share or none", "give e.g. auto, 5, 50% or none"
        ) from None
    if n < 2 or n > untouched:
        raise UserError(
            f"--baseline {spec!r} asks for {n} units; {untouched} are untouched beside the canary",
            f"give a baseline of 2 to {untouched} units, or --baseline none"
            if untouched >= 2
            else "give --baseline none",
        )
    return n, f"{n} untouched units beside the canary's {canary}"


def choose_baseline(untouched: list[str], n: int, seed: int = 0) -> list[str]:
    """n of the untouched units at random (seeded, so a deploy's plan says which ones it would take)."""
    return sorted(random.Random(seed).sample(sorted(untouched), n))


def unit_change(samples: list[tuple[float, float]], old_kb: float | None, t: float) -> float | None:
    """A unit's level at look time t (mean of its samples over (t/2, t]) over its own level before
    the restarts; None without an old level or a sample in that half."""
    if not old_kb or old_kb <= 0:
        return None
    window = [kb for at, kb in samples if t / 2 < at <= t and kb > 0]
    return sum(window) / len(window) / old_kb if window else None


def unit_trend(samples: list[tuple[float, float]], t: float) -> float:
    """Is the unit's level still moving at look time t: the log change from the first to the second
    half of (t/2, t] (fleet.decision.look_data's trend); NaN where either half has no sample."""
    mid = 0.75 * t
    early = [kb for at, kb in samples if t / 2 < at <= mid and kb > 0]
    late = [kb for at, kb in samples if mid < at <= t and kb > 0]
    return math.log((sum(late) / len(late)) / (sum(early) / len(early))) if early and late else math.nan


@dataclass
class PeerLook:
    look: int
    elapsed_s: float
    ratio: float | None  # canary / baseline, geometric means of the units' changes
    interval: tuple[float, float] | None  # at the look's level (excludes 1 + tolerance exactly when decided)
    level: float  # the look's share of alpha
    p: float | None
    units: int  # canary units in the look
    baseline_units: int
    outcome: str  # pass | fail | more-time
    note: str = ""


def look(
    test,
    canary: list[float],
    baseline: list[float],
    elapsed_s: float,
    trends: tuple[list[float], list[float]] | None = None,
) -> PeerLook:
    """One look of `test` (a stats.ThresholdTest): its decision, and the ratio's interval at the
    look's level. `trends` (the canary's and the baseline's unit_trend): a decision whose gap is
    still closing (the canary's start-up regrowth unlike the baseline's, as when the baseline was
    not restarted) is held back as fleet status holds one back (decision.still_closing); holding
    back only removes decisions, so the error bounds stand."""
    import numpy as np

    from .. import stats
    from .decision import LookData, still_closing

    c, b = np.array(canary, dtype=float), np.array(baseline, dtype=float)
    d = test.update(b, c, elapsed_s=elapsed_s)
    interval = None
    if len(c) >= 2 and len(b) >= 2 and d.boundary > 0:
        comp = stats.compare_to_baseline({"baseline": b, "canary": c}, "baseline", alpha=d.boundary, cross_check=False)[
            "canary"
        ]
        interval = comp.ratio_ci
    outcome = {"bad": FAIL, "good": PASS}.get(d.verdict, MORE_TIME)
    note = ""
    if outcome != MORE_TIME and trends is not None and d.ratio is not None:
        moving = LookData(
            {}, {"canary": np.array(trends[0], dtype=float), "baseline": np.array(trends[1], dtype=float)}
        )
        if still_closing(
            moving, "canary", "baseline", d.ratio / test.threshold, "lower" if outcome == PASS else "higher"
        ):
            outcome, note = (
                MORE_TIME,
                f"would {'pass' if d.verdict == 'good' else 'fail'}, but the gap is still closing (start-up regrowth?)",
            )
    return PeerLook(d.look, elapsed_s, d.ratio, interval, d.boundary, d.p, len(c), len(b), outcome, note)


@dataclass
class PeerJudge:
    """The settle watch's peer judgement of one canary batch: it is told the canary's readings
    (the guards take them), reads the baseline's itself, and looks when a look is due."""

    rule: PeerRule
    canary: list[str]
    baseline: list[str]
    restart_baseline: bool
    old_kb: dict[str, float | None] = field(default_factory=dict)
    samples: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    looks: list[PeerLook] = field(default_factory=list)
    started: float | None = None  # monotonic time of the restarts
    outcome: str | None = None  # pass | fail | more-time (once final)
    note: str = ""

    def __post_init__(self) -> None:
        from .. import stats
        from ..stats.rules import RULES

        if self.rule.alpha is None:
            self.rule = replace(self.rule, alpha=RULES["alpha"])
        self.test = stats.ThresholdTest(
            1 + self.rule.tolerance, self.rule.alpha, max_looks=self.rule.max_looks, first_look_s=self.rule.first_look_s
        )
        for u in self.canary + self.baseline:
            self.samples.setdefault(u, [])

    def restarted(self, at: float | None = None) -> None:
        self.started = time.monotonic() if at is None else at

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def record(self, readings: dict[str, float | None], rss_kb: Callable[[str], float | None]) -> PeerLook | None:
        """The canary's readings of this round (from the guards' watch) and the baseline's (read now);
        a look when one is due. Returns the look made, if any."""
        t = self.elapsed()
        for u, kb in readings.items():
            if kb:
                self.samples[u].append((t, float(kb)))
        for u in self.baseline:
            kb = rss_kb(u)
            if kb:
                self.samples[u].append((t, float(kb)))
        return self.look_at(t)

    def look_at(self, t: float) -> PeerLook | None:
        """A look at elapsed time t on the samples so far, when one is due and the judgement is not
        final (the calibration calls this on simulated samples). Returns the look made, if any."""
        if self.outcome is not None or not self.test.due(t):
            return None
        changes = {u: unit_change(self.samples[u], self.old_kb.get(u), t) for u in self.canary + self.baseline}
        made = look(
            self.test,
            [changes[u] for u in self.canary if changes[u] is not None],
            [changes[u] for u in self.baseline if changes[u] is not None],
            t,
            # a baseline restarted with the canary starts up alike; one that was not, does not
            None
            if self.restart_baseline
            else (
                [unit_trend(self.samples[u], t) for u in self.canary],
                [unit_trend(self.samples[u], t) for u in self.baseline],
            ),
        )
        if made.look == 0:  # not spent (the test's own schedule): nothing to report
            return None
        self.looks.append(made)
        if made.outcome != MORE_TIME or made.look >= self.rule.max_looks:
            self.outcome = made.outcome
        return made

    @property
    def final(self) -> bool:
        return self.outcome is not None

    @property
    def action(self) -> str | None:
        """What the deploy does: pass (go on), fail (roll back) or hold (stop, canary kept)."""
        if self.outcome in (PASS, FAIL):
            return self.outcome
        return self.rule.undecided if self.outcome == MORE_TIME else None

    def verdict_line(self) -> str:
        last = self.looks[-1] if self.looks else None
        head = f"canary judged against {len(self.baseline)} peers" + (
            "" if self.restart_baseline else " (not restarted)"
        )
        if last is None:
            return f"{head}: no look made"
        shown = (
            "no ratio"
            if last.ratio is None
            else f"{last.ratio:.3f}×" + (f" [{last.interval[0]:.3f}–{last.interval[1]:.3f}]" if last.interval else "")
        )
        at = f"look {last.look} of {self.rule.max_looks} ({last.elapsed_s:.0f} s, level {last.level:.2g})"
        bound = f"×{1 + self.rule.tolerance:.2f}"
        if self.outcome == PASS:
            return f"{head}: PASS — {shown}, shown below {bound} at {at}"
        if self.outcome == FAIL:
            return f"{head}: FAIL — {shown}, shown above {bound} at {at}"
        return (
            f"{head}: MORE TIME — {shown} at {at}, neither above nor below {bound} by the maximum settle "
            f"time; {self.action}s as --undecided says"
        )

    def failure(self) -> str:
        """Why the deploy rolls back (FAIL, or MORE TIME with --undecided fail), after "the canary"."""
        last = self.looks[-1]
        shown = (
            f"{last.ratio:.3f}× [{last.interval[0]:.3f}–{last.interval[1]:.3f}]"
            if last.interval
            else f"{last.ratio:.3f}×"
            if last.ratio is not None
            else "no ratio"
        )
        word = "failed against" if self.outcome == FAIL else "was undecided (--undecided fail) against"
        return (
            f"{word} its {len(self.baseline)} peers: {shown} against ×{1 + self.rule.tolerance:.2f} at look "
            f"{last.look} of {self.rule.max_looks} ({last.elapsed_s:.0f} s)"
        )

    def as_dict(self) -> dict:
        return {
            "canary": self.canary,
            "baseline": self.baseline,
            "baseline_restarted": self.restart_baseline,
            "tolerance": self.rule.tolerance,
            "alpha": self.rule.alpha,
            "look_times_s": self.rule.look_times(),
            "max_settle_s": self.rule.max_settle_s,
            "undecided": self.rule.undecided,
            "outcome": self.outcome,
            "action": self.action,
            "ratio": self.looks[-1].ratio if self.looks else None,
            "interval": self.looks[-1].interval if self.looks else None,
            "looks": [vars(x) for x in self.looks],
            "old_kb": self.old_kb,
            "note": self.note,
            "line": self.verdict_line(),
        }
