"""Built-in workload models (native programs in alloclab/native) and their side channel.

A workload is named in an experiment's [workload] table; this module turns it into an argv for
the runner, with the phase durations and the seed passed on, and reads the stats file each
workload publishes (see native/alloclab_stats.h for the layout and its sequence lock).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..common.errors import UserError
from ..experiment_file import Experiment
from ..native import build

STATS_FORMAT = struct.Struct("<QIIQQQQQQ")  # mirrors struct alloclab_stats
STATS_MAGIC = 0x3154415453434C41
PHASE_NAMES = {0: "warmup", 1: "load", 2: "idle", 3: "done"}


@dataclass(frozen=True)
class StatsSnapshot:
    phase: str
    ops: int
    live_bytes: int
    peak_live_bytes: int
    updated_ns: int


def read_stats(path: Path) -> StatsSnapshot | None:
    """A consistent snapshot of a workload's stats file, or None (absent, torn or not ours)."""
    for _ in range(3):
        try:
            raw = path.read_bytes()
        except OSError:
            return None
        if len(raw) < STATS_FORMAT.size:
            return None
        magic, version, phase, seq, ops, live, peak, updated, seq_end = STATS_FORMAT.unpack_from(raw)
        if magic != STATS_MAGIC or version != 1:
            return None
        if seq % 2 == 0 and seq == seq_end:
            return StatsSnapshot(PHASE_NAMES.get(phase, "load"), ops, live, peak, updated)
    return None


@dataclass(frozen=True)
class Model:
    program: str
    summary: str
    defaults: dict[str, Any]
    fixed: tuple[str, ...] = ()  # arguments always passed (e.g. which stress pattern)


MODELS: dict[str, Model] = {
    "tor-dircache": Model(
        "tor_dircache",
        "a Tor relay's directory cache: hourly consensuses, diffs and compression in worker threads "
        "handed to the main loop, descriptor churn, spooled directory connections, circuit cell queues "
        "(see native/tor_dircache.c)",
        {
            "hour": 6,
            "tph": 20,
            "workers": 2,
            "relays": 7000,
            "doc_kb": 2400,
            "keep": 3,
            "clients": 1000,
            "circuits": 1000,
            "churn": 0.1,
        },
    ),
    "worker-pool": Model(
        "worker_pool",
        "a multi-threaded bundler (rolldown/vite): imbalanced parse/transform/codegen phases in a "
        "persistent pool, sparse survivors, several builds, then idle",
        {"threads": 4, "modules": 1500, "builds": 0, "gap": 1.0, "survive": 0.05},
    ),
    "larson": Model(
        "stressors",
        "server simulation: threads inherit and replace each other's objects",
        {"threads": 4, "slots": 20000, "rounds": 200},
        ("--pattern", "larson"),
    ),
    "xmalloc": Model(
        "stressors",
        "producer/consumer: every free happens in another thread",
        {"threads": 4, "slots": 20000, "rounds": 200},
        ("--pattern", "xmalloc"),
    ),
    "sawtooth": Model(
        "stressors",
        "retain to --mb, drain to 5%, repeat every --period seconds",
        {"mb": 64, "period": 10},
        ("--pattern", "sawtooth"),
    ),
    "frag": Model(
        "frag",
        "the demo: churning heap with scattered long-lived survivors and transient large buffers; "
        "frees 99% of survivors before idling (time-driven, not op-deterministic)",
        {"threads": 4, "mb": 64},
    ),
}


def command_for(exp: Experiment) -> tuple[str, ...]:
    """argv of the experiment's [workload], with phases and seed passed on.

    Replica i of every group gets the same seed, so groups are compared on identical operation
    sequences while replicas within a group differ. The workload idles past the planned end; the
    runner stops it."""
    wl = exp.workload
    assert wl is not None
    if wl.name == "trace":
        from . import trace

        return trace.replay_command(exp)
    model = MODELS.get(wl.name)
    if model is None:
        raise UserError(f"unknown workload {wl.name!r}", f'use one of: {", ".join(sorted(MODELS))}, or trace = "file"')
    params = dict(model.defaults)
    for key, value in wl.params.items():
        if key not in model.defaults and key != "seed":
            raise UserError(
                f"workload {wl.name} has no parameter {key!r}",
                f"use one of: {', '.join(sorted(model.defaults)) or '(none)'}",
            )
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise UserError(f"workload {wl.name}: {key} = {value!r} must be a non-negative number", "fix the value")
        params[key] = value
    load = exp.phases.load if exp.phases.load is not None else 60.0
    argv = [
        str(build.program(model.program)),
        *model.fixed,
        "--load",
        f"{exp.phases.warmup + load:g}",
        "--idle",
        f"{exp.phases.idle + 3600:g}",
        "--seed",
        str(params.pop("seed", "{seed}")),
    ]
    for key, value in params.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return tuple(argv)


# What a parameter's number counts, where its name does not say (docs/how-to/workloads.md): `alloclab
# workloads` shows it beside the default.
PARAM_UNITS = {
    "hour": "s per simulated hour",
    "tph": "ticks per simulated hour",
    "clients": "requests per hour",
    "churn": "share of descriptors per hour",
    "keep": "consensuses",
    "gap": "s between builds",
    "survive": "share of modules",
    "period": "s",
}


def describe() -> list[tuple[str, str, str]]:
    def shown(k: str, v: Any) -> str:
        return f"{k}={v} ({PARAM_UNITS[k]})" if k in PARAM_UNITS else f"{k}={v}"

    return [(name, m.summary, ", ".join(shown(k, v) for k, v in m.defaults.items())) for name, m in MODELS.items()]
