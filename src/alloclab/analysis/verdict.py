"""The recommendation as a structured object; reporters render it (`text()` is the markdown form).

Confidence (documented in docs/method/index.md, reachable with 3+ replicas per group):
- high: the winner is significantly below the baseline (Holm), its whole interval lies below
  1/(1 + margin) (a meaningful win, not just a detectable one), both groups have 3+ usable
  replicas, neither is Growing (in steps or not)/Bloating or Too short, and no serious warning names
  either group;
- moderate: significant, but one of the other conditions fails (each named in `confidence_reason`);
  a Growing winner whose growth is shown to be no more than the baseline's in MB (stats.added_growth:
  the workload's growth) is not held against it — its caution is rephrased, its word kept;
- low: not significant (then an equivalence statement or how many replicas would settle it), or
  every replica of the winner or the baseline Too short (no level settled: the reason says so);
- none: nothing testable.
When the baseline itself used the least memory, the same rule applies to the closest other group
(the runner-up): a runner-up significantly above the baseline is a confident "keep the baseline";
one not shown different is "cannot be told apart", with the interval that rules out larger
differences.

`headline()` is one line (what to run, how sure, the main trade-off); `text()` starts with it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from ..common.timefmt import span
from ..stats.added_growth import BEYOND, NOT_BEYOND
from ..stats.rules import RULES
from ..stats.status import GROWTH_WORDS, status_phrase
from .warnings import Warning

if TYPE_CHECKING:  # (the package imports this module)
    from . import Analysis, GroupSummary
    from .comparisons import GroupComparison

TOO_SHORT = "Too short"  # a status word (stats.status): the steady window cannot settle a level


def workload_growth(g: GroupSummary) -> bool:
    """Whether g's growth is shown to be no more than the baseline's, in MB over the same window
    (stats.added_growth: as, less than or no more than the baseline): the workload's, not the allocator's."""
    b = getattr(g, "growth_beside", None)
    return b is not None and b.not_beyond


def group_change(g: GroupSummary) -> tuple[float | None, float | None, float | None]:
    """A group's change (MB, share of its level, window in hours): the one definition every output
    uses. The group's growth across its replicas over their common window (the figure that decides
    Growing/Bloating) when it was computed; else the median of the replicas' own changes."""
    gr = getattr(g, "growth", None)
    if gr is not None and gr.change_mb is not None:
        return gr.change_mb, gr.change_share, gr.window_s / 3600
    return g.change_mb, g.change_share, g.window_h


