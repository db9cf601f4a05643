"""`alloclab fleet status RUN`: one line per comparison — decided (which way), or undecided and
when a decision is expected (the rule: alloclab/fleet/decision.py)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from ..common.errors import UserError
from ..common.timefmt import utc
from ..experiment_file import parse_duration
from ..fleet import decision, tested
from ..store import Store, resolve_run
from .conventions import emit_json


def look_plan(look_every: str | None, horizon: str | None, settle: str | None) -> decision.LookPlan:
    """The options over LookPlan's defaults (the one place they are defined)."""
    given = {
        "every_s": parse_duration(look_every, "--look-every") if look_every else None,
        "horizon_s": parse_duration(horizon, "--horizon") if horizon else None,
        "settle_s": parse_duration(settle, "--settle") if settle else None,
    }
    plan = decision.LookPlan(**{k: v for k, v in given.items() if v is not None})
    if plan.every_s > plan.horizon_s:
        raise UserError(
            f"--look-every ({plan.every_s / 3600:g} h) is longer than --horizon ({plan.horizon_s / 3600:g} h)",
            "give a horizon of at least one look",
        )
    return plan


def status_command(
    run_dir: Path, look_every: str | None, horizon: str | None, settle: str | None, as_json: bool, console: Console
) -> None:
    plan = look_plan(look_every, horizon, settle)
    store = Store.open_checked(resolve_run(run_dir))
    try:
        st = decision.run_status(store, plan)
        groups = tested.group_records(store)
    finally:
        store.close()
    if as_json:  # with each group as tested: `fleet deploy --from-run` takes this file where the run is not
        emit_json({"run": str(run_dir.resolve()), **st.as_dict(), "groups": groups})
        return
    since = f" since {utc(st.started_at, minutes=True)}" if st.started_at else ""
    console.print(
        f"{run_dir}: day {st.elapsed_s / decision.DAY:.1f}{since}, {st.looks_done} of {len(plan.times())} looks "
        f"(every {plan.every_s / 3600:g} h, false-decision rate ≤ {plan.alpha:g} however often you look)",
        highlight=False,
    )
    for c in st.comparisons:
        console.print("  " + decision.status_line(c, plan, st.started_at), highlight=False, soft_wrap=True)
    rec = st.recommended
    console.print(
        f"recommended: {rec} (deploy it with: alloclab fleet deploy --from-run {run_dir})"
        if rec
        else "recommended: none yet (undecided)",
        highlight=False,
        soft_wrap=True,
    )
