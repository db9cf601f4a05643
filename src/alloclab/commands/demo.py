"""`alloclab demo`: the README's main job.

The real demo (default): real tor relays — Debian's tor, the tor-network scenario
(docs/how-to/tor-network.md) — on a private Tor network on loopback inside a network namespace of their
own, 3 relays under each of glibc, jemalloc 5.3.0, mimalloc 2.0.9, 3.0.1 and 3.6.0 with directory
load on every relay, run with `--until-decided` (it stops at the first look of the sequential rule
where every comparison with glibc is decided) under a cap on the whole demo (`--max-duration`:
provisioning, the network's set-up, the run and the report). It ends with the report, how the run
ended, and the measured ratios beside the Tor operators' published ones.

`--model`: the built-in models instead (docs/how-to/workloads.md), tor-dircache then worker-pool, for a
machine where the real one cannot run (no root, no network namespace, no tor).

Either way the allocators are provisioned first (cached); one that cannot be is left out with its
reason and the demo goes on without it.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from ..allocators.resolution import BUILDS
from ..common import outputs, timefmt
from ..common.errors import UserError
from ..experiment_file import parse_duration
from .run import run_command

DATA = Path(__file__).resolve().parent.parent / "data"
DEMOS = (("tor-dircache", "demo-tor.toml", 0.55), ("worker-pool", "demo-pool.toml", 0.45))
REAL = "demo-tor-network.toml"
BASELINE = ("glibc", "glibc")
GROUPS = (
    ("jemalloc-5.3.0", "jemalloc@5.3.0"),
    ("mimalloc-2.0.9", "mimalloc@2.0.9"),
    ("mimalloc-3.0.1", "mimalloc@3.0.1"),
    ("mimalloc-3.6.0", "mimalloc@3.6.0"),
)
DEFAULT_DURATION = "5m"
# The real demo's time plan, all inside the cap. Provisioning (cached: a second or two); the
# network's set-up (keys, the authorities' first consensus: 13-21 s at load 1-2 on 2 cores, 18-77 s
# at load 16-52, 145 s once at a higher load; benchmarks/demo_stop_rule.md); the run: the relays'
# warm-up (they fetch the consensus and descriptors: held until they hold the directory, 7 s quiet,
# 48-92 s at load 25-42), then the load, the first look of the sequential rule after 70 s of load
# so that every relay's steady level rests on enough samples (under 60 s the report calls a
# replica Too short; a held warm-up moves the looks); then stopping the relays (5 s grace, then
# SIGKILL: 9-11 s at load 25-42) and the report (2-5 s, ~20 s once at load 40). The run is planned for SETUP_ALLOWANCE_S of set-up; a longer
# set-up comes out of the run, not the cap (the run must end by the deadline, the cap less
# REPORT_ALLOWANCE_S: Runner.deadline), and one so long that no look would fit fails the network
# (its consensus_timeout).
REAL_WARMUP_S = 30
REAL_FIRST_LOOK_S = 100
SETUP_ALLOWANCE_S = 30
REPORT_ALLOWANCE_S = 25
MODEL_ALLOWANCE_S = 30  # --model: provisioning and two reports, outside the two comparisons' length

# The Tor operators' published comparison (1AEO, TorUtils `memory/`, the 5-way experiment; the
# data is tests/data/1aeo-torutils/5way-2026-01): group means of RSS at its last collection,
# 2026-01-10 22:21 UTC, 200 relays on one server, 8½ days after the full restart of 2026-01-02
# 10:30 (events.csv; the operators' "9 days"). tests/unit/test_demo_parts.py recomputes them.
PUBLISHED_GB = {"glibc": 6.19, "jemalloc-5.3.0": 2.74, "mimalloc-2.0.9": 1.28, "mimalloc-3.0.1": 10.44}
PUBLISHED_AT = "2026-01-10 22:21 UTC"
PUBLISHED_RELAYS = {"glibc": 20, "jemalloc-5.3.0": 20, "mimalloc-2.0.9": 80, "mimalloc-3.0.1": 20}


def group_tables(groups: list[tuple[str, str]]) -> str:
    """The experiment file's [[group]] tables."""
    return "".join(f'\n[[group]]\nname = "{name}"\nallocator = "{allocator}"\n' for name, allocator in groups)


