"""Runs an experiment: every replica of every group started together, sampled until the end.

Flow: resolve and check everything (nothing is written if the experiment is wrong) -> create the
run directory and store -> start replicas in a seeded interleaved order -> every interval sample
each replica's process tree, verify new processes, commit -> stop (SIGTERM to each process group,
SIGKILL after the grace period) -> record why the run ended.
"""
from __future__ import annotations

import ctypes
import json
import os
import platform
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable

from . import __version__, allocators, sampler, tunables, workloads
from .allocators import AllocatorSpec
from .config import Experiment, Group
from .errors import UserError
from .store import DB_NAME, Store

PR_SET_PDEATHSIG = 1
VERIFY_MIN_AGE = 0.2          # seconds: a younger process may not have exec'd / mapped its preload yet
_libc = ctypes.CDLL(None, use_errno=True)


@dataclass(kw_only=True)
class Tracked:
    """What the recorder keeps per sampled unit (a replica, or a fleet's service)."""
    id: int
    name: str
    group_name: str
    spec: AllocatorSpec
    processes: dict[tuple[int, int], int] = field(default_factory=dict)   # (pid, start) -> process row id
    verified_at: dict[tuple[int, int], float] = field(default_factory=dict)
    verdicts: dict[tuple[int, int], bool | None] = field(default_factory=dict)
    details: dict[tuple[int, int], str] = field(default_factory=dict)
    state: bool | None = None         # verified? (None: not yet known)
    last_metric_kb: int | None = None
    current: set[tuple[int, int]] = field(default_factory=set)           # processes seen last tick


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


def default_run_dir(exp: Experiment) -> Path:
    return Path("runs") / f"{datetime.now().strftime('%Y%m%d-%H%M%S')}-{exp.name}"


def _substitute(argv: tuple[str, ...], values: dict[str, str]) -> list[str]:
    return [a.format_map(values) if "{" in a else a for a in argv]


def _resolve_program(argv0: str, base_dir: Path) -> str:
    if "/" in argv0:
        path = argv0 if os.path.isabs(argv0) else str((base_dir / argv0).resolve())
    else:
        path = shutil.which(argv0) or ""
    if not path or not os.path.isfile(path):
        raise UserError(f"command {argv0!r} not found", "give a path to an executable (relative to the experiment file) or a program on PATH")
    if not os.stat(path).st_mode & 0o111 or not os.access(path, os.X_OK):
        raise UserError(f"command {path} is not executable", f"chmod +x {path}")
    with open(path, "rb") as f:
        head = f.read(4)
    if head != b"\x7fELF" and not head.startswith(b"#!"):
        raise UserError(f"command {path} is neither a program nor a script with #!", "give a compiled program or a script")
    return path


def _provenance(spec: AllocatorSpec) -> str | None:
    """The catalog's provenance record of a catalog id, stored with the run."""
    if spec.kind != "preload" or "@" not in spec.request or "/" in spec.request:
        return None
    from . import catalog
    build = catalog.find_build(spec.request)
    return json.dumps(build.provenance, sort_keys=True) if build else None


def host_metadata() -> dict:
    cpu = ""
    try:
        cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "")
    except OSError:
        pass
    return {"host": socket.gethostname(), "kernel": platform.release(), "os": platform.platform(),
            "glibc": os.confstr("CS_GNU_LIBC_VERSION"), "cpu": cpu, "ncpu": os.cpu_count(),
            "mem_total_kb": sampler.read_meminfo().get("mem_total_kb"), "alloclab_version": __version__,
            "python": platform.python_version()}


