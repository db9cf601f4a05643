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
    """5 replicas per group left mimalloc 2.0.9 against glibc non-significant in 1 of 8 runs (glibc's
    levels spread per process, CV 3-6%); 8 gave Holm p <= 0.002 in 10 of 10 within 0.42 of the 2 cores
    (benchmarks/README.md "The main job"). Changing the count needs those runs again."""
    exp = parse_experiment(experiment_text("demo-tor.toml", 148), "tor.toml")
    assert exp.replicas == 8 and len(exp.groups) == 5