def experiment_text(template: str, total: int, groups: list[tuple[str, str]] | None = None) -> str:
    """The experiment file of one model part lasting `total` seconds (also benchmarks/main_job.py's)."""
    warmup, idle = max(10, total // 5), max(10, total // 5)  # warm-up covers the models' ramp
    return (
        (DATA / template)
        .read_text()
        .format(
            warmup=f"{warmup}s",
            load=f"{total - warmup - idle}s",
            idle=f"{idle}s",
            groups=group_tables(groups or [BASELINE, *GROUPS]),
        )
    )


def real_experiment_text(run_s: int, groups: list[tuple[str, str]] | None = None, consensus_timeout: int = 240) -> str:
    """The real demo's experiment file for a run of at most `run_s` seconds (from the relays' start),
    whose network waits at most `consensus_timeout` seconds for its first consensus."""
    return (
        (DATA / REAL)
        .read_text()
        .format(
            warmup=f"{REAL_WARMUP_S}s",
            load=f"{run_s - REAL_WARMUP_S}s",
            consensus_timeout=f"{consensus_timeout}s",
            groups=group_tables(groups or [BASELINE, *GROUPS]),
        )
    )


def real_refusal() -> str | None:
    """Why the real demo cannot run on this machine (None: it can)."""
    from ..tor import network

    if not shutil.which("tor"):
        return "tor is not installed (no tor on PATH; Debian's package is `tor`, scripts/install.sh installs it)"
    try:
        network.tor_gencert(shutil.which("tor"))
    except UserError as exc:
        return exc.problem
    why = network.namespace_refusal()
    if why:
        return (
            f"the kernel refused a network namespace ({why}): the relays run on a private network on loopback "
            "and need root (CAP_SYS_ADMIN) and unshare"
        )
    return None


@dataclass
class Provisioned:
    groups: list[tuple[str, str]]  # (name, allocator), baseline first
    left_out: list[tuple[str, str]]  # (allocator id, why)


def provision(groups: tuple[tuple[str, str], ...], console: Console) -> Provisioned:
    """Each group's allocator built or found in the cache; one that cannot be provisioned is left
    out (its reason printed), the rest go on. Refused when nothing is left to compare with glibc."""
    console.print("provisioning allocators: " + ", ".join(a for _, a in groups))
    kept, left_out = [BASELINE], []
    for name, allocator_id in groups:
        try:
            b = BUILDS.library(allocator_id, lambda step, i=allocator_id: console.print(f"  {i}: {step}"))
        except UserError as exc:
            console.print(
                f"  {allocator_id}: left out of the demo — {exc}", markup=False, highlight=False, soft_wrap=True
            )
            left_out.append((allocator_id, str(exc)))
            continue
        console.print(f"  {allocator_id}: {b}", markup=False, highlight=False)
        kept.append((name, allocator_id))
    if len(kept) < 2:
        raise UserError(
            "no allocator beside glibc could be provisioned, so there is nothing to compare",
            "see the lines above for each one's reason; `alloclab allocators build ID` retries one",
        )
    return Provisioned(kept, left_out)


def demo_command(output: Path | None, max_duration: str, model: bool, console: Console) -> int:
    started = time.monotonic()
    limit = parse_duration(max_duration, "--max-duration")
    out = output or Path("runs") / f"demo-{timefmt.local_stamp()}"
    outputs.new_output(out)
    outputs.writable_directory(out)  # before the allocators are provisioned
    if model:
        return model_demo(out, int(limit), console)
    why = real_refusal()
    if why:
        raise UserError(
            f"the real demo cannot run here: {why}",
            "run `alloclab demo --model` (the built-in models: no tor, no root needed), "
            "or run this as root on a machine with Debian's tor",
        )
    minimum = SETUP_ALLOWANCE_S + REPORT_ALLOWANCE_S + REAL_FIRST_LOOK_S + 20
    if limit < minimum:
        raise UserError(
            f"--max-duration {max_duration} is too short for the real demo (set-up, a warm-up, a minute "
            "of load, the report)",
            f"give at least {minimum} s, e.g. --max-duration {DEFAULT_DURATION}",
        )
    got = provision(GROUPS, console)
    run_s = int(limit - (time.monotonic() - started) - SETUP_ALLOWANCE_S - REPORT_ALLOWANCE_S)
    if run_s < REAL_FIRST_LOOK_S + 10:  # the minimum above leaves 10 s for provisioning
        raise UserError(
            f"provisioning the allocators took {time.monotonic() - started:.0f} s of --max-duration "
            f"{max_duration}, too little is left for the run",
            "run the demo again (the builds are cached now)",
        )
    deadline = started + limit - REPORT_ALLOWANCE_S  # the run ends by then, whatever the set-up took
    setup_s = int(deadline - time.monotonic() - REAL_FIRST_LOOK_S - 10)  # past it, no look would fit
    exp_file = out / "experiment.toml"
    exp_file.write_text(real_experiment_text(run_s, got.groups, consensus_timeout=setup_s))
    console.rule(
        f"demo: real tor relays, {len(got.groups)} allocators × 3 relays (at most {run_s} s once the network is up, "
        "until every comparison is decided)"
    )
    try:
        code = run_command(
            exp_file,
            out / "run",
            False,
            f"{run_s}s",
            f"{REAL_FIRST_LOOK_S}s",
            True,
            console,
            until_decided=True,
            deadline=deadline,
        )
    except UserError as exc:
        if not network_did_not_form(out / "run"):
            raise
        raise UserError(
            exc.problem,
            f"the network's set-up took what --max-duration {max_duration} leaves for it "
            "(a busy machine): give the demo longer, e.g. --max-duration 8m",
        ) from None
    if code not in (0, 130):  # cut short (a full disk): run said so; a report needs the space
        return code
    from ..reporters import report

    _, written = report.report_run(
        out / "run", console=console
    )  # the summary table; the closing lines read its analysis
    for line in [
        how_it_ended(out / "run"),
        *closing_lines(written.analysis, out / "run", got.left_out, time.monotonic() - started),
    ]:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    return code


def network_did_not_form(run_dir: Path) -> bool:
    """Whether the run's tor network gave up waiting for its first consensus (tor_no_consensus)."""
    from ..store import DB_NAME, Store

    if not (run_dir / DB_NAME).is_file():
        return False
    store = Store.open_readonly(run_dir / DB_NAME)
    try:
        return bool(store.events(kinds=["tor_no_consensus"]))
    finally:
        store.close()


def how_it_ended(run_dir: Path) -> str:
    """One line: stopped because every comparison was decided, or at the cap with what the last
    look left open (the run's end reason and its sequential_look events)."""
    from ..store import DB_NAME, Store

    store = Store.open_readonly(run_dir / DB_NAME)
    try:
        reason = store.meta().get("end_reason", "")
        looks = store.events(kinds=["sequential_look"])
    finally:
        store.close()
    if reason.startswith("stopped early") and "every comparison decided" in reason:
        return f"stopped as soon as every comparison was decided: {reason}"
    if reason in ("max duration reached", "planned duration reached"):
        left = f"at the last {looks[-1]['description']}" if looks else "no look of the sequential rule was reached"
        return f"ran to the cap ({reason}), not every comparison decided — {left}"
    return f"the run ended: {reason}"


def closing_lines(a, run_dir: Path, left_out: list[tuple[str, str]], took_s: float) -> list[str]:
    """The demo's last lines: each group's measured ratio to glibc beside the operators' published
    one, what a relay operator would do with it, what was left out, and the report."""
    lines = [
        f"measured here (real tor, 3 relays a group, {took_s:.0f} s in all) beside the Tor operators' published "
        f"figures (200 relays, 9 days, {PUBLISHED_AT}):"
    ]
    base = PUBLISHED_GB["glibc"]
    for g in a.groups:
        c = g.comparison
        published = (
            (
                f"published {PUBLISHED_GB[g.name] / base:.2f}× ({PUBLISHED_GB[g.name]:.2f} GB against "
                f"{base:.2f} GB, {PUBLISHED_RELAYS[g.name]} relays)"
            )
            if g.name in PUBLISHED_GB
            else "no published figure"
        )
        if g.is_baseline:
            level = f"{g.level_mb:.0f} MB a relay here" if g.level_mb is not None else "no steady level here"
            lines.append(
                f"  {g.name:<15} baseline, {level}; published {base:.2f} GB a relay ({PUBLISHED_RELAYS[g.name]} relays)"
            )
            continue
        if c is None or c.ratio is None:
            lines.append(f"  {g.name:<15} no comparison (no usable relay level); {published}")
            continue
        ci = f" [{c.ratio_ci[0]:.2f}–{c.ratio_ci[1]:.2f}]" if c.ratio_ci else ""
        word = "significant" if c.significant else "not significant"
        p = f"Holm p {c.p_holm:.2g}, {word}" if c.p_holm is not None else word
        lines.append(f"  {g.name:<15} {c.ratio:.2f}×{ci} glibc ({p}); {published}")
    by_name = {g.name: g.comparison for g in a.groups}
    old, new = by_name.get("mimalloc-2.0.9"), by_name.get("mimalloc-3.0.1")
    if old is not None and new is not None and old.ratio and new.ratio:
        apart = not set(old.letters) & set(new.letters)  # groups sharing a letter are not shown different
        word = ("shown higher" if new.ratio > old.ratio else "shown lower") if apart else "not shown different"
        lines.append(
            f"  mimalloc 3.0.1 against 2.0.9: {new.ratio / old.ratio:.2f}× here ({word}); published "
            f"{PUBLISHED_GB['mimalloc-3.0.1'] / PUBLISHED_GB['mimalloc-2.0.9']:.1f}× and still climbing"
        )
    r = a.recommendation
    if r is not None and r.winner and r.winner != a.baseline and r.significant:
        tied = [t for t in r.tied if t != r.winner]
        also = f" (or {', '.join(tied)}, not shown different here)" if tied else ""
        allocator = next(
            (g.allocator + (f"@{g.version}" if g.version else "") for g in a.groups if g.name == r.winner), r.winner
        )
        lowest = min(PUBLISHED_GB, key=PUBLISHED_GB.get)
        days = (
            (
                f" (over 9 days the operators measured {lowest} lowest, {PUBLISHED_GB[lowest] / PUBLISHED_GB['glibc']:.2f}× "
                "glibc: try it beside)"
            )
            if lowest not in (r.winner, *tied) and lowest in by_name
            else ""
        )
        lines.append(
            f"what a relay operator would do: move the relays from glibc to {r.winner}{also}{days}, canary first, "
            f"with the fleet route (docs/tutorials/relays-with-ansible.md): alloclab fleet deploy {allocator} --units 'tor@*' --batch 10% "
            "--max-increase 20%"
        )
    elif not any(g.comparison is not None and g.comparison.ratio is not None for g in a.groups):
        lines.append(
            "nothing to compare: the relays had no steady level before the cap (the network's set-up and "
            "warm-up took the time on this machine, see the summary above): run again with a longer --max-duration"
        )
    else:
        lines.append(
            "no allocator was shown below glibc in this run, so a relay operator would not switch on its "
            "strength: run the demo again on a quieter machine, or longer (--max-duration)"
        )
    if left_out:
        lines.append("left out (could not be provisioned): " + "; ".join(f"{i} ({why})" for i, why in left_out))
    lines.append(f"report: {run_dir / 'report.md'} (interactive: {run_dir / 'report.html'})")
    return lines


def model_demo(out: Path, limit: int, console: Console) -> int:
    """--model: the two built-in models' fixed-length comparisons, `limit` seconds in all."""
    seconds = limit - MODEL_ALLOWANCE_S
    if seconds < 60:
        raise UserError(
            f"--max-duration {limit} s leaves {seconds} s for two comparisons",
            f"give at least {60 + MODEL_ALLOWANCE_S} s",
        )
    got = provision(GROUPS, console)
    code = 0
    for label, template, share in DEMOS:
        total = int(seconds * share)
        (out / label).mkdir(parents=True, exist_ok=True)
        exp_file = out / label / "experiment.toml"
        exp_file.write_text(experiment_text(template, total, got.groups))
        console.rule(f"demo: {label} model ({total} s)")
        code = run_command(exp_file, out / label / "run", False, None, "60s", False, console) or code
        if code == 130:
            break
    if got.left_out:
        console.print(
            "left out (could not be provisioned): " + "; ".join(f"{i} ({why})" for i, why in got.left_out),
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    console.print(f"demo reports: {out}/*/run/report.md (interactive: report.html beside each)")
    return code
