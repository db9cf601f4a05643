"""Outputs that cannot be written (a file where a directory goes, a directory where a file goes, a
place that cannot be made): one line naming the path and the option to change, exit code 2, no
traceback, found before the work starts, and nothing recorded is touched. The CLI runs in this
process (alloclab.cli.main, as the entry point does); the stores are made directly (test_merge)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from alloclab.cli import main
from tests.conftest import run_cli
from tests.unit.test_merge import host_run

UNMAKEABLE = "/proc/alloclab-no-such-dir"  # procfs takes no new directory, not even from root


def alloclab(monkeypatch, capsys, *argv: str) -> tuple[int, str]:
    """Run the CLI as `alloclab ARGV`; returns the exit code and stderr."""
    monkeypatch.setattr(sys, "argv", ["alloclab", *argv])
    with pytest.raises(SystemExit) as exit_:
        main()
    return exit_.value.code, capsys.readouterr().err


def one_line(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err


@pytest.fixture
def run(tmp_path):
    return host_run(tmp_path / "run", "h1", 1000.0)


@pytest.mark.parametrize(
    "where,needles",
    [
        ("file", ["is a file, not a directory", "-o"]),
        ("unmakeable", ["cannot write to report directory", "No such file or directory", "-o"]),
    ],
)
def test_report_to_an_output_it_cannot_write(monkeypatch, capsys, run, where, needles):
    out = run / "run.db" if where == "file" else UNMAKEABLE
    before = (run / "run.db").read_bytes()
    one_line(*alloclab(monkeypatch, capsys, "report", str(run), "-o", str(out)), *needles)
    assert (run / "run.db").read_bytes() == before and not (run / "report.md").exists()


def test_bundle_into_a_directory_that_takes_no_file(monkeypatch, capsys, run):
    one_line(
        *alloclab(monkeypatch, capsys, "bundle", str(run), "-o", f"/proc/{run.name}.tar.gz"),
        "cannot write bundle /proc/",
        "-o",
    )
    assert not (run / "report.md").exists()  # refused before the report a bundle needs


def test_merge_onto_a_file(monkeypatch, capsys, tmp_path):
    a, b = host_run(tmp_path / "h1", "h1", 1000.0), host_run(tmp_path / "h2", "h2", 1000.3)
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    one_line(
        *alloclab(monkeypatch, capsys, "merge", str(a), str(b), "-o", str(notes)), "is a file, not a directory", "-o"
    )
    assert notes.read_text() == "mine"


def test_package_into_a_directory_that_cannot_be_made(monkeypatch, capsys):
    one_line(
        *alloclab(monkeypatch, capsys, "allocators", "package", "jemalloc@5.3.0", "-o", UNMAKEABLE),
        f"cannot write to output directory {UNMAKEABLE}",
        "-o",
    )


def local_units(root):
    """A unit file under a --systemctl local root: listed, never started."""
    units = root / "etc/systemd/system"
    units.mkdir(parents=True)
    (units / "tor@a.service").write_text("[Service]\nExecStart=/bin/sleep 3600\n")
    return ["--root", str(root), "--systemctl", "local"]


@pytest.mark.parametrize(
    "verb",
    [
        ["plan", "--units", "tor@*", "--groups", "groups.toml"],
        ["deploy", "jemalloc@5.3.0", "--units", "tor@*", "--dry-run"],
    ],
)
def test_fleet_plan_files_that_cannot_be_written(monkeypatch, capsys, tmp_path, verb):
    monkeypatch.chdir(tmp_path)
    local = local_units(tmp_path / "root")
    (tmp_path / "groups.toml").write_text(
        'name = "relays"\ncommand = ["/bin/true"]\n[[group]]\nname = "glibc"\nallocator = "glibc"\n'
    )
    (tmp_path / "taken").mkdir()
    one_line(*alloclab(monkeypatch, capsys, "fleet", *verb, "-o", "taken", *local), "taken is a directory", "-o")
    one_line(
        *alloclab(monkeypatch, capsys, "fleet", *verb, "-o", f"{UNMAKEABLE}/plan.json", *local),
        "cannot write",
        f"{UNMAKEABLE}/plan.json",
        "-o",
    )


TRACE = Path(__file__).parents[1] / "data/traces/worker_pool.v2.trace"


@pytest.mark.parametrize(
    "chart,needles",
    [
        ("curve", ["--chart", "is not a .png file name", "curve.png"]),
        (f"{UNMAKEABLE}/curve.png", ["cannot write chart", "--chart"]),
    ],
)
def test_trace_chart_that_would_not_be_written_where_asked(monkeypatch, capsys, tmp_path, chart, needles):
    """A name without .png was written as NAME.png and reported as NAME (exit 0); a place that
    takes no file was a traceback once the trace had been read."""
    monkeypatch.chdir(tmp_path)
    one_line(*alloclab(monkeypatch, capsys, "trace", "info", str(TRACE), "--chart", chart), *needles)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "target,needles", [("kept.trace", ["kept.trace already exists", "-o"]), ("adir", ["adir is a directory", "-o"])]
)
def test_trace_record_keeps_an_earlier_recording_and_runs_nothing(monkeypatch, capsys, tmp_path, target, needles):
    """An existing trace was overwritten by the next recording given the same -o; a directory was
    found only after the program had run."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kept.trace").write_bytes(TRACE.read_bytes())
    (tmp_path / "adir").mkdir()
    one_line(*alloclab(monkeypatch, capsys, "trace", "record", "-o", target, "--", "/bin/touch", "ran"), *needles)
    assert (tmp_path / "kept.trace").read_bytes() == TRACE.read_bytes() and not (tmp_path / "ran").exists()


