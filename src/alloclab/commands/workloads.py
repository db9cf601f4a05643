"""`alloclab workloads`: the built-in workload models and their parameters."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..run.workloads import MODELS, describe
from .conventions import emit_json

TOR_NETWORK = (
    '[scenario] name = "tor-network"',
    "real tor relays (the replicas) on a private Tor test network on loopback, "
    "in a loopback-only network namespace, with directory load (docs/how-to/tor-network.md)",
    "tor=tor, authorities=3, voting_interval=20s, consensus_timeout=4m, load_rate=4, torrc=[], "
    "routers=0, router_churn=0.1, variant=dircache, num_cpus=0, traffic=0",
)


def list_command(console: Console, as_json: bool = False) -> None:
    rows = [*describe(), TOR_NETWORK]
    if as_json:  # the built-in models' defaults as numbers too (the scenario's are its own keys)
        emit_json(
            [
                {
                    "name": name,
                    "models": what,
                    "parameters": params,
                    "defaults": MODELS[name].defaults if name in MODELS else None,
                }
                for name, what, params in rows
            ]
        )
        return
    t = Table("name", "what it models", "parameters (defaults)")
    for name, what, params in rows:
        t.add_row(escape(name), what, params)
    console.print(t)