@dataclass
class Recommendation:
    metric: str
    baseline: str
    basis: str  # what the figures are: "level at the end of ...", "steady mean ..."
    winner: str | None = None  # lowest-memory group (None: nothing usable)
    winner_mb: float | None = None
    baseline_mb: float | None = None
    ratio: float | None = None
    ratio_ci: tuple[float, float] | None = None
    ci_level: float | None = None
    p_holm: float | None = None
    significant: bool = False
    untestable: bool = False
    equivalence: str | None = None  # "within ±5% of the baseline" when the interval shows it
    more_replicas: int | None = None
    confidence: str = "none"
    confidence_reason: str = ""
    tied: list[str] = field(default_factory=list)
    growth_note: str | None = None
    growth_beside: str | None = (
        None  # the winner's growth beside the baseline's (stats.added_growth word), when Growing
    )
    trade_offs: list[str] = field(default_factory=list)
    caveats: list[Warning] = field(default_factory=list)
    clean_alternative: str | None = None  # when a published-style figure disagrees with the clean one
    metric_note: str | None = None  # which memory metric the verdict uses, LazyFree beside it
    runner_up: str | None = None  # when the baseline won: the closest other group, compared with it
    runner_up_ratio: float | None = None  # runner-up / baseline
    runner_up_ci: tuple[float, float] | None = None
    runner_up_significant: bool = False

    def _apart(self, name: str, ratio: float | None, ci: tuple[float, float] | None) -> str:
        """ "X and the baseline cannot be told apart", with the interval that rules out larger differences."""
        if ratio is None:  # no level of one side to divide by (e.g. the baseline had no usable window)
            return f"{name} and {self.baseline} cannot be told apart (no ratio: one side has no level)"
        if not ci:
            return f"{name} and {self.baseline} cannot be told apart ({name} {ratio:.2f}× {self.baseline}, no interval)"
        return (
            f"{name} and {self.baseline} cannot be told apart ({name} {ratio:.2f}× {self.baseline}, interval "
            f"{ci[0]:.2f}–{ci[1]:.2f}: differences beyond {ci[0] - 1:+.0%} / {ci[1] - 1:+.0%} are ruled out)"
        )

    def headline(self) -> str:
        """One line: what to run, how sure, the main trade-off."""
        m = self.metric.upper()
        sure = f"confidence {self.confidence}"
        costs = [t for t in self.trade_offs if t.startswith(("throughput", "CPU"))]  # what the winner may cost
        trade = (f"; trade-off: {costs[0]}" if costs else "") + (
            f"; {self.winner} {self.growth_beside.replace('the baseline', self.baseline)}: the workload's growth, "
            "not the allocator's"
            if self.growth_note and self.growth_beside in NOT_BEYOND
            else f"; caution: {self.winner} may keep growing"
            if self.growth_note
            else ""
        )
        if self.winner is None:
            return "No recommendation: no group has usable data on its own allocator."
        if self.winner == self.baseline:
            if self.runner_up is None:
                return f"Keep **{self.baseline}** (the baseline): no other group has usable data — {sure}."
            if self.runner_up_significant:
                ci = f" [{self.runner_up_ci[0]:.2f}–{self.runner_up_ci[1]:.2f}]" if self.runner_up_ci else ""
                return (
                    f"Keep **{self.baseline}** (the baseline): every other group used more {m} (closest: "
                    f"{self.runner_up} {self.runner_up_ratio:.2f}×{ci}) — {sure}{trade}."
                )
            return (
                f"Keep **{self.baseline}** (the baseline): no group was shown to use less {m}; "
                f"{self._apart(self.runner_up, self.runner_up_ratio, self.runner_up_ci)} — {sure}."
            )
        ci = f" [{self.ratio_ci[0]:.2f}–{self.ratio_ci[1]:.2f}]" if self.ratio_ci else ""
        if self.untestable:
            used = f" ({self.ratio:.2f}× {self.baseline})" if self.ratio is not None else ""
            return (
                f"**{self.winner}** used the least {m}{used}, but the difference "
                f"cannot be tested: run at least {RULES['min_replicas']} replicas per group — {sure}."
            )
        if self.significant:
            return (
                f"Run **{self.winner}**: {self.ratio:.2f}×{ci} the {m} of the baseline {self.baseline} — {sure}{trade}."
            )
        return (
            f"Keep **{self.baseline}** (the baseline) for now: no group was shown to use less {m}; "
            f"{self._apart(self.winner, self.ratio, self.ratio_ci)} — {sure}."
        )

    def text(self, warnings_ref: str = "see Warnings") -> str:
        """The headline, then the detail (markdown). warnings_ref: where the reader finds the warnings."""
        return self.headline() + "\n\n" + self.detail(warnings_ref)

    def detail(self, warnings_ref: str = "see Warnings") -> str:
        m = self.metric.upper()
        parts = []
        if self.winner is None:
            return "No group has usable data on its own allocator: nothing can be recommended from this data."
        if self.winner == self.baseline:
            parts.append(f"The baseline **{self.baseline}** used the least memory ({m}, {self.basis}).")
            if self.runner_up and self.runner_up_significant:
                parts.append(
                    f"The closest other group, {self.runner_up}, is significantly above it (Welch's t on log "
                    f"levels, Holm)."
                )
        else:
            ci = (
                f" ({self.ci_level:.0%} CI {self.ratio_ci[0]:.2f}–{self.ratio_ci[1]:.2f}, at its Holm level)"
                if self.ratio_ci and self.ci_level
                else ""
            )
            ratio = (
                f"{self.ratio:.2f}× the baseline {self.baseline}{ci}"
                if self.ratio is not None
                else f"no ratio to the baseline {self.baseline} (it has no level)"
            )
            parts.append(
                f"**{self.winner}** used the least memory: {self.winner_mb:.1f} MB {m} ({self.basis}), {ratio}."
            )
            if self.untestable:
                parts.append(
                    "The difference is **untestable**: a group has a single replica; run at least 3 per group."
                )
            elif self.significant:
                parts.append(
                    f"The difference is significant (Welch's t on log levels, Holm-adjusted p = {self.p_holm:.3g})."
                )
            elif self.p_holm is not None:
                parts.append(
                    f"The difference is **not** significant (Holm-adjusted p = {self.p_holm:.3g}): "
                    f"{self.winner} and {self.baseline} cannot be told apart from this data."
                )
        if self.equivalence:
            parts.append(self.equivalence)
        elif self.more_replicas and not self.significant and self.winner != self.baseline:
            parts.append(
                f"About {self.more_replicas} replicas per group would show this difference with 80% power "
                "(from the observed spread)."
            )
        if self.tied:
            parts.append(f"Not shown different from it: {', '.join(self.tied)}.")
        if self.growth_note:
            parts.append(self.growth_note)
        if self.trade_offs:
            parts.append("Trade-offs: " + "; ".join(self.trade_offs) + ".")
        if self.clean_alternative:
            parts.append(self.clean_alternative)
        if self.metric_note:
            parts.append(self.metric_note)
        if self.caveats:
            parts.append("Caveats: " + "; ".join(sorted({w.kind for w in self.caveats})) + f" ({warnings_ref}).")
        parts.append(
            f"Confidence: **{self.confidence}**"
            + (f" ({self.confidence_reason})" if self.confidence_reason else "")
            + "."
        )
        return " ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "caveats"}
        d["caveats"] = [w.kind for w in self.caveats]
        d["headline"] = self.headline()
        d["text"] = self.text()
        return d