@pytest.mark.parametrize("batch", ["0", "-1"])
def test_fleet_rollback_batch_below_one(monkeypatch, capsys, tmp_path, batch):
    """--batch 0 restored the drop-ins, then failed in range() before any restart (a traceback);
    -1 restarted nothing and said every unit was rolled back. Refused as the options are read."""
    one_line(
        *alloclab(
            monkeypatch, capsys, "fleet", "rollback", "--batch", batch, "--root", str(tmp_path), "--systemctl", "local"
        ),
        f"--batch '{batch}' is not a batch size",
    )


def test_allocators_build_jobs_below_one(monkeypatch, capsys):
    """-j 0 and -j -3 were taken silently (as 1) and the build went ahead."""
    one_line(
        *alloclab(monkeypatch, capsys, "allocators", "build", "nosuch@1", "-j", "0"),
        "'-j' / '--jobs': 0 is not in the range x>=1",
    )


def test_fleet_deploy_dry_run_checks_the_history_run(monkeypatch, capsys, tmp_path):
    """A --history that is no run passed the dry run and failed only the real deploy."""
    local = local_units(tmp_path / "root")
    one_line(
        *alloclab(
            monkeypatch,
            capsys,
            "fleet",
            "deploy",
            "glibc",
            "--units",
            "tor@*",
            "--dry-run",
            "--history",
            str(tmp_path / "no-run"),
            "-o",
            str(tmp_path / "d.json"),
            *local,
        ),
        "--history",
        "no collector run there",
    )


def test_fleet_deploy_dry_run_writes_no_file(monkeypatch, capsys, tmp_path):
    """ "Change nothing": the dry run wrote its one-group plan over -o (an earlier deploy's plan)
    and a .toml beside it."""
    local = local_units(tmp_path / "root")
    earlier = tmp_path / "deploy.json"
    earlier.write_text('{"earlier": "deploy"}')
    code, err = alloclab(
        monkeypatch, capsys, "fleet", "deploy", "glibc", "--units", "tor@*", "--dry-run", "-o", str(earlier), *local
    )
    assert code == 0, err
    assert earlier.read_text() == '{"earlier": "deploy"}' and sorted(p.name for p in tmp_path.iterdir()) == [
        "deploy.json",
        "root",
    ]


