"""What `alloclab run` checks before it creates anything (run directory, store, cgroup, process),
callable on its own: `alloclab check` runs all of it, and Runner.__init__ calls `prepare` for its
allocator specs and commands, so `alloclab check` and `run` refuse exactly the same files.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..allocators import loaderenv, resolution, tunables
from ..allocators.library import AllocatorSpec
from ..common import settings
from ..common.errors import UserError
from ..experiment_file import Experiment, Group, check_path_text, substitute
from . import scenarios, workloads
from .scenarios import Scenario


def _sample_values(exp: Experiment, group: str, replica: int) -> dict[str, str]:
    """Placeholder values for checking a command before any replica (or its workdir) exists."""
    return exp.placeholder_values(group, replica, exp.port_base, ".")


def resolve_program(argv0: str, base_dir: Path) -> str:
    """A command's program: found (a path relative to the experiment file, or on PATH),
    executable, and a program or a #! script."""
    if "/" in argv0:
        path = argv0 if os.path.isabs(argv0) else str((base_dir / argv0).resolve())
    else:
        path = shutil.which(argv0) or ""
    if not path or not os.path.isfile(path):
        raise UserError(
            f"command {argv0!r} not found",
            "give a path to an executable (relative to the experiment file) or a program on PATH",
        )
    _check_executable(path, 0)
    return path


SHEBANG_MAX = 256  # the kernel reads this much of a script's first line (BINPRM_BUF_SIZE)
INTERPRETER_DEPTH = 4  # a script's interpreter may itself be a script, this many times


def _check_executable(path: str, depth: int) -> None:
    """What execve would refuse, refused now: not executable, neither ELF nor #!, or a #! line
    whose interpreter is missing, not executable, or itself such a script."""
    if not os.stat(path).st_mode & 0o111 or not os.access(path, os.X_OK):
        raise UserError(f"command {path} is not executable", f"chmod +x {path}")
    with open(path, "rb") as f:
        head = f.read(SHEBANG_MAX)
    if head.startswith(b"\x7fELF"):
        return
    if not head.startswith(b"#!"):
        raise UserError(
            f"command {path} is neither a program nor a script with #!", "give a compiled program or a script"
        )
    line = head[2:].split(b"\n", 1)[0]
    words = line.replace(b"\t", b" ").split()
    if b"\n" not in head and len(head) == SHEBANG_MAX or not words:
        raise UserError(
            f"script {path} has no interpreter on its #! line (or the line is over {SHEBANG_MAX} bytes)",
            "start it with e.g. #!/bin/sh",
        )
    interpreter = os.fsdecode(words[0])
    if not os.path.isabs(interpreter) or not os.path.isfile(interpreter):
        raise UserError(
            f"script {path} names the interpreter {interpreter!r} on its #! line, which does not exist",
            "install it, or fix the #! line (e.g. #!/usr/bin/env python3)",
        )
    if depth >= INTERPRETER_DEPTH:
        raise UserError(f"script {path}: its #! interpreters nest more than {INTERPRETER_DEPTH} deep", "name a program")
    try:
        _check_executable(interpreter, depth + 1)
    except UserError as err:
        raise UserError(f"script {path}: {err.problem}", err.fix) from None


def check_output(output: Path | None) -> None:
    """-o: a path the kernel takes, and a directory (or nothing yet) rather than a file."""
    if output is None:
        return
    check_path_text(str(output), "-o")
    try:
        if output.exists() and not output.is_dir():
            raise UserError(f"output directory {output} is a file", "choose another with -o")
    except OSError as exc:
        raise UserError(f"cannot use output directory {output}: {exc.strerror}", "choose another with -o") from None


def check_load_command(exp: Experiment) -> None:
    """[load] command's program, found and executable for every group and replica, now rather
    than when the load phase begins (after the replicas have started)."""
    if not exp.load_command:
        return
    programs = {
        substitute(exp.load_command[:1], _sample_values(exp, g.name, i))[0]
        for g in exp.groups
        for i in range(1, exp.replicas + 1)
    }
    for program in sorted(programs):
        try:
            resolve_program(program, exp.base_dir)
        except UserError as err:
            raise UserError(f"[load] {err.problem}", err.fix) from None


def command_template(exp: Experiment, g: Group, scenario: Scenario | None = None) -> tuple[str, ...]:
    """A group's command with its program resolved (the other arguments keep their placeholders)."""
    if scenario is not None:
        argv = scenario.command(g)
    else:
        argv = g.command or exp.command or workloads.command_for(exp)
    return (resolve_program(substitute(argv[:1], _sample_values(exp, g.name, 1))[0], exp.base_dir), *argv[1:])


@dataclass(frozen=True)
class Preparation:
    specs: dict[str, AllocatorSpec]  # group name -> its resolved allocator
    commands: dict[str, tuple[str, ...]]  # group name -> command_template
    scenario: Scenario | None  # the experiment's scenario, prepared (checked)


def _resolve_group(exp: Experiment, g: Group) -> AllocatorSpec:
    """The group's allocator; a refusal names the group (a typo is found where it is)."""
    try:
        return resolution.resolve(g.allocator, exp.base_dir, g.env)
    except UserError as exc:
        raise type(exc)(f"group {g.name}: {exc.problem}", exc.fix) from None


def prepare(exp: Experiment) -> Preparation:
    """Every check `alloclab run` makes before creating anything; the groups' allocator specs and commands."""
    inherited = {k: v for k, v in settings.environment_without_preload().items() if loaderenv.affects_loading(k)}
    loaderenv.check(inherited, "alloclab's own environment (replicas inherit it)")
    for g in exp.groups:  # before anything runs under them, the probe included
        loaderenv.check(g.env, f"group {g.name}: env")
    specs = {g.name: _resolve_group(exp, g) for g in exp.groups}
    scenario = scenarios.of(exp)
    commands = {}
    for g in exp.groups:
        if specs[g.name].kind != "bundled":
            tunables.validate(g.env, specs[g.name].family, specs[g.name].path, g.name, specs[g.name].version)
            tunables.validate_values(g.env, specs[g.name].family, specs[g.name].path, g.name)
        commands[g.name] = command_template(exp, g, scenario)
    check_load_command(exp)
    if scenario is not None:
        scenario.prepare(lambda program: resolve_program(program, exp.base_dir))
    return Preparation(specs, commands, scenario)
