"""Fleet mode's changes to the units: apply a plan, deploy an allocator, roll back.

Life cycle: `plan` (fleet/plan.py) -> `apply` (one drop-in per unit, reload, restart in batches,
verify each unit's new main process maps its group's allocator, stop at the first failure) ->
`collect` (sample the units into a run store, resumable; fleet/collector.py) -> `deploy` the winner
the same way, in canary batches under the guards (fleet/rollout.py) and, for the first batch, its
peers' judgement (fleet/canary.py) -> `rollback` restores the previous drop-ins byte for byte.
systemd is reached only through the `Units` seam (fleet/systemd.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

from ..allocators import library as allocator_library, loaderenv
from ..capture import sampler
from ..common import rootfs, timefmt
from ..common.errors import UserError
from ..experiment_file import load_experiment
from . import canary, rollout, unitfile
from .plan import Plan, check_group, check_loadable, make_plan
from .systemd import Units, validate_unit

DROPIN_NAME = "50-alloclab.conf"
CANARY = "the canary"  # a trip's "unit" when the canary batch failed against its peers


def dropin_path(root: Path, unit: str) -> Path:
    return root / "etc" / "systemd" / "system" / f"{validate_unit(unit)}.d" / DROPIN_NAME


def dropin_text(group: dict, plan_id: str) -> str:
    """The drop-in for one unit. Every value goes through unitfile, which refuses or escapes
    whatever systemd would read as more than a value (docs/security.md)."""
    check_group(group, f"plan {plan_id}")
    lines = [
        unitfile.comment_line(
            f"Written by alloclab fleet (plan {plan_id}, group {group['name']}: {group['allocator']})."
        ),
        "# Remove with: alloclab fleet rollback",
        "[Service]",
    ]
    if group["library"]:
        lines.append(unitfile.environment_line("LD_PRELOAD", group["library"], f"group {group['name']}"))
    else:
        lines.append("UnsetEnvironment=LD_PRELOAD")
    for k, v in sorted(group["env"].items()):
        lines.append(unitfile.environment_line(k, v, f"group {group['name']}"))
    return "\n".join(lines) + "\n"


def state_dir(root: Path) -> Path:
    return root / "var" / "lib" / "alloclab" / "fleet"


def _check_library(group: dict) -> None:
    loaderenv.check(group["env"], f"group {group['name']}: env")
    if group["library"]:
        lib = Path(group["library"])
        if not lib.exists():
            raise UserError(f"group {group['name']}: {lib} is gone", "rebuild it or make a new plan")
        allocator_library.check_preload_safe(lib)
        if allocator_library.sha256_file(lib) != group["sha256"]:
            raise UserError(f"group {group['name']}: {lib} changed since the plan was made", "make a new plan")


def apply_plan(
    units: Units,
    plan: Plan,
    batch: int | str,
    dry_run: bool,
    say=print,
    timeout: float = 30.0,
    guards: rollout.Guards | None = None,
    settle: float = 0.0,
    scope: str = "all",
    sample_every: float = 1.0,
    history: Path | None = None,
    peer_rule: canary.PeerRule | None = None,
    baseline: str = "none",
    baseline_restart: bool = True,
) -> dict:
    """Back up every drop-in, then batch by batch: write the batch's drop-ins, reload, restart,
    verify. Without guards the first failure stops the rollout (undo: `fleet rollback`). With
    guards (a canary rollout, `fleet deploy`) each batch also settles for `settle` seconds under
    watch, and a failure or a tripped guard rolls back automatically: the tripped batch
    (scope "batch") or everything this apply restarted (scope "all"), byte for byte. `history`: the
    collector's run of these units, where the increase guard reads each old process's level at the
    new process's age (rollout.memory_trip). `peer_rule` (with guards): the first batch, the canary,
    is also judged against a baseline cohort of untouched units (`baseline`: auto, N, P% or none;
    restarted at the same moment on their own drop-ins unless not `baseline_restart`) by
    fleet.canary: FAIL rolls back as a trip does, MORE TIME at the maximum settle time does what the
    rule's `undecided` says (hold: stop here, the canary kept)."""
    root = units.root
    present = set(units.list_units())
    missing = [u for u in plan.data["units"] if u not in present]
    if missing:
        raise UserError(
            f"the plan no longer matches the units present: {', '.join(missing[:5])} missing",
            "make a new plan with: alloclab fleet plan",
        )
    if scope not in ("all", "batch"):
        raise UserError(f"--rollback-scope {scope!r} is not known", "use all or batch")
    groups = {g["name"]: g for g in plan.data["groups"]}
    for g in groups.values():
        _check_library(g)
    # on the host the units run on: their sandbox as systemd has it now, and the files' permissions
    states = units.unit_states([a["unit"] for a in plan.assignments], sandbox=True)
    check_loadable(plan.assignments, groups, lambda a: states[a["unit"]].sandbox, True)
    plan_id = hashlib.sha256(plan.path.read_bytes()).hexdigest()[:12]
    writes = [
        (a["unit"], dropin_path(root, a["unit"]), dropin_text(groups[a["group"]], plan_id)) for a in plan.assignments
    ]
    sizes = rollout.batch_sizes(batch, len(writes))
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    batches = [writes[s : s + n] for s, n in zip(starts, sizes)]
    past = _open_history(history) if guards is not None else None  # a wrong --history fails the dry run too
    judge, peers_note = _peer_judge(
        plan, batches, peer_rule if guards is not None else None, baseline, baseline_restart
    )
    if dry_run:
        for _unit, path, text in writes:
            say(f"would write {path}:\n" + "".join(f"    {ln}\n" for ln in text.splitlines()))
        for i, b in enumerate(batches, 1):
            peers = judge is not None and i == 1
            say(
                f"batch {i}: write its drop-ins, systemctl daemon-reload, systemctl restart {' '.join(u for u, _, _ in b)}"
                + (
                    f" and{'' if baseline_restart else ' not'} its {len(judge.baseline)} peers {' '.join(judge.baseline)}"
                    if peers
                    else ""
                )
                + ", then check active and allocator mapped"
                + (f", then settle {settle:g} s under the guards" if guards else "")
                + (f", judged against its peers (up to {judge.rule.max_settle_s:g} s)" if peers else "")
            )
        if guards is not None and peer_rule is not None:
            say(f"canary: {peers_note}")
        return {
            "dry_run": True,
            "units": len(writes),
            "batches": len(batches),
            "host": plan.data.get("host"),
            "would_change": [{"unit": u, "group": _group_of(plan, u), "dropin": str(p)} for u, p, _ in writes],
            "canary": judge.as_dict() if judge is not None else ({"note": peers_note} if peer_rule else None),
        }
    if guards is not None and peer_rule is not None and judge is None:
        say(f"canary: {peers_note}")  # why the guards alone judge it
    # back up what is there (or that nothing is), byte for byte, before touching anything; every
    # path under the root is reached without following links (rootfs)
    fs = rootfs.Root(root)
    for _, path, _ in writes:  # a planted link is refused before anything is written
        if fs.exists(path) and not fs.is_file(path):
            raise fs._refuse(fs._parts(path), "not a regular file (a symbolic link?)")
    generation = state_dir(root) / "applied" / timefmt.local_stamp()
    n = 0
    while fs.exists(generation):
        n += 1
        generation = generation.with_name(f"{generation.name.split('.')[0]}.{n}")
    fs.mkdirs(generation / "backup")
    manifest = {"plan": str(plan.path), "plan_id": plan_id, "applied_at": time.time(), "units": {}}
    for unit, path, _ in writes:
        backup = generation / "backup" / unit
        if fs.exists(path):
            fs.write(backup, fs.read_bytes(path))
            manifest["units"][unit] = {"dropin": str(path), "had_file": True, "dir_existed": True}
        else:
            manifest["units"][unit] = {"dropin": str(path), "had_file": False, "dir_existed": fs.is_dir(path.parent)}
    fs.write(generation / "manifest.json", json.dumps(manifest, indent=2))
    # the plan as applied, kept with its generation: the collector labels and verifies each unit by
    # the generation it follows (fleet/deployed.py), even after a later deploy rewrote the plan file
    fs.write(generation / "plan.json", json.dumps(plan.data, indent=2))
    done: list[str] = []
    watched: dict[str, dict] = {}
    for i, b in enumerate(batches, 1):
        names = [u for u, _, _ in b]
        old = {u: old_process(units, u, past) for u in names}  # each unit's level on its old allocator
        peers = judge if i == 1 else None
        for _unit, path, text in b:  # later batches keep their old drop-ins until their turn
            fs.write(path, text)
        units.daemon_reload()
        if peers is not None:
            peers.old_kb = {**{u: old[u]["kb"] for u in names}, **{u: _rss_kb(units, u) for u in peers.baseline}}
        for unit in _interleave(names, peers.baseline if peers is not None and peers.restart_baseline else []):
            units.restart(unit)  # the canary and its peers at the same moment, in turn
        if peers is not None:
            peers.restarted()
        problem = None
        for unit in names:
            detail = _verify_unit(units, unit, groups[_group_of(plan, unit)], timeout)
            if detail:
                problem = (unit, f"failed verification after restart: {detail}")
                break
        if problem is None and peers is not None and peers.restart_baseline:
            problem = _wait_active(units, peers.baseline, timeout, "a peer of the canary: not active after its restart")
        if problem is None and guards is not None:
            problem = _settle(units, names, old, guards, settle, sample_every, watched, peers)
        if peers is not None:
            fs.write(generation / "canary.json", json.dumps(peers.as_dict(), indent=2, default=str))
            if peers.looks:
                say(peers.verdict_line())
            if problem is None and peers.action == canary.FAIL:
                problem = (CANARY, peers.failure())
            elif problem is None and peers.action == "hold":
                done.extend(names)
                say(
                    f"batch 1/{len(batches)}: held: the canary stays deployed, nothing else is changed; "
                    f"go on with the same command and a longer --max-settle, or undo it with: alloclab fleet rollback --root {root}"
                )
                return {
                    "dry_run": False,
                    "units": len(done),
                    "batches": len(batches),
                    "generation": str(generation),
                    "host": plan.data.get("host"),
                    "changed": _changes(units, plan, done),
                    "tripped": None,
                    "held": {"batch": 1, "why": peers.verdict_line()},
                    "watched": watched,
                    "canary": peers.as_dict(),
                }
        if problem is not None:
            unit, why = problem
            if guards is None:
                say(
                    f"batch {i}: {unit}: {why}; stopping here ({len(done)} units done, "
                    f"{len(writes) - len(done) - len(b)} not restarted)"
                )
                raise UserError(
                    f"{unit} {why}", f"fix it, or undo everything with: alloclab fleet rollback --root {root}"
                )
            undo = names if scope == "batch" else done + names
            say(
                f"batch {i}: {unit} {why}; rolling back {len(undo)} units ({scope})"
                if unit == CANARY
                else f"batch {i}: {unit}: {why}: guard tripped; rolling back {len(undo)} units ({scope})"
            )
            restore(units, generation, manifest, undo, max(sizes), say)
            if scope == "all":
                fs.rename(generation, generation.with_name(generation.name + ".rolled-back"))
            kept = [u for u in done if u not in undo]
            return {
                "dry_run": False,
                "units": len(done),
                "batches": len(batches),
                "generation": str(generation),
                "host": plan.data.get("host"),
                "changed": _changes(units, plan, kept),
                "tripped": {"batch": i, "unit": unit, "why": why, "rolled_back": undo, "scope": scope},
                "watched": watched,
                "canary": _judgement(judge, peers_note),
            }
        done.extend(names)
        say(
            f"batch {i}/{len(batches)}: {', '.join(names)} active and verified"
            + (f", settled {settle:g} s within the guards" if guards is not None else "")
        )
    return {
        "dry_run": False,
        "units": len(done),
        "batches": len(batches),
        "generation": str(generation),
        "host": plan.data.get("host"),
        "changed": _changes(units, plan, done),
        "tripped": None,
        "watched": watched,
        "canary": _judgement(judge, peers_note),
    }


