"""Scenarios sit behind one protocol (scenarios.Scenario): the runner and preflight know none by
name, and the tor-network scenario (tornet.TorScenario) implements every call of it."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from alloclab.experiment_file import load_experiment
from alloclab.run import scenarios
from alloclab.tor import network

SRC = Path(scenarios.__file__).parent
SCENARIO_MODULES = {"tornet", "tor_dirload", "tor_routers"}  # the modules' names before the tor/ package


def _scenario_module(name: str) -> bool:
    return name in SCENARIO_MODULES or name == "tor" or name.startswith("tor.")


GENERIC = ("runner.py", "preflight.py")


def names_a_scenario(source: str) -> list[str]:
    """Where `source` reaches a particular scenario: importing its module, or reading the
    [scenario] settings (`exp.scenario.tor`) instead of asking the Scenario object."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            names = sorted(n for n in {node.module or ""} | {a.name for a in node.names} if _scenario_module(n))
            if names:
                found.append(f"{node.lineno}: imports {names[0]}")
        elif isinstance(node, ast.Import) and any(
            _scenario_module(a.name.removeprefix("alloclab.")) or a.name.split(".")[-1] in SCENARIO_MODULES
            for a in node.names
        ):
            found.append(f"{node.lineno}: imports a scenario module")
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "scenario"
            and isinstance(node.value.value, (ast.Name, ast.Attribute))
            and (getattr(node.value.value, "id", None) or getattr(node.value.value, "attr", None)) == "exp"
        ):
            found.append(f"{node.lineno}: reads exp.scenario.{node.attr}")
    return found


def test_the_runner_and_preflight_know_no_scenario_by_name():
    offenders = [f"{name}:{where}" for name in GENERIC for where in names_a_scenario((SRC / name).read_text())]
    assert not offenders, "ask scenarios.Scenario instead:\n" + "\n".join(offenders)


def test_the_check_finds_what_the_old_runner_did():
    old = (
        "from . import tornet\nself.network = tornet.TorNetwork(exp, d, resolve(exp.scenario.tor))\n"
        "timeout = self.exp.scenario.consensus_timeout\n"
    )
    assert sorted(names_a_scenario(old)) == [
        "1: imports tornet",
        "2: reads exp.scenario.tor",
        "3: reads exp.scenario.consensus_timeout",
    ]
    assert names_a_scenario("from .tor import network\nfrom .tor.network import TorNetwork\n") == [
        "1: imports tor",
        "2: imports tor.network",
    ]
    assert not names_a_scenario("from . import scenarios\nself.scenario.tick(self, now)\n")


def test_the_tor_scenario_implements_every_call_of_the_protocol():
    calls = {n: f for n, f in vars(scenarios.Scenario).items() if callable(f) and not n.startswith("_")}
    assert {"prepare", "command", "load_command", "setup", "tick", "teardown", "finish"} <= set(calls)
    for name, proto in calls.items():
        impl = getattr(network.TorScenario, name, None)
        assert impl is not None, f"TorScenario has no {name}"
        assert list(inspect.signature(impl).parameters) == list(inspect.signature(proto).parameters), name


def test_an_experiment_gets_its_scenario(tmp_path):
    plain = tmp_path / "plain.toml"
    plain.write_text('name = "p"\ncommand = ["/bin/sleep", "60"]\n[[group]]\nname = "a"\nallocator = "glibc"\n')
    tor = tmp_path / "tor.toml"
    tor.write_text(
        'name = "t"\n[scenario]\nname = "tor-network"\ntor = "/usr/sbin/tor"\n[[group]]\nname = "a"\nallocator = "glibc"\n'
    )
    assert scenarios.of(load_experiment(plain)) is None
    sc = scenarios.of(load_experiment(tor))
    assert isinstance(sc, network.TorScenario)
    assert sc.command(load_experiment(tor).groups[0])[:3] == ("/usr/sbin/tor", "-f", "{workdir}/torrc")
    assert "dirload.py" in sc.load_command()[1]
