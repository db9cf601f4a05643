"""Can a systemd unit's processes load a library? ld.so opens an LD_PRELOAD library as the
service's user, inside the service's sandbox, and when it cannot it prints
`ld.so: object ... cannot be preloaded ... ignored` and starts the service on glibc. So before a
drop-in names a library, the unit's `User=`, `ProtectHome=`, `PrivateTmp=`, `InaccessiblePaths=`,
`TemporaryFileSystem=` and `RootDirectory=` (as systemd reports them) are checked against the
path: hidden by the sandbox, or a directory on the way the user cannot search, or a file the user
cannot read, or a file system mounted noexec, and the unit cannot load it.

`ProtectSystem=` makes /usr, /boot, /etc (and with `strict` everything) read-only: that never
stops a library from loading, so a library under /usr/lib/alloclab (where `alloclab allocators
package` installs it) suits every hardened unit, Debian's tor units included.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from dataclasses import dataclass, field
from pathlib import Path

# the properties read from systemd (`systemctl show -p ...`), or from the unit files by the stand-in
PROPERTIES = (
    "User",
    "Group",
    "SupplementaryGroups",
    "DynamicUser",
    "ProtectHome",
    "ProtectSystem",
    "PrivateTmp",
    "InaccessiblePaths",
    "TemporaryFileSystem",
    "RootDirectory",
    "CapabilityBoundingSet",
)

HOME_PATHS = ("/home", "/root", "/run/user")
TMP_PATHS = ("/tmp", "/var/tmp")
# capabilities that let a root process read any file and search any directory
READ_ANY = {"cap_dac_override", "cap_dac_read_search"}


@dataclass(frozen=True)
class Sandbox:
    """What of a unit's settings decides whether its processes can open a file."""

    user: str = ""  # "" = the manager's own user (root for the system manager)
    group: str = ""
    supplementary: tuple[str, ...] = ()
    dynamic_user: bool = False
    protect_home: str = "no"  # no | yes | read-only | tmpfs
    protect_system: str = "no"  # no | yes | full | strict (read-only: never hides a library)
    private_tmp: bool = False
    inaccessible: tuple[str, ...] = ()
    temporary: tuple[str, ...] = ()  # TemporaryFileSystem= mount points
    root_directory: str = ""
    capabilities: frozenset[str] | None = None  # the bounding set; None = all
    manager_user: str = "root"
    extra: dict = field(default_factory=dict, compare=False)

    def as_dict(self) -> dict:
        return {
            "user": self.user or self.manager_user,
            "protect_home": self.protect_home,
            "protect_system": self.protect_system,
            "private_tmp": self.private_tmp,
            "inaccessible": list(self.inaccessible),
            "temporary": list(self.temporary),
            "root_directory": self.root_directory,
            "dynamic_user": self.dynamic_user,
        }


def from_dict(d: dict) -> Sandbox:
    """A Sandbox from `as_dict()` (the facts a host reported to the controller)."""
    return Sandbox(
        user=str(d.get("user", "")),
        protect_home=str(d.get("protect_home", "no")),
        protect_system=str(d.get("protect_system", "no")),
        private_tmp=bool(d.get("private_tmp")),
        inaccessible=tuple(d.get("inaccessible", ())),
        temporary=tuple(d.get("temporary", ())),
        root_directory=str(d.get("root_directory", "")),
        dynamic_user=bool(d.get("dynamic_user")),
    )


def _yes(value: str) -> bool:
    return value.strip().lower() in ("yes", "true", "1", "on")


def _paths(value: str) -> tuple[str, ...]:
    """systemd's path lists: space separated, each maybe prefixed with - (ignore if missing) or +;
    TemporaryFileSystem= entries may end in :OPTIONS."""
    return tuple(p.lstrip("-+").split(":")[0] for p in value.split() if p.lstrip("-+"))


