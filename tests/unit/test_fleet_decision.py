"""`fleet status`: decided or how long, by looks on a fixed grid (alloclab/fleet/decision.py), on
seeded fleet runs written into real stores; and `fleet deploy --from-run` refusing an undecided run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from alloclab.allocators.library import sha256_file
from alloclab.fleet import decision
from alloclab.store import Store
from tests.conftest import run_cli

DAY = 86400.0


def fleet_run(
    path: Path,
    effect: float,
    units: int,
    days: float,
    seed: int,
    library: str | None = None,
    regrowth_h: tuple[float, float] = (6.0, 6.0),
) -> Path:
    """A fleet run's store: glibc (baseline) and jemalloc-bg, `units` each, samples every 30 min;
    relays differ (20%), a daily cycle, AR(1) noise, regrowth after the start; jemalloc-bg's level
    is `effect` times glibc's; each group regrows after the start with its own time constant."""
    rng = np.random.default_rng(seed)
    path.mkdir(parents=True)
    store = Store.create(path / "run.db")
    store.set_meta(name="relays", source="fleet", metric="rss", interval=1800, baseline="glibc")
    gid = store.add_group(name="glibc", allocator="glibc", is_baseline=1, env_json="{}")
    jid = store.add_group(
        name="jemalloc-bg",
        allocator=library or "jemalloc@5.3.0",
        library_path=library,
        library_sha256=sha256_file(library) if library else None,
        version="5.3.0",
        env_json=json.dumps({"MALLOC_CONF": "background_thread:true"}),
    )
    t0 = 1.79e9
    t = t0 + np.arange(1, int(days * 48) + 1) * 1800.0
    rows = []
    for gi, ((group, mu), tau_h) in enumerate(zip(((gid, 0.0), (jid, math.log(effect))), regrowth_h)):
        for i in range(units):
            rid = store.add_replica(group_id=group, name=f"tor@g{gi}u{i}.service", verified=1)
            noise = np.zeros(len(t))
            for k in range(1, len(t)):
                noise[k] = 0.7 * noise[k - 1] + rng.normal(0, 0.03)
            log_mb = (
                math.log(80)
                + mu
                + rng.normal(0, 0.2)
                + 0.05 * np.sin(2 * math.pi * t / DAY)
                + noise
                - 0.4 * np.exp(-(t - t0) / (tau_h * 3600))
            )
            rows += [(float(x), rid, int(np.exp(v) * 1024)) for x, v in zip(t, log_mb)]
    store.add_samples(("t", "replica_id", "rss_kb"), rows)
    store.close()
    return path


def test_a_clear_difference_is_decided_lower_at_a_grid_look(tmp_path):
    run = fleet_run(tmp_path / "run", 0.6, 24, 3.0, seed=1)
    st = decision.run_status(Store.open(run))
    (c,) = st.comparisons
    assert (c.group, c.baseline, c.state, c.outcome) == ("jemalloc-bg", "glibc", "decided", "lower")
    assert c.look_s in decision.LookPlan().times() and c.ratio_ci[1] < 1
    assert 0.5 < c.ratio < 0.7
    assert st.recommended == "jemalloc-bg"


