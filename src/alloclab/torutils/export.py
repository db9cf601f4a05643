"""`alloclab export --csv`: a run written in the TorUtils layout (memory.csv, events.csv,
diagnostics.csv, experiment.json)."""

from __future__ import annotations

import csv
import io
import json
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from ..common.errors import UserError
from ..common.outputs import writable_directory, write_output
from ..common.timefmt import utc_iso
from ..store import Store
from .layout import (
    _GROUP_FIELDS,
    _PROCESS_FIELDS,
    _REPLICA_FIELDS,
    DIAG_COLUMNS,
    DIAG_EXTRA_COLUMNS,
    EVENT_COLUMNS,
    EVENT_EXTRA_COLUMNS,
    EXPORT_FORMAT,
    EXPORTED_META,
    EXTRA_COLUMNS,
    MEMORY_COLUMNS,
)

# ---- export -------------------------------------------------------------------------------------


def _cell(v: object) -> object:
    return "" if v is None else v


EXPORTED_FILES = ("memory.csv", "events.csv", "diagnostics.csv", "experiment.json")
EXPORT_DESCRIPTION = "exported by alloclab"  # how experiment.json says an export wrote the files beside it


def _refuse_foreign_files(out_dir: Path) -> None:
    """The CSVs of a directory alloclab did not export into (a TorUtils experiment's own memory.csv,
    say) are recorded data: never overwritten. An earlier export's are (its experiment.json says so)."""
    present = [name for name in EXPORTED_FILES if (out_dir / name).exists()]
    if not present:
        return
    try:
        ours = (
            json.loads((out_dir / "experiment.json").read_text()).get("description", "").startswith(EXPORT_DESCRIPTION)
        )
    except (OSError, ValueError, AttributeError):
        ours = False
    if not ours:
        raise UserError(
            f"{out_dir} already holds {', '.join(present)} that alloclab did not export",
            "give --csv a new or empty directory (those files are kept)",
        )


@contextmanager
def _csv_output(out_dir: Path, name: str):
    """A CSV written whole when the block ends, through outputs.write_output: a link planted in
    the export directory is replaced, never written through (docs/reference/security.md)."""
    buffer = io.StringIO(newline="")
    yield buffer
    write_output(out_dir, name, buffer.getvalue())


def export_csv(run: str | Path, out_dir: Path) -> list[Path]:
    if out_dir.is_dir():
        _refuse_foreign_files(out_dir)
    writable_directory(out_dir, "CSV directory", "--csv")
    store = Store.open_checked(run)
    meta = store.meta()
    host = meta.get("host", "")
    rows = store.samples_by_time()
    memory = out_dir / "memory.csv"
    with _csv_output(out_dir, "memory.csv") as f:
        w = csv.writer(f)
        w.writerow(MEMORY_COLUMNS + EXTRA_COLUMNS)
        by_time: dict[float, list] = {}
        for r in rows:
            by_time.setdefault(r["t"], []).append(r)
        totals: dict[float, tuple[int, int | None]] = {}  # time -> (replica samples, summed RSS): diagnostics
        for t, batch in by_time.items():
            rss = [r["rss_kb"] for r in batch if r["rss_kb"] is not None]
            totals[t] = (len(batch), sum(rss) if rss else None)
            if rss:
                w.writerow(
                    [
                        utc_iso(t),
                        host,
                        "aggregate",
                        "",
                        "",
                        "",
                        "",
                        "",
                        "",
                        "",
                        len(rss),
                        sum(rss),
                        sum(rss) // len(rss),
                        min(rss),
                        max(rss),
                    ]
                    + [""] * len(EXTRA_COLUMNS)
                )
            for r in batch:
                vms = r["vmsize_kb"]
                frag = f"{vms / r['rss_kb']:.2f}" if vms and r["rss_kb"] else ""
                w.writerow(
                    [
                        utc_iso(t),
                        host,
                        "relay",
                        "",
                        r["replica"],
                        r["grp"],
                        _cell(r["rss_kb"]),
                        _cell(vms),
                        _cell(r["hwm_kb"]),
                        frag,
                        "",
                        "",
                        "",
                        "",
                        "",
                    ]
                    + [_cell(r[c]) for c in EXTRA_COLUMNS[:-1]]
                    + [repr(t)]
                )
    events = out_dir / "events.csv"
    with _csv_output(out_dir, "events.csv") as f:
        w = csv.writer(f)
        w.writerow(EVENT_COLUMNS + EVENT_EXTRA_COLUMNS)
        for e in store.events_with_names():
            w.writerow([utc_iso(e["t"]), e["kind"], _cell(e["description"]), e["g"], _cell(e["replica"]), repr(e["t"])])
    diagnostics = out_dir / "diagnostics.csv"
    groups = store.groups()
    allocators = "; ".join(f"{g['name']}={g['family'] or g['allocator']} {g['version'] or ''}".strip() for g in groups)
    with _csv_output(out_dir, "diagnostics.csv") as f:
        w = csv.writer(f)
        w.writerow(DIAG_COLUMNS + DIAG_EXTRA_COLUMNS)
        for h in store.host_samples():
            d = datetime.fromtimestamp(h["t"], UTC)
            count, total = totals.get(h["t"], (0, 0))
            mb = lambda kb: "" if kb is None else kb // 1024
            w.writerow(
                [
                    d.strftime("%Y-%m-%d"),
                    d.strftime("%H:%M:%S"),
                    host,
                    "",
                    meta.get("os", ""),
                    meta.get("kernel", ""),
                    allocators,
                    mb(h["mem_total_kb"]),
                    "",
                    mb(h["mem_available_kb"]),
                    "",
                    mb(h["swap_total_kb"]),
                    mb(h["swap_free_kb"]),
                    "",
                    "",
                    "",
                    count,
                    mb(total or 0),
                    mb((total or 0) // count) if count else "",
                ]
                + [repr(h["t"])]
                + [_cell(h[c]) for c in DIAG_EXTRA_COLUMNS[1:]]
            )
    experiment = out_dir / "experiment.json"
    section = {
        "format": EXPORT_FORMAT,
        "meta": {k: v for k, v in meta.items() if k in EXPORTED_META},
        "groups": [{k: g.get(k) for k in _GROUP_FIELDS} for g in groups],
        "replicas": [
            {"group": r["group"], **{k: r.get(k) for k in _REPLICA_FIELDS}}
            for r in sorted(store.replicas(), key=lambda r: r["id"])
        ],
        "processes": [{"replica": p["replica"], **{k: p[k] for k in _PROCESS_FIELDS}} for p in store.processes()],
        "verifications": store.verification_history(),
    }
    doc = {
        "id": Path(store.run_dir).name,
        "name": meta.get("name", ""),
        "description": f'{EXPORT_DESCRIPTION}: the TorUtils groups below, and under "alloclab" what an import '
        "needs to reproduce the run's analysis",
        "groups": {
            g["name"]: {
                "name": g["name"],
                "config": {"allocator": g["family"] or g["allocator"], "version": g["version"]},
            }
            for g in groups
        },
        "alloclab": section,
    }
    write_output(out_dir, "experiment.json", json.dumps(doc, indent=1, allow_nan=False) + "\n")
    store.close()
    return [memory, events, diagnostics, experiment]
