"""The main job's experiment files, as `alloclab demo` writes them (commands/demo.py experiment_text)."""
from __future__ import annotations

import pytest

from alloclab.commands.demo import DEMOS, experiment_text
from alloclab.config import parse_experiment


@pytest.mark.parametrize("label,template,share", DEMOS)
def test_each_part_at_the_default_length_is_a_valid_experiment_of_its_share(label, template, share):
    total = int(270 * share)
    exp = parse_experiment(experiment_text(template, total), f"{label}.toml")
    assert exp.phases.warmup + exp.phases.load + exp.phases.idle == total
    assert exp.phases.load > 0 and exp.workload.name == label


def test_the_tor_part_runs_the_replicas_its_verdict_was_measured_with():
    """5 replicas per group: significant in 10 of 13 runs; 8 were significant in 10 of 10 but on a quiet
    machine loaded 2 cores to a median load of 6.6 (cpu-saturated on both parts), where 5 stay at 2.6
    (benchmarks/README.md "The main job"). Changing the count needs those runs again."""
    exp = parse_experiment(experiment_text("demo-tor.toml", 148), "tor.toml")
    assert exp.replicas == 5 and len(exp.groups) == 5
