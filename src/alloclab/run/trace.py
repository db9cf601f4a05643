"""Allocation traces: record a program once (LD_PRELOAD recorder), replay it under any allocator.

The format is defined once, in native/trace_format.h; the recorder, the reader and the replayer
are C (native/tracer.c, trace_reader.c, replay.c). This module runs them and turns their JSON
answers into tables and experiment commands (its chart is drawn by reporters/trace.py).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

from ..common.errors import CutShortError, UserError
from ..common.settings import environment_without_preload
from ..common.signalname import how_ended
from ..experiment_file import Experiment
from ..native import build
from ..process import reaper

# Every call into the replayer has a deadline (docs/reference/trace-format.md, "Limits"): reading costs at
# most a few microseconds per event and a file unpacks to at most 4 events per byte beyond the
# first 1 M, so 60 s plus 5 s per MB of file is ample for --info and --check on this machine's
# slowest day; a replay adds its schedule (gaps capped) and 5 us per operation.
READ_TIMEOUT_BASE_S = 60.0
READ_TIMEOUT_PER_MB_S = 5.0
REPLAY_TIMEOUT_PER_OP_S = 5e-6

# The replayer's limits, as keyword -> option (defaults live in native/replay.c).
LIMIT_OPTIONS = {
    "max_gap": "--max-gap",
    "max_duration": "--max-duration",
    "max_threads": "--max-threads",
    "max_alloc": "--max-alloc",
    "max_live": "--max-live",
}


def _check_trace(path: Path) -> Path:
    if not path.exists():
        raise UserError(f"trace {path} does not exist", "record one with: alloclab trace record -o FILE -- CMD")
    if not path.is_file():
        raise UserError(
            f"trace {path} is not a regular file", "give the file written by: alloclab trace record -o FILE"
        )
    return path


def read_timeout(path: Path) -> float:
    return READ_TIMEOUT_BASE_S + READ_TIMEOUT_PER_MB_S * path.stat().st_size / 1e6


def _limit_args(limits: dict | None) -> list[str]:
    args = []
    for key, value in (limits or {}).items():
        if key not in LIMIT_OPTIONS:
            raise ValueError(f"unknown replay limit {key}")
        if value is not None:
            args += [LIMIT_OPTIONS[key], f"{value:g}" if isinstance(value, float) else str(value)]
    return args


def _kill_group(proc: subprocess.Popen) -> None:
    """The replayer runs in its own process group: end it and anything it started."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


# Exit codes of native/replay.c -> what the user is told.
_REPLAY_ERRORS = {
    2: ("the replayer refused its options: {}", "check the numbers given to alloclab trace replay"),
    3: ("cannot use the trace: {}", "record it again; a trace cut short or changed cannot be replayed"),
    4: (
        "cannot use the trace: {}",
        "raise that limit if this machine can take it (docs/reference/trace-format.md, Limits)",
    ),
    5: ("cannot replay the trace here: {}", "free memory or raise the limits named, then retry"),
}


