"""Plotly figure specs as plain dicts ({"data": [...], "layout": {...}}), rendered in the browser by
the plotly.js that report.html inlines. No plotly import here: the same builders can feed a live
page (serve the dicts as JSON) or any other page that loads plotly.js.

Every string from the store or the experiment goes through `ptext` (plotly renders a small set
of HTML-like tags in labels; escaped, a name such as `<b>` shows as typed)."""

from __future__ import annotations

import html
import math

import numpy as np

from ..analysis import Analysis
from .chartdata import (
    MIN_BAND_REPLICAS,
    TimeAxis,
    band,
    group_colors,
    has_values,
    marks,
    thin,
    time_axis,
    treatment_series,
)

FONT = {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 12}


def ptext(s: object) -> str:
    """A label plotly shows literally (its pseudo-HTML and template syntax neutralised)."""
    return html.escape(str(s), quote=False).replace("%{", "%\u200b{")


def _num(a) -> list:
    """JSON-safe floats: NaN becomes null (a gap in the line)."""
    return [None if (v is None or (isinstance(v, float) and math.isnan(v))) else round(float(v), 4) for v in a]


def base_layout(title: str, xtitle: str, ytitle: str, **extra) -> dict:
    layout = {
        "title": {"text": ptext(title), "font": {"size": 14}},
        "font": FONT,
        "hovermode": "closest",
        "margin": {"l": 60, "r": 20, "t": 90, "b": 60},
        "legend": {"orientation": "h", "x": 0, "xanchor": "left", "y": 1.02, "yanchor": "bottom"},
        "xaxis": {"title": {"text": ptext(xtitle)}, "zeroline": False},
        "yaxis": {"title": {"text": ptext(ytitle)}, "rangemode": "tozero"},
    }
    layout.update(extra)
    return layout


def mark_shapes(
    report_events: list[dict], axis: TimeAxis, xref: str = "x", yref: str = "y domain", label_phases: bool = True
) -> tuple[list[dict], list[dict]]:
    """Phase starts as labelled dotted lines, other events as faint dashed lines."""
    shapes, notes = [], []
    for m in marks(report_events):
        x = float(axis.x(m.t))
        shapes.append(
            {
                "type": "line",
                "xref": xref,
                "yref": yref,
                "x0": x,
                "x1": x,
                "y0": 0,
                "y1": 1,
                "line": {
                    "color": "#777" if m.is_phase else "#000",
                    "width": 1,
                    "dash": "dot" if m.is_phase else "dash",
                },
                "opacity": 1 if m.is_phase else 0.35,
            }
        )
        if m.is_phase and label_phases:
            notes.append(
                {
                    "x": x,
                    "y": 1,
                    "xref": xref,
                    "yref": yref,
                    "text": ptext(m.label),
                    "showarrow": False,
                    "xanchor": "left",
                    "yanchor": "top",
                    "font": {"size": 10, "color": "#555"},
                }
            )
    return shapes, notes


def grid_axes(
    layout: dict, n: int, cols: int, titles: list[str], xtitle: str, ytitle: str, shared_y: bool = True
) -> list[tuple[str, str]]:
    """Small multiples: n axis pairs laid out in `cols` columns; returns each panel's (xref, yref)."""
    rows = math.ceil(n / cols)
    gx, gy = 0.06, 0.12 / max(rows, 1) + 0.04
    refs = []
    for k in range(1, n + 1):
        r, c = divmod(k - 1, cols)
        xs, ys = ("" if k == 1 else str(k)), ("" if k == 1 else str(k))
        x0, x1 = c / cols + (gx / 2 if c else 0), (c + 1) / cols - (gx / 2 if c < cols - 1 else 0)
        y1 = 1 - r / rows - (gy / 2 if r else 0)
        y0 = 1 - (r + 1) / rows + (gy / 2 if r < rows - 1 else 0)
        layout[f"xaxis{xs}"] = {"domain": [x0, x1], "anchor": f"y{ys}", "zeroline": False}
        layout[f"yaxis{ys}"] = {
            "domain": [y0, y1],
            "anchor": f"x{xs}",
            "rangemode": "tozero",
            "title": {"text": ptext(ytitle) if c == 0 else ""},
        }
        if shared_y and k > 1:
            layout[f"yaxis{ys}"]["matches"] = "y"
        layout.setdefault("annotations", []).append(
            {
                "text": f"<b>{ptext(titles[k - 1])}</b>",
                "x": (x0 + x1) / 2,
                "y": y1,
                "xref": "paper",
                "yref": "paper",
                "xanchor": "center",
                "yanchor": "bottom",
                "showarrow": False,
                "font": {"size": 11},
            }
        )
        refs.append((f"x{xs}", f"y{ys}"))
    # one x title for all panels (per-panel titles collide on narrow screens)
    layout["annotations"].append(
        {
            "text": ptext(xtitle),
            "x": 0.5,
            "y": 0,
            "xref": "paper",
            "yref": "paper",
            "yshift": -40,
            "xanchor": "center",
            "yanchor": "top",
            "showarrow": False,
        }
    )
    return refs


