"""A verified allocator build as a Debian package, so a host without alloclab installs the exact
bytes that won; and the lookup of such an installed package by id.

Layout of `alloclab-<family>-<version>[-<variant>]_<version>-1+<key>_<arch>.deb`:
    /usr/lib/alloclab/<family>-<version>[-<variant>]/<library>          the library, as built
    /usr/lib/alloclab/<family>-<version>[-<variant>]/provenance.json    the build's provenance
    /usr/share/doc/<package>/copyright                                  where the sources came from
Control fields carry the id, the library's sha256, the source and the hardening
(X-Alloclab-*). No maintainer scripts: installing it preloads nothing; an operator or
`alloclab fleet deploy` chooses to preload it (by path or by id, see `installed_library`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..common import settings
from ..common.errors import UserError
from . import catalog, hardening, hardening_summary
from .library import sha256_file

INSTALL_DIR = Path("usr/lib/alloclab")


def package_name(allocator_id: str) -> str:
    """mimalloc@2.1.6+secure -> alloclab-mimalloc-2.1.6-secure (Debian's name rules)."""
    return "alloclab-" + re.sub(r"[^a-z0-9.+-]", "-", allocator_id.lower().replace("@", "-").replace("+", "-"))


def install_dir(allocator_id: str) -> Path:
    """Where the package puts the library, relative to the file-system root."""
    return INSTALL_DIR / allocator_id.replace("@", "-").replace("+", "-")


def _depends(lib: Path) -> list[str]:
    """The Debian packages that provide the libraries this one needs (ldd -> dpkg -S)."""
    proc = subprocess.run(["ldd", str(lib)], capture_output=True, text=True)
    paths = re.findall(r"=>\s+(/\S+)", proc.stdout)
    pkgs = set()
    for p in paths:
        found = subprocess.run(["dpkg", "-S", os.path.realpath(p)], capture_output=True, text=True)
        if found.returncode != 0:
            found = subprocess.run(["dpkg", "-S", p], capture_output=True, text=True)
        if found.returncode == 0:
            pkgs.add(found.stdout.split(":", 1)[0].strip())
    return sorted(pkgs)


def _origin(prov: dict) -> str:
    s = prov.get("source", {})
    if s.get("kind") == "crate":
        return f"crate {s['crate']} {s['crate_version']} (sha256 {s['sha256']})"
    if s.get("kind", "").startswith("debian"):
        return f"Debian {s['suite']} {s['package']} {s['package_version']} (sha256 {s['sha256']})"
    return f"{s.get('kind')} {s.get('package', '')} {s.get('package_version', '')} (sha256 {s.get('sha256')})"


def build_deb(build: catalog.Build, out_dir: Path) -> Path:
    """Write the .deb of one verified build into out_dir; returns its path."""
    if shutil.which("dpkg-deb") is None:
        raise UserError("dpkg-deb is not installed", "install it: apt-get install dpkg")
    catalog.check_integrity(build)
    prov = dict(build.provenance)
    if "hardening" not in prov:
        prov["hardening"] = hardening.features(prov["family"], str(build.path))
    allocator_id = prov["id"]
    name = package_name(allocator_id)
    key = build.dir.name  # the build's content key
    version = f"{prov['version']}-1+{re.sub(r'[^a-z0-9]', '', key.lower())}"
    arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True).stdout.strip() or "amd64"
    out_dir.mkdir(parents=True, exist_ok=True)
    deb = out_dir / f"{name}_{version}_{arch}.deb"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "root"
        lib_dir = root / install_dir(allocator_id)
        lib_dir.mkdir(parents=True)
        shutil.copy2(build.path, lib_dir / build.path.name)
        (lib_dir / "provenance.json").write_text(json.dumps(prov, indent=2, sort_keys=True) + "\n")
        doc = root / "usr/share/doc" / name
        doc.mkdir(parents=True)
        (doc / "copyright").write_text(
            f"{allocator_id} built by alloclab from {_origin(prov)}\n"
            f"recipe {prov.get('recipe')} flags {' '.join(prov.get('flags') or [])}\n"
            "The allocator's own license applies; see its upstream sources.\n"
        )
        (root / "DEBIAN").mkdir()
        depends = _depends(build.path)
        fields = {
            "Package": name,
            "Version": version,
            "Architecture": arch,
            "Section": "libs",
            "Priority": "optional",
            "Maintainer": "alloclab <alloclab@localhost>",
            "Depends": ", ".join(depends) if depends else None,
            "Description": f"{prov['family']} {prov['version']}{' +' + prov['variant'] if prov.get('variant') else ''}"
            f" allocator, as verified by alloclab\n"
            f" The library under /{install_dir(allocator_id)} reports {prov['reported'].get('family')} "
            f"{prov['reported'].get('version')}.\n Built from {_origin(prov)}.\n"
            f" Nothing is preloaded by installing it.",
            "X-Alloclab-Id": allocator_id,
            "X-Alloclab-Library": f"/{install_dir(allocator_id) / build.path.name}",
            "X-Alloclab-Sha256": prov["library_sha256"],
            "X-Alloclab-Source": _origin(prov),
            "X-Alloclab-Hardening": hardening_summary.summary(prov["hardening"]),
        }
        (root / "DEBIAN" / "control").write_text("".join(f"{k}: {v}\n" for k, v in fields.items() if v))
        for dirpath, _dirnames, filenames in os.walk(root):
            os.chmod(dirpath, 0o755)
            for f in filenames:
                os.chmod(os.path.join(dirpath, f), 0o644)
        proc = subprocess.run(
            ["dpkg-deb", "--root-owner-group", "--build", str(root), str(deb)], capture_output=True, text=True
        )
        if proc.returncode != 0:
            raise UserError(
                f"dpkg-deb failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}",
                "check the output directory is writable",
            )
    return deb


def installed_library(allocator_id: str) -> tuple[Path, dict] | None:
    """The library of an installed alloclab package for this id, with its provenance, if its bytes
    still match the recorded sha256; None when no such package is installed."""
    d = settings.package_root() / install_dir(allocator_id)
    prov_file = d / "provenance.json"
    if not prov_file.exists():
        return None
    prov = json.loads(prov_file.read_text())
    lib = d / prov["library"]
    if not lib.exists() or sha256_file(lib) != prov["library_sha256"]:
        raise UserError(
            f"the installed package of {allocator_id} does not match its provenance ({lib})",
            f"reinstall it: dpkg -i {package_name(allocator_id)}_*.deb",
        )
    return lib, prov