@pytest.mark.parametrize("env", ["LD_PRELOAD=/usr/lib/libx.so", "ALLOCLAB_GROUP=x"])
def test_fleet_deploy_env_refusal_names_the_option_not_a_file_the_user_never_wrote(monkeypatch, capsys, tmp_path, env):
    """Was "fleet-deploy.toml: group 'deploy' sets LD_PRELOAD in env" (the plan's groups file, made from the options)."""
    local = local_units(tmp_path / "root")
    code, err = alloclab(
        monkeypatch,
        capsys,
        "fleet",
        "deploy",
        "glibc",
        "--units",
        "tor@*",
        "--dry-run",
        "--env",
        env,
        "-o",
        str(tmp_path / "d.json"),
        *local,
    )
    one_line(code, err, "--env", env.split("=")[0])
    assert ".toml" not in err


@pytest.mark.parametrize(
    "verb",
    [
        ["bisect", "--family", "mimalloc", "--good", "2.0.9", "--bad", "3.0.1"],
        ["sweep", "--allocator", "glibc", "--allocator", "jemalloc@5.3.0"],
    ],
)
def test_workload_param_with_an_experiment_file_names_that_option(monkeypatch, capsys, tmp_path, verb):
    """Was "--param applies to ...": bisect's --param is another option (the axis)."""
    exp = tmp_path / "exp.toml"
    exp.write_text('name = "x"\ncommand = ["/bin/true"]\n[[group]]\nname = "glibc"\nallocator = "glibc"\n')
    one_line(
        *alloclab(
            monkeypatch,
            capsys,
            verb[0],
            str(exp),
            *verb[1:],
            "--workload-param",
            "clients=3",
            "-o",
            str(tmp_path / "out"),
        ),
        "--workload-param applies to a built-in workload",
    )


@pytest.mark.parametrize("verb", [["apply"], ["collect", "-o", "run"]])
def test_fleet_plan_that_does_not_exist(monkeypatch, capsys, tmp_path, verb):
    """Was "no-plan.json is not an alloclab fleet plan" for a path with nothing there (a typo)."""
    monkeypatch.chdir(tmp_path)
    args = ["no-plan.json", *verb[1:]] if verb == ["apply"] else ["--plan", "no-plan.json", *verb[1:]]
    one_line(
        *alloclab(monkeypatch, capsys, "fleet", verb[0], *args, "--root", str(tmp_path), "--systemctl", "local"),
        "plan no-plan.json does not exist",
    )


def test_trace_record_of_a_program_that_allocates_nothing(monkeypatch, capsys, tmp_path, native_dir):
    """Was "recorded 0 events ... (64 bytes, 64.00 bytes/event)": a per-event figure of no event."""
    code = None
    monkeypatch.setattr(
        sys, "argv", ["alloclab", "trace", "record", "-o", str(tmp_path / "true.trace"), "--", "/bin/true"]
    )
    try:
        main()
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr().out
    assert code in (None, 0) and "recorded no allocation" in out and "bytes/event" not in out, out


def test_report_refused_after_its_output_was_checked_leaves_no_directory(monkeypatch, capsys, run, tmp_path):
    """The -o check makes the directory before the analysis; a refusal (or Ctrl-C) after it removes it again."""
    one_line(
        *alloclab(monkeypatch, capsys, "report", str(run), "--baseline", "nosuch", "-o", str(tmp_path / "new/report")),
        "baseline 'nosuch' is not a group of this run",
    )
    assert not (tmp_path / "new/report").exists()


def test_import_prometheus_range_refusal_shows_times_not_unix_seconds(monkeypatch, capsys, tmp_path):
    """Was "--from is not before --to (1795533435 >= 1795530000)"."""
    one_line(
        *alloclab(
            monkeypatch,
            capsys,
            "import",
            "prometheus",
            "http://127.0.0.1:9",
            "-o",
            str(tmp_path / "run"),
            "--from",
            "1795533435",
            "--to",
            "1795530000",
        ),
        "--from is not before --to (2026-11-24 15:17:15 UTC >= 2026-11-24 14:20:00 UTC)",
    )


