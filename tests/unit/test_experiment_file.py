import importlib.util
import math

import pytest
from hypothesis import given, strategies as st

from alloclab import experiment_file
from alloclab.common.errors import UserError
from alloclab.experiment_file import Phases, load_experiment, parse_duration, parse_experiment, substitute
from tests.conftest import REPO

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
    assert exp.baseline == "a"  # first group by default
    assert exp.group("b").env == {"MALLOC_ARENA_MAX": "2"}


@pytest.mark.parametrize(
    "text,unit",
    [
        ("90s", 90),
        ("5m", 300),
        ("2h", 7200),
        ("1d", 86400),
        ("250ms", 0.25),
        (3, 3),
        (" 2s ", 2),
        ("366d", 366 * 86400),
    ],
)
def test_durations(text, unit):
    assert parse_duration(text, "x") == pytest.approx(unit)


@given(st.floats(min_value=-1e6, max_value=0))
def test_non_positive_durations_are_refused(v):
    with pytest.raises(UserError, match="longer than zero"):
        parse_duration(v, "interval")


@given(st.one_of(st.floats(), st.integers(), st.text(max_size=30), st.booleans(), st.none(), st.lists(st.integers())))
def test_any_duration_is_a_finite_positive_bounded_number_or_a_user_error(v):
    try:
        seconds = parse_duration(v, "--max-duration", minimum=0.1)
    except UserError as err:
        assert "\n" not in str(err) and "--max-duration" in str(err)
    else:
        assert math.isfinite(seconds) and 0.1 <= seconds <= experiment_file.MAX_DURATION


@pytest.mark.parametrize(
    "value,message",
    [
        (math.nan, "is not a number"),
        (math.inf, "longer than the maximum of 366d"),
        (-math.inf, "longer than zero"),
        (10**400, "longer than the maximum"),
        ("9" * 400 + "s", "longer than the maximum"),
        ("367d", "maximum of 366d"),
        ("1e3s", "is not a duration"),
        ("nan", "is not a duration"),
        ("inf", "is not a duration"),
        ("١s", "is not a duration"),
        ("5m\nExecStartPre=/bin/true", "is not a duration"),
        ("2s\n", "is not a duration"),
        (True, "must be a duration"),
        ([1], "must be a duration"),
        ("", "is not a duration"),
    ],
)
def test_durations_a_machine_cannot_honour(value, message):
    with pytest.raises(UserError, match=message):
        parse_duration(value, "--max-duration")


def test_phases_at():
    p = Phases(10, 60, 20)
    assert [p.at(x) for x in (0, 9.9, 10, 69.9, 70, 500)] == ["warmup", "warmup", "load", "load", "idle", "idle"]


def edit(*pairs: tuple[str, str]) -> str:
    text = GOOD
    for old, new in pairs:
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


def top(line: str) -> str:
    return edit(("replicas = 2", f"replicas = 2\n{line}"))


def group_b(line: str) -> str:
    """Group b with `line` in place of its env."""
    return edit(("env = { MALLOC_ARENA_MAX = 2 }", line))


