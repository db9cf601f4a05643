"""The fleet collector (`alloclab fleet collect`): samples a plan's systemd units into a run store,
resumable, and optionally publishes every tick for Prometheus (serve/metrics.py).

Cost (issue 25): systemd is asked only about units whose main process was lost since the last
tick, all of them in one batched query (fleet.systemd.Units.unit_states) by a background thread, so a
tick never waits for systemd (SystemdQuestions); every tick reads each unit's memory from /proc,
its members from its cgroup.procs every MEMBERSHIP_SECONDS or as soon as a known member is gone
(fleet_reader.c; docs/how-to/fleet.md gives what that can miss), with the full tier under its CPU
budget, capped per tick. Ticks keep a fixed schedule (slots t0 + k * interval; a tick that
overruns skips the slots it missed and counts as late), and every wait is interruptible, so
SIGTERM ends the collector within one tick at any interval. A unit without a process is absent
(no sample stored, `alloclab_unit_up 0`), never 0 bytes.
"""

from __future__ import annotations

import collections
import gc
import json
import resource
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..allocators import library
from ..capture import sampler
from ..capture.host import host_metadata
from ..capture.recorder import VERIFY_MIN_AGE, VERIFY_SETTLE_S, Recorder, Tracked
from ..common import rootfs, settings
from ..common.errors import UserError
from ..common.outputs import writable_directory
from ..experiment_file import parse_duration
from ..serve import metrics
from ..store import DB_NAME, Store
from . import deployed, fleetread, unitfile
from .deploy import library_identity
from .plan import Plan
from .systemd import START_STATES_TIMEOUT, Units, cgroup_files, read_cgroup_procs

REASK_DOWN = 5.0  # seconds between questions to systemd about a unit with no process and no known cgroup
LATE_SHARE = 0.1  # a tick that starts more than this share of the interval after its slot is late
MEMBERSHIP_SECONDS = 10.0  # a unit's cgroup.procs (and its members' stat) read at least this often; statm every tick
# a unit's level before a deploy: its mean resident memory over the day before it (a whole daily
# cycle: with a ±10% cycle, a 1-hour level alerted falsely on 18.5% of unchanged units in 14 days, the
# day's on 0.4%: benchmarks/watch_after_deploy_calibration.py)
PRE_DEPLOY_S = 86400.0


def install_collector(
    units: Units,
    plan: Path,
    run: Path,
    interval: str,
    systemctl: str | None = None,
    listen: str | None = None,
    host: str | None = None,
    duration: str | None = None,
) -> Path:
    """A systemd unit that runs the collector (it resumes the same run after restarts) with every
    option it was given, and this user's alloclab cache as its ALLOCLAB_CACHE (where `fleet collect
    --install` built the native reader: a service's environment has no XDG_CACHE_HOME, maybe another
    HOME). Durations are parsed and written back in seconds; paths are absolute; every value is
    quoted by unitfile."""
    seconds = parse_duration(interval, "--interval")
    argv = [
        sys.executable,
        "-m",
        "alloclab",
        "fleet",
        "collect",
        "--plan",
        str(plan.resolve()),
        "-o",
        str(run.resolve()),
        "--interval",
        f"{seconds:g}s",
        "--root",
        str(units.root.resolve()),
    ]
    if systemctl not in (None, "auto"):
        argv += ["--systemctl", systemctl]
    if listen is not None:
        metrics.parse_listen(listen)
        argv += ["--listen", listen]
    if host is not None:
        unitfile.check_value(host, "--host")
        argv += ["--host", host]
    if duration is not None:
        argv += ["--duration", f"{parse_duration(duration, '--duration'):g}s"]
    unit = units.root / "etc" / "systemd" / "system" / "alloclab-collector.service"
    text = (
        "[Unit]\nDescription=alloclab fleet collector\nAfter=network.target\n\n[Service]\n"
        + unitfile.environment_line(settings.CACHE, str(settings.cache_root().resolve()), "the alloclab cache")
        + "\n"
        + unitfile.exec_line("ExecStart", argv, "collector command")
        + "\nRestart=always\nRestartSec=5\n\n[Install]\nWantedBy="
        + ("default.target" if systemctl == "user" else "multi-user.target")
        + "\n"
    )
    rootfs.Root(units.root).write(unit, text)  # never through a link under the root
    units.daemon_reload()
    return unit


