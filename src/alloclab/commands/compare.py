"""`alloclab compare RUN_A RUN_B`: run B against run A group by group (alloclab.analysis.two_runs)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from ..common import exitcodes
from ..common.errors import UserError
from ..experiment_file import METRICS
from ..store import Store, resolve_run
from .report import refuse_unrecorded_metric

# exit codes (alloclab.common.exitcodes, the one table): 0 shown within (or no gate), 2 bad input
EXIT_GATE_ABOVE = exitcodes.OUTCOME  # a group shown above the threshold
EXIT_GATE_INCONCLUSIVE = exitcodes.INCONCLUSIVE  # the data cannot tell, unless --allow-inconclusive
GATE_STYLE = {"gate PASSED": "bold green", "gate FAILED": "bold red", "gate INCONCLUSIVE": "bold yellow"}


def exit_code(outcome: str | None, allow_inconclusive: bool = False) -> int:
    """An undecided gate is never a silent green: exit 4 unless the caller allowed it (a CI page
    shows exit 0 as passed)."""
    if outcome == "above":
        return EXIT_GATE_ABOVE
    if outcome == "inconclusive" and not allow_inconclusive:
        return EXIT_GATE_INCONCLUSIVE
    return 0


def compare_command(
    run_a: Path,
    run_b: Path,
    by: str,
    metric: str | None,
    fail_on_increase: float | None,
    as_json: bool,
    console: Console,
    fail_on_inconclusive: bool = False,
    allow_inconclusive: bool = False,
) -> int:
    if metric and metric not in METRICS:
        raise UserError(f"--metric {metric!r} is not known", f"use one of: {', '.join(METRICS)}")
    for flag, on in (("--fail-on-inconclusive", fail_on_inconclusive), ("--allow-inconclusive", allow_inconclusive)):
        if on and fail_on_increase is None:
            raise UserError(f"{flag} needs a threshold", "add --fail-on-increase PCT, e.g. 5")
    if fail_on_inconclusive and allow_inconclusive:
        raise UserError(
            "--fail-on-inconclusive and --allow-inconclusive contradict each other",
            "drop --fail-on-inconclusive (failing on inconclusive is the default)",
        )
    for db in (resolve_run(run_a), resolve_run(run_b)):
        if metric:
            store = Store.open_checked(db)
            try:
                refuse_unrecorded_metric(store, metric)
            finally:
                store.close()
    from ..analysis import two_runs  # (here, once both paths are runs: the statistics take ~1 s to import)
    from ..reporters.two_runs import text_lines, to_json

    rc = two_runs.compare_runs(run_a, run_b, metric=metric, by=by, fail_on_increase=fail_on_increase)
    if as_json:
        print(to_json(rc))
    else:
        for line in text_lines(rc, width=console.width):
            style = next((v for k, v in GATE_STYLE.items() if line.startswith(k)), None)
            console.print(line, style=style, markup=False, highlight=False, soft_wrap=True)
    return exit_code(rc.gate_outcome, allow_inconclusive)
