"""`alloclab bundle RUN`: one .tar.gz an upstream maintainer can reproduce a finding from.

Inside, under one top directory: README.md (what was found, how to reproduce), experiment.toml
(the exact file the run used), provenance.json (every group's allocator: library path, sha256,
family, version, build provenance, env and command as configured; the host, kernel, glibc, CPU
and alloclab version), the report (report.md, report.html when written, summary.json/csv,
replicas.csv, charts/) — written first when the run has none — and the trace(s) the run replayed
when the user names them (`--trace FILE`). Not the process environment: only what the experiment
file set. Members are plain files with relative names (no links, no owners), so extracting is safe.

Only files alloclab wrote go in (docs/reference/security.md, "Run directories, bundles and
servers"): the report's own names, read
relative to the run directory without following a link (common.rootfs.Root) and refused when a
link or a file with another hard link stands there; never a path the store names — a store may
come from another host (`merge`), so `groups.command_json` naming /etc/shadow as "the trace" must
not make root archive it. The archive is mode 0640: it holds the run's store.
"""

from __future__ import annotations

import io
import json
import os
import stat
import tarfile
import tempfile
import time
from pathlib import Path

from ..common.errors import StoreError, UserError
from ..common.outputs import writable_file
from ..common.rootfs import Root
from ..store import DB_NAME, Store, damaged, resolve_run

REPORT_FILES = ("report.md", "report.html", "summary.json", "summary.csv", "replicas.csv")
# meta keys that identify this machine's run rather than describe it (nothing secret is in meta;
# these are simply of no use upstream)
META_LEFT_OUT = {"run_token", "runner", "experiment", "start_order"}
REPLAY_PROGRAM = "replay"
BUNDLE_MODE = 0o640  # owner and group: the archive carries the run's store


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
        groups.append(
            {
                "name": g["name"],
                "baseline": bool(g["is_baseline"]),
                "allocator": g["allocator"],
                "kind": g["kind"],
                "family": g["family"],
                "version": g["version"],
                "library_path": g["library_path"],
                "library_sha256": g["library_sha256"],
                "build": _json(g["provenance_json"]),
                "env": _json(g["env_json"]),
                "command": _json(g["command_json"]),
            }
        )
    return {"run": {k: v for k, v in sorted(meta.items()) if k not in META_LEFT_OUT}, "groups": groups}


def _readme(run_name: str, prov: dict, summary: dict | None, traces: list[tuple[Path, str | None]], top: str) -> str:
    run = prov["run"]
    lines = [
        f"# alloclab bundle: {run_name}",
        "",
        "Made by `alloclab bundle` so that an allocator's maintainers can see, check and reproduce a finding.",
        "",
    ]
    if summary and summary.get("recommendation"):
        rec = summary["recommendation"]
        lines += [
            "## Finding",
            "",
            str(rec.get("text") or rec.get("summary") or json.dumps(rec, indent=1, default=str)),
            "",
        ]
    if summary and summary.get("warnings"):
        lines += ["Warnings the analysis raised:", ""]
        lines += [f"- {w.get('severity')}: {w.get('kind')}: {w.get('message')}" for w in summary["warnings"]]
        lines.append("")
    lines += [
        "## Machine",
        "",
        f"- host {run.get('host', '?')}, kernel {run.get('kernel', '?')}, {run.get('os', '?')}",
        f"- {run.get('glibc', 'glibc ?')}, CPU {run.get('cpu', '?')} ({run.get('ncpu', '?')} cores), "
        f"memory {run.get('mem_total_kb', '?')} kB",
        f"- alloclab {run.get('alloclab_version', '?')}, Python {run.get('python', '?')}",
        "",
        "## Allocators",
        "",
    ]
    for g in prov["groups"]:
        lines.append(
            f"- **{g['name']}**{' (baseline)' if g['baseline'] else ''}: {g['family'] or g['allocator']} "
            f"{g['version'] or ''} — `{g['library_path'] or 'the program’s own'}`, sha256 "
            f"`{g['library_sha256'] or '–'}`" + (f", env {json.dumps(g['env'])}" if g["env"] else "")
        )
    lines += [
        "",
        "Build details (sources, flags, catalog id) are in `provenance.json` under `groups[].build`.",
        "",
        "## Reproduce",
        "",
        "1. Install alloclab (its README: `scripts/install.sh`, or `pip install` of the package).",
        "2. Provide the same allocator builds: a catalog id in `experiment.toml` is built by "
        "`alloclab allocators build ID`; a library path must exist with the sha256 above "
        "(`sha256sum PATH`).",
        "3. `alloclab check experiment.toml`, then `alloclab run experiment.toml -o rerun`.",
        f"4. `alloclab report rerun`, then `tar xzf` this bundle and `alloclab compare {top} rerun`: the "
        f"extracted `{top}/` holds the original run's store (`run.db`), so it is a run that `compare` and "
        "`report` read.",
        "",
    ]
    if traces:
        lines += ["## Trace", ""]
        for path, inside in traces:
            lines.append(
                f"- the run replayed `{path}`: "
                + (
                    f"bundled as `{inside}`; point `[workload] trace` in experiment.toml at it"
                    if inside
                    else "not included (a bundle never reads a path the store names): "
                    "add it with `alloclab bundle RUN --trace FILE`"
                )
            )
        lines.append("")
    lines += [
        "## Files",
        "",
        "- `experiment.toml`: the exact experiment file of the run",
        "- `provenance.json`: the run's metadata (host, kernel, glibc, CPU, alloclab, phases, seed) and every group",
        "- `run.db`: the run's store (SQLite: every sample, event and replica), for `alloclab compare` and `report`",
        "- `report.md`, `report.html`, `summary.json`, `summary.csv`, `replicas.csv`, `charts/`: the report",
        "- `trace/`: the replayed trace(s), if any",
        "",
    ]
    return "\n".join(lines)


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
    tar.addfile(info, io.BytesIO(data))