def test_the_status_between_looks_is_the_last_looks_so_looking_hourly_changes_nothing(tmp_path):
    run = fleet_run(tmp_path / "run", 1.0, 4, 3.0, seed=2)
    loaded = decision.load_run(Store.open(run))
    plan = decision.LookPlan()
    for hour in range(1, 50):
        at = decision.status_at(loaded, plan, loaded.t0 + hour * 3600.0)
        grid = (hour * 3600.0 // plan.every_s) * plan.every_s
        ref = decision.status_at(loaded, plan, loaded.t0 + grid)
        assert at.looks_done == ref.looks_done == int(grid // plan.every_s)
        assert [(c.state, c.outcome, c.ratio, c.look) for c in at.comparisons] == [
            (c.state, c.outcome, c.ratio, c.look) for c in ref.comparisons
        ]


def test_an_undecided_comparison_says_when_a_decision_is_expected(tmp_path):
    run = fleet_run(tmp_path / "run", 0.85, 6, 1.0, seed=3)
    st = decision.run_status(Store.open(run))
    (c,) = st.comparisons
    assert c.state == "undecided" and st.recommended is None
    assert c.expected_decision_s is not None or "horizon" in c.note
    if c.expected_decision_s is not None:
        assert c.expected_decision_s > c.look_s and c.expected_decision_s in decision.LookPlan().times()
    line = decision.status_line(c, st.plan)
    assert line.startswith("jemalloc-bg vs glibc: undecided")


def test_the_projection_uses_each_future_looks_level():
    plan = decision.LookPlan()
    s = decision.ComparisonStatus("b", "a", "undecided", None, 0.9, None, 1, plan.every_s, plan.levels()[0], 10, 10)
    decision._project(s, [(plan.every_s, 0.02)], plan, plan.levels(), 1, 1)
    # log(0.9) = −0.105; SE 0.02·(t/12 h)^−½: the first later look whose critical value it clears
    for j, t in enumerate(plan.times()[1:], 1):
        from scipy import special

        q = float(special.stdtrit(18, 1 - plan.levels()[j] / 2))
        if 0.105 - q * 0.02 * (t / plan.every_s) ** -0.5 > 0:
            assert s.expected_decision_s == t
            break


def test_no_look_yet_names_the_first(tmp_path):
    run = fleet_run(tmp_path / "run", 0.7, 4, 0.25, seed=4)
    st = decision.run_status(Store.open(run))
    assert st.looks_done == 0 and "first is at day 0.5" in st.comparisons[0].note


def test_fleet_status_cli_lines_and_json(tmp_path):
    run = fleet_run(tmp_path / "run", 0.6, 24, 3.0, seed=1)
    p = run_cli("fleet", "status", str(run))
    assert p.returncode == 0, p.stderr
    assert "jemalloc-bg vs glibc: DECIDED — uses less memory" in p.stdout
    assert "recommended: jemalloc-bg" in p.stdout
    p = run_cli("fleet", "status", str(run), "--json")
    data = json.loads(p.stdout)
    assert data["recommended"] == "jemalloc-bg" and data["comparisons"][0]["outcome"] == "lower"
    p = run_cli("fleet", "status", str(run), "--look-every", "20d")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "--horizon" in p.stderr


def test_deploy_from_an_undecided_run_is_refused_in_one_line(tmp_path):
    run = fleet_run(tmp_path / "run", 1.0, 4, 1.0, seed=5)
    (tmp_path / "root/etc/systemd/system").mkdir(parents=True)
    p = run_cli(
        "fleet",
        "deploy",
        "--from-run",
        str(run),
        "--units",
        "tor@*",
        "--root",
        str(tmp_path / "root"),
        "--systemctl",
        "local",
    )
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert "undecided" in p.stderr and "--even-if-undecided" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "root/var").exists()


def test_deploy_from_a_run_whose_library_changed_is_refused(tmp_path, jemalloc):
    lib = tmp_path / "libjemalloc.so.2"
    lib.write_bytes(Path(jemalloc).read_bytes())
    run = fleet_run(tmp_path / "run", 0.6, 24, 3.0, seed=1, library=str(lib))
    lib.write_bytes(Path(jemalloc).read_bytes() + b"\0")
    (tmp_path / "root/etc/systemd/system").mkdir(parents=True)
    p = run_cli(
        "fleet",
        "deploy",
        "--from-run",
        str(run),
        "--units",
        "tor@*",
        "--root",
        str(tmp_path / "root"),
        "--systemctl",
        "local",
    )
    assert p.returncode == 2 and "not the library the run tested" in p.stderr, p.stderr


def test_a_fleet_runs_report_says_what_fleet_status_says(tmp_path):
    run = fleet_run(tmp_path / "run", 0.6, 24, 3.0, seed=1)
    p = run_cli("report", str(run))
    assert p.returncode == 0, p.stderr
    status = json.loads(run_cli("fleet", "status", str(run), "--json").stdout)
    section = json.loads((run / "summary.json").read_text())["sections"]["fleet-status"]
    assert section["recommended"] == status["recommended"] == "jemalloc-bg"
    assert section["comparisons"] == status["comparisons"]
    md = (run / "report.md").read_text()
    assert "## Decided?" in md and "jemalloc-bg vs glibc: DECIDED — uses less memory" in md


def test_the_docs_status_commands_run_as_written(tmp_path):
    """docs/how-to/decided-or-how-long.md's "Decided, or how long" block: its `fleet status` lines, verbatim, on a run at
    the path they name."""
    import re
    import shlex

    doc = (Path(__file__).parents[2] / "docs/how-to/decided-or-how-long.md").read_text()
    block = re.search(r"# Decided, or how long.*?```sh\n(.*?)```", doc, re.DOTALL).group(1)
    lines = [ln.split(" #")[0].strip() for ln in block.splitlines() if ln.startswith("alloclab fleet status")]
    assert len(lines) >= 2
    fleet_run(tmp_path / "runs/fleet", 0.85, 10, 2.0, seed=12)  # the example's run: 10 relays a group, day 2
    for line in lines:
        p = run_cli(*shlex.split(line)[1:], cwd=tmp_path)
        assert p.returncode == 0, (line, p.stderr)
        assert "jemalloc-bg" in p.stdout
    shown = re.search(r"# Decided, or how long.*?```text\n(.*?)```", doc, re.DOTALL).group(1)
    p = run_cli("fleet", "status", "runs/fleet", cwd=tmp_path)
    assert p.stdout == shown, "the example output is not what fleet status prints"


def test_deploy_from_a_file_that_is_no_status_is_refused_in_one_line(tmp_path):
    bad = tmp_path / "verdict.json"
    bad.write_text('{"recommended": "x"}')
    (tmp_path / "root/etc/systemd/system").mkdir(parents=True)
    p = run_cli(
        "fleet",
        "deploy",
        "--from-run",
        str(bad),
        "--units",
        "tor@*",
        "--root",
        str(tmp_path / "root"),
        "--systemctl",
        "local",
    )
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "fleet status RUN --json" in p.stderr, p.stderr


def test_a_gap_that_start_up_regrowth_is_still_closing_decides_nothing(tmp_path):
    """Same steady level, but glibc regrows after apply's restart over a day and jemalloc-bg within
    two hours: at the first looks jemalloc-bg is clearly higher, and the gap is closing."""
    run = fleet_run(tmp_path / "run", 1.0, 40, 1.0, seed=6, regrowth_h=(24.0, 2.0))
    loaded = decision.load_run(Store.open(run))
    look = loaded.levels_at(decision.LookPlan().every_s, 3600.0)
    comps = decision.stats.compare_to_baseline(look.levels, "glibc", alpha=decision.LookPlan().levels()[0])
    assert comps["jemalloc-bg"].status == "higher"  # what the level test alone would decide
    st = decision.status_at(loaded)
    (c,) = st.comparisons
    assert c.state == "undecided" and "still closing" in c.note
    assert "still closing" in decision.status_line(c, st.plan)
