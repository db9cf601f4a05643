"""Allocation traces: record a program once (LD_PRELOAD recorder), replay it under any allocator.

The format is defined once, in native/trace_format.h; the recorder, the reader and the replayer
are C (native/tracer.c, trace_reader.c, replay.c). This module runs them and turns their JSON
answers into tables, charts and experiment commands.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from . import native
from .config import Experiment
from .errors import UserError


def _check_trace(path: Path) -> Path:
    if not path.exists():
        raise UserError(f"trace {path} does not exist", "record one with: alloclab trace record -o FILE -- CMD")
    return path


def _replay(args: list[str], env: dict | None = None, timeout: float | None = None) -> dict:
    proc = subprocess.run([str(native.program("replay")), *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)
    if proc.returncode != 0:
        msg = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1].removeprefix("replay: ")
        raise UserError(f"cannot use the trace: {msg}", "record it again; a trace cut short or changed cannot be replayed")
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("{")), None)
    if line is None:
        raise UserError("the replayer printed no result", f"stderr: {proc.stderr.strip()[:200]}")
    return json.loads(line)


def preload_chain(*libraries: str | None) -> str:
    return " ".join(str(lib) for lib in libraries if lib)


def record(output: Path, command: list[str], allocator: str | None = None) -> dict:
    """Run `command` under the recorder (and, after it in the chain, `allocator`)."""
    if not command:
        raise UserError("no command to record", "write: alloclab trace record -o app.trace -- CMD ARGS")
    lib = None
    if allocator and allocator != "glibc":
        from .allocators import resolve
        lib = resolve(allocator).path
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.touch()
    except OSError as exc:
        raise UserError(f"cannot write {output}: {exc.strerror}", "choose a writable path with -o") from None
    env = {**os.environ, "ALLOCLAB_TRACE_FILE": str(output.resolve()),
           "LD_PRELOAD": preload_chain(native.program("liballoclab_trace.so"), lib)}
    try:
        proc = subprocess.run(command, env=env)
    except FileNotFoundError:
        raise UserError(f"command {command[0]!r} not found", "give a program on PATH or a path to one") from None
    except PermissionError:
        raise UserError(f"command {command[0]!r} is not executable", f"chmod +x {command[0]}") from None
    result = info(output)
    result["exit_code"] = proc.returncode
    result["bytes"] = output.stat().st_size
    result["bytes_per_event"] = result["bytes"] / max(1, result["events"])
    return result


def info(path: Path, points: int = 200) -> dict:
    return _replay([str(_check_trace(path)), "--info", "--points", str(points)])


def serial_curve(path: Path, points: int = 200, allocator_lib: str | None = None) -> list[list[int]]:
    env = {"LD_PRELOAD": allocator_lib} if allocator_lib else None
    return _replay([str(_check_trace(path)), "--serial", "--points", str(points)], env)["live_curve"]


def replay(path: Path, speed: float = 1.0, allocator_lib: str | None = None, direct: bool = False) -> dict:
    args = [str(_check_trace(path)), "--speed", f"{speed:g}"] + (["--direct"] if direct else [])
    return _replay(args, {"LD_PRELOAD": allocator_lib} if allocator_lib else None)


def replay_command(exp: Experiment) -> tuple[str, ...]:
    """An experiment's [workload] trace = "..." as the replica command (timing kept, then idle)."""
    params = dict(exp.workload.params)
    trace = params.pop("trace", None)
    speed = params.pop("speed", 1.0)
    if params:
        raise UserError(f"[workload] with a trace takes only trace and speed, not {', '.join(sorted(params))}", "remove them")
    if not isinstance(speed, (int, float)) or isinstance(speed, bool) or speed < 0:
        raise UserError(f"[workload] speed = {speed!r} must be a number >= 0", "1 keeps the recorded timing; 0 replays flat out")
    path = Path(trace) if os.path.isabs(str(trace)) else exp.base_dir / str(trace)
    _check_trace(path)
    info(path, points=2)          # a corrupt trace is refused before the run starts
    return (str(native.program("replay")), str(path.resolve()), "--speed", f"{speed:g}",
            "--linger", f"{exp.phases.idle + 3600:g}")


def write_chart(data: dict, out: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    curve = data["live_curve"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    a.plot([t / 1e9 for t, _ in curve], [v / 1048576 for _, v in curve], lw=1.2)
    a.set_xlabel("seconds since the recording started")
    a.set_ylabel("live requested MB")
    a.set_title("Live bytes over the recording")
    a.grid(alpha=0.3)
    hist = data["size_histogram_log2"]
    top = max((i for i, h in enumerate(hist) if h), default=0)
    b.bar(range(top + 1), hist[:top + 1])
    b.set_xticks(range(0, top + 1, 2), [f"{1 << i}" for i in range(0, top + 1, 2)], rotation=60, fontsize=7)
    b.set_xlabel("request size (bytes, log2 bucket)")
    b.set_ylabel("allocations")
    b.set_title("Request sizes")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