@pytest.mark.parametrize(
    "verb",
    [
        ["demo"],
        ["bisect", "tor-dircache", "--param", "clients", "--values", "10,20"],
        ["sweep", "tor-dircache", "--allocator", "glibc", "--set", "MALLOC_ARENA_MAX=1,2"],
    ],
)
def test_long_jobs_refuse_an_output_directory_that_cannot_be_made(monkeypatch, capsys, verb):
    """Was a FileNotFoundError traceback from out.mkdir (bisect, sweep: after resolving every step,
    whose plan line comes first on stderr)."""
    code, err = alloclab(monkeypatch, capsys, *verb, "-o", UNMAKEABLE)
    assert code == 2 and "Traceback" not in err, err
    one_line(code, err.splitlines()[-1] + "\n", f"cannot write to output directory {UNMAKEABLE}", "-o")


def test_a_cache_that_cannot_be_written():
    """ALLOCLAB_CACHE (or the home it defaults to: ProtectHome=) not writable was a traceback from
    whichever mkdir met it first. A fresh interpreter: in this one, what the cache holds may be read already."""
    proc = run_cli("allocators", "list", env={"ALLOCLAB_CACHE": f"{UNMAKEABLE}/cache"}, timeout=120)
    one_line(proc.returncode, proc.stderr, f"cannot write alloclab's cache {UNMAKEABLE}/cache", "ALLOCLAB_CACHE")


def test_fleet_collect_into_a_file(monkeypatch, capsys, tmp_path):
    """Was a FileExistsError traceback from mkdir once the units had been found running."""
    import os
    import signal

    from alloclab.fleet import systemd

    local = local_units(tmp_path / "root")
    (tmp_path / "groups.toml").write_text(
        'name = "r"\ncommand = ["/bin/true"]\n[[group]]\nname = "glibc"\nallocator = "glibc"\n'
    )
    systemd.LocalUnits(tmp_path / "root").restart("tor@a.service")
    try:
        plan = tmp_path / "plan.json"
        code, err = alloclab(
            monkeypatch,
            capsys,
            "fleet",
            "plan",
            "--units",
            "tor@*",
            "--groups",
            str(tmp_path / "groups.toml"),
            "-o",
            str(plan),
            *local,
        )
        assert code == 0, err
        notes = tmp_path / "notes.txt"
        notes.write_text("mine")
        one_line(
            *alloclab(
                monkeypatch,
                capsys,
                "fleet",
                "collect",
                "--plan",
                str(plan),
                "-o",
                str(notes),
                "--duration",
                "1s",
                *local,
            ),
            f"output directory {notes} is a file",
            "-o",
        )
        assert notes.read_text() == "mine"
    finally:
        for pidfile in (tmp_path / "root/run/alloclab-units").glob("*.pid"):
            os.killpg(int(pidfile.read_text().split()[0]), signal.SIGKILL)


def test_export_keeps_csv_files_it_did_not_write(monkeypatch, capsys, run, tmp_path):
    """`export RUN --csv DIR` overwrote a TorUtils experiment's own memory.csv in DIR; an earlier
    export of alloclab's is still refreshed."""
    theirs = tmp_path / "torutils"
    theirs.mkdir()
    (theirs / "memory.csv").write_text("timestamp,type,nickname,rss_kb\n")
    one_line(
        *alloclab(monkeypatch, capsys, "export", str(run), "--csv", str(theirs)),
        "already holds memory.csv that alloclab did not export",
        "--csv",
    )
    assert (theirs / "memory.csv").read_text() == "timestamp,type,nickname,rss_kb\n" and len(
        list(theirs.iterdir())
    ) == 1
    for _ in range(2):  # an export, then the same export again over it
        code, err = alloclab(monkeypatch, capsys, "export", str(run), "--csv", str(tmp_path / "ours"))
        assert code == 0, err


