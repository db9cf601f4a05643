"""The one error type users see: a single line naming the problem and the fix (exit code 2)."""

import errno
import os
import re

from . import exitcodes

_LINE_BREAKING = re.compile(r"[\x00-\x1f\x7f\u2028\u2029\x85]")


def _one_line(text: str) -> str:
    """Control characters (a newline in a file name, say) escaped, so the message stays one line."""
    return _LINE_BREAKING.sub(lambda m: repr(m.group())[1:-1], text)


class UserError(Exception):
    """Bad input or an environment problem the user can fix (a damaged store given to read, a path
    that cannot be written): the CLI prints str(self) and exits with `exit_code`, 2 (3 for
    CutShortError)."""

    exit_code = exitcodes.BAD_INPUT

    def __init__(self, problem: str, fix: str | None = None):
        self.problem = _one_line(problem)
        self.fix = _one_line(fix) if fix else fix
        super().__init__(f"{self.problem} — {self.fix}" if self.fix else self.problem)


def did_you_mean(word: str, choices) -> str:
    """ "did you mean 'x'? " for the closest of `choices` to a misspelt `word` (difflib, cutoff 0.6),
    or "" when none is close: put before a UserError's fix."""
    import difflib

    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}? " if close else ""


class StoreError(Exception):
    """A failure of SQLite underneath a run store's operation: the one error type `store` raises
    for them, so no other module handles sqlite3's. `disk_full`: a write failed for lack of space
    (the runner then cuts the run short); `store`: the file the error came from (a command that
    reads several stores, such as compare or merge, names the right one), so, met while reading,
    store.explain_database_error says which store is damaged."""

    def __init__(
        self, message: str, disk_full: bool = False, sqlite_errorname: str = "", store: os.PathLike | None = None
    ):
        super().__init__(message)
        self.disk_full, self.sqlite_errorname, self.store = disk_full, sqlite_errorname, store


class CutShortError(UserError):
    """Recorded data could not be written (a full disk): the command was cut short and what it
    recorded so far is kept. Exit code 3, so a script tells it from refused input (2)."""

    exit_code = exitcodes.CUT_SHORT


# The fix for an OSError no command handled itself, by errno (anything else: check the path).
_OS_ERROR_FIXES = {
    errno.EACCES: "check that path's permissions for the user alloclab runs as, or choose another path",
    errno.EPERM: "check that path's permissions for the user alloclab runs as, or choose another path",
    errno.EROFS: "that file system is read-only: choose a path on a writable one",
    errno.EISDIR: "a directory is in the way: move it or choose another path",
    errno.ENOTDIR: "a file is in the way of a directory: move it or choose another path",
    errno.ENOENT: "check that the path exists",
    errno.EMFILE: "alloclab ran out of open files: raise the limit (ulimit -n) and retry",
    errno.ENFILE: "the system ran out of open files: close some programs and retry",
}


def from_os_error(exc: OSError) -> UserError:
    """An OSError that reached the CLI (a path alloclab could not read or write, too many open
    files) as one line naming the path, the errno text and the fix: exit code 2, like bad input,
    because the user fixes it the same way (a full disk is CutShortError, exit code 3)."""
    paths = " -> ".join(os.fsdecode(p) for p in (exc.filename, exc.filename2) if p is not None)
    what = exc.strerror or str(exc) or type(exc).__name__
    return UserError(
        f"{what}: {paths}" if paths else what,
        _OS_ERROR_FIXES.get(exc.errno, "check that path and the file system it is on, then retry"),
    )
