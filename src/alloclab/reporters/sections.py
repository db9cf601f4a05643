"""Sections beside the core report (registered providers, reporters.input): the allocator-memory
decomposition (analysis.decomposition, laid out by reporters.decomposition) and the Tor test
network (read from the run's meta `tor_network`, which tornet records). Each is plain data;
markdown, HTML, PNG and JSON reporters render it their own way."""

from __future__ import annotations

import json

from ..analysis import Analysis
from ..common.outputs import TOR_NETWORK_DIR
from ..store import Store
from .decomposition import (
    INTRO,
    TABLE_HEADERS,
    decomposition_data,
    decomposition_paragraphs,
    decomposition_rows,
    draw_decomposition,
    figure,
)
from .input import Section, Table, register_section


@register_section
def decomposition(store: Store, analysis: Analysis) -> Section | None:
    d = analysis.decomposition
    if not d:
        return None
    return Section(
        key="decomposition",
        title="Why the memory is held",
        paragraphs=[INTRO] + decomposition_paragraphs(analysis),
        table=Table(TABLE_HEADERS, decomposition_rows(analysis)),
        figures=[figure(g) for g in d if g.times],
        pngs=[("decomposition.png", lambda path: draw_decomposition(analysis, path))]
        if any(g.times for g in d)
        else [],
        data={"groups": decomposition_data(analysis)},
    )


LOAD_HEADERS = ["group", "relays", "requests", "served (200)", "consensus diffs", "MB served", "by compression"]


def tor_summary(meta: dict[str, str], replicas: list[dict]) -> tuple[str, list[list[str]], dict] | None:
    """The report's "Tor test network" section as data: a paragraph on the network's milestones, the
    directory load each group's relays served (LOAD_HEADERS rows: medians over a group's relays) and
    the raw figures (from the run's meta `tor_network`); None for runs without the scenario."""
    if not meta.get("tor_network"):
        return None
    info = json.loads(meta["tor_network"])
    load = info.get("load", {})
    started = float(meta.get("started_at") or 0)
    routers = info.get("routers") or {}
    paragraph = (
        f"Private test network on loopback ({meta.get('network_namespace', 'namespace not recorded')}); "
        f"{info.get('relays_listed', 0)} relays listed in the authorities' last consensus"
        + (
            f" ({routers.get('routers', 0):,} of them descriptor-only routers filling the directory to "
            f"{info.get('consensus_bytes', 0) / 1e6:.1f} MB, {routers.get('accepted', 0):,} descriptors uploaded "
            f"in {routers.get('rounds', 0)} rounds)"
            if routers.get("routers")
            else ""
        )
        + (
            f"; every relay held a consensus {info['relays_ready_at'] - started:.0f} s after the start"
            if info.get("relays_ready_at") and started
            else "; not every relay fetched a consensus"
        )
        + ". "
        "Directory requests per relay (median over the group's relays); the network (keys, torrcs, logs) is in "
        f"`{TOR_NETWORK_DIR}/` and each relay's data directory in `replicas/NAME/work/data`."
    )
    by_group: dict[str, list[dict]] = {}
    for r in replicas:
        by_group.setdefault(r["group"], []).append(load.get(r["name"]) or {})
    med = lambda xs: sorted(xs)[len(xs) // 2] if xs else 0
    rows = []
    for g, counts in by_group.items():
        if not any(counts):
            rows.append([g, str(len(counts)), "– (DirCache 0: no DirPort, no load)", "–", "–", "–", "–"])
            continue
        enc: dict[str, int] = {}
        for c in counts:
            for k, v in (c.get("by_encoding") or {}).items():
                enc[k] = enc.get(k, 0) + v
        rows.append(
            [
                g,
                str(len(counts)),
                str(med([c.get("requests", 0) for c in counts])),
                str(med([c.get("served", 0) for c in counts])),
                str(med([c.get("diffs_served", 0) for c in counts])),
                f"{med([c.get('bytes', 0) for c in counts]) / 1e6:.1f}",
                ", ".join(f"{k} {v}" for k, v in sorted(enc.items())),
            ]
        )
    return paragraph, rows, info


@register_section
def tor_network(store: Store, analysis: Analysis) -> Section | None:
    got = tor_summary(store.meta(), store.replicas())
    if got is None:
        return None
    paragraph, rows, info = got
    return Section(
        key="tor-network", title="Tor test network", paragraphs=[paragraph], table=Table(LOAD_HEADERS, rows), data=info
    )


__all__ = ["decomposition", "tor_network"]