LONG = "/" + "a" * 5000
# (file text, words the one-line message must hold). Each is a file a user or an attacker could write.
BAD = [
    (edit(("replicas = 2", "replica = 2")), "unknown key 'replica'"),
    (edit(("replicas = 2", 'replicas = "two"')), "replicas must be an integer"),
    (edit(('interval = "500ms"', 'interval = "-1s"')), "is not a duration"),
    (edit(('interval = "500ms"', "interval = 0")), "longer than zero"),
    (edit(('load = "2m"', 'load = "soon"')), "is not a duration"),
    (edit(('command = ["/bin/true"]', 'command = "/bin/true --x"')), "must be a list of arguments"),
    (edit(('command = ["/bin/true"]', 'command = ["/bin/true", "{nope}"]')), "unknown placeholder {nope}"),
    (edit(('name = "b"', 'name = "a"')), "two groups are named 'a'"),
    (edit(('allocator = "glibc"\nenv', "env")), "has no allocator"),
    (top('baseline = "zzz"'), "baseline 'zzz' is not a group"),
    (edit(("[phases]", "[phase]")), "unknown key 'phase'"),
    # the tracebacks
    (top('extra = "a\\u0000b"'), "contains a NUL byte"),
    (edit(('"/bin/true"', '"/bin/true\\u0000"')), "contains a NUL byte"),
    (group_b('env = { "A\\u0000" = "1" }'), "contains a NUL byte"),
    (top("deep = " + "[" * 1000 + "]" * 1000), "nested more than 16 deep"),
    (top("deep = " + "[" * 17 + "]" * 17), "deep is nested more than 16 deep"),
    (top("deep = " + "{a = " * 300 + "1" + "}" * 300), "nested more than 16 deep"),
    ("a" + ".b" * 2000 + " = 1\n" + GOOD, "nested more than 16 deep"),
    (edit(('"/bin/true"]', '"/bin/true", "{}"]')), "unknown placeholder {}"),
    (edit(('"/bin/true"]', '"/bin/true", "{seed:d}"]')), "unknown placeholder {seed:d}"),
    (edit(('"/bin/true"]', '"/bin/true", "{replica.x}"]')), "unknown placeholder {replica.x}"),
    (edit(('"/bin/true"]', '"/bin/true", "{group[0]}"]')), "unknown placeholder {group[0]}"),
    (edit(('"/bin/true"]', '"/bin/true", "{seed!r}"]')), "unknown placeholder {seed!r}"),
    (edit(('"/bin/true"]', '"/bin/true", "{0}"]')), "unknown placeholder {0}"),
    (edit(('"/bin/true"]', '"/bin/true", "{seed:{replica}}"]')), "unknown placeholder"),
    (edit(('"/bin/true"]', '"/bin/true", "{"]')), "unmatched brace"),
    (edit(('"/bin/true"]', '"/bin/true", "x}"]')), "unmatched brace"),
    (edit(('"/bin/true"]', '"/bin/true", "{__class__}"]')), "unknown placeholder {__class__}"),
    (edit(('"/bin/true"]', '"/bin/true"' + ', "{port}"' * 33 + "]")), "more than 32 placeholders"),
    (edit(('"/bin/true"]', '"{workdir}/app"]')), "inside {workdir}"),
    (group_b('env = { "A=B" = "1" }'), "env key 'A=B' is not a variable name"),
    (group_b('env = { "" = "1" }'), "env key '' is not a variable name"),
    (group_b('env = { "1X" = "1" }'), "is not a variable name"),
    (group_b('env = { "A.B" = "1" }'), "is not a variable name"),
    (group_b('env = { "A B" = "1" }'), "is not a variable name"),
    (group_b('env = { "É" = "1" }'), "is not a variable name"),
    (group_b("env = { " + "X" * 300 + ' = "1" }'), "is not a variable name"),
    (group_b('env = { ALLOCLAB_STATS = "/tmp/x" }'), "sets ALLOCLAB_STATS"),
    (group_b('env = { LD_PRELOAD = "/x.so" }'), "sets LD_PRELOAD"),
    (group_b('env = { X = "' + "v" * 40000 + '" }'), "40,000 bytes long"),
    (group_b("env = { X = nan }"), "is not a finite number"),
    (group_b("env = { X = [1] }"), "must be a string"),
    (group_b("env = { X = true }"), "must be a string"),
    (group_b("env = { " + ", ".join(f"V{i} = 1" for i in range(257)) + " }"), "sets 257 environment variables"),
    (edit(('"/bin/true"', f'"{LONG}"')), "is 5,001 bytes long"),
    (edit(('"/bin/true"', '"/' + "a" * 300 + '/x"')), "300-byte component"),
    (edit(('"/bin/true"', '"/bin/true\\n"')), "contains a control character"),
    (edit(('"/bin/true"', '""')), "empty program name"),
    (edit(('"/bin/true"]', '"/bin/true", "' + "x" * 40000 + '"]')), "is too long"),
    (edit(('"/bin/true"]', '"/bin/true"' + ', "x"' * 1024 + "]")), "1,025 arguments"),
    (edit(('allocator = "glibc"', f'allocator = "{LONG}"')), "allocator is 5,001 bytes long"),
    (edit(('allocator = "glibc"', 'allocator = "a\\tb"')), "contains a control character"),
    (edit(('load = "2m"', "load = nan")), "phases.load = nan is not a finite number"),
    (edit(('load = "2m"', "load = inf")), "is not a finite number"),
    (edit(('load = "2m"', "load = -inf")), "is not a finite number"),
    (edit(('load = "2m"', "load = 1e308")), "longer than the maximum"),
    (edit(('load = "2m"', 'load = "300d"'), ('idle = "30s"', 'idle = "100d"')), "the phases last"),
    (edit(('interval = "500ms"', "interval = nan")), "interval = nan is not a finite number"),
    (edit(('interval = "500ms"', 'interval = "1ms"')), "shorter than the minimum of 0.1s"),
    (edit(('interval = "500ms"', "interval = 0.0001")), "shorter than the minimum of 0.1s"),
    (edit(('interval = "500ms"', "interval = 1e-320")), "shorter than the minimum"),
    (edit(('interval = "500ms"', 'interval = "2h"')), "longer than the maximum of 1h"),
    (top('verify_every = "10ms"'), "verify_every = '10ms' is shorter than the minimum"),
    (top('grace = "2h"'), "grace = '2h' is longer than the maximum of 1h"),
    (top("max_duration = nan"), "is not a finite number"),
    (top('max_duration = "0s"'), "longer than zero"),
    (top("smaps_budget = nan"), "is not a finite number"),
    (top("smaps_budget = 2"), "share of one core"),
    (top("seed = -1"), "seed = -1 is out of range"),
    (top("seed = 9223372036854775807"), "out of range"),
    (top("seed = 99999999999999999999"), "does not fit in 64 bits"),
    (top("seed = 1.5"), "seed must be an integer"),
    (top("port_base = 65000"), "out of range"),
    (edit(("replicas = 2", "replicas = 0")), "replicas = 0 is out of range"),
    (edit(("replicas = 2", "replicas = 257")), "use 1 to 256 replicas per group"),
    (edit(("replicas = 2", "replicas = 1e3")), "replicas must be an integer"),
    (
        edit(("replicas = 2", "replicas = 200"))
        + '[[group]]\nname = "c"\nallocator = "glibc"\n'
        + '[[group]]\nname = "d"\nallocator = "glibc"\n'
        + '[[group]]\nname = "e"\nallocator = "glibc"\n'
        + '[[group]]\nname = "f"\nallocator = "glibc"\n'
        + '[[group]]\nname = "g"\nallocator = "glibc"\n',
        "at most 1024 replicas in all",
    ),
    (GOOD + "".join(f'[[group]]\nname = "g{i}"\nallocator = "glibc"\n' for i in range(63)), "65 groups"),
    (edit(('name = "x"', 'name = "../evil"')), "must be 1-64 letters"),
    (edit(('name = "x"', 'name = ".."')), "must be 1-64 letters"),
    (edit(('name = "x"', 'name = "x\\n"')), "must be 1-64 letters"),
    (edit(('name = "x"', 'name = "a/b"')), "must be 1-64 letters"),
    (edit(('name = "x"', 'name = "' + "n" * 65 + '"')), "must be 1-64 letters"),
    (edit(('name = "x"', 'name = "名前"')), "must be 1-64 letters"),
    (edit(('name = "a"', 'name = ".hidden"')), "needs a name of 1-64"),
    (edit(('name = "a"', 'name = "a\\n"')), "needs a name of 1-64"),
    (edit(('name = "a"', "name = 5")), "name must be a string"),
    (GOOD + "[load]", "[load] needs command"),
    (GOOD + "[load]\ncommand = []", "load.command must be a non-empty list"),
    (GOOD + '[load]\ncommand = ["/bin/echo", "{}"]', "load.command uses unknown placeholder {}"),
    (GOOD + '[load]\ncommand = ["{workdir}/gen"]', "inside {workdir}"),
    (GOOD + "[workload]\nname = 5", "workload.name must be a string"),
    (GOOD + '[workload]\ntrace = "' + LONG + '"', "workload.trace is 5,001 bytes long"),
    (GOOD + '[workload]\nname = "worker-pool"\nthreads = nan', "is not a finite number"),
    (top('metric = "\\u0000"'), "contains a NUL byte"),
    (top("when = 1979-05-27"), "unknown key 'when'"),
    ("\x00" + GOOD, "not valid TOML"),
    (GOOD + '\nx = "\x01"', "not valid TOML"),
    ("name = ", "not valid TOML"),
    ("", "no [[group]] tables"),
    ("group = []", "no [[group]] tables"),
    ("group = [1]", "group #1 must be a table"),
    ('group = "glibc"', "no [[group]] tables"),
    ("phases = 3\n" + GOOD.replace("[phases]", "[phasesx]"), "unknown key 'phasesx'"),
    ("x" * (experiment_file.MAX_FILE_BYTES + 1), "larger than 1024 KiB"),
]


