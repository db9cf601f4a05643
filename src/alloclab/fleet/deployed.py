"""Which generation each unit follows: the deployed state the collector labels and verifies by.

Every `fleet apply` and `fleet deploy` is a generation under deploy.state_dir (its manifest,
the backups, and the plan as applied); `fleet rollback` marks the newest one rolled back. A unit
follows the newest generation not rolled back that lists it, once that generation has restarted
it: while its main process is older than the generation (a later batch of a canary rollout not
reached yet) it still follows the generation before, so a unit the rollout has not restarted is
never "off its allocator". A unit no live generation lists runs as before alloclab (allocator
unknown) when a rolled-back one listed it, and as the collector's plan says when none ever did.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from ..common import rootfs
from ..common.errors import UserError
from .deploy import load_manifest, state_dir
from .plan import load_plan

ROLLED_BACK = ".rolled-back"
# a process that started this long before its generation was applied was not restarted by it
# (the stamps come from two clocks: the manifest's time.time() and /proc's start ticks from boot)
FOLLOW_SLACK_S = 1.0
NONE = "none"  # the generation label of a unit no live generation lists


@dataclass(frozen=True)
class Generation:
    name: str  # its directory under state_dir/applied, without the rolled-back mark
    number: int  # 1, 2, ... in the order applied (rolled-back ones keep their number)
    applied_at: float  # unix time, before the first unit was restarted
    rolled_back: bool
    groups: dict[str, dict | None] = field(default_factory=dict)  # unit -> its group as applied (None: plan unknown)
    source: str = ""  # the plan file, and for a deploy from a run, which run


@dataclass(frozen=True)
class Following:
    """What one unit runs now, as alloclab knows it."""

    generation: Generation | None  # None: no live generation lists it
    group: dict | None  # None: allocator unknown (returned to the state before alloclab)

    @property
    def label(self) -> str:
        return self.generation.name if self.generation else NONE

    @property
    def number(self) -> int:
        return self.generation.number if self.generation else 0


def _applied_dir(root: Path) -> Path:
    return state_dir(root) / "applied"


def signature(root: Path) -> tuple[str, ...]:
    """The generation directories' names: changes exactly when an apply, deploy or rollback ran
    (cheap enough for every tick: one directory listing)."""
    fs = rootfs.Root(root)
    where = _applied_dir(root)
    return tuple(sorted(fs.listdir(where))) if fs.is_dir(where) else ()


def _stamp_time(name: str) -> float:
    """An older manifest without applied_at: the local time its directory name records."""
    return datetime.strptime(name.split(".")[0], "%Y%m%d-%H%M%S").timestamp()


def _plan_data(fs: rootfs.Root, gen_dir: Path, manifest: dict, host: str | None) -> dict:
    """The plan as the generation applied it: its own copy, else the plan file it names when that
    file is still the one applied (the manifest's plan_id is the first 12 hex of its sha256)."""
    copy = gen_dir / "plan.json"
    if fs.is_file(copy):
        return json.loads(fs.read_text(copy))
    path = Path(manifest["plan"])
    if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest()[:12] != manifest.get("plan_id"):
        raise UserError(
            f"{gen_dir}: its plan {path} is gone or rewritten since it was applied",
            "roll it back, or apply the plan again (a new generation keeps its own copy)",
        )
    return load_plan(path, host).data


def deployed_group_name(plan: dict, group: dict) -> str:
    """The group label of a unit in a generation: for a deploy from a run (`--from-run`), the run's
    group it deploys (e.g. jemalloc-bg), else the plan's group name."""
    tested = plan.get("deployed_from") or {}
    return tested.get("group") or group["name"]


def generations(
    root: Path,
    host: str | None = None,
    known: dict[str, Generation] | None = None,
    names: tuple[str, ...] | None = None,
) -> tuple[list[Generation], bool, list[str]]:
    """Every generation recorded under the root, in the order applied; False when a directory has
    no manifest yet (an apply writing it, or one that died before it: read again later); and the
    problems met. Nothing here stops a collector: a generation whose plan is gone or rewritten
    (one applied before generations kept a copy) lists its units with their group unknown; one
    whose manifest rollback would refuse is left out. `known`: directory name -> its generation as
    read before (a directory's manifest and plan copy never change once both are written), kept
    up to date here, so a caller that asks every tick reads only what is new."""
    fs = rootfs.Root(root)
    where = _applied_dir(root)
    known = {} if known is None else known
    out, complete, problems = [], True, []
    names = signature(root) if names is None else names  # `names`: the signature the caller just read
    for i, name in enumerate(sorted(names, key=lambda n: (n.split(".")[0], n)), 1):
        gen_dir = where / name
        if name in known:
            out.append(dataclasses.replace(known[name], number=i))
            continue
        if not fs.is_file(gen_dir / "manifest.json"):
            complete = False
            continue
        try:
            manifest = load_manifest(gen_dir / "manifest.json", root)
        except UserError as err:
            problems.append(err.problem)
            continue
        try:
            plan = _plan_data(fs, gen_dir, manifest, host)
            by_name = {g["name"]: g for g in plan["groups"]}
            groups = {
                a["unit"]: {**by_name[a["group"]], "name": deployed_group_name(plan, by_name[a["group"]])}
                for a in plan["assignments"]
                if a["unit"] in manifest["units"]
            }
        except (UserError, OSError, ValueError, KeyError, TypeError) as err:
            problems.append(
                err.problem if isinstance(err, UserError) else f"{gen_dir}/plan.json is not a plan alloclab wrote"
            )
            plan, groups = {}, {}
        groups = {unit: groups.get(unit) for unit in manifest["units"]}
        tested = plan.get("deployed_from") or {}
        gen = Generation(
            name=name.removesuffix(ROLLED_BACK),
            number=i,
            applied_at=float(manifest.get("applied_at") or _stamp_time(name)),
            rolled_back=name.endswith(ROLLED_BACK),
            groups=groups,
            source=manifest["plan"] + (f" (run {tested['run']})" if tested.get("run") else ""),
        )
        out.append(gen)
        if fs.is_file(gen_dir / "plan.json") and plan:  # complete: never read again
            known[name] = gen
    return out, complete, problems


def following(gens: list[Generation], unit: str, plan_group: dict, started: float | None) -> Following:
    """What `unit` runs: see the module's docstring. `started`: unix time its main process started
    (None while it has none); `plan_group`: its group in the collector's plan."""
    live = [g for g in gens if not g.rolled_back and unit in g.groups]
    if live:
        newest = live[-1]
        if started is None or started >= newest.applied_at - FOLLOW_SLACK_S:
            return Following(newest, newest.groups[unit])
        if len(live) > 1:  # not restarted by the newest yet: it runs the one before
            return Following(live[-2], live[-2].groups[unit])
        return Following(None, None if any(unit in g.groups for g in gens) else plan_group)
    if any(unit in g.groups for g in gens):
        return Following(None, None)  # every generation that moved it was rolled back
    return Following(None, plan_group)
