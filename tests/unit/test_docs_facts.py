"""Facts the user docs state that the code computes (issue 52, "docs and code agree by
construction"): option defaults, exit codes and the statistics' rule constants, read from the docs
and compared with click's declarations, alloclab.common.exitcodes and the RULES tables. The lab notebook
(docs/lab/) is a record, not a statement of today's facts; the generated reference has its own test
(test_reference.py)."""

from __future__ import annotations

import re
from pathlib import Path

import click

from alloclab.cli import app
from alloclab.common import exitcodes
from alloclab.common.errors import UserError
from alloclab.experiment_file import parse_duration
from alloclab.stats.rules import RULES as ANALYSIS_RULES, RULES as STATS_RULES

REPO = Path(__file__).parents[2]
GENERATED = {REPO / "docs/reference/cli.md", REPO / "docs/reference/exit-codes.md"}
DOCS = [
    p
    for p in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    if "lab" not in p.relative_to(REPO).parts and p not in GENERATED
]
UNITS = {
    "ms": "ms",
    "s": "s",
    "sec": "s",
    "seconds": "s",
    "second": "s",
    "m": "m",
    "min": "m",
    "minutes": "m",
    "minute": "m",
    "h": "h",
    "hours": "h",
    "hour": "h",
    "d": "d",
    "days": "d",
    "day": "d",
}


def _lines():
    """(file:line, paragraph) with each paragraph's lines joined: a fact broken over two lines is read whole."""
    for doc in DOCS:
        start, para = 1, []
        for n, line in enumerate([*doc.read_text().splitlines(), ""], 1):
            if line.strip():
                start, para = (n, [line]) if not para else (start, para + [line])
            elif para:
                yield f"{doc.relative_to(REPO)}:{start}", " ".join(para)
                para = []


def _seconds(text: str) -> float | None:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-z]+)?\s*", text)
    if not m or (m.group(2) and m.group(2) not in UNITS):
        return None
    try:
        return parse_duration(m.group(1) + UNITS.get(m.group(2) or "s", "s"), "doc")
    except UserError:
        return None


def _option_defaults() -> dict[str, set[str]]:
    """--name -> every default any verb gives it: click's, and a help text's "[...]" for the
    options whose default is decided later (fleet status --look-every [12h])."""
    out: dict[str, set[str]] = {}

    def walk(cmd):
        if isinstance(cmd, click.Group):
            for sub in cmd.commands.values():
                walk(sub)
            return
        for p in cmd.params:
            if isinstance(p, click.Option):
                found = out.setdefault(p.opts[-1], set())
                if isinstance(p.default, (str, int, float, Path)) and not p.is_flag:  # not click's "unset"
                    found.add(str(p.default))
                found.update(re.findall(r"\[([^\]]+)\]\.?\s*$", p.help or ""))

    walk(app)
    return out


# "`--settle` (default 60 s", "`--max-duration`, 5m by default", "`--look-every`, default 12 h"
DEFAULT_STATED = re.compile(
    r"`(--[a-z][a-z-]*)`[^`.;]{0,12}?(?:\(|,)\s*(?:default\s+`?([^,;)`]+?)`?\s*(?:[,;)]|$)|"
    r"`?([^,;)`\s]+(?:\s[a-z]+)?)`?\s+by default)"
)


# "`--by group`, the default", "`--rollback-scope all` (default)"
VALUE_DEFAULT_STATED = re.compile(r"`(--[a-z][a-z-]*) ([^`\s]+)`\s*(?:\(default\)|,? the default)")


def stated_defaults():
    for where, line in _lines():
        for m in DEFAULT_STATED.finditer(line):
            yield where, m.group(1), (m.group(2) or m.group(3)).strip()
        for m in VALUE_DEFAULT_STATED.finditer(line):
            yield where, m.group(1), m.group(2)


