"""What `alloclab run` checks before it creates anything (run directory, store, cgroup, process),
callable on its own: `alloclab check` runs all of it, `alloclab run` the parts Runner does not.

Runner.__init__ resolves allocators, tunables and the replica commands itself; `prepare` does the
same steps without creating anything, so `alloclab check` and `run` refuse exactly the same files.
"""
from __future__ import annotations

from pathlib import Path

from . import allocators, tunables, workloads
from .allocators import AllocatorSpec
from .config import Experiment, check_path_text
from .errors import UserError
from .runner import _resolve_program, _substitute


def _sample_values(exp: Experiment, group: str, replica: int) -> dict[str, str]:
    return {"replica": str(replica), "group": group, "port": str(exp.port_base), "workdir": ".",
            "seed": str(exp.seed * 1000 + replica)}


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
    programs = {_substitute(exp.load_command[:1], _sample_values(exp, g.name, i))[0]
                for g in exp.groups for i in range(1, exp.replicas + 1)}
    for program in sorted(programs):
        try:
            _resolve_program(program, exp.base_dir)
        except UserError as err:
            raise UserError(f"[load] {err.problem}", err.fix) from None


def prepare(exp: Experiment) -> dict[str, AllocatorSpec]:
    """Every check `alloclab run` makes before creating anything; the groups' allocator specs."""
    specs = {g.name: allocators.resolve(g.allocator, exp.base_dir, g.env) for g in exp.groups}
    for g in exp.groups:
        if specs[g.name].kind != "bundled":
            tunables.validate(g.env, specs[g.name].family, specs[g.name].path, g.name)
        argv = g.command or exp.command or workloads.command_for(exp)
        _resolve_program(_substitute(argv[:1], _sample_values(exp, g.name, 1))[0], exp.base_dir)
    check_load_command(exp)
    return specs
