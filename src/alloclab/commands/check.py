"""`alloclab check`: an experiment file checked as `run` checks it, nothing created."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.text import Text

from ..experiment_file import is_fleet_groups, load_experiment
from ..run import preflight
from .conventions import emit_json


def check_command(experiment: Path, console: Console, as_json: bool = False) -> int:
    exp = load_experiment(experiment, fleet=True)  # a file without a command is a fleet groups file
    if is_fleet_groups(exp):
        return check_fleet_groups(experiment, console, as_json)
    exp = load_experiment(experiment)  # as `run` reads it (its "no command to run" included)
    specs = preflight.prepare(exp).specs
    preflight.check_load_command(exp)
    # (here, once the file passed: the statistics' imports take ~0.8 s a bad file need not wait for)
    from ..analysis.design import planned_warnings, steady_allowance
    from ..stats.rules import RULES

    planned = exp.planned_duration()
    length = f"{planned:g}s planned" if planned is not None else "until the replicas exit"
    warnings = planned_warnings(exp)
    a = steady_allowance(exp)
    if as_json:
        emit_json(
            {
                "ok": True,
                "file": str(experiment),
                "name": exp.name,
                "kind": "experiment",
                "groups": [{"name": g.name, "allocator": g.allocator, "kind": specs[g.name].kind} for g in exp.groups],
                "replicas": exp.replicas,
                "interval_s": exp.interval,
                "planned_s": planned,
                "steady_allowance": asdict(a) if a is not None else None,
                "needs": {"min_samples": RULES["min_samples"], "min_window_s": RULES["min_window_s"]},
                "warnings": [w.as_dict() for w in warnings],
            }
        )
        return 0
    serious = [w for w in warnings if w.severity != "info"]
    notes = len(warnings) - len(serious)
    said = [f"{len(serious)} warning{'s' * (len(serious) > 1)}"] * bool(serious) + [
        f"{notes} note{'s' * (notes > 1)}"
    ] * bool(notes)
    verdict = "ok" if not warnings else f"ok, with {' and '.join(said)} (below)"
    console.print(
        f"{verdict}: {exp.name}: {len(exp.groups)} groups ({', '.join(f'{g.name}={specs[g.name].kind}' for g in exp.groups)}) "
        f"x {exp.replicas} replicas, sampled every {exp.interval:g}s, {length}",
        highlight=False,
    )
    if a is not None:
        samples = a.samples_most if a.samples_most == a.samples_least else f"{a.samples_least}–{a.samples_most}"
        window = (
            f"{a.window_most_s:g}" if a.samples_most == a.samples_least else f"{a.window_least_s:g}–{a.window_most_s:g}"
        )
        console.print(
            f"steady samples per replica the phases allow: {samples} over {window}s (the status rules need "
            f"{RULES['min_samples']:g} over at least {RULES['min_window_s']:g}s)",
            highlight=False,
        )
    # every warning `run` would print before it starts, on the same stream
    print_planned_warnings(warnings, Console(stderr=True))
    return 0


def print_planned_warnings(warnings, console: Console) -> None:
    """The planned warnings as `check` and `run` print them: cautions as warnings, info as notes."""
    for w in warnings:
        label = ("note", "dim") if w.severity == "info" else ("warning", "yellow")
        console.print(Text.assemble(label, f" {w.kind}: {w.message}"), highlight=False)  # no markup in messages


def check_fleet_groups(groups_file: Path, console: Console, as_json: bool = False) -> int:
    """A fleet groups file checked as `fleet plan` reads it on a controller: every group's library
    resolved (a catalog id built if it is not yet, as `run` would; a path must exist and be a
    preloadable allocator), tunables checked; what each host must hold is said."""
    from ..fleet.plan import plan_groups

    exp, groups = plan_groups(groups_file, for_hosts=True)
    if as_json:
        emit_json({"ok": True, "file": str(groups_file), "name": exp.name, "kind": "fleet groups", "groups": groups})
        return 0
    kinds = ", ".join(f"{g['name']}={g['kind']}" for g in groups)
    console.print(
        f"ok: {exp.name}: fleet groups file (no command: the services already run), {len(groups)} groups ({kinds})",
        highlight=False,
    )
    for g in groups:
        if not g["library"]:
            where = "no library (glibc)"
        elif "@" in g["allocator"] and "/" not in g["allocator"]:
            where = (
                f"{g['library']} on every host, from its .deb (alloclab allocators package {g['allocator']}; "
                "the Ansible role installs it)"
            )
        else:
            where = (
                f"{g['library']} must be on every host byte for byte (sha256 {g['sha256'][:12]}…: the same package "
                "version as here, or copied by the Ansible role: alloclab_libraries)"
            )
        env = "".join(f" {k}={v}" for k, v in g["env"].items())
        console.print(f"  {g['name']}: {where}{env}", highlight=False, soft_wrap=True)
    return 0