class Recorder:
    """Stores what one sampling tick saw: new processes, their verification (with history, so a
    changed allocator is seen), a row per process and a row per replica. Used by the runner and by
    the fleet collector."""

    SAMPLE_COLUMNS = ("t", "replica_id", "phase", "nprocs", "rss_kb", "pss_kb", "uss_kb", "anon_kb", "swap_kb", "cpu_s",
                      "cgroup_kb", "cgroup_peak_kb", "live_bytes", "ops", "tier", "vmsize_kb", "lazyfree_kb")
    PROCESS_COLUMNS = ("t", "process_id", "tier", "rss_kb", "pss_kb", "uss_kb", "anon_kb", "swap_kb", "cpu_user_s",
                       "cpu_sys_s", "minflt", "majflt", "threads", "lazyfree_kb")

    def __init__(self, store: Store, verify_every: float, metric: str):
        self.store, self.verify_every, self.metric = store, verify_every, metric
        self.proc_rows: list[tuple] = []
        self.replica_rows: list[tuple] = []

    def verify(self, r: Tracked, key: tuple[int, int], proc_id: int, now: float) -> None:
        try:
            verdict = allocators.verify_process(key[0], r.spec)
        except OSError:
            return
        previous = r.verdicts.get(key, "unset")
        r.verdicts[key] = verdict.verified
        r.details[key] = verdict.detail
        r.verified_at[key] = now
        if previous != verdict.verified:
            self.store.insert("verifications", t=now, process_id=proc_id, verified=verdict.verified,
                              detail=verdict.detail, mapped_allocator=verdict.mapped_allocator)
            self.store.update("processes", proc_id, verified=verdict.verified, verify_detail=verdict.detail,
                              mapped_allocator=verdict.mapped_allocator)
            if previous is True and verdict.verified is not True:
                self.store.event(now, "allocator_changed", f"pid {key[0]}: {verdict.detail}", r.id, r.group_name)
        states = list(r.verdicts.values())
        state = False if False in states else (None if None in states else True)
        if state != r.state:
            r.state = state
            detail = "; ".join(sorted({r.details[k] for k, v in r.verdicts.items() if v is state}))
            self.store.update("replicas", r.id, verified=state, verify_detail=detail)
            if state is False:
                self.store.event(now, "unverified", f"{r.name}: {detail}", r.id, r.group_name)

    def process_id(self, r: Tracked, rd: sampler.ProcReading, now: float) -> int:
        key = (rd.stat.pid, rd.stat.start_ticks)
        proc_id = r.processes.get(key)
        if proc_id is None:
            found = self.store.query("SELECT id FROM processes WHERE pid = ? AND start_ticks = ?", key)
            proc_id = found[0][0] if found else self.store.insert(
                "processes", replica_id=r.id, pid=key[0], start_ticks=key[1], ppid=rd.stat.ppid, comm=rd.stat.comm,
                cmdline=sampler.read_cmdline(key[0]), first_seen=now, last_seen=now)
            r.processes[key] = proc_id
        return proc_id

    def observe(self, r: Tracked, readings: list[sampler.ProcReading], now: float, phase: str,
                cgroup: sampler.Cgroup | None = None, stats=None) -> None:
        seen = {(rd.stat.pid, rd.stat.start_ticks) for rd in readings}
        for pid, _ in r.current - seen:      # gone since last tick: close its cached /proc files
            sampler.forget(pid)
        r.current = seen
        for rd in readings:
            key = (rd.stat.pid, rd.stat.start_ticks)
            proc_id = self.process_id(r, rd, now)
            if now - r.verified_at.get(key, -1e18) >= self.verify_every and \
                    _process_age(rd.stat.start_ticks) >= VERIFY_MIN_AGE:
                self.verify(r, key, proc_id, now)
            f = rd.full or {}
            self.proc_rows.append((now, proc_id, "full" if rd.full else "cheap", rd.rss_kb, f.get("pss_kb"),
                                   f.get("uss_kb"), f.get("anon_kb"), f.get("swap_kb"), rd.stat.utime_s,
                                   rd.stat.stime_s, rd.stat.minflt, rd.stat.majflt, rd.stat.threads,
                                   f.get("lazyfree_kb")))
            self.store.conn.execute("UPDATE processes SET last_seen=? WHERE id=?", (now, proc_id))
        full = bool(readings) and all(rd.full for rd in readings)
        total = lambda k: sum(rd.full[k] for rd in readings) if full else None  # noqa: E731
        row = (now, r.id, phase, len(readings), sum(rd.rss_kb for rd in readings), total("pss_kb"),
               total("uss_kb"), total("anon_kb"), total("swap_kb"),
               sum(rd.stat.utime_s + rd.stat.stime_s for rd in readings),
               cgroup.usage_kb() if cgroup else None, cgroup.peak_kb() if cgroup else None,
               stats.live_bytes if stats else None, stats.ops if stats else None, "full" if full else "cheap",
               sum(rd.vmsize_kb for rd in readings), total("lazyfree_kb"))
        self.replica_rows.append(row)
        value = row[self.SAMPLE_COLUMNS.index(self.metric + "_kb")]
        r.last_metric_kb = value if value is not None else r.last_metric_kb

    def flush(self, now: float) -> None:
        self.store.insert_many("process_samples", self.PROCESS_COLUMNS, self.proc_rows)
        self.store.insert_many("samples", self.SAMPLE_COLUMNS, self.replica_rows)
        self.proc_rows, self.replica_rows = [], []
        mem = sampler.read_meminfo()
        self.store.insert("host_samples", t=now, load1=os.getloadavg()[0], sampler_cpu_s=time.process_time(), **mem)


