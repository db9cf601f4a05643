"""`alloclab fleet ...`: experiments on live systemd services and a careful rollout."""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ..common import exitcodes
from ..common.errors import UserError
from ..common.outputs import writable_file
from ..experiment_file import parse_duration
from ..fleet import canary, collector, fleetread, rollout, unitfile
from ..fleet.deploy import apply_plan, deploy, rollback
from ..fleet.plan import load_plan, make_fleet_plan, make_plan, unit_facts
from ..fleet.systemd import units_from
from ..serve import metrics
from .conventions import emit_json as _emit_json  # --json: one document on stdout, as every verb


def _progress(console: Console, as_json: bool):
    """Where progress lines go: the console, or stderr when stdout carries the JSON."""
    if not as_json:
        return console.print
    return lambda line: print(line, file=sys.stderr, flush=True)


def _memory_and_uptime(unit: dict) -> tuple[str, str]:
    """A unit's memory (MB) and uptime (h) as the tables show them: a unit with no main process
    (stopped, failed) has neither, not 0.0 MB for 0.00 h."""
    if "main_pid" in unit and unit["main_pid"] is None:
        return "not running", "–"
    return f"{unit['memory_kb'] / 1024:.1f}", f"{unit['uptime_s'] / 3600:.2f}"


def facts_command(
    units_glob: str, host: str | None, root: Path, systemctl: str | None, as_json: bool, console: Console
) -> None:
    facts = unit_facts(units_from(systemctl, root), units_glob, host)
    if as_json:
        _emit_json(facts)
        return
    t = Table("unit", "memory MB", "uptime h", "user", "ProtectHome", "ProtectSystem", title=f"host {facts['host']}")
    for u in facts["units"]:
        sb = u["sandbox"]
        t.add_row(u["unit"], *_memory_and_uptime(u), sb["user"], sb["protect_home"], sb["protect_system"])
    console.print(t)


PLAN_ROWS_SHOWN = 200


def plan_command(
    units_glob: str | None,
    groups: Path,
    seed: int,
    out: Path,
    root: Path,
    systemctl: str | None,
    console: Console,
    facts: tuple[Path, ...] = (),
    as_json: bool = False,
) -> None:
    if facts and units_glob:
        raise UserError("give --units (this host) or --facts (a fleet), not both", "drop one of them")
    writable_file(out, "plan file")  # before the units' facts are gathered, not after
    if facts:
        plan = make_fleet_plan(list(facts), groups, seed, out)
    elif units_glob:
        plan = make_plan(units_from(systemctl, root), units_glob, groups, seed, out)
    else:
        raise UserError("fleet plan needs --units GLOB or --facts FILE...", "e.g. --units 'tor@*'")
    if as_json:
        _emit_json({**plan.data, "path": str(out)})
        return
    hosted = "hosts" in plan.data
    t = Table(
        *(["host"] if hosted else []), "unit", "group", "memory MB", "uptime h", title=f"plan {out} (seed {seed})"
    )
    shown = plan.assignments[:PLAN_ROWS_SHOWN]  # a 20,000-unit table took ~20 s to draw (issue 46)
    for a in shown:
        t.add_row(*([a["host"]] if hosted else []), a["unit"], a["group"], *_memory_and_uptime(a))
    console.print(t)
    if len(plan.assignments) > len(shown):
        console.print(
            f"... and {len(plan.assignments) - len(shown)} more units: every assignment is in {out} (or use --json)",
            markup=False,
            highlight=False,
        )
    balance = Table(*(["host"] if hosted else []), "group", "units", "mean memory MB", "mean uptime h", title="balance")
    cells: dict[tuple, list[dict]] = {}
    for a in plan.assignments:
        cells.setdefault((a.get("host"), a["group"]), []).append(a)
    for host in sorted(plan.data["hosts"]) if hosted else [None]:
        for g in plan.data["groups"]:
            mine = cells.get((host, g["name"]), [])
            n = max(1, len(mine))
            balance.add_row(
                *([host] if hosted else []),
                g["name"],
                str(len(mine)),
                f"{sum(a['memory_kb'] for a in mine) / n / 1024:.1f}",
                f"{sum(a['uptime_s'] for a in mine) / n / 3600:.2f}",
            )
    console.print(balance)