@dataclass
class Watch:
    """What the collector knows of one unit between ticks."""

    tracked: Tracked
    main: tuple[int, int] | None = None  # (pid, start ticks) of its main process, as systemd named it
    procs: str | None = None  # its cgroup.procs file (kept while it is down: the path returns)
    memory: sampler.Cgroup | None = None
    asked: float = -1e18  # monotonic time systemd was last asked about it
    up: bool = False
    start_time: float | None = None  # unix time its main process started
    follows: deployed.Following | None = (
        None  # the generation it follows (resolved again when its main process changes)
    )
    followed_main: tuple[int, int] | None = None  # the main process it was resolved with
    check: DeployedCheck | None = None  # where the generation's allocator is not its plan group's
    pre_deploy_kb: float | None = None  # its level before the generation it follows
    deployed_verified: bool | None = None  # `check`'s verdict this tick


def allocator_spec(g: dict) -> library.AllocatorSpec:
    """What verification looks for in a unit of group `g` (a plan's group)."""
    try:
        where = library_identity(g["library"])
    except OSError:  # a generation's library gone since: matched by path and sha256
        where = {}
    return library.AllocatorSpec(
        kind=g["kind"],
        request=g["allocator"],
        path=g["library"],
        sha256=g["sha256"],
        family=g["family"],
        version=g["version"],
        **where,
    )


def _same_allocator(a: dict, b: dict) -> bool:
    return all(a.get(k) == b.get(k) for k in ("kind", "allocator", "library", "sha256"))


class DeployedCheck:
    """A unit's processes checked against the allocator of the generation it follows, where that
    is not its plan group's. The store keeps the experiment's own verification (the analysis
    attributes samples by it); the exposition, and the alerts, this one."""

    def __init__(self, group: dict, every: float):
        self.spec, self.every = allocator_spec(group), every
        self.verdicts: dict[tuple[int, int], bool | None] = {}
        self.at: dict[tuple[int, int], float] = {}

    def observe(self, readings: list[sampler.ProcReading], now: float) -> bool | None:
        """False when one process does not map it, True when every one does, None while unknown."""
        keys = {rd.stat.identity: rd.stat.start_ticks for rd in readings}
        for key, start in keys.items():
            if now - self.at.get(key, -1e18) < self.every:  # before the age: it reads /proc/uptime
                continue
            age = sampler.process_age(start)
            if age < VERIFY_MIN_AGE:
                continue
            try:
                verdict = library.verify_process(key[0], self.spec).verified
            except OSError:
                continue
            if verdict is not True and key not in self.verdicts and age < VERIFY_SETTLE_S:
                continue  # maybe still loading: read again next tick
            self.verdicts[key], self.at[key] = verdict, now
        for key in [k for k in self.verdicts if k not in keys]:
            del self.verdicts[key], self.at[key]
        return current_state(self.verdicts, keys)


def current_state(verdicts: dict[tuple[int, int], bool | None], live) -> bool | None:
    """Verified now: False when one live process does not map the allocator, True when every one
    does, None while one is unknown. (The store's replica state keeps every process it ever saw: a
    unit once off stays unverified for the run; the exposition tells what runs now.)"""
    states = [verdicts[k] for k in live if k in verdicts]
    return False if False in states else (None if None in states or not states else True)


class TickClock:
    """Fixed slots t0 + k * interval; `wait` sleeps to the next slot (interruptibly) and says how
    late the tick that follows starts; slots missed by an overrunning tick are skipped."""

    def __init__(self, interval: float, stop: threading.Event):
        self.interval, self.stop = interval, stop
        self.t0 = time.monotonic()
        self.slot = 0

    def wait(self) -> float | None:
        """Lateness of the next tick in seconds (from the slot it was due at, the one right after the
        last tick's, even when an overrun skips to a later slot), None when stopped while waiting."""
        due = self.t0 + (self.slot + 1) * self.interval
        self.slot = max(self.slot + 1, int((time.monotonic() - self.t0) / self.interval) + 1)
        if self.stop.wait(max(0.0, self.t0 + self.slot * self.interval - time.monotonic())):
            return None
        return max(0.0, time.monotonic() - due)


