"""The recommendation as a structured object; reporters render it (`text()` is the markdown form).

Confidence (documented in docs/analysis.md, reachable with 3+ replicas per group):
- high: the winner is significantly below the baseline (Holm), its whole interval lies below
  1/(1 + margin) (a meaningful win, not just a detectable one), both groups have 3+ usable
  replicas, neither is Growing/Bloating/Ratcheting, and no serious warning names either group;
- moderate: significant, but one of the other conditions fails (each named in `confidence_reason`);
- low: not significant (then an equivalence statement or how many replicas would settle it);
- none: nothing testable.
"""
from __future__ import annotations

from ..timefmt import span
from dataclasses import dataclass, field

from .rules import RULES
from .warnings import Warning

GROWTH_WORDS = ("Growing", "Bloating", "Ratcheting")


@dataclass
class Recommendation:
    metric: str
    baseline: str
    basis: str                               # what the figures are: "level at the end of ...", "steady mean ..."
    winner: str | None = None                # lowest-memory group (None: nothing usable)
    winner_mb: float | None = None
    baseline_mb: float | None = None
    ratio: float | None = None
    ratio_ci: tuple[float, float] | None = None
    ci_level: float | None = None
    p_holm: float | None = None
    significant: bool = False
    untestable: bool = False
    equivalence: str | None = None           # "within ±5% of the baseline" when the interval shows it
    more_replicas: int | None = None
    confidence: str = "none"
    confidence_reason: str = ""
    tied: list[str] = field(default_factory=list)
    growth_note: str | None = None
    trade_offs: list[str] = field(default_factory=list)
    caveats: list[Warning] = field(default_factory=list)
    clean_alternative: str | None = None     # when a published-style figure disagrees with the clean one
    metric_note: str | None = None           # which memory metric the verdict uses, LazyFree beside it

    def text(self) -> str:
        m = self.metric.upper()
        parts = []
        if self.winner is None:
            return "No group has usable data on its own allocator: nothing can be recommended from this data."
        if self.winner == self.baseline:
            parts.append(f"The baseline **{self.baseline}** used the least memory ({m}, {self.basis}); no group beat it.")
        else:
            ci = (f" ({self.ci_level:.0%} CI {self.ratio_ci[0]:.2f}–{self.ratio_ci[1]:.2f}, at its Holm level)"
                  if self.ratio_ci and self.ci_level else "")
            parts.append(f"**{self.winner}** used the least memory: {self.winner_mb:.1f} MB {m} ({self.basis}), "
                         f"{self.ratio:.2f}× the baseline {self.baseline}{ci}.")
            if self.untestable:
                parts.append("The difference is **untestable**: a group has a single replica; run at least 3 per group.")
            elif self.significant:
                parts.append(f"The difference is significant (Welch's t on log levels, Holm-adjusted p = {self.p_holm:.3g}).")
            elif self.p_holm is not None:
                parts.append(f"The difference is **not** significant (Holm-adjusted p = {self.p_holm:.3g}).")
        if self.equivalence:
            parts.append(self.equivalence)
        elif self.more_replicas and not self.significant and self.winner != self.baseline:
            parts.append(f"About {self.more_replicas} replicas per group would show this difference with 80% power "
                         "(from the observed spread).")
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
            parts.append("Caveats: " + "; ".join(sorted({w.kind for w in self.caveats})) + " (see Warnings).")
        parts.append(f"Confidence: **{self.confidence}**" + (f" ({self.confidence_reason})" if self.confidence_reason else "") + ".")
        return " ".join(parts)

    def as_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "caveats"}
        d["caveats"] = [w.kind for w in self.caveats]
        d["text"] = self.text()
        return d


