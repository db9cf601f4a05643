"""Fleet mode against a real systemd: a user manager (`systemd --user`, Debian's package) started
by the test, with its unit path at ROOT/etc/systemd/system, driven through the same `Systemd`
class as PID 1 would be (`systemctl --user`): drop-ins, daemon-reload, restart, `show -p MainPID`,
the unit's cgroup. The manager refuses to start unless /run/systemd/system exists (the sign that
systemd is PID 1), so it runs in a private mount namespace with a tmpfs there; nothing of the
host's /run changes."""

from __future__ import annotations

import _thread
import os
import shutil
import subprocess
import threading
import uuid
from pathlib import Path

import pytest

from alloclab.capture import sampler
from alloclab.fleet import collector, deploy, rollout, systemd
from alloclab.fleet.plan import make_plan
from alloclab.store import Store
from tests.systemd_user import SYSTEMD, Unavailable, user_manager
from tests.waiting import wait_for, wait_for_ticks

pytestmark = [
    pytest.mark.root,  # systemd in a mount namespace
    pytest.mark.skipif(
        not (Path(SYSTEMD).exists() and shutil.which("systemctl") and shutil.which("unshare")),
        reason="systemd missing: run scripts/install.sh --test",
    ),
]


@pytest.fixture
def manager(tmp_path, monkeypatch, native_dir):
    root = tmp_path / "root"
    unit_dir = root / "etc" / "systemd" / "system"
    unit_dir.mkdir(parents=True)
    tag = uuid.uuid4().hex[:8]  # unit names unique to this test: managers share the cgroup tree
    names = [f"relay{tag}@{i}.service" for i in range(3)]
    for i, name in enumerate(names):
        (unit_dir / name).write_text(
            f"[Service]\nExecStart={native_dir / 'stressors'} --pattern sawtooth --load 3600 --period 1 --mb {2 + i}\n"
        )
    pid1_before = Path("/proc/1/cgroup").read_text()
    try:
        with user_manager(unit_dir, tmp_path, monkeypatch):
            units = systemd.units_from("user", root)
            for name in names:  # the services run before alloclab arrives
                units.restart(name)
            yield units, names
    except Unavailable as exc:
        pytest.skip(str(exc))
    assert Path("/proc/1/cgroup").read_text() == pid1_before, "the manager moved processes outside its own cgroup"


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    except OSError:
        return []


def environ(pid: int) -> dict[str, str]:
    return dict(i.decode().partition("=")[::2] for i in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if i)


