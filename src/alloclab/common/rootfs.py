"""Files under a directory alloclab writes into (a fleet `--root`, a run or output directory), reached
without ever following a symbolic link.

alloclab often runs as root, and `ROOT/etc/systemd/system/UNIT.d/` or `ROOT/var/lib/alloclab/`
may be writable by someone else, or replaced by a link: a path opened the ordinary way would then
let them send alloclab's writes (drop-in text, manifests, backups) anywhere, e.g. over
/etc/shadow. So every read and write under the root goes through `Root`: the root directory is
opened once, and each name below it is opened relative to its parent's descriptor
(`openat`) with `O_NOFOLLOW`, so a link anywhere below the root is refused with one line, never
followed. New files are written to a fresh temporary name (`O_CREAT | O_EXCL`, which never
follows a link either) in the same directory and renamed over the old one (a rename replaces a
link itself, not what it points to). docs/reference/security.md, "Fleet: what is written into systemd files, and where".
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from .errors import UserError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Root:
    """A `--root` directory; every path given to its methods is absolute and under it."""

    def __init__(self, path: Path | str, label: str = "--root"):
        self.path = Path(os.path.abspath(path))
        self.label = label  # what the user calls this directory, in refusals (a run, --root)

    # ---- walking ------------------------------------------------------------------------------

    def _parts(self, path: Path | str) -> list[str]:
        p = Path(os.path.abspath(path))
        try:
            parts = p.relative_to(self.path).parts
        except ValueError:
            raise UserError(
                f"{p} is not under {self.label} {self.path}", f"alloclab writes only under the {self.label} it is given"
            ) from None
        if any(x in ("", ".", "..") for x in parts):
            raise UserError(f"{p} is not a plain path under {self.label} {self.path}", "use a path without . or ..")
        return list(parts)

    def _refuse(self, parts: list[str], why: str) -> UserError:
        where = self.path.joinpath(*parts)
        return UserError(
            f"{where} is {why}; alloclab does not follow links under {self.label} {self.path}",
            f"replace it with a real directory (rm {where} && mkdir {where}), or check who planted it",
        )

    @contextlib.contextmanager
    def _dir(self, parts: list[str], create: bool = False) -> Iterator[int]:
        """A descriptor of ROOT/parts..., each step opened with O_NOFOLLOW relative to the last."""
        if create:  # the root itself is the operator's choice, as given
            os.makedirs(self.path, exist_ok=True)
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for i, name in enumerate(parts):
                if create:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, 0o755, dir_fd=fd)
                try:
                    nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.ENOTDIR):
                        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                        raise self._refuse(
                            parts[: i + 1], "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a directory"
                        ) from None
                    raise
                os.close(fd)
                fd = nxt
            yield fd
        finally:
            os.close(fd)

    def _leaf(self, path: Path | str) -> tuple[list[str], str]:
        parts = self._parts(path)
        if not parts:
            raise UserError(f"{path} is --root itself, not a file under it", "name a file under --root")
        return parts[:-1], parts[-1]

    # ---- reading ------------------------------------------------------------------------------

    def _lstat(self, path: Path | str) -> os.stat_result | None:
        parent, name = self._leaf(path)
        try:
            with self._dir(parent) as fd:
                return os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def exists(self, path: Path | str) -> bool:
        return self._lstat(path) is not None

    def is_file(self, path: Path | str) -> bool:
        st = self._lstat(path)
        return st is not None and stat.S_ISREG(st.st_mode)

    def is_dir(self, path: Path | str) -> bool:
        st = self._lstat(path)
        return st is not None and stat.S_ISDIR(st.st_mode)

    def read_bytes(self, path: Path | str, one_link: bool = False) -> bytes:
        """A regular file's bytes; `one_link`: also refused when it has another hard link (a
        hard link to e.g. /etc/shadow planted in a directory someone else can write)."""
        parent, name = self._leaf(path)
        with self._dir(parent) as dfd:
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dfd)
            except OSError as e:
                if e.errno == errno.ELOOP:
                    raise self._refuse(parent + [name], "a symbolic link") from None
                raise
            with os.fdopen(fd, "rb") as f:
                st = os.fstat(f.fileno())
                if not stat.S_ISREG(st.st_mode):
                    raise self._refuse(parent + [name], "not a regular file")
                if one_link and st.st_nlink != 1:
                    raise self._refuse(parent + [name], f"a file with {st.st_nlink} hard links")
                return f.read()

    def read_text(self, path: Path | str) -> str:
        return self.read_bytes(path).decode("utf-8")

    def listdir(self, path: Path | str) -> list[str]:
        """Names in a directory under the root ([] when it does not exist)."""
        try:
            with self._dir(self._parts(path)) as fd:
                return sorted(os.listdir(fd))
        except FileNotFoundError:
            return []

    # ---- writing ------------------------------------------------------------------------------

    def mkdirs(self, path: Path | str) -> None:
        with self._dir(self._parts(path), create=True):
            pass

    def write(self, path: Path | str, data: bytes | str, mode: int = 0o644) -> None:
        """Replace PATH's content atomically: a fresh temporary file, then a rename over PATH."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        parent, name = self._leaf(path)
        with self._dir(parent, create=True) as dfd:
            tmp = f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dfd)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                try:
                    os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
                except OSError as e:  # named by its full path (e.g. a directory in the way), not the temporary's
                    raise type(e)(e.errno, e.strerror, str(Path(path))) from None
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dfd)
                raise

    def unlink(self, path: Path | str) -> None:
        self._remove(path, os.unlink, (errno.ENOENT,))

    def rmdir_if_empty(self, path: Path | str) -> None:
        self._remove(path, os.rmdir, (errno.ENOENT, errno.ENOTEMPTY, errno.EEXIST))

    def _remove(self, path: Path | str, remove: Callable[..., None], harmless: tuple[int, ...]) -> None:
        """`remove` (os.unlink, os.rmdir) of the leaf, relative to its parent's descriptor; an
        error whose errno is `harmless` (already gone, not empty) is no error."""
        parent, name = self._leaf(path)
        try:
            with self._dir(parent) as fd:
                remove(name, dir_fd=fd)
        except OSError as e:
            if e.errno not in harmless:
                raise

    def rename(self, src: Path | str, dst: Path | str) -> None:
        sparent, sname = self._leaf(src)
        dparent, dname = self._leaf(dst)
        with self._dir(sparent) as sfd, self._dir(dparent, create=True) as dfd:
            os.rename(sname, dname, src_dir_fd=sfd, dst_dir_fd=dfd)
