"""Every relative link in README.md and docs/**/*.md (the lab record included) leads to a file
that exists, and a link with a #fragment to a heading that file has."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(md: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    out, fence = set(), False
    for line in md.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def broken_links(doc: Path) -> list[str]:
    found, fence = [], False
    for n, line in enumerate(doc.read_text().splitlines(), 1):
        if line.startswith("```"):
            fence = not fence
            continue
        if fence:
            continue
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            path, _, fragment = target.partition("#")
            dest = (doc.parent / path).resolve() if path else doc
            where = f"{doc.relative_to(REPO)}:{n}: {target}"
            if not dest.exists():
                found.append(f"{where}: no such file")
            elif fragment and dest.suffix == ".md" and fragment not in _anchors(dest):
                found.append(f"{where}: no heading #{fragment}")
    return found


def test_every_relative_link_in_the_docs_resolves():
    assert len(DOCS) > 20
    broken = [b for doc in DOCS for b in broken_links(doc)]
    assert not broken, "\n".join(broken)


def test_the_check_finds_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "a.md").write_text(
        "# Title here\n[ok](#title-here) [gone](b.md) [bad](a.md#nowhere)\n```\n[x](in-a-fence.md)\n```\n"
    )
    global REPO
    saved, REPO = REPO, tmp_path
    try:
        assert [b.split(": ", 1)[1] for b in broken_links(tmp_path / "a.md")] == [
            "b.md: no such file",
            "a.md#nowhere: no heading #nowhere",
        ]
    finally:
        REPO = saved
