"""How long the measured processes waited for a CPU over a span: the cpu-saturated warning's
evidence (docs/analysis.md). The store keeps, per replica and tick, cumulative seconds waited and
run (samples.cpu_wait_s, cpu_run_s) and where they came from (cpu_wait_source: "psi", the
replica cgroup's cpu.pressure "some" total and cpu.stat usage, or "schedstat", its processes'
threads summed). A replica's wait share over a span is Σ waited / (Σ waited + Σ run) over the
intervals between its ticks in the span; an interval whose counters fall (a thread or process
ended, so the sum lost its figures) or change source is skipped, not guessed."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..store import Store

COLUMNS = ("cpu_wait_s", "cpu_run_s")


@dataclass
class CpuWait:
    replica: str
    group: str
    waited_s: float
    ran_s: float
    sources: tuple[str, ...]            # "psi" / "schedstat", those the intervals used

    @property
    def share(self) -> float:
        """Of the time the replica's processes were runnable, the share they waited for a CPU."""
        total = self.waited_s + self.ran_s
        return self.waited_s / total if total > 0 else 0.0


def recorded(store: Store) -> bool:
    """Whether the store holds any CPU wait figure (runs from schema 8 on, and their exports)."""
    return "cpu_wait_s" in store.sample_columns_with_values(["cpu_wait_s"])


def span_waits(store: Store, replicas: list[dict], start: float, end: float) -> list[CpuWait]:
    """Each replica's wait over [start, end] (replicas rows with `group`); replicas with no
    interval there are left out."""
    out = []
    for r in replicas:
        s = store.series_arrays(r["id"], COLUMNS, not_null="cpu_wait_s")
        inside = (s["t"] >= start) & (s["t"] <= end)
        wait, run = s["cpu_wait_s"][inside], s["cpu_run_s"][inside]
        if len(wait) < 2:
            continue
        dw, dr = np.diff(wait), np.diff(run)
        good = (dw >= 0) & (dr >= 0)                 # NaN compares False: skipped too
        if not good.any():
            continue
        sources = tuple(x.strip() for x in (r.get("cpu_wait_source") or "unrecorded").split(","))
        out.append(CpuWait(r["name"], r["group"], float(dw[good].sum()), float(dr[good].sum()), sources))
    return out


def group_medians(waits: list[CpuWait]) -> dict[str, float]:
    """group -> median wait share over its replicas."""
    groups: dict[str, list[float]] = {}
    for w in waits:
        groups.setdefault(w.group, []).append(w.share)
    return {g: float(np.median(v)) for g, v in sorted(groups.items())}


def source_words(waits: list[CpuWait]) -> str:
    """Which evidence the figures rest on, in plain words."""
    found = sorted({s for w in waits for s in w.sources})
    words = {"psi": "their cgroups' CPU pressure (PSI)", "schedstat": "their threads' run-queue wait (schedstat)",
             "unrecorded": "their recorded CPU wait (source not recorded)"}
    return " and ".join(words.get(s, s) for s in found)