def apply_command(
    plan_file: Path,
    batch: str,
    dry_run: bool,
    root: Path,
    systemctl: str | None,
    console: Console,
    host: str | None = None,
    as_json: bool = False,
) -> None:
    units = units_from(systemctl, root)
    result = apply_plan(units, load_plan(plan_file, host), batch, dry_run, _progress(console, as_json))
    if as_json:
        _emit_json(result)
    elif not dry_run:
        console.print(
            f"applied to {result['units']} units in {result['batches']} batches; backup in {result['generation']}"
        )


def collect_command(
    plan_file: Path,
    run: Path,
    interval: str,
    duration: str | None,
    install: bool,
    root: Path,
    systemctl: str | None,
    console: Console,
    listen: str | None = None,
    host: str | None = None,
    as_json: bool = False,
) -> None:
    units = units_from(systemctl, root)
    plan = load_plan(plan_file, host)  # a fleet-wide plan: this host's share
    if install:
        path = collector.install_collector(units, plan_file, run, interval, systemctl, listen, host, duration)
        # (once the options passed) the reader built now, into the cache the unit names, as `fleet
        # prepare` does for the Ansible role: the service's first tick does not wait on a compiler
        console.print(_reader_line(_build_reader()))
        user = " --user" if systemctl == "user" else ""
        console.print(f"wrote {path}; start it with: systemctl{user} enable --now alloclab-collector.service")
        return
    if host is not None:
        unitfile.check_value(host, "--host")
    exposition, server = None, None
    if listen:
        exposition = metrics.Exposition(metrics.CollectorHealth())
        server, port = metrics.serve(exposition, listen)
        console.print(f"serving /metrics on {metrics.parse_listen(listen)[0]}:{port}")
    try:
        result = collector.collect(
            units,
            plan,
            run,
            parse_duration(interval, "--interval"),
            parse_duration(duration, "--duration") if duration else None,
            _progress(console, as_json),
            exposition=exposition,
            host=host,
        )
        if as_json:
            _emit_json({**_tick_summary(result), "run": str(run), "units": len(plan.assignments), "host": host})
    finally:
        if server is not None:
            server.shutdown()


def _build_reader() -> str | None:
    """The collector's native reader built (into this user's alloclab cache) and loaded once, so
    the collector's first start reads at once; None, or why it cannot be (the collector will then
    read in Python, and says why)."""
    reader, why_not = fleetread.open_reader(1)
    if reader is None:
        return why_not or "it could not be loaded"
    reader.close()
    return None


def _reader_line(why_not: str | None) -> str:
    return (
        "the collector's native reader is built"
        if why_not is None
        else f"the collector will read units in Python (slower): {why_not}"
    )


def prepare_command(console: Console, as_json: bool = False) -> None:
    why_not = _build_reader()
    if as_json:
        _emit_json({"reader": "native" if why_not is None else "python", "why_not": why_not})
    else:
        console.print(_reader_line(why_not))