def _add_file(tar: tarfile.TarFile, name: str, path: Path) -> None:
    """A regular file alloclab itself just made (the store's copy, a trace the user named)."""
    info = tarfile.TarInfo(name)
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"{path} is not a regular file", "give a trace file")
        info.size, info.mode, info.mtime = st.st_size, 0o644, int(st.st_mtime)
        tar.addfile(info, f)


def run_files(run_dir: Path) -> list[tuple[str, bytes]]:
    """The report files in the run directory, by alloclab's own names, each read relative to the
    run directory without following a link; a link or a hard-linked file there is refused."""
    root = Root(run_dir, "the run directory")
    out = [(f, root.read_bytes(run_dir / f, one_link=True)) for f in REPORT_FILES if root.exists(run_dir / f)]
    if root.is_dir(run_dir / "charts"):
        for name in root.listdir(run_dir / "charts"):
            if name.endswith(".png") and not name.startswith("."):
                out.append((f"charts/{name}", root.read_bytes(run_dir / "charts" / name, one_link=True)))
    elif root.exists(run_dir / "charts"):
        raise UserError(
            f"{run_dir / 'charts'} is a link or not a directory; alloclab does not follow links in a run",
            f"remove it and run `alloclab report {run_dir}` again, or check who planted it",
        )
    return out


def default_output(run_dir: Path) -> Path:
    return run_dir.parent / f"{run_dir.name}-bundle.tar.gz"


def write_bundle(run: str | Path, output: Path | None = None, trace_files: list[Path] = ()) -> tuple[Path, list[str]]:
    """Write the bundle; returns its path and the member names. `trace_files`: traces the user
    names to include (the store's own trace paths are only mentioned, never read)."""
    try:
        store = Store.open_checked(run)
        meta, groups = store.meta(), store.groups()
    except StoreError as exc:
        raise damaged(resolve_run(run), str(exc)) from None
    if not groups:
        raise UserError(
            f"{run} has no groups: nothing to bundle", "give a run made by `alloclab run` or `alloclab import`"
        )
    run_dir = store.run_dir
    out = Path(output) if output else default_output(run_dir)
    if out.exists():
        raise UserError(f"{out} already exists", "remove it or give another file with -o")
    if not out.parent.is_dir():
        raise UserError(
            f"cannot write {out}: {out.parent} is not a directory", "give -o a file in an existing directory"
        )
    writable_file(out, "bundle")  # before the report below (seconds), not after it
    replayed = replayed_traces(groups)
    for t in trace_files:
        if not Path(t).is_file():
            raise UserError(f"--trace {t} is not a file", "name the trace the run replayed")
    if not Root(run_dir).is_file(run_dir / DB_NAME):
        raise UserError(f"{run_dir / DB_NAME} is not a regular file (a link?)", "bundle a run alloclab wrote")
    summary_path = run_dir / "summary.json"
    if not summary_path.exists() or not (run_dir / "report.md").exists():
        if not os.access(run_dir, os.W_OK):
            raise UserError(
                f"{run_dir} has no report yet and cannot be written to, so the bundle cannot include one",
                f"run `alloclab report {run_dir}` as its owner (or bundle a writable copy of it)",
            )
        store.close()
        from ..reporters import report

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
    try:
        files = run_files(run_dir)
    except BaseException:
        Path(db_copy).unlink(missing_ok=True)
        raise
    summary = _json(dict(files).get("summary.json", b"").decode("utf-8", "replace"))
    if not isinstance(summary, dict):
        summary = None
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
            add(DB_NAME, path=Path(db_copy))  # the extracted directory is a run: `compare`, `report` read it
            for f, data in files:
                add(f, data)
            for k, trace in enumerate(trace_files):
                inside = f"trace/{k + 1}-{Path(trace).name}"
                add(inside, path=Path(trace))
                traces.append((Path(trace), inside))
            traces += [
                (t, None) for t in replayed if all(os.path.abspath(t) != os.path.abspath(u) for u in trace_files)
            ]
            add("README.md", _readme(meta.get("name", run_dir.name), prov, summary, traces, top).encode())
        os.chmod(tmp, BUNDLE_MODE)  # not 0644: the run's store and host details are inside
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        Path(db_copy).unlink(missing_ok=True)
    return out, names