def _raise_open_files() -> int:
    """Descriptors to /proc files stay open between ticks: the soft limit raised to the hard one,
    a fifth of it for the Python sampler's (smaps_rollup, and stat + statm where the native reader
    is not used), two fifths for the native reader's processes (2 each), the rest for the units'
    cgroup.procs (one each), the store and the exposition. Returns the native reader's process cap.
    (At 20,000 descriptors the cap was 1,250 processes: at 2,000 units the other 750 were opened
    afresh every tick, and their units' cgroup.procs read every tick: 38 ms a read, not 11.)"""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else max(soft, 65536), hard))
    soft = min(1 << 20, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    # at the import-time cap (4,096) the sampler's three descriptors a process for 2,000 processes
    # were evicted oldest-first every tick: every read opened afresh (benchmarks/README.md)
    sampler.MAX_OPEN_FILES = max(sampler.MAX_OPEN_FILES, soft // 5)
    return max(16, soft // 5)


class SystemdQuestions:
    """A background thread that asks systemd about the units a tick hands it (`ask`), all of them in
    one batched query per round, and keeps the answers until the next tick takes them (`answers`).
    Why: with 20 of 200 units in a crash loop, a tick that asked systemd itself started up to 105%
    of the interval late (benchmarks/fleet_collector.py --crashing). A failed query is retried after
    RETRY_S; units asked about while a query runs go in the next one."""

    RETRY_S = 1.0

    def __init__(self, units: Units, health: metrics.CollectorHealth | None):
        self.units, self.health = units, health
        self.lock = threading.Lock()
        self.wanted: set[str] = set()
        self.got: dict = {}
        self.wake, self.closed = threading.Event(), threading.Event()
        self.queries = 0
        self.last_error: str | None = None
        self.thread: threading.Thread | None = None  # started at the first question

    def ask(self, names: list[str]) -> None:
        if not names:
            return
        with self.lock:
            self.wanted.update(names)
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="alloclab-systemd-questions", daemon=True)
            self.thread.start()
        self.wake.set()

    def answers(self) -> dict:
        """unit -> UnitState, every answer that arrived since the last call."""
        with self.lock:
            got, self.got = self.got, {}
        return got

    def _run(self) -> None:
        while not self.closed.is_set():
            self.wake.wait()
            self.wake.clear()
            with self.lock:
                names = sorted(self.wanted)
            if not names or self.closed.is_set():
                continue
            try:
                states = self.units.unit_states(names)
            except (UserError, OSError) as exc:  # the thread lives on: the next round asks again
                self.last_error = exc.problem if isinstance(exc, UserError) else str(exc)
                if self.health:
                    self.health.error("systemd")
                self.wake.set()
                self.closed.wait(self.RETRY_S)
                continue
            with self.lock:
                self.got.update(states)
                self.wanted.difference_update(names)
            self.queries += 1

    def close(self) -> None:
        """Stop the thread; a query under way is not waited for (the collector is exiting)."""
        self.closed.set()
        self.wake.set()
        if self.thread is not None:
            self.thread.join(timeout=0.2)


class UnitReader:
    """Each tick: the members of every unit (cgroup.procs, or the main process's tree where a unit
    has no cgroup) and their readings; the units whose main process is unknown or gone handed to
    SystemdQuestions, its answers taken at the start of the next tick."""

    def __init__(
        self,
        units: Units,
        watches: dict[str, Watch],
        health: metrics.CollectorHealth | None = None,
        native: fleetread.NativeReader | None = None,
        membership_every: int = 1,
    ):
        self.units, self.watches, self.health, self.native = units, watches, health, native
        self.index = {unit: i for i, unit in enumerate(watches)}
        self.names = list(watches)
        if native is not None:
            native.set_units(len(watches))
            native.membership_every(membership_every)
        self.boot = time.time() - sampler.uptime()
        self.questions = SystemdQuestions(units, health)
        self.first_queries = 0
        self.last_error: str | None = None

    @property
    def queries(self) -> int:
        """Batched systemd questions asked (benchmarks)."""
        return self.first_queries + self.questions.queries

    def close(self) -> None:
        self.questions.close()

    def _ask_now(self, names: list[str], timeout: float) -> None:
        """The first question, waited for: the collector cannot start without it."""
        try:
            states = self.units.unit_states(names, timeout=timeout)
        except UserError as exc:
            self.last_error = exc.problem
            if self.health:
                self.health.error("systemd")
            return
        self.first_queries += 1
        self._apply(states)

    def _apply(self, states: dict) -> None:
        now = time.monotonic()
        for unit, state in states.items():
            w = self.watches[unit]
            w.asked = now
            st = sampler.read_stat(state.main_pid) if state.main_pid else None
            w.main = st.identity if st else None
            w.start_time = self.boot + st.start_ticks / sampler.CLK_TCK if st else None
            if state.control_group:
                procs, w.memory = cgroup_files(state.control_group)
                if self.native is not None and procs != w.procs:  # (set again: its membership read afresh)
                    self.native.set_unit(self.index[unit], procs)
                w.procs = procs

    def _members(self, w: Watch, table: dict | None) -> list[int]:
        if w.procs is not None:
            return read_cgroup_procs(w.procs) or []
        if w.main is None:
            return []
        return sampler.tree({w.main}, table) if table is not None else []

    def _sample(self, budget: sampler.SmapsBudget, table: dict | None) -> dict[str, list[sampler.ProcReading]]:
        """The cheap tier of every unit (natively where a unit has a cgroup.procs file, else in
        Python from its members), then one full-tier pass over all of them (one budget order)."""
        native = self.native is not None
        members = {u: self._members(w, table) for u, w in self.watches.items() if not (native and w.procs)}
        readings = {r.stat.pid: r for r in sampler.sample_processes([p for ps in members.values() for p in ps], None)}
        out = {unit: [readings[p] for p in ps if p in readings] for unit, ps in members.items()}
        if native:
            by_index = self.native.read()
            out.update((u, by_index.get(i, [])) for u, i in self.index.items() if u not in members)
        sampler.full_tier([r for rs in out.values() for r in rs], budget)
        return out

    def read(self, budget: sampler.SmapsBudget, first: bool = False) -> dict[str, list[sampler.ProcReading]]:
        """unit -> its readings this tick ([] when it has no process)."""
        if first:
            self._ask_now(self.names, START_STATES_TIMEOUT)
        else:
            self._apply(self.questions.answers())
        now = time.monotonic()
        table = sampler.all_processes() if any(w.procs is None for w in self.watches.values()) else None
        out = self._sample(budget, table)
        lost = []
        for unit, w in self.watches.items():  # (a plain loop: 2,000 units a tick)
            main = w.main
            if main is not None:
                for r in out[unit]:
                    if r.stat.pid == main[0] and r.stat.start_ticks == main[1]:
                        break
                else:
                    lost.append(unit)  # its main process is gone: a restart, a stop, or a crash loop
            elif out[unit] or now - w.asked >= REASK_DOWN:
                lost.append(unit)  # processes back in its cgroup, or a periodic look at a stopped unit
        if not first:
            self.questions.ask(lost)
        return out


@dataclass
class CgroupReading:
    """A unit's memory cgroup read once this tick (the recorder asks for usage and peak)."""

    usage: int | None
    peak: int | None

    def usage_kb(self) -> int | None:
        return self.usage

    def peak_kb(self) -> int | None:
        return self.peak


class Follower:
    """Keeps each unit's Watch on the generation it follows (fleet/deployed.py): the state
    directory is listed every tick and read again when it changed; a unit is resolved again when
    its main process changes (the rollout restarting it). Each move is a `deployed_state` event."""

    def __init__(
        self,
        units: Units,
        plan_groups: dict[str, dict],
        host: str | None,
        verify_every: float,
        health: metrics.CollectorHealth | None,
    ):
        self.root, self.plan_groups, self.host = units.root, plan_groups, host
        self.store: Store | None = None  # the run's, once open (each unit's level before a deploy)
        self.verify_every, self.health = verify_every, health
        self.known: dict[str, deployed.Generation] = {}  # each generation read once it is complete
        self.seen = deployed.signature(self.root)  # a --root whose state cannot be listed: refused at start
        self.gens, self.complete, self.problems = deployed.generations(self.root, host, self.known, self.seen)
        self.reported: set[str] = set()

    def refresh(self) -> bool:
        """True when the generations changed since the last tick (read again then, and every tick
        while one has no manifest yet: an apply writes it before it restarts any unit, and a unit
        restarted before its generation is read would be judged by the one before)."""
        try:
            sig = deployed.signature(self.root)
            if sig == self.seen and self.complete:
                return False
            gens, self.complete, self.problems = deployed.generations(self.root, self.host, self.known, sig)
            changed, self.seen, self.gens = sig != self.seen or gens != self.gens, sig, gens
        except UserError as exc:  # the state directory refused (rootfs): the units keep what they follow
            self.complete, self.problems = False, [exc.problem]
            self.report(time.time())
            return False
        self.report(time.time())
        return changed

    def report(self, now: float) -> None:
        """Each problem met reading the generations, once: a `deployed_state` event in the run and
        the collector's error counter (kind deployed_state)."""
        for problem in self.problems:
            if problem not in self.reported and self.store is not None:
                self.reported.add(problem)
                self.store.add_event(now, "deployed_state", f"generations: {problem}")
                if self.health:
                    self.health.error("deployed_state")

    def follow(self, unit: str, w: Watch, now: float, announce: bool = True) -> None:
        f = deployed.following(self.gens, unit, self.plan_groups[unit], w.start_time)
        w.followed_main = w.main
        if w.follows is not None and (w.follows.label, w.follows.group) == (f.label, f.group):
            return
        w.follows, plan_group = f, self.plan_groups[unit]
        w.check = (
            DeployedCheck(f.group, self.verify_every) if f.group and not _same_allocator(f.group, plan_group) else None
        )
        w.deployed_verified, w.pre_deploy_kb = None, None
        if f.generation is not None:
            mean, n = self.store.mean_between(
                w.tracked.id, "rss_kb", f.generation.applied_at - PRE_DEPLOY_S, f.generation.applied_at
            )
            w.pre_deploy_kb = mean if n else None
        if announce:
            what = (
                f"{f.group['name']} ({metrics.allocator_label(f.group)})"
                if f.group
                else "allocator unknown" + ("" if f.generation else " (the state before alloclab)")
            )
            self.store.add_event(
                now, "deployed_state", f"{unit}: generation {f.label}: {what}", w.tracked.id, w.tracked.group_name
            )


def _cgroup_reading(cgroup: sampler.Cgroup | None, budget: sampler.SmapsBudget) -> CgroupReading | None:
    """The unit cgroup's memory figures, read within the full tier's budget: cgroup v1's
    memory.usage_in_bytes costs the kernel ~40-90 us a read (measured: benchmarks/fleet_collector.py),
    more than the cheap tier's whole per-unit cost."""
    if cgroup is None or not budget.allowed():
        return None
    t0 = time.thread_time()
    reading = CgroupReading(cgroup.usage_kb(), cgroup.peak_kb())
    budget.spent += time.thread_time() - t0
    return reading


def collect(
    units: Units,
    plan: Plan,
    run: Path,
    interval: float,
    duration: float | None,
    say=print,
    smaps_budget: float = 0.02,
    verify_every: float = 300.0,
    exposition: metrics.Exposition | None = None,
    host: str | None = None,
) -> dict:
    """Sample every unit of the plan into RUN until stopped (or for `duration` seconds). A run that
    exists is resumed: same groups and replicas, a `collector_resumed` event marks the gap. With an
    `exposition`, every tick's rows are also published for Prometheus (serve/metrics.py), labelled `host`
    (default: this machine's name, also stored with each replica). Refuses (UserError) when none
    of the plan's units has a process whose memory can be read, before anything is stored."""
    groups = {g["name"]: g for g in plan.data["groups"]}
    host = host or socket.gethostname()
    health = exposition.health if exposition is not None else None
    native_reader, why_not = fleetread.open_reader(_raise_open_files())
    if native_reader is None:
        say(f"reading units in Python (slower): {why_not}")
    watches: dict[str, Watch] = {}
    for a in plan.assignments:
        spec = allocator_spec(groups[a["group"]])
        watches[a["unit"]] = Watch(Tracked(id=0, name=a["unit"], group_name=a["group"], spec=spec))
    reader = UnitReader(units, watches, health, native_reader, max(1, round(MEMBERSHIP_SECONDS / interval)))
    # capped per tick at the budget's share of one interval: a tick never spends what skipped slots accrued
    budget = sampler.SmapsBudget(smaps_budget, per_tick=smaps_budget * interval)
    first = reader.read(budget, first=True)
    if not any(first.values()):
        having = [u for u, w in watches.items() if w.main is not None]
        if having:
            raise UserError(
                f"cannot read the memory of any of the {len(watches)} units' processes (e.g. {having[0]}, "
                f"pid {watches[having[0]].main[0]})",
                "run the collector as root or as the units' user",
            )
        raise UserError(
            f"none of the plan's {len(watches)} units has a running process here "
            f"({type(units).__name__} under {units.root}"
            + (f"; {reader.last_error}" if reader.last_error else "")
            + ")",
            "start the units, or give the --systemctl (systemd, user) and --root the plan was made with",
        )
    resumed = (run / DB_NAME).exists()
    plan_groups = {a["unit"]: groups[a["group"]] for a in plan.assignments}
    follower = Follower(units, plan_groups, plan.data.get("host"), verify_every, health)  # before anything is stored
    if resumed:
        store = Store.open(run)
        if store.meta().get("source") != "fleet":
            raise UserError(f"{run} is not a fleet run", "give a new directory or the collector's own run")
    else:
        writable_directory(run)
        store = Store.create(run / DB_NAME)
    follower.store = store
    store.begin()
    last = store.last_sample_time()
    if resumed:
        store.add_event(
            time.time(),
            "collector_resumed",
            f"collector restarted; no samples for {time.time() - (last or time.time()):.0f} s",
        )
    else:
        store.set_meta(
            name=plan.data["name"],
            source="fleet",
            metric="rss",
            interval=interval,
            seed=plan.data["seed"],
            baseline=plan.data["groups"][0]["name"],
            experiment=plan.data["experiment"],
            plan=str(plan.path),
            started_at=time.time(),
            **{**host_metadata(), "host": host},
        )
        for g in plan.data["groups"]:
            store.add_group(
                name=g["name"],
                allocator=g["allocator"],
                kind=g["kind"],
                library_path=g["library"],
                library_sha256=g["sha256"],
                family=g["family"],
                version=g["version"],
                env_json=json.dumps(g["env"]),
                command_json="[]",
                is_baseline=int(g["name"] == plan.data["groups"][0]["name"]),
            )
        gid = {r["name"]: r["id"] for r in store.groups()}
        for i, a in enumerate(plan.assignments):
            store.add_replica(
                group_id=gid[a["group"]], idx=i, name=a["unit"], start_order=i, started_at=time.time(), host=host
            )
    store.commit()
    recorder = Recorder(store, verify_every, "rss", single_process_rows=False)
    for row in store.replicas():
        if row["name"] in watches:
            watches[row["name"]].tracked.id = row["id"]
    store.begin()
    for unit, w in watches.items():
        follower.follow(unit, w, time.time(), announce=False)
    follower.report(time.time())
    store.commit()
    # each unit's main process identity, kept in the store so a resumed collector sees restarts
    mains = {u: tuple(v) for u, v in json.loads(store.meta().get("fleet_main_processes", "{}")).items()}
    restarts = {unit: 0 for unit in watches}
    for e in store.events(kinds=["process_restart"]):
        unit = e["description"].split(":")[0]
        if unit in restarts:
            restarts[unit] += 1
    # what start-up built (plan, watches, the store's caches) lives as long as the collector: out of
    # the cyclic collector's reach, so its full passes walk only what the ticks allocate
    gc.freeze()
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *a: stop.set())
    clock = TickClock(interval, stop)
    started, ticks = time.monotonic(), 0
    lateness: collections.deque[float] = collections.deque(maxlen=100_000)
    durations: collections.deque[float] = collections.deque(maxlen=100_000)
    tick_cpu: collections.deque[float] = collections.deque(maxlen=100_000)  # process CPU per tick
    # process CPU per tick by phase: reading units (and the full tier), recording rows, writing them
    phase_cpu = {k: collections.deque(maxlen=100_000) for k in ("read", "record", "store")}
    readings_now: dict[str, list[sampler.ProcReading]] | None = first
    try:
        while duration is None or time.monotonic() - started < duration:
            t_tick, cpu_tick = time.monotonic(), time.process_time()
            budget.begin_tick()
            now = time.time()
            if last is not None and now <= last:  # never two samples at one time, even across restarts
                now = last + 1e-3
            readings = readings_now if readings_now is not None else reader.read(budget)
            readings_now = None
            cpu_read = time.process_time()
            mains_changed = False
            cgroups = budget.allowed()  # else no unit's cgroup is read this tick (asked once, not per unit)
            store.begin()
            refollow = follower.refresh()
            for unit, w in watches.items():
                rd, t = readings[unit], w.tracked
                if refollow or w.followed_main != w.main:
                    follower.follow(unit, w, now)
                if rd and w.main is not None and mains.get(unit) != w.main:
                    if mains.get(unit):
                        store.add_event(
                            now,
                            "process_restart",
                            f"{unit}: main process {mains[unit][0]} -> {w.main[0]}",
                            t.id,
                            t.group_name,
                        )
                        restarts[unit] += 1
                    mains[unit] = w.main
                    mains_changed = True
                if rd:
                    recorder.observe(t, rd, now, "load", cgroup=_cgroup_reading(w.memory, budget) if cgroups else None)
                    if w.check is not None:
                        w.deployed_verified = w.check.observe(rd, now)
                elif w.up:
                    store.add_event(now, "unit_stopped", f"{unit}: no process", t.id, t.group_name)
                w.up = bool(rd)
            if exposition is not None:
                exposition.publish(_snapshot(now, host, watches, recorder.replica_rows, restarts))
            cpu_record = time.process_time()
            recorder.flush(now)
            if mains_changed:  # ~2 ms of JSON at 2,000 units: only when one changed
                store.set_meta(fleet_main_processes=mains)
            store.commit()
            last = now
            ticks += 1
            spent = time.monotonic() - t_tick
            durations.append(spent)
            cpu_end = time.process_time()
            tick_cpu.append(cpu_end - cpu_tick)
            for k, v in (
                ("read", cpu_read - cpu_tick),
                ("record", cpu_record - cpu_read),
                ("store", cpu_end - cpu_record),
            ):
                phase_cpu[k].append(v)
            if health:
                health.tick(spent)
            if duration is not None and time.monotonic() - started >= duration:
                break
            late = clock.wait()
            if late is None:
                break
            lateness.append(late)
            if health and late > LATE_SHARE * interval:
                health.late()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        gc.unfreeze()  # (collect called in a longer-lived process: tests)
        store.set_meta(ended_at=time.time(), end_reason="collector stopped")
        store.close()
        reader.close()
        if native_reader is not None:
            native_reader.close()
    say(f"collected {ticks} rounds of {len(watches)} units into {run}")
    return {
        "ticks": ticks,
        "resumed": resumed,
        "lateness": list(lateness),
        "durations": list(durations),
        "tick_cpu": list(tick_cpu),
        "phase_cpu": {k: list(v) for k, v in phase_cpu.items()},
        "systemd_queries": reader.queries,
        "full_tier_cpu_s": budget.spent,
    }


def _snapshot(
    now: float, host: str, watches: dict[str, Watch], rows: list[tuple], restarts: dict[str, int]
) -> metrics.Snapshot:
    """This tick's replica rows (exactly what goes to the store) as one exposition snapshot; a
    unit without a row this tick is down (no figures, only its up, info and restart counter).
    Labels and verification follow the generation each unit follows (Follower)."""
    cols = Recorder.SAMPLE_COLUMNS
    by_id = {row[cols.index("replica_id")]: row for row in rows}
    snap = metrics.Snapshot(t=now, host=host)
    for unit, w in watches.items():
        row, t, f = by_id.get(w.tracked.id), w.tracked, w.follows
        g = f.group or {}
        verified = (
            (w.deployed_verified if w.check is not None else current_state(t.verdicts, t.current))
            if row and f.group
            else None
        )
        snap.units.append(
            metrics.UnitFigures(
                unit=unit,
                group=g.get("name", ""),
                allocator=metrics.allocator_label(g) if g else "",
                version=g.get("version") or "",
                sha256=g.get("sha256") or "",
                up=row is not None,
                nprocs=row[cols.index("nprocs")] if row else 0,
                memory_kb={c: row[cols.index(c)] for c in metrics.MEMTYPES} if row else {},
                cpu_s=row[cols.index("cpu_s")] if row else None,
                verified=verified,
                restarts=restarts[unit],
                start_time=w.start_time if row else None,
                generation=f.label,
                generation_number=f.number,
                generation_time=f.generation.applied_at if f.generation else None,
                pre_deploy_kb=w.pre_deploy_kb,
            )
        )
    return snap
