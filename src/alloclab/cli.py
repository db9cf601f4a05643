"""The `alloclab` command line (click + rich). Only the click declarations live here: each verb
calls one function in alloclab.commands.<verb> (imported when the verb runs, so `--help` and bad
input stay fast), and `main` turns every UserError, usage mistake or unhandled OSError into one
line on stderr with exit code 2 (3: a full disk; 130: Ctrl-C)."""

from __future__ import annotations

import errno
import inspect
import os
import sys
from pathlib import Path

import click

from .commands.conventions import OUTPUT_DIR, OUTPUT_FILE, Batch, Duration, output_console
from .common import exitcodes
from .common.errors import StoreError, UserError, from_os_error

# Plain and as wide as the user's terminal (COLUMNS first) when piped; LOG_WIDTH in a log.
console = output_console()
PathArg = click.Path(path_type=Path)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="alloclab", prog_name="alloclab", message="%(prog)s %(version)s")
def app() -> None:
    """Measure which memory allocator your long-running program should run on, with evidence.

    \b
    Example:
      alloclab check service.toml && alloclab run service.toml -o runs/base"""


@app.command()
@click.argument("experiment", type=PathArg, required=False)
@click.option("-o", "--output", type=PathArg, help=f"{OUTPUT_DIR} of the run.", show_default="runs/<time>-<name>")
@click.option("--until-significant", is_flag=True, help="Stop once the best group beats the baseline significantly.")
@click.option(
    "--until-decided",
    is_flag=True,
    help="Stop once every group's comparison with the baseline is decided: "
    "shown lower, higher or equivalent within ±5% (sequential rule, Holm); an undecided one runs to the end "
    "or --max-duration.",
)
@click.option("--max-duration", type=Duration(), help="Stop after this long, e.g. 30m.")
@click.option(
    "--stable-for",
    type=Duration(),
    show_default="60s",
    help="With --until-significant or --until-decided: time of the first look (later looks at doublings of it, and a last one just before --max-duration).",
)
@click.option("--no-report", is_flag=True, help="Skip the report at the end.")
@click.option(
    "--resume",
    "resume_run",
    type=PathArg,
    metavar="RUN",
    help="Continue a run whose alloclab died: sample what survives, else close it (end reason, report).",
)
@click.option(
    "--metrics",
    "metrics_addr",
    metavar="ADDR",
    help="Also serve /metrics for Prometheus on ADDR (PORT = loopback), from a process beside the run; also with --resume.",
)
@click.option(
    "--serve",
    metavar="[ADDR:]PORT",
    help="Serve a read-only live view of the run at http://ADDR:PORT/ while it goes on (ADDR defaults to 127.0.0.1; "
    "port 0 picks a free one).",
)
@click.option(
    "--serve-public",
    is_flag=True,
    help="Allow --serve on an address other than loopback (anyone who can reach it sees the run's commands and data).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="At the end, print the run (directory, end reason, the report's summary) as JSON; progress goes to stderr.",
)
def run(
    experiment: Path | None,
    output: Path | None,
    until_significant: bool,
    max_duration: str | None,
    stable_for: str | None,
    no_report: bool,
    resume_run: Path | None,
    serve: str | None,
    serve_public: bool,
    metrics_addr: str | None,
    as_json: bool,
    until_decided: bool,
) -> None:
    """Run an experiment: every group x replica started together, sampled, verified, stored, reported."""
    from .commands.run import run_or_resume_command

    sys.exit(
        run_or_resume_command(
            experiment,
            output,
            until_significant,
            max_duration,
            stable_for,
            no_report,
            resume_run,
            console,
            metrics_addr,
            serve=serve,
            serve_public=serve_public,
            as_json=as_json,
            until_decided=until_decided,
        )
    )


@app.command()
@click.argument("experiment", type=PathArg)
@click.option(
    "--json", "as_json", is_flag=True, help="Print what was checked (groups, planned length, warnings) as JSON."
)
def check(experiment: Path, as_json: bool) -> None:
    """Check an experiment file as `run` would (allocators, commands, limits); no run directory is created.

    A catalog id not built yet is built into alloclab's cache (as `run` would build it), so that the
    library itself is checked."""
    from .commands.check import check_command

    sys.exit(check_command(experiment, console, as_json))


@app.command()
@click.argument("run_dir", metavar="RUN", type=PathArg)
@click.option(
    "-o",
    "--output",
    type=PathArg,
    help=f"{OUTPUT_DIR} to write the report's files in.",
    show_default="the run directory",
)
@click.option("--metric", help="rss, pss, uss or anon.", show_default="the run's")
@click.option(
    "--baseline",
    metavar="GROUP",
    help="Compare every group with this group instead (no re-run).",
    show_default="the run's",
)
@click.option("--json", "as_json", is_flag=True, help="Print summary.json instead of the summary table.")
def report(run_dir: Path, output: Path | None, metric: str | None, baseline: str | None, as_json: bool) -> None:
    """Analyse a run: write report.md, report.html, summary.json, summary.csv, replicas.csv and charts; print the summary table."""
    from .commands.report import report_command

    report_command(run_dir, output, metric, baseline, console, as_json)


@app.command()
@click.argument("runs", metavar="RUN...", nargs=-1, required=True, type=PathArg)
@click.option("-o", "--output", type=PathArg, required=True, help=f"{OUTPUT_DIR} of the merged run (new).")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the merged run (directory, groups, replicas, hosts) as JSON."
)
def merge(runs: tuple[Path, ...], output: Path, as_json: bool) -> None:
    """Merge hosts' run stores (e.g. each host's `fleet collect` run) into one run: replicas keep their
    host, processes, restarts, verification and sample times; the groups must agree."""
    from .commands.merge import merge_command

    merge_command(runs, output, console, as_json)


