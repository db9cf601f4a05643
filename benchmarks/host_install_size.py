"""What the Ansible role's Debian packages add to a host: the packages apt would newly install
(with what they depend on, without what they recommend, as the role installs them) on a Debian
server that has python3, and their size by Installed-Size.

    python benchmarks/host_install_size.py [--server-has python3 python3-apt]

The server is modelled from this machine's own dpkg status: its required, important and essential
packages, and the dependency closure of --server-has (python3 and python3-apt: what Ansible's apt
module needs on a host). apt is asked in simulation (`apt-get -s`, against that status and this
machine's package lists: nothing is downloaded or installed). Two sets, from the role's
defaults/main.yml: its alloclab_apt_packages (the light install), and those with
alloclab_canary_peers (python3-numpy and python3-scipy besides). Prints one JSON object: per set the
packages, their total, and what the canary's packages add.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
DEFAULTS = REPO / "ansible/collections/ansible_collections/alloclab/fleet/roles/experiment/defaults/main.yml"
CANARY_PACKAGES = ["python3-numpy", "python3-scipy"]  # as tasks/install.yml adds them (alloclab_canary_peers)


def installed_stanzas(status: Path = Path("/var/lib/dpkg/status")) -> dict[str, str]:
    out = {}
    for stanza in status.read_text().split("\n\n"):
        m = re.search(r"^Package: (\S+)", stanza, re.M)
        if m and re.search(r"^Status: install ok installed$", stanza, re.M):
            out[m.group(1)] = stanza
    return out


def dependencies(stanza: str, installed: dict[str, str]) -> list[str]:
    """The installed packages a stanza's Depends and Pre-Depends name (the first installed alternative)."""
    out = []
    for field in ("Pre-Depends", "Depends"):
        m = re.search(rf"^{field}: (.*)$", stanza, re.M)
        for alternatives in m.group(1).split(",") if m else []:
            names = [a.strip().split()[0].split(":")[0] for a in alternatives.split("|")]
            hit = next((n for n in names if n in installed), None)
            if hit:
                out.append(hit)
    return out


def server_status(has: list[str], installed: dict[str, str]) -> str:
    """A dpkg status of a minimal server: required, important and essential packages, and the closure of `has`."""
    keep: set[str] = set()
    todo = [n for n, s in installed.items() if re.search(r"^(Priority: (required|important)|Essential: yes)$", s, re.M)]
    missing = [n for n in has if n not in installed]
    if missing:
        sys.exit(
            f"--server-has {' '.join(missing)}: not installed on this machine, so not modelled; install them or leave them out"
        )
    todo += has
    while todo:
        name = todo.pop()
        if name not in keep:
            keep.add(name)
            todo += dependencies(installed[name], installed)
    return "\n\n".join(installed[n] for n in sorted(keep)) + "\n\n"


def added(packages: list[str], status: Path) -> dict[str, int]:
    """Package -> Installed-Size (KiB) of what apt would newly install (not upgrade) there."""
    sim = subprocess.run(
        ["apt-get", "-s", "-o", f"Dir::State::status={status}", "install", "--no-install-recommends", *packages],
        capture_output=True,
        text=True,
    )
    if sim.returncode != 0:
        sys.exit(f"apt-get -s failed: {sim.stderr.strip()[-500:]}")
    names = [m.group(1) for m in re.finditer(r"^Inst (\S+) (?!\[)", sim.stdout, re.M)]
    show = subprocess.run(
        ["apt-cache", "show", "--no-all-versions", *names], capture_output=True, text=True, check=True
    )
    sizes = {
        m.group(1): int(m.group(2))
        for m in re.finditer(r"^Package: (\S+)$.*?^Installed-Size: (\d+)$", show.stdout, re.M | re.S)
    }
    return {name: sizes[name] for name in names}


def summary(sizes: dict[str, int]) -> dict:
    return {
        "packages": len(sizes),
        "installed_size_mb": round(sum(sizes.values()) * 1024 / 1e6, 1),
        "largest": [f"{n} {kb * 1024 / 1e6:.1f} MB" for n, kb in sorted(sizes.items(), key=lambda x: -x[1])[:8]],
        "names": sorted(sizes),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server-has", nargs="+", default=["python3", "python3-apt"])
    args = ap.parse_args()
    light_packages = yaml.safe_load(DEFAULTS.read_text())["alloclab_apt_packages"]
    with tempfile.TemporaryDirectory() as tmp:
        status = Path(tmp) / "status"
        status.write_text(server_status(args.server_has, installed_stanzas()))
        light = added(light_packages, status)
        canary = added(light_packages + CANARY_PACKAGES, status)
    extra = {n: kb for n, kb in canary.items() if n not in light}
    print(
        json.dumps(
            {
                "server_has": args.server_has,
                "light": {"asked": light_packages, **summary(light)},
                "with_canary_peers": {"asked": light_packages + CANARY_PACKAGES, **summary(canary)},
                "canary_adds": summary(extra),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
