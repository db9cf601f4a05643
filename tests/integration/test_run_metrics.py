"""`alloclab run --metrics`: the exposition of a real run."""

from __future__ import annotations

import urllib.request

from alloclab.store import Store
from tests.experiments import frag, write_experiment
from tests.waiting import wait_for


def test_run_serves_each_committed_tick(tmp_path, native_dir, jemalloc):
    """`alloclab run --metrics`: a scrape during a real run shows, for every replica, exactly the
    row the store holds at the scrape's tick."""
    import socket
    import subprocess
    import sys

    from prometheus_client.parser import text_string_to_metric_families

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exp = write_experiment(
        tmp_path / "m.toml",
        "m",
        frag(native_dir, mb=4),
        {"glibc": "glibc", "jemalloc": jemalloc},
        replicas=2,
        interval="0.5s",
        phases={"warmup": "0.5s", "load": "6s"},
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "alloclab",
            "run",
            str(exp),
            "-o",
            str(tmp_path / "run"),
            "--no-report",
            "--metrics",
            f"127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )

    def scrape() -> str:
        try:
            return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
        except OSError:
            return ""

    try:
        text = wait_for(
            lambda: "alloclab_unit_memory_bytes{" in (t := scrape()) and t,
            30,
            "a scrape with every unit's memory",
            interval=0.3,
        )
    finally:
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
    samples = [s for fam in text_string_to_metric_families(text) for s in fam.samples]
    t = next(s.value for s in samples if s.name == "alloclab_last_sample_timestamp_seconds")
    rss = {
        s.labels["unit"]: s.value
        for s in samples
        if s.name == "alloclab_unit_memory_bytes" and s.labels["memtype"] == "resident"
    }
    assert len(rss) == 4 and {s.labels["group"] for s in samples if "group" in s.labels} == {"glibc", "jemalloc"}
    store = Store.open(tmp_path / "run")
    for r in store.replicas():
        row = store.series(r["id"], ["rss_kb"])
        at = row["t"].index(t)
        assert rss[r["name"]] == row["rss_kb"][at] * 1024