@pytest.mark.parametrize("text,message", BAD, ids=[f"{i}-{m[:40]}" for i, (_, m) in enumerate(BAD)])
def test_bad_input_names_the_problem(text, message):
    with pytest.raises(UserError) as err:
        parse_experiment(text, "exp.toml")
    assert message in str(err.value)
    assert "\n" not in str(err.value) and " — " in str(err.value)  # one line: the problem — the fix


ACCEPTED = [
    edit(('"/bin/true"]', '"/bin/true", "{{literal}}", "{{replica}}", "a}}b{{"]')),
    edit(('"/bin/true"]', '"/bin/true", "{replica}-{group}:{port}@{workdir}#{seed}"]')),
    edit(('interval = "500ms"', 'interval = "0.1s"')),
    edit(('interval = "500ms"', 'interval = "1h"')),
    edit(("replicas = 2", "replicas = 256")),
    edit(("replicas = 2", "replicas = 16"))
    + "".join(f'[[group]]\nname = "g{i}"\nallocator = "glibc"\n' for i in range(62)),
    group_b('env = { _X1 = "a\\nb", lower = "é", GLIBC_TUNABLES = "" }'),
    top("seed = 281474976710656"),
    top('max_duration = "366d"'),
    "\ufeff" + GOOD,
]


