"""Runs an experiment: every replica of every group started together, sampled until the end.

Flow: resolve and check everything (preflight.prepare, the very checks of `alloclab check`:
nothing is written if the experiment is wrong) -> create the run directory and store -> start the
watchdog, the scenario's supporting processes when the experiment has one (scenarios.Scenario:
the runner knows none by name), then replicas in seeded blocks (start_order) -> every interval
sample each replica's process tree, verify new processes, record the tick (recorder) -> stop
(SIGTERM to every process of the run, SIGKILL after the grace period; see reaper) -> remove the
cgroups -> record why the run ended.

A process is always known by (pid, start ticks): a pid reused after its process ended is never
taken for that process. Replica roots are not reaped until the end (their exit is read with
WNOWAIT), so a root's pid, and with it its process group, cannot be reused during the run.
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from ..allocators import resolution
from ..allocators.library import AllocatorSpec
from ..capture import host, introspect, sampler
from ..capture.recorder import Recorder, Tracked
from ..common import outputs, settings, timefmt
from ..common.errors import StoreError, UserError
from ..common.signalname import how_ended
from ..experiment_file import Experiment, Group, Phases, substitute
from ..process import logcap, priority, reaper
from ..store import DB_NAME, RESUMABLE_REASONS, Store, disk_full_error
from . import preflight, workloads

PR_SET_PDEATHSIG = 1
RESERVE_NAME = ".space-reserve"  # freed when the disk fills, so the end of the run can still be written
RESERVE_BYTES = 1 << 20
_libc = ctypes.CDLL(None, use_errno=True)


TICKS_SKIPPED = "ticks_skipped"  # event kind: the sampler overran and skipped ticks
ERROR_TEXT_CHARS = 200  # an exception's text kept in the end reason


def error_end(exc: BaseException) -> str:
    """What stopped a run on an exception, for its end reason: "TYPE: first line of its text"."""
    said = str(exc).strip()
    text = said.splitlines()[0][:ERROR_TEXT_CHARS] if said else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class SkippedTicks:
    """Ticks skipped because a tick overran the interval, gathered into at most one event a minute
    (a saturated host would otherwise write one event per tick)."""

    EVERY_S = 60.0

    def __init__(self) -> None:
        self.count, self.total, self.overruns, self.longest_s, self.last_record = 0, 0, 0, 0.0, 0.0

    def add(self, skipped: int, behind_s: float) -> None:
        self.count += skipped
        self.total += skipped
        self.overruns += 1
        self.longest_s = max(self.longest_s, behind_s)

    def due(self, now: float) -> bool:
        return self.count > 0 and now - self.last_record >= self.EVERY_S

    def take(self, interval: float) -> str | None:
        """The event text for the ticks gathered since the last one (None if none); resets."""
        if not self.count:
            return None
        text = (
            f"{self.count} sampling tick{'s' if self.count != 1 else ''} skipped: the sampler fell behind its "
            f"{interval:g} s schedule {self.overruns} time{'s' if self.overruns != 1 else ''} (by up to "
            f"{self.longest_s:.2f} s)"
        )
        self.count, self.overruns, self.longest_s, self.last_record = 0, 0, 0.0, time.time()
        return text


@dataclass(kw_only=True)
class Replica(Tracked):
    idx: int
    group: Group
    argv: list[str]
    env: dict[str, str]
    workdir: Path
    log_dir: Path
    port: int
    cgroup: sampler.Cgroup | None = None
    popen: subprocess.Popen | None = None
    load_popen: subprocess.Popen | None = None
    exited_at: float | None = None
    root: tuple[int, int] | None = None  # the started process's (pid, start ticks)
    root_exit: int | None = None  # its exit code, or -signal (read without reaping it)
    root_exit_t: float | None = None
    cgroup_lost: bool = False  # its processes were moved out of its cgroup (by someone else)

    @property
    def stats_path(self) -> Path:
        return self.log_dir / "stats.bin"

    @property
    def alive(self) -> bool:
        return self.exited_at is None


@dataclass
class RunResult:
    run_dir: Path
    end_reason: str
    interrupted: bool
    cut_short: str | None = None  # 'disk-full' when the run could not go on (an error is raised, not returned)


def _exit_status(pid: int) -> int | None:
    """Exit code (or -signal) of an exited child, without reaping it; None while it runs."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return None
    if info is None or info.si_pid == 0:
        return None
    return -info.si_status if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED) else info.si_status


def start_order(groups: list[str], replicas: int, seed: int) -> list[tuple[str, int]]:
    """The order replicas start (and are sampled in): blocks of one replica per group, so no group
    starts all its replicas first. Block k holds replica k of every group, in a seeded order of the
    groups that is reversed in every other block (ABC CBA ...): with an even replica count every
    group's mean start position is the same, with an odd one the last block's seeded order decides
    only that block. A whole-run shuffle let one group take most early slots (2 groups x 2
    replicas: one group started both first for 1 seed in 3; benchmarks/start_order.py)."""
    first = list(groups)
    random.Random(seed).shuffle(first)
    return [(g, k) for k in range(1, replicas + 1) for g in (first if k % 2 else first[::-1])]


