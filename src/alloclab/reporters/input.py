"""The one structured input every reporter takes: the analysis plus what the store says about the
run (metadata, groups and their allocator builds' provenance, replicas, events, the experiment
file), read once. Reporters never open the store or analyse again."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..analysis import Analysis
from ..store import Store
from .tables import summary_rows

# store meta keys that are not host or run facts shown in the metadata table
_BULKY_META = ("experiment", "start_order", "runner", "run_token", "command_line")
HOST_KEYS = ("host", "kernel", "os", "glibc", "cpu", "ncpu", "mem_total_kb", "python", "alloclab_version")


@dataclass
class GroupRecord:
    """A group as the store recorded it: what was asked for, what was loaded, where it came from."""

    name: str
    asked_for: str  # the experiment's allocator string
    kind: str | None  # preload, glibc, embedded ...
    family: str | None  # what the library reports itself as
    version: str | None
    library_path: str | None
    library_sha256: str | None
    env: dict
    command: list | None
    is_baseline: bool
    provenance: dict | None  # the catalog build's record (source, checksums, build flags), when built by alloclab
    hardening: dict | None = None  # heap-hardening features measured for the group (alloclab.allocators.hardening)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]


@dataclass
class Section:
    """An extra part of the report another module contributes (a sweep's Pareto chart, an
    allocator-memory decomposition ...). Plain data: each reporter renders it its own way and
    escapes it (text is never trusted as markup)."""

    key: str  # anchor / file stem: [a-z0-9-]
    title: str
    paragraphs: list[str] = field(default_factory=list)  # plain text (markdown may use **bold**)
    table: Table | None = None
    figures: list[dict] = field(default_factory=list)  # plotly figure specs {"data": [...], "layout": {...}} (HTML)
    pngs: list[tuple[str, Callable[[Path], None]]] = field(default_factory=list)  # (file name, draw(path)) for charts/
    data: dict = field(default_factory=dict)  # machine-readable figures, written into summary.json under sections


# Modules that contribute sections register a provider here: called once per report with the open
# store (read through its API) and the analysis; returns sections (or none).
SectionProvider = Callable[[Store, Analysis], "list[Section] | Section | None"]
SECTION_PROVIDERS: list[SectionProvider] = []


def register_section(provider: SectionProvider) -> SectionProvider:
    """Add a section provider to every report (usable as a decorator)."""
    if provider not in SECTION_PROVIDERS:
        SECTION_PROVIDERS.append(provider)
    return provider


@dataclass
class ReportInput:
    analysis: Analysis
    run_dir: Path
    run_name: str
    meta: dict[str, str]  # the store's meta table, without the experiment text and bulky lists
    host: dict[str, str]  # the host metadata (HOST_KEYS present in meta)
    experiment_text: str | None  # the experiment file exactly as given (None: imported data)
    groups: list[GroupRecord]
    replicas: list[dict]  # store replica rows (verify_detail, end_kind, exit_code ...)
    events: list[dict]  # events other than start/end bookkeeping, in time order
    rows: list[dict]  # summary_rows(analysis): one per group, the summary table's figures
    sections: list[Section] = field(default_factory=list)

    @property
    def phases(self) -> dict:
        text = self.meta.get("phases", "")
        return json.loads(text) if text.startswith("{") else {}

    def group(self, name: str) -> GroupRecord | None:
        return next((g for g in self.groups if g.name == name), None)


def _json_or(text: str | None, default):
    if not text:
        return default
    try:
        return json.loads(text)
    except ValueError:
        return default


def build_input(store: Store, analysis: Analysis, sections: list[Section] | None = None) -> ReportInput:
    """Read everything the reporters need from the store, once."""
    meta = store.meta()
    groups = [
        GroupRecord(
            name=g["name"],
            asked_for=g["allocator"],
            kind=g["kind"],
            family=g["family"],
            version=g["version"],
            library_path=g["library_path"],
            library_sha256=g["library_sha256"],
            env=_json_or(g["env_json"], {}),
            command=_json_or(g["command_json"], None),
            is_baseline=g["name"] == analysis.baseline,
            provenance=_json_or(g.get("provenance_json"), None),
            hardening=_json_or(g.get("hardening_json"), None),
        )
        for g in store.groups()
    ]
    extra = list(sections or [])
    for provider in SECTION_PROVIDERS:
        got = provider(store, analysis)
        extra += [got] if isinstance(got, Section) else list(got or [])
    return ReportInput(
        analysis=analysis,
        run_dir=store.run_dir,
        run_name=meta.get("name", store.run_dir.name),
        meta={k: v for k, v in meta.items() if k not in _BULKY_META},
        host={k: meta[k] for k in HOST_KEYS if k in meta},
        experiment_text=meta.get("experiment"),
        groups=groups,
        replicas=store.replicas(),
        events=store.events(exclude=("start", "end", "replica_end")),
        rows=summary_rows(analysis),
        sections=extra,
    )