def _hover(unit: str, what: str = "MB") -> str:
    return (
        "<b>%{customdata[0]}</b><br>group %{customdata[1]}<br>t = %{x:.2f} "
        + unit
        + "<br>%{y:.1f} "
        + what
        + "<extra></extra>"
    )


def _line(x, y, name: str, group: str, color: str, replica: str, unit: str, **kw) -> dict:
    trace = {
        "type": "scatter",
        "mode": "lines",
        "x": _num(x),
        "y": _num(y),
        "name": ptext(name),
        "legendgroup": ptext(group),
        "line": {"color": color, "width": kw.pop("width", 1.2)},
        "customdata": [[ptext(replica), ptext(group)]] * len(x),
        "hovertemplate": _hover(unit, kw.pop("what", "MB")),
    }
    trace.update(kw)
    return trace


def memory_over_time(a: Analysis, events: list[dict]) -> dict | None:
    """Per group: median and interquartile band over replicas (4+ replicas), else each replica's line."""
    axis = time_axis(a.series)
    if axis is None:
        return None
    colors = group_colors([g.name for g in a.groups])
    data = []
    for g in a.groups:
        ss = treatment_series(a, g.name)
        c = colors[g.name]
        if len(ss) >= MIN_BAND_REPLICAS:
            b = band(ss)
            x = axis.x(b.t)
            label = f"{g.name} median (n={b.n})"
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "x": _num(x),
                    "y": _num(b.q1),
                    "line": {"width": 0},
                    "legendgroup": ptext(g.name),
                    "showlegend": False,
                    "hoverinfo": "skip",
                    "name": ptext(g.name + " Q1"),
                }
            )
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "x": _num(x),
                    "y": _num(b.q3),
                    "line": {"width": 0},
                    "fill": "tonexty",
                    "fillcolor": _alpha(c, 0.2),
                    "legendgroup": ptext(g.name),
                    "showlegend": False,
                    "hoverinfo": "skip",
                    "name": ptext(g.name + " Q3"),
                }
            )
            data.append(_line(x, b.median, label, g.name, c, f"median of {b.n} replicas", axis.unit, width=2))
        else:
            for i, s in enumerate(ss):
                m = s.t >= s.treatment_start
                x, y = thin(axis.x(s.t[m]), s.mb[m])
                data.append(
                    _line(
                        x, y, f"{g.name} (n={len(ss)}, each replica)", g.name, c, s.name, axis.unit, showlegend=i == 0
                    )
                )
    shapes, notes = mark_shapes(events, axis)
    layout = base_layout(
        f"{a.metric.upper()} over time, each group on its own allocator",
        axis.label,
        f"{a.metric.upper()} (MB)",
        shapes=shapes,
        annotations=notes,
    )
    return {"data": data, "layout": layout}


def trajectories(a: Analysis, events: list[dict], values: str = "mb") -> dict | None:
    """Every replica's whole series, one panel per group; spans on another or an unknown allocator dashed grey."""
    axis = time_axis(a.series)
    if axis is None:
        return None
    groups = [g.name for g in a.groups]
    colors = group_colors(groups)
    layout = base_layout(
        "Per-replica trajectories",
        "",
        "",
        showlegend=False,
        height=max(320, 260 * math.ceil(len(groups) / min(3, len(groups)))),
    )
    refs = grid_axes(layout, len(groups), min(3, len(groups)), groups, axis.label, f"{a.metric.upper()} (MB)")
    data = []
    for (xref, yref), g in zip(refs, groups):
        for s in a.series:
            if s.group != g or not len(s.t):
                continue
            for seg in s.segments or [None]:
                m = np.ones(len(s.t), bool) if seg is None else (s.t >= seg.start) & (s.t <= seg.end)
                other = s.verified is False or (seg is not None and seg.group != g)
                x, y = thin(axis.x(s.t[m]), s.mb[m])
                data.append(
                    _line(
                        x,
                        y,
                        s.name,
                        g,
                        "#888" if other else colors[g],
                        s.name + (" (excluded span)" if other else ""),
                        axis.unit,
                        xaxis=xref,
                        yaxis=yref,
                        width=1,
                        opacity=0.6 if other else 0.85,
                        **({"line": {"color": "#888", "width": 1, "dash": "dash"}} if other else {}),
                    )
                )
        shapes, _ = mark_shapes(events, axis, xref=xref, yref=f"{yref} domain", label_phases=False)
        layout.setdefault("shapes", []).extend(shapes)
    return {"data": data, "layout": layout}


