"""Sections other modules contribute to every report (registered providers, reporters.input):
the allocator-memory decomposition (analysis.decomposition) and the Tor test network (tornet).
Each is plain data; markdown, HTML, PNG and JSON reporters render it their own way."""
from __future__ import annotations

from pathlib import Path

from ..analysis import Analysis
from ..analysis.decomposition import (INTRO, LAYER_COLORS, TABLE_HEADERS, decomposition_data, decomposition_paragraphs,
                                      decomposition_rows, draw_decomposition, layer_stack)
from ..store import Store
from .input import Section, Table, register_section


def _decomposition_figure(g) -> dict:
    """One group's stacked layers as a plotly figure (hover shows layer, time and MB)."""
    t, stack, lines = layer_stack(g)
    x = [float(v) for v in t]
    clean = lambda v: [None if v_ != v_ else round(float(v_), 2) for v_ in v]  # noqa: E731  (NaN -> gap)
    data = [{"type": "scatter", "mode": "lines", "x": x, "y": clean(v), "name": n.replace("held_", "held: "),
             "stackgroup": "layers", "line": {"width": 0.5, "color": LAYER_COLORS.get(n, "#999999")},
             "hovertemplate": f"{n} %{{y:.1f}} MB at %{{x:.0f}} s<extra>{g.group}</extra>"} for n, v in stack]
    styles = {"rss": {"color": "black", "width": 1.5}, "live": {"color": "green", "width": 1.5, "dash": "dash"}}
    data += [{"type": "scatter", "mode": "lines", "x": x, "y": clean(v), "name": "RSS" if c == "rss" else "live requested",
              "line": styles[c], "hovertemplate": f"{c} %{{y:.1f}} MB at %{{x:.0f}} s<extra>{g.group}</extra>"}
             for c, v in lines.items()]
    return {"data": data, "layout": {"title": {"text": f"{g.group} ({g.label}): why the memory is held"},
                                     "xaxis": {"title": {"text": "seconds since start"}},
                                     "yaxis": {"title": {"text": "MB"}, "rangemode": "tozero"},
                                     "legend": {"orientation": "h"}, "margin": {"t": 40, "r": 10}}}


@register_section
def decomposition(store: Store, analysis: Analysis) -> Section | None:
    d = analysis.decomposition
    if not d:
        return None
    return Section(key="decomposition", title="Why the memory is held",
                   paragraphs=[INTRO] + decomposition_paragraphs(analysis),
                   table=Table(TABLE_HEADERS, decomposition_rows(analysis)),
                   figures=[_decomposition_figure(g) for g in d if g.times],
                   pngs=[("decomposition.png", lambda path: draw_decomposition(analysis, path))] if any(g.times for g in d) else [],
                   data={"groups": decomposition_data(analysis)})


@register_section
def tor_network(store: Store, analysis: Analysis) -> Section | None:
    from ..tornet import LOAD_HEADERS, report_summary
    got = report_summary(store.meta(), store.replicas())
    if got is None:
        return None
    paragraph, rows, info = got
    return Section(key="tor-network", title="Tor test network", paragraphs=[paragraph],
                   table=Table(LOAD_HEADERS, rows), data=info)


__all__ = ["decomposition", "tor_network"]