def _unsettled(a: Analysis, groups: Iterable[GroupSummary | None]) -> list[str]:
    """The groups (of `groups`, None left out) none of whose replicas settled a level: every one Too
    short (e.g. a run too brief, or a saturated machine that sampled too rarely)."""
    out = []
    for g in (g for g in groups if g is not None):
        words = [rep.status for rep in a.replicas if rep.group == g.name]
        if words and all(w == TOO_SHORT for w in words) and g.name not in out:
            out.append(g.name)
    return out


def _settle(
    r: Recommendation,
    c: GroupComparison,
    meaningful: bool,
    interval: str,
    other: GroupSummary,
    base: GroupSummary | None,
    growing: GroupSummary | None,
    clean: str,
    unsettled: list[str],
) -> None:
    """A significant verdict: high, or moderate naming every condition that fails — the interval
    reaching within the margin, fewer than min_replicas, `growing` Growing/Bloating, a
    group Too short, serious warnings; low when every replica of `other` or the baseline is Too
    short (`unsettled`): a difference between levels that never settled is no verdict to act on."""
    if unsettled:
        r.confidence = "low"
        r.confidence_reason = (
            f"every replica of {' and '.join(unsettled)} too short to settle a level, under "
            f"{RULES['min_window_s']:g} s or {RULES['min_samples']} steady samples: "
            "run longer, on a machine with CPU to spare"
        )
        return
    why = []
    if not meaningful:
        why.append(f"{interval} reaches within {c.margin:.0%} of the baseline")
    if min(other.usable, base.usable if base else 0) < RULES["min_replicas"]:
        why.append(f"fewer than {RULES['min_replicas']} replicas")
    if growing is not None and growing.status in GROWTH_WORDS:
        if workload_growth(growing):  # not held against it: the baseline grows as much (stats.added_growth)
            assert growing.growth_beside is not None
            clean += f"; {growing.name}'s growth no more than {growing.growth_beside.baseline}'s in MB"
        else:
            why.append(f"{growing.name} is {status_phrase(growing.status, growing.growth_shape)}")
    short = list(dict.fromkeys(g.name for g in (other, base) if g is not None and g.status == TOO_SHORT))
    if short:
        why.append(f"{' and '.join(short)} too short to settle a level")
    serious = [w.kind for w in r.caveats if w.severity == "serious"]
    if serious:
        why.append("serious warnings: " + ", ".join(sorted(set(serious))))
    r.confidence = "moderate" if why else "high"
    r.confidence_reason = "; ".join(why) if why else clean


