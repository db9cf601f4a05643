"""`alloclab bundle RUN`: one .tar.gz an upstream maintainer can reproduce a finding from.

Inside, under one top directory: README.md (what was found, how to reproduce), experiment.toml
(the exact file the run used), provenance.json (every group's allocator: library path, sha256,
family, version, build provenance, env and command as configured; the host, kernel, glibc, CPU
and alloclab version), the report (report.md, report.html when written, summary.json/csv,
replicas.csv, charts/) — written first when the run has none — and the trace(s) the run replayed.
Not the process environment: only what the experiment file set. Members are plain files with
relative names (no links, no owners), so extracting is safe.
"""
from __future__ import annotations

import io
import json
import os
import tarfile
import tempfile
import time
from pathlib import Path

from .errors import StoreError, UserError
from .outputs import writable_file
from .store import DB_NAME, Store, damaged, resolve_run

REPORT_FILES = ("report.md", "report.html", "summary.json", "summary.csv", "replicas.csv")
# meta keys that identify this machine's run rather than describe it (nothing secret is in meta;
# these are simply of no use upstream)
META_LEFT_OUT = {"run_token", "runner", "experiment", "start_order"}
REPLAY_PROGRAM = "replay"


def _json(text: str | None):
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def replayed_traces(groups: list[dict]) -> list[Path]:
    """The trace files a run replayed: a group's command is the bundled replayer with the trace
    as its first argument (trace.replay_command)."""
    out: list[Path] = []
    for g in groups:
        cmd = _json(g.get("command_json")) or []
        if isinstance(cmd, list) and len(cmd) > 1 and Path(str(cmd[0])).name == REPLAY_PROGRAM:
            p = Path(str(cmd[1]))
            if p not in out:
                out.append(p)
    return out


def provenance(store: Store) -> dict:
    meta = store.typed_meta()
    groups = []
    for g in store.groups():
        groups.append({"name": g["name"], "baseline": bool(g["is_baseline"]), "allocator": g["allocator"],
                       "kind": g["kind"], "family": g["family"], "version": g["version"],
                       "library_path": g["library_path"], "library_sha256": g["library_sha256"],
                       "build": _json(g["provenance_json"]), "env": _json(g["env_json"]),
                       "command": _json(g["command_json"])})
    return {"run": {k: v for k, v in sorted(meta.items()) if k not in META_LEFT_OUT},
            "groups": groups}


def _readme(run_name: str, prov: dict, summary: dict | None, traces: list[tuple[Path, str | None]], top: str) -> str:
    run = prov["run"]
    lines = [f"# alloclab bundle: {run_name}", "",
             "Made by `alloclab bundle` so that an allocator's maintainers can see, check and reproduce a finding.", ""]
    if summary and summary.get("recommendation"):
        rec = summary["recommendation"]
        lines += ["## Finding", "", str(rec.get("text") or rec.get("summary") or json.dumps(rec, indent=1, default=str)), ""]
    if summary and summary.get("warnings"):
        lines += ["Warnings the analysis raised:", ""]
        lines += [f"- {w.get('severity')}: {w.get('kind')}: {w.get('message')}" for w in summary["warnings"]]
        lines.append("")
    lines += ["## Machine", "",
              f"- host {run.get('host', '?')}, kernel {run.get('kernel', '?')}, {run.get('os', '?')}",
              f"- {run.get('glibc', 'glibc ?')}, CPU {run.get('cpu', '?')} ({run.get('ncpu', '?')} cores), "
              f"memory {run.get('mem_total_kb', '?')} kB",
              f"- alloclab {run.get('alloclab_version', '?')}, Python {run.get('python', '?')}", "",
              "## Allocators", ""]
    for g in prov["groups"]:
        lines.append(f"- **{g['name']}**{' (baseline)' if g['baseline'] else ''}: {g['family'] or g['allocator']} "
                     f"{g['version'] or ''} — `{g['library_path'] or 'the program’s own'}`, sha256 "
                     f"`{g['library_sha256'] or '–'}`" + (f", env {json.dumps(g['env'])}" if g['env'] else ""))
    lines += ["", "Build details (sources, flags, catalog id) are in `provenance.json` under `groups[].build`.", "",
              "## Reproduce", "",
              "1. Install alloclab (its README: `scripts/install.sh`, or `pip install` of the package).",
              "2. Provide the same allocator builds: a catalog id in `experiment.toml` is built by "
              "`alloclab allocators build ID`; a library path must exist with the sha256 above "
              "(`sha256sum PATH`).",
              "3. `alloclab check experiment.toml`, then `alloclab run experiment.toml -o rerun`.",
              f"4. `alloclab report rerun`, then `tar xzf` this bundle and `alloclab compare {top} rerun`: the "
              f"extracted `{top}/` holds the original run's store (`run.db`), so it is a run that `compare` and "
              "`report` read.", ""]
    if traces:
        lines += ["## Trace", ""]
        for path, inside in traces:
            lines.append(f"- the run replayed `{path}`: " + (f"bundled as `{inside}`; point `[workload] trace` in "
                                                           f"experiment.toml at it" if inside else
                                                           "it no longer exists on the machine that made this bundle"))
        lines.append("")
    lines += ["## Files", "",
              "- `experiment.toml`: the exact experiment file of the run",
              "- `provenance.json`: the run's metadata (host, kernel, glibc, CPU, alloclab, phases, seed) and every group",
              "- `run.db`: the run's store (SQLite: every sample, event and replica), for `alloclab compare` and `report`",
              "- `report.md`, `report.html`, `summary.json`, `summary.csv`, `replicas.csv`, `charts/`: the report",
              "- `trace/`: the replayed trace(s), if any", ""]
    return "\n".join(lines)


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
    tar.addfile(info, io.BytesIO(data))