@pytest.mark.parametrize("text", ACCEPTED)
def test_limits_are_inclusive_and_literal_braces_work(text):
    exp = parse_experiment(text, "exp.toml")
    values = {"replica": "1", "group": "a", "port": "1", "workdir": "/w", "seed": "7"}
    argv = substitute(exp.command, values)
    assert not any("{" in a and "{{" not in text for a in argv[1:] if "literal" not in a)
    if "literal" in text:
        assert argv[1:] == ["{literal}", "{replica}", "a}b{"]


def test_replica_values_fill_placeholders():
    exp = parse_experiment(ACCEPTED[1])
    assert substitute(exp.command, {"replica": "3", "group": "g", "port": "20001", "workdir": "/w", "seed": "9"}) == [
        "/bin/true",
        "3-g:20001@/w#9",
    ]


def test_placeholders_are_exactly_the_runners():
    from alloclab.run import preflight

    exp = parse_experiment(GOOD)
    assert (
        set(experiment_file.PLACEHOLDERS)
        == set(preflight._sample_values(exp, "a", 1))
        == set(exp.placeholder_values("a", 2, 20001, "/w"))
        == {"replica", "group", "port", "workdir", "seed"}
    )
    assert exp.placeholder_values("a", 2, 20001, "/w")["seed"] == str(exp.seed * 1000 + 2)


def test_planned_duration_is_the_phases_capped_by_max_duration():
    exp = parse_experiment(GOOD)
    phases = exp.phases.total
    assert exp.planned_duration() == phases
    assert exp.planned_duration(phases / 2) == phases / 2
    assert exp.planned_duration(phases * 2) == phases