def default_run_dir(exp: Experiment) -> Path:
    return Path("runs") / f"{timefmt.local_stamp()}-{exp.name}"


class Runner:
    def __init__(
        self,
        exp: Experiment,
        run_dir: Path | None = None,
        on_tick: Callable[[Runner, float, str], None] | None = None,
        stop_check: Callable[[Runner, float], str | None] | None = None,
        max_duration: float | None = None,
        deadline: float | None = None,
    ):
        self.exp = exp
        self.on_tick = on_tick
        self.stop_check = stop_check
        self.max_duration = max_duration or exp.max_duration
        self.deadline = deadline  # time.monotonic() the run ends by, set-up included (_plan_to_deadline)
        self.stop_reason: str | None = None
        self.error: str | None = None  # error_end() of the exception that stopped the run
        prepared = preflight.prepare(exp)  # the very checks of `alloclab check`
        self.specs, self.templates, self.scenario = prepared.specs, prepared.commands, prepared.scenario
        self.run_dir = self._make_run_dir(run_dir or default_run_dir(exp))
        self._reserve_space()
        self.store = Store.create(self.run_dir / DB_NAME)
        self.recorder = Recorder(self.store, exp.verify_every, exp.metric)
        self.collector = (
            introspect.Collector(self.store, introspect.helper_path(), exp.verify_every) if exp.introspect else None
        )
        self.replicas: list[Replica] = []
        self.budget = sampler.SmapsBudget(exp.smaps_budget)
        self.started_mono = 0.0
        self.started_wall = 0.0
        self.spawned_s = 0.0  # how long starting every replica took (long on a saturated machine)
        self.skips = SkippedTicks()
        self.cgroup_note = ""
        self.token = uuid.uuid4().hex  # in every replica's environment: finds what escaped the tree
        self.watchdog: reaper.WatchdogLink | None = None
        self.finder = reaper.RunProcesses(self.token, under=os.getpid())
        self.registered: set[tuple[int, int]] = set()  # identities sent to the watchdog
        self.cut_short: str | None = None
        self.companions: list[subprocess.Popen] = []  # alloclab's own helpers (the live view): not the run's
        self.logs = logcap.LogPump(self.add_companion)  # replicas' stdout/stderr, capped by bytes written
        self.load_template = self.scenario.load_command() if self.scenario is not None else exp.load_command
        self.support: list[subprocess.Popen] = []  # the scenario's supporting processes (start_support)
        self.phases = exp.phases  # as run: the scenario may hold the warm-up (_warmup_held)
        self.planned = exp.planned_duration(self.max_duration)  # seconds the run lasts (moves with a held warm-up)
        self.on_setup: Callable[[str], None] = lambda text: None  # progress while the scenario sets up

    def add_companion(self, popen: subprocess.Popen) -> None:
        """A helper process alloclab started beside the run (the live view): never swept as part of
        the run nor reaped behind its owner's back; its owner stops it."""
        self.companions.append(popen)
        self.finder.exclude.add(popen.pid)

    def _reserve_space(self) -> None:
        """A little space held back: when the disk fills, it is freed so the run's end (reason,
        times, stopped replicas) can still be written."""
        try:
            with open(self.run_dir / RESERVE_NAME, "wb") as f:
                f.write(b"\0" * RESERVE_BYTES)
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            shutil.rmtree(self.run_dir, ignore_errors=True)
            raise UserError(
                f"cannot write to output directory {self.run_dir}: {exc.strerror}",
                "free some space or choose another directory with -o",
            ) from None

    def _release_space(self) -> None:
        (self.run_dir / RESERVE_NAME).unlink(missing_ok=True)

    # ---- preparation: everything that can be wrong is found (preflight) before the run starts ----
    @staticmethod
    def _make_run_dir(path: Path) -> Path:
        outputs.new_output(path)
        return outputs.writable_directory(path).resolve()

    def _record_setup(self) -> None:
        exp, st = self.exp, self.store
        order = start_order([g.name for g in exp.groups], exp.replicas, exp.seed)
        st.begin()
        st.set_meta(
            name=exp.name,
            experiment=exp.source_text,
            seed=exp.seed,
            interval=exp.interval,
            metric=exp.metric,
            baseline=exp.baseline,
            replicas_per_group=exp.replicas,
            phases={"warmup": exp.phases.warmup, "load": exp.phases.load, "idle": exp.phases.idle},
            start_order=[f"{g}-{i}" for g, i in order],
            smaps_budget=exp.smaps_budget,
            command_line=sys.argv,
            source="run",
            run_token=self.token,
            runner=list(sampler.read_stat(os.getpid()).identity),
            **host.host_metadata(),
        )
        group_ids = {}
        for g in exp.groups:
            spec = self.specs[g.name]
            group_ids[g.name] = st.add_group(
                name=g.name,
                allocator=g.allocator,
                kind=spec.kind,
                library_path=spec.path,
                library_sha256=spec.sha256,
                family=spec.family,
                version=spec.version,
                env_json=json.dumps(g.env),
                command_json=json.dumps(list(self.templates[g.name])),
                is_baseline=int(g.name == exp.baseline),
                provenance_json=resolution.provenance(spec),
                hardening_json=resolution.hardening_json(spec, g.env),
                tunables_json=resolution.tunables_json(spec),
            )
        notes = []
        use_cgroups = settings.cgroups_enabled()
        for n, (gname, idx) in enumerate(order):
            g = exp.group(gname)
            name = f"{gname}-{idx}"
            log_dir = self.run_dir / "replicas" / name
            workdir = log_dir / "work"
            workdir.mkdir(parents=True)
            port = exp.port_base + n
            argv = substitute(self.templates[gname], exp.placeholder_values(gname, idx, port, workdir))
            env = settings.environment_without_preload()
            env.update(g.env)
            env.update(ALLOCLAB_REPLICA=name, ALLOCLAB_GROUP=gname, ALLOCLAB_STATS=str(log_dir / "stats.bin"))
            env[reaper.TOKEN_VAR] = self.token
            spec = self.specs[gname]
            if spec.kind == "preload":
                env["LD_PRELOAD"] = spec.path
            if self.collector:  # after the allocator: it must not serve malloc
                env["LD_PRELOAD"] = introspect.preload_with_helper(env.get("LD_PRELOAD"), self.collector.helper)
                (log_dir / "introspect").mkdir()
                env.update(introspect.helper_env(log_dir / "introspect", exp.interval, exp.introspect_budget))
            cg, why = (
                sampler.make_cgroup(f"alloclab-{os.getpid()}-{name}")
                if use_cgroups
                else (None, f"{settings.CGROUPS}=off")
            )
            if cg is None:
                notes.append(why)
            rid = st.add_replica(
                group_id=group_ids[gname],
                idx=idx,
                name=name,
                workdir=str(workdir),
                start_order=n,
                cgroup=str(cg.path) if cg else None,
            )
            self.replicas.append(
                Replica(
                    id=rid,
                    name=name,
                    group_name=gname,
                    spec=spec,
                    idx=idx,
                    group=g,
                    argv=argv,
                    env=env,
                    workdir=workdir,
                    log_dir=log_dir,
                    port=port,
                    cgroup=cg,
                )
            )
        self.cgroup_note = f"no per-replica memory cgroup ({notes[0]}); cgroup figures are left empty" if notes else ""
        st.set_meta(cgroups="none: " + notes[0] if notes else "per replica")
        if self.collector:
            st.set_meta(introspect=str(self.collector.helper), introspect_budget=exp.introspect_budget)
        st.commit()

    # ---- process control ----
    @staticmethod
    def _child_setup(cgroup_procs: str | None) -> Callable[[], None]:
        def setup() -> None:  # runs in the child between fork and exec: no allocation-heavy work
            if cgroup_procs:
                fd = os.open(cgroup_procs, os.O_WRONLY)
                os.write(fd, str(os.getpid()).encode())
                os.close(fd)
            _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)  # if alloclab dies, so do its replicas
            priority.lower_this_process()  # below alloclab's sampler (priority.py)

        return setup

    def _spawn(
        self, argv: list[str], env: dict, cwd: Path, out: Path, err: Path, cgroup_procs: str | None
    ) -> subprocess.Popen:
        with self.logs.stream(out) as so, self.logs.stream(err) as se:
            return subprocess.Popen(
                argv,
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=so,
                stderr=se,
                start_new_session=True,
                preexec_fn=self._child_setup(cgroup_procs),
            )

    def _start_replicas(self) -> None:
        self.started_wall = time.time()
        self.started_mono = time.monotonic()
        self.store.begin()
        for r in self.replicas:
            try:
                r.popen = self._spawn(
                    r.argv,
                    r.env,
                    r.workdir,
                    r.log_dir / "stdout.log",
                    r.log_dir / "stderr.log",
                    r.cgroup.procs_file if r.cgroup else None,
                )
            except (OSError, subprocess.SubprocessError) as exc:
                self._abandon()
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                raise UserError(
                    f"cannot start {r.argv[0]} for {r.name}: {why}", "check that the command runs on its own"
                ) from None
            # not reaped until the end, so this pid stays this process's (and its group's)
            st = sampler.read_stat(r.popen.pid)
            r.root = st.identity if st else (r.popen.pid, -1)
            self._register([r.root])
            self.store.update_replica(r.id, started_at=time.time(), root_pid=r.popen.pid)
        self.spawned_s = time.monotonic() - self.started_mono
        self.store.set_meta(started_at=self.started_wall)
        self.store.add_event(self.started_wall, "start", f"{len(self.replicas)} replicas started")
        self.store.commit()

    def _abandon(self) -> None:
        """A replica could not start: nothing has been measured, so stop what started and leave
        no half-made run behind (the run directory is removed)."""
        self.store.rollback()
        reaper.sweep(self.finder.find, 0.0, on_poll=self.reap_children)
        for r in self.replicas:
            if r.popen is not None:
                r.popen.wait()
            if r.cgroup:
                r.cgroup.remove(wait=2.0)
        self.logs.close()
        if self.watchdog:
            self.watchdog.close()
        self.store.discard()
        shutil.rmtree(self.run_dir, ignore_errors=True)
        self.abandoned = True

    def _register(self, identities) -> None:
        new = set(identities) - self.registered
        if new:
            self.registered |= new
            self.finder.identities |= new
            if self.watchdog:
                self.watchdog.register_processes(new)

    def _start_load(self) -> None:
        if not self.load_template:
            return
        for r in self.replicas:
            if self.scenario is not None and not self.scenario.has_load(r):
                continue  # e.g. a DirCache 0 relay: no DirPort, nothing to fetch from it
            if r.alive:
                argv = substitute(
                    self.load_template, self.exp.placeholder_values(r.group.name, r.idx, r.port, r.workdir)
                )
                argv[0] = preflight.resolve_program(argv[0], self.exp.base_dir)
                env = settings.environment_without_preload()
                env[reaper.TOKEN_VAR] = self.token
                r.load_popen = self._spawn(
                    argv, env, r.workdir, r.log_dir / "load.stdout.log", r.log_dir / "load.stderr.log", None
                )
                st = sampler.read_stat(r.load_popen.pid)
                if st:
                    self._register([st.identity])

    def _stop_loads(self, popens: list[subprocess.Popen | None]) -> None:
        """SIGTERM every running load client's process group at once, SIGKILL those still there
        after one shared grace period (one after another cost a grace each at the run's end).
        A pid (the group's id) cannot be reused before it is reaped, which happens only here."""
        running = [p for p in popens if p is not None and p.poll() is None]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for p in running:
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + self.exp.grace if sig == signal.SIGTERM else None
            left = []
            for p in running:
                try:
                    p.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    left.append(p)
            running = left
            if not running:
                return

    def _own_children(self) -> set[int]:
        """The processes alloclab started itself (replicas, load clients, the watchdog)."""
        own = {p.pid for r in self.replicas for p in (r.popen, r.load_popen) if p is not None}
        own |= {p.pid for p in self.companions} | {p.pid for p in self.support}
        if self.watchdog:
            own.add(self.watchdog.popen.pid)
        return own

    def reap_children(self) -> None:
        reaper.reap_adopted(self._own_children())

    def start_support(self, argv: list[str], cwd: Path, stdout: Path, stderr: Path) -> subprocess.Popen:
        """A scenario's supporting process, owned like a replica: run token in its environment,
        parent-death signal, registered with the watchdog, stopped with the run."""
        env = settings.environment_without_preload()
        env[reaper.TOKEN_VAR] = self.token
        p = self._spawn(argv, env, cwd, stdout, stderr, None)
        self.support.append(p)
        st = sampler.read_stat(p.pid)
        self._register([st.identity] if st else [])
        return p

    # ---- one sampling tick ----
    def _adopted_roots(self) -> dict[str, set[tuple[int, int]]]:
        """Orphans of the run reparented to alloclab (it is a subreaper), by replica: their
        environment names the replica. Read once per process."""
        own = self._own_children()
        out: dict[str, set[tuple[int, int]]] = {}
        for pid in reaper.children(os.getpid()):
            st = sampler.read_stat(pid)
            if pid in own or st is None:
                continue
            name = self.finder.replica_of(st)
            if name:
                out.setdefault(name, set()).add(st.identity)
        return out

    def _sample(self, now: float, phase: str, procs: dict[int, sampler.ProcStat] | None) -> None:
        adopted = self._adopted_roots() if procs is not None else {}
        members = []
        for r in self.replicas:
            pids = r.cgroup.procs() if r.cgroup and not r.cgroup_lost else []
            if (
                r.cgroup
                and not pids
                and r.root_exit is None
                and r.popen is not None
                and not r.cgroup_lost
                and _exit_status(r.popen.pid) is None
            ):
                # its root lives but the cgroup is empty: something moved the processes out (e.g. a
                # service manager re-homing init.scope); follow the process tree from now on
                r.cgroup_lost = True
                self.store.add_event(
                    now,
                    "cgroup_lost",
                    f"{r.name}: its processes left its cgroup {r.cgroup.path} while "
                    "running; sampled by process tree from now on (cgroup figures left empty)",
                    r.id,
                    r.group.name,
                )
            if r.cgroup and not r.cgroup_lost:
                expected = None
            else:
                if procs is None:
                    procs = sampler.all_processes()
                    adopted = self._adopted_roots()
                roots = {r.root} | set(r.processes) | adopted.get(r.name, set())
                pids = sampler.tree(roots, procs or {})
                expected = {pid: procs[pid].start_ticks for pid in pids}
            members.append((pids, expected))
        for r, readings in zip(self.replicas, sampler.sample_replicas(members, self.budget)):
            if not readings and not r.alive:
                continue
            self.recorder.observe(
                r, readings, now, phase, None if r.cgroup_lost else r.cgroup, workloads.read_stats(r.stats_path)
            )
            if self.collector:
                self.collector.observe(
                    r.log_dir / "introspect",
                    r.id,
                    r.name,
                    r.group.name,
                    r.processes,
                    {(rd.stat.pid, rd.stat.start_ticks) for rd in readings},
                    now,
                )
            self._register(r.processes)
        self.recorder.flush(now)
        if self.collector:
            self.collector.flush()

    def _reap(self, now: float, planned_end: float | None) -> None:
        """Notice replicas that ended by themselves: a crash (killed by a signal alloclab did not
        send), an early exit (before the planned end), or a normal end."""
        self.reap_children()
        for r in self.replicas:
            if r.root_exit is None and r.popen is not None:
                r.root_exit = _exit_status(r.popen.pid)
                if r.root_exit is not None:
                    r.root_exit_t = now
            if not r.alive or r.root_exit is None or (r.cgroup and r.cgroup.procs()):
                continue
            r.exited_at = now
            code = r.root_exit
            after = f" after {r.root_exit_t - self.started_wall:.1f} s"
            early = planned_end is None or now < planned_end - self.exp.interval
            if code < 0:
                kind, end_kind = "replica_crash", "crashed"
                text = f"{r.name} was {how_ended(code)}{after}"
            elif early:
                kind, end_kind = "replica_exit", "exited-early"
                text = f"{r.name} exited with code {code}{after}" + (", before the planned end" if planned_end else "")
            else:
                kind, end_kind = "replica_end", "ended"
                text = f"{r.name} exited with code {code}"
            self.store.update_replica(r.id, ended_at=r.root_exit_t, exit_code=code, end_kind=end_kind)
            self.store.add_event(r.root_exit_t, kind, text, r.id, r.group.name)

    # ---- the run ----
    def run(self) -> RunResult:
        self.abandoned = False
        reaper.become_subreaper()
        self._record_setup()
        self.watchdog = reaper.WatchdogLink(self.run_dir, self.token, self.store.path, self.exp.grace)
        self.finder.exclude.add(self.watchdog.popen.pid)
        for r in self.replicas:
            if r.cgroup:
                self.watchdog.register_cgroup(r.cgroup)
                self.finder.cgroups.append(r.cgroup)
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            if self.scenario is not None:
                self.stop_reason = self.scenario.setup(self)
            if self.stop_reason is None:
                self._start_replicas()
                self._plan_to_deadline()
            self.stop_reason = self.stop_reason or self._loop()
            self._record_skips(time.time())
        except Exception as exc:
            if not disk_full_error(exc):  # recorded as the run's end (cut short: error), then raised on
                self.error = error_end(exc)
                self.stop_reason = f"error: {self.error}"
                raise
            self.cut_short = self.stop_reason = "disk-full"  # wherever it filled: resumable, exit code 3
        finally:
            if not self.abandoned:
                self._finish()  # also on errors: replicas stopped, data kept
            for s, h in previous.items():
                signal.signal(s, h)
        return RunResult(self.run_dir, self.stop_reason, self.stop_reason == "interrupted", self.cut_short)

    def _plan_to_deadline(self) -> None:
        """With a deadline (the demo's cap covers the scenario's set-up, whose length varies with the
        machine's load): the run lasts what set-up left of it, at most its max duration."""
        if self.deadline is None:
            return
        left = max(self.exp.interval, float(int(self.deadline - self.started_mono)))  # whole seconds: a readable plan
        if self.max_duration is None or left < self.max_duration:
            self.max_duration = left
            self.planned = self.exp.planned_duration(self.max_duration)
            with self.store.transaction():
                self.store.add_event(
                    time.time(),
                    "deadline",
                    f"the run ends within {left:.0f} s of the replicas' "
                    "start (what the set-up left before the deadline)",
                )

    def _on_signal(self, signum: int, frame) -> None:
        # a signal while the run is being ended (stopping replicas takes the grace period) does not
        # replace why it ended
        self.stop_reason = self.stop_reason or "interrupted"

    def _record_skips(self, now: float) -> None:
        """Store the ticks skipped since the last record as one `ticks_skipped` event (data for the
        `ticks-skipped` warning: the sampler could not keep the interval)."""
        event = self.skips.take(self.exp.interval)
        if event:
            self.store.begin()
            self.store.add_event(now, TICKS_SKIPPED, event)
            self.store.set_meta(ticks_skipped=self.skips.total)
            self.store.commit()

    def _warmup_held(self, elapsed: float, now: float) -> bool:
        """Whether the warm-up goes on past its planned end (replicas started late, or the scenario's
        setting is not ready for the load, e.g. relays still downloading the directory). When it
        ends, the later phases move on by as much."""
        # the last replica started gets at least half the warm-up: on a saturated machine starting
        # them can outlast the warm-up, and the phases would pass before anything was measured
        if elapsed < self.spawned_s + self.exp.phases.warmup / 2:
            return True
        return self.scenario is not None and self.scenario.holds_warmup(self, elapsed, now)

    def _loop(self) -> str:
        exp = self.exp
        planned = self.planned
        need_procs = any(r.cgroup is None for r in self.replicas)
        phase, next_tick = None, time.monotonic()  # the grid starts with the first tick, not before the replicas' start
        while True:
            elapsed = time.monotonic() - self.started_mono
            now = time.time()
            new_phase = self.phases.at(elapsed)
            with self.store.tick():
                if phase in (None, "warmup") and new_phase != "warmup" and exp.phases.warmup > 0:
                    held = self._warmup_held(elapsed, now)
                    if (
                        held or self.phases is not exp.phases
                    ):  # held (now or until now): the later phases move on with it
                        self.phases = replace(exp.phases, warmup=elapsed)
                        planned = self.planned = replace(exp, phases=self.phases).planned_duration(self.max_duration)
                    if held:
                        new_phase = "warmup"
                    elif (
                        self.phases is not exp.phases
                    ):  # the held warm-up ends: the load starts now, as long as planned
                        self.store.set_meta(
                            phases={"warmup": elapsed, "load": exp.phases.load, "idle": exp.phases.idle},
                            planned_warmup=exp.phases.warmup,
                        )
                        new_phase = self.phases.at(elapsed)
                if new_phase != phase:
                    self.store.add_event(now, "phase", f"{new_phase} phase begins")
                    if new_phase == "load":
                        self._start_load()
                    if new_phase == "idle":
                        self._stop_loads([r.load_popen for r in self.replicas])
                    phase = new_phase
                self._reap(now, self.started_wall + planned if planned else None)
                self._sample(now, phase, sampler.all_processes() if need_procs else None)
                if self.scenario is not None:
                    self.scenario.tick(self, now)
            if self.on_tick:
                self.on_tick(self, elapsed, phase)
            if self.stop_reason:
                return self.stop_reason
            if all(not r.alive for r in self.replicas):
                return "all replicas exited"
            if planned is not None and elapsed >= planned:
                return (
                    "planned duration reached"
                    if self.max_duration is None or (self.phases.total or 0) <= self.max_duration
                    else "max duration reached"
                )
            if self.stop_check and phase != "warmup":  # a look spent on a held warm-up has no load to test
                verdict = self.stop_check(self, elapsed)
                if verdict:
                    return verdict
            next_tick += exp.interval
            late = time.monotonic() - next_tick
            if late >= 0:  # overran: skip ticks rather than bunch them
                skipped = int(late // exp.interval) + 1
                next_tick += skipped * exp.interval
                self.skips.add(skipped, late + exp.interval)
                if self.skips.due(now):
                    self._record_skips(now)
            delay = next_tick - time.monotonic()
            if planned is not None:
                delay = min(delay, max(0.0, self.started_mono + planned - time.monotonic()))
            time.sleep(max(0.0, delay))

    def _stop_all(self) -> reaper.SweepResult:
        """End every process of the run: load clients first, then everything else at once."""
        self._stop_loads([r.load_popen for r in self.replicas])
        result = reaper.sweep(self.finder.find, self.exp.grace, on_poll=self.reap_children)
        for r in self.replicas:
            if r.popen is not None:
                r.popen.wait()
        for p in self.support:
            p.wait()
        self.reap_children()
        return result

    def _finish(self) -> None:
        try:
            if self.cut_short or self.error:
                # a failed write may be what stopped the run: the tick it half wrote is dropped
                self._release_space()
                self.store.rollback()
            else:
                self.store.commit()
        except (StoreError, OSError):
            if not self.error:
                raise  # after an error the replicas are stopped first, the error raised on
        swept = self._stop_all()
        if self.scenario is not None:
            self.scenario.teardown()
        self.logs.close()  # after every writer ended: the pump drains the pipes and ends
        leaked = [r.cgroup for r in self.replicas if r.cgroup and not r.cgroup.remove(wait=5.0)]
        try:
            self._record_end(swept, leaked)
        except (StoreError, OSError) as exc:
            if not disk_full_error(exc):
                if self.error:  # its end could not be recorded either: the first error is the one raised
                    self._release_watchdog_and_space()
                    return
                raise
            self.cut_short = self.stop_reason = "disk-full"
            self._release_space()
            self.store.rollback()
            self.store.mark_cut_short("disk-full", time.time(), "the disk filled while the run's end was written")
        self._release_watchdog_and_space()

    def _release_watchdog_and_space(self) -> None:
        if self.watchdog:
            self.watchdog.close()
        self._release_space()

    def _record_end(self, swept: reaper.SweepResult, leaked: list[sampler.Cgroup]) -> None:
        now = time.time()
        self.store.begin()
        for r in self.replicas:
            if r.alive and r.popen is not None:
                self.store.update_replica(r.id, ended_at=now, exit_code=r.popen.returncode, end_kind="stopped")
                r.exited_at = now
            if swept.killed & ({r.root} | set(r.processes)):
                self.store.add_event(
                    now, "sigkill", f"{r.name} ignored SIGTERM for {self.exp.grace:g}s", r.id, r.group.name
                )
        if self.scenario is not None:
            self.scenario.finish(self, now)
        if swept.left:
            self.store.add_event(
                now,
                "processes_left",
                f"{len(swept.left)} processes of the run could not be ended: "
                + ", ".join(str(pid) for pid, _ in sorted(swept.left)),
            )
        if leaked:
            self.store.add_event(now, "cgroup_leaked", "could not remove " + ", ".join(str(c.path) for c in leaked))
        self.store.commit()
        if self.cut_short:
            self.store.mark_cut_short(self.cut_short, now, "the disk filled: sampling stopped, replicas were stopped")
        elif self.error:
            self.store.begin()
            self.store.add_event(now, "end", f"error: {self.error}")
            self.store.commit()
            self.store.mark_cut_short(
                "error",
                now,
                f"alloclab stopped the run on an error ({self.error}): sampling "
                "stopped, replicas were stopped, what was recorded is kept",
                end_reason=f"error: {self.error}",
            )
        else:
            self.store.begin()
            self.store.add_event(now, "end", self.stop_reason or "run ended")
            self.store.set_meta(ended_at=now, end_reason=self.stop_reason or "")
            self.store.commit()


# ---- resuming a run whose alloclab died ------------------------------------------------------------


@dataclass
class ResumeResult:
    run_dir: Path
    end_reason: str
    survivors: int  # processes of the run found alive when resuming
    sampled_ticks: int
    interrupted: bool


def resume(run: Path, grace: float = 5.0, on_tick: Callable[[int, int], None] | None = None) -> ResumeResult:
    """`alloclab run --resume RUN`: a run cut short (alloclab killed, disk full) goes on being
    sampled while any of its processes survive — until its planned end, until they all exit, or
    until interrupted — then they are ended and the run is closed. With the watchdog nothing
    survives, so this closes the run cleanly: end reason kept (or 'killed' when nothing recorded
    one), end time = the last sample, a 'resumed' event, leftover cgroups removed."""
    store = Store.open(run)
    meta = store.meta()
    if meta.get("source") is None and not store.replicas():
        # killed between creating the store and recording the run in it: nothing ran, nothing to
        # sample; closed as cut short so the directory is never a store `--resume` refuses
        store.mark_cut_short(
            "killed", time.time(), "alloclab died while setting the run up, before any replica started"
        )
        store.close()
        return ResumeResult(store.run_dir, "killed", 0, 0, False)
    if meta.get("source") != "run":
        store.close()
        raise UserError(f"{run} was not made by `alloclab run`", "--resume continues runs of `alloclab run` only")
    # an ended run first: it is not being recorded, whatever now runs under its runner's pid
    if meta.get("cut_short") == "error":
        store.close()
        raise UserError(
            f"{run} was stopped by an {meta.get('end_reason')}: its replicas were stopped and its end "
            "recorded, so there is nothing to resume",
            f"see what it recorded: alloclab report {run}; fix the error, then run the experiment again",
        )
    if meta.get("end_reason") and meta["end_reason"] not in RESUMABLE_REASONS:
        store.close()
        raise UserError(
            f"{run} ended normally ({meta['end_reason']}); there is nothing to resume",
            f"see its report: alloclab report {run}",
        )
    runner_id = json.loads(meta.get("runner", "null"))
    if runner_id and sampler.is_alive(tuple(runner_id)) and "alloclab" in sampler.read_cmdline(runner_id[0]):
        store.close()
        raise UserError(
            f"{run} is still being recorded by alloclab (pid {runner_id[0]})",
            f"wait for it to end, or stop it: kill -INT {runner_id[0]}",
        )
    cgroups = [
        sampler.Cgroup(Path(path), 1 if path.startswith("/sys/fs/cgroup/memory/") else 2)
        for path in store.cgroup_paths()
        if Path(path).is_dir()
    ]
    finder = reaper.RunProcesses(meta.get("run_token", ""), cgroups, exclude={os.getpid()})
    finder.identities = {(p["pid"], p["start_ticks"]) for p in store.processes()}
    survivors = finder.find() if meta.get("run_token") else set()
    now = time.time()
    store.begin()
    store.add_event(now, "resumed", f"alloclab run --resume: {len(survivors)} processes of the run still alive")
    store.commit()
    ticks, interrupted = 0, False
    if survivors:
        ticks, interrupted = _sample_survivors(
            store, meta, finder, Phases(**json.loads(meta.get("phases", "{}"))), on_tick
        )
        reaper.sweep(finder.find, grace)
    leaked = [c for c in cgroups if not c.remove(wait=5.0)]
    if not store.mark_cut_short("killed", time.time(), "alloclab died during the run (found by run --resume)"):
        store.begin()
        store.set_meta(ended_at=max(float(meta.get("ended_at") or 0), store.last_sample_time() or 0))
        store.commit()
    if leaked:
        store.begin()
        store.add_event(time.time(), "cgroup_leaked", "could not remove " + ", ".join(str(c.path) for c in leaked))
        store.commit()
    reason = store.meta().get("end_reason", "killed")
    store.close()
    return ResumeResult(store.run_dir, reason, len(survivors), ticks, interrupted)


def _sample_survivors(store: Store, meta: dict, finder: reaper.RunProcesses, phases, on_tick) -> tuple[int, bool]:
    """Sample what survived, replica by replica (known by cgroup, recorded process identity or the
    ALLOCLAB_REPLICA in its environment), every interval, until the planned end or none is left."""
    replicas: dict[str, Tracked] = {}
    cgroup_of: dict[str, sampler.Cgroup] = {}
    groups = {g["name"]: g for g in store.groups()}
    for row in store.replicas():
        g = groups[row["group"]]
        spec = AllocatorSpec(
            kind=g["kind"],
            request=g["allocator"],
            path=g["library_path"],
            sha256=g["library_sha256"],
            family=g["family"],
            version=g["version"],
        )
        t = Tracked(id=row["id"], name=row["name"], group_name=row["group"], spec=spec)
        for p in store.processes(row["id"]):
            t.processes[(p["pid"], p["start_ticks"])] = p["id"]
        replicas[row["name"]] = t
        if row["cgroup"] and Path(row["cgroup"]).is_dir():
            cgroup_of[row["name"]] = next(c for c in finder.cgroups if str(c.path) == row["cgroup"])
    interval = float(meta.get("interval", "1"))
    started = float(meta.get("started_at") or time.time())
    planned_end = started + phases.total if phases.total is not None else None
    recorder = Recorder(store, float("inf"), meta.get("metric", "rss"))  # verdicts were recorded before
    budget = sampler.SmapsBudget(float(meta.get("smaps_budget", "0.02")))
    stop = {"now": False}
    previous = {s: signal.signal(s, lambda *a: stop.update(now=True)) for s in (signal.SIGINT, signal.SIGTERM)}
    ticks = 0
    try:
        while not stop["now"] and (planned_end is None or time.time() < planned_end):
            now = time.time()
            procs = sampler.all_processes()
            by_env: dict[str, set[tuple[int, int]]] = {}
            for st in procs.values():
                name = finder.replica_of(st)
                if name is not None:
                    by_env.setdefault(name, set()).add(st.identity)
            store.begin()
            seen = 0
            members = []
            for name, t in replicas.items():
                if name in cgroup_of:
                    members.append((cgroup_of[name].procs(), None))
                else:
                    pids = sampler.tree(set(t.processes) | by_env.get(name, set()), procs)
                    members.append((pids, {pid: procs[pid].start_ticks for pid in pids}))
            for (name, t), readings in zip(replicas.items(), sampler.sample_replicas(members, budget)):
                if readings:
                    seen += len(readings)
                    recorder.observe(t, readings, now, phases.at(now - started), cgroup_of.get(name))
                    finder.identities |= set(t.processes)
            recorder.flush(now)
            store.commit()
            ticks += 1
            if on_tick:
                on_tick(ticks, seen)
            if not seen:
                break
            time.sleep(max(0.0, interval - (time.time() - now)))
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    return ticks, stop["now"]