def test_apply_collect_rollback_against_a_real_systemd(manager, tmp_path, jemalloc, ctrl_c_raises):
    units, names = manager
    assert isinstance(units, systemd.Systemd) and units.user
    assert set(names) <= set(units.list_units())
    before = {n: units.main_pid(n) for n in names}
    assert all(before.values())
    (tmp_path / "groups.toml").write_text(
        f'name = "r"\ncommand = ["/bin/true"]\n[[group]]\nname = "glibc"\nallocator = "glibc"\n'
        f'[[group]]\nname = "jemalloc"\nallocator = "{jemalloc}"\n'
    )
    glob = names[0].split("@")[0] + "@*"
    plan = make_plan(units, glob, tmp_path / "groups.toml", 1, tmp_path / "plan.json")
    result = deploy.apply_plan(units, plan, batch=2, dry_run=False, say=lambda s: None)
    assert result["units"] == 3
    lib = os.path.realpath(jemalloc)
    for a in plan.assignments:
        pid = units.main_pid(a["unit"])  # systemctl show -p MainPID
        assert pid and pid != before[a["unit"]]
        assert environ(pid).get("LD_PRELOAD") == (lib if a["group"] == "jemalloc" else None)
        assert pid in units.pids(a["unit"])  # the unit's cgroup members
    cg = units.memory_cgroup(names[0])
    if cg is not None:  # a memory controller is delegated here: the unit's usage is real
        assert cg.usage_kb() and cg.usage_kb() > 0
    run = tmp_path / "run"

    def stop_after_four_ticks():  # ticks, not seconds: a loaded machine skips slots
        try:
            wait_for_ticks(run / "run.db", 4, 60)
        finally:
            _thread.interrupt_main()  # collect() ends on KeyboardInterrupt, as on Ctrl-C

    stopper = threading.Thread(target=stop_after_four_ticks)
    stopper.start()
    try:
        result = collector.collect(units, plan, run, interval=0.3, duration=None, say=lambda s: None)
    finally:
        stopper.join()
    assert result["ticks"] >= 4 and result["systemd_queries"] == 1  # asked once, all units in one call
    store = Store.open(run)
    reps = store.replicas()
    assert all(r["verified"] == 1 for r in reps), [(r["name"], r["verify_detail"]) for r in reps]
    first = store.series(reps[0]["id"], ["rss_kb", "cgroup_kb"])
    assert len(first["t"]) >= 4 and all(first["rss_kb"])
    if cg is not None:
        assert all(v and v > 0 for v in first["cgroup_kb"])
    store.close()
    # the collector's own unit, installed for this user manager with every option it was given
    path = collector.install_collector(units, tmp_path / "plan.json", run, "5m", "user", "127.0.0.1:9464", "relay-h1")
    assert "WantedBy=default.target" in path.read_text()  # a user manager has no multi-user.target
    shown = subprocess.run(
        ["systemctl", "--user", "show", "-p", "ExecStart", path.name], capture_output=True, text=True
    )
    for option in ("--systemctl user", "--listen 127.0.0.1:9464", "--host relay-h1", "--interval 300s"):
        assert option in shown.stdout, shown.stdout
    deploy.rollback(units, batch=3, say=lambda s: None)
    for n in names:
        assert not deploy.dropin_path(units.root, n).exists()
        pid = units.main_pid(n)
        assert pid and units.is_active(n) and "LD_PRELOAD" not in environ(pid)
        assert sampler.read_stat(pid) is not None


def test_a_crash_loop_under_the_new_allocator_is_rolled_back_by_systemd_restarts(manager, tmp_path, jemalloc):
    """systemd restarts the crashing canary (Restart=always); alloclab counts the MainPID changes,
    trips the crash-loop guard and restores the drop-ins; the later unit is never touched."""
    units, names = manager
    unit_dir = units.root / "etc" / "systemd" / "system"
    crashy = names[0]  # first in the plan's order: the canary
    # crashes a second after starting whenever jemalloc is preloaded; runs fine otherwise
    (unit_dir / crashy).write_text(
        "[Unit]\nStartLimitIntervalSec=0\n[Service]\nRestart=always\nRestartSec=0.2\n"
        "ExecStart=/bin/sh -c 'case \"$$LD_PRELOAD\" in *jemalloc*) sleep 1; exit 1;; esac; exec sleep 3600'\n"
    )
    existing = deploy.dropin_path(units.root, crashy)
    existing.parent.mkdir(parents=True)
    existing.write_bytes(b'[Service]\nEnvironment="KEEP=me"\n')
    units.daemon_reload()
    units.restart(crashy)
    others = {n: units.main_pid(n) for n in names[1:]}
    glob = names[0].split("@")[0] + "@*"
    said: list[str] = []
    result = deploy.deploy(
        units,
        jemalloc,
        glob,
        1,
        False,
        tmp_path / "deploy.json",
        said.append,
        guards=rollout.Guards(max_restarts=3),
        settle=8.0,
        sample_every=0.2,
    )
    trip = result["tripped"]
    assert trip and trip["unit"] == crashy and "crash loop" in trip["why"], said
    assert existing.read_bytes() == b'[Service]\nEnvironment="KEEP=me"\n'
    # did not crash: the unit's shell took the branch without jemalloc and became `sleep 3600` (on
    # jemalloc it would sleep 1 s in a child and exit 1)
    pid = wait_for(
        lambda: (p := units.main_pid(crashy)) and cmdline(p) == ["sleep", "3600"] and p,
        20,
        f"{crashy} to run `sleep 3600`",
    )
    assert units.is_active(crashy)
    env = environ(pid)
    assert "LD_PRELOAD" not in env and env.get("KEEP") == "me"
    assert {n: units.main_pid(n) for n in names[1:]} == others  # later batches never restarted
