"""Directories alloclab writes into (runs, demos, imports): checked before anything is written."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from .errors import UserError


def refuse_nonempty(path: Path, what: str = "output directory") -> None:
    """An output must not hold anything yet: a run or an import never mixes with older files."""
    if any(path.iterdir()):
        raise UserError(f"{what} {path} already exists and is not empty", "choose another with -o")


def refuse_other_writers(path: Path, what: str = "output directory") -> None:
    """An existing output directory must be the invoking user's with no other writer: otherwise its
    owner (or group) can plant links among the files alloclab (often root) writes there later."""
    st = os.stat(path)
    if st.st_uid != os.geteuid():
        raise UserError(
            f"{what} {path} belongs to uid {st.st_uid}, not to you (uid {os.geteuid()}): its owner "
            "could plant links among alloclab's files",
            "choose a directory of your own with -o, or a new path",
        )
    if st.st_mode & 0o022:
        raise UserError(
            f"{what} {path} is writable by others (mode {stat.S_IMODE(st.st_mode):o}): they could "
            "plant links among alloclab's files",
            f"chmod go-w {path}, or choose a new path with -o",
        )


def new_output(path: Path) -> None:
    """Refused when `path` exists and is not empty, or is not the invoking user's alone (a missing
    path is fine: alloclab creates it later)."""
    if path.exists():
        refuse_nonempty(path)
        refuse_other_writers(path)


def _take_a_file(directory: Path) -> None:
    """OSError unless `directory` exists (made, with its parents, if missing) and takes a new file."""
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=directory, prefix=".alloclab-write-test-"):
        pass


def writable_directory(path: Path, what: str = "output directory", option: str = "-o") -> Path:
    """`path` made (with any missing parents) and shown to take a new file, before any work is done:
    a file in the way, a missing or read-only place is one UserError naming `option`, not a
    traceback after the analysis."""
    if path.exists() and not path.is_dir():
        raise UserError(f"{what} {path} is a file, not a directory", f"choose a directory with {option}")
    try:
        _take_a_file(path)
    except OSError as exc:
        raise UserError(
            f"cannot write to {what} {path}: {exc.strerror}", f"choose a writable directory with {option}"
        ) from None
    return path


def writable_file(path: Path, what: str = "output file", option: str = "-o") -> Path:
    """A file alloclab is about to write: not a directory, in a directory (made if missing) that
    takes a new file."""
    if path.is_dir():
        raise UserError(f"{what} {path} is a directory", f"give {option} a file name, not a directory")
    try:
        _take_a_file(path.parent)
    except OSError as exc:
        raise UserError(
            f"cannot write {what} {path}: {exc.strerror}", f"give {option} a file in a writable directory"
        ) from None
    return path


def write_output(out_dir: Path, name: str, data: bytes | str) -> Path:
    """OUT_DIR/NAME (NAME may go through subdirectories, e.g. charts/x.png) written without following
    a link: each directory below OUT_DIR is opened relative to its parent with O_NOFOLLOW and the
    file is a fresh temporary renamed into place (common.rootfs.Root), so a link someone planted in
    a run directory is replaced or refused, never written through (docs/reference/security.md)."""
    from .rootfs import Root

    path = out_dir / name
    Root(out_dir, "the output directory").write(path, data)
    return path


# The Tor test network's directory inside a run (tornet writes it; the report names it).
TOR_NETWORK_DIR = "tor-network"

# What `alloclab report` (and the end of `alloclab run`) writes, into the run's directory or -o DIR.
REPORT_FILES = {
    "report.md": "the report: recommendation, summary with intervals, warnings, charts, groups, replicas",
    "report.html": "the same as one self-contained page with interactive charts (no network when opened)",
    "summary.json": "summary figures, warnings, recommendation, run and host metadata, allocator provenance, "
    "the experiment file",
    "summary.csv": "one row per group: the summary table's figures",
    "replicas.csv": "one row per replica: its figures and status",
    "charts/": "PNG charts: timeseries, distribution, trajectories, idle_release, fragmentation (where data exist)",
}
