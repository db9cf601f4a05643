"""Scenarios: a built-in setting the replicas run in (so far one: the Tor test network, alloclab.tor.network).

A scenario provides the replicas' command and their load, and may run supporting processes that
the runner starts, owns and stops with the replicas. The runner and preflight know a scenario only
through `Scenario`; `of(exp)` is the one place a scenario's name ([scenario] name, experiment_file.SCENARIOS)
picks its module.

The calls, in order:
  prepare(resolve)    preflight (`alloclab check` too), before anything is created: refuse what cannot work
  command(group)      a replica's command template
  load_command()      a replica's load client (None: the experiment's [load] command)
  setup(run)          the store exists, no replica has started: build the setting, start the supporting
                      processes, wait until they are ready; a reason to stop, or None to start the replicas
  tick(run, now)      every sampling tick, inside its transaction
  holds_warmup(run, elapsed, now)  at the warm-up's planned end (and each tick after): whether the
                      setting is not ready for the load yet; the later phases move on by as much
  teardown()          every process of the run has been stopped
  finish(run, now)    inside the transaction recording the run's end: what the scenario measured
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from ..common.errors import UserError
from ..experiment_file import Experiment, Group


class Run(Protocol):
    """What a scenario may use of the run it is part of (the runner)."""

    exp: Experiment
    run_dir: Path
    store: Any  # its store.Store (not imported: preflight, before the store, loads this module)
    replicas: list  # runner.Replica: name, group, port, workdir, log_dir, id
    started_wall: float  # when the replicas started (Unix seconds)
    stop_reason: str | None  # set when the run is asked to stop (a signal)
    on_setup: Callable[[str], None]  # progress while the scenario sets up

    def start_support(self, argv: list[str], cwd: Path, stdout: Path, stderr: Path) -> subprocess.Popen:
        """A supporting process, owned like a replica (run token, parent-death signal, watchdog)."""

    def reap_children(self) -> None:
        """Reap what exited of the run's own children (call while waiting)."""


class Scenario(Protocol):
    def prepare(self, resolve: Callable[[str], str]) -> None:
        """Refuse what cannot work (UserError), before anything is created; `resolve` finds a program."""

    def command(self, group: Group) -> tuple[str, ...]:
        """A replica's command template (placeholders as in an experiment file's command)."""

    def load_command(self) -> tuple[str, ...] | None:
        """A replica's load client's command template (None: the experiment's [load] command)."""

    def has_load(self, replica) -> bool:
        """Whether this replica gets a load client."""

    def setup(self, run: Run) -> str | None:
        """Start the supporting processes and wait for them; a reason to stop, or None."""

    def tick(self, run: Run, now: float) -> None:
        """One sampling tick (inside its transaction)."""

    def holds_warmup(self, run: Run, elapsed: float, now: float) -> bool:
        """Whether the warm-up goes on past its planned end (the setting is not ready for the load)."""

    def teardown(self) -> None:
        """After every process of the run was stopped."""

    def finish(self, run: Run, now: float) -> None:
        """Record what the scenario measured (inside the transaction recording the run's end)."""

    def progress_column(self, replicas_by_group: dict[str, list]) -> tuple[str, dict[str, str]] | None:
        """An extra column of the run's progress table: its header and each group's cell, or None."""

    def failure(self, run_dir: Path) -> UserError | None:
        """Why the run ended before its replicas started, as the one line `run` prints, or None."""


def of(exp: Experiment) -> Scenario | None:
    """The scenario an experiment names, or None for a plain run."""
    if exp.scenario is None:
        return None
    if exp.scenario.name == "tor-network":
        from ..tor.network import TorScenario

        return TorScenario(exp)
    raise ValueError(f"no scenario named {exp.scenario.name!r}")  # experiment_file refuses unknown names first