def _peer_judge(
    plan: Plan, batches: list, rule: canary.PeerRule | None, baseline: str, restart: bool
) -> tuple[canary.PeerJudge | None, str]:
    """The first batch's judge against its peers (None: not judged so), and what was chosen and why."""
    if rule is None:
        return None, "peer judgement off"
    first = [u for u, _, _ in batches[0]]
    untouched = [u for b in batches[1:] for u, _, _ in b]
    n, why = canary.baseline_size(baseline, len(first), len(untouched))
    if not n:
        return None, why
    return canary.PeerJudge(
        rule, first, canary.choose_baseline(untouched, n, plan.data.get("seed", 0)), restart, note=why
    ), why


def _judgement(judge: canary.PeerJudge | None, note: str) -> dict | None:
    return judge.as_dict() if judge is not None else {"note": note}


def _interleave(a: list[str], b: list[str]) -> list[str]:
    """a[0], b[0], a[1], b[1], ... then the rest of the longer."""
    out = [x for pair in zip(a, b) for x in pair]
    return out + a[len(b) :] + b[len(a) :]


def _wait_active(units: Units, names: list[str], timeout: float, why: str) -> tuple[str, str] | None:
    """The first of `names` not active `timeout` s from now, and why (None: all are)."""
    deadline = time.monotonic() + timeout
    for unit in names:
        while not units.is_active(unit) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not units.is_active(unit):
            return unit, why
    return None


