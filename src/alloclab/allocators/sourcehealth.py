"""Whether each catalog source is still served, asked of its registry without building anything.

Debian keeps only a suite's current version, so a pin can vanish from the archive overnight; a
crate or wheel at an exact version stays. `check_catalog()` asks every source of every entry once
(sources shared by entries are asked once), in parallel, through the registries' ordinary clients:

    debian-binary   the suite's lists refreshed, `apt-get download --print-uris PKG=VERSION` (apt's
                    own answer whether the version exists, and the file's URI and hash), then one
                    HEAD request on that URI
    debian-source   `apt-get source --print-uris`, then one HEAD request on the .dsc
    crate           cargo's index entry for the crate, refreshed (`cargo info`): listed, not yanked,
                    and its checksum the catalog's pin
    pypi-wheel      `pip download` of the pinned file with its hash into a scratch directory
    upstream-git    not asked: these machines reach no git host

Each answer is SERVED, GONE (the registry answered that it is not there, or not as pinned),
UNREACHABLE (no answer) or NOT_ASKED.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from . import catalog, versions

SERVED = "served"
GONE = catalog.GONE
UNREACHABLE = catalog.UNREACHABLE
NOT_ASKED = "not asked"
CHECK_LISTS = "apt-check"  # the check's own copy of the suites' lists (catalog.apt_env)


@dataclass(frozen=True)
class SourceHealth:
    source: str  # catalog.describe_source's words
    status: str  # SERVED, GONE, UNREACHABLE or NOT_ASKED
    detail: str = ""


@dataclass(frozen=True)
class EntryHealth:
    id: str
    sources: tuple[SourceHealth, ...]

    @property
    def status(self) -> str:
        """GONE when any source is gone (the catalog must follow the archive), else UNREACHABLE when
        any source did not answer, else SERVED."""
        asked = [s.status for s in self.sources if s.status != NOT_ASKED]
        for status in (GONE, UNREACHABLE):
            if status in asked:
                return status
        return SERVED if asked else NOT_ASKED

    @property
    def still_served_by(self) -> list[str]:
        return [s.source for s in self.sources if s.status == SERVED]

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "status": self.status,
            "sources": [{"source": s.source, "status": s.status, "detail": s.detail} for s in self.sources],
        }


def _key(src: dict) -> str:
    return json.dumps(src, sort_keys=True)


def _debian_binary(src: dict, apt: dict[str, str]) -> SourceHealth:
    where = catalog.describe_source(src)
    env = {**os.environ, **apt}
    proc = subprocess.run(
        ["apt-get", "download", "--print-uris", "-qq", f"{src['package']}={src['version']}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tempfile.gettempdir(),
    )
    if proc.returncode != 0:
        status = catalog.failure_status(proc.stdout + proc.stderr)
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return SourceHealth(where, GONE if status == catalog.FAILED else status, last)
    m = re.search(r"^'([^']+)'\s+\S+\s+\d+\s+SHA256:([0-9a-f]{64})", proc.stdout, re.M)
    if not m:
        return SourceHealth(where, UNREACHABLE, "apt named no file to download")
    uri, sha = m.group(1), m.group(2)
    if src.get("sha256") and sha != src["sha256"]:
        return SourceHealth(
            where, GONE, f"the archive's file has sha256 {sha[:16]}…, not the pinned {src['sha256'][:16]}…"
        )
    answer = versions.uri_answers(uri)
    return SourceHealth(
        where,
        {True: SERVED, False: GONE, None: UNREACHABLE}[answer],
        {True: "file there", False: "the archive answered 404", None: "no answer about the file"}[answer],
    )


def _debian_source(src: dict) -> SourceHealth:
    where = catalog.describe_source(src)
    try:  # source_fetchable refreshes the suite's lists itself (check_catalog refreshed them already)
        answer = versions.source_fetchable(src["suite"], src["package"], src["version"], lists=CHECK_LISTS)
    except catalog.SourceFailed as exc:
        return SourceHealth(where, UNREACHABLE, str(exc))
    return SourceHealth(
        where,
        {True: SERVED, False: GONE, None: UNREACHABLE}[answer],
        {True: ".dsc there", False: "not in the archive (or its files answer 404)", None: "no answer about its files"}[
            answer
        ],
    )


def _crate(src: dict, listings: dict[str, list[dict] | catalog.SourceFailed]) -> SourceHealth:
    where = catalog.describe_source(src)
    listed = listings[src["crate"]]
    if isinstance(listed, catalog.SourceFailed):
        return SourceHealth(where, listed.status if listed.status != catalog.FAILED else UNREACHABLE, str(listed))
    row = next((v for v in listed if v["vers"] == src["version"]), None)
    if row is None:
        return SourceHealth(where, GONE, "the registry's index does not list this version")
    if row["yanked"]:
        return SourceHealth(where, GONE, "yanked from the registry")
    if src.get("cksum") and row["cksum"] != src["cksum"]:
        return SourceHealth(
            where, GONE, f"the registry's checksum {row['cksum'][:16]}… is not the pinned {src['cksum'][:16]}…"
        )
    return SourceHealth(where, SERVED, "listed, checksum as pinned" if src.get("cksum") else "listed")


def _pypi_wheel(src: dict) -> SourceHealth:
    where = catalog.describe_source(src)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            catalog.fetch_pypi_wheel(src, Path(tmp), Path(tmp) / "log")
        except catalog.SourceFailed as exc:
            return SourceHealth(where, GONE if exc.status == catalog.FAILED else exc.status, str(exc))
    return SourceHealth(where, SERVED, "file there, sha256 as pinned" if src.get("sha256") else "file there")


def _crate_listing(crate: str) -> list[dict] | catalog.SourceFailed:
    try:
        return versions.crate_versions(crate, refresh=True, must_answer=True)
    except catalog.SourceFailed as exc:
        return exc


def check_catalog(ids: list[str] | None = None, progress: Callable[[str], None] = lambda s: None) -> list[EntryHealth]:
    """Every source of the given catalog ids (all when None), asked once each."""
    chosen = [catalog.entries()[i] for i in ids] if ids else list(catalog.entries().values())
    unique = {_key(s): s for e in chosen for s in e.sources}
    crates = sorted({s["crate"] for s in unique.values() if s["kind"] == "crate"})
    apt: dict[str, dict[str, str]] = {}  # each suite's APT environment, its lists refreshed now
    unrefreshed: dict[str, str] = {}
    for suite in sorted({s["suite"] for s in unique.values() if "suite" in s}):
        progress(f"refreshing Debian {suite}'s lists")
        try:
            apt[suite] = catalog.apt_env(suite, versions.registry_log(), max_age=0, must_answer=True, lists=CHECK_LISTS)
        except catalog.SourceFailed as exc:  # older lists would answer for the archive of another day
            unrefreshed[suite] = str(exc)
    with ThreadPoolExecutor(max_workers=4) as pool:
        progress(f"asking the crates' index ({len(crates)} crates)")
        listings = dict(zip(crates, pool.map(_crate_listing, crates)))
        done = [0]

        def ask(src: dict) -> SourceHealth:
            kind = src["kind"]
            if src.get("suite") in unrefreshed:
                answer = SourceHealth(catalog.describe_source(src), UNREACHABLE, unrefreshed[src["suite"]])
            elif kind == "debian-binary":
                answer = _debian_binary(src, apt[src["suite"]])
            elif kind == "debian-source":
                answer = _debian_source(src)
            elif kind == "crate":
                answer = _crate(src, listings)
            elif kind == "pypi-wheel":
                answer = _pypi_wheel(src)
            else:
                answer = SourceHealth(catalog.describe_source(src), NOT_ASKED, "these machines reach no git host")
            done[0] += 1
            progress(f"asked {done[0]}/{len(unique)} sources")
            return answer

        answers = dict(zip(unique, pool.map(ask, unique.values())))
    return [EntryHealth(e.id, tuple(answers[_key(s)] for s in e.sources)) for e in chosen]
