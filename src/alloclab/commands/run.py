"""`alloclab run`: run an experiment with a live progress display, then report.

analysis, report and stats load scipy and matplotlib (about a second): they are imported inside the
functions that need them, so a bad experiment file is refused before any of that is loaded."""

from __future__ import annotations

import socket
import time
from dataclasses import replace
from pathlib import Path

from rich.console import Console, Group as RichGroup
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ..common import exitcodes
from ..common.errors import UserError
from ..experiment_file import Experiment, load_experiment, parse_duration
from ..run import preflight
from ..run.runner import Runner, resume
from ..serve import metrics
from ..store import Store
from .conventions import emit_json

EXIT_CUT_SHORT = (
    exitcodes.CUT_SHORT
)  # the run could not go on (disk full); its data so far is kept (docs/reference/store.md)


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600:d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


LIVE_LINGER_S = 2.5  # the live view stays up this long after the report is written
PLAIN_PROGRESS_EVERY_S = 60.0  # not a terminal (CI log): one line this often, and at each phase change


def phase_left(exp: Experiment, elapsed: float, phase: str, planned: float | None) -> float | None:
    """Seconds left in the current phase (None: the load runs until the replicas exit)."""
    p = exp.phases
    ends = {
        "warmup": p.warmup,
        "load": None if p.load is None else p.warmup + p.load,
        "idle": None if p.total is None else p.total,
    }
    end = ends.get(phase)
    if end is None:
        return None
    if planned is not None:
        end = min(end, planned)
    return max(0.0, end - elapsed)


