"""alloclab's exit codes: the one table. Every verb's --help epilog, docs/reference/exit-codes.md
(alloclab.docsgen.reference) and the code that exits (cli.main, the commands returning a code) read it, so
a code's meaning is written once.

Codes common to every verb (COMMON) mean the same everywhere; 1 and 4 mean a verb's own outcome
("above", "not found", "a source gone"...), said per verb in VERB_OUTCOMES."""

from __future__ import annotations

from dataclasses import dataclass

OK = 0
OUTCOME = 1  # the verb's own negative outcome (a gate shown above, bisect not found...)
BAD_INPUT = 2  # bad input or an environment problem the user fixes (UserError); one line on stderr
CUT_SHORT = 3  # a full disk: the command was cut short, what it recorded so far is kept
INCONCLUSIVE = 4  # a gate the data cannot decide (unless --allow-inconclusive)
INTERNAL_ERROR = 70  # a fault in alloclab itself (sysexits' EX_SOFTWARE): not 1, 2 or 3
INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as a shell reports it)


@dataclass(frozen=True)
class ExitCode:
    code: int
    name: str  # the few words --help shows
    meaning: str  # the reference's sentence


COMMON = (
    ExitCode(OK, "done", "done"),
    ExitCode(
        BAD_INPUT,
        "bad input",
        "bad input or an environment problem you can fix; one line on stderr names it "
        "and the fix (a damaged store given to read too)",
    ),
    ExitCode(CUT_SHORT, "disk full (data so far kept)", "a full disk: cut short, what was recorded so far is kept"),
    ExitCode(
        INTERNAL_ERROR,
        "internal error (a fault in alloclab)",
        "a fault in alloclab, not in what you gave it (the traceback is kept in a file the message names)",
    ),
    ExitCode(INTERRUPTED, "interrupted", "interrupted (Ctrl-C); what was recorded is kept"),
)

# The verbs whose outcome has its own codes (1, 4), by command path; every other verb exits 0 when done.
VERB_OUTCOMES: dict[tuple[str, ...], dict[int, str]] = {
    ("compare",): {
        OK: "done (with --fail-on-increase: every group shown within the threshold, or inconclusive "
        "with --allow-inconclusive)",
        OUTCOME: "with --fail-on-increase: a group shown above the threshold",
        INCONCLUSIVE: "with --fail-on-increase: inconclusive (the data cannot tell)",
    },
    ("gate",): {
        OK: "shown within the threshold (or undecided with --allow-inconclusive)",
        OUTCOME: "shown above the threshold",
        INCONCLUSIVE: "undecided when the time ran out",
    },
    ("bisect",): {OK: "found", OUTCOME: "not found (a step undecided, or the bad end not shown bad)"},
    ("allocators", "check"): {OK: "no source gone", OUTCOME: "a source is gone (the catalog must follow its registry)"},
    ("fleet", "deploy"): {
        OK: "deployed (or shown, with --dry-run)",
        OUTCOME: "a guard tripped, or the canary failed against its peers: the deployed units were rolled back",
        INCONCLUSIVE: "held: the canary undecided against its peers by --max-settle (it stays; "
        "the other units are untouched)",
    },
}


def codes_for(path: tuple[str, ...]) -> list[ExitCode]:
    """The exit codes a verb can end with, in order, its own meanings replacing the common ones."""
    own = VERB_OUTCOMES.get(tuple(path), {})
    by_code = {c.code: c for c in COMMON}
    by_code.update({code: ExitCode(code, meaning, meaning) for code, meaning in own.items()})
    return [by_code[k] for k in sorted(by_code)]


def epilog(path: tuple[str, ...]) -> str:
    """A verb's --help epilog: its exit codes on one paragraph (click rewraps it)."""
    return (
        "Exit codes: " + "; ".join(f"{c.code} {c.name}" for c in codes_for(path)) + " (docs/reference/exit-codes.md)."
    )


def markdown_table() -> str:
    """docs/reference/exit-codes.md's body: the common codes, then each verb's own."""
    rows = ["| code | name | meaning |", "|---|---|---|"]
    rows += [f"| {c.code} | {c.name} | {c.meaning} |" for c in COMMON]
    own = ["| command | code | meaning |", "|---|---|---|"]
    for path, codes in VERB_OUTCOMES.items():
        own += [f"| `alloclab {' '.join(path)}` | {code} | {meaning} |" for code, meaning in sorted(codes.items())]
    return (
        "Every command ends with one of these codes:\n\n"
        + "\n".join(rows)
        + "\n\nThese commands give 0, 1 and 4 their own meaning (every other command exits 0 when done):\n\n"
        + "\n".join(own)
        + "\n"
    )
