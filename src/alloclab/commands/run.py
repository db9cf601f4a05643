"""`alloclab run`: run an experiment with a live progress display, then report."""
from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console, Group as RichGroup
from rich.live import Live
from rich.panel import Panel
from rich.table import Table

from .. import analysis, preflight, report
from ..config import Experiment, load_experiment, parse_duration
from ..runner import Runner


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600:d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class Progress:
    """Redrawn once per sampling tick from the main thread (no refresh thread: children are
    forked from this process, and forking next to other threads is unsafe)."""

    def __init__(self, console: Console, exp: Experiment, planned: float | None):
        self.console, self.exp, self.planned = console, exp, planned
        self.live = Live(console=console, auto_refresh=False, transient=False)

    def __enter__(self) -> "Progress":
        self.live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.live.__exit__(*exc)

    def tick(self, runner: Runner, elapsed: float, phase: str) -> None:
        alive = sum(r.alive for r in runner.replicas)
        remaining = f" / {_clock(self.planned)} (remaining {_clock(max(0, self.planned - elapsed))})" if self.planned else ""
        share = runner.budget.spent / max(elapsed, 1e-9)
        head = (f"[bold]{self.exp.name}[/bold]  phase [cyan]{phase}[/cyan]  elapsed {_clock(elapsed)}{remaining}  "
                f"replicas alive {alive}/{len(runner.replicas)}  smaps tier CPU {share:.1%} of a core")
        table = Table(box=None, pad_edge=False)
        for col in ("group", "allocator", "alive", f"median {self.exp.metric.upper()} MB", "verified"):
            table.add_column(col)
        for g in self.exp.groups:
            reps = [r for r in runner.replicas if r.group.name == g.name]
            vals = sorted(r.last_metric_kb for r in reps if r.last_metric_kb is not None)
            med = f"{vals[len(vals) // 2] / 1024:.1f}" if vals else "–"
            ver = sum(r.state is True for r in reps)
            bad = sum(r.state is False for r in reps)
            table.add_row(g.name, runner.specs[g.name].label, f"{sum(r.alive for r in reps)}/{len(reps)}", med,
                          f"{ver}/{len(reps)}" + (f" [red]{bad} unverified[/red]" if bad else ""))
        self.live.update(Panel(RichGroup(head, table), title="alloclab run"), refresh=True)


class SignificanceStop:
    """--until-significant: stop once the best group beats the baseline significantly and has
    stayed the best for `stable_for` seconds. Checked every `every` seconds."""

    def __init__(self, stable_for: float, every: float):
        self.stable_for, self.every = stable_for, every
        self.last_check = 0.0
        self.leader: str | None = None
        self.leader_since = 0.0

    def __call__(self, runner: Runner, elapsed: float) -> str | None:
        if elapsed - self.last_check < self.every:
            return None
        self.last_check = elapsed
        a = analysis.analyse(runner.store)
        usable = [g for g in a.groups if g.steady_mean_mb is not None and g.name != a.baseline
                  and g.comparison and g.comparison.significant and g.comparison.ratio is not None and g.comparison.ratio < 1]
        leader = min(usable, key=lambda g: g.steady_mean_mb).name if usable else None
        if leader != self.leader:
            self.leader, self.leader_since = leader, elapsed
            return None
        if leader and elapsed - self.leader_since >= self.stable_for:
            c = a.group(leader).comparison
            reason = (f"stopped early: {leader} significantly below baseline {a.baseline} "
                      f"({c.ratio:.2f}×, Holm p = {c.p_holm:.3g}) and the leader for {self.stable_for:g}s")
            runner.store.event(time.time(), "sequential_stop", reason)
            return reason
        return None


def run_command(experiment: Path, output: Path | None, until_significant: bool, max_duration: str | None,
                stable_for: str, no_report: bool, console: Console) -> int:
    exp = load_experiment(experiment)       # every bad input refused before anything is created
    preflight.check_output(output)
    preflight.check_load_command(exp)
    limit = parse_duration(max_duration, "--max-duration") if max_duration else None
    stop = None
    if until_significant:
        stable = parse_duration(stable_for, "--stable-for")
        stop = SignificanceStop(stable, every=max(10 * exp.interval, 5.0))
    runner = Runner(exp, output, stop_check=stop, max_duration=limit)
    planned = exp.phases.total
    if runner.max_duration is not None:
        planned = min(planned or runner.max_duration, runner.max_duration)
    err = Console(stderr=True)
    if runner.cgroup_note:
        err.print(f"[yellow]note[/yellow] {runner.cgroup_note}")
    with Progress(err, exp, planned) as progress:
        runner.on_tick = progress.tick
        result = runner.run()
    console.print(f"run ended: {result.end_reason}; data in {result.run_dir}")
    if not no_report:
        path, analysed = report.write_report(result.run_dir)
        report.print_summary(analysed, console)
        console.print(f"report: {path}")
    return 130 if result.interrupted else 0
