"""`alloclab demo`: the README's main job.

The real demo (default): real tor relays — Debian's tor, the tor-network scenario
(docs/tor-network.md) — on a private Tor network on loopback inside a network namespace of their
own, 3 relays under each of glibc, jemalloc 5.3.0, mimalloc 2.0.9, 3.0.1 and 3.6.0 with directory
load on every relay, run with `--until-significant` (it stops at the first look where the
sequential rule decides) under a cap on the whole demo (`--max-duration`, set-up and report
included). It ends with the report and the measured ratios beside the Tor operators' published ones.

`--model`: the built-in models instead (docs/workloads.md), tor-dircache then worker-pool, for a
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
from .. import outputs, timefmt
from ..config import parse_duration
from ..errors import UserError
from .run import run_command

DATA = Path(__file__).resolve().parent.parent / "data"
DEMOS = (("tor-dircache", "demo-tor.toml", 0.55), ("worker-pool", "demo-pool.toml", 0.45))
REAL = "demo-tor-network.toml"
BASELINE = ("glibc", "glibc")
GROUPS = (("jemalloc-5.3.0", "jemalloc@5.3.0"), ("mimalloc-2.0.9", "mimalloc@2.0.9"),
          ("mimalloc-3.0.1", "mimalloc@3.0.1"), ("mimalloc-3.6.0", "mimalloc@3.6.0"))
DEFAULT_DURATION = "5m"
# The real demo's time plan. The relays' warm-up (they fetch the consensus and descriptors), then
# the load; the first look of the sequential rule after a minute of load, so that every relay's
# steady level rests on enough samples (under 60 s the report calls a replica Too short). Set-up
# (keys, the authorities' first consensus: 7-15 s on a quiet 2-core machine, 17-58 s at load 20-50)
# and the report (~5 s quiet, ~20 s at load 40) are inside the cap: the run gets what is left.
REAL_WARMUP_S = 30
REAL_FIRST_LOOK_S = 100
SETUP_ALLOWANCE_S = 60
REPORT_ALLOWANCE_S = 20
MODEL_ALLOWANCE_S = 30        # --model: provisioning and two reports, outside the two comparisons' length

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
    warmup, idle = max(10, total // 5), max(10, total // 5)   # warm-up covers the models' ramp
    return (DATA / template).read_text().format(warmup=f"{warmup}s", load=f"{total - warmup - idle}s", idle=f"{idle}s",
                                                groups=group_tables(groups or [BASELINE, *GROUPS]))


def real_experiment_text(run_s: int, groups: list[tuple[str, str]] | None = None) -> str:
    """The real demo's experiment file for a run of at most `run_s` seconds (from the relays' start)."""
    return (DATA / REAL).read_text().format(warmup=f"{REAL_WARMUP_S}s", load=f"{run_s - REAL_WARMUP_S}s",
                                            groups=group_tables(groups or [BASELINE, *GROUPS]))


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
        return (f"the kernel refused a network namespace ({why}): the relays run on a private network on loopback "
                "and need root (CAP_SYS_ADMIN) and unshare")
    return None


@dataclass
class Provisioned:
    groups: list[tuple[str, str]]               # (name, allocator), baseline first
    left_out: list[tuple[str, str]]             # (allocator id, why)


def provision(groups: tuple[tuple[str, str], ...], console: Console) -> Provisioned:
    """Each group's allocator built or found in the cache; one that cannot be provisioned is left
    out (its reason printed), the rest go on. Refused when nothing is left to compare with glibc."""
    console.print("provisioning allocators: " + ", ".join(a for _, a in groups))
    kept, left_out = [BASELINE], []
    for name, allocator_id in groups:
        try:
            b = BUILDS.library(allocator_id, lambda step, i=allocator_id: console.print(f"  {i}: {step}"))
        except UserError as exc:
            console.print(f"  {allocator_id}: left out of the demo — {exc}", markup=False, highlight=False, soft_wrap=True)
            left_out.append((allocator_id, str(exc)))
            continue
        console.print(f"  {allocator_id}: {b}", markup=False, highlight=False)
        kept.append((name, allocator_id))
    if len(kept) < 2:
        raise UserError("no allocator beside glibc could be provisioned, so there is nothing to compare",
                        "see the lines above for each one's reason; `alloclab allocators build ID` retries one")
    return Provisioned(kept, left_out)


def demo_command(output: Path | None, max_duration: str, model: bool, console: Console) -> int:
    started = time.monotonic()
    limit = parse_duration(max_duration, "--max-duration")
    out = output or Path("runs") / f"demo-{timefmt.local_stamp()}"
    outputs.new_output(out)
    outputs.writable_directory(out)             # before the allocators are provisioned
    if model:
        return model_demo(out, int(limit), console)
    why = real_refusal()
    if why:
        raise UserError(f"the real demo cannot run here: {why}",
                        "run `alloclab demo --model` (the built-in models: no tor, no root needed), "
                        "or run this as root on a machine with Debian's tor")
    minimum = SETUP_ALLOWANCE_S + REPORT_ALLOWANCE_S + REAL_FIRST_LOOK_S + 20
    if limit < minimum:
        raise UserError(f"--max-duration {max_duration} is too short for the real demo (set-up, a warm-up, a minute "
                        "of load, the report)", f"give at least {minimum} s, e.g. --max-duration {DEFAULT_DURATION}")
    got = provision(GROUPS, console)
    run_s = int(limit - (time.monotonic() - started) - SETUP_ALLOWANCE_S - REPORT_ALLOWANCE_S)
    if run_s < REAL_FIRST_LOOK_S + 10:              # the minimum above leaves 10 s for provisioning
        raise UserError(f"provisioning the allocators took {time.monotonic() - started:.0f} s of --max-duration "
                        f"{max_duration}, too little is left for the run", "run the demo again (the builds are cached now)")
    exp_file = out / "experiment.toml"
    exp_file.write_text(real_experiment_text(run_s, got.groups))
    console.rule(f"demo: real tor relays, {len(got.groups)} allocators × 3 relays (at most {run_s} s once the network is up)")
    code = run_command(exp_file, out / "run", True, f"{run_s}s", f"{REAL_FIRST_LOOK_S}s", True, console)
    if code not in (0, 130):                        # cut short (a full disk): run said so; a report needs the space
        return code
    from .. import report
    _, written = report.report_run(out / "run", console=console)      # the summary table; the closing lines read its analysis
    for line in closing_lines(written.analysis, out / "run", got.left_out, time.monotonic() - started):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    return code


def closing_lines(a, run_dir: Path, left_out: list[tuple[str, str]], took_s: float) -> list[str]:
    """The demo's last lines: each group's measured ratio to glibc beside the operators' published
    one, what a relay operator would do with it, what was left out, and the report."""
    lines = [f"measured here (real tor, 3 relays a group, {took_s:.0f} s in all) beside the Tor operators' published "
             f"figures (200 relays, 9 days, {PUBLISHED_AT}):"]
    base = PUBLISHED_GB["glibc"]
    for g in a.groups:
        c = g.comparison
        published = (f"published {PUBLISHED_GB[g.name] / base:.2f}× ({PUBLISHED_GB[g.name]:.2f} GB against "
                     f"{base:.2f} GB, {PUBLISHED_RELAYS[g.name]} relays)") if g.name in PUBLISHED_GB else "no published figure"
        if g.is_baseline:
            level = f"{g.level_mb:.0f} MB a relay here" if g.level_mb is not None else "no steady level here"
            lines.append(f"  {g.name:<15} baseline, {level}; published {base:.2f} GB a relay ({PUBLISHED_RELAYS[g.name]} relays)")
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
        apart = not set(old.letters) & set(new.letters)         # groups sharing a letter are not shown different
        word = ("shown higher" if new.ratio > old.ratio else "shown lower") if apart else "not shown different"
        lines.append(f"  mimalloc 3.0.1 against 2.0.9: {new.ratio / old.ratio:.2f}× here ({word}); published "
                     f"{PUBLISHED_GB['mimalloc-3.0.1'] / PUBLISHED_GB['mimalloc-2.0.9']:.1f}× and still climbing")
    r = a.recommendation
    if r is not None and r.winner and r.winner != a.baseline and r.significant:
        tied = [t for t in r.tied if t != r.winner]
        also = f" (or {', '.join(tied)}, not shown different here)" if tied else ""
        allocator = next((g.allocator + (f"@{g.version}" if g.version else "") for g in a.groups if g.name == r.winner), r.winner)
        lowest = min(PUBLISHED_GB, key=PUBLISHED_GB.get)
        days = (f" (over 9 days the operators measured {lowest} lowest, {PUBLISHED_GB[lowest] / PUBLISHED_GB['glibc']:.2f}× "
                "glibc: try it beside)") if lowest not in (r.winner, *tied) and lowest in by_name else ""
        lines.append(f"what a relay operator would do: move the relays from glibc to {r.winner}{also}{days}, canary first, "
                     f"with the fleet route (docs/fleet.md): alloclab fleet deploy {allocator} --units 'tor@*' --batch 10% "
                     "--max-increase 20%")
    elif not any(g.comparison is not None and g.comparison.ratio is not None for g in a.groups):
        lines.append("nothing to compare: the relays had no steady level before the cap (the network's set-up and "
                     "warm-up took the time on this machine, see the summary above): run again with a longer --max-duration")
    else:
        lines.append("no allocator was shown below glibc in this run, so a relay operator would not switch on its "
                     "strength: run the demo again on a quieter machine, or longer (--max-duration)")
    if left_out:
        lines.append("left out (could not be provisioned): " + "; ".join(f"{i} ({why})" for i, why in left_out))
    lines.append(f"report: {run_dir / 'report.md'} (interactive: {run_dir / 'report.html'})")
    return lines


def model_demo(out: Path, limit: int, console: Console) -> int:
    """--model: the two built-in models' fixed-length comparisons, `limit` seconds in all."""
    seconds = limit - MODEL_ALLOWANCE_S
    if seconds < 60:
        raise UserError(f"--max-duration {limit} s leaves {seconds} s for two comparisons",
                        f"give at least {60 + MODEL_ALLOWANCE_S} s")
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
        console.print("left out (could not be provisioned): " + "; ".join(f"{i} ({why})" for i, why in got.left_out),
                      markup=False, highlight=False, soft_wrap=True)
    console.print(f"demo reports: {out}/*/run/report.md (interactive: report.html beside each)")
    return code
