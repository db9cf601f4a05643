"""`alloclab allocators ...`: the catalog, builds with provenance, verification."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..allocators import catalog, hardening, hardening_summary, sourcehealth, versions
from ..allocators.resolution import BUILDS
from ..common.errors import UserError


def list_command(console: Console, as_json: bool = False) -> None:
    rows = []
    for e in catalog.entries().values():
        b = catalog.find_build(e.id)
        reported = ""
        if b:
            r = b.provenance["reported"]
            reported = f"{r['family']} {r['version'] or '(no version call)'}" + (
                f", secure {r['secure_level']}" if r.get("secure_level") else ""
            )
        rows.append(
            {
                "id": e.id,
                "sources": [s["kind"] for s in e.sources],
                "built": b is not None,
                "built_from": b.provenance["source"]["kind"] if b else None,
                "reports_itself_as": reported,
                "hardening": hardening_summary.summary(b.provenance.get("hardening")) if b else "",
                "notes": e.notes,
            }
        )
    rows.append(
        {
            "id": "glibc",
            "sources": ["the system's"],
            "built": True,
            "built_from": None,
            "reports_itself_as": "",
            "hardening": hardening_summary.summary(hardening.features(None, None)),
            "notes": "",
        }
    )
    if as_json:
        console.print_json(json.dumps(rows))
        return
    t = Table("id", "sources", "built", "reports itself as", "hardening", "notes")
    for r in rows:
        built = "no" if not r["built"] else f"yes ({r['built_from']})" if r["built_from"] else "yes"
        t.add_row(r["id"], ", ".join(r["sources"]), built, r["reports_itself_as"], r["hardening"], r["notes"])
    console.print(t)


def check_command(ids: list[str], as_json: bool, markdown: bool, console: Console) -> int:
    """Whether every catalog source is still served (sourcehealth); 1 when any is gone."""
    for i in ids:
        if catalog.pinned(i) is None:
            raise catalog.unknown(i)
    with console.status("asking the registries") as status:
        found = sourcehealth.check_catalog(ids or None, lambda step: status.update(f"asking the registries: {step}"))
    if as_json:
        console.print_json(json.dumps([h.to_dict() for h in found]))
    elif markdown:
        console.print(_markdown_table(found), markup=False, highlight=False, soft_wrap=True)
    else:
        colour = {sourcehealth.SERVED: "green", sourcehealth.GONE: "red", sourcehealth.UNREACHABLE: "yellow"}
        for h in found:
            detail = "; ".join(
                f"{s.source}: {s.status}" + (f" ({s.detail})" if s.status != sourcehealth.SERVED else "")
                for s in h.sources
                if s.status != sourcehealth.NOT_ASKED
            )
            also = (
                f" — still served by {', '.join(h.still_served_by)}"
                if h.status == sourcehealth.GONE and h.still_served_by
                else ""
            )
            console.print(f"{h.id:<24} [{colour.get(h.status, 'white')}]{h.status}[/]{also}  {detail}", highlight=False)
        gone = [h.id for h in found if h.status == sourcehealth.GONE]
        unanswered = [h.id for h in found if h.status == sourcehealth.UNREACHABLE]
        console.print(
            f"{len(found)} ids: {len(found) - len(gone) - len(unanswered)} served, {len(gone)} with a source gone"
            f"{' (' + ', '.join(gone) + ')' if gone else ''}, {len(unanswered)} not answered"
        )
    return 1 if any(h.status == sourcehealth.GONE for h in found) else 0


def _markdown_table(found: list) -> str:
    import datetime

    today = datetime.date.today().isoformat()
    rows = ["| id | sources, in the order tried | last seen served |", "|---|---|---|"]
    for h in found:
        srcs = "; ".join(
            f"{s.source}" + ("" if s.status in (sourcehealth.SERVED, sourcehealth.NOT_ASKED) else f" ({s.status})")
            for s in h.sources
            if s.status != sourcehealth.NOT_ASKED
        )
        rows.append(f"| `{h.id}` | {srcs} | {today if h.status == sourcehealth.SERVED else h.status} |")
    return "\n".join(rows)


def build_command(ids: list[str], force: bool, jobs: int, console: Console) -> None:
    for i in ids:
        BUILDS.entry(i)  # unknown ids fail before anything starts
    failures: list[str] = []
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.fields[id]:<24}"),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        tasks = {i: progress.add_task("queued", id=i, total=1) for i in ids}

        def one(i: str) -> None:
            try:
                b = BUILDS.build(i, lambda step: progress.update(tasks[i], description=step), force=force)
                r = b.provenance["reported"]
                progress.update(
                    tasks[i],
                    completed=1,
                    description=f"[green]ok[/green] {r['family']} {r['version'] or ''} → {b.path}",
                )
            except UserError as exc:
                failures.append(str(exc))
                progress.update(tasks[i], completed=1, description=f"[red]failed[/red] {exc.problem}")

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            list(pool.map(one, ids))
    if failures:
        raise UserError(f"{len(failures)} of {len(ids)} builds failed: {failures[0]}", "see the build logs named above")


def verify_command(allocator_id: str, console: Console, as_json: bool = False) -> None:
    r = BUILDS.verify(allocator_id)
    if as_json:
        console.print_json(json.dumps({"id": allocator_id, **r}, default=str))
        return
    secure = f", secure level {r['secure_level']}" if r.get("secure_level") is not None else ""
    console.print(
        f"{allocator_id}: verified — malloc resolves to {r['malloc_resolves_to']}, "
        f"the library reports {r['family']} {r['version'] or '(no version call)'}{secure}; sha256 unchanged"
    )


def show_command(allocator_id: str, console: Console) -> None:
    e = BUILDS.entry(allocator_id)
    b = catalog.find_build(allocator_id)
    build = {"path": str(b.path), **b.provenance} if b else None
    if build and "hardening" not in build:  # built before hardening was recorded: measured now
        build["hardening"] = hardening.features(e.family, str(b.path))
    console.print_json(json.dumps({"id": e.id, "sources": list(e.sources), "notes": e.notes, "build": build}))


def path_command(allocator_id: str) -> str:
    if catalog.find_build(allocator_id) is None:
        BUILDS.entry(allocator_id)  # an unknown id says so, a known one "not built"
    b = catalog.find_build(allocator_id)
    if b is None:
        raise UserError(f"{allocator_id} is not built", f"run: alloclab allocators build {allocator_id}")
    catalog.check_integrity(b)
    return str(b.path)


def versions_command(family: str, newer_than: str | None, refresh: bool, as_json: bool, console: Console) -> None:
    """What the reachable registries publish for a family (and, with --newer-than, what is new)."""
    with console.status(f"listing {family} versions") as status:
        progress = lambda step: status.update(f"listing {family} versions: {step}")
        found = (
            versions.newer_than(family, newer_than, refresh, progress)
            if newer_than
            else versions.available_versions(family, refresh, progress)
        )
    if as_json:
        console.print_json(json.dumps([v.to_dict() for v in found]))
        return
    if newer_than and not found:
        console.print(f"no {family} version newer than {newer_than} is published")
        return
    t = Table("id", "variants", "built", "published as", "in catalog")
    for v in found:
        built = [i for i in v.ids if catalog.find_build(i)]
        more = len(v.published_as) - 3
        where = "; ".join(v.published_as[:3]) + (f" (+{more} more)" if more > 0 else "")
        if not v.buildable:
            where = "not usable here: " + "; ".join(v.not_usable or ("no buildable source",))
        t.add_row(
            v.id,
            " ".join(i for i in v.ids if i != v.id) or "-",
            ", ".join(built) or "no",
            where,
            "yes" if v.in_catalog else "",
        )
    console.print(t)
    if newer_than:
        console.print(f"{len(found)} {family} version(s) newer than {newer_than}; newest {found[-1].id}")


def package_command(allocator_id: str, out_dir, console: Console) -> None:
    """A .deb of a verified build (built first if needed): the exact bytes, under a versioned path."""
    from pathlib import Path

    from ..allocators import debpackage
    from ..common.outputs import writable_directory
    from ..run import preflight

    preflight.check_output(Path(out_dir))  # a directory (or nothing yet), not a file
    writable_directory(Path(out_dir))  # and one that takes the .deb, before a build
    b = catalog.find_build(allocator_id)
    if b is None:
        with console.status(f"building {allocator_id}") as status:
            b = BUILDS.build(allocator_id, lambda step: status.update(f"building {allocator_id}: {step}"))
    deb = debpackage.build_deb(b, Path(out_dir))
    console.print(
        f"{deb}\n  installs /{debpackage.install_dir(allocator_id) / b.path.name} "
        f"(sha256 {b.provenance['library_sha256'][:16]}…); install: dpkg -i {deb}; "
        f"then preload it by path or by id (alloclab fleet deploy {allocator_id} ...)"
    )