@contextlib.contextmanager
def _sigterm_exits() -> Iterator[None]:
    """SIGTERM raises SystemExit (exit code 143) here, so cleanup runs instead of a silent death."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _replay(args: list[str], env: dict | None = None, timeout: float | None = None) -> dict:
    """Run the replayer with a deadline; its last stderr line becomes a UserError on failure. Its
    environment is alloclab's without LD_PRELOAD, plus `env`: a "glibc" replay runs on glibc."""
    timeout = timeout if timeout is not None else READ_TIMEOUT_BASE_S
    # its own process group (ended whole), SIGKILL if alloclab dies (even by SIGKILL), and a SIGTERM
    # to alloclab becomes an exit through the `finally` below, which ends the group
    proc = subprocess.Popen(
        [str(build.program("replay")), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
        env={**environment_without_preload(), **(env or {})},
        start_new_session=True,
        preexec_fn=reaper.dies_with(os.getpid()),
    )
    try:
        with _sigterm_exits():
            out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise UserError(
            f"the replayer did not finish within {timeout:.0f} s and was stopped",
            "give a longer --timeout if the trace is that large or slow",
        ) from None
    finally:
        if proc.returncode is None:  # interrupted: nothing alloclab starts outlives it
            _kill_group(proc)
    if proc.returncode != 0:
        msg = (err.strip().splitlines() or [f"exit code {proc.returncode}"])[-1].removeprefix("replay: ")
        if proc.returncode < 0:
            raise UserError(f"the replayer was {how_ended(proc.returncode)} ({msg})", "report it with the trace file")
        problem, fix = _REPLAY_ERRORS.get(proc.returncode, ("the replayer failed: {}", "report it with the trace file"))
        raise UserError(problem.format(msg), fix)
    line = next((ln for ln in out.splitlines() if ln.startswith("{")), None)
    if line is None:
        raise UserError("the replayer printed no result", f"stderr: {err.strip()[:200]}")
    return json.loads(line)


WRITE_ERRNO_AT = 48  # native/trace_format.h, TRACE_WRITE_ERRNO_AT


def write_errno(path: Path) -> int:
    """The errno of the recorder's failed write (ENOSPC: the disk filled), 0 when all was written."""
    try:
        with open(path, "rb") as f:
            head = f.read(WRITE_ERRNO_AT + 4)
    except OSError:
        return 0
    return int.from_bytes(head[WRITE_ERRNO_AT:], "little") if len(head) == WRITE_ERRNO_AT + 4 else 0


def preload_chain(*libraries: str | None) -> str:
    return " ".join(str(lib) for lib in libraries if lib)


def record(output: Path, command: list[str], allocator: str | None = None) -> dict:
    """Run `command` under the recorder (and, after it in the chain, `allocator`)."""
    if not command:
        raise UserError("no command to record", "write: alloclab trace record -o app.trace -- CMD ARGS")
    lib = None
    if allocator and allocator != "glibc":
        from ..allocators.resolution import resolve

        lib = resolve(allocator).path
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.touch()
    except OSError as exc:
        raise UserError(f"cannot write {output}: {exc.strerror}", "choose a writable path with -o") from None
    env = {
        **os.environ,
        "ALLOCLAB_TRACE_FILE": str(output.resolve()),
        "LD_PRELOAD": preload_chain(build.program("liballoclab_trace.so"), lib),
    }
    try:
        proc = subprocess.run(command, env=env)
    except FileNotFoundError:
        raise UserError(f"command {command[0]!r} not found", "give a program on PATH or a path to one") from None
    except PermissionError:
        raise UserError(f"command {command[0]!r} is not executable", f"chmod +x {command[0]}") from None
    lost = write_errno(output)
    if lost:
        kept = ""
        with contextlib.suppress(UserError):
            kept = f"; it holds the first {info(output, points=2)['events']:,} events, marked incomplete"
        what = "the disk was full" if lost in (errno.ENOSPC, errno.EDQUOT) else os.strerror(lost)
        raise CutShortError(
            f"the recording of {command[0]} into {output} lost its end: {what}{kept}",
            f"free space on {output.parent} (or record to another disk with -o) and record again",
        )
    result = info(output)
    result["exit_code"] = proc.returncode
    result["bytes"] = output.stat().st_size
    result["bytes_per_event"] = result["bytes"] / max(1, result["events"])
    return result


def info(path: Path, points: int = 200, timeout: float | None = None) -> dict:
    path = _check_trace(path)
    return _replay([str(path), "--info", "--points", str(points)], timeout=timeout or read_timeout(path))


def check(path: Path, speed: float = 1.0, limits: dict | None = None, timeout: float | None = None) -> dict:
    """What a replay at `speed` would need (threads, schedule, peak live bytes); UserError past a limit."""
    path = _check_trace(path)
    return _replay(
        [str(path), "--check", "--speed", f"{speed:g}", *_limit_args(limits)], timeout=timeout or read_timeout(path)
    )


def serial_curve(
    path: Path,
    points: int = 200,
    allocator_lib: str | None = None,
    limits: dict | None = None,
    timeout: float | None = None,
) -> list[list[int]]:
    path = _check_trace(path)
    env = {"LD_PRELOAD": allocator_lib} if allocator_lib else None
    return _replay(
        [str(path), "--serial", "--points", str(points), *_limit_args(limits)],
        env,
        timeout=timeout or 2 * read_timeout(path),
    )["live_curve"]


def replay(
    path: Path,
    speed: float = 1.0,
    allocator_lib: str | None = None,
    direct: bool = False,
    limits: dict | None = None,
    timeout: float | None = None,
) -> dict:
    """Replay under `allocator_lib`; without `timeout`, the deadline follows from a --check first."""
    path = _check_trace(path)
    if timeout is None:
        plan = check(path, 0 if direct else speed, limits)
        timeout = 2 * read_timeout(path) + 1.25 * plan["schedule_s"] + REPLAY_TIMEOUT_PER_OP_S * plan["operations"]
    args = [str(path), "--speed", f"{speed:g}", *_limit_args(limits)] + (["--direct"] if direct else [])
    return _replay(args, {"LD_PRELOAD": allocator_lib} if allocator_lib else None, timeout=timeout)


def replay_command(exp: Experiment) -> tuple[str, ...]:
    """An experiment's [workload] trace = "..." as the replica command (timing kept, then idle)."""
    params = dict(exp.workload.params)
    trace = params.pop("trace", None)
    speed = params.pop("speed", 1.0)
    if params:
        raise UserError(
            f"[workload] with a trace takes only trace and speed, not {', '.join(sorted(params))}", "remove them"
        )
    if not isinstance(speed, (int, float)) or isinstance(speed, bool) or speed < 0:
        raise UserError(
            f"[workload] speed = {speed!r} must be a number >= 0", "1 keeps the recorded timing; 0 replays flat out"
        )
    path = Path(trace) if os.path.isabs(str(trace)) else exp.base_dir / str(trace)
    check(path, float(speed))  # a corrupt trace, or one over a limit, is refused before the run starts
    return (
        str(build.program("replay")),
        str(path.resolve()),
        "--speed",
        f"{speed:g}",
        "--linger",
        f"{exp.phases.idle + 3600:g}",
    )