def from_properties(props: dict[str, str], manager_user: str = "root") -> Sandbox:
    caps = props.get("CapabilityBoundingSet", "").strip()
    return Sandbox(
        user=props.get("User", "").strip(),
        group=props.get("Group", "").strip(),
        supplementary=tuple(props.get("SupplementaryGroups", "").split()),
        dynamic_user=_yes(props.get("DynamicUser", "no")),
        protect_home=(props.get("ProtectHome", "no").strip().lower() or "no")
        .replace("true", "yes")
        .replace("false", "no"),
        protect_system=(props.get("ProtectSystem", "no").strip().lower() or "no"),
        private_tmp=_yes(props.get("PrivateTmp", "no")),
        inaccessible=_paths(props.get("InaccessiblePaths", "")),
        temporary=_paths(props.get("TemporaryFileSystem", "")),
        root_directory=props.get("RootDirectory", "").strip(),
        capabilities=frozenset(c.lower() for c in caps.split()) if caps else None,
        manager_user=manager_user,
    )


def _under(path: str, top: str) -> bool:
    top = top.rstrip("/") or "/"
    return path == top or path.startswith(top + "/") or top == "/"


def hidden_by(sandbox: Sandbox, path: str) -> str | None:
    """The setting that hides PATH from the unit's processes, or None. Needs no access to the host's
    files: the controller checks this from the facts each host reported."""
    if sandbox.root_directory and not _under(path, sandbox.root_directory):
        return f"RootDirectory={sandbox.root_directory}"
    if sandbox.protect_home in ("yes", "tmpfs"):
        for top in HOME_PATHS:
            if _under(path, top):
                return f"ProtectHome={sandbox.protect_home} hides {top}"
    if sandbox.private_tmp:
        for top in TMP_PATHS:
            if _under(path, top):
                return f"PrivateTmp=yes replaces {top}"
    for top in sandbox.inaccessible:
        if _under(path, top):
            return f"InaccessiblePaths={top}"
    for top in sandbox.temporary:
        if _under(path, top):
            return f"TemporaryFileSystem={top}"
    return None


def _credentials(sandbox: Sandbox) -> tuple[int, set[int]] | None:
    """uid and every gid of the unit's user; None for DynamicUser= (an unknown, unprivileged uid)."""
    if sandbox.dynamic_user:
        return None
    name = sandbox.user or sandbox.manager_user
    try:
        entry = pwd.getpwnam(name) if not name.isdigit() else pwd.getpwuid(int(name))
    except KeyError:
        raise LookupError(f"user {name} does not exist on this host") from None
    gids = set(os.getgrouplist(entry.pw_name, entry.pw_gid))
    for g in ([sandbox.group] if sandbox.group else []) + list(sandbox.supplementary):
        try:
            gids.add(grp.getgrnam(g).gr_gid if not g.isdigit() else int(g))
        except KeyError:
            raise LookupError(f"group {g} does not exist on this host") from None
    return entry.pw_uid, gids


def _allowed(st: os.stat_result, uid: int | None, gids: set[int], bit: int) -> bool:
    """bit: 4 read, 1 search/execute; uid None: nobody in particular (only 'other' applies)."""
    if uid is not None and st.st_uid == uid:
        return bool(st.st_mode >> 6 & bit)
    if st.st_gid in gids:
        return bool(st.st_mode >> 3 & bit)
    return bool(st.st_mode & bit)


def refusal(sandbox: Sandbox, library: str, check_files: bool = True) -> str | None:
    """Why the unit's processes cannot load LIBRARY, or None when they can. `check_files`: also
    check permissions and mount options on this host (the host the unit runs on)."""
    path = os.path.normpath(library)
    why = hidden_by(sandbox, path)
    if why or not check_files:
        return why
    seen = Path(sandbox.root_directory or "/") / path.lstrip("/")
    try:
        creds = _credentials(sandbox)
    except LookupError as exc:
        return str(exc)
    uid, gids = creds if creds else (None, set())
    reads_anything = uid == 0 and (sandbox.capabilities is None or bool(READ_ANY & sandbox.capabilities))
    if not seen.exists():
        return "no such file on this host"
    if os.statvfs(seen).f_flag & os.ST_NOEXEC:
        return "its file system is mounted noexec"
    if reads_anything:
        return None
    parts = seen.parts
    for i in range(1, len(parts)):
        d = Path(*parts[:i])
        if not _allowed(d.stat(), uid, gids, 1):
            return f"cannot search {d} (mode {stat.filemode(d.stat().st_mode)}, owner {d.stat().st_uid})"
    if not _allowed(seen.stat(), uid, gids, 4):
        return f"cannot read it (mode {stat.filemode(seen.stat().st_mode)}, owner {seen.stat().st_uid})"
    return None