@pytest.mark.parametrize(
    "argv,needles",
    [
        (["run", "exp.toml", "--stable-for", "10s", "-o", "new"], ["--stable-for", "add --until-significant"]),
        (
            ["run", "--resume", "r", "--max-duration", "1h"],
            ["--max-duration cannot change a resumed run", "drop --max-duration"],
        ),
        (
            ["run", "--resume", "r", "-o", "elsewhere", "--until-significant"],
            ["-o, --until-significant cannot change a resumed run"],
        ),
        (["run", "--resume", "r", "--until-decided"], ["--until-decided cannot change a resumed run"]),
        (
            ["run", "exp.toml", "--until-significant", "--until-decided"],
            ["two stop rules; a run has one", "keep --until-decided"],
        ),
    ],
)
def test_run_options_that_would_be_ignored(monkeypatch, capsys, tmp_path, argv, needles):
    """Were taken and silently dropped (exit 0): --stable-for without --until-significant, and with
    --resume every option of a new run."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "exp.toml").write_text(
        'name = "x"\ncommand = ["/bin/true"]\n[[group]]\nname = "glibc"\nallocator = "glibc"\n'
    )
    host_run(tmp_path / "r", "h1", 1000.0)
    one_line(*alloclab(monkeypatch, capsys, *argv), *needles)
    assert not (tmp_path / "elsewhere").exists()


@pytest.mark.parametrize("verb", [["facts", "--units", "tor@*"], ["rollback"]])
def test_fleet_root_that_does_not_exist(monkeypatch, capsys, tmp_path, verb):
    """Was "no unit matches 'tor@*' — units present: none" (facts) and "nothing to roll back" (rollback)."""
    one_line(
        *alloclab(monkeypatch, capsys, "fleet", *verb, "--root", str(tmp_path / "typo"), "--systemctl", "local"),
        f"--root {tmp_path / 'typo'} is not a directory",
    )


@pytest.mark.parametrize("verb", [["report"], ["compare", "OTHER"]])
def test_a_metric_the_run_never_recorded(monkeypatch, capsys, run, tmp_path, verb):
    """--metric pss of a run holding RSS only (a TorUtils import, a collector without smaps) was
    analysed into every group 'Too short' and "no group has usable data"."""
    other = host_run(tmp_path / "other", "h2", 1000.0)
    argv = [verb[0], str(run), *(str(other) for _ in verb[1:]), "--metric", "pss"]
    one_line(*alloclab(monkeypatch, capsys, *argv), f"--metric pss: {run} recorded no PSS samples", "use --metric rss")


def test_fleet_tables_say_a_stopped_unit_is_not_running(monkeypatch, capsys, tmp_path):
    """A unit with no main process was shown as 0.0 MB for 0.00 h, as if measured."""
    monkeypatch.setattr(
        sys, "argv", ["alloclab", "fleet", "facts", "--units", "tor@*", *local_units(tmp_path / "root")]
    )
    with pytest.raises(SystemExit) as exit_:
        main()
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "tor@a.service" in line)
    assert exit_.value.code == 0 and "not running" in row and "0.0" not in row, out


def test_fleet_plan_from_an_empty_list_of_facts(monkeypatch, capsys, tmp_path):
    """`--facts -` reading `[]` (facts gathered from no host) was an IndexError traceback."""
    import io

    (tmp_path / "groups.toml").write_text(
        'name = "r"\ncommand = ["/bin/true"]\n[[group]]\nname = "glibc"\nallocator = "glibc"\n'
    )
    monkeypatch.setattr(sys, "stdin", io.StringIO("[]"))
    one_line(
        *alloclab(
            monkeypatch,
            capsys,
            "fleet",
            "plan",
            "--facts",
            "-",
            "--groups",
            str(tmp_path / "groups.toml"),
            "-o",
            str(tmp_path / "plan.json"),
        ),
        "stdin holds no host's facts",
    )
    assert not (tmp_path / "plan.json").exists()


def test_compare_gate_over_no_matched_group_says_so(monkeypatch, capsys, run, tmp_path):
    """Was "the data cannot tell whether no group matched rose by more than 5%; more replicas or
    longer runs would settle it": nothing had been tested, and more replicas would not change that."""
    other = host_run(
        tmp_path / "renamed",
        "h1",
        1000.0,
        groups=[("base", "glibc", None), ("je", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "5.3.0")],
    )
    monkeypatch.setattr(sys, "argv", ["alloclab", "compare", str(run), str(other), "--fail-on-increase", "5"])
    with pytest.raises(SystemExit) as exit_:
        main()
    out = " ".join(capsys.readouterr().out.split())
    # nothing was gated: not a silent green (exit 4, inconclusive, unless --allow-inconclusive)
    assert (
        exit_.value.code == 4 and "no group of run A matches a group of run B (--by group), so none was gated" in out
    ), out
    assert "more replicas or longer runs" not in out


