"""Experiment files for tests: one builder instead of the same TOML copied into each test file.

    write_experiment(tmp / "exp.toml", "e2e", frag(native_dir, mb=8), {"glibc": "glibc", "jemalloc": lib},
                     replicas=2, interval="0.5s", phases={"warmup": "1s", "load": "5s"})

A group is `name: allocator`, or `name: {"allocator": ..., "command": [...], "env": {...}}`.
A test that is about the file's own text (a hostile key, a comment, an error at a line) writes its
TOML out where it can be read.
"""

from __future__ import annotations

from pathlib import Path

from alloclab.studies.derive import _v as toml_value  # the one TOML value writer (derive writes experiments back)

# top-level keys in the order a person writes them; anything else follows, then the tables
_FIRST = ("name", "command", "replicas", "interval", "seed", "baseline")


def frag(
    native_dir: Path, mb: int = 8, load: float = 30, idle: float | None = None, threads: int = 1, static: bool = False
) -> list[str]:
    """The frag workload as a replica command, seeded per replica ({seed}; the static build takes no seed).
    `native_dir` holds the program: alloclab's (the native_dir fixture), or the tests' own for the
    static build (test_native_dir, tests/native)."""
    argv = [str(native_dir / ("frag-static" if static else "frag")), "--load", f"{load:g}"]
    argv += ["--idle", f"{idle:g}"] if idle is not None else []
    argv += ["--mb", str(mb)]
    return argv if static else argv + ["--threads", str(threads), "--seed", "{seed}"]


def experiment_toml(
    name: str,
    command: list[str] | None,
    groups: dict[str, str | dict],
    *,
    phases: dict[str, str] | None = None,
    tables: dict[str, dict] | None = None,
    **top,
) -> str:
    """The experiment file's text: top-level keys (replicas=, interval=, seed=, baseline=, ...),
    [phases], other tables (e.g. {"workload": {...}}), then one [[group]] per group."""
    keys = {"name": name, **({"command": command} if command is not None else {}), **top}
    ordered = [k for k in _FIRST if k in keys] + [k for k in keys if k not in _FIRST]
    lines = [f"{k} = {toml_value(keys[k])}" for k in ordered]
    for table, values in [("phases", phases or {}), *(tables or {}).items()]:
        if values:
            lines.append(f"[{table}]")
            lines += [f"{k} = {toml_value(v)}" for k, v in values.items()]
    for gname, spec in groups.items():
        spec = {"allocator": spec} if isinstance(spec, str) else spec
        lines += ["[[group]]", f"name = {toml_value(gname)}"] + [f"{k} = {toml_value(v)}" for k, v in spec.items()]
    return "\n".join(lines) + "\n"


def write_experiment(path: Path, name: str, command: list[str] | None, groups: dict[str, str | dict], **kw) -> Path:
    path.write_text(experiment_toml(name, command, groups, **kw))
    return path
