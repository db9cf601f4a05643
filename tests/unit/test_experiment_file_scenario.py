"""[scenario] name = "tor-network" and torrc options: parsed strictly, every mistake one line."""

from __future__ import annotations

import pytest

from alloclab.common.errors import UserError
from alloclab.experiment_file import parse_experiment
from tests.conftest import run_cli

BASE = """
name = "t"
replicas = 2
[scenario]
name = "tor-network"
{scenario}
[phases]
load = "1m"
[[group]]
name = "a"
allocator = "glibc"
{group}
"""


def exp(scenario: str = "", group: str = "", top: str = ""):
    return parse_experiment(top + BASE.format(scenario=scenario, group=group), "t.toml")


def test_scenario_and_torrc_layers_parse():
    e = exp(
        'torrc = ["MaxConsensusAgeForDiffs 2 hours"]\nvoting_interval = "30s"\nload_rate = 2',
        'torrc = ["DirCache 0", "MaxMemInQueues 64 MB"]',
    )
    assert e.scenario.name == "tor-network" and e.scenario.voting_interval == 30 and e.scenario.load_rate == 2
    assert e.scenario.torrc == ("MaxConsensusAgeForDiffs 2 hours",)
    assert e.groups[0].torrc == ("DirCache 0", "MaxMemInQueues 64 MB")
    assert e.command is None and e.load_command is None


@pytest.mark.parametrize(
    "group, message",
    [
        ('torrc = ["DirCache 0\\nDirPort 80"]', "newline or control character"),
        ('torrc = ["DirCache 0\\rExitRelay 1"]', "newline or control character"),
        ('torrc = ["ContactInfo x \\\\"]', "ends with a backslash"),
        ('torrc = "DirCache 0"', "must be a list of torrc lines"),
        ('torrc = ["DirPort 127.0.0.1:80"]', "which the tor-network scenario sets itself"),
        ('torrc = ["dataDIRECTORY /tmp"]', "which the tor-network scenario sets itself"),
        ('torrc = ["%include /etc/tor"]', "is not a torrc option"),
        ('torrc = ["+DirAuthority x"]', "is not a torrc option"),
        ('torrc = [""]', "is not a torrc option"),
    ],
)
def test_torrc_lines_are_one_option_each(group, message):
    with pytest.raises(UserError, match=message):
        exp(group=group)


@pytest.mark.parametrize(
    "scenario, top, message",
    [
        ('voting_interval = "7s"', "", "shorter than the minimum"),
        ('voting_interval = "11s"', "", "does not divide a day"),
        ("authorities = 12", "", "1 to 9 directory authorities"),
        ('tor = ""', "", "scenario.tor is empty"),
        ("load_rate = 0", "", "load_rate = 0 is out of range"),
        ("wobble = 1", "", "unknown key 'wobble' in \\[scenario\\]"),
        ("routers = 20001", "", "routers = 20001 is out of range"),
        ("routers = -1", "", "routers = -1 is out of range"),
        ("router_churn = 1.5", "", "router_churn = 1.5 is out of range"),
        ('variant = "exit"', "", "variant = 'exit' is not known"),
        ("traffic = 0.5", "", "traffic = 0.5 is out of range"),
        ("traffic = 200000", "", "traffic = 200000 is out of range"),
        ("traffic = 100", "", "traffic needs at least 3 relays per group \\(replicas = 2\\)"),
        ("num_cpus = 129", "", "num_cpus = 129 is out of range"),
        ("num_cpus = -1", "", "num_cpus = -1 is out of range"),
        ("", 'command = ["/bin/true"]\n', "provides the relays' command and load; remove command"),
    ],
)
def test_scenario_mistakes(scenario, top, message):
    with pytest.raises(UserError, match=message):
        exp(scenario, top=top)


def test_directory_size_and_the_co_guard_variant():
    e = exp("routers = 7000\nrouter_churn = 0.05")
    assert (e.scenario.routers, e.scenario.router_churn, e.scenario.variant) == (7000, 0.05, "dircache")
    assert exp().scenario.routers == 0  # the default keeps the network (and the tests) small
    # co-guard: DirCache 0 by default, before the scenario's and the group's lines (a group's DirCache 1 wins)
    from alloclab.tor.network import serves_directory

    g = exp('variant = "co-guard"\ntorrc = ["MaxMemInQueues 2 GB"]')
    assert g.scenario.torrc == ("DirCache 0", "MaxMemInQueues 2 GB") and not serves_directory(g.scenario.torrc)
    g = exp('variant = "co-guard"', 'torrc = ["DirCache 1"]')
    assert serves_directory(g.scenario.torrc + g.groups[0].torrc)


def test_unknown_scenario_and_torrc_without_scenario():
    with pytest.raises(UserError, match="scenario 'tor' is not known"):
        parse_experiment(BASE.format(scenario="", group="").replace('"tor-network"', '"tor"'), "t.toml")
    text = 'command = ["/bin/true"]\n[[group]]\nname = "a"\nallocator = "glibc"\ntorrc = ["DirCache 0"]\n'
    with pytest.raises(UserError, match="sets torrc without a tor scenario"):
        parse_experiment(text, "t.toml")


def test_cli_refuses_with_one_line_and_exit_2(tmp_path):
    f = tmp_path / "t.toml"
    f.write_text(BASE.format(scenario="", group='torrc = ["DirCache 0\\nORPort 9001"]'))
    out = run_cli("check", str(f))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "newline or control character" in out.stderr


def test_a_group_can_run_another_tor_build():
    from alloclab.tor import network

    e = exp(group='command = ["/opt/tor-0.4.9/tor"]')
    assert network.relay_command(e, e.groups[0])[:3] == ("/opt/tor-0.4.9/tor", "-f", "{workdir}/torrc")
    assert network.tor_program(e, e.groups[0]) == "/opt/tor-0.4.9/tor"
    load = network.load_command(e)
    assert load[load.index("--host") + 1] == "127.0.0.1" and load[load.index("--port") + 1] == "{port}"


def test_dircache_0_means_no_dirport():
    from alloclab.tor.network import serves_directory

    assert serves_directory(()) and serves_directory(("DirCache 1",)) and serves_directory(("DirCache 0", "dircache 1"))
    assert not serves_directory(("MaxMemInQueues 64 MB", "DirCache 0")) and not serves_directory(("DIRCACHE 0",))


def test_traffic_and_worker_threads():
    e = parse_experiment(
        BASE.format(scenario='traffic = 1000\nnum_cpus = 16\ntorrc = ["MaxMemInQueues 1 GB"]', group="").replace(
            "replicas = 2", "replicas = 3"
        ),
        "t.toml",
    )
    assert (e.scenario.traffic, e.scenario.num_cpus) == (1000, 16)
    # NumCPUs goes first: a NumCPUs line of the scenario's or a group's own torrc comes later and wins
    assert e.scenario.torrc == ("NumCPUs 16", "MaxMemInQueues 1 GB")
    d = parse_experiment(BASE.format(scenario="", group="").replace("replicas = 2", "replicas = 3"), "t.toml")
    assert (d.scenario.traffic, d.scenario.num_cpus, d.scenario.torrc) == (
        0,
        0,
        (),
    )  # defaults: no circuits, tor's own count