def _growth_note(g: GroupSummary, baseline: str) -> tuple[str, str | None]:
    """The note on a growing winner, and its growth's word beside the baseline's: a caution, unless
    its growth is shown to be no more than the baseline's in MB (the workload's growth: the status
    word stays, the caution is rephrased); beyond or untold, the caution keeps the comparison."""
    mb, share, hours = group_change(g)
    word = status_phrase(g.status, g.growth_shape)
    grew = (
        f"*{word}* ({mb:+.0f} MB, {share:+.0%} of its level over {span(hours * 3600)})"
        if mb is not None and share is not None and hours is not None
        else f"*{word}*"
    )
    b = g.growth_beside
    if b is None:
        return f"Caution: {g.name} is {grew}: it may keep climbing in a longer run.", None
    ci = (
        f", excess {b.excess_mb:+.0f} MB, {b.ci_level:.0%} interval {b.excess_lo:+.0f} to {b.excess_hi:+.0f} MB, "
        f"margin ±{b.margin_mb:.0f} MB"
        if b.excess_lo is not None
        else ""
    )
    against = (
        f"{b.change_mb:+.0f} MB against {b.baseline_change_mb:+.0f} MB a replica over the same {span(b.window_s)}{ci}"
    )
    if b.not_beyond:
        return (
            f"{g.name} is {grew}, but {b.phrase()} ({against}): the workload's growth, not the allocator's.",
            b.word,
        )
    told = (
        f"it {b.phrase()} ({against})"
        if b.word == BEYOND
        else f"its growth beside {baseline}'s is {b.reason}"
        if b.p_adj is None
        else f"beside {baseline}'s growth it cannot be told apart from the workload's ({against})"
    )
    return f"Caution: {g.name} is {grew}: it may keep climbing in a longer run; {told}.", b.word


