"""A tick that overruns its interval skips ticks rather than bunching them, and the run says so:
a `ticks_skipped` event, the total in meta, and a ticks-skipped warning in the analysis."""

from __future__ import annotations

import time

from alloclab.analysis import analyse
from alloclab.experiment_file import parse_experiment
from alloclab.run.runner import Runner
from alloclab.store import Store
from tests.experiments import experiment_toml

EXPERIMENT = experiment_toml(
    "stall",
    ["sleep", "30"],
    {"glibc": "glibc"},
    replicas=2,
    interval="0.2s",
    baseline="glibc",
    phases={"warmup": "0.5s", "load": "3s", "idle": "0.5s"},
)


def test_a_stalled_tick_is_recorded_as_skipped_ticks(tmp_path):
    stalls = []

    def stall_once(runner, elapsed, phase):  # one tick takes 1.1 s: the 5 ticks due meanwhile are skipped
        if phase == "load" and not stalls:
            stalls.append(elapsed)
            time.sleep(1.1)

    exp = parse_experiment(EXPERIMENT, "stall.toml", tmp_path)
    result = Runner(exp, tmp_path / "run", on_tick=stall_once).run()
    store = Store.open(result.run_dir)
    skipped = int(store.meta()["ticks_skipped"])
    assert 5 <= skipped <= 7  # 1.1 s at 0.2 s; more only if the host stalled it further
    [event] = store.events(["ticks_skipped"])
    assert event["description"].startswith(f"{skipped} sampling ticks skipped")
    counts = {r["name"]: len(store.series(r["id"], ["t"])["t"]) for r in store.replicas()}
    warning = [w for w in analyse(store).warnings if w.kind == "ticks-skipped"]
    assert len(warning) == 1 and warning[0].severity == "caution" and warning[0].data["skipped"] == skipped
    ticks = 4.0 / 0.2  # the phases' 4 s at 0.2 s
    assert len(set(counts.values())) == 1, counts  # every tick taken samples every replica
    assert abs(next(iter(counts.values())) + skipped - (ticks + 1)) <= 2, (counts, skipped)