def _changes(units: Units, plan: Plan, names: list[str]) -> list[dict]:
    """What an apply changed, for --json: each unit's group, drop-in and new main process."""
    return [
        {
            "unit": u,
            "group": _group_of(plan, u),
            "dropin": str(dropin_path(units.root, u)),
            "main_pid": units.main_pid(u),
        }
        for u in names
    ]


def _open_history(run: Path | None):
    """The collector's store of these units, read-only (None without one)."""
    if run is None:
        return None
    from ..store import DB_NAME, Store

    db = run / DB_NAME if run.is_dir() else run
    if not db.is_file():
        raise UserError(f"--history {run}: no collector run there", "give the -o directory of `alloclab fleet collect`")
    return Store.open_readonly(db)


def old_process(units: Units, unit: str, past) -> dict:
    """A unit's process before its restart: its level now (kB), its age (s), and its level along its
    life by age, [(age, kB)], from the collector's store where it has the process."""
    ident = _identity(units, unit)
    age = sampler.process_age(ident[1]) if ident else None
    curve = []
    if ident and past is not None:
        born = time.time() - age
        curve = [(t - born, kb) for t, kb in past.process_curve(unit, *ident)]
    return {"kb": _rss_kb(units, unit), "age": age, "curve": curve}


def _rss_kb(units: Units, unit: str) -> int | None:
    """RSS of a unit's processes now (kB), None when it has none."""
    pids = units.pids(unit)
    if not pids:
        return None
    return sum((sampler.read_statm(p) or (0, 0))[1] for p in pids)


