"""The "Host as a factor" section (analysis.hosts): group ratios within hosts beside the pooled
ones, each host's ratio to the fleet, and the test of a host effect. Plain data; every reporter
renders it its own way."""

from __future__ import annotations

from ..analysis import Analysis
from ..store import Store
from .input import Section, Table, register_section

HEADERS = ["", "ratio (within hosts)", "interval", "p (Holm)", "pooled ratio", "hosts with both"]


def _ci(lo_hi: tuple[float, float]) -> str:
    return f"{lo_hi[0]:.2f}–{lo_hi[1]:.2f}"


@register_section
def hosts(store: Store, analysis: Analysis) -> Section | None:
    hf = analysis.hosts
    if hf is None:
        return None
    pooled = {g.name: g.comparison.ratio for g in analysis.groups if g.comparison is not None}
    rows = [
        [
            f"{c.group} / {hf.baseline}",
            f"{c.ratio:.2f}×",
            f"{_ci(c.ratio_ci)} ({c.ci_level:.1%})",
            f"{c.p_adj:.3g}",
            f"{pooled[c.group]:.2f}×" if pooled.get(c.group) else "–",
            str(c.hosts_with_both),
        ]
        for c in hf.group_effects
    ]
    rows += [
        [f"host {h.host}", f"{h.ratio:.2f}× the fleet", _ci(h.ratio_ci), "", "", f"{h.replicas} replicas"]
        for h in hf.host_effects
    ]
    spread = max(hf.host_effects, key=lambda h: abs(h.ratio - 1))
    test = (
        f"a host effect is {'' if hf.host_p < 0.05 else 'not '}shown (F test p = {hf.host_p:.3g})"
        if hf.host_p is not None
        else "no spread left to test a host effect"
    )
    paragraphs = [
        f"Replicas ran on {len(hf.hosts)} hosts. Groups are compared with {hf.baseline} within hosts "
        f"(two-way model on log levels: group + host), so a difference between hosts does not pass for "
        f"one between allocators; {test}, the largest being {spread.host} at {spread.ratio:.2f}× the fleet "
        f"(residual spread {hf.residual_sd:.1%} on the log scale, {hf.df} df)."
    ] + hf.notes
    return Section(
        key="hosts", title="Host as a factor", paragraphs=paragraphs, table=Table(HEADERS, rows), data=hf.as_dict()
    )