def deploy_command(
    allocator: str | None,
    units_glob: str,
    batch: str,
    dry_run: bool,
    out: Path,
    root: Path,
    systemctl: str | None,
    console: Console,
    settle: str = "60s",
    max_memory: str | None = None,
    max_increase: str | None = None,
    max_restarts: int = 3,
    persist: int = 3,
    guard_interval: str = "5s",
    scope: str = "all",
    warmup: str = "auto",
    history: Path | None = None,
    env_items: tuple[str, ...] = (),
    group_file: Path | None = None,
    group: str | None = None,
    as_json: bool = False,
    from_run: Path | None = None,
    even_if_undecided: bool = False,
    baseline: str = "auto",
    baseline_restart: bool = True,
    max_settle: str | None = None,
    tolerance: str = "10%",
    undecided: str = "hold",
) -> int:
    """Exit status: 0 deployed, 1 a guard tripped or the canary failed against its peers and the
    deployment was rolled back, 4 held (the canary undecided against its peers by --max-settle)."""
    if max_restarts < 1 or persist < 1:
        raise UserError("--max-restarts and --persist must be at least 1", "give a count of 1 or more")
    if group is not None and group_file is None and from_run is None:
        raise UserError("--group needs --group-file or --from-run", "name the groups file with --group-file FILE")
    tested = None
    if from_run is not None:
        if allocator is not None or group_file is not None or env_items:
            raise UserError(
                "--from-run deploys the group as the run tested it: no ALLOCATOR, --group-file or --env",
                "drop them, or deploy without --from-run",
            )
        from ..fleet.tested import tested_group

        chosen = tested_group(from_run, group, even_if_undecided)
        allocator, group, tested = chosen.allocator, None, chosen.provenance
        env_items = tuple(f"{k}={v}" for k, v in chosen.env.items())
        _progress(console, as_json)(
            f"deploying group {chosen.name} of {from_run} as tested: {chosen.allocator}"
            f"{' ' + chosen.version if chosen.version else ''}, "
            f"{'sha256 ' + chosen.sha256[:12] + '…' if chosen.sha256 else 'no library'}"
            f"{', ' + ', '.join(env_items) if env_items else ''}"
            f"{' (UNDECIDED run: --even-if-undecided)' if tested['even_if_undecided'] else ''}"
        )
    elif even_if_undecided:
        raise UserError("--even-if-undecided goes with --from-run", "add --from-run RUN")
    for path in (out, out.with_suffix(".toml")):  # the one-group plan, and its groups file beside it
        writable_file(path, "deployment plan file")
    guards = rollout.Guards(
        max_memory_kb=rollout.parse_size_kb(max_memory, "--max-memory") if max_memory else None,
        max_increase=rollout.parse_share(max_increase, "--max-increase") if max_increase else None,
        max_restarts=max_restarts,
        persist=persist,
        warmup=None if warmup == "auto" else parse_duration(warmup, "--warmup"),
    )
    settle_s = parse_duration(settle, "--settle")
    peer_rule = None
    if baseline.strip().lower() != "none":
        peer_rule = canary.rule_for(
            settle_s,
            parse_duration(max_settle, "--max-settle") if max_settle else None,
            rollout.parse_share(tolerance, "--canary-tolerance"),
            undecided,
        )
    units = units_from(systemctl, root)
    result = deploy(
        units,
        allocator,
        units_glob,
        batch,
        dry_run,
        out,
        _progress(console, as_json),
        env=parse_env(env_items),
        guards=guards,
        settle=settle_s,
        scope=scope,
        sample_every=parse_duration(guard_interval, "--guard-interval"),
        group_file=group_file,
        group=group,
        history=history,
        tested=tested,
        peer_rule=peer_rule,
        baseline=baseline,
        baseline_restart=baseline_restart,
    )
    if tested is not None:
        result["deployed_from"] = tested
    trip, held = result.get("tripped"), result.get("held")
    if as_json:
        _emit_json(result)
        return 1 if trip else exitcodes.INCONCLUSIVE if held else 0
    if held:
        console.print(
            f"deploy held after the canary: {held['why']}; the canary stays, the other units are untouched",
            markup=False,
            highlight=False,
        )
        return exitcodes.INCONCLUSIVE
    if trip:
        console.print(
            f"deploy stopped at batch {trip['batch']}: {trip['unit']} {trip['why']}; "
            f"{len(trip['rolled_back'])} units restored to their previous drop-ins ({trip['scope']})"
        )
        return 1
    if not dry_run:
        console.print(
            f"deployed to {result['units']} units in {result['batches']} batches; backup in {result['generation']}"
        )
    return 0


def parse_env(items: tuple[str, ...]) -> dict[str, str]:
    """--env KEY=VALUE, repeatable; the values are checked later with the group's tunables."""
    env: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"--env {item!r} is not KEY=VALUE", "e.g. --env MALLOC_CONF=background_thread:true")
        if key == "LD_PRELOAD":
            raise UserError(
                "--env LD_PRELOAD: the library is the deploy's ALLOCATOR",
                "give it as ALLOCATOR (a catalog id "
                "or a library path), e.g. alloclab fleet deploy /usr/lib/libx.so --units ...",
            )
        env[key] = value
    return env


def rollback_command(
    batch: int | str, root: Path, systemctl: str | None, console: Console, as_json: bool = False, every: bool = False
) -> None:
    result = rollback(units_from(systemctl, root), batch, _progress(console, as_json), every=every)
    if as_json:
        _emit_json(result)


def _tick_summary(result: dict) -> dict:
    """collect()'s result for --json: the per-tick lists (up to 100,000 each on a long run) as their
    count, median and 99th percentile, not raw. (statistics, not numpy: a host's collector runs
    without the analysis' packages; the same figures, numpy's linear percentile.)"""
    import statistics

    out = {k: v for k, v in result.items() if k not in ("lateness", "durations")}
    for key in ("lateness", "durations"):
        xs = result.get(key) or []
        p99 = statistics.quantiles(xs, n=100, method="inclusive")[98] if len(xs) > 1 else (xs[0] if xs else 0.0)
        out[f"{key}_s"] = (
            {"count": len(xs), "median": float(statistics.median(xs)), "p99": float(p99)} if xs else {"count": 0}
        )
    return out
