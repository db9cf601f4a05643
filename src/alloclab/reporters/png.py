"""charts/*.png (matplotlib): memory over time per group, the distribution of levels, per-replica
trajectories, idle release, and memory against live bytes — the same charts as report.html, static."""

from __future__ import annotations

import io
import math
import tempfile
from pathlib import Path

import numpy as np

from ..common.outputs import write_output
from .chartdata import MIN_BAND_REPLICAS, band, group_colors, has_values, marks, thin, time_axis, treatment_series
from .input import ReportInput


class PngReporter:
    name = "png"

    def write(self, report: ReportInput, out_dir: Path) -> list[Path]:
        out = out_dir / "charts"
        paths = draw_charts(report, out)
        for section in report.sections:
            for name, draw in section.pngs:
                # drawn where no one else can plant a link (a fresh 0700 directory), then written
                # into the run relative to it
                with tempfile.TemporaryDirectory(prefix="alloclab-chart-") as tmp:
                    draw(Path(tmp) / name)
                    paths.append(write_output(out_dir, f"charts/{name}", (Path(tmp) / name).read_bytes()))
        return paths


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _draw_marks(ax, report: ReportInput, axis, label_phases: bool = True) -> None:
    """Phase starts as labelled dotted lines, other events as faint dashed lines."""
    for m in marks(report.events):
        x = float(axis.x(m.t))
        if m.is_phase:
            ax.axvline(x, color="grey", ls=":", lw=0.9)
            if label_phases:
                ax.annotate(
                    m.label,
                    (x, 1.0),
                    xycoords=("data", "axes fraction"),
                    xytext=(2, -2),
                    textcoords="offset points",
                    fontsize=7,
                    color="dimgrey",
                    va="top",
                    rotation=90,
                )
        else:
            ax.axvline(x, color="black", ls="--", lw=0.6, alpha=0.4)


def _grid_of(n: int) -> tuple[int, int]:
    cols = min(3, n)
    return math.ceil(n / cols), cols


CHART_FILES = ("timeseries.png", "distribution.png", "trajectories.png", "idle_release.png", "fragmentation.png")


class _Ctx:
    """What every chart needs: the input, pyplot, the time axis, group names and colours."""

    def __init__(self, report: ReportInput):
        self.report, self.a, self.plt = report, report.analysis, _plt()
        self.axis = time_axis(self.a.series)
        self.groups = [g.name for g in self.a.groups]
        self.colors = group_colors(self.groups)
        self.label = f"{self.a.metric.upper()} (MB)"
        self.rng = np.random.default_rng(0)


def timeseries_figure(c: _Ctx):
    """Memory over time: median and IQR band per group (4+ replicas), else each replica's line."""
    a, axis = c.a, c.axis
    fig, ax = c.plt.subplots(figsize=(10, 5.5))
    for g in c.groups:
        ss = treatment_series(a, g)
        if len(ss) >= MIN_BAND_REPLICAS:
            b = band(ss)
            ax.plot(axis.x(b.t), b.median, color=c.colors[g], lw=1.8, label=f"{g} median (n={b.n})")
            ax.fill_between(axis.x(b.t), b.q1, b.q3, color=c.colors[g], alpha=0.2, label=f"{g} interquartile band")
        else:
            for i, s in enumerate(ss):
                m = s.t >= s.treatment_start
                ax.plot(
                    axis.x(s.t[m]),
                    s.mb[m],
                    color=c.colors[g],
                    lw=1.0,
                    alpha=0.85,
                    label=f"{g} (n={len(ss)}, each replica)" if i == 0 else None,
                )
    _draw_marks(ax, c.report, axis)
    ax.set_xlabel(axis.label)
    ax.set_ylabel(c.label)
    ax.set_title(
        "Memory over time on each group's own allocator\n"
        f"median and interquartile band over replicas (groups under {MIN_BAND_REPLICAS} replicas: each replica); "
        "dotted: phases, dashed: events",
        fontsize=10,
    )
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig


def distribution_figure(c: _Ctx):
    """Steady level per replica by group; the axis starts at zero so a gap reads at its size."""
    a, groups = c.a, c.groups
    fig, ax = c.plt.subplots(figsize=(max(6, 1.3 * len(groups) + 2), 5))
    data = [
        [
            r.steady_mean_mb
            for r in a.replicas
            if r.group == g and r.steady_mean_mb is not None and r.verified is not False
        ]
        for g in groups
    ]
    ax.boxplot([d if d else [np.nan] for d in data], showfliers=False)
    ax.set_xticks(range(1, len(groups) + 1), groups, rotation=20)
    for i, (g, d) in enumerate(zip(groups, data), 1):
        ax.scatter(i + c.rng.uniform(-0.12, 0.12, len(d)), d, color=c.colors[g], zorder=3, s=18)
    ax.set_ylim(bottom=0)
    ax.set_ylabel(f"steady {c.label}")
    ax.set_title("Steady-state memory per replica (axis from zero)")
    ax.grid(alpha=0.3, axis="y")
    return fig


