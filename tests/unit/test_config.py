import pytest
from hypothesis import given, strategies as st

from alloclab.config import Phases, parse_duration, parse_experiment
from alloclab.errors import UserError

GOOD = """
name = "x"
command = ["/bin/true"]
replicas = 2
interval = "500ms"
[phases]
warmup = "1s"
load = "2m"
idle = "30s"
[[group]]
name = "a"
allocator = "glibc"
[[group]]
name = "b"
allocator = "glibc"
env = { MALLOC_ARENA_MAX = 2 }
"""


def test_parses_a_complete_file():
    exp = parse_experiment(GOOD)
    assert exp.replicas == 2 and exp.interval == 0.5
    assert exp.phases == Phases(1.0, 120.0, 30.0) and exp.phases.total == 151.0
    assert exp.baseline == "a"                      # first group by default
    assert exp.group("b").env == {"MALLOC_ARENA_MAX": "2"}


@pytest.mark.parametrize("text,unit", [("90s", 90), ("5m", 300), ("2h", 7200), ("1d", 86400), ("250ms", 0.25), (3, 3)])
def test_durations(text, unit):
    assert parse_duration(text, "x") == pytest.approx(unit)


@given(st.floats(min_value=-1e6, max_value=0))
def test_non_positive_durations_are_refused(v):
    with pytest.raises(UserError, match="longer than zero"):
        parse_duration(v, "interval")


def test_phases_at():
    p = Phases(10, 60, 20)
    assert [p.at(x) for x in (0, 9.9, 10, 69.9, 70, 500)] == ["warmup", "warmup", "load", "load", "idle", "idle"]


@pytest.mark.parametrize("edit,message", [
    (("replicas = 2", "replica = 2"), "unknown key 'replica'"),
    (("replicas = 2", "replicas = \"two\""), "replicas must be a int"),
    (("interval = \"500ms\"", "interval = \"-1s\""), "is not a duration"),
    (("interval = \"500ms\"", "interval = 0"), "longer than zero"),
    (("load = \"2m\"", "load = \"soon\""), "is not a duration"),
    (("command = [\"/bin/true\"]", "command = \"/bin/true --x\""), "must be a list of arguments"),
    (("command = [\"/bin/true\"]", "command = [\"/bin/true\", \"{nope}\"]"), "unknown placeholder {nope}"),
    (("name = \"b\"", "name = \"a\""), "two groups are named 'a'"),
    (("allocator = \"glibc\"\nenv", "env"), "has no allocator"),
    (("replicas = 2", "replicas = 2\nbaseline = \"zzz\""), "baseline 'zzz' is not a group"),
    (("[phases]", "[phase]"), "unknown key 'phase'"),
])
def test_bad_input_names_the_problem(edit, message):
    with pytest.raises(UserError) as err:
        parse_experiment(GOOD.replace(*edit, 1), "exp.toml")
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_ld_preload_in_env_is_refused():
    with pytest.raises(UserError, match="sets LD_PRELOAD"):
        parse_experiment(GOOD.replace("MALLOC_ARENA_MAX = 2", 'LD_PRELOAD = "/x.so"'))


def test_invalid_toml():
    with pytest.raises(UserError, match="not valid TOML"):
        parse_experiment("name = ")