@app.command()
@click.argument("run_a", metavar="RUN_A", type=PathArg)
@click.argument("run_b", metavar="RUN_B", type=PathArg)
@click.option(
    "--by",
    type=click.Choice(["group", "allocator"]),
    default="group",
    show_default=True,
    help="Match groups by name, or by allocator family and version.",
)
@click.option("--metric", help="rss, pss, uss or anon.", show_default="run A's")
@click.option(
    "--fail-on-increase",
    type=float,
    metavar="PCT",
    help="CI gate: exit 1 when a group of B is shown to use more than PCT% more memory than in A (its whole "
    "ratio interval lies above 1 + PCT/100); says inconclusive when the interval reaches past it, or when "
    "the runs' levels stand for times of day more than 2 h apart (a daily cycle; warning times-of-day-differ).",
)
@click.option(
    "--fail-on-inconclusive",
    is_flag=True,
    help="With --fail-on-increase: exit 4 when the data cannot tell (the default; kept for older CI files).",
)
@click.option(
    "--allow-inconclusive",
    is_flag=True,
    help="With --fail-on-increase: exit 0 when the data cannot tell (the output still says gate INCONCLUSIVE).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
def compare(
    run_a: Path,
    run_b: Path,
    by: str,
    metric: str | None,
    fail_on_increase: float | None,
    fail_on_inconclusive: bool,
    allow_inconclusive: bool,
    as_json: bool,
) -> None:
    """Compare run B against run A, group by group: ratios with intervals, significance, what changed.

    \b
    Example:
      alloclab compare runs/base runs/cand --fail-on-increase 5"""
    from .commands.compare import compare_command

    sys.exit(
        compare_command(
            run_a, run_b, by, metric, fail_on_increase, as_json, console, fail_on_inconclusive, allow_inconclusive
        )
    )


@app.command()
@click.argument("experiment", type=PathArg, required=False)
@click.option(
    "--fail-on-increase",
    type=float,
    metavar="PCT",
    help="Exit 1 when the candidate is shown to use more than PCT% more memory than the baseline; 0 when "
    "shown within; 4 when the time runs out undecided.",
)
@click.option("--baseline", metavar="CMD", help="The baseline build's command line (split as a shell would).")
@click.option("--candidate", metavar="CMD", help="The candidate build's command line.")
@click.option("--command", metavar="CMD", help="One command for both sides (they differ by allocator or env).")
@click.option("--baseline-trace", type=PathArg, help="A recorded trace replayed as the baseline.")
@click.option("--candidate-trace", type=PathArg, help="A recorded trace replayed as the candidate.")
@click.option("--trace", type=PathArg, help="One trace for both sides (they differ by allocator or env).")
@click.option("--workload", help="A built-in workload for both sides (alloclab workloads).")
@click.option(
    "--baseline-allocator",
    default="glibc",
    show_default=True,
    help="The baseline side's allocator (glibc, a catalog id or a library path).",
)
@click.option("--candidate-allocator", default="glibc", show_default=True, help="The candidate side's allocator.")
@click.option(
    "--baseline-env", multiple=True, metavar="NAME=VALUE", help="Environment of the baseline side (repeatable)."
)
@click.option(
    "--candidate-env", multiple=True, metavar="NAME=VALUE", help="Environment of the candidate side (repeatable)."
)
@click.option("--replicas", type=click.IntRange(2, 64), default=4, show_default=True, help="Replicas a side.")
@click.option(
    "--max-duration", type=Duration(), default="5m", show_default=True, help="Undecided by then: inconclusive."
)
@click.option("--warmup", type=Duration(), default="10s", show_default=True, help="Not counted in the levels.")
@click.option("--interval", type=Duration(), default="1s", show_default=True, help="Sampling interval.")
@click.option(
    "--first-look",
    type=Duration(),
    help="Elapsed time of the first look (then doublings).",
    show_default="warm-up + 10 intervals",
)
@click.option(
    "--speed",
    type=click.FloatRange(0),
    default=0.0,
    show_default=True,
    help="Trace replay speed (0: flat out, the same work every time).",
)
@click.option("--metric", default="rss", show_default=True, help="rss, pss, uss or anon.")
@click.option(
    "-o",
    "--output",
    type=PathArg,
    help=f"{OUTPUT_DIR} of the run (gate.json and report.html in it).",
    show_default="runs/<time>-gate",
)
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@click.option("--no-report", is_flag=True, help="Skip report.html.")
@click.option("--allow-inconclusive", is_flag=True, help="Exit 0 when undecided (the output still says INCONCLUSIVE).")
def gate(
    experiment,
    fail_on_increase,
    baseline,
    candidate,
    command,
    baseline_trace,
    candidate_trace,
    trace,
    workload,
    baseline_allocator,
    candidate_allocator,
    baseline_env,
    candidate_env,
    replicas,
    max_duration,
    warmup,
    interval,
    first_look,
    speed,
    metric,
    output,
    as_json,
    no_report,
    allow_inconclusive,
) -> None:
    """A PR's memory gate: baseline and candidate as two groups of one run, stopped when decided.

    Replicas of both sides start interleaved; at looks (doublings of the first) the ratio
    candidate/baseline is tested as `compare --fail-on-increase` tests it, with each look's share
    of the error rate."""
    from .commands.gate import gate_command

    sys.exit(
        gate_command(
            experiment,
            fail_on_increase,
            command,
            baseline,
            candidate,
            trace,
            baseline_trace,
            candidate_trace,
            workload,
            baseline_allocator,
            candidate_allocator,
            baseline_env,
            candidate_env,
            replicas,
            max_duration,
            warmup,
            interval,
            first_look,
            speed,
            metric,
            output,
            as_json,
            no_report,
            allow_inconclusive,
            console,
        )
    )


@app.command()
@click.argument("run_dir", metavar="RUN", type=PathArg)
@click.option(
    "-o",
    "--output",
    type=PathArg,
    help=f"{OUTPUT_FILE}: the archive to write.",
    show_default="RUN-bundle.tar.gz beside the run",
)
@click.option(
    "--trace",
    "traces",
    type=PathArg,
    multiple=True,
    help="A trace the run replayed, to include (the store's own paths are never read).",
)
def bundle(run_dir: Path, output: Path | None, traces: tuple[Path, ...]) -> None:
    """One .tar.gz for an upstream maintainer: experiment, allocator provenance, host, report, charts, trace, README."""
    from .commands.bundle import bundle_command

    bundle_command(run_dir, output, console, list(traces))


@app.command()
@click.argument("run_dir", metavar="RUN", type=PathArg)
@click.option(
    "-o",
    "--output",
    "--csv",
    "csv_dir",
    type=PathArg,
    required=True,
    help=f"{OUTPUT_DIR} for memory.csv, events.csv, diagnostics.csv, experiment.json (--csv: the older name).",
)
def export(run_dir: Path, csv_dir: Path) -> None:
    """Export a run as CSV in the 1AEO TorUtils layout (plus alloclab's extra columns and experiment.json)."""
    from .commands.export import export_command

    export_command(run_dir, csv_dir, console)


@app.group("import")
def import_group() -> None:
    """Read other tools' data into an alloclab run."""


@import_group.command("torutils")
@click.argument("folder", type=PathArg)
@click.option("-o", "--output", type=PathArg, required=True, help=f"{OUTPUT_DIR} of the new run.")
@click.option(
    "--naive-utc-offset",
    type=float,
    default=0.0,
    show_default=True,
    help="Hours east of UTC for timestamps written without an offset.",
)
@click.option("--baseline", help="Baseline group.", show_default="the glibc one")
@click.option("--json", "as_json", is_flag=True, help="Print the new run (directory, groups, replicas) as JSON.")
def import_torutils(folder: Path, output: Path, naive_utc_offset: float, baseline: str | None, as_json: bool) -> None:
    """Import a TorUtils memory experiment (memory CSV, group lists, events) as a run."""
    from .commands.imports import torutils_command

    torutils_command(folder, output, naive_utc_offset, baseline, console, as_json)


@import_group.command("prometheus")
@click.argument("url")
@click.option("-o", "--output", type=PathArg, required=True, help=f"{OUTPUT_DIR} of the new run.")
@click.option("--from", "start", default="now-1h", show_default=True, help="Start: now-1h, Unix seconds or ISO 8601.")
@click.option("--to", "end", default="now", show_default=True, help="End, the same way.")
@click.option(
    "--step", type=Duration(), default="60s", show_default=True, help="Resolution (use the scrape interval or more)."
)
@click.option("--query", help="Your own memory series in bytes (PromQL) instead of alloclab's; one series per unit.")
@click.option("--match", help="Label matchers added to alloclab's series, e.g. 'job=\"alloclab\"'.")
@click.option("--group-label", default="group", show_default=True, help="Label that names a series' group.")
@click.option("--unit-label", default="unit", show_default=True, help="Label that names a series' unit (one replica).")
@click.option("--host-label", default="host", show_default=True, help="Label that names a series' host.")
@click.option("--baseline", help="Baseline group.", show_default="the glibc one")
@click.option(
    "--timeout",
    type=Duration(),
    default="120s",
    show_default=True,
    help="Deadline for the whole import (every answer).",
)
@click.option(
    "--max-answer-mb",
    type=click.FloatRange(min=0.001, max=4096),
    default=64,
    show_default=True,
    help="Largest answer accepted from the server, in MiB.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the new run (directory, groups, replicas) as JSON.")
def import_prometheus(
    url,
    output,
    start,
    end,
    step,
    query,
    match,
    group_label,
    unit_label,
    host_label,
    baseline,
    timeout,
    max_answer_mb,
    as_json,
) -> None:
    """Import a range of samples from a Prometheus server (/api/v1/query_range) as a run; hosts kept.

    alloclab's own series keep their meaning (restarts, verification, groups from alloclab_unit_info);
    each point is the mean of the scrapes within its step."""
    from .commands.imports import prometheus_command

    prometheus_command(
        url,
        output,
        start,
        end,
        step,
        query,
        match,
        group_label,
        unit_label,
        host_label,
        baseline,
        timeout,
        max_answer_mb,
        console,
        as_json,
    )


@app.command()
@click.option(
    "-o",
    "--output",
    type=PathArg,
    help=f"{OUTPUT_DIR} for the demo's experiments and runs.",
    show_default="runs/demo-<time>",
)
@click.option(
    "--max-duration",
    type=Duration(),
    default="5m",
    show_default=True,
    help="The whole demo (set-up and report included) at most this long; it stops sooner once decided.",
)
@click.option(
    "--model",
    is_flag=True,
    help="The built-in models (tor-dircache, worker-pool) instead of real tor relays: no root or tor needed.",
)
def demo(output: Path | None, max_duration: str, model: bool) -> None:
    """Real tor relays on a private network under glibc, jemalloc and mimalloc, with the report at the end."""
    from .commands.demo import demo_command

    sys.exit(demo_command(output, max_duration, model, console))


@app.group("allocators")
def allocators_group() -> None:
    """The allocator catalog: pinned builds with provenance, verified before use."""


@allocators_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per catalog id (and glibc).")
def allocators_list(as_json: bool) -> None:
    """Every catalog id, its sources, and whether it is built."""
    from .commands.allocators import list_command

    list_command(console, as_json)


@allocators_group.command("check")
@click.argument("ids", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per catalog id.")
@click.option("--markdown", is_flag=True, help="A Markdown table with today's date (docs/how-to/allocators.md's).")
def allocators_check(ids: tuple[str, ...], as_json: bool, markdown: bool) -> None:
    """Ask every source of every catalog id whether its registry still serves it; build nothing.

    One line per id: served, gone or unreachable."""
    from .commands.allocators import check_command

    sys.exit(check_command(list(ids), as_json, markdown, console))


@allocators_group.command("build")
@click.argument("ids", nargs=-1, required=True)
@click.option("--force", is_flag=True, help="Rebuild even if cached.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=2, show_default=True, help="Builds at once.")
def allocators_build(ids: tuple[str, ...], force: bool, jobs: int) -> None:
    """Fetch, build and verify catalog ids (e.g. mimalloc@2.0.9+secure jemalloc@5.2.1)."""
    from .commands.allocators import build_command

    build_command(list(ids), force, jobs, console)


@allocators_group.command("verify")
@click.argument("allocator_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print what was verified as JSON.")
def allocators_verify(allocator_id: str, as_json: bool) -> None:
    """Re-check a build: bytes unchanged, safe to preload, reports the right version."""
    from .commands.allocators import verify_command

    verify_command(allocator_id, console, as_json)


@allocators_group.command("show")
@click.argument("allocator_id", metavar="ID")
def allocators_show(allocator_id: str) -> None:
    """Sources and provenance of one id."""
    from .commands.allocators import show_command

    show_command(allocator_id, console)


@allocators_group.command("versions")
@click.argument("family")
@click.option(
    "--newer-than", metavar="VERSION", help="Only versions released after this one (e.g. your pinned version)."
)
@click.option("--refresh", is_flag=True, help="Ask the registries again now (listings are otherwise reused for a day).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def allocators_versions(family: str, newer_than: str | None, refresh: bool, as_json: bool) -> None:
    """Every version of FAMILY the reachable registries publish (crates, Debian), each buildable as FAMILY@VERSION."""
    from .commands.allocators import versions_command

    versions_command(family, newer_than, refresh, as_json, console)


@allocators_group.command("package")
@click.argument("allocator_id", metavar="ID")
@click.option(
    "-o", "--output", "out_dir", type=PathArg, default=Path("."), show_default=True, help=f"{OUTPUT_DIR} for the .deb."
)
def allocators_package(allocator_id: str, out_dir: Path) -> None:
    """Write a Debian package of ID's verified build (library under /usr/lib/alloclab/<id>/, provenance inside)."""
    from .commands.allocators import package_command

    package_command(allocator_id, out_dir, console)


@allocators_group.command("path")
@click.argument("allocator_id", metavar="ID")
def allocators_path(allocator_id: str) -> None:
    """Print the verified library path of a built id."""
    from .commands.allocators import path_command

    click.echo(path_command(allocator_id))


@app.group("trace")
def trace_group() -> None:
    """Record a program's allocations once; replay them under any allocator, timing kept."""


@trace_group.command("record", context_settings={"ignore_unknown_options": True})
@click.option("-o", "--output", type=PathArg, required=True, help=f"{OUTPUT_FILE}: the trace to write.")
@click.option("--under", "allocator", help="Allocator to record under (catalog id or path).", show_default="glibc")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
def trace_record(output: Path, allocator: str | None, command: tuple[str, ...]) -> None:
    """Run COMMAND with the recorder preloaded: alloclab trace record -o app.trace -- CMD ARGS"""
    from .commands.trace import record_command

    record_command(output, allocator, list(command), console)


@trace_group.command("replay")
@click.argument("trace_file", metavar="TRACE", type=PathArg)
@click.option(
    "--speed", type=float, default=1.0, show_default=True, help="Time scale: 2 = twice as fast, 0 = no waiting."
)
@click.option("--under", "allocator", help="Allocator to replay under (catalog id or path).", show_default="glibc")
@click.option("--max-gap", type=Duration(seconds=True), help="Shorten idle gaps longer than this (replay time) [1h].")
@click.option("--max-duration", type=Duration(seconds=True), help="Refuse a replay schedule longer than this [7d].")
@click.option("--max-threads", type=int, help="Refuse traces with more threads [4096].")
@click.option("--max-alloc", type=int, help="Refuse a single request over this many bytes [1 GiB].")
@click.option("--max-live", type=int, help="Refuse traces holding more live bytes [3/4 of RAM, at most 1 TiB].")
@click.option(
    "--timeout", type=Duration(seconds=True), help="Stop the replayer after this long [from the trace's schedule]."
)
@click.option("--json", "as_json", is_flag=True, help="Print the replay's figures as JSON.")
def trace_replay(
    trace_file: Path,
    speed: float,
    allocator: str | None,
    max_gap: float | None,
    max_duration: float | None,
    max_threads: int | None,
    max_alloc: int | None,
    max_live: int | None,
    timeout: float | None,
    as_json: bool,
) -> None:
    """Replay a trace: one thread per recorded thread, cross-thread frees in order, gaps honoured."""
    from .commands.trace import replay_command

    limits = {
        "max_gap": max_gap,
        "max_duration": max_duration,
        "max_threads": max_threads,
        "max_alloc": max_alloc,
        "max_live": max_live,
    }
    replay_command(trace_file, speed, allocator, limits, timeout, console, as_json)


@trace_group.command("info")
@click.argument("trace_file", metavar="TRACE", type=PathArg)
@click.option("--chart", type=PathArg, help="Also draw the live-bytes curve and size histogram to this PNG.")
@click.option("--json", "as_json", is_flag=True, help="Print the raw figures as JSON.")
@click.option(
    "--timeout", type=Duration(seconds=True), help="Stop the reader after this long [60s + 5s per MB of trace]."
)
def trace_info(trace_file: Path, chart: Path | None, as_json: bool, timeout: float | None) -> None:
    """Operations, threads, duration, size histogram and live-bytes curve of a trace."""
    from .commands.trace import info_command

    info_command(trace_file, chart, as_json, timeout, console)


@app.group("fleet")
def fleet_group() -> None:
    """Experiments on live systemd services, and a safe rollout of the winner."""


def _fleet_options(f):
    f = click.option(
        "--root",
        type=PathArg,
        default=Path("/"),
        show_default=True,
        help="Take this directory as / (the units, their drop-ins and alloclab's fleet state are "
        "read, and by apply, deploy and rollback written, under it).",
    )(f)
    f = click.option(
        "--systemctl",
        type=click.Choice(["auto", "systemd", "user", "local"]),
        default="auto",
        show_default=True,
        help="systemd; 'user': a user manager (systemctl --user); 'local': real processes started from "
        "unit files under --root (no systemd).",
    )(f)
    return f


@fleet_group.command("facts")
@click.option("--units", "units_glob", required=True, help="Unit glob, e.g. 'tor@*'.")
@click.option("--host", "host_label", metavar="NAME", help="This host's name in the fleet plan [this machine's name].")
@click.option("--json", "as_json", is_flag=True, help="Print the facts as JSON (for fleet plan --facts).")
@_fleet_options
def fleet_facts(units_glob, host_label, as_json, root, systemctl) -> None:
    """Each matching unit's memory, age, user and sandbox: one host's input to a fleet-wide plan."""
    from .commands.fleet import facts_command

    facts_command(units_glob, host_label, root, systemctl, as_json, console)


@fleet_group.command("plan")
@click.option("--units", "units_glob", help="Unit glob, e.g. 'tor@*' (this host's units).")
@click.option(
    "--facts",
    "facts",
    type=PathArg,
    multiple=True,
    help="A host's `fleet facts --json` (repeat per host; - reads a JSON list of them from stdin): "
    "one plan over every host's units.",
)
@click.option("--groups", type=PathArg, required=True, help="Experiment file whose [[group]]s to assign.")
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed of the random assignment of units to groups."
)
@click.option(
    "-o",
    "--output",
    type=PathArg,
    default=Path("fleet-plan.json"),
    show_default=True,
    help=f"{OUTPUT_FILE}: the plan to write.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@_fleet_options
def fleet_plan(units_glob, facts, groups, seed, output, as_json, root, systemctl) -> None:
    """Assign units to groups at random, stratified by memory and uptime (within each host); save the plan."""
    from .commands.fleet import plan_command

    plan_command(units_glob, groups, seed, output, root, systemctl, console, facts, as_json)


@fleet_group.command("apply")
@click.argument("plan", type=PathArg)
@click.option(
    "--batch", type=Batch(), default="5", show_default=True, help="Units restarted at once, or a share (10%)."
)
@click.option("--dry-run", is_flag=True, help="Show every file and command; change nothing.")
@click.option(
    "--host", "host_label", metavar="NAME", help="This host's share of a fleet-wide plan [this machine's name]."
)
@click.option("--json", "as_json", is_flag=True, help="Print what changed as JSON (progress goes to stderr).")
@_fleet_options
def fleet_apply(plan, batch, dry_run, host_label, as_json, root, systemctl) -> None:
    """Write drop-ins, restart in batches, verify each unit maps its allocator; stop at the first failure."""
    from .commands.fleet import apply_command

    apply_command(plan, batch, dry_run, root, systemctl, console, host_label, as_json)


@fleet_group.command("collect")
@click.option("--plan", "plan_file", type=PathArg, required=True, help="The plan file `fleet plan` wrote.")
@click.option("-o", "--output", type=PathArg, required=True, help=f"{OUTPUT_DIR} of the run (resumed if it exists).")
@click.option("--interval", type=Duration(), default="60s", show_default=True, help="Sampling interval.")
@click.option("--duration", type=Duration(), help="Stop after this long.", show_default="until stopped")
@click.option(
    "--install",
    is_flag=True,
    help="Build the native reader (as `fleet prepare`), write a systemd unit that runs this collector with every option given here, and stop.",
)
@click.option(
    "--listen", metavar="ADDR", help="Also serve /metrics for Prometheus on ADDR (PORT = loopback, or HOST:PORT)."
)
@click.option(
    "--host",
    "host_label",
    metavar="NAME",
    help="The host label of the metrics and replicas, and this host's "
    "share of a fleet-wide plan [this machine's name].",
)
@click.option("--json", "as_json", is_flag=True, help="When the collector stops, print what it collected as JSON.")
@_fleet_options
def fleet_collect(plan_file, output, interval, duration, install, listen, host_label, as_json, root, systemctl) -> None:
    """Sample every planned unit (memory, processes, allocator verification) into a run store."""
    from .commands.fleet import collect_command

    collect_command(
        plan_file, output, interval, duration, install, root, systemctl, console, listen, host_label, as_json
    )


@fleet_group.command("prepare")
@click.option("--json", "as_json", is_flag=True, help="Print which reader the collector will use as JSON.")
def fleet_prepare(as_json) -> None:
    """Build the collector's native reader on this host before the collector first starts (a deploy step)."""
    from .commands.fleet import prepare_command

    prepare_command(console, as_json)


@fleet_group.command("deploy")
@click.argument("allocator", required=False)
@click.option("--units", "units_glob", required=True, help="Unit glob, e.g. 'tor@*'.")
@click.option(
    "--env",
    "env_items",
    multiple=True,
    metavar="KEY=VALUE",
    help="Environment of the deployed units (repeatable), validated as a group's tunables.",
)
@click.option(
    "--group-file",
    type=PathArg,
    help="Deploy a group of this groups file (its allocator and env) instead of ALLOCATOR.",
)
@click.option(
    "--group",
    "group_name",
    metavar="NAME",
    help="The group of --group-file [its only group], or of --from-run [the recommended one].",
)
@click.option(
    "--from-run",
    type=PathArg,
    metavar="RUN",
    help="Deploy a group of this fleet run exactly as it was tested "
    "(allocator, version, library sha256, env); refused while the run is undecided (see fleet status).",
)
@click.option("--even-if-undecided", is_flag=True, help="With --from-run: deploy although the run has not decided.")
@click.option(
    "--batch",
    type=Batch(),
    default="5",
    show_default=True,
    help="Units per batch, or a share (10%); the first batch is the canary.",
)
@click.option(
    "--settle",
    type=Duration(),
    default="60s",
    show_default=True,
    help="How long each batch is watched before the next.",
)
@click.option("--max-memory", metavar="SIZE", help="Guard: a unit's RSS above this (e.g. 512M) for --persist samples.")
@click.option("--max-increase", metavar="SHARE", help="Guard: a unit's RSS this far above its old level (e.g. 25%).")
@click.option(
    "--max-restarts", type=int, default=3, show_default=True, help="Guard: this many restarts while settling."
)
@click.option(
    "--persist", type=int, default=3, show_default=True, help="Consecutive samples over a memory bound that trip it."
)
@click.option(
    "--guard-interval", type=Duration(), default="5s", show_default=True, help="How often the settle watch samples."
)
@click.option(
    "--warmup",
    type=Duration(words=("auto",)),
    metavar="DURATION",
    default="auto",
    show_default=True,
    help="Guard: a new process younger than this is not compared with the old level; auto = the old "
    "process's age at the restart, at most half of --settle. Not used where --history has the old process.",
)
@click.option(
    "--history",
    type=PathArg,
    metavar="RUN",
    help="The collector's run (fleet collect -o): --max-increase compares each new process with its old "
    "process at the same age.",
)
@click.option(
    "--rollback-scope",
    type=click.Choice(["all", "batch"]),
    default="all",
    show_default=True,
    help="On a trip, roll back everything deployed so far, or only the tripped batch.",
)
@click.option(
    "--baseline",
    default="auto",
    show_default=True,
    metavar="auto|N|P%|none",
    help="The canary judged against this many untouched units (auto: as many as the canary, where there are "
    "2 or more); none: the guards alone.",
)
@click.option(
    "--baseline-restart/--no-baseline-restart",
    default=True,
    show_default=True,
    help="Restart the baseline units (on their own allocator) at the same moment as the canary.",
)
@click.option(
    "--max-settle",
    type=Duration(),
    metavar="DURATION",
    help="The longest the canary is watched for a decision against its peers [4 × --settle].",
)
@click.option(
    "--canary-tolerance",
    default="10%",
    show_default=True,
    metavar="SHARE",
    help="The canary fails when shown above its peers by more than this, passes when shown below.",
)
@click.option(
    "--undecided",
    type=click.Choice(["hold", "fail", "pass"]),
    default="hold",
    show_default=True,
    help="Undecided against its peers by --max-settle: hold (stop, the canary kept; exit 4), fail (roll back) "
    "or pass (go on).",
)
@click.option("--dry-run", is_flag=True, help="Show every file and command; change nothing.")
@click.option(
    "-o",
    "--output",
    type=PathArg,
    default=Path("fleet-deploy.json"),
    show_default=True,
    help=f"{OUTPUT_FILE}: the deployment's plan to write (every unit in its one group; its groups file beside it as .toml; "
    "not with --dry-run). What each batch did, the guards' readings and any rollback: --json.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print what changed, or the trip, as JSON (progress goes to stderr)."
)
@_fleet_options
def fleet_deploy(
    allocator,
    units_glob,
    env_items,
    group_file,
    group_name,
    from_run,
    even_if_undecided,
    batch,
    settle,
    max_memory,
    max_increase,
    max_restarts,
    persist,
    guard_interval,
    warmup,
    history,
    rollback_scope,
    dry_run,
    output,
    as_json,
    root,
    systemctl,
    baseline,
    baseline_restart,
    max_settle,
    canary_tolerance,
    undecided,
) -> None:
    """Roll one allocator out in canary batches, the canary judged against untouched peers; roll back by itself
    when a guard trips or the canary fails (exit 1); exit 4 when held undecided."""
    from .commands.fleet import deploy_command

    guard_options = {
        "settle": settle,
        "max_memory": max_memory,
        "max_increase": max_increase,
        "max_restarts": max_restarts,
        "persist": persist,
        "guard_interval": guard_interval,
        "scope": rollback_scope,
        "warmup": warmup,
        "history": history,
        "env_items": env_items,
        "group_file": group_file,
        "group": group_name,
        "as_json": as_json,
        "from_run": from_run,
        "even_if_undecided": even_if_undecided,
        "baseline": baseline,
        "baseline_restart": baseline_restart,
        "max_settle": max_settle,
        "tolerance": canary_tolerance,
        "undecided": undecided,
    }
    sys.exit(deploy_command(allocator, units_glob, batch, dry_run, output, root, systemctl, console, **guard_options))


@fleet_group.command("status")
@click.argument("run", type=PathArg)
@click.option(
    "--look-every",
    type=Duration(),
    help="The grid of looks the decision is taken on (from the experiment's start), however often you ask [12h].",
)
@click.option(
    "--horizon", type=Duration(), help="The longest the experiment may run: all of alpha is spent by then [14d]."
)
@click.option(
    "--settle", type=Duration(), help="Each process's first part left out of its level (regrowth after a restart) [1h]."
)
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def fleet_status(run, look_every, horizon, settle, as_json) -> None:
    """Is each comparison decided (which way), or when is it expected to be? Anytime-valid: look as often as you like."""
    from .commands.fleet_status import status_command

    status_command(run, look_every, horizon, settle, as_json, console)


@fleet_group.command("rollback")
@click.option("--batch", type=Batch(), default="5", show_default=True, help="Units restored at once, or a share (10%).")
@click.option("--json", "as_json", is_flag=True, help="Print what was restored as JSON.")
@click.option(
    "--all",
    "every",
    is_flag=True,
    help="Undo every apply and deploy, newest first: the units as they were "
    "before alloclab (nothing to undo is no error).",
)
@_fleet_options
def fleet_rollback(batch, as_json, every, root, systemctl) -> None:
    """Restore the drop-ins from before the last apply or deploy, byte for byte, and restart; says which state that is."""
    from .commands.fleet import rollback_command

    rollback_command(batch, root, systemctl, console, as_json, every)


@app.command("workloads")
@click.option(
    "--json", "as_json", is_flag=True, help="One JSON object per workload (name, what it models, parameters)."
)
def workloads_list(as_json: bool) -> None:
    """List the built-in workload models and their parameters."""
    from .commands.workloads import list_command

    list_command(console, as_json)


@app.command()
@click.argument("target", metavar="EXPERIMENT_OR_WORKLOAD")
@click.option("--family", help="Bisect versions of this allocator family (with --good and --bad).")
@click.option("--good", help="Known-good version, e.g. 2.0.9.")
@click.option("--bad", help="Known-bad version, e.g. 3.0.1.")
@click.option("--variant", help="Versions of this variant only, e.g. secure.", show_default="plain builds")
@click.option("--tunable", help="Bisect the values of this environment tunable, e.g. MIMALLOC_PURGE_DELAY.")
@click.option("--param", help="Bisect the values of this workload parameter (built-in workloads).")
@click.option("--values", help="With --tunable/--param: ordered values, good end first, e.g. 0,10,100,1000.")
@click.option(
    "--allocator",
    help="With --tunable/--param: the allocator every step runs.",
    show_default="the experiment's baseline's",
)
@click.option("--metric", default="rss", show_default=True, help="rss, pss, uss, anon or cpu_per_op.")
@click.option(
    "--threshold-ratio",
    type=float,
    default=1.10,
    show_default=True,
    help="Bad: candidate/good shown above this ratio; good: shown below it.",
)
@click.option("--replicas", type=int, help="Replicas per side.", show_default="the file's, or 3")
@click.option("--interval", type=Duration(), help="Sampling interval.", show_default="the file's, or 2s")
@click.option("--warmup", type=Duration(), help="Warm-up excluded from the levels.", show_default="the file's, or 20s")
@click.option(
    "--workload-param",
    "workload_params",
    multiple=True,
    metavar="NAME=NUMBER",
    help="A built-in workload's fixed parameter (repeatable).",
)
@click.option(
    "--max-step",
    type=Duration(),
    default="10m",
    show_default=True,
    help="Longest a step may run before it is undecided.",
)
@click.option(
    "--first-look",
    type=Duration(),
    default="60s",
    show_default=True,
    help="First look of each step's sequential test (then at doublings).",
)
@click.option(
    "--check-bad/--no-check-bad", default=True, show_default=True, help="Run the bad end first to confirm it is bad."
)
@click.option("--no-report", is_flag=True, help="Skip each step's report (bisect.md is still written).")
@click.option(
    "-o",
    "--output",
    type=PathArg,
    help=f"{OUTPUT_DIR} of the search (its report and one run per step).",
    show_default="runs/<time>-bisect-<axis>",
)
def bisect(
    target,
    family,
    good,
    bad,
    variant,
    tunable,
    param,
    values,
    allocator,
    metric,
    threshold_ratio,
    replicas,
    interval,
    warmup,
    workload_params,
    max_step,
    first_look,
    check_bad,
    no_report,
    output,
) -> None:
    """Find the first bad version (or tunable value, or workload parameter) by binary search over real runs.

    Each step runs the candidate against the good end side by side and stops as soon as the sequential
    test of `run --until-significant` shows candidate/good above the threshold ratio (bad) or below it
    (good); a step undecided at --max-step stops the search, which then reports the range narrowed to.
    Output: bisect.md, bisect.json, bisect.png and one run directory per step."""
    from .commands.bisect import bisect_command

    sys.exit(
        bisect_command(
            target,
            family,
            good,
            bad,
            variant,
            tunable,
            param,
            values,
            allocator,
            metric,
            threshold_ratio,
            replicas,
            interval,
            warmup,
            workload_params,
            max_step,
            first_look,
            check_bad,
            no_report,
            output,
            console,
        )
    )


@app.command()
@click.argument("target", metavar="SWEEP_FILE_OR_EXPERIMENT_OR_WORKLOAD")
@click.option(
    "--allocator",
    "allocators",
    multiple=True,
    help="An allocator of the grid (repeatable).",
    show_default="the experiment's",
)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="NAME=V1,V2,...",
    help="A tunable's values, e.g. MIMALLOC_PURGE_DELAY=0,10,100,1000 (repeatable; the default is always included).",
)
@click.option("--replicas", type=int, help="Replicas per setting.", show_default="the file's, or 3")
@click.option("--interval", type=Duration(), help="Sampling interval.", show_default="the file's, or 2s")
@click.option("--warmup", type=Duration(), help="Warm-up.", show_default="the file's, or 20s")
@click.option(
    "--load", type=Duration(), help="Load phase of every batch.", show_default="the file's, or 2m for a workload name"
)
@click.option(
    "--workload-param",
    "workload_params",
    multiple=True,
    metavar="NAME=NUMBER",
    help="A built-in workload's parameter (repeatable).",
)
@click.option(
    "--max-groups-per-batch",
    "max_groups",
    type=int,
    help="Groups per batch, baseline included.",
    show_default="from cores and memory",
)
@click.option("--no-report", is_flag=True, help="Skip each batch's run report (sweep.md is still written).")
@click.option(
    "-o",
    "--output",
    type=PathArg,
    help=f"{OUTPUT_DIR} of the sweep (its report and one run per batch).",
    show_default="runs/<time>-sweep-<name>",
)
def sweep(
    target, allocators, settings, replicas, interval, warmup, load, workload_params, max_groups, no_report, output
) -> None:
    """Run a grid or list of settings (allocator versions × tunables) beside one baseline, in batches.

    TARGET is a sweep file (an experiment file with a [sweep] table instead of [[group]]s; see
    docs/how-to/bisect-sweep.md), or an experiment file / built-in workload name with --allocator and --set.
    Output: sweep.md, sweep.json and pareto.png (memory against CPU per operation, the Pareto front
    named) and one run directory per batch."""
    from .commands.sweep import sweep_command

    sys.exit(
        sweep_command(
            target,
            allocators,
            settings,
            replicas,
            interval,
            warmup,
            load,
            workload_params,
            max_groups,
            no_report,
            output,
            console,
        )
    )


INTERNAL_ERROR_EXIT = exitcodes.INTERNAL_ERROR


def main() -> None:
    try:
        app.main(standalone_mode=False)
    except UserError as exc:
        print(f"alloclab: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            from .common.settings import cache_root

            cache, failed = cache_root().absolute(), Path(os.fsdecode(exc.filename or "")).absolute()
            if exc.filename and (failed.is_relative_to(cache) or cache.is_relative_to(failed)):  # in it, or making it
                # the cache (native programs, allocator builds, registry listings) is written from many
                # places; a home that is read-only or not there (ProtectHome=) fails them all alike
                print(
                    f"alloclab: error: cannot write alloclab's cache {cache_root()} ({exc.strerror}: {exc.filename}) — "
                    f"set ALLOCLAB_CACHE to a writable directory (docs/reference/settings.md)",
                    file=sys.stderr,
                )
                sys.exit(exitcodes.BAD_INPUT)
            # any other path no command handled (a directory where a file goes, a read-only file
            # system, too many open files): one line, exit 2. Nothing recorded is lost: a sampling
            # tick commits what it wrote when it fails, and the runner records the run's end (finally)
            print(f"alloclab: error: {from_os_error(exc)}", file=sys.stderr)
            sys.exit(exitcodes.BAD_INPUT)
        where = f" writing {exc.filename}" if exc.filename else ""
        print(
            f"alloclab: error: the disk is full{where} ({exc.strerror}) — free space on that file system, then retry",
            file=sys.stderr,
        )
        sys.exit(exitcodes.CUT_SHORT)
    except StoreError as exc:  # a store damaged past what opening it found, or a full disk
        from .store import explain_database_error

        err = explain_database_error(exc)
        print(f"alloclab: error: {err}", file=sys.stderr)
        sys.exit(err.exit_code)
    except click.UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError" and exc.ctx:  # bare `alloclab`: show the help
            click.echo(exc.ctx.get_help())
            sys.exit(exitcodes.OK)
        hint = f" — see `{exc.ctx.command_path} --help`" if exc.ctx else ""
        print(f"alloclab: error: {exc.format_message()}{hint}", file=sys.stderr)
        sys.exit(exitcodes.BAD_INPUT)
    except click.Abort:
        sys.exit(exitcodes.INTERRUPTED)
    except click.ClickException as exc:  # click's own errors (a file it could not open) say themselves
        exc.show()
        sys.exit(exc.exit_code)
    except Exception as exc:  # a bug, not the user's input: one line and a file, not a traceback
        from .common.settings import debug

        if debug():
            raise
        first = (str(exc).splitlines() or [""])[0]
        print(
            f"alloclab: internal error: {type(exc).__name__}: {first} — a fault in alloclab, not in what you gave it; "
            f"{_keep_traceback(exc)} (ALLOCLAB_DEBUG=1 shows it here). What was recorded before it is kept.",
            file=sys.stderr,
        )
        sys.exit(INTERNAL_ERROR_EXIT)
    sys.exit(exitcodes.OK)


def _keep_traceback(exc: BaseException) -> str:
    """The traceback written to a new file in alloclab's cache (crashes/), else the temporary
    directory; where it went, as a phrase. The file is created exclusively, readable by its owner
    only (mkstemp: no file planted under that name is followed or overwritten, and the command line
    it records stays private)."""
    import tempfile
    import time
    import traceback

    from .common.settings import cache_root

    text = f"alloclab {' '.join(sys.argv[1:])}\n" + "".join(traceback.format_exception(exc))
    for folder in (cache_root() / "crashes", Path(tempfile.gettempdir())):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(
                prefix=f"alloclab-crash-{time.strftime('%Y%m%dT%H%M%S')}-", suffix=".txt", dir=folder
            )
            with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as out:
                out.write(text)
            return f"the traceback is in {name}"
        except Exception:  # the one line must still be printed
            continue
    return "its traceback could not be written anywhere"


if __name__ == "__main__":
    main()


# One example per verb, shown at the end of its --help (tests/unit/test_cli_help.py checks every verb has one).
EXAMPLES = {
    ("run",): "alloclab run service.toml -o runs/base --serve 0",
    ("check",): "alloclab check service.toml",
    ("report",): "alloclab report runs/base --metric pss",
    ("bundle",): "alloclab bundle runs/base -o base-bundle.tar.gz",
    ("export",): "alloclab export runs/base -o exported/",
    ("import", "torutils"): "alloclab import torutils ~/torutils-data -o runs/relays --naive-utc-offset -8",
    ("import", "prometheus"): "alloclab import prometheus http://127.0.0.1:9090 -o runs/prod --from now-24h --step 60s",
    ("demo",): "alloclab demo -o runs/demo",
    ("allocators", "list"): "alloclab allocators list",
    ("allocators", "check"): "alloclab allocators check mimalloc@2.0.9 mimalloc@3.0.1",
    ("allocators", "build"): "alloclab allocators build mimalloc@2.1.7 jemalloc@5.3.0",
    ("allocators", "verify"): "alloclab allocators verify mimalloc@2.1.7",
    ("allocators", "show"): "alloclab allocators show jemalloc@5.3.0",
    ("allocators", "versions"): "alloclab allocators versions mimalloc",
    ("allocators", "package"): "alloclab allocators package mimalloc@2.1.7 -o debs/",
    ("allocators", "path"): "alloclab allocators path jemalloc@5.3.0",
    ("trace", "record"): "alloclab trace record -o app.trace -- ./my-server --port 8080",
    ("trace", "replay"): "alloclab trace replay app.trace",
    ("trace", "info"): "alloclab trace info app.trace",
    ("fleet", "facts"): "alloclab fleet facts --units 'tor@*' --host h1 --json",
    ("fleet", "plan"): "alloclab fleet plan --units 'tor@*' --groups groups.toml -o fleet-plan.json",
    ("fleet", "apply"): "alloclab fleet apply fleet-plan.json --batch 10% --dry-run",
    ("fleet", "collect"): "alloclab fleet collect --plan fleet-plan.json -o runs/fleet --interval 60s",
    ("fleet", "prepare"): "alloclab fleet prepare",
    ("fleet", "deploy"): "alloclab fleet deploy jemalloc@5.3.0 --units 'tor@*' --batch 10% --max-increase 20%",
    ("fleet", "rollback"): "alloclab fleet rollback --batch 10%",
    ("fleet", "status"): "alloclab fleet status runs/fleet",
    ("workloads",): "alloclab workloads",
    ("merge",): "alloclab merge h1/run h2/run -o runs/fleet",
    ("bisect",): "alloclab bisect service.toml --family mimalloc --good 2.0.9 --bad 3.0.1",
    ("sweep",): "alloclab sweep sweep.toml",
    ("gate",): "alloclab gate --baseline './app-main in.dat' --candidate './app-pr in.dat' --fail-on-increase 5",
}


def _add_examples() -> None:
    for path, example in EXAMPLES.items():
        cmd = app
        for name in path:
            cmd = cmd.commands[name]
        if "Example:" not in (cmd.help or ""):  # cleandoc first: the docstring's indentation must not stay
            cmd.help = inspect.cleandoc(cmd.help or "") + f"\n\n\b\nExample:\n  {example}"


_add_examples()


def _add_exit_codes() -> None:
    """Every verb's --help ends with its exit codes, from the one table (alloclab.common.exitcodes)."""
    from .commands.conventions import verbs

    for path, cmd in [((), app), *verbs(app)]:  # alloclab's own: the codes every command shares
        cmd.epilog = exitcodes.epilog(path)


_add_exit_codes()