def test_the_docs_state_defaults_the_options_have():
    defaults, wrong, checked = _option_defaults(), [], 0
    for where, option, value in stated_defaults():
        if option not in defaults:
            wrong.append(f"{where}: {option} is no option of any verb")
            continue
        given = _seconds(value)
        have = {_seconds(d) for d in defaults[option]} if given is not None else set(defaults[option])
        checked += 1
        if (given if given is not None else value) not in have:
            wrong.append(f"{where}: {option} default {value!r}, the CLI's: {sorted(defaults[option]) or 'none'}")
    assert checked >= 6, "the pattern no longer finds the docs' stated defaults"
    assert not wrong, "\n".join(wrong)


EXIT_STATED = re.compile(r"\bexit(?:s| code| status)?\s+\**(\d+)\b", re.IGNORECASE)
NOT_ALLOCLAB = re.compile(r"native|replayer|`replay`|program exit|pthread", re.IGNORECASE)  # the C replayer's own codes


def test_every_exit_code_the_docs_name_is_in_the_table():
    known = {c.code for c in exitcodes.COMMON} | {k for v in exitcodes.VERB_OUTCOMES.values() for k in v}
    wrong, seen = [], 0
    for where, line in _lines():
        if NOT_ALLOCLAB.search(line):
            continue
        for m in EXIT_STATED.finditer(line):
            seen += 1
            if int(m.group(1)) not in known:
                wrong.append(f"{where}: exit {m.group(1)} is not in alloclab.common.exitcodes")
    assert seen >= 10
    assert not wrong, "\n".join(wrong)


def _exit_code_passages():
    """(file, verb, codes listed) of each "Exit codes: **0** ..., **1** ..." passage of a how-to
    about one verb (docs/how-to/compare.md: compare)."""
    for doc in DOCS:
        text = doc.read_text()
        for m in re.finditer(r"Exit codes:(.*?)(?:\n\n|$)", text, re.S):
            verb = {"compare.md": ("compare",)}.get(doc.name)
            if verb:
                yield doc.relative_to(REPO), verb, {int(c) for c in re.findall(r"\*\*(\d+)\*\*", m.group(1))}


def test_a_verbs_exit_code_list_in_the_docs_is_the_tables():
    passages = list(_exit_code_passages())
    assert passages
    wrong = [
        f"{doc}: lists {sorted(listed)}, the table: {sorted(c.code for c in exitcodes.codes_for(verb))}"
        for doc, verb, listed in passages
        if listed != {c.code for c in exitcodes.codes_for(verb)}
    ]
    assert not wrong, "\n".join(wrong)


# "`rate_min_window_s` = 6 h", "`release_min_mb` = 1"
RULE_STATED = re.compile(r"`([a-z_]+)`\s*=\s*([\d.]+)\s*([a-zA-Z%]+)?")


def test_rule_constants_the_docs_state_are_the_rules():
    rules = {**ANALYSIS_RULES, **STATS_RULES}
    wrong, checked = [], 0
    for where, line in _lines():
        for name, number, unit in RULE_STATED.findall(line):
            if name not in rules:
                continue
            value = float(number)
            if unit in UNITS and name.endswith("_s"):
                value = parse_duration(f"{number}{UNITS[unit]}", name)
            elif unit in UNITS and name.endswith("_h"):
                value = parse_duration(f"{number}{UNITS[unit]}", name) / 3600
            elif unit == "%":
                value /= 100
            checked += 1
            if abs(value - float(rules[name])) > 1e-9 * max(1.0, abs(value)):
                wrong.append(f"{where}: {name} = {number}{unit or ''}, the code's: {rules[name]}")
    assert checked >= 2, "the pattern no longer finds the docs' rule constants"
    assert not wrong, "\n".join(wrong)


def test_the_release_event_threshold_the_method_page_states():
    """docs/method/index.md: a release event is a drop of at least max(1 MB, 1% of the steady level)."""
    text = " ".join((REPO / "docs/method/index.md").read_text().split())
    m = re.search(r"drops of at least max\((\d+(?:\.\d+)?) MB, (\d+(?:\.\d+)?)% of the steady level\)", text)
    assert m, "the method page no longer states the release-event threshold this way: update this test"
    assert (float(m.group(1)), float(m.group(2)) / 100) == (
        ANALYSIS_RULES["release_min_mb"],
        ANALYSIS_RULES["release_min_share"],
    )
