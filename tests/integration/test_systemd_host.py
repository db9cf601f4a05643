"""The test harness's systemd host (tests/integration/systemd_host.py) leaves nothing behind:
not when closing it is cut short (a pytest-timeout firing in teardown left
alloclab-systemd-{tag}/init.scope in every cgroup hierarchy), and a session killed outright has its
empty cgroups removed by the next host that starts."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.integration.systemd_host import CGROUP_PREFIX, SYSTEMD, Host, Unavailable, _hierarchies, remove_cgroup_tree

pytestmark = [
    pytest.mark.root,  # systemd, namespaces and cgroups
    pytest.mark.skipif(not Path(SYSTEMD).exists() or os.geteuid() != 0, reason="needs systemd and root (cgroups)"),
]


class Interrupted(BaseException):
    """What pytest-timeout raises in a test's teardown (its Failed is a BaseException too)."""


def test_a_close_cut_short_still_kills_the_manager_and_its_units_and_removes_their_cgroups(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    # a SIGKILLed session's leftover: its pid runs no more, its cgroups hold no process
    stale = [h / f"{CGROUP_PREFIX}{dead.pid}-{uuid.uuid4().hex[:8]}" for h in _hierarchies()]
    for s in stale:
        (s / "init.scope").mkdir(parents=True)
    units = tmp_path / "units"
    units.mkdir()
    (units / "alloclab-sleeper.service").write_text("[Service]\nExecStart=/bin/sleep 600\n")
    host = Host(tmp_path / "manager", units)
    cgroups: list[Path] = []
    try:
        try:
            host.start()
        except Unavailable as exc:
            pytest.skip(str(exc))
        assert not any(s.exists() for s in stale), "a stale host cgroup was not removed"
        assert host.systemctl("start", "alloclab-sleeper.service").returncode == 0
        sleeper = int(host.systemctl("show", "-p", "MainPID", "--value", "alloclab-sleeper.service").stdout)
        assert sleeper > 0
        cgroups, manager = list(host.cgroups), host.manager
        real_wait = manager.wait
        cut = []

        def wait(timeout=None):
            if not cut:  # the first wait, for the manager stopping its units: cut short
                cut.append(1)
                raise Interrupted
            return real_wait(timeout)

        manager.wait = wait
        with pytest.raises(Interrupted):
            host.close()
        assert cut and manager.poll() is not None
        assert not Path(f"/proc/{sleeper}").exists() or Path(f"/proc/{sleeper}/stat").read_text().split()[2] == "Z"
        assert not [c for c in cgroups if c.exists()], "cgroups left behind"
    finally:
        deadline = time.monotonic() + 30
        for c in cgroups + stale:  # on the old code: what it left
            remove_cgroup_tree(c, deadline)