def _settle(
    units: Units,
    names: list[str],
    old: dict[str, dict],
    guards: rollout.Guards,
    settle: float,
    sample_every: float,
    watched: dict[str, dict] | None = None,
    peers: canary.PeerJudge | None = None,
) -> tuple[str, str] | None:
    """Watch a restarted batch for `settle` seconds, and at least `guards.persist` samples of each
    running unit; the first unit that trips a guard, and why.
    Each sample is taken with the new process's age, so the increase guard compares like with like
    (rollout.memory_trip); what was watched goes into `watched` (the deploy's --json, tests).
    With `peers` (the canary batch judged against its peers) each round's readings go to the judge
    too, and the watch goes on until it is final (at most its maximum settle time); a FAIL ends the
    watch at once (the caller reads peers.action)."""
    memory: dict[str, list[int]] = {u: [] for u in names}
    ages: dict[str, list[float]] = {u: [] for u in names}
    identity = {u: _identity(units, u) for u in names}
    restarts = {u: 0 for u in names}
    warmup = {u: rollout.effective_warmup(guards, old[u]["age"], settle) for u in names}
    if watched is not None:
        for u in names:
            watched[u] = {
                "kb": memory[u],
                "ages": ages[u],
                "old_kb": old[u]["kb"],
                "old_age": old[u]["age"],
                "warmup": warmup[u],
                "old_curve_points": len(old[u]["curve"]),
            }
    deadline = time.monotonic() + settle
    while True:
        readings: dict[str, int | None] = {}
        for unit in names:
            now = _identity(units, unit)
            if now is None:
                # not running: a crash, or between the restarts of a crash loop (systemd's Restart=)
                restarts[unit] += identity[unit] is not None
                identity[unit] = None
            elif identity[unit] is not None and now != identity[unit]:
                restarts[unit] += 1
            if now is not None:
                identity[unit] = now
                memory[unit].append(_rss_kb(units, unit) or 0)
                ages[unit].append(sampler.process_age(now[1]))
                readings[unit] = memory[unit][-1]
            why = rollout.restart_trip(restarts[unit], guards) or rollout.memory_trip(
                memory[unit], old[unit]["kb"], guards, ages[unit], warmup[unit], old[unit]["curve"] or None
            )
            if why:
                return unit, why
        if peers is not None:
            peers.record(readings, lambda u: _rss_kb(units, u))
            if peers.outcome == canary.FAIL:
                return None
        # the settle time is over once every running unit also has the samples a memory guard
        # needs to trip: a starved machine can spend it on two samples (else "settled within the
        # guards" would be said of a unit the guard could not have caught)
        left = deadline - time.monotonic()
        if (
            left <= 0
            and all(len(memory[u]) >= guards.persist for u in names if identity[u] is not None)
            and (peers is None or peers.final)
        ):
            break
        time.sleep(min(sample_every, left) if left > 0 else sample_every)
    stopped = [u for u in names if identity[u] is None]
    if stopped:
        return stopped[0], "not running at the end of the settle time"
    return None


