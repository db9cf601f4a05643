"""A real systemd user manager as a context manager, for tests and benchmarks that need only the
manager (no namespace, no sshd): a thin wrapper over `tests.integration.systemd_host.Host`, which
starts it in a private mount namespace with a tmpfs at /run/systemd, in a cgroup made for it, with
its unit path at a given directory, and removes the manager, its units and its cgroup at the end."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from tests.integration.systemd_host import SYSTEMD, Host, Unavailable

__all__ = ["SYSTEMD", "Unavailable", "user_manager"]


@contextlib.contextmanager
def user_manager(unit_dir: Path, scratch: Path, monkeypatch=None):
    """Start the manager; inside the context `systemctl --user` reaches it (XDG_RUNTIME_DIR is set
    in os.environ, or through `monkeypatch` when given). Yields the Host."""
    host = Host(scratch, unit_dir).start()
    old_runtime = os.environ.get("XDG_RUNTIME_DIR")
    if monkeypatch is not None:
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(host.runtime))  # for systemctl --user, as a user's session has it
    else:
        os.environ["XDG_RUNTIME_DIR"] = str(host.runtime)
    try:
        yield host
    finally:
        host.close()  # the manager stops its units; its cgroup is removed
        if monkeypatch is None:
            if old_runtime is None:
                os.environ.pop("XDG_RUNTIME_DIR", None)
            else:
                os.environ["XDG_RUNTIME_DIR"] = old_runtime
