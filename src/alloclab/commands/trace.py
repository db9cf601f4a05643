"""`alloclab trace record|replay|info`: a program's allocations recorded once, replayed under any allocator."""

from __future__ import annotations

import json
import math
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from ..allocators.resolution import resolve
from ..common.errors import UserError
from ..common.outputs import writable_file
from ..run import trace


def record_command(output: Path, allocator: str | None, command: list[str], console: Console) -> None:
    # before the program runs: a recording is not replaced by the next one given the same -o
    if output.is_file() and output.stat().st_size > 0:
        raise UserError(
            f"{output} already exists (a recording is not overwritten)", "remove it or give another file with -o"
        )
    writable_file(output, "trace")
    r = trace.record(output, command, allocator)
    if not r["events"]:  # the header alone: no figure per event to give
        console.print(
            f"recorded no allocation: {command[0]} made no malloc-family call before it exited; {output} "
            f"({r['bytes']:,} bytes) holds the header only; program exit code {r['exit_code']}"
        )
        return
    console.print(
        f"recorded {r['events']:,} events from {r['threads']} threads over {r['duration_s']:.2f} s into "
        f"{output} ({r['bytes']:,} bytes, {r['bytes_per_event']:.2f} bytes/event); program exit code {r['exit_code']}"
    )


def replay_command(
    trace_file: Path,
    speed: float,
    allocator: str | None,
    limits: dict,
    timeout: float | None,
    console: Console,
    as_json: bool = False,
) -> None:
    if not math.isfinite(speed) or speed < 0:
        raise UserError(f"--speed {speed} is not a finite number >= 0", "give 0 (no waiting) or a positive factor")
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise UserError(f"--timeout {timeout} is not a positive number of seconds", "give e.g. --timeout 600")
    lib = None
    if allocator and allocator != "glibc":
        lib = resolve(allocator).path
    r = trace.replay(trace_file, speed, lib, limits=limits, timeout=timeout)
    if as_json:
        click.echo(json.dumps(r))
        return
    shortened = f"; {r['gaps_shortened']} idle gap(s) shortened" if r.get("gaps_shortened") else ""
    console.print(
        f"replayed {r['operations']:,} operations on {r['threads']} threads in {r['seconds']:.3f} s: "
        f"{r['ops_per_s']:,.0f} ops/s; live at the end {r['live_bytes_end'] / 1048576:.1f} MB{shortened}"
    )


def info_command(trace_file: Path, chart: Path | None, as_json: bool, timeout: float | None, console: Console) -> None:
    if timeout is not None and not (timeout > 0 and timeout < float("inf")):
        raise UserError(f"--timeout {timeout} is not a positive number of seconds", "give e.g. --timeout 600")
    if chart:  # checked before the trace is read; matplotlib would add .png to a name without it
        if chart.suffix.lower() != ".png":
            raise UserError(
                f"--chart {chart} is not a .png file name", f"give e.g. --chart {chart.with_suffix('.png').name}"
            )
        writable_file(chart, "chart", "--chart")
    d = trace.info(trace_file, timeout=timeout)
    if as_json:
        click.echo(json.dumps(d))
        return
    t = Table("", "", title=str(trace_file))
    for k in (
        "threads",
        "events",
        "duration_s",
        "malloc",
        "calloc",
        "realloc",
        "memalign",
        "free",
        "thread_exits",
        "untracked_frees",
        "allocations_over_live",
        "objects",
    ):
        t.add_row(k.replace("_", " "), f"{d[k]:,}" if isinstance(d[k], int) else f"{d[k]:.3f}")
    t.add_row("peak live", f"{d['peak_live_bytes'] / 1048576:.2f} MB")
    t.add_row("live at the end", f"{d['final_live_bytes'] / 1048576:.2f} MB")
    hist = d["size_histogram_log2"]
    t.add_row("sizes", ", ".join(f"{1 << i}-{(1 << (i + 1)) - 1} B: {h:,}" for i, h in enumerate(hist) if h))
    console.print(t)
    if chart:
        from ..reporters.trace import write_chart  # here: the reporters package takes seconds to import

        console.print(f"chart: {write_chart(d, chart)}")
