"""What an experiment's design allows before it runs: the warnings `run` prints before it starts
and `check` prints the same (issue 27). Typed warnings like the analysis' own, from the same rules:
a design whose groups × replicas cannot give a significant result (stats.design_warning), and
phases too short for the steady window the status rules need (stats RULES min_samples and
min_window_s, after the warm-up the analysis cuts: RULES warmup_max_share when no warmup phase is
set), so that every replica would be "Too short"."""

from __future__ import annotations

from dataclasses import dataclass

from .. import stats
from ..experiment_file import Experiment
from ..stats.rules import RULES
from .warnings import Warning


@dataclass(frozen=True)
class SteadyAllowance:
    samples_most: int  # post-warm-up samples per replica the load phase allows
    samples_least: int  # ... after the largest automatic warm-up cut (no [phases] warmup)
    window_most_s: float  # the steady window those samples span
    window_least_s: float

    @property
    def enough_at_least(self) -> bool:
        return self.samples_least >= RULES["min_samples"] and self.window_least_s >= RULES["min_window_s"]

    @property
    def enough_at_most(self) -> bool:
        return self.samples_most >= RULES["min_samples"] and self.window_most_s >= RULES["min_window_s"]


def steady_allowance(exp: Experiment, max_duration: float | None = None) -> SteadyAllowance | None:
    """The steady samples and window per replica the phases allow; None when the load runs until
    the replicas exit (no planned length)."""
    planned = exp.planned_duration(max_duration)
    if planned is None or exp.phases.load is None:
        return None
    load_s = max(0.0, min(exp.phases.load, planned - exp.phases.warmup))
    most = int(load_s // exp.interval)
    cut = 0.0 if exp.phases.warmup > 0 else RULES["warmup_max_share"]
    least = int(most * (1 - cut))
    return SteadyAllowance(most, least, max(0, most - 1) * exp.interval, max(0, least - 1) * exp.interval)


def load_needed_s(exp: Experiment) -> float:
    """The shortest load phase whose steady window passes both rules even after the warm-up cut."""
    samples = max(RULES["min_samples"], RULES["min_window_s"] / exp.interval + 1)
    cut = 0.0 if exp.phases.warmup > 0 else RULES["warmup_max_share"]
    return float(int(-(-samples // 1)) * exp.interval / (1 - cut))


def planned_warnings(exp: Experiment, max_duration: float | None = None) -> list[Warning]:
    out = []
    counts = {g.name: exp.replicas for g in exp.groups}
    text = stats.design_warning(counts, exp.baseline, alpha=RULES["alpha"]) if len(counts) >= 2 else None
    if text:
        # 1–2 replicas (or a lone group) cannot show anything: a caution. With more, the text is the
        # power under an assumed relay-sized spread (issue 29), which the run may not have: a note.
        hard = len(counts) < 2 or min(counts.values()) <= 2
        out.append(
            Warning(
                "design-cannot-show-difference",
                "caution" if hard else "info",
                [],
                sorted(counts),
                text,
                {"replicas": counts, "min_p": stats.design_min_p(counts, exp.baseline)},
            )
        )
    allowed = steady_allowance(exp, max_duration)
    if allowed is not None and not allowed.enough_at_least:
        a = allowed
        span = (
            f"{a.samples_most} steady samples over {a.window_most_s:g}s"
            if a.samples_most == a.samples_least
            else f"{a.samples_least}–{a.samples_most} steady samples over {a.window_least_s:g}–{a.window_most_s:g}s "
            f"(a detected warm-up may take up to {RULES['warmup_max_share']:.0%})"
        )
        out.append(
            Warning(
                "too-short-planned",
                "caution" if allowed.enough_at_most else "serious",
                [],
                sorted(counts),
                f"the load phase allows {span} per replica; the status rules need {RULES['min_samples']:g} samples "
                f"over at least {RULES['min_window_s']:g}s, so replicas would be 'Too short': lengthen [phases] "
                f"load to at least {load_needed_s(exp):g}s"
                + ("" if exp.phases.warmup > 0 else " (or set a warmup phase)"),
                {
                    "steady_samples_most": a.samples_most,
                    "steady_samples_least": a.samples_least,
                    "steady_window_most_s": a.window_most_s,
                    "steady_window_least_s": a.window_least_s,
                    "needed_load_s": load_needed_s(exp),
                },
            )
        )
    return out
