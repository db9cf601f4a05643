"""The decomposition (analysis.decomposition) as the report shows it: the intro, the layers table,
the paragraphs per group, the stacked chart as a plotly figure (HTML) and as a PNG (matplotlib),
and the layer colours both use."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..analysis.decomposition import MB, GroupDecomposition
from ..store import HELD_KINDS


def decomposition_data(analysis) -> list[dict] | None:
    """The decomposition as plain dicts (JSON/HTML); None when the run has none."""
    d = getattr(analysis, "decomposition", None)
    return [g.as_dict() for g in d] if d else None


INTRO = (
    "The allocator's own account (introspection helper, docs/how-to/introspection.md) beside the kernel's: live "
    "requested bytes (when the workload publishes them) → allocator in use → free but held, by kind → RSS. "
    "Medians across replicas; late load = second half of the load phase."
)
TABLE_HEADERS = [
    "group",
    "when",
    "live MB",
    "in use MB",
    "held MB by kind",
    "committed MB",
    "rest of RSS MB",
    "RSS MB",
    "LazyFree MB",
]


def decomposition_rows(analysis) -> list[list[str]]:
    """The layers table (TABLE_HEADERS): per group its late-load and end snapshots; [] without data."""
    rows = []
    for g in getattr(analysis, "decomposition", None) or []:
        for when, s in (("late load", g.load), ("end", g.end)):
            if s is None:
                continue
            held = ", ".join(
                f"{k} {v / MB:.1f}" for k, v in sorted(s.held.items(), key=lambda kv: -kv[1]) if v >= 0.05 * MB
            )
            rows.append(
                [
                    g.group,
                    when,
                    _mbn(s.live),
                    _mbn(s.in_use),
                    held or "–",
                    _mbn(s.committed),
                    _mbn(s.other),
                    _mbn(s.rss),
                    _mbn(s.lazyfree),
                ]
            )
    return rows


def decomposition_paragraphs(analysis) -> list[str]:
    """Per group, in plain words: the summary, then suggestions, notes and the helper's cost."""
    out = []
    for g in getattr(analysis, "decomposition", None) or []:
        lines = [f"**{g.group}**: {g.summary or 'no allocator figures.'}"]
        lines += [f"Suggestion: {s.text()}" for s in g.suggestions]
        lines += [f"Note: {n}" for n in g.notes]
        if g.helper_cpu_share is not None:
            lines.append(
                f"Helper cost: {g.helper_cpu_share:.2%} of the replicas' CPU, one collection every "
                f"{g.helper_interval_s or 0:.1f} s."
            )
        out.append(" ".join(lines))
    return out


def _mbn(x: float | None) -> str:
    return "–" if x is None else f"{x / MB:.1f}"


LAYER_COLORS = {
    "in_use": "#4c72b0",
    "committed": "#4c72b0",
    "held_bins": "#dd8452",
    "held_top": "#c44e52",
    "held_dirty": "#8172b3",
    "held_muzzy": "#937860",
    "held_abandoned": "#da8bc3",
    "held_cached": "#8c8c8c",
    "held_committed_free": "#ccb974",
    "held_metadata": "#64b5cd",
    "other": "#dddddd",
}


def layer_stack(g: GroupDecomposition) -> tuple[np.ndarray, list[tuple[str, np.ndarray]], dict[str, np.ndarray]]:
    """A group's timeline as drawn (PNG and HTML alike): times, the stacked layers bottom to top (in
    use or committed, each held kind, the rest of RSS) and the lines (rss, live) in MB."""
    t = np.array(g.times)
    L = g.layers
    arr = lambda c: np.array([np.nan if x is None else x for x in L.get(c, [None] * len(t))], dtype=float)
    stack: list[tuple[str, np.ndarray]] = []
    base = "in_use" if "in_use" in L else ("committed" if "committed" in L else None)
    if base:
        stack.append((base, arr(base)))
    stack += [(f"held_{k}", arr(f"held_{k}")) for k in HELD_KINDS if f"held_{k}" in L]
    lines = {c: arr(c) for c in ("rss", "live") if c in L}
    if "rss" in lines and stack:
        rest = lines["rss"] - np.nansum(np.vstack([v for _, v in stack]), axis=0)
        stack.append(("other", np.clip(rest, 0, None)))
    return t, stack, lines


def draw_decomposition(analysis, path: Path) -> Path | None:
    """A stacked chart per group: in use, then each held kind, then the rest of RSS; live bytes
    and RSS as lines. None when the run has no allocator figures."""
    d = [g for g in (getattr(analysis, "decomposition", None) or []) if g.times]
    if not d:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(d), 1, figsize=(10, 3.2 * len(d)), sharex=True, squeeze=False)
    for ax, g in zip(axes[:, 0], d):
        t, stack, lines = layer_stack(g)
        if stack:
            ax.stackplot(
                t,
                *[np.nan_to_num(v) for _, v in stack],
                labels=[n.replace("held_", "held: ") for n, _ in stack],
                colors=[LAYER_COLORS.get(n, "#999999") for n, _ in stack],
                alpha=0.85,
            )
        if "rss" in lines:
            ax.plot(t, lines["rss"], color="black", lw=1.2, label="RSS")
        if "live" in lines:
            ax.plot(t, lines["live"], color="green", lw=1.2, ls="--", label="live requested")
        ax.set_title(f"{g.group} ({g.label})", fontsize=10)
        ax.set_ylabel("MB")
        ax.legend(fontsize=7, loc="upper right", ncol=3)
    axes[-1, 0].set_xlabel("seconds since start")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def figure(g: GroupDecomposition) -> dict:
    """One group's stacked layers as a plotly figure (hover shows layer, time and MB)."""
    t, stack, lines = layer_stack(g)
    x = [float(v) for v in t]
    clean = lambda v: [None if v_ != v_ else round(float(v_), 2) for v_ in v]  # NaN -> gap
    data = [
        {
            "type": "scatter",
            "mode": "lines",
            "x": x,
            "y": clean(v),
            "name": n.replace("held_", "held: "),
            "stackgroup": "layers",
            "line": {"width": 0.5, "color": LAYER_COLORS.get(n, "#999999")},
            "hovertemplate": f"{n} %{{y:.1f}} MB at %{{x:.0f}} s<extra>{g.group}</extra>",
        }
        for n, v in stack
    ]
    styles = {"rss": {"color": "black", "width": 1.5}, "live": {"color": "green", "width": 1.5, "dash": "dash"}}
    data += [
        {
            "type": "scatter",
            "mode": "lines",
            "x": x,
            "y": clean(v),
            "name": "RSS" if c == "rss" else "live requested",
            "line": styles[c],
            "hovertemplate": f"{c} %{{y:.1f}} MB at %{{x:.0f}} s<extra>{g.group}</extra>",
        }
        for c, v in lines.items()
    ]
    return {
        "data": data,
        "layout": {
            "title": {"text": f"{g.group} ({g.label}): why the memory is held"},
            "xaxis": {"title": {"text": "seconds since start"}},
            "yaxis": {"title": {"text": "MB"}, "rangemode": "tozero"},
            "legend": {"orientation": "h"},
            "margin": {"t": 40, "r": 10},
        },
    }
