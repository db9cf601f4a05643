"""Fleet mode against real processes standing in for systemd units (the LocalUnits seam), with
real drop-in files under a temporary root."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from alloclab.common.errors import UserError
from alloclab.fleet import deploy, plan as fleet_plan, rollout, systemd
from tests.conftest import run_cli
from tests.waiting import wait_for

NAMES = ["tor@alpha", "tor@bravo", "tor@charlie", "tor@delta", "tor@echo", "tor@foxtrot"]


@pytest.fixture
def root(tmp_path, native_dir, jemalloc, mimalloc):
    r = tmp_path / "root"
    units = r / "etc" / "systemd" / "system"
    units.mkdir(parents=True)
    for i, name in enumerate(NAMES):
        (units / f"{name}.service").write_text(
            f"[Service]\nExecStart={native_dir / 'stressors'} --pattern sawtooth --load 3600 --period 1 --mb {2 + i}\n"
        )
    (units / "other.service").write_text("[Service]\nExecStart=/bin/sleep 3600\n")
    (tmp_path / "groups.toml").write_text(f"""
name = "relays"
command = ["/bin/true"]
[[group]]
name = "glibc"
allocator = "glibc"
[[group]]
name = "jemalloc"
allocator = "{jemalloc}"
env = {{ MALLOC_CONF = "background_thread:true" }}
[[group]]
name = "mimalloc"
allocator = "{mimalloc}"
""")
    local = systemd.LocalUnits(r)
    for name in NAMES:  # the services are running before alloclab arrives
        local.restart(f"{name}.service")
    yield r
    for pidfile in (r / "run" / "alloclab-units").glob("*.pid"):
        try:
            os.killpg(int(pidfile.read_text().split()[0]), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def make_plan(root: Path, seed: int = 3) -> fleet_plan.Plan:
    return fleet_plan.make_plan(
        systemd.LocalUnits(root), "tor@*", root.parent / "groups.toml", seed, root.parent / "plan.json"
    )


def test_plan_is_seeded_stratified_and_saved(root):
    plan = make_plan(root)
    assert sorted(a["unit"] for a in plan.assignments) == sorted(f"{n}.service" for n in NAMES)
    per_group = {g: sum(a["group"] == g for a in plan.assignments) for g in ("glibc", "jemalloc", "mimalloc")}
    assert per_group == {"glibc": 2, "jemalloc": 2, "mimalloc": 2}
    # stratified: the two smallest units are in different groups, and so on
    by_memory = sorted(plan.assignments, key=lambda a: (a["memory_kb"], a["uptime_s"], a["unit"]))
    for block in (by_memory[0:3], by_memory[3:6]):
        assert len({a["group"] for a in block}) == 3
    assert json.loads((root.parent / "plan.json").read_text())["seed"] == 3
    again = make_plan(root)
    assert [a["group"] for a in again.assignments] == [a["group"] for a in plan.assignments]


def test_dry_run_writes_nothing(root):
    plan = make_plan(root)
    said = []
    deploy.apply_plan(systemd.LocalUnits(root), plan, batch=2, dry_run=True, say=said.append)
    text = "\n".join(said)
    assert "LD_PRELOAD=" in text and "daemon-reload" in text and text.count("batch ") == 3
    assert not list(root.rglob(deploy.DROPIN_NAME))


def test_apply_writes_dropins_restarts_in_batches_and_verifies(root, jemalloc):
    plan = make_plan(root)
    units = systemd.LocalUnits(root)
    old_pids = {u: units.main_pid(u) for u in plan.data["units"]}
    result = deploy.apply_plan(units, plan, batch=2, dry_run=False, say=lambda s: None)
    assert result["units"] == 6 and result["batches"] == 3
    for a in plan.assignments:
        text = deploy.dropin_path(root, a["unit"]).read_text()
        if a["group"] == "jemalloc":
            assert f'Environment="LD_PRELOAD={jemalloc}"' in text and "MALLOC_CONF=background_thread:true" in text
        if a["group"] == "glibc":
            assert "UnsetEnvironment=LD_PRELOAD" in text and "LD_PRELOAD=" not in text
        assert units.main_pid(a["unit"]) != old_pids[a["unit"]]  # restarted
    restarts = [(t, u) for t, what, u in units.log if what == "restart"]
    assert [u for _, u in restarts] == [a["unit"] for a in plan.assignments]  # plan order
    times = [t for t, _ in restarts]
    within = [times[1] - times[0], times[3] - times[2], times[5] - times[4]]
    between = [times[2] - times[1], times[4] - times[3]]
    assert max(within) < min(between)  # a batch restarts together, the next waits for verification
    assert not (root / "etc" / "systemd" / "system" / "other.service.d").exists()  # nothing outside the plan


def test_apply_stops_at_the_first_failed_verification(root, test_native_dir):
    plan = make_plan(root)
    bad = next(a for a in plan.assignments if a["group"] != "glibc")
    unit_file = root / "etc" / "systemd" / "system" / bad["unit"]
    unit_file.write_text(
        f"[Service]\nExecStart={test_native_dir / 'frag-static'} --load 3600 --mb 2\n"
    )  # LD_PRELOAD cannot reach it
    units = systemd.LocalUnits(root)
    with pytest.raises(UserError, match="statically linked"):
        deploy.apply_plan(units, plan, batch=2, dry_run=False, say=lambda s: None)
    order = [a["unit"] for a in plan.assignments]
    failed_batch = order.index(bad["unit"]) // 2
    restarted = [u for _, what, u in units.log if what == "restart"]
    assert restarted == order[: (failed_batch + 1) * 2]  # later batches untouched


def test_rollback_restores_bytes_and_removes_what_apply_made(root):
    plan = make_plan(root)
    keep = plan.assignments[0]["unit"]
    existing = deploy.dropin_path(root, keep)
    existing.parent.mkdir(parents=True)
    original = b'# hand-written by the operator\n[Service]\nEnvironment="FOO=bar baz"\n\n'
    existing.write_bytes(original)
    units = systemd.LocalUnits(root)
    deploy.apply_plan(units, plan, batch=3, dry_run=False, say=lambda s: None)
    assert existing.read_bytes() != original
    deploy.rollback(units, batch=3, say=lambda s: None)
    assert existing.read_bytes() == original
    for a in plan.assignments[1:]:
        assert not deploy.dropin_path(root, a["unit"]).exists()
        assert not deploy.dropin_path(root, a["unit"]).parent.exists()
    assert all(units.is_active(u) for u in plan.data["units"])
    with pytest.raises(UserError, match="nothing to roll back"):
        deploy.rollback(units, batch=3, say=lambda s: None)


def test_a_plan_that_no_longer_matches_is_refused(root):
    plan = make_plan(root)
    (root / "etc" / "systemd" / "system" / "tor@echo.service").unlink()
    with pytest.raises(UserError, match="no longer matches"):
        deploy.apply_plan(systemd.LocalUnits(root), plan, batch=2, dry_run=False, say=lambda s: None)


@pytest.mark.parametrize("bad", ["../etc/passwd", "tor@a b", "x/y", ".hidden", "a" * 300])
def test_unit_names_are_validated(bad):
    with pytest.raises(UserError, match="not a valid systemd service name"):
        systemd.validate_unit(bad)
    assert systemd.validate_unit("tor@relay\\x2d1") == "tor@relay\\x2d1.service"


def test_collector_resumes_after_kill_without_duplicates(root):
    plan = make_plan(root)
    deploy.apply_plan(systemd.LocalUnits(root), plan, batch=6, dry_run=False, say=lambda s: None)
    run = root.parent / "fleet-run"
    args = [
        sys.executable,
        "-m",
        "alloclab",
        "fleet",
        "collect",
        "--plan",
        str(root.parent / "plan.json"),
        "-o",
        str(run),
        "--interval",
        "0.3s",
        "--root",
        str(root),
        "--systemctl",
        "local",
    ]
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            if sqlite3.connect(run / "run.db").execute("SELECT COUNT(DISTINCT t) FROM samples").fetchone()[0] >= 4:
                break
        except sqlite3.OperationalError:
            pass
        time.sleep(0.2)
    p.kill()
    p.wait()
    systemd.LocalUnits(root).restart(plan.assignments[0]["unit"])  # a unit restarts while nobody watches
    again = subprocess.run(args + ["--duration", "2s"], capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr
    db = sqlite3.connect(run / "run.db")
    dupes = db.execute(
        "SELECT COUNT(*) FROM (SELECT replica_id, t FROM samples GROUP BY replica_id, t HAVING COUNT(*) > 1)"
    ).fetchone()[0]
    assert dupes == 0
    kinds = [k for (k,) in db.execute("SELECT kind FROM events")]
    assert "collector_resumed" in kinds and "process_restart" in kinds
    assert db.execute("SELECT COUNT(*) FROM replicas WHERE verified = 1").fetchone()[0] == 6
    rep = run_cli("report", str(run))
    assert rep.returncode == 0, rep.stderr


def test_cli_plan_apply_dry_run(root):
    out = root.parent / "cli-plan.json"
    p = run_cli(
        "fleet",
        "plan",
        "--units",
        "tor@*",
        "--groups",
        str(root.parent / "groups.toml"),
        "-o",
        str(out),
        "--root",
        str(root),
        "--systemctl",
        "local",
    )
    assert p.returncode == 0, p.stderr
    d = run_cli("fleet", "apply", str(out), "--dry-run", "--root", str(root), "--systemctl", "local")
    assert d.returncode == 0 and "would write" in d.stdout
    bad = run_cli(
        "fleet",
        "plan",
        "--units",
        "nomatch@*",
        "--groups",
        str(root.parent / "groups.toml"),
        "--root",
        str(root),
        "--systemctl",
        "local",
    )
    assert bad.returncode == 2 and "no unit matches" in bad.stderr


def test_a_reused_pid_is_never_taken_for_a_unit(root):
    """LocalUnits keeps "pid start_ticks": a pid file naming a live process with another start
    time (what a reused pid looks like) is no unit, and the unit's tree is walked from its identity."""
    from alloclab.capture import sampler

    units = systemd.LocalUnits(root)
    unit = f"{NAMES[0]}.service"
    pidfile = root / "run" / "alloclab-units" / f"{unit}.pid"
    pid, start = (int(x) for x in pidfile.read_text().split())
    assert units.main_pid(unit) == pid and sampler.read_stat(pid).start_ticks == start
    assert pid in units.pids(unit) and units.is_active(unit)
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        other = sampler.read_stat(sleeper.pid)
        pidfile.write_text(f"{sleeper.pid} {other.start_ticks + 1}")  # the same pid, another process
        assert units.main_pid(unit) is None and units.pids(unit) == [] and not units.is_active(unit)
        pidfile.write_text(str(sleeper.pid))  # the old format: no identity, no unit
        assert units.main_pid(unit) is None
        pidfile.write_text(f"{sleeper.pid} {other.start_ticks}")
        assert units.main_pid(unit) == sleeper.pid and units.pids(unit) == [sleeper.pid]
    finally:
        pidfile.write_text(f"{pid} {start}")
        sleeper.kill()
        sleeper.wait()


