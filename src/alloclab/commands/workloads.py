"""`alloclab workloads`: the built-in workload models and their parameters."""
from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..workloads import describe


def list_command(console: Console) -> None:
    t = Table("name", "what it models", "parameters (defaults)")
    for row in describe():
        t.add_row(*row)
    t.add_row(escape('[scenario] name = "tor-network"'), "real tor relays (the replicas) on a private Tor test network on loopback, "
              "in a loopback-only network namespace, with directory load (docs/tor-network.md)",
              "tor=tor, authorities=3, voting_interval=20s, consensus_timeout=4m, load_rate=4, torrc=[], "
              "routers=0, router_churn=0.1, variant=dircache, num_cpus=0, traffic=0")
    console.print(t)
