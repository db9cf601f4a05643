"""The text and the JSON of `alloclab compare` (analysis.two_runs.compare_runs: two runs side by side):
text_lines for a terminal or a CI log (the table of groups, what changed between the runs, every
warning, the gate's outcome last), to_json the --json document (RunComparison.as_dict).
"""

from __future__ import annotations

import json
import re
import textwrap

from .. import stats
from ..analysis.two_runs import RunComparison


def _ratio(c: stats.Comparison) -> str:
    if c.ratio is None:
        return "–"
    if c.ratio_ci is None:
        return f"{c.ratio:.3f}×"
    return f"{c.ratio:.3f}× [{c.ratio_ci[0]:.3f}–{c.ratio_ci[1]:.3f}] at {c.ci_level:.1%}"


def _shown(v) -> str | None:
    return None if v is None else v if isinstance(v, str) else json.dumps(v, separators=(", ", ": "))


def _short(v: str | None, other: str | None, width: int = 70) -> str:
    """v cut to about width around where it first differs from `other` (long commands differ late),
    at token boundaries (an argv element is shown whole or not at all), "…" where cut; a single
    token longer than the width is cut inside, as nothing else can show the difference."""
    if v is None:
        return "(none)"
    if len(v) <= width:
        return v
    same = next((i for i, (x, y) in enumerate(zip(v, other or "")) if x != y), min(len(v), len(other or "")))
    start = max(0, min(same - width // 3, len(v) - width))
    end = start + width
    tokens = [m.span() for m in re.finditer(r"\S+", v)]
    differing = next((t for t in tokens if t[1] > same), tokens[-1] if tokens else (0, len(v)))
    if differing[1] - differing[0] <= width:
        # whole tokens only, the differing one among them: from the first starting in the window
        # (slid right when the differing token would end past it), up to the last ending by its end
        at_least = max(start, differing[1] - width)
        start = min(next((b for b, _ in tokens if b >= at_least), differing[0]), differing[0])
        end = max(e for b, e in tokens if b >= start and e <= start + width)
    return ("…" if start else "") + v[start:end] + ("…" if end < len(v) else "")


def _wrap(line: str, width: int, indent: str = "") -> list[str]:
    """One line wrapped at word boundaries (never inside a word or a number), continuation lines
    indented; a word longer than the width stays whole on its own line."""
    lead = line[: len(line) - len(line.lstrip())]
    return textwrap.wrap(
        line,
        width,
        initial_indent="",
        subsequent_indent=lead + indent,
        break_long_words=False,
        break_on_hyphens=False,
        drop_whitespace=True,
    ) or [""]


def _warning_lines(rc: RunComparison) -> list[str]:
    out = [f"  comparison, {w.severity} {w.kind}: {w.message}" for w in rc.warnings]
    for g in rc.groups:
        out += [f"  comparison, {g.key}: {n}" for n in g.comparison.notes]
    for which, ws in (("A", rc.warnings_a), ("B", rc.warnings_b)):
        out += [f"  run {which}, {w.severity} {w.kind}: {w.message}" for w in ws]
    return out


def _gate_lines(rc: RunComparison) -> list[str]:
    pct = rc.fail_on_increase
    out = [f"gate per group (--fail-on-increase {pct:g}: limit {1 + pct / 100:g}× of run A):"]
    for g in rc.groups:
        r = g.gate
        det = (
            ""
            if r.detectable_pct is None
            else f"; smallest increase these replicas would show above the limit (80% power): {r.detectable_pct:+.1f}%"
        )
        out.append(f"  {g.key}: {r.outcome}: {r.reason}{det}")
    limit = 1 + pct / 100
    outcome = rc.gate_outcome
    if outcome == "above":
        head = f"gate FAILED (--fail-on-increase {pct:g}): shown above {limit:g}× in " + ", ".join(
            g.key for g in rc.failed
        )
    elif outcome == "within":
        head = f"gate PASSED (--fail-on-increase {pct:g}): every group shown within {limit:g}× of run A"
    elif rc.gate_held:
        head = (
            f"gate INCONCLUSIVE (--fail-on-increase {pct:g}): the intervals alone say {rc.gate_raw}, but "
            + "; ".join(f"{w.kind}: {w.message}" for w in rc.gate_held)
        )
    elif not rc.groups:  # nothing was tested: more replicas would not settle it
        head = (
            f"gate INCONCLUSIVE (--fail-on-increase {pct:g}): no group of run A matches a group of run B "
            f"(--by {rc.by}), so none was gated; compare runs of the same groups"
            + (", or match them with --by allocator" if rc.by == "group" else ", or match them by name with --by group")
        )
    else:
        which = ", ".join(g.key for g in rc.inconclusive)
        head = (
            f"gate INCONCLUSIVE (--fail-on-increase {pct:g}): the data cannot tell whether {which} rose by more "
            f"than {pct:g}%; more replicas or longer runs would settle it"
        )
    return out + [head]


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]


def text_lines(rc: RunComparison, width: int = 100, *, wrap: bool = True) -> list[str]:
    """The comparison for a terminal or a CI log: plain text that fits `width` columns (the table
    becomes one block per group when it would not), every warning of both runs and of the
    comparison, and the gate's outcome last (wrap=False: the same lines unwrapped)."""
    out = [
        f"A: {rc.a.path} ({rc.a.name})",
        f"B: {rc.b.path} ({rc.b.name})",
        f"metric {rc.a.metric.upper()}, groups matched by {rc.by}. Level = {rc.basis}, as `report` states it "
        f"(mean of the replica levels). Ratio B/A = ratio of geometric means of the replica levels; replicas "
        f"are the units: Welch's t on log levels, Holm across {len(rc.groups)} group(s), intervals at each "
        f"group's Holm level.",
        "",
    ]
    head = ("group", "level A MB", "level B MB", "ratio B/A [interval]", "p (Holm)", "verdict")
    rows = []
    for g in rc.groups:
        c = g.comparison
        rows.append(
            (
                g.key if g.group_a == g.group_b == g.key else f"{g.key} ({g.group_a} → {g.group_b})",
                f"{g.level_a_mb:.1f} (n={g.n_a})" if g.level_a_mb is not None else f"– (n={g.n_a})",
                f"{g.level_b_mb:.1f} (n={g.n_b})" if g.level_b_mb is not None else f"– (n={g.n_b})",
                _ratio(c),
                "–" if c.p_adj is None else f"{c.p_adj:.2g}",
                g.verdict + (f" — gate: {g.gate.outcome}" if g.gate else ""),
            )
        )
    table = _table([head] + rows)
    if max(map(len, table)) <= width:
        out += table
    else:
        for r in rows:
            out += [
                r[0],
                f"  level A {r[1].replace(' (', ' MB (', 1)} → level B {r[2].replace(' (', ' MB (', 1)}",
                f"  ratio B/A {r[3]}",
                f"  p (Holm) {r[4]}: {r[5]}",
            ]
    out.append("")
    changed = [g for g in rc.groups if g.comparison.significant]
    if not changed:
        out.append("no significant change in any matched group")
    else:
        out.append(
            "significant change: "
            + ", ".join(
                f"{g.key} {g.comparison.ratio:.3f}× ({'higher' if g.comparison.ratio > 1 else 'lower'})"
                for g in changed
            )
        )
    if rc.only_a:
        out.append(f"only in A: {', '.join(rc.only_a)}")
    if rc.only_b:
        out.append(f"only in B: {', '.join(rc.only_b)}")
    for n in rc.notes:
        out.append(f"note: {n}")
    out.append("")
    if rc.changes:
        out.append("what changed between the runs:")
        shown = [(c, _shown(c.a), _shown(c.b)) for c in rc.changes]
        out += [
            f"  {c.scope}: {c.field.removesuffix('_json')}: {_short(a, b, max(20, width // 2 - 12))} → "
            f"{_short(b, a, max(20, width // 2 - 12))}"
            for c, a, b in shown
        ]
    else:
        out.append("provenance: nothing changed (allocators, library hashes, host, kernel, glibc, CPU, alloclab)")
    if rc.experiment_diff:
        out.append("experiment file differs:")
        out += ["  " + ln for ln in rc.experiment_diff]
    else:
        out.append("experiment file: identical")
    warns = _warning_lines(rc)
    out.append("")
    out += ([f"warnings ({len(warns)}):"] + warns) if warns else ["warnings: none (neither run nor the comparison)"]
    if rc.fail_on_increase is not None:
        out.append("")
        out += _gate_lines(rc)
    wrapped = []
    for ln in out:
        wrapped += _wrap(ln, width, "    ") if wrap and len(ln) > width else [ln]
    return wrapped


def to_json(rc: RunComparison) -> str:
    return json.dumps(rc.as_dict(), indent=2)