def _environ(pid: int) -> dict[str, str]:
    items = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(i.decode().partition("=")[::2] for i in items if i)


def test_apply_deploy_rollback_from_different_directories(root, tmp_path, jemalloc, mimalloc):
    """The rollback bug: the manifest held drop-in paths relative to where apply ran, so a rollback
    run elsewhere wrote under its own directory and left the units on the deployed allocator.
    Here apply, deploy and rollback each run from another directory with a relative --root."""
    a, b, c = (tmp_path / d for d in ("a", "b/deeper", "c"))
    for d in (a, b, c):
        d.mkdir(parents=True)
    keep = f"{NAMES[0]}.service"
    existing = deploy.dropin_path(root, keep)
    existing.parent.mkdir(parents=True)
    original = b'# the operator\'s own\n[Service]\nEnvironment="FOO=bar baz"\n'
    existing.write_bytes(original)
    rel = lambda d: os.path.relpath(root, d)
    p = run_cli(
        "fleet",
        "plan",
        "--units",
        "tor@*",
        "--groups",
        str(tmp_path / "groups.toml"),
        "-o",
        "plan.json",
        "--root",
        rel(a),
        "--systemctl",
        "local",
        cwd=a,
    )
    assert p.returncode == 0, p.stderr
    p = run_cli("fleet", "apply", "plan.json", "--batch", "6", "--root", rel(a), "--systemctl", "local", cwd=a)
    assert p.returncode == 0, p.stderr
    p = run_cli(
        "fleet",
        "deploy",
        mimalloc,
        "--units",
        "tor@*",
        "--batch",
        "6",
        "--settle",
        "0.3s",
        "--guard-interval",
        "0.1s",
        "--root",
        rel(b),
        "--systemctl",
        "local",
        cwd=b,
    )
    assert p.returncode == 0, p.stderr
    units = systemd.LocalUnits(root)
    assert [_environ(units.main_pid(f"{n}.service")).get("LD_PRELOAD") for n in NAMES] == [
        os.path.realpath(mimalloc)
    ] * len(NAMES)
    for manifest in (root / "var/lib/alloclab/fleet/applied").glob("*/manifest.json"):
        assert all(Path(m["dropin"]).is_absolute() for m in json.loads(manifest.read_text())["units"].values())
    for _ in range(2):  # undo deploy, then apply
        p = run_cli("fleet", "rollback", "--batch", "6", "--root", rel(c), "--systemctl", "local", cwd=c)
        assert p.returncode == 0, p.stderr
    assert not any(c.rglob("*")), "rollback wrote under its working directory"
    assert existing.read_bytes() == original
    for n in NAMES[1:]:
        assert not deploy.dropin_path(root, f"{n}.service").exists()
    for n in NAMES:  # every unit back on glibc (no preload)
        assert "LD_PRELOAD" not in _environ(units.main_pid(f"{n}.service"))
    assert _environ(units.main_pid(keep)).get("FOO") == "bar baz"