def _identity(units: Units, unit: str) -> tuple[int, int] | None:
    pid = units.main_pid(unit)
    st = sampler.read_stat(pid) if pid else None
    return st.identity if st else None


def _group_of(plan: Plan, unit: str) -> str:
    return next(a["group"] for a in plan.assignments if a["unit"] == unit)


def _verify_unit(units: Units, unit: str, group: dict, timeout: float) -> str | None:
    deadline = time.monotonic() + timeout
    while not units.is_active(unit):
        if time.monotonic() > deadline:
            return f"not active {timeout:g}s after restart"
        time.sleep(0.1)
    spec = allocator_library.AllocatorSpec(
        kind=group["kind"],
        request=group["allocator"],
        path=group["library"],
        sha256=group["sha256"],
        family=group["family"],
        version=group["version"],
        **library_identity(group["library"]),
    )
    time.sleep(0.2)  # let the new process map its libraries
    pid = units.main_pid(unit)
    # a Type=simple unit is active as soon as systemd forked its main process; until that child
    # has set up the sandbox and User= and exec'd the service, its maps are systemd's own
    while pid is not None and _still_the_manager(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
        pid = units.main_pid(unit)
    if pid is None:
        return "no main process after restart"
    try:
        verdict = allocator_library.verify_process(pid, spec)
    except OSError as exc:
        return f"cannot read its maps ({exc.strerror})"
    return None if verdict.verified else verdict.detail


def _still_the_manager(pid: int) -> bool:
    """Whether PID is a child systemd forked that has not exec'd the service yet."""
    try:
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return False
    return exe in ("systemd", "systemd-executor")


def library_identity(library: str | None) -> dict:
    """The library file's device and inode (what a process's maps show), so a verification can tell
    the deployed file from another at the same path; {} without a library."""
    if not library:
        return {}
    st = os.stat(library)
    return {"dev": st.st_dev, "inode": st.st_ino}


def deploy(
    units: Units,
    allocator: str | None,
    pattern: str,
    batch: int | str,
    dry_run: bool,
    out: Path,
    say=print,
    env: dict[str, str] | None = None,
    guards: rollout.Guards | None = None,
    settle: float = 0.0,
    scope: str = "all",
    sample_every: float = 1.0,
    group_file: Path | None = None,
    group: str | None = None,
    history: Path | None = None,
    tested: dict | None = None,
    peer_rule: canary.PeerRule | None = None,
    baseline: str = "none",
    baseline_restart: bool = True,
) -> dict:
    """Roll one allocator out to every matching unit: a one-group plan, applied in canary batches
    under the guards (rolled back automatically when one trips). The allocator and its environment
    come from the arguments, or from group `group` of a groups file (its env, then `env` over it);
    make_plan validates them as it does every group's tunables. A dry run writes its plan into a
    temporary directory: it changes nothing, not even an earlier deploy's plan at `out`."""
    if group_file is not None:
        allocator, file_env = group_from_file(group_file, group, allocator)
        env = {**file_env, **(env or {})}
    elif allocator is None:
        raise UserError("deploy needs an allocator", "give ALLOCATOR, or --group-file FILE --group NAME")
    unitfile.check_env(env or {}, "deploy")
    env_line = "".join(
        f"\nenv = {{ {', '.join(f'{json.dumps(k)} = {json.dumps(v)}' for k, v in (env or {}).items())} }}"
        if env
        else ""
    )
    with contextlib.ExitStack() as stack:
        if dry_run:
            out = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="alloclab-deploy-dry-run-"))) / out.name
        groups_file = out.with_suffix(".toml")
        groups_file.write_text(
            f'name = "deploy"\ncommand = ["/bin/true"]\n[[group]]\nname = "deploy"\nallocator = {json.dumps(allocator)}{env_line}\n'
        )
        try:
            plan = make_plan(units, pattern, groups_file, 0, out)
        except UserError as err:  # that groups file is made from the options: name them, not the file
            if not err.problem.startswith(f"{groups_file}: "):
                raise
            raise UserError(f"ALLOCATOR/--env: {err.problem.removeprefix(f'{groups_file}: ')}", err.fix) from None
        if tested is not None:  # --from-run: the library the run tested, and the verdict, kept with the plan
            _check_tested(plan, tested)
        return apply_plan(
            units,
            plan,
            batch,
            dry_run,
            say,
            guards=guards,
            settle=settle,
            scope=scope,
            sample_every=sample_every,
            history=history,
            peer_rule=peer_rule,
            baseline=baseline,
            baseline_restart=baseline_restart,
        )


