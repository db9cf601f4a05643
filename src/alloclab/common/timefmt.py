"""Times as people and files read them: UTC for every time shown or exported, local time only in
the names of directories a user just asked for."""

from __future__ import annotations

from datetime import UTC, datetime


def utc(t: float | str | None, minutes: bool = False) -> str:
    """A Unix time as "2026-01-31 12:34:56 UTC" (or to the minute); "–" when missing or unreadable."""
    try:
        when = datetime.fromtimestamp(float(t), UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        return "–"
    return when.strftime("%Y-%m-%d %H:%M UTC" if minutes else "%Y-%m-%d %H:%M:%S UTC")


def utc_iso(t: float) -> str:
    """ISO 8601 in UTC with microseconds and an explicit offset: ticks half a second apart stay apart."""
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="microseconds")


def local_stamp() -> str:
    """Now, local time, as 20260131-123456: sorts by time in a directory name."""
    return datetime.now().strftime("%Y%m%d-%H%M%S")


def span(seconds: float) -> str:
    """A duration in the unit that reads best: 45 s, 12 min, 3.5 h, 4.2 d."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 72 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"