def test_rollback_refused_when_manifest_and_root_disagree(root, tmp_path):
    plan = make_plan(root)
    deploy.apply_plan(systemd.LocalUnits(root), plan, batch=6, dry_run=False, say=lambda s: None)
    other = tmp_path / "other-root"
    import shutil

    shutil.copytree(root / "var", other / "var")  # the state of one root, offered for another
    (other / "etc/systemd/system").mkdir(parents=True)
    p = run_cli("fleet", "rollback", "--root", str(other), "--systemctl", "local")
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert "does not name" in p.stderr and "Traceback" not in p.stderr
    assert all(deploy.dropin_path(root, u).exists() for u in plan.data["units"])  # nothing touched


def _dropin_state(root: Path) -> dict[str, bytes | None]:
    """Every unit's drop-in directory as it is: file name -> bytes (None: no directory)."""
    out: dict[str, bytes | None] = {}
    for n in NAMES:
        d = deploy.dropin_path(root, f"{n}.service").parent
        out[n] = (
            None if not d.exists() else b"|".join(f.name.encode() + b":" + f.read_bytes() for f in sorted(d.iterdir()))
        )
    return out


def _big_units(root: Path, native_dir: Path, sizes: dict[str, int]) -> None:
    units = systemd.LocalUnits(root)
    for name, mb in sizes.items():
        (root / "etc/systemd/system" / f"{name}.service").write_text(
            f"[Service]\nExecStart={native_dir / 'stressors'} --pattern sawtooth --load 3600 --period 1 --mb {mb}\n"
        )
        units.restart(f"{name}.service")