def _check_tested(plan: Plan, tested: dict) -> None:
    """The deploy's library is the one the run tested (same sha256), and the plan records which
    run and verdict it deploys (fleet.tested)."""
    got = plan.data["groups"][0].get("sha256") or None
    if got != tested.get("library_sha256"):
        raise UserError(
            f"{tested['allocator']} resolves here to {plan.data['groups'][0].get('library') or 'glibc'}, not the "
            f"library run {tested['run']} tested (sha256 {str(tested.get('library_sha256'))[:12]}…)",
            "install the tested build on this host, or run a new experiment",
        )
    plan.data["deployed_from"] = tested
    plan.path.write_text(json.dumps(plan.data, indent=2))


def group_from_file(path: Path, name: str | None, allocator: str | None) -> tuple[str, dict[str, str]]:
    """(allocator, env) of group NAME of a groups file; a relative library path is made absolute
    from the file's directory (the deploy's own groups file lives elsewhere)."""
    if allocator is not None:
        raise UserError("give either ALLOCATOR or --group-file/--group, not both", "drop one of them")
    exp = load_experiment(path)
    names = [g.name for g in exp.groups]
    if name is None:
        if len(names) != 1:
            raise UserError(f"{path} has {len(names)} groups", f"choose one with --group ({', '.join(names)})")
        name = names[0]
    chosen = next((g for g in exp.groups if g.name == name), None)
    if chosen is None:
        raise UserError(f"{path} has no group {name!r}", f"groups: {', '.join(names)}")
    request = chosen.allocator
    if "/" in request and not Path(request).is_absolute():
        request = str((exp.base_dir / request).resolve())
    return request, dict(chosen.env)


