"""The Ansible route end to end on 2 and 3 simulated hosts: how long each playbook takes, and what
the hosts' collectors measured per group.

    python benchmarks/fleet_ansible.py [--hosts 2 3] [--units 4] [--collect 60]

Each host is what tests/integration/ansible_fleet.py makes: a network namespace with Debian's sshd,
a private mount namespace, a `systemd --user` with real tor relays (`tor@NAME`, User=debian-tor,
ProtectHome=yes, DisableNetwork 1). Groups: glibc, jemalloc@5.3.0 (its .deb), the same with
MALLOC_CONF=background_thread:true, Debian's mimalloc. The script runs `alloclab.fleet.experiment`
(install, facts, one plan, apply, collectors every second), lets the collectors run `--collect`
seconds, runs `alloclab.fleet.report` with alloclab_merge=false (fetches every host's run store),
then `alloclab.fleet.rollback`. Per group it prints the median of the units' median RSS over the
second half of the window and the ratio to glibc, per host and pooled over the hosts. Prints one
JSON object. Everything it starts is removed at the end (also on failure).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from alloclab.native import build
from alloclab.store import Store
from tests.integration.ansible_fleet import fleet, write_inventory

JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
MIMALLOC = "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2"


def one(hosts: int, units: int, collect: float) -> dict:
    import subprocess

    counts = {f"h{i}": units for i in range(1, hosts + 1)}
    with fleet(counts, build.build_dir(), JEMALLOC) as f:
        groups = f.base / "relays.toml"
        groups.write_text(
            'name = "relays"\n[[group]]\nname = "glibc"\nallocator = "glibc"\n'
            '[[group]]\nname = "jemalloc"\nallocator = "jemalloc@5.3.0"\n'
            '[[group]]\nname = "jemalloc-bg"\nallocator = "jemalloc@5.3.0"\n'
            'env = { MALLOC_CONF = "background_thread:true" }\n'
            f'[[group]]\nname = "mimalloc"\nallocator = "{MIMALLOC}"\n'
        )
        debs = f.base / "debs"
        subprocess.run(
            [str(Path(sys.executable).parent / "alloclab"), "allocators", "package", "jemalloc@5.3.0", "-o", str(debs)],
            check=True,
            capture_output=True,
            env=f.env,
        )
        write_inventory(
            f,
            {
                "alloclab_groups_file": str(groups),
                "alloclab_seed": 1,
                "alloclab_batch": "2",
                "alloclab_debs": [str(next(debs.glob("*.deb")))],
                "alloclab_collect_interval": "1s",
                "alloclab_listen": "9464",
                "alloclab_merge": False,
            },
        )
        timings = {}
        for name, extra in (("experiment", ()), ("collect", None), ("report", ()), ("rollback", ())):
            started = time.monotonic()
            if extra is None:
                time.sleep(collect)
            else:
                run = f.playbook(name, *extra, timeout=900)
                if run.returncode != 0:
                    raise SystemExit(f"{name} failed:\n{run.stdout[-3000:]}")
            timings[name] = round(time.monotonic() - started, 1)
        per_host, pooled = {}, {}
        for host in counts:
            store = Store.open(f.controller / "runs" / host)
            medians: dict[str, list[float]] = {}
            for r in store.replicas():
                rss = [v for v in store.series(r["id"], ["rss_kb"])["rss_kb"] if v]
                if rss:
                    medians.setdefault(r["group"], []).append(statistics.median(rss[len(rss) // 2 :]))
            store.close()
            per_host[host] = {g: round(statistics.median(v) / 1024, 2) for g, v in sorted(medians.items())}
            for g, v in medians.items():
                pooled.setdefault(g, []).extend(v)
        pooled_mb = {g: round(statistics.median(v) / 1024, 2) for g, v in sorted(pooled.items())}
        ratio = {g: round(v / pooled_mb["glibc"], 3) for g, v in pooled_mb.items()}
        return {
            "hosts": hosts,
            "units_per_host": units,
            "seconds": timings,
            "median_rss_mb_per_host": per_host,
            "median_rss_mb_pooled": pooled_mb,
            "ratio_to_glibc_pooled": ratio,
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, nargs="+", default=[2, 3])
    ap.add_argument("--units", type=int, default=4)
    ap.add_argument("--collect", type=float, default=60.0)
    args = ap.parse_args()
    print(json.dumps([one(n, args.units, args.collect) for n in args.hosts], indent=2))


if __name__ == "__main__":
    main()