def test_limits_are_documented():
    doc = (REPO / "docs" / "reference" / "security.md").read_text()
    for figure in ("0.1 s", "366 days", "256", "1,024", "64 groups", "16", "1 MiB", "4,096", "32 placeholders"):
        assert figure in doc, figure


# ---- files on disk ----


def test_load_refuses_what_is_not_a_small_utf8_file(tmp_path):
    with pytest.raises(UserError, match="is not a regular file"):
        load_experiment(tmp_path)
    with pytest.raises(UserError, match="is not a regular file"):
        load_experiment(experiment_file.Path("/dev/zero"))
    big = tmp_path / "big.toml"
    big.write_bytes(b"#" * (experiment_file.MAX_FILE_BYTES + 1))
    with pytest.raises(UserError, match="1,048,577 bytes"):
        load_experiment(big)
    latin = tmp_path / "latin.toml"
    latin.write_bytes(GOOD.encode().replace(b'"x"', b'"\xe9"'))
    with pytest.raises(UserError, match="is not UTF-8 text"):
        load_experiment(latin)
    with pytest.raises(UserError, match="is 5,0"):
        load_experiment(tmp_path / ("a" * 5000))
    with pytest.raises(UserError, match="300-byte component"):
        load_experiment(tmp_path / ("a" * 300))
    with pytest.raises(UserError, match="does not exist"):
        load_experiment(tmp_path / "nope.toml")
    odd = tmp_path / "my exp.toml"
    odd.write_text(GOOD.replace('name = "x"\n', ""))
    with pytest.raises(UserError, match="'my exp' must be 1-64 letters"):
        load_experiment(odd)


# ---- the fuzz campaign's mutants, replayed in-process: each parses or is one UserError line ----


def _fuzz_module():
    spec = importlib.util.spec_from_file_location("fuzz_inputs", REPO / "scripts" / "fuzz_inputs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FUZZ = _fuzz_module()
MUTANTS = FUZZ.campaign_cases(300, seed=20240)


@pytest.mark.parametrize("kind,text", MUTANTS, ids=[f"{i}-{k}" for i, (k, _) in enumerate(MUTANTS)])
def test_mutants_parse_or_fail_in_one_line(tmp_path, kind, text):
    path = tmp_path / "exp.toml"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    try:
        exp = load_experiment(path)
    except UserError as err:
        assert "\n" not in str(err)
        return
    # accepted: every limit holds and the runner's substitution cannot fail
    assert (
        1 <= exp.replicas <= experiment_file.MAX_REPLICAS
        and len(exp.groups) * exp.replicas <= experiment_file.MAX_TOTAL_REPLICAS
    )
    assert experiment_file.MIN_INTERVAL <= exp.interval <= experiment_file.MAX_INTERVAL
    assert all(math.isfinite(v) for v in (exp.grace, exp.verify_every, exp.phases.warmup, exp.phases.idle))
    values = {"replica": "1", "group": "g", "port": "1", "workdir": "/w", "seed": "1"}
    for argv in [exp.command, exp.load_command, *(g.command for g in exp.groups)]:
        if argv:
            assert all("\x00" not in a for a in substitute(argv, values))
    for g in exp.groups:
        assert all(experiment_file._ENV_KEY.fullmatch(k) and "\x00" not in v for k, v in g.env.items())


def test_the_campaign_covers_every_kind():
    kinds = {k for k, _ in FUZZ.campaign_cases(400, seed=1)}
    assert {
        "number",
        "placeholder",
        "env_key",
        "deep",
        "nul_raw",
        "long_path",
        "unicode",
        "bytes",
        "allocator",
        "type_swap",
        "missing",
        "extra",
        "duplicate",
        "groups",
        "load",
        "workload",
    } <= kinds


def test_no_idle_phase_is_invented():
    from alloclab.experiment_file import Phases

    p = Phases(warmup=1.0, load=2.0, idle=0.0)
    assert [p.at(x) for x in (0.5, 1.5, 3.0, 3.5)] == ["warmup", "load", "load", "load"]
    q = Phases(warmup=1.0, load=2.0, idle=5.0)
    assert q.at(3.5) == "idle"
