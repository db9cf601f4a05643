"""The fleet-wide assignment (fleet.assign) and the loadability rules (unitaccess)."""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from alloclab.experiment_file import parse_experiment
from alloclab.fleet import unitaccess
from alloclab.fleet.plan import assign


def _facts(host: str, n: int, rng: random.Random) -> list[dict]:
    return [
        {"unit": f"tor@{host}-{i}.service", "memory_kb": rng.randrange(20_000, 90_000), "uptime_s": rng.random() * 1e5}
        for i in range(n)
    ]


@settings(max_examples=200, deadline=None)
@given(counts=st.lists(st.integers(1, 13), min_size=1, max_size=6), k=st.integers(1, 5), seed=st.integers(0, 2**31))
def test_every_host_carries_every_group_its_unit_count_allows_and_the_fleet_stays_balanced(counts, k, seed):
    rng = random.Random(seed)
    by_host = {f"h{i}": _facts(f"h{i}", n, rng) for i, n in enumerate(counts)}
    names = [f"g{j}" for j in range(k)]
    out = assign(by_host, names, seed)
    assert sorted(a["unit"] for a in out) == sorted(f["unit"] for fs in by_host.values() for f in fs)
    for host, facts in by_host.items():
        per = Counter(a["group"] for a in out if a["host"] == host)
        if len(facts) >= k:
            assert set(per) == set(names)  # every group on every host
        assert max(per.values()) - min(per.get(n, 0) for n in names) <= 1 or len(facts) < k
    fleet_counts = Counter(a["group"] for a in out)
    assert max(fleet_counts.values()) - min(fleet_counts.get(n, 0) for n in names) <= 1
    assert out == assign(dict(reversed(list(by_host.items()))), names, seed)  # one seed, one plan


def test_the_same_seed_on_every_host_no_longer_repeats_one_assignment():
    """The issue's confound: per-host plans with one seed gave every host the same assignment.
    One fleet-wide generator gives the hosts different orders (over many seeds, not always equal)."""
    rng = random.Random(1)
    facts = _facts("x", 8, rng)
    same = 0
    for seed in range(50):
        out = assign({"h1": facts, "h2": [{**f, "unit": f["unit"]} for f in facts]}, ["a", "b", "c", "d"], seed)
        g1 = [a["group"] for a in out if a["host"] == "h1"]
        g2 = [a["group"] for a in out if a["host"] == "h2"]
        same += g1 == g2
    assert same < 5


def test_groups_of_a_fleet_experiment_need_no_command():
    text = '[[group]]\nname = "glibc"\nallocator = "glibc"\n'
    exp = parse_experiment(text, "g.toml", fleet=True)
    assert exp.command is None and exp.groups[0].name == "glibc"
    try:
        parse_experiment(text, "g.toml")
    except Exception as exc:  # a run still needs one
        assert "no command to run" in str(exc)
    else:
        raise AssertionError("a run without a command was accepted")


SHOW = """User=debian-tor
Group=
SupplementaryGroups=
DynamicUser=no
ProtectHome=yes
ProtectSystem=full
PrivateTmp=yes
InaccessiblePaths=-/srv/secret /opt/hidden
TemporaryFileSystem=/var/empty-ish:ro
RootDirectory=
CapabilityBoundingSet=cap_setgid cap_setuid cap_net_bind_service cap_dac_read_search
"""


def sandbox(text: str = SHOW) -> unitaccess.Sandbox:
    return unitaccess.from_properties(dict(line.partition("=")[::2] for line in text.splitlines()))


def test_the_settings_that_hide_a_library_are_named():
    sb = sandbox()
    assert sb.user == "debian-tor" and sb.capabilities and "cap_dac_read_search" in sb.capabilities
    assert unitaccess.hidden_by(sb, "/root/.cache/alloclab/lib.so") == "ProtectHome=yes hides /root"
    assert unitaccess.hidden_by(sb, "/home/op/lib.so") == "ProtectHome=yes hides /home"
    assert unitaccess.hidden_by(sb, "/tmp/x/lib.so") == "PrivateTmp=yes replaces /tmp"
    assert unitaccess.hidden_by(sb, "/srv/secret/lib.so") == "InaccessiblePaths=/srv/secret"
    assert unitaccess.hidden_by(sb, "/var/empty-ish/lib.so") == "TemporaryFileSystem=/var/empty-ish"
    assert (
        unitaccess.hidden_by(sb, "/usr/lib/alloclab/jemalloc-5.3.0/libjemalloc.so.2") is None
    )  # ProtectSystem: read-only only
    assert unitaccess.hidden_by(sb, "/rootfs/lib.so") is None
    read_only = sandbox(
        SHOW.replace("ProtectHome=yes", "ProtectHome=read-only").replace("PrivateTmp=yes", "PrivateTmp=no")
    )
    assert (
        unitaccess.hidden_by(read_only, "/root/lib.so") is None
        and unitaccess.hidden_by(read_only, "/tmp/lib.so") is None
    )
    # the controller's copy of a host's sandbox says the same
    assert unitaccess.from_dict(sb.as_dict()).as_dict() == sb.as_dict()


@pytest.fixture
def open_dir():
    """A directory every user can search (pytest's own tree is its owner's only)."""
    d = Path(tempfile.mkdtemp(prefix=f"alloclab-access-{os.getpid()}-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d)


def test_file_permissions_are_checked_as_the_units_user(open_dir, jemalloc):
    lib = open_dir / "private" / "libjemalloc.so.2"
    lib.parent.mkdir()
    lib.write_bytes(open(os.path.realpath(jemalloc), "rb").read())
    nobody = sandbox("User=nobody\n")
    lib.parent.chmod(0o700)
    why = unitaccess.refusal(nobody, str(lib))
    assert why and why.startswith(f"cannot search {lib.parent}"), why
    lib.parent.chmod(0o755)
    lib.chmod(0o600)
    assert unitaccess.refusal(nobody, str(lib)).startswith("cannot read it")
    lib.chmod(0o644)
    assert unitaccess.refusal(nobody, str(lib)) is None
    # root reads anything unless the bounding set drops both DAC capabilities
    lib.chmod(0o600)
    os.chown(lib, 65534, 65534)
    assert unitaccess.refusal(sandbox("User=root\n"), str(lib)) is None
    no_dac = sandbox("User=root\nCapabilityBoundingSet=cap_setuid cap_setgid\n")
    assert unitaccess.refusal(no_dac, str(lib)).startswith("cannot read it")
    assert "does not exist" in unitaccess.refusal(sandbox("User=no-such-user-here\n"), str(lib))