class Runner:
    def __init__(self, exp: Experiment, run_dir: Path | None = None,
                 on_tick: Callable[["Runner", float, str], None] | None = None,
                 stop_check: Callable[["Runner", float], str | None] | None = None,
                 max_duration: float | None = None):
        self.exp = exp
        self.on_tick = on_tick
        self.stop_check = stop_check
        self.max_duration = max_duration or exp.max_duration
        self.stop_reason: str | None = None
        self.specs = {g.name: allocators.resolve(g.allocator, exp.base_dir, g.env) for g in exp.groups}
        for g in exp.groups:
            if self.specs[g.name].kind != "bundled":
                tunables.validate(g.env, self.specs[g.name].family, self.specs[g.name].path, g.name)
        self.templates = {g.name: self._template(g) for g in exp.groups}
        self.run_dir = self._make_run_dir(run_dir or default_run_dir(exp))
        self.store = Store.create(self.run_dir / DB_NAME)
        self.recorder = Recorder(self.store, exp.verify_every, exp.metric)
        self.replicas: list[Replica] = []
        self.budget = sampler.SmapsBudget(exp.smaps_budget)
        self.started_mono = 0.0
        self.started_wall = 0.0
        self.cgroup_note = ""

    # ---- preparation: everything that can be wrong is found before the run starts ----
    def _template(self, g: Group) -> tuple[str, ...]:
        argv = g.command or self.exp.command or workloads.command_for(self.exp)
        program = _resolve_program(_substitute(argv[:1], {"replica": "1", "group": g.name, "port": "0",
                                                           "workdir": ".", "seed": "0"})[0], self.exp.base_dir)
        return (program, *argv[1:])

    @staticmethod
    def _make_run_dir(path: Path) -> Path:
        if path.exists() and any(path.iterdir()):
            raise UserError(f"output directory {path} already exists and is not empty", "choose another with -o")
        try:
            path.mkdir(parents=True, exist_ok=True)
            probe = path / ".write-test"
            probe.write_text("")
            probe.unlink()
        except OSError as exc:
            raise UserError(f"cannot write to output directory {path}: {exc.strerror}", "choose a writable directory with -o") from None
        return path.resolve()

    def _record_setup(self) -> None:
        exp, st = self.exp, self.store
        order = [(g.name, i) for g in exp.groups for i in range(1, exp.replicas + 1)]
        random.Random(exp.seed).shuffle(order)
        st.begin()
        st.set_meta(name=exp.name, experiment=exp.source_text, seed=exp.seed, interval=exp.interval,
                    metric=exp.metric, baseline=exp.baseline, replicas_per_group=exp.replicas,
                    phases={"warmup": exp.phases.warmup, "load": exp.phases.load, "idle": exp.phases.idle},
                    start_order=[f"{g}-{i}" for g, i in order], smaps_budget=exp.smaps_budget,
                    command_line=sys.argv, source="run", **host_metadata())
        group_ids = {}
        for g in exp.groups:
            spec = self.specs[g.name]
            group_ids[g.name] = st.insert(
                "groups", name=g.name, allocator=g.allocator, kind=spec.kind, library_path=spec.path,
                library_sha256=spec.sha256, family=spec.family, version=spec.version,
                env_json=json.dumps(g.env), command_json=json.dumps(list(self.templates[g.name])),
                is_baseline=int(g.name == exp.baseline), provenance_json=_provenance(spec))
        notes = []
        for n, (gname, idx) in enumerate(order):
            g = exp.group(gname)
            name = f"{gname}-{idx}"
            log_dir = self.run_dir / "replicas" / name
            workdir = log_dir / "work"
            workdir.mkdir(parents=True)
            port = exp.port_base + n
            values = {"replica": str(idx), "group": gname, "port": str(port), "workdir": str(workdir),
                      "seed": str(exp.seed * 1000 + idx)}
            argv = _substitute(self.templates[gname], values)
            env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
            env.update(g.env)
            env.update(ALLOCLAB_REPLICA=name, ALLOCLAB_GROUP=gname, ALLOCLAB_STATS=str(log_dir / "stats.bin"))
            spec = self.specs[gname]
            if spec.kind == "preload":
                env["LD_PRELOAD"] = spec.path
            cg, why = sampler.make_cgroup(f"alloclab-{os.getpid()}-{name}")
            if cg is None:
                notes.append(why)
            rid = st.insert("replicas", group_id=group_ids[gname], idx=idx, name=name, workdir=str(workdir),
                            start_order=n, cgroup=str(cg.path) if cg else None)
            self.replicas.append(Replica(id=rid, name=name, group_name=gname, spec=spec, idx=idx, group=g, argv=argv,
                                         env=env, workdir=workdir, log_dir=log_dir, port=port, cgroup=cg))
        self.cgroup_note = f"no per-replica memory cgroup ({notes[0]}); cgroup figures are left empty" if notes else ""
        st.set_meta(cgroups="none: " + notes[0] if notes else "per replica")
        st.commit()

    # ---- process control ----
    @staticmethod
    def _child_setup(cgroup_procs: str | None) -> Callable[[], None]:
        def setup() -> None:   # runs in the child between fork and exec: no allocation-heavy work
            if cgroup_procs:
                fd = os.open(cgroup_procs, os.O_WRONLY)
                os.write(fd, str(os.getpid()).encode())
                os.close(fd)
            _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)   # if alloclab dies, so do its replicas
        return setup

    def _spawn(self, argv: list[str], env: dict, cwd: Path, out: Path, err: Path,
               cgroup_procs: str | None) -> subprocess.Popen:
        with open(out, "ab") as so, open(err, "ab") as se:
            return subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=so, stderr=se,
                                    start_new_session=True, preexec_fn=self._child_setup(cgroup_procs))

    def _start_replicas(self) -> None:
        self.started_wall = time.time()
        self.started_mono = time.monotonic()
        self.store.begin()
        for r in self.replicas:
            try:
                r.popen = self._spawn(r.argv, r.env, r.workdir, r.log_dir / "stdout.log", r.log_dir / "stderr.log",
                                      r.cgroup.procs_file if r.cgroup else None)
            except OSError as exc:
                # nothing has been measured yet: stop what started and leave no half-made run behind
                for other in self.replicas:
                    self._stop_group(other.popen, other.cgroup)
                    if other.cgroup:
                        other.cgroup.remove()
                self.store.conn.close()
                shutil.rmtree(self.run_dir, ignore_errors=True)
                raise UserError(f"cannot start {r.argv[0]} for {r.name}: {exc.strerror}",
                                "check that the command runs on its own") from None
            self.store.update("replicas", r.id, started_at=time.time(), root_pid=r.popen.pid)
        self.store.set_meta(started_at=self.started_wall)
        self.store.event(self.started_wall, "start", f"{len(self.replicas)} replicas started")
        self.store.commit()

    def _start_load(self) -> None:
        if not self.exp.load_command:
            return
        for r in self.replicas:
            if r.alive:
                argv = _substitute(self.exp.load_command, {"replica": str(r.idx), "group": r.group.name,
                                                           "port": str(r.port), "workdir": str(r.workdir),
                                                           "seed": str(self.exp.seed * 1000 + r.idx)})
                argv[0] = _resolve_program(argv[0], self.exp.base_dir)
                env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
                r.load_popen = self._spawn(argv, env, r.workdir, r.log_dir / "load.stdout.log",
                                           r.log_dir / "load.stderr.log", None)

    def _stop_group(self, popen: subprocess.Popen | None, cgroup: sampler.Cgroup | None) -> str:
        """SIGTERM the process group (and cgroup members), SIGKILL after the grace period."""
        if popen is None:
            return "not started"
        targets = lambda: set(cgroup.procs()) if cgroup else set()  # noqa: E731
        def signal_all(sig: int) -> None:
            try:
                os.killpg(popen.pid, sig)
            except ProcessLookupError:
                pass
            for pid in targets():
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        if popen.poll() is None or targets():
            signal_all(signal.SIGTERM)
            deadline = time.monotonic() + self.exp.grace
            while time.monotonic() < deadline and (popen.poll() is None or targets()):
                time.sleep(0.05)
            if popen.poll() is None or targets():
                signal_all(signal.SIGKILL)
                popen.wait()
                return "SIGKILL after grace period"
            return "SIGTERM"
        return "already exited"

    # ---- one sampling tick ----
    def _sample(self, now: float, phase: str, parents: dict[int, int] | None) -> None:
        for r in self.replicas:
            if r.cgroup:
                pids = r.cgroup.procs()
            else:
                roots = {r.popen.pid} | {k[0] for k in r.processes}
                pids = sorted({p for root in roots for p in sampler.descendants(root, parents or {})})
            readings = sampler.sample_processes(pids, self.budget)
            if not readings and not r.alive:
                continue
            self.recorder.observe(r, readings, now, phase, r.cgroup, workloads.read_stats(r.stats_path))
        self.recorder.flush(now)

    def _reap(self, now: float, planned_end: float | None) -> None:
        for r in self.replicas:
            if r.alive and r.popen is not None and r.popen.poll() is not None and not (r.cgroup and r.cgroup.procs()):
                r.exited_at = now
                code = r.popen.returncode
                early = planned_end is None or now < planned_end - self.exp.interval
                kind = "replica_exit" if early else "replica_end"
                self.store.update("replicas", r.id, ended_at=now, exit_code=code)
                self.store.event(now, kind, f"{r.name} exited with code {code}" +
                                 (" before the planned end" if early and planned_end else ""), r.id, r.group.name)

    # ---- the run ----
    def run(self) -> RunResult:
        self._record_setup()
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self._start_replicas()
            self.stop_reason = self._loop()
        finally:
            self._finish()     # also on errors: replicas stopped, data kept
            for s, h in previous.items():
                signal.signal(s, h)
        return RunResult(self.run_dir, self.stop_reason, self.stop_reason == "interrupted")

    def _on_signal(self, signum: int, frame) -> None:
        self.stop_reason = "interrupted"

    def _loop(self) -> str:
        exp = self.exp
        planned = exp.phases.total
        if self.max_duration is not None:
            planned = min(planned, self.max_duration) if planned is not None else self.max_duration
        need_parents = any(r.cgroup is None for r in self.replicas)
        phase, next_tick = None, self.started_mono
        while True:
            elapsed = time.monotonic() - self.started_mono
            now = time.time()
            new_phase = exp.phases.at(elapsed)
            self.store.begin()
            if new_phase != phase:
                self.store.event(now, "phase", f"{new_phase} phase begins")
                if new_phase == "load":
                    self._start_load()
                if new_phase == "idle":
                    for r in self.replicas:
                        self._stop_group(r.load_popen, None)
                phase = new_phase
            self._reap(now, self.started_wall + planned if planned else None)
            self._sample(now, phase, sampler.all_parents() if need_parents else None)
            self.store.commit()
            if self.on_tick:
                self.on_tick(self, elapsed, phase)
            if self.stop_reason:
                return self.stop_reason
            if all(not r.alive for r in self.replicas):
                return "all replicas exited"
            if planned is not None and elapsed >= planned:
                return "planned duration reached" if self.max_duration is None or (exp.phases.total or 0) <= self.max_duration \
                    else "max duration reached"
            if self.stop_check:
                verdict = self.stop_check(self, elapsed)
                if verdict:
                    return verdict
            next_tick += exp.interval
            while next_tick <= time.monotonic():       # overran: skip ticks rather than bunch them
                next_tick += exp.interval
            delay = next_tick - time.monotonic()
            if planned is not None:
                delay = min(delay, max(0.0, self.started_mono + planned - time.monotonic()))
            time.sleep(max(0.0, delay))

    def _finish(self) -> None:
        self.store.commit()
        now = time.time()
        for r in self.replicas:
            self._stop_group(r.load_popen, None)
            result = self._stop_group(r.popen, r.cgroup)
            if r.alive and r.popen is not None:
                self.store.update("replicas", r.id, ended_at=time.time(), exit_code=r.popen.returncode)
                r.exited_at = now
            if result.startswith("SIGKILL"):
                self.store.event(time.time(), "sigkill", f"{r.name} ignored SIGTERM for {self.exp.grace:g}s", r.id, r.group.name)
            if r.cgroup:
                r.cgroup.remove()
        self.store.event(time.time(), "end", self.stop_reason or "run ended")
        self.store.set_meta(ended_at=time.time(), end_reason=self.stop_reason or "")
        self.store.commit()



def _process_age(start_ticks: int) -> float:
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return uptime - start_ticks / sampler.CLK_TCK
