"""sweep.md, sweep.json and pareto.png: memory against CPU per operation (or throughput) for
every setting of a sweep, and the settings on the Pareto front named.

Both axes are ratios to the baseline group of the point's own batch (each batch ran the same
baseline side by side), so points of different batches are comparable. The front is taken on the
point estimates — a description, not a test: each point carries its intervals against the
baseline (Welch on log levels, Holm within its batch: the run report's calibrated comparison), and
the report says which front points are shown different from the baseline at all.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def pareto_front(xy: list[tuple[float, float]]) -> set[int]:
    """Indices of the points no other point is at least as good as on both axes (lower is better
    on both) and strictly better on one."""
    front = set()
    for i, (x, y) in enumerate(xy):
        if not any((xj <= x and yj <= y) and (xj < x or yj < y) for j, (xj, yj) in enumerate(xy) if j != i):
            front.add(i)
    return front


def cost_axis(points) -> tuple[str, list[float | None]]:
    """CPU per operation (ratio) where every point has it, else 1/throughput (ratio), else none."""
    if all(p.cpu_ratio for p in points):
        return "CPU per operation × baseline", [p.cpu_ratio for p in points]
    if all(p.ops_ratio for p in points):
        return "1 / throughput × baseline", [1 / p.ops_ratio for p in points]
    return "", [None for _ in points]


def mark_front(res) -> str:
    label, cost = cost_axis(res.points)
    mem = [p.memory_ratio for p in res.points]
    usable = [i for i, (m, c) in enumerate(zip(mem, cost)) if m is not None and (c is not None or not label)]
    xy = [(cost[i] if label else 0.0, mem[i]) for i in usable]
    for k in pareto_front(xy):
        res.points[usable[k]].on_front = True
    return label


def _ci(ci) -> str:
    return f"[{ci[0]:.2f}–{ci[1]:.2f}]" if ci else ""


def _f(x, spec=".2f") -> str:
    return "–" if x is None else format(x, spec)


def _shown(ratio, p) -> str:
    if ratio == 1.0 and p is None:
        return "baseline"
    if p is None or ratio is None:
        return "untested"
    if p >= 0.05:
        return "not shown different"
    return "lower" if ratio < 1 else "higher"


def write(res, out: Path) -> Path:
    label = mark_front(res)
    (out / "sweep.json").write_text(json.dumps({**res.as_dict(), "cost_axis": label}, indent=2, default=str))
    draw(res, out / "pareto.png", label)
    metric = res.metric.upper()
    front = [p for p in res.points if p.on_front]
    md = [
        f"# alloclab sweep: {res.name}",
        "",
        f"{len(res.points)} settings in {len(res.batch_dirs)} batch(es) of at most {res.limit} groups "
        f"({res.limit_basis}); every batch ran the baseline **{res.baseline}** beside its settings.",
        "",
    ]
    if label:
        md += [
            f"**Pareto front** ({metric} × baseline against {label}; lower is better on both): "
            + "; ".join(
                f"**{p.label}** ({metric} ×{_f(p.memory_ratio)} {_ci(p.memory_ci)}, {_shown(p.memory_ratio, p.memory_p)}; "
                f"CPU/op ×{_f(p.cpu_ratio)} {_ci(p.cpu_ci)}, {_shown(p.cpu_ratio, p.cpu_p)})"
                for p in front
            ),
            "",
        ]
    else:
        md += [
            f"No operation counter in this workload: CPU per operation and throughput are unknown, so the front is "
            f"on {metric} alone: " + ", ".join(f"**{p.label}**" for p in front),
            "",
        ]
    md += [
        "The front is taken on point estimates; intervals are 95% family-wise within each batch (Welch's t on log "
        'levels, Holm), as in the run reports. "not shown different" means the data cannot tell the setting from '
        "the baseline.",
        "",
        f"| setting | batch | {metric} MB | {metric} × baseline | CPU µs/op | CPU/op × baseline | ops/s | status | front |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in sorted(res.points, key=lambda p: (p.memory_ratio is None, p.memory_ratio or 0)):
        md.append(
            f"| {p.label}{' (baseline)' if p.is_baseline else ''} | {p.batch} | {_f(p.memory_mb, '.1f')} | "
            f"{_f(p.memory_ratio)} {_ci(p.memory_ci)} | {_f(p.cpu_us_per_op, '.3f')} | {_f(p.cpu_ratio)} {_ci(p.cpu_ci)} | "
            f"{_f(p.ops_per_s, ',.0f')} | {p.status} | {'yes' if p.on_front else ''} |"
        )
    warned = {b: w for b, w in res.warnings.items() if w}
    if warned:
        md += ["", "Warnings of the batches' runs (see their reports):", ""]
        md += [f"- {b}: {w}" for b, ws in warned.items() for w in ws]
    md += [
        "",
        "![Pareto front](pareto.png)",
        "",
        "Batches (each a normal run with its report): "
        + ", ".join(f"[{Path(d).name}]({Path(d).relative_to(out)}/report.md)" for d in res.batch_dirs),
    ]
    path = out / "sweep.md"
    path.write_text("\n".join(md) + "\n")
    return path


def draw(res, path: Path, label: str) -> None:
    fig, ax = plt.subplots(figsize=(8, 6))
    _, cost = cost_axis(res.points)
    for p, c in zip(res.points, cost):
        if p.memory_ratio is None:
            continue
        x = c if label else 0.0
        colour = "tab:red" if p.on_front else "tab:gray"
        yerr = [[p.memory_ratio - p.memory_ci[0]], [p.memory_ci[1] - p.memory_ratio]] if p.memory_ci else None
        xerr = [[x - p.cpu_ci[0]], [p.cpu_ci[1] - x]] if p.cpu_ci and label.startswith("CPU") else None
        ax.errorbar(
            [x], [p.memory_ratio], yerr=yerr, xerr=xerr, fmt="o", color=colour, ecolor=colour, alpha=0.8, capsize=2
        )
        if p.on_front or p.is_baseline:
            ax.annotate(
                p.label + (" (baseline)" if p.is_baseline else ""),
                (x, p.memory_ratio),
                textcoords="offset points",
                xytext=(5, 5),
                fontsize=8,
            )
    front = sorted((c if label else 0.0, p.memory_ratio) for p, c in zip(res.points, cost) if p.on_front)
    if len(front) > 1:
        ax.plot(*zip(*front), color="tab:red", linewidth=1, linestyle="--", label="Pareto front")
        ax.legend(fontsize=8)
    ax.margins(0.2)
    ax.set_xlabel(label or "(no operation counter)")
    ax.set_ylabel(f"{res.metric.upper()} × baseline")
    ax.set_title(f"sweep {res.name}: memory against CPU (95% intervals vs the batch's baseline)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