def distribution(a: Analysis) -> dict:
    """Steady level per replica by group (box + points), the group's level as a marker; axis from zero."""
    colors = group_colors([g.name for g in a.groups])
    data = []
    for g in a.groups:
        reps = [r for r in a.replicas if r.group == g.name and r.steady_mean_mb is not None and r.verified is not False]
        data.append(
            {
                "type": "box",
                "name": ptext(g.name),
                "y": _num([r.steady_mean_mb for r in reps]),
                "boxpoints": "all",
                "jitter": 0.4,
                "pointpos": 0,
                "marker": {"color": colors[g.name], "size": 7},
                "line": {"color": colors[g.name]},
                "legendgroup": ptext(g.name),
                "customdata": [[ptext(r.name), ptext(g.name)] for r in reps],
                "hovertemplate": "<b>%{customdata[0]}</b><br>group %{customdata[1]}<br>steady %{y:.1f} MB<extra></extra>",
            }
        )
    levels = [(g.name, g.level_mb) for g in a.groups if g.level_mb is not None]
    data.append(
        {
            "type": "scatter",
            "mode": "markers",
            "name": "group level (summary)",
            "x": [ptext(n) for n, _ in levels],
            "y": _num([v for _, v in levels]),
            "marker": {"symbol": "diamond-wide", "size": 12, "color": "#000"},
            "customdata": [[ptext(n), ptext(n)] for n, _ in levels],
            "hovertemplate": "<b>%{customdata[0]}</b> level %{y:.1f} MB<extra></extra>",
        }
    )
    layout = base_layout(
        "Steady level per replica (axis from 0)", "", f"steady {a.metric.upper()} (MB)", showlegend=True
    )
    return {"data": data, "layout": layout}


def idle_release(a: Analysis) -> dict | None:
    """Share of its load level each replica no longer held at the end of idle; bar = group median."""
    groups = [g.name for g in a.groups]
    colors = group_colors(groups)
    per = {
        g: [r for r in a.replicas if r.group == g and r.idle_released_share is not None and r.verified is not False]
        for g in groups
    }
    if not any(per.values()):
        return None
    data = []
    for g in groups:
        if not per[g]:
            continue
        v = [r.idle_released_share for r in per[g]]
        data.append(
            {
                "type": "bar",
                "x": [ptext(g)],
                "y": [float(np.median(v))],
                "name": ptext(g),
                "legendgroup": ptext(g),
                "marker": {"color": _alpha(colors[g], 0.5)},
                "hovertemplate": f"<b>{ptext(g)}</b> median %{{y:.1%}}<extra></extra>",
            }
        )
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "x": [ptext(g)] * len(v),
                "y": _num(v),
                "name": ptext(g),
                "legendgroup": ptext(g),
                "showlegend": False,
                "marker": {"color": colors[g], "size": 8},
                "customdata": [[ptext(r.name), ptext(g)] for r in per[g]],
                "hovertemplate": "<b>%{customdata[0]}</b><br>group %{customdata[1]}<br>released %{y:.1%}<extra></extra>",
            }
        )
    layout = base_layout("Idle release per group", "", "released during idle", showlegend=True)
    layout["yaxis"].update({"tickformat": ".0%", "rangemode": "tozero", "zeroline": True})
    return {"data": data, "layout": layout}