@pytest.mark.parametrize(
    "argv,needles",
    [
        (["show", "glibc"], ["glibc is the system's allocator", 'allocator = "glibc"']),
        (["path", "jemalloc"], ["'jemalloc' names a family", "jemalloc@5.3.0"]),
    ],
)
def test_allocators_ids_that_are_not_builds(monkeypatch, capsys, argv, needles):
    """`allocators list` shows a glibc row, yet `show glibc` said "'glibc' is not a catalog id — write
    family@version"; a bare family got the same line without its ids."""
    one_line(*alloclab(monkeypatch, capsys, "allocators", *argv), *needles)


@pytest.mark.parametrize(
    "under,needles",
    [
        ("notes.txt", ["is not a shared library (no ELF header)"]),
        ("libdir", ["libdir is a directory", "give the library file in it"]),
    ],
)
def test_an_allocator_library_that_is_no_library(monkeypatch, capsys, tmp_path, under, needles):
    """A text file was "preloaded but malloc still resolves to libc.so.6" (the loader skips it with a
    warning); a directory was "not a readable file — check the path and its permissions"."""
    (tmp_path / "notes.txt").write_text("x = 1\n")
    (tmp_path / "libdir").mkdir()
    one_line(
        *alloclab(monkeypatch, capsys, "trace", "replay", str(TRACE), "--speed", "0", "--under", str(tmp_path / under)),
        *needles,
    )


def test_workload_parameters_say_what_their_numbers_count():
    """`alloclab workloads` showed hour=6, gap=1.0, period=10 with no unit (seconds per simulated hour, s, s)."""
    from alloclab.run.workloads import MODELS, PARAM_UNITS, describe

    assert set(PARAM_UNITS) <= {k for m in MODELS.values() for k in m.defaults}  # no unit of a parameter gone
    shown = {name: params for name, _, params in describe()}
    assert "hour=6 (s per simulated hour)" in shown["tor-dircache"] and "period=10 (s)" in shown["sawtooth"]


@pytest.mark.parametrize(
    "verb",
    [
        ["bisect", "tor-dircache", "--param", "clients", "--values", "10,20"],
        ["sweep", "tor-dircache", "--allocator", "glibc", "--set", "MALLOC_ARENA_MAX=1,2"],
    ],
)
def test_bisect_and_sweep_refuse_a_used_output_first(monkeypatch, capsys, tmp_path, verb):
    """A non-empty -o was refused only after every step was resolved (a --family bisect asks the
    registries first) and the plan printed."""
    (tmp_path / "out").mkdir()
    (tmp_path / "out/bisect.md").write_text("an earlier search")
    one_line(
        *alloclab(monkeypatch, capsys, *verb, "-o", str(tmp_path / "out")), "already exists and is not empty", "-o"
    )