def test_a_canary_that_trips_a_guard_leaves_every_unit_on_its_previous_dropin(root, native_dir, jemalloc, tmp_path):
    _big_units(root, native_dir, {n: 40 for n in NAMES})
    # the operator's own drop-ins, in the canary batch and in a later one, must come back byte for byte
    for n, text in ((NAMES[0], b'[Service]\nEnvironment="FOO=canary"\n'), (NAMES[4], b"# mine\n[Service]\nNice=5\n")):
        path = deploy.dropin_path(root, f"{n}.service")
        path.parent.mkdir(parents=True)
        path.write_bytes(text)
    (deploy.dropin_path(root, f"{NAMES[1]}.service").parent / "10-other.conf").parent.mkdir(parents=True)
    (deploy.dropin_path(root, f"{NAMES[1]}.service").parent / "10-other.conf").write_bytes(b"[Service]\nNice=1\n")
    before = _dropin_state(root)
    units = systemd.LocalUnits(root)
    pids = {n: units.main_pid(f"{n}.service") for n in NAMES}
    p = run_cli(
        "fleet",
        "deploy",
        jemalloc,
        "--units",
        "tor@*",
        "--batch",
        "2",
        "--settle",
        "3s",
        "--guard-interval",
        "0.2s",
        "--max-memory",
        "12M",
        "--baseline",
        "none",
        "--root",
        str(root),
        "--systemctl",
        "local",
        "-o",
        str(tmp_path / "deploy.json"),
    )
    assert p.returncode == 1, p.stdout + p.stderr
    assert "deploy stopped at batch 1" in p.stdout and "above the bound" in p.stdout, p.stdout
    assert _dropin_state(root) == before  # byte for byte, nothing added or left behind
    canary = sorted(NAMES)[:2]
    for n in NAMES:
        pid = units.main_pid(f"{n}.service")
        assert pid and "LD_PRELOAD" not in _environ(pid)
        assert (pid != pids[n]) == (n in canary)  # the canary was restarted twice; the rest never
    assert _environ(units.main_pid(f"{NAMES[0]}.service")).get("FOO") == "canary"
    gens = [g.name for g in (root / "var/lib/alloclab/fleet/applied").iterdir()]
    assert len(gens) == 1 and gens[0].endswith(".rolled-back")
    again = run_cli("fleet", "rollback", "--root", str(root), "--systemctl", "local")
    assert again.returncode == 2 and "nothing to roll back" in again.stderr