class Progress:
    """Redrawn once per sampling tick from the main thread (no refresh thread: children are
    forked from this process, and forking next to other threads is unsafe). In a terminal: a bar
    with the phase and the time left, and the group table narrowed to the width as `report` does
    (secondary columns dropped first, nothing wraps inside a number). Elsewhere (a CI log): one
    plain line per minute and at each phase change, so the log shows the run going on."""

    def __init__(self, console: Console, exp: Experiment, planned: float | None):
        self.console, self.exp, self.planned = console, exp, planned
        self.interactive = console.is_terminal
        self.live = Live(console=console, auto_refresh=False, transient=False) if self.interactive else None
        self.last_line_at, self.last_phase = -PLAIN_PROGRESS_EVERY_S, None

    def __enter__(self) -> Progress:
        if self.live is not None:
            self.live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)

    def _times(self, elapsed: float, phase: str) -> str:
        left = phase_left(self.exp, elapsed, phase, self.planned)
        total = f" / {_clock(self.planned)}, {_clock(max(0, self.planned - elapsed))} left" if self.planned else ""
        return f"{_clock(elapsed)}{total}" + (
            f" ({phase} ends in {_clock(left)})" if left is not None and left >= 1 else ""
        )

    def _medians(self, runner: Runner) -> dict[str, str]:
        out = {}
        for g in self.exp.groups:
            vals = sorted(
                r.last_metric_kb for r in runner.replicas if r.group.name == g.name and r.last_metric_kb is not None
            )
            out[g.name] = f"{vals[len(vals) // 2] / 1024:.1f}" if vals else "–"
        return out

    def tick(self, runner: Runner, elapsed: float, phase: str) -> None:
        if runner.phases is not self.exp.phases or runner.planned != self.planned:  # a held warm-up, or a deadline
            self.exp, self.planned = replace(self.exp, phases=runner.phases), runner.planned
        alive = sum(r.alive for r in runner.replicas)
        if not self.interactive:
            if elapsed - self.last_line_at < PLAIN_PROGRESS_EVERY_S and phase == self.last_phase:
                return
            self.last_line_at, self.last_phase = elapsed, phase
            share = f" {min(1.0, elapsed / self.planned):.0%}" if self.planned else ""
            medians = ", ".join(f"{k} {v} MB" for k, v in self._medians(runner).items())
            self.console.print(
                f"alloclab run {self.exp.name}: {phase}{share}, {self._times(elapsed, phase)}; replicas "
                f"alive {alive}/{len(runner.replicas)}; median {self.exp.metric.upper()}: {medians}",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
            return
        from rich.progress_bar import ProgressBar

        width = self.console.width
        label = Text.assemble((phase, "bold cyan"), f" {self._times(elapsed, phase)}", overflow="fold")
        done = min(elapsed, self.planned) if self.planned else 0
        room = width - len(label.plain) - 1
        bar = ProgressBar(
            total=self.planned,
            completed=done,
            width=max(10, min(40, room if room >= 10 else width)),
            pulse=self.planned is None,
        )
        if room >= 10:  # bar and label on one line when both fit, else the label below the bar
            line = Table.grid(padding=(0, 1))
            line.add_row(bar, label)
            top = [line]
        else:
            top = [bar, label]
        share = runner.budget.spent / max(elapsed, 1e-9)
        head = Text(
            f"{self.exp.name}: replicas alive {alive}/{len(runner.replicas)}, smaps tier CPU {share:.1%} of a core",
            overflow="fold",
        )
        by_group = {g.name: [r for r in runner.replicas if r.group.name == g.name] for g in self.exp.groups}
        extra_column = runner.scenario.progress_column(by_group) if runner.scenario is not None else None
        medians = self._medians(runner)
        columns = [
            ("group", 0),
            ("allocator", 2),
            ("alive", 1),
            (f"median {self.exp.metric.upper()} MB", 0),
            ("verified", 1),
        ] + ([(extra_column[0], 3)] if extra_column is not None else [])
        rows = []
        for g in self.exp.groups:
            reps = by_group[g.name]
            ver = sum(r.state is True for r in reps)
            bad = sum(r.state is False for r in reps)
            extra = () if extra_column is None else (extra_column[1][g.name],)
            rows.append(
                (
                    g.name,
                    runner.specs[g.name].label,
                    f"{sum(r.alive for r in reps)}/{len(reps)}",
                    medians[g.name],
                    f"{ver}/{len(reps)}" + (f" {bad} unverified" if bad else ""),
                    *extra,
                )
            )
        kept = list(range(len(columns)))
        while True:  # the report's rule: drop the least important column until the table fits
            need = sum(max(len(columns[i][0]), *(len(r[i]) for r in rows)) + 2 for i in kept)
            droppable = [i for i in kept if columns[i][1] > 0]
            if need <= width or not droppable:
                break
            kept.remove(max(droppable, key=lambda i: columns[i][1]))
        table = Table(box=None, pad_edge=False)
        for i in kept:
            table.add_column(columns[i][0], no_wrap=columns[i][1] == 0 or i == 3)
        for r in rows:
            table.add_row(*(r[i] for i in kept))
        self.live.update(RichGroup(*top, head, table), refresh=True)


class _SetupProgress:
    """A scenario's set-up steps (tor network: keys, consensus wait), one line when the step
    changes and every 10 s while it lasts."""

    def __init__(self, console: Console):
        self.console, self.last_step, self.last_t = console, "", 0.0

    def __call__(self, text: str) -> None:
        step = text.split(":")[0]
        if step != self.last_step or time.monotonic() - self.last_t >= 10:
            self.console.print(f"[cyan]setup[/cyan] {text}", highlight=False)
            self.last_step, self.last_t = step, time.monotonic()


def design_check(exp: Experiment, console: Console, max_duration: float | None = None) -> None:
    """Before the run: every planned warning (analysis.design; `check` prints the same)."""
    from ..analysis.design import planned_warnings
    from .check import print_planned_warnings

    print_planned_warnings(planned_warnings(exp, max_duration), console)


def run_or_resume_command(
    experiment: Path | None,
    output: Path | None,
    until_significant: bool,
    max_duration: str | None,
    stable_for: str | None,
    no_report: bool,
    resume_run: Path | None,
    console: Console,
    metrics_addr: str | None = None,
    serve: str | None = None,
    serve_public: bool = False,
    until_decided: bool = False,
    as_json: bool = False,
) -> int:
    """`alloclab run EXPERIMENT` or `alloclab run --resume RUN`; the exit code. `as_json`: what the
    console would say goes to stderr, and the run's document (run_document) to stdout at the end."""
    if as_json:
        console = Console(stderr=True)
    if resume_run is not None:
        if experiment is not None:
            raise UserError("give either an experiment file or --resume RUN, not both", "see `alloclab run --help`")
        if serve is not None:
            raise UserError("--serve is for a new run, not --resume", "drop --serve")
        ignored = [
            name
            for name, value in (
                ("-o", output),
                ("--until-significant", until_significant),
                ("--until-decided", until_decided),
                ("--max-duration", max_duration),
                ("--stable-for", stable_for),
            )
            if value
        ]
        if ignored:  # they were dropped without a word: the run goes on as it was started
            raise UserError(
                f"{', '.join(ignored)} cannot change a resumed run (it continues in its own directory, "
                "to its planned end)",
                f"drop {', '.join(ignored)}",
            )
        return resume_command(resume_run, no_report, console, metrics_addr, as_json)
    if experiment is None:
        raise UserError("no experiment file given", "alloclab run EXPERIMENT.toml (or --resume RUN)")
    if serve_public and serve is None:
        raise UserError("--serve-public without --serve", "add --serve ADDR:PORT")
    if until_significant and until_decided:
        raise UserError(
            "--until-significant and --until-decided are two stop rules; a run has one",
            "keep --until-decided to stop once every comparison is decided, or --until-significant "
            "to stop once the best group is",
        )
    if stable_for is not None and not (until_significant or until_decided):
        raise UserError(
            "--stable-for sets the first look of --until-significant, which is not given",
            "add --until-significant, or drop --stable-for",
        )
    return run_command(
        experiment,
        output,
        until_significant,
        max_duration,
        stable_for or "60s",
        no_report,
        console,
        metrics_addr,
        serve=serve,
        serve_public=serve_public,
        until_decided=until_decided,
        as_json=as_json,
    )


def _bind_metrics(metrics_addr: str | None, bound=None) -> metrics.MetricsServer | None:
    """`--metrics ADDR` bound now (a busy port is refused before anything is made); `bound`: a
    server already bound, released if this one cannot be."""
    if metrics_addr is None:
        return None
    try:
        return metrics.MetricsServer(metrics_addr)
    except BaseException:
        if bound is not None:
            bound.stop()
        raise


def run_command(
    experiment: Path,
    output: Path | None,
    until_significant: bool,
    max_duration: str | None,
    stable_for: str,
    no_report: bool,
    console: Console,
    metrics_addr: str | None = None,
    serve: str | None = None,
    serve_public: bool = False,
    until_decided: bool = False,
    deadline: float | None = None,
    as_json: bool = False,
) -> int:
    """deadline (time.monotonic()): the run ends by then, whatever its set-up took (the demo's cap)."""
    live = None
    if serve is not None:
        from ..serve.liveview import LiveServer, parse_address

        address = parse_address(serve, serve_public)
    exp = load_experiment(experiment)  # every bad input refused before anything is created
    if serve is not None:
        live = LiveServer(address, serve_public)  # binds now: a busy port is refused before the run directory exists
    exposition = _bind_metrics(metrics_addr, live)
    preflight.check_output(output)
    preflight.check_load_command(exp)
    limit = parse_duration(max_duration, "--max-duration") if max_duration else None
    stop = None
    if until_significant or until_decided:
        from ..run.stopping import SignificanceStop

        first = max(parse_duration(stable_for, "--stable-for"), exp.phases.warmup + 10 * exp.interval)
        stop = SignificanceStop(
            first,
            n_comparisons=max(1, len(exp.groups) - 1),
            planned_s=exp.planned_duration(limit),
            interval=exp.interval,
            every=until_decided,
        )
    try:
        runner = Runner(exp, output, stop_check=stop, max_duration=limit, deadline=deadline)
    except BaseException:
        for companion in (live, exposition):
            if companion is not None:
                companion.stop()
        raise
    design_check(exp, Console(stderr=True), limit)  # after the setup checks: bad input stays one clear line
    if stop is not None:
        Console(stderr=True).print(
            f"sequential looks (elapsed s at level): {stop.schedule()}", markup=False, highlight=False
        )
    planned = exp.planned_duration(runner.max_duration)
    err = Console(stderr=True)
    if runner.cgroup_note:
        err.print(f"[yellow]note[/yellow] {runner.cgroup_note}")
    if live is not None:
        runner.add_companion(live.start(runner.store.path, runner.run_dir / "live-view.log"))
        err.print(f"live view: {live.url}", markup=False, highlight=False)
    if exposition is not None:  # each scrape reads the last committed tick (serve/metrics.py)
        runner.add_companion(exposition.start(runner.store.path, runner.run_dir / "metrics.log", socket.gethostname()))
        err.print(f"serving /metrics on {exposition.host}:{exposition.port}", markup=False, highlight=False)
    runner.on_setup = _SetupProgress(err)
    try:
        try:
            with Progress(err, exp, planned) as progress:
                runner.on_tick = progress.tick
                result = runner.run()
        finally:
            if exposition is not None:  # the exposition ends with the run
                exposition.stop()
        failure = runner.scenario.failure(result.run_dir) if runner.scenario is not None else None
        if failure is not None:
            raise failure
        if result.cut_short == "disk-full":
            # one line, no report: writing it would need the space that ran out
            err.print(
                f"alloclab: error: the disk holding {result.run_dir} is full: sampling stopped, replicas stopped, "
                f"the run is marked cut short (disk-full) — free space, then `alloclab report {result.run_dir}`",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
            return EXIT_CUT_SHORT
        console.print(f"run ended: {result.end_reason}; data in {result.run_dir}")
        written = None if no_report else _report(result.run_dir, console)
        if as_json:
            emit_json(run_document(result.run_dir, result.end_reason, result.interrupted, written))
    finally:
        # the live view follows the run to its end: its final state and the report's link (served
        # at /report.html) are there while the report is written; it stops when alloclab is done
        if live is not None:
            if not no_report and (runner.run_dir / "report.html").is_file():
                time.sleep(LIVE_LINGER_S)  # an open page polls every 2 s: let it pick up the report's link
            live.stop()
    return exitcodes.INTERRUPTED if result.interrupted else exitcodes.OK


def resume_command(
    run: Path, no_report: bool, console: Console, metrics_addr: str | None = None, as_json: bool = False
) -> int:
    """--resume RUN: see runner.resume (and docs/reference/store.md, "How a run ended"); with
    --metrics, the resumed ticks are served as a new run's are."""
    err = Console(stderr=True)
    exposition = _bind_metrics(metrics_addr)
    try:
        if exposition is not None:
            store = Store.open(run)  # a killed writer's WAL recovered before a read-only reader opens it
            db = store.path
            store.close()
            exposition.start(db, db.parent / "metrics.log", socket.gethostname())
            err.print(f"serving /metrics on {exposition.host}:{exposition.port}", markup=False, highlight=False)
        result = resume(
            run,
            on_tick=lambda ticks, n: (
                err.print(f"resumed: tick {ticks}, {n} processes sampled") if ticks % 10 == 1 else None
            ),
        )
    finally:
        if exposition is not None:
            exposition.stop()
    if result.survivors:
        console.print(
            f"resumed {result.run_dir}: {result.survivors} processes had survived; sampled {result.sampled_ticks} "
            f"more intervals, then ended them"
        )
    else:
        console.print(f"no process of {result.run_dir} survived; the run is closed (end reason: {result.end_reason})")
    written = None if no_report else _report(result.run_dir, console)
    if as_json:
        emit_json(run_document(result.run_dir, result.end_reason, result.interrupted, written))
    return exitcodes.INTERRUPTED if result.interrupted else exitcodes.OK


def _report(run_dir: Path, console: Console):
    """The report written and its summary printed; the report's input (for --json)."""
    from ..reporters import report

    path, written = report.report_run(run_dir, console=console)
    console.print(f"report: {path} (interactive: {path.with_name('report.html')})")
    return written


def run_document(run_dir: Path, end_reason: str | None, interrupted: bool, written) -> dict:
    """`run --json`: the run's directory, how it ended, and its report's summary (summary.json's
    document; None with --no-report)."""
    summary = None
    if written is not None:
        from ..reporters.json_summary import summary_document

        summary = summary_document(written)
    return {
        "run": str(Path(run_dir).resolve()),
        "end_reason": end_reason,
        "interrupted": interrupted,
        "report": str(Path(run_dir) / "report.md") if written is not None else None,
        "summary": summary,
    }
