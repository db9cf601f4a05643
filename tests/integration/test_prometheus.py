"""A real Prometheus (Debian's package) scrapes two alloclab collectors, each a "host" with its own
units (real processes under real allocators); `alloclab import prometheus` reads the range back
from Prometheus' HTTP API into a run whose figures must lie within the collectors' own stored values
of the ticks its step's scrapes served (each point is the mean of its step's scrapes; each scrape
names its tick in alloclab_last_sample_timestamp_seconds), and whose report names the host confound."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from alloclab.store import Store
from tests.conftest import run_cli

pytestmark = [
    pytest.mark.prometheus,  # a real Prometheus server
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus missing: run scripts/install.sh --test"),
]

SCRAPE = 1.0  # seconds
TICK = 0.5  # the collectors' interval


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_host(
    base: Path, name: str, groups_toml: str, n_units: int, native_dir: Path, command=None
) -> tuple[Path, Path]:
    """A host: --root with N relay@ units (default: the sawtooth stressor; `command(i)`: unit i's ExecStart)."""
    root = base / name / "root"
    unit_dir = root / "etc" / "systemd" / "system"
    unit_dir.mkdir(parents=True)
    for i in range(n_units):
        exec_start = (
            command(i)
            if command
            else f"{native_dir / 'stressors'} --pattern sawtooth --load 3600 --period 2 --mb {3 + i}"
        )
        (unit_dir / f"relay@{name}{i}.service").write_text(f"[Service]\nExecStart={exec_start}\n")
    (base / name / "groups.toml").write_text(groups_toml)
    plan = base / name / "plan.json"
    p = run_cli(
        "fleet",
        "plan",
        "--units",
        "relay@*",
        "--groups",
        str(base / name / "groups.toml"),
        "-o",
        str(plan),
        "--root",
        str(root),
        "--systemctl",
        "local",
    )
    assert p.returncode == 0, p.stderr
    p = run_cli("fleet", "apply", str(plan), "--batch", str(n_units), "--root", str(root), "--systemctl", "local")
    assert p.returncode == 0, p.stderr
    return root, plan


def start_prometheus(
    tmp_path: Path, ports, scrape: float = SCRAPE, rules: Path | None = None
) -> tuple[subprocess.Popen, str]:
    """Debian's Prometheus on a free loopback port, scraping 127.0.0.1:PORT for each port (with
    `rules`, evaluating that rule file at every scrape interval)."""
    prom_port = free_port()
    targets = ", ".join(f"'127.0.0.1:{p}'" for p in ports)
    (tmp_path / "prometheus.yml").write_text(
        f"global:\n  scrape_interval: {scrape:g}s\n  scrape_timeout: {scrape:g}s\n"
        + (f"  evaluation_interval: {scrape:g}s\nrule_files: ['{rules}']\n" if rules else "")
        + f"scrape_configs:\n  - job_name: alloclab\n    static_configs:\n      - targets: [{targets}]\n"
    )
    prom = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return prom, f"http://127.0.0.1:{prom_port}"


def query(url: str, promql: str) -> list:
    with urllib.request.urlopen(url + "/api/v1/query?" + urllib.parse.urlencode({"query": promql}), timeout=5) as r:
        return json.loads(r.read())["data"]["result"]


@pytest.fixture
def hosts(tmp_path, native_dir, jemalloc):
    both = (
        f'name = "relays"\ncommand = ["/bin/true"]\n[[group]]\nname = "glibc"\nallocator = "glibc"\n'
        f'[[group]]\nname = "jemalloc"\nallocator = "{jemalloc}"\n'
    )
    only_jemalloc = (
        f'name = "relays"\ncommand = ["/bin/true"]\n[[group]]\nname = "jemalloc"\nallocator = "{jemalloc}"\n'
    )
    made = {
        "h1": make_host(tmp_path, "h1", both, 4, native_dir),  # 2 glibc + 2 jemalloc
        "h2": make_host(tmp_path, "h2", only_jemalloc, 2, native_dir),
    }  # jemalloc only: unevenly spread
    yield made
    stop_units(made)


def stop_collectors(collectors) -> None:
    """SIGTERM: each collector ends its run (end reason written) and exits 0."""
    for c in collectors:
        c.send_signal(signal.SIGTERM)
    for c in collectors:
        c.wait(timeout=30)
    assert all(c.returncode == 0 for c in collectors), [c.stderr.read() for c in collectors]


def stop_servers(collectors, prom: subprocess.Popen) -> None:
    """Kill the collectors still running and stop Prometheus (test cleanup)."""
    for c in collectors:
        if c.poll() is None:
            c.kill()
            c.wait()
    prom.terminate()
    prom.wait(timeout=30)


def stop_units(made: dict) -> None:
    """Kill every unit the local stand-in started under each host's --root (fixture teardown)."""
    for root, _ in made.values():
        for pidfile in (root / "run" / "alloclab-units").glob("*.pid"):
            try:
                os.killpg(int(pidfile.read_text().split()[0]), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass


def test_prometheus_scrapes_two_collectors_and_the_import_matches_their_stores(tmp_path, hosts):
    ports = {h: free_port() for h in hosts}
    collectors = {}
    for h, (root, plan) in hosts.items():
        collectors[h] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "alloclab",
                "fleet",
                "collect",
                "--plan",
                str(plan),
                "-o",
                str(tmp_path / h / "run"),
                "--interval",
                f"{TICK}s",
                "--root",
                str(root),
                "--systemctl",
                "local",
                "--listen",
                f"127.0.0.1:{ports[h]}",
                "--host",
                h,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
    prom, url = start_prometheus(tmp_path, ports.values())
    try:
        deadline = time.time() + 40
        start = None
        while time.time() < deadline:
            try:
                up = query(url, "count_over_time(alloclab_last_sample_timestamp_seconds[1m])")
            except OSError:
                up = []
            if len(up) == 2 and start is None:
                start = time.time()
            if start and min(float(r["value"][1]) for r in up) >= 10:
                break
            time.sleep(0.5)
        else:
            pytest.fail("Prometheus did not scrape both collectors 10 times in 40 s")
        end = time.time()
        stop_collectors(collectors.values())
        out = tmp_path / "imported"
        p = run_cli(
            "import",
            "prometheus",
            url,
            "--from",
            f"{start:.3f}",
            "--to",
            f"{end:.3f}",
            "--step",
            f"{SCRAPE:g}s",
            "-o",
            str(out),
        )
        assert p.returncode == 0, p.stderr
        # what each scrape served: the tick its figures are from (host -> [(scrape time, tick time)])
        served = {
            r["metric"]["host"]: [(float(ts), float(v)) for ts, v in r["values"]]
            for r in query(url, f"alloclab_last_sample_timestamp_seconds[{int(time.time() - start) + 60}s]")
        }
    finally:
        stop_servers(collectors.values(), prom)

    imported = Store.open(out)
    reps = imported.replicas()
    assert sorted(r["host"] for r in reps) == ["h1"] * 4 + ["h2"] * 2
    assert {r["group"] for r in reps if r["host"] == "h2"} == {"jemalloc"}
    own = {h: Store.open(tmp_path / h / "run") for h in hosts}
    checked = 0
    group_means: dict[str, list[tuple[float, float]]] = {}
    for r in reps:
        host, unit = r["name"].split("/")
        store = own[host]
        rid = next(x["id"] for x in store.replicas() if x["name"] == unit)
        assert next(x["host"] for x in store.replicas() if x["name"] == unit) == host
        mine = store.series(rid, ["rss_kb", "pss_kb"])
        theirs = imported.series(r["id"], ["rss_kb", "pss_kb"])
        assert len(theirs["t"]) >= 8
        for t, rss, pss in zip(theirs["t"], theirs["rss_kb"], theirs["pss_kb"]):
            # the point at t is the mean of the scrapes within the step before it, each serving the
            # collector's latest tick (its alloclab_last_sample_timestamp_seconds): it lies within
            # the values the collector stored at those ticks, however late load made a scrape or a tick
            ticks = [tick for ts, tick in served[host] if t - SCRAPE - 1e-3 <= ts <= t + 1e-3]
            assert ticks, (r["name"], t, served[host])
            near = [
                (a, b)
                for ts, a, b in zip(mine["t"], mine["rss_kb"], mine["pss_kb"])
                if min(ticks) - 1e-3 <= ts <= max(ticks) + 1e-3
            ]
            assert min(a for a, _ in near) <= rss <= max(a for a, _ in near), (r["name"], t, rss, near)
            pss_near = [b for _, b in near if b is not None]
            if pss is not None:
                assert min(pss_near) <= pss <= max(pss_near), (r["name"], t, pss, near)
            checked += 1
        window = [v for ts, v in zip(mine["t"], mine["rss_kb"]) if theirs["t"][0] - SCRAPE <= ts <= theirs["t"][-1]]
        group_means.setdefault(r["group"], []).append(
            (sum(theirs["rss_kb"]) / len(theirs["rss_kb"]), sum(window) / len(window))
        )
    assert checked >= 6 * 8
    for g, pairs in group_means.items():  # per-group figure: mean RSS over the range, import vs stores
        imp, rec = sum(p[0] for p in pairs) / len(pairs), sum(p[1] for p in pairs) / len(pairs)
        assert abs(imp - rec) / rec < 0.1, (g, imp, rec)
    rep = run_cli("report", str(out))
    assert rep.returncode == 0, rep.stderr
    summary = json.loads((out / "summary.json").read_text())
    kinds = {w["kind"]: w for w in summary["warnings"]}
    assert "hosts-unbalanced" in kinds and kinds["hosts-unbalanced"]["groups"] == ["glibc"]
    assert kinds["hosts-unbalanced"]["data"]["replicas_per_host"]["glibc"] == {"h1": 2, "h2": 0}
    assert {g["group"] for g in summary["groups"]} == {"glibc", "jemalloc"}
    for s in own.values():
        s.close()