def test_a_settle_time_too_short_for_the_guard_still_takes_the_samples_it_needs(root, native_dir):
    """A starved machine can spend a whole settle time on fewer samples than a memory guard needs to
    trip (seen: 2 samples in 4 s at a 10% CPU quota beside 10 busy loops; `persist` is 3), and a unit
    far above the bound was then said to have "settled within the guards". A settle time of 0 s makes
    that case certain: the watch goes on until the unit has its `persist` samples, and trips."""
    units, unit = systemd.LocalUnits(root), f"{NAMES[0]}.service"
    # a sawtooth whose period outlasts the test holds its 40 MB (no tooth dips under the bound)
    (root / "etc/systemd/system" / unit).write_text(
        f"[Service]\nExecStart={native_dir / 'stressors'} --pattern sawtooth --load 3600 --period 1000 --mb 40\n"
    )
    units.restart(unit)
    wait_for(lambda: (deploy._rss_kb(units, unit) or 0) > 30 * 1024, 30, "the unit to hold 30 MB")
    guards = rollout.Guards(max_memory_kb=20 * 1024)
    watched: dict = {}
    tripped = deploy._settle(units, [unit], {unit: {"kb": None, "age": None, "curve": []}}, guards, 0.0, 0.05, watched)
    assert tripped is not None and tripped[0] == unit and "above the bound" in tripped[1], (tripped, watched)
    assert len(watched[unit]["kb"]) == guards.persist


def test_rollback_scope_batch_keeps_the_batches_that_passed(root, native_dir, jemalloc, tmp_path):
    order = sorted(NAMES)
    _big_units(root, native_dir, {n: (3 if n in order[:2] else 40) for n in NAMES})
    before = _dropin_state(root)
    units = systemd.LocalUnits(root)
    said: list[str] = []
    guards = rollout.Guards(max_memory_kb=20 * 1024)
    result = deploy.deploy(
        units,
        jemalloc,
        "tor@*",
        2,
        False,
        tmp_path / "deploy.json",
        said.append,
        guards=guards,
        settle=2.0,
        scope="batch",
        sample_every=0.2,
    )
    trip = result["tripped"]
    assert trip is not None, (said, result.get("watched"))
    assert trip["batch"] == 2 and sorted(trip["rolled_back"]) == [f"{n}.service" for n in order[2:4]], said
    lib = os.path.realpath(jemalloc)
    for n in order[:2]:  # passed: deployed
        assert _environ(units.main_pid(f"{n}.service")).get("LD_PRELOAD") == lib
    for n in order[2:]:  # tripped (restored) or never reached
        assert "LD_PRELOAD" not in _environ(units.main_pid(f"{n}.service"))
        assert _dropin_state(root)[n] == before[n]
    restarted = [u for _, what, u in units.log if what == "restart"]
    assert all(f"{n}.service" not in restarted for n in order[4:])
