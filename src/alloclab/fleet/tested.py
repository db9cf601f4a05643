"""`fleet deploy --from-run RUN [--group NAME]`: the group a fleet run decided, exactly as it was
tested — its allocator, version, library (by sha256) and environment from the run's store — with
the verdict that chose it, recorded with the deployment. RUN is the run directory, or the file
`alloclab fleet status RUN --json` wrote (small enough to copy to every host a playbook deploys on)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from ..allocators.library import sha256_file
from ..common.errors import UserError
from ..store import Store, resolve_run
from . import decision

VERDICT_KEYS = ("recommended", "decided", "elapsed_s", "looks_done", "plan", "comparisons", "groups")


@dataclass
class TestedGroup:
    name: str
    allocator: str  # as the run's group asked for it (catalog id, name or path)
    version: str | None
    library: str | None  # the library the run's units mapped (None: glibc)
    sha256: str | None
    env: dict[str, str]
    provenance: dict  # which run, which verdict: recorded with the deployment


def group_records(store: Store) -> dict[str, dict]:
    """Each group of a run as it was tested (what a deployment of it must reproduce)."""
    return {
        g["name"]: {
            "allocator": g["allocator"],
            "version": g["version"],
            "library": g["library_path"] or None,
            "library_sha256": g["library_sha256"] or None,
            "env": json.loads(g["env_json"] or "{}"),
        }
        for g in store.groups()
    }


def verdict_of(source: Path, plan: decision.LookPlan | None = None) -> dict:
    """The status (FleetStatus.as_dict) and the groups of a run directory, or as a status file holds them."""
    if source.is_file():
        try:
            data = json.loads(source.read_text())
            if not isinstance(data, dict) or any(k not in data for k in VERDICT_KEYS):
                raise ValueError
        except (OSError, ValueError):
            raise UserError(
                f"{source} is neither a run directory nor a `fleet status --json` file",
                f"give the run, or write the file with: alloclab fleet status RUN --json > {source.name}",
            ) from None
        return data
    store = Store.open_checked(resolve_run(source))
    try:
        return {"run": str(source), **decision.run_status(store, plan).as_dict(), "groups": group_records(store)}
    finally:
        store.close()


def tested_group(
    source: Path, group: str | None, even_if_undecided: bool, plan: decision.LookPlan | None = None
) -> TestedGroup:
    """The group to deploy from a fleet run: NAME, or the run's recommended group. Refused (one
    line) while the run is undecided unless even_if_undecided, and when the library at the tested
    path is no longer the file the run tested."""
    verdict = verdict_of(Path(source), plan)
    rec, groups = verdict["recommended"], verdict["groups"]
    if rec is None and not even_if_undecided:
        open_ = ", ".join(c["group"] for c in verdict["comparisons"] if c["state"] != "decided") or "every comparison"
        base = verdict["comparisons"][0]["baseline"] if verdict["comparisons"] else "the baseline"
        raise UserError(
            f"{source} is undecided ({open_} vs {base} at day {verdict['elapsed_s'] / decision.DAY:.1f})",
            "see `alloclab fleet status`, wait, or deploy anyway with --even-if-undecided --group NAME",
        )
    name = group or rec
    if name is None:
        raise UserError(f"{source} recommends no group yet", "name the group to deploy with --group NAME")
    if name not in groups:
        raise UserError(f"{source} has no group {name!r}", f"groups: {', '.join(groups)}")
    g = groups[name]
    lib, sha = g["library"], g["library_sha256"]
    if lib and sha:
        now = sha256_file(lib) if Path(lib).is_file() else None
        if now != sha:
            raise UserError(
                f"group {name}: {lib} is {'gone' if now is None else 'not the library the run tested'}"
                f" (tested sha256 {sha[:12]}…)",
                "install the tested build again, or run a new experiment",
            )
    run = verdict.get("run") or str(source)
    provenance = {
        "run": str(Path(run).resolve()),
        "from": str(Path(source).resolve()),
        "group": name,
        "recommended": name == rec,
        "even_if_undecided": rec is None,
        **g,
        "verdict": {k: verdict[k] for k in ("recommended", "decided", "elapsed_s", "looks_done")}
        | {
            "comparisons": [
                {k: c.get(k) for k in ("group", "baseline", "state", "outcome", "ratio", "ratio_ci", "look_s")}
                for c in verdict["comparisons"]
            ]
        },
        "at": time.time(),
    }
    return TestedGroup(name, g["allocator"], g["version"], lib, sha, dict(g["env"]), provenance)