def _group_panels(c: _Ctx, groups: list[str], draw, ylabel: str, title: str):
    """One panel per group on a grid sharing the y axis, `draw(ax, group)` filling each; then each
    panel's phase marks, title and grid, the spare panels hidden, the axis labels and the title."""
    rows, cols = _grid_of(len(groups))
    fig, axes = c.plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), sharey=True, squeeze=False)
    for ax, g in zip(axes.flat, groups):
        draw(ax, g)
        _draw_marks(ax, c.report, c.axis, label_phases=False)
        ax.set_title(g, fontsize=9)
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(groups) :]:
        ax.axis("off")
    fig.supxlabel(c.axis.label)
    fig.supylabel(ylabel)
    fig.suptitle(title)
    return fig


def trajectories_figure(c: _Ctx):
    """Per-replica trajectories, one panel per group."""
    a, axis = c.a, c.axis

    def draw(ax, g: str) -> None:
        for s in a.series:
            if s.group != g:
                continue
            for seg in s.segments or []:
                m = (s.t >= seg.start) & (s.t <= seg.end)
                other = s.verified is False or seg.group != g  # another or an unknown allocator: not the group's data
                ax.plot(
                    axis.x(s.t[m]),
                    s.mb[m],
                    lw=0.8,
                    color="black" if other else c.colors[g],
                    ls="--" if other else "-",
                    alpha=0.5 if other else 0.8,
                )

    return _group_panels(
        c,
        c.groups,
        draw,
        c.label,
        "Per-replica trajectories (black dashed: unverified or another/unknown allocator, excluded)",
    )


def idle_release_figure(c: _Ctx):
    """The share of its load level each replica no longer held at the end of idle (None: no idle data)."""
    a, groups = c.a, c.groups
    idle = {
        g: [
            r.idle_released_share
            for r in a.replicas
            if r.group == g and r.idle_released_share is not None and r.verified is not False
        ]
        for g in groups
    }
    if not any(idle.values()):
        return None
    fig, ax = c.plt.subplots(figsize=(max(6, 1.3 * len(groups) + 2), 4.5))
    for i, g in enumerate(groups):
        v = idle[g]
        if v:
            ax.bar(i, float(np.median(v)), color=c.colors[g], alpha=0.5, width=0.6)
            ax.scatter(i + c.rng.uniform(-0.12, 0.12, len(v)), v, color=c.colors[g], zorder=3, s=18)
    ax.set_xticks(range(len(groups)), groups, rotation=20)
    ax.axhline(0, color="black", lw=0.8)
    ax.yaxis.set_major_formatter(c.plt.FuncFormatter(lambda y, _: f"{y:.0%}"))
    ax.set_ylabel("no longer held at the end of idle (share of the load level)")
    ax.set_title("Idle release: bar = median, dots = replicas")
    ax.grid(alpha=0.3, axis="y")
    return fig


def fragmentation_figure(c: _Ctx):
    """Memory against live requested bytes, one panel per group (None: no workload reports them)."""
    a, axis = c.a, c.axis
    live_groups = [g for g in c.groups if any(has_values(s.live_mb) for s in a.series if s.group == g)]
    if not live_groups:
        return None

    def draw(ax, g: str) -> None:
        for s in a.series:
            if s.group == g and has_values(s.live_mb):
                x, y, live = thin(axis.x(s.t), s.mb, s.live_mb)
                ax.plot(x, y, color=c.colors[g], lw=0.9, alpha=0.8)
                ax.plot(x, live, color="black", lw=0.8, ls="--", alpha=0.6)

    return _group_panels(
        c,
        live_groups,
        draw,
        "MB",
        f"{a.metric.upper()} (solid) against live requested bytes (black dashed): the gap is allocator overhead",
    )


CHARTS = {
    "timeseries.png": timeseries_figure,
    "distribution.png": distribution_figure,
    "trajectories.png": trajectories_figure,
    "idle_release.png": idle_release_figure,
    "fragmentation.png": fragmentation_figure,
}


def draw_charts(report: ReportInput, out: Path) -> list[Path]:
    c = _Ctx(report)
    if c.axis is None:
        return []
    paths = []
    for name in CHART_FILES:
        fig = CHARTS[name](c)
        if fig is not None:
            paths.append(_save(c.plt, fig, out / name))
    return paths


def _save(plt, fig, path: Path) -> Path:
    """PATH is OUT_DIR/charts/NAME: written relative to OUT_DIR, never through a link."""
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, dpi=110, format="png")
    plt.close(fig)
    return write_output(path.parent.parent, f"{path.parent.name}/{path.name}", buf.getvalue())