def load_manifest(path: Path, root: Path) -> dict:
    """An apply's manifest, checked before rollback trusts it: every unit valid, every drop-in path
    exactly the one alloclab writes for that unit under this root, every backup present."""
    fs = rootfs.Root(root)
    try:
        manifest = json.loads(fs.read_text(path))
        entries = manifest["units"].items()
        for unit, m in entries:
            if (
                Path(m["dropin"]) != dropin_path(root, unit)
                or not isinstance(m["had_file"], bool)
                or not isinstance(m["dir_existed"], bool)
            ):
                raise UserError(
                    f"{path}: the entry for {unit} does not name {dropin_path(root, unit)}",
                    "the manifest was edited or belongs to another --root; restore the drop-ins by hand",
                )
            if m["had_file"] and not fs.is_file(path.parent / "backup" / unit):
                raise UserError(f"{path}: the backup of {unit} is missing", "restore its drop-in by hand")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise UserError(f"{path} is not a readable alloclab apply manifest", "restore the drop-ins by hand") from None
    return manifest


def restore(units: Units, gen: Path, manifest: dict, names: list[str], batch: int | str, say=print) -> None:
    """Put back the drop-ins of `names` as the generation's backup has them (or remove what the
    apply created), reload, restart them in batches (N units, or a share 'P%' of `names`, as
    apply's --batch) and wait until each is active."""
    batch = rollout.batch_sizes(batch, len(names))[0] if names else 1
    fs = rootfs.Root(units.root)
    for unit in names:
        m = manifest["units"][unit]
        path = Path(m["dropin"])
        if m["had_file"]:
            fs.write(path, fs.read_bytes(gen / "backup" / unit))
        else:
            fs.unlink(path)
            if not m["dir_existed"]:
                fs.rmdir_if_empty(path.parent)
    units.daemon_reload()
    for i in range(0, len(names), batch):
        for unit in names[i : i + batch]:
            units.restart(unit)
        for unit in names[i : i + batch]:
            if _wait_active(units, [unit], 30, ""):
                raise UserError(f"{unit} is not active after rollback", "check it with systemctl status")


def _applied(units: Units) -> list[Path]:
    """The manifests of the applies and deploys not rolled back, oldest first."""
    fs = rootfs.Root(units.root)
    where = state_dir(units.root) / "applied"
    return sorted(
        where / g / "manifest.json"
        for g in fs.listdir(where)
        if not g.endswith(".rolled-back") and fs.is_file(where / g / "manifest.json")
    )


def rollback(units: Units, batch: int | str, say=print, every: bool = False) -> dict:
    """Undo the newest apply or deploy: restore each drop-in byte for byte (or remove what it
    created). The state it returns to is the one before that apply: the drop-ins of the apply
    before it, or, when it was the only one left, the units as they were before alloclab. `every`:
    undo them all, newest first, back to before alloclab (nothing recorded is no error then)."""
    rollout.batch_sizes(batch, 1)  # a bad --batch refused before any drop-in is touched
    fs = rootfs.Root(units.root)
    applied = _applied(units)
    if not applied:
        if every:
            say(f"nothing to roll back under {units.root}: the units are as they were before alloclab")
            return {
                "units": 0,
                "generation": None,
                "restored": [],
                "plan": None,
                "returns_to": "the state before alloclab",
                "undone": [],
            }
        raise UserError(f"nothing to roll back under {units.root}", "no alloclab fleet apply was recorded there")
    undone = []
    while applied:
        gen = applied[-1].parent
        manifest = load_manifest(applied[-1], units.root)
        names = list(manifest["units"])
        restore(units, gen, manifest, names, batch, say)
        fs.rename(gen, gen.with_name(gen.name + ".rolled-back"))
        applied = applied[:-1]
        returns_to = (
            f"the drop-ins of {applied[-1].parent.name} (plan {load_manifest(applied[-1], units.root)['plan']})"
            if applied
            else "the state before alloclab"
        )
        say(f"rolled back {len(names)} units (plan {manifest['plan']}, applied {gen.name}) to {returns_to}")
        undone.append(
            {
                "units": len(names),
                "generation": str(gen),
                "restored": names,
                "plan": manifest["plan"],
                "returns_to": returns_to,
            }
        )
        if not every:
            break
    restored = sorted({u for step in undone for u in step["restored"]})
    return {
        "units": len(restored),
        "generation": undone[0]["generation"],
        "restored": restored,
        "plan": undone[0]["plan"],
        "returns_to": returns_to,
        "undone": undone,
    }
