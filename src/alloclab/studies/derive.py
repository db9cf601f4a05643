"""Experiments derived from a base one: what `alloclab bisect` and `alloclab sweep` run.

The base is an experiment file or a built-in workload's name (with defaults for everything else).
A derived experiment keeps the base's command or workload, phases, replicas, interval and seed,
and replaces its groups by "points" (an allocator, tunables in the environment, workload
parameters). It is written out as an experiment file and parsed again by experiment_file.parse_experiment,
so every derived experiment passes the very checks `alloclab check` makes, and the run stores the
file it really ran.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..common.errors import UserError
from ..experiment_file import Experiment, Group, Phases, Workload, load_experiment, parse_experiment
from ..run import workloads

_GROUP_NAME_BAD = re.compile(r"[^A-Za-z0-9_.+-]+")


@dataclass(frozen=True)
class Point:
    """One setting to run: an allocator, tunables (environment) and workload parameters."""

    allocator: str
    env: dict[str, str] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        extra = [f"{k}={v}" for k, v in sorted(self.env.items())] + [f"{k}={v}" for k, v in sorted(self.params.items())]
        return " ".join([self.allocator, *extra])


def group_name(index: int, label: str) -> str:
    """A group name (experiment_file._NAME: it names directories) that still says which point it is."""
    return f"p{index:02d}-{_GROUP_NAME_BAD.sub('-', label).strip('-')}"[:64]


@dataclass(frozen=True)
class Base:
    experiment: Experiment
    allocator: str  # the base experiment's baseline allocator (the default for tunable axes)
    env: dict[str, str]  # ... and its environment, kept under every point
    command: tuple[str, ...] | None


def base_experiment(
    target: str,
    *,
    replicas: int | None = None,
    interval: str | None = None,
    warmup: str | None = None,
    metric: str | None = None,
    params: dict[str, Any] | None = None,
) -> Base:
    """An experiment file (its baseline group gives the allocator and environment every point
    starts from) or a built-in workload's name (glibc, no environment)."""
    path = Path(target)
    if target.endswith(".toml") or path.is_file():
        exp = load_experiment(path)
        if params:
            raise UserError(
                "--workload-param applies to a built-in workload's name, not an experiment file",
                "set the workload's parameters in the file's [workload] table",
            )
        base = exp.group(exp.baseline)
        if any(v is not None for v in (replicas, interval, warmup, metric)):
            exp = _reparse(exp, replicas=replicas, interval=interval, warmup=warmup, metric=metric)
        return Base(exp, base.allocator, dict(base.env), base.command)
    if target not in workloads.MODELS:
        raise UserError(
            f"{target!r} is neither an experiment file nor a built-in workload",
            f"give a .toml experiment file or one of: {', '.join(sorted(workloads.MODELS))}",
        )
    lines = [
        f"name = {_v(target)}",
        f"replicas = {3 if replicas is None else replicas}",
        f"interval = {_v(interval or '2s')}",
        f"metric = {_v(metric or 'rss')}",
        "[phases]",
        f"warmup = {_v(warmup or '20s')}",
        'load = "10m"',
        "[workload]",
        f"name = {_v(target)}",
    ]
    lines += [f"{k} = {_v(v)}" for k, v in (params or {}).items()]
    lines += ["[[group]]", 'name = "base"', 'allocator = "glibc"']
    exp = parse_experiment("\n".join(lines) + "\n", f"workload {target}", Path.cwd())
    workloads.command_for(exp)  # unknown or bad parameters: refused now, in the workload's words
    return Base(exp, "glibc", {}, None)


def _reparse(exp: Experiment, **overrides: Any) -> Experiment:
    text = to_toml(exp, **{k: v for k, v in overrides.items() if v is not None})
    return parse_experiment(text, exp.name, exp.base_dir)


def derive(
    base: Base,
    name: str,
    points: list[tuple[str, Point]],
    baseline: str,
    *,
    load_s: float | None = None,
    seed: int | None = None,
) -> Experiment:
    """The experiment that runs `points` (group name, point) side by side; baseline names one of
    them. load_s replaces the load phase (bisect steps: the longest a step may run); no idle phase then."""
    exp = base.experiment
    if load_s is not None:
        exp = replace(exp, phases=Phases(exp.phases.warmup, load_s, 0.0))
    if seed is not None:
        exp = replace(exp, seed=seed)
    groups = []
    for gname, p in points:
        command = base.command
        if p.params:
            if exp.workload is None or exp.workload.name == "trace":
                raise UserError(
                    f"{p.label}: workload parameters need a built-in workload",
                    "give a workload's name (alloclab workloads) instead of a command",
                )
            command = workloads.command_for(
                replace(exp, workload=Workload(exp.workload.name, {**exp.workload.params, **p.params}))
            )
        groups.append(Group(gname, p.allocator, {**base.env, **p.env}, command))
    exp = replace(exp, name=name[:64], groups=tuple(groups), baseline=baseline)
    return parse_experiment(to_toml(exp), f"{name} (derived)", exp.base_dir)


# ---- writing an Experiment back as an experiment file -----------------------------------------------


def _v(value: Any) -> str:
    """A TOML value (strings as JSON strings: a subset of TOML's basic strings)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_v(x) for x in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(str(k))} = {_v(x)}" for k, x in value.items()) + " }"
    raise TypeError(type(value))


def to_toml(
    exp: Experiment,
    *,
    replicas: int | None = None,
    interval: str | None = None,
    warmup: str | None = None,
    metric: str | None = None,
) -> str:
    """The experiment file that parses back into `exp` (durations in seconds)."""
    lines = [
        f"name = {_v(exp.name)}",
        f"replicas = {exp.replicas if replicas is None else replicas}",
        f"interval = {_v(interval) if interval else _v(exp.interval)}",
        f"baseline = {_v(exp.baseline)}",
        f"seed = {exp.seed}",
        f"metric = {_v(metric or exp.metric)}",
        f"grace = {_v(exp.grace)}",
        f"smaps_budget = {_v(exp.smaps_budget)}",
        f"verify_every = {_v(exp.verify_every)}",
        f"port_base = {exp.port_base}",
    ]
    if exp.max_duration is not None:
        lines.append(f"max_duration = {_v(exp.max_duration)}")
    if exp.command is not None:
        lines.append(f"command = {_v(list(exp.command))}")
    lines.append("[phases]")
    if warmup or exp.phases.warmup:
        lines.append(f"warmup = {_v(warmup) if warmup else _v(exp.phases.warmup)}")
    if exp.phases.load is not None:
        lines.append(f"load = {_v(exp.phases.load)}")
    if exp.phases.idle:
        lines.append(f"idle = {_v(exp.phases.idle)}")
    if exp.load_command:
        lines += ["[load]", f"command = {_v(list(exp.load_command))}"]
    if exp.workload is not None:
        lines.append("[workload]")
        if exp.workload.name != "trace":
            lines.append(f"name = {_v(exp.workload.name)}")
        lines += [f"{json.dumps(k)} = {_v(v)}" for k, v in exp.workload.params.items()]
    for g in exp.groups:
        lines += ["[[group]]", f"name = {_v(g.name)}", f"allocator = {_v(g.allocator)}"]
        if g.env:
            lines.append(f"env = {_v(g.env)}")
        if g.command is not None:
            lines.append(f"command = {_v(list(g.command))}")
    return "\n".join(lines) + "\n"