def recommend(a: Analysis) -> Recommendation:
    """Build the recommendation of an Analysis (see the module docstring for the confidence rule)."""
    r = Recommendation(a.metric, a.baseline, a.level_basis, metric_note=a.metric_note)
    usable = [g for g in a.groups if g.level_mb is not None and g.status != "Unverified"]
    if not usable:
        return r
    best = min(usable, key=lambda g: cast(float, g.level_mb))  # usable: a level each
    base = next((g for g in a.groups if g.name == a.baseline), None)
    r.winner, r.winner_mb = best.name, best.level_mb
    r.baseline_mb = base.level_mb if base else None
    c = best.comparison
    concerned = {best.name, a.baseline}
    r.caveats = [w for w in a.warnings if w.severity != "info" and (not w.groups or concerned & set(w.groups))]
    if best.name != a.baseline and c is not None:
        r.ratio, r.ratio_ci, r.ci_level, r.p_holm = c.ratio, c.ratio_ci, c.ci_level, c.p_holm
        r.significant, r.untestable, r.more_replicas = c.significant, c.untestable, c.replicas_needed
        if c.equivalent and c.ratio_ci:
            r.equivalence = (
                f"The interval {c.ratio_ci[0]:.2f}–{c.ratio_ci[1]:.2f} lies within ±{c.margin:.0%} of the "
                f"baseline: {best.name} and {a.baseline} are equivalent for practical purposes "
                f"(margin {c.margin:.0%}, docs/method/index.md)."
            )
        r.tied = [
            g.name
            for g in usable
            if g.name != best.name
            and g.comparison
            and best.comparison
            and set(g.comparison.letters) & set(best.comparison.letters)
        ]
    rival = None
    if best.name == a.baseline:
        others = [g for g in usable if g.name != a.baseline and g.comparison is not None]
        if others:
            rival = min(others, key=lambda g: cast(float, g.level_mb))
            rc = rival.comparison
            assert rc is not None  # others: a comparison each
            r.runner_up, r.runner_up_ratio, r.runner_up_ci = rival.name, rc.ratio, rc.ratio_ci
            r.runner_up_significant = bool(rc.significant and (rc.ratio or 1) > 1)
            c = rc  # the baseline's win is judged on its closest rival
    # confidence
    if rival is not None and c is not None and not c.untestable and c.p_holm is not None:
        if not r.runner_up_significant:
            r.confidence, r.confidence_reason = "low", f"{rival.name} cannot be told apart from the baseline"
        else:
            meaningful = bool(c.ratio_ci and c.ratio_ci[0] > 1 + c.margin)
            _settle(
                r,
                c,
                meaningful,
                f"the interval of {rival.name}",
                rival,
                base,
                base,
                "every other group significantly and meaningfully higher, clean, stable",
                _unsettled(a, (rival, base)),
            )
    elif best.name == a.baseline or c is None or c.untestable or c.p_holm is None:
        r.confidence = "none" if c is None or c.untestable else "low"
        r.confidence_reason = (
            "nothing testable"
            if c is None or c.untestable
            else "no group beat the baseline"
            if best.name == a.baseline
            else "nothing testable"
        )
    elif not c.significant:
        r.confidence, r.confidence_reason = "low", "the difference is not significant"
    else:
        _settle(
            r,
            c,
            bool(c.ratio_ci and c.ratio_ci[1] < 1 / (1 + c.margin)),
            "the interval",
            best,
            base,
            best,
            "significant, meaningful, clean, stable",
            _unsettled(a, (best, base)),
        )
    if best.status in GROWTH_WORDS:
        r.growth_note, r.growth_beside = _growth_note(best, a.baseline)
    if base and best.name != a.baseline:
        if best.ops_per_s and base.ops_per_s:
            r.trade_offs.append(f"throughput {best.ops_per_s / base.ops_per_s:.2f}× baseline")
        if best.cpu_us_per_op and base.cpu_us_per_op:
            r.trade_offs.append(f"CPU per operation {best.cpu_us_per_op / base.cpu_us_per_op:.2f}× baseline")
        if best.peak_mb and base.peak_mb:
            r.trade_offs.append(f"peak {best.peak_mb / base.peak_mb:.2f}× baseline")
    if best.idle_released_share is not None:
        r.trade_offs.append(
            f"idle release {best.idle_released_share:.0%} (share of its load level of {a.metric.upper()} "
            f"no longer held at the end of the idle phase)"
        )
    # the clean alternative: published-style figures that disagree with the clean ones
    alt = []
    for name in (best.name, a.baseline):
        f = a.end_figures.get(name)
        if f and f.differs:
            alt.append(
                f"{name}: {f.published_mb:.0f} MB over every listed replica (published style) vs "
                f"{f.clean_mb:.0f} MB over the {len(f.clean)} replicas on its allocator throughout"
            )
    # "would name X instead" only when some published-style figure really differs from its clean one
    # (a mix of allocators) and X's is materially below the winner's: with every replica clean the
    # two are the same replicas, and a different end-of-window winner is no "published-style" finding
    pub = {g: f.published_mb for g, f in a.end_figures.items() if f.published_mb is not None}
    other = min(pub, key=lambda g: pub[g]) if pub else None
    if (
        other
        and other != best.name
        and any(f.differs for f in a.end_figures.values())
        and pub.get(best.name)
        and pub[other] < pub[best.name] * (1 - RULES["published_differs_share"])
    ):
        alt.append(f"published-style figures would name {other} instead")
    if alt:
        r.clean_alternative = (
            "Published-style figures differ from the clean ones — "
            + "; ".join(alt)
            + ". The verdict uses the clean figures."
        )
    return r