def recommend(a) -> Recommendation:
    """Build the recommendation of an Analysis (see the module docstring for the confidence rule)."""
    r = Recommendation(a.metric, a.baseline, a.level_basis, metric_note=a.metric_note)
    usable = [g for g in a.groups if g.level_mb is not None and g.status != "Unverified"]
    if not usable:
        return r
    best = min(usable, key=lambda g: g.level_mb)
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
            r.equivalence = (f"The interval {c.ratio_ci[0]:.2f}–{c.ratio_ci[1]:.2f} lies within ±{c.margin:.0%} of the "
                             f"baseline: {best.name} and {a.baseline} are equivalent for practical purposes "
                             f"(margin {c.margin:.0%}, docs/analysis.md).")
        r.tied = [g.name for g in usable if g.name != best.name and g.comparison and best.comparison
                  and set(g.comparison.letters) & set(best.comparison.letters)]
    # confidence
    if best.name == a.baseline or c is None or c.untestable or c.p_holm is None:
        r.confidence = "none" if c is None or c.untestable else "low"
        r.confidence_reason = "no group beat the baseline" if best.name == a.baseline else "nothing testable"
    elif not c.significant:
        r.confidence, r.confidence_reason = "low", "the difference is not significant"
    else:
        why = []
        if not (c.ratio_ci and c.ratio_ci[1] < 1 / (1 + c.margin)):
            why.append(f"the interval reaches within {c.margin:.0%} of the baseline")
        if min(best.usable, base.usable if base else 0) < RULES["min_replicas"]:
            why.append(f"fewer than {RULES['min_replicas']} replicas")
        if best.status in GROWTH_WORDS:
            why.append(f"{best.name} is {best.status}")
        serious = [w.kind for w in r.caveats if w.severity == "serious"]
        if serious:
            why.append("serious warnings: " + ", ".join(sorted(set(serious))))
        r.confidence = "moderate" if why else "high"
        r.confidence_reason = "; ".join(why) if why else "significant, meaningful, clean, stable"
    if best.status in GROWTH_WORDS:
        g = best
        # the figures behind the word: the across-replica test's when it gave the word (the
        # replicas' median change can be +2% beside a word that needs > 5%)
        gg = g.growth if g.growth is not None and g.growth.word == g.status else None
        mb, share, secs = ((gg.change_mb, gg.change_share, gg.window_s) if gg is not None
                           else (g.change_mb, g.change_share, (g.window_h or 0) * 3600))
        r.growth_note = (f"Caution: {g.name} is *{g.status}* ({mb:+.0f} MB, {share:+.0%} of its level over "
                         f"{span(secs)}): it may keep climbing in a longer run." if mb is not None and share is not None
                         else f"Caution: {g.name} is *{g.status}*: it may keep climbing in a longer run.")
    if base and best.name != a.baseline:
        if best.ops_per_s and base.ops_per_s:
            r.trade_offs.append(f"throughput {best.ops_per_s / base.ops_per_s:.2f}× baseline")
        if best.cpu_us_per_op and base.cpu_us_per_op:
            r.trade_offs.append(f"CPU per operation {best.cpu_us_per_op / base.cpu_us_per_op:.2f}× baseline")
        if best.peak_mb and base.peak_mb:
            r.trade_offs.append(f"peak {best.peak_mb / base.peak_mb:.2f}× baseline")
    if best.idle_released_share is not None:
        r.trade_offs.append(f"returned {best.idle_released_share:.0%} of its memory when idle")
    # the clean alternative: published-style figures that disagree with the clean ones
    alt = []
    for name in (best.name, a.baseline):
        f = a.end_figures.get(name)
        if f and f.differs:
            alt.append(f"{name}: {f.published_mb:.0f} MB over every listed replica (published style) vs "
                       f"{f.clean_mb:.0f} MB over the {len(f.clean)} replicas on its allocator throughout")
    pub = {g: f.published_mb for g, f in a.end_figures.items() if f.published_mb is not None}
    if pub and min(pub, key=pub.get) != best.name:
        alt.append(f"published-style figures would name {min(pub, key=pub.get)} instead")
    if alt:
        r.clean_alternative = "Published-style figures differ from the clean ones — " + "; ".join(alt) + \
            ". The verdict uses the clean figures."
    return r
