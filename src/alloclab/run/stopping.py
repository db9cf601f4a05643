"""When a run may stop before its planned end: the runner's `stop_check` for a sequential test.

Both policies look at the run only when a look is due (between looks nothing is analysed or
spent), analyse the store as it stands, and when the test decides, record a `sequential_stop`
event with the reason and return it (the run's end reason). What differs is the test and the
levels it is given:

- SignificanceStop (`run --until-significant`): does the best group differ from the baseline?
  (`run --until-decided`, every=True: is every group's comparison decided: lower, higher or equivalent?)
- ThresholdStop (one bisect / sweep step): is the candidate worse than the good value by more
  than a threshold?
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

import numpy as np

from ..analysis.replica import usable

if TYPE_CHECKING:
    from .runner import Runner


class SequentialStop:
    """The shared part: due -> analyse -> decide -> record. Subclasses say when a look is due,
    which metric the analysis reads (None: the experiment's), and what the look decides."""

    metric: str | None = None

    def due(self, elapsed: float) -> bool:
        raise NotImplementedError

    def decide(self, analysis_result, elapsed: float) -> str | None:
        """The reason to stop now, or None to go on (the look is spent either way)."""
        raise NotImplementedError

    def __call__(self, runner: Runner, elapsed: float) -> str | None:
        if not self.due(elapsed):
            return None
        from .. import analysis

        reason = self.decide(analysis.analyse(runner.store, self.metric), elapsed)
        if reason:
            runner.store.add_event(time.time(), "sequential_stop", reason)
        return reason


class SignificanceStop(SequentialStop):
    """--until-significant: a group-sequential test (stats.SequentialTest, Bonferroni alpha
    spending over looks at doublings of the elapsed time from `first_look`), so stopping early
    keeps the family-wise false-stop rate at alpha however long the run goes on. Between looks
    nothing is analysed or spent (a look is due at its planned time, not at a check period: a last
    look 10 s after a doubling must not be skipped).

    With a planned end (`planned_s`: --max-duration, the file's max_duration or the phases), the
    looks are laid out before the run: first_look·2^(k−1) while before the last look, and a last
    look just before the planned end, so the whole run counts; look k is tested at α·t_k/Σt (α in
    proportion to the look's elapsed time, all of it spent by the last look). Without a planned
    end, first_look·2^(k−1) tested at α/(k(k+1)), which front-loads α on looks where the levels
    have barely settled (a 4% difference seen at 8 minutes: tested at 0.0025, against 0.022 at
    710 s with a 12-minute plan); benchmarks/calibration.py --part tor-verdict measures both.

    every=True (`run --until-decided`): stop once every comparison with the baseline is decided:
    lower, higher or equivalent within ±5% (stats.SequentialTest until="every"; no other futility
    bound, so an undecided one runs to the cap); benchmarks/demo_stop_rule.py measures it on the
    demo's plan.

    The plan is made again at the first check (after the warm-up, before any look is spent) for the
    run as it turned out: a warm-up held longer (relays still fetching the directory, replicas
    started late) moves every look by as much, so the first look still has `first_look − warm-up`
    of load behind it; a planned end that moved (the demo's cap includes the tor network's set-up:
    Runner.deadline) moves the last look. Neither depends on the levels compared."""

    def __init__(
        self,
        first_look: float,
        n_comparisons: int,
        planned_s: float | None = None,
        interval: float = 0.0,
        every: bool = False,
    ):
        self.first_look, self.n_comparisons, self.interval, self.every = first_look, n_comparisons, interval, every
        self.last = None  # the last look's decision (its reason says what is undecided)
        self.checked = False  # the first check re-plans for the run as it turned out (_replan)
        self._plan(planned_s, first_look)

    def _plan(self, planned_s: float | None, first_look: float) -> None:
        from .. import analysis, stats

        times = planned_look_times(first_look, planned_s, self.interval)
        self.planned_s = planned_s
        self.max_looks = None if times is None else len(times)
        self.test = stats.SequentialTest(
            alpha=analysis.RULES["alpha"],
            n_comparisons=self.n_comparisons,
            first_look_s=first_look,
            look_times_s=times,
            until="every" if self.every else "best",
        )

    def _replan(self, runner: Runner) -> None:
        """The looks for the warm-up and planned end the run has now (see the class's docstring)."""
        phases, exp = getattr(runner, "phases", None), getattr(runner, "exp", None)
        held = (
            float(max(0, math.ceil(phases.warmup - exp.phases.warmup)))
            if phases is not None and exp is not None
            else 0.0
        )
        planned = getattr(runner, "planned", None)
        end = planned if planned is not None and self.planned_s is not None else self.planned_s
        if held <= 0 and end == self.planned_s:
            return
        why = ([f"the warm-up held {held:.0f} s longer"] if held > 0 else []) + (
            [f"the run's planned end at {end:.0f} s"] if end is not None else []
        )
        self._plan(end, self.first_look + held)
        runner.store.add_event(
            time.time(),
            "sequential_plan",
            f"looks laid out again ({'; '.join(why)}), elapsed s at level: {self.schedule()}",
        )

    def __call__(self, runner: Runner, elapsed: float) -> str | None:
        if not self.checked:
            self.checked = True
            self._replan(runner)
        looks = self.test.looks
        reason = super().__call__(runner, elapsed)
        if reason is None and self.test.looks > looks:  # a look spent without a stop: what it left open, as data
            runner.store.add_event(time.time(), "sequential_look", self.last.reason)
        return reason

    def schedule(self) -> str:
        """The looks and their levels, for the start of the run."""
        out = [f"{t:g} s at {level:.2g}" for t, level in self.test.look_plan()]
        return ", ".join(out) + ("" if self.max_looks is not None else ", … (α/(k(k+1)), no planned end)")

    def due(self, elapsed: float) -> bool:
        due = self.test.next_look_s()
        return due is not None and elapsed >= due  # not between looks, nor after every planned look

    def decide(self, a, elapsed: float) -> str | None:
        # the replicas the final comparison will use: a stop must not rest on one it will leave out
        levels = {
            g.name: np.array([r.steady_mean_mb for r in a.replicas if r.group == g.name and usable(r)])
            for g in a.groups
        }
        d = self.last = self.test.update(levels, a.baseline, elapsed_s=elapsed)
        if not d.stop:
            return None
        return (
            f"stopped early at look {d.look}: {d.reason} (sequential test, total false-stop rate ≤ {self.test.alpha:g})"
        )


def planned_look_times(first_look: float, planned_s: float | None, interval: float = 0.0) -> list[float] | None:
    """The looks of a run with a planned end: first_look·2^(k−1) while before the last look, then
    the last look max(2 intervals, 10 s) before the end, so the runner's ticks reach it before the
    run stops; None without a planned end."""
    if planned_s is None or first_look <= 0:
        return None
    last = max(first_look, planned_s - max(2 * interval, 10.0))
    times = []
    while first_look * 2 ** len(times) < last:
        times.append(first_look * 2 ** len(times))
    return times + [last]


class ThresholdStop(SequentialStop):
    """One bisect / sweep step: stats.ThresholdTest of the `candidate` group against the `good`
    one, at doublings of `first_look_s` until the planned end."""

    def __init__(
        self,
        threshold: float,
        first_look_s: float,
        planned_s: float,
        interval: float,
        metric: str,
        good: str,
        candidate: str,
    ):
        from .. import analysis, stats

        usable = max(first_look_s, planned_s - 2 * interval)  # the last look must come before the planned end
        self.max_looks = int(math.floor(math.log2(usable / first_look_s))) + 1
        self.test = stats.ThresholdTest(
            threshold, analysis.RULES["alpha"], max_looks=self.max_looks, first_look_s=first_look_s
        )
        self.metric = None if metric == "cpu_per_op" else metric  # CPU per op: the analysis computes it anyway
        self.level_metric, self.good, self.candidate = metric, good, candidate
        self.last = None
        self.levels: dict[str, np.ndarray] = {}

    def due(self, elapsed: float) -> bool:
        return self.test.looks < self.max_looks and self.test.due(elapsed)

    def decide(self, a, elapsed: float) -> str | None:
        self.levels = replica_levels(a, self.level_metric)
        self.last = self.test.update(
            self.levels.get(self.good, np.array([])), self.levels.get(self.candidate, np.array([])), elapsed_s=elapsed
        )
        if self.last.verdict is None:
            return None
        return f"step decided {self.last.verdict}: {self.last.reason} (sequential test, error rate ≤ {self.test.test.alpha:g})"


def replica_levels(a, metric: str, level: str = "steady_mean_mb") -> dict[str, np.ndarray]:
    """Per-replica levels of each group as the comparison uses them (clean, verified, not excluded);
    `level` names the ReplicaStats field (the gate takes the steady median, steady_mb)."""
    out = {}
    for g in a.groups:
        reps = [r for r in a.replicas if r.group == g.name and r.verified is not False and r.excluded is None]
        vals = [r.cpu_us_per_op if metric == "cpu_per_op" else getattr(r, level) for r in reps]
        out[g.name] = np.array([v for v in vals if v is not None and v > 0], dtype=float)
    return out