def _group_panels(a: Analysis, events: list[dict], title: str, ytitle: str, pick, draw) -> dict | None:
    axis = time_axis(a.series)
    groups = [g.name for g in a.groups if any(pick(s) for s in a.series if s.group == g.name)]
    if axis is None or not groups:
        return None
    colors = group_colors([g.name for g in a.groups])
    cols = min(3, len(groups))
    layout = base_layout(title, "", "", height=max(320, 260 * math.ceil(len(groups) / cols)))
    refs = grid_axes(layout, len(groups), cols, groups, axis.label, ytitle)
    data = []
    for (xref, yref), g in zip(refs, groups):
        for s in a.series:
            if s.group == g and pick(s):
                data += draw(s, axis, colors[g], xref, yref)
        shapes, _ = mark_shapes(events, axis, xref=xref, yref=f"{yref} domain", label_phases=False)
        layout.setdefault("shapes", []).extend(shapes)
    return {"data": data, "layout": layout}


def live_bytes(a: Analysis, events: list[dict]) -> dict | None:
    """The metric against live requested bytes (where the workload reports them): the gap is allocator overhead."""
    m = a.metric.upper()

    def draw(s, axis, color, xref, yref):
        x, y, live = thin(axis.x(s.t), s.mb, s.live_mb)
        return [
            _line(
                x,
                y,
                f"{m}",
                s.group,
                color,
                s.name,
                axis.unit,
                xaxis=xref,
                yaxis=yref,
                legendgroup="metric",
                showlegend=False,
            ),
            _line(
                x,
                live,
                "live requested bytes",
                s.group,
                "#000",
                s.name,
                axis.unit,
                xaxis=xref,
                yaxis=yref,
                legendgroup="live",
                showlegend=False,
                what="MB live",
                line={"color": "#000", "width": 1, "dash": "dash"},
            ),
        ]

    fig = _group_panels(a, events, f"{m} and live requested bytes", "MB", lambda s: has_values(s.live_mb), draw)
    return fig


def footprint(a: Analysis, events: list[dict]) -> dict | None:
    """The metric against the footprint (metric − LazyFree) where LazyFree was sampled."""
    m = a.metric.upper()

    def draw(s, axis, color, xref, yref):
        ok = ~np.isnan(s.lazyfree_mb)
        x, y, foot = thin(axis.x(s.t[ok]), s.mb[ok], s.mb[ok] - s.lazyfree_mb[ok])  # both lines' extremes kept
        return [
            _line(x, y, m, s.group, color, s.name, axis.unit, xaxis=xref, yaxis=yref, showlegend=False),
            _line(
                x,
                foot,
                "footprint",
                s.group,
                color,
                s.name,
                axis.unit,
                xaxis=xref,
                yaxis=yref,
                showlegend=False,
                what="MB footprint",
                line={"color": color, "width": 1.2, "dash": "dot"},
            ),
        ]

    # a replica with LazyFree 0 throughout has a footprint equal to its metric: nothing to draw
    return _group_panels(
        a,
        events,
        f"{m} and footprint ({m} − LazyFree)",
        "MB",
        lambda s: has_values(s.lazyfree_mb) and bool(np.nanmax(s.lazyfree_mb) > 0),
        draw,
    )


def _alpha(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def report_figures(a: Analysis, events: list[dict]) -> list[tuple[str, str, dict]]:
    """Every chart of the report as (id, caption, figure); charts without data are left out."""
    figs = [
        (
            "memory",
            "Memory over time per group. Hover a line for replica, group, time and value; click a "
            f"legend entry to hide a group; drag to zoom. Groups with fewer than {MIN_BAND_REPLICAS} "
            "replicas show each replica, not a band.",
            memory_over_time(a, events),
        ),
        (
            "trajectories",
            "Every replica, one panel per group; grey dashed: an unverified replica or a span on "
            "another or an unknown allocator (excluded from the figures).",
            trajectories(a, events),
        ),
        (
            "distribution",
            "Steady level of each replica; the diamond is the group's level in the summary. The axis starts at zero.",
            distribution(a),
        ),
        (
            "idle-release",
            "The share of its load level (the steady mean) each replica no longer held at the end "
            "of the idle phase (median of its last 3 samples); the bar is the group's median.",
            idle_release(a),
        ),
        (
            "live-bytes",
            "Memory (solid) against the live bytes the program asked for (black dashed), where it "
            "reports them: the gap is allocator overhead.",
            live_bytes(a, events),
        ),
        (
            "footprint",
            "Memory (solid) against its footprint (dotted: LazyFree subtracted, pages freed with "
            "MADV_FREE that the kernel may take back), where LazyFree was sampled.",
            footprint(a, events),
        ),
    ]
    return [(i, c, f) for i, c, f in figs if f is not None]