def _add_file(tar: tarfile.TarFile, name: str, path: Path) -> None:
    """A regular file's contents under `name` (a link is followed: its target's bytes, never the link)."""
    info = tarfile.TarInfo(name)
    st = path.stat()
    info.size, info.mode, info.mtime = st.st_size, 0o644, int(st.st_mtime)
    with open(path, "rb") as f:
        tar.addfile(info, f)


def default_output(run_dir: Path) -> Path:
    return run_dir.parent / f"{run_dir.name}-bundle.tar.gz"


def write_bundle(run: str | Path, output: Path | None = None) -> tuple[Path, list[str]]:
    """Write the bundle; returns its path and the member names."""
    try:
        store = Store.open_checked(run)
        meta, groups = store.meta(), store.groups()
    except StoreError as exc:
        raise damaged(resolve_run(run), str(exc)) from None
    if not groups:
        raise UserError(f"{run} has no groups: nothing to bundle", "give a run made by `alloclab run` or `alloclab import`")
    run_dir = store.run_dir
    out = Path(output) if output else default_output(run_dir)
    if out.exists():
        raise UserError(f"{out} already exists", "remove it or give another file with -o")
    if not out.parent.is_dir():
        raise UserError(f"cannot write {out}: {out.parent} is not a directory", "give -o a file in an existing directory")
    writable_file(out, "bundle")            # before the report below (seconds), not after it
    summary_path = run_dir / "summary.json"
    if not summary_path.exists() or not (run_dir / "report.md").exists():
        if not os.access(run_dir, os.W_OK):
            raise UserError(f"{run_dir} has no report yet and cannot be written to, so the bundle cannot include one",
                            f"run `alloclab report {run_dir}` as its owner (or bundle a writable copy of it)")
        store.close()
        from . import report
        report.write_report(run_dir)
        store = Store.open_checked(run_dir)
    prov = provenance(store)
    fd, db_copy = tempfile.mkstemp(prefix=".bundle-", suffix=".db", dir=out.parent)
    os.close(fd)
    try:
        store.copy_to(Path(db_copy))
    except BaseException:
        Path(db_copy).unlink(missing_ok=True)
        raise
    finally:
        store.close()
    summary = _json(summary_path.read_text()) if summary_path.exists() else None
    top = f"{run_dir.name}-bundle"
    names: list[str] = []
    traces = []
    fd, tmp = tempfile.mkstemp(prefix=".bundle-", suffix=".tar.gz", dir=out.parent)
    os.close(fd)
    try:
        with tarfile.open(tmp, "w:gz", format=tarfile.PAX_FORMAT) as tar:
            def add(name: str, data: bytes | None = None, path: Path | None = None) -> None:
                arc = f"{top}/{name}"
                _add_bytes(tar, arc, data) if data is not None else _add_file(tar, arc, path)
                names.append(arc)

            add("experiment.toml", (meta.get("experiment") or "").encode())
            add("provenance.json", json.dumps(prov, indent=2, default=str).encode())
            add(DB_NAME, path=Path(db_copy))      # the extracted directory is a run: `compare`, `report` read it
            for f in REPORT_FILES:
                if (run_dir / f).is_file():
                    add(f, path=run_dir / f)
            charts = run_dir / "charts"
            if charts.is_dir():
                for p in sorted(charts.iterdir()):
                    if p.is_file():
                        add(f"charts/{p.name}", path=p)
            for k, trace in enumerate(replayed_traces(groups)):
                if trace.is_file():
                    inside = f"trace/{k + 1}-{trace.name}"
                    add(inside, path=trace)
                    traces.append((trace, inside))
                else:
                    traces.append((trace, None))
            add("README.md", _readme(meta.get("name", run_dir.name), prov, summary, traces, top).encode())
        os.chmod(tmp, 0o644)                   # mkstemp makes it 0600; an archive to hand on is readable
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        Path(db_copy).unlink(missing_ok=True)
    return out, names
