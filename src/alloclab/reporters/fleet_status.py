"""The "Decided?" section of a fleet run's report: what `alloclab fleet status` prints (the same
rule, alloclab/fleet/decision.py, on the same store), one line per comparison."""

from __future__ import annotations

import json

from ..analysis import Analysis
from ..store import Store
from .input import Section, register_section


def is_fleet_run(meta: dict) -> bool:
    """A collector's run, or a merge of collectors' runs (each host's store)."""
    if meta.get("source") == "fleet":
        return True
    try:
        sources = [m.get("source") for m in json.loads(meta.get("merged_from") or "[]")]
    except (ValueError, AttributeError):
        return False
    return bool(sources) and all(s == "fleet" for s in sources)


@register_section
def fleet_status(store: Store, analysis: Analysis) -> Section | None:
    if not is_fleet_run(store.meta()):
        return None
    from ..fleet import decision

    st = decision.run_status(store)
    plan = st.plan
    rec = st.recommended
    paragraphs = [
        f"Day {st.elapsed_s / decision.DAY:.1f} of the experiment, {st.looks_done} of {len(plan.times())} looks "
        f"(every {plan.every_s / 3600:g} h up to {plan.horizon_s / decision.DAY:g} days; α spent in proportion to "
        f"each look's time, so the false-decision rate stays ≤ {plan.alpha:g} however often anyone looks). "
        f"`alloclab fleet status` prints the same."
    ]
    paragraphs += [decision.status_line(c, plan, st.started_at) for c in st.comparisons]
    paragraphs.append(
        f"Recommended: {rec} (`alloclab fleet deploy --from-run RUN` deploys it as tested)."
        if rec
        else "Recommended: none yet — the run is undecided."
    )
    return Section(key="fleet-status", title="Decided?", paragraphs=paragraphs, data=st.as_dict())
