"""bisect.md and bisect.png: a bisect's answer, its evidence step by step, and what changed.
(bisect.json, the same in data, is written by alloclab.studies.bisection after every step.)"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

UNIT = {"cpu_per_op": "CPU µs per operation"}
COLOURS = {"bad": "tab:red", "good": "tab:green", "undecided": "tab:gray", "interrupted": "tab:gray"}


def _f(x, spec=".3f") -> str:
    return "–" if x is None else format(x, spec)


def headline(res) -> str:
    ax = res.axis
    what = {"version": f"{ax.name} version", "tunable": f"{ax.name} value", "param": f"workload {ax.name}"}[ax.kind]
    if res.status == "found":
        untested = (
            ""
            if any(s.index == res.hi for s in res.steps)
            else " The bad end itself was not run (--no-check-bad): that it is bad is the user's word."
        )
        return (
            f"First bad {what}: **{res.first_bad}** (last good: {res.last_good}), after {len(res.steps)} of "
            f"{res.exhaustive_steps} possible steps.{untested}"
        )
    lo, hi = ax.values[res.lo], ax.values[res.hi]
    if res.status == "bad-end-not-bad":
        s = res.steps[-1]
        return (
            f"Not bisected: the bad end {s.value} was not shown above ×{res.threshold:g} the good end "
            f"({s.verdict}: {s.reason})."
        )
    return (
        f"Stopped {res.status}: the first bad {what} lies after {lo} and at or before {hi}; step at "
        f"{res.steps[-1].value} could not be decided ({res.steps[-1].reason}). Run it longer (--max-step) "
        f"or with more replicas, or raise the threshold."
    )


def write(res, out: Path) -> Path:
    unit = UNIT.get(res.metric, f"{res.metric.upper()} MB")
    chart = out / "bisect.png"
    draw(res, chart, unit)
    md = [
        f"# alloclab bisect: {res.axis.kind} {res.axis.name}",
        "",
        headline(res),
        "",
        f"Rule: a step is **bad** when candidate/good ({unit}, geometric means of the replicas' steady levels) is shown "
        f"above ×{res.threshold:g}, **good** when shown below it, by the sequential test of `run --until-significant` "
        "(Welch's t on log levels, alpha spent over looks at doublings of the elapsed time; each wrong call ≤ 5%); "
        "otherwise **undecided** at the step's maximum duration, and the search stops there.",
        "",
        "| step | value | verdict | ratio to good | adjusted p | looks | seconds | run |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for k, s in enumerate(res.steps, 1):
        md.append(
            f"| {k} | {s.value} | {s.verdict} | {_f(s.ratio)} | {_f(s.p, '.2g')} | {s.looks} | {s.elapsed_s:g} | "
            f"[{Path(s.run_dir).name}]({Path(s.run_dir).relative_to(out)}/report.md) |"
        )
    md += ["", f"![{unit} across the axis](bisect.png)", "", "## What changed", ""]
    ch = res.changed
    for side in ("before", "after"):
        d = ch.get(side, {})
        md.append(
            f"- {side}: {d.get('point', '–')}: {d.get('family') or ''} {d.get('version') or ''}".rstrip()
            + (f" ({d['error']})" if d.get("error") else "")
        )
    if ch.get("options_differing"):
        md += [
            "",
            "Options whose values the libraries report differently:",
            "",
            "| option | before | after |",
            "|---|---|---|",
        ]
        md += [
            f"| {o['option']} | {o['before'] or '(absent)'} | {o['after'] or '(absent)'} |"
            for o in ch["options_differing"]
        ]
    elif ch.get("options_reported"):
        md += ["", "The libraries report the same option values."]
    else:
        md += ["", "The libraries do not report their options."]
    path = out / "bisect.md"
    path.write_text("\n".join(md) + "\n")
    return path


def draw(res, path: Path, unit: str) -> None:
    values = list(res.axis.values)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(6, 0.9 * len(values) + 2), 6), sharex=True)
    for s in res.steps:
        colour = COLOURS.get(s.verdict, "tab:gray")
        top.scatter([s.index] * len(s.candidate_levels), s.candidate_levels, color=colour, s=18, zorder=3)
        top.scatter([0] * len(s.good_levels), s.good_levels, color="tab:blue", s=12, marker="x", alpha=0.6)
        if s.ratio is not None:
            bottom.scatter([s.index], [s.ratio], color=colour, s=40, zorder=3)
            bottom.annotate(s.verdict, (s.index, s.ratio), textcoords="offset points", xytext=(4, 4), fontsize=8)
    bottom.axhline(res.threshold, color="tab:red", linestyle="--", linewidth=1, label=f"threshold ×{res.threshold:g}")
    bottom.axhline(1.0, color="tab:blue", linewidth=0.8, label="good end")
    if res.first_bad is not None:
        for ax in (top, bottom):
            ax.axvspan(res.hi - 0.5, len(values) - 0.5, color="tab:red", alpha=0.07)
    top.set_ylabel(unit)
    top.set_title(f"bisect over {res.axis.name}: replicas per step (x: the good end beside each step)")
    bottom.set_ylabel("candidate / good")
    bottom.set_xticks(range(len(values)), values, rotation=30, ha="right")
    bottom.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
