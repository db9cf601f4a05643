"""`alloclab check` prints every warning `run` prints before it starts (issue 27): the design check
and the steady samples the phases allow; misspelt keys and allocators get "did you mean"."""

from __future__ import annotations

import pytest

from alloclab.analysis.design import SteadyAllowance, planned_warnings, steady_allowance
from alloclab.common.errors import UserError
from alloclab.experiment_file import load_experiment
from alloclab.run import preflight
from tests.conftest import run_cli

SHORT = """
name = "svc"
command = ["/bin/sleep", "100"]
replicas = 2
interval = "10s"
[phases]
load = "60s"
[[group]]
name = "a"
allocator = "glibc"
[[group]]
name = "b"
allocator = "glibc"
"""


def test_short_phases_and_two_replicas_warn_before_the_run(tmp_path):
    exp = tmp_path / "e.toml"
    exp.write_text(SHORT)
    e = load_experiment(exp)
    assert steady_allowance(e) == SteadyAllowance(6, 3, 50.0, 20.0)
    warnings = planned_warnings(e)
    assert [w.kind for w in warnings] == ["design-cannot-show-difference", "too-short-planned"]
    assert warnings[1].severity == "serious" and warnings[1].data["needed_load_s"] == 160
    # the case: a 60 s load at 1 s leaves a window under the 60 s the status rules need
    exp.write_text(SHORT.replace('interval = "10s"', 'interval = "1s"'))
    assert planned_warnings(load_experiment(exp))[1].kind == "too-short-planned"
    # long enough with an explicit warm-up: at 3 replicas only the power statement (replicas that may
    # differ by 20%, as relays do) remains; at 9 replicas nothing to say
    exp.write_text(
        SHORT.replace("replicas = 2", "replicas = 3").replace('load = "60s"', 'warmup = "20s"\nload = "80s"')
    )
    e = load_experiment(exp)
    assert steady_allowance(e) == SteadyAllowance(8, 8, 70.0, 70.0)
    assert [(w.kind, w.severity) for w in planned_warnings(e)] == [("design-cannot-show-difference", "info")]
    exp.write_text(
        SHORT.replace("replicas = 2", "replicas = 9").replace('load = "60s"', 'warmup = "20s"\nload = "80s"')
    )
    assert planned_warnings(load_experiment(exp)) == []


def test_check_prints_what_run_would_warn(tmp_path):
    exp = tmp_path / "e.toml"
    exp.write_text(SHORT)
    proc = run_cli("check", str(exp), env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ok, with 2 warnings (below): svc")
    assert (
        "steady samples per replica the phases allow: 3–6 over 20–50s (the status rules need 8 over at least 60s)"
        in proc.stdout
    )
    assert "design-cannot-show-difference" in proc.stderr and "too-short-planned" in proc.stderr
    assert "[phases] load to at least 160s" in " ".join(proc.stderr.split())


@pytest.mark.parametrize(
    "old,new,needle",
    [
        ("replicas = 2", "replicass = 2", "did you mean 'replicas'?"),
        ('allocator = "glibc"\n[[group]]', 'allocator = "glibcc"\n[[group]]', "did you mean 'glibc'?"),
        ('allocator = "glibc"\n[[group]]', 'allocator = "jemaloc@5.3.0"\n[[group]]', "did you mean 'jemalloc'?"),
    ],
)
def test_misspelt_keys_and_allocators_get_a_suggestion(tmp_path, old, new, needle):
    exp = tmp_path / "e.toml"
    exp.write_text(SHORT.replace(old, new, 1))
    with pytest.raises(UserError) as err:
        preflight.prepare(load_experiment(exp))
    assert needle in str(err.value)
