"""Fleet under a hostile --root: symbolic links planted below it are refused, never followed
(rootfs.Root; docs/reference/security.md, "Fleet")."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from alloclab.fleet import deploy, systemd
from alloclab.fleet.plan import make_plan
from tests.conftest import run_cli


@pytest.fixture
def site(tmp_path):
    """A root with one running stand-in unit, a one-group (glibc) plan, and a file outside the root."""
    root = tmp_path / "root"
    units = root / "etc" / "systemd" / "system"
    units.mkdir(parents=True)
    (units / "svc.service").write_text("[Service]\nExecStart=/bin/sleep 3600\n")
    (tmp_path / "groups.toml").write_text(
        'name = "g"\ncommand = ["/bin/true"]\n[[group]]\nname = "glibc"\nallocator = "glibc"\n'
    )
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "shadow"
    victim.write_text("precious\n")
    local = systemd.LocalUnits(root)
    local.restart("svc.service")
    plan = make_plan(local, "svc", tmp_path / "groups.toml", 1, tmp_path / "plan.json")
    yield root, plan, outside, victim
    for pidfile in (root / "run" / "alloclab-units").glob("*.pid"):
        try:
            os.killpg(int(pidfile.read_text().split()[0]), signal.SIGKILL)
        except (ProcessLookupError, ValueError, OSError):
            pass


def _everything(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_a_link_at_the_temporary_name_is_replaced_not_followed(site):
    root, plan, outside, victim = site
    dropin_dir = root / "etc" / "systemd" / "system" / "svc.service.d"
    dropin_dir.mkdir()
    for name in ("50-alloclab.tmp", "50-alloclab.conf.tmp", ".50-alloclab.conf.tmp"):
        (dropin_dir / name).symlink_to(victim)
    deploy.apply_plan(systemd.LocalUnits(root), plan, batch=1, dry_run=False, say=lambda s: None, timeout=10)
    assert victim.read_text() == "precious\n"
    assert "LD_PRELOAD" in (dropin_dir / "50-alloclab.conf").read_text()
    assert not (dropin_dir / "50-alloclab.conf").is_symlink()


def test_a_link_at_the_dropin_itself_is_refused_and_its_target_untouched(site):
    root, plan, outside, victim = site
    dropin_dir = root / "etc" / "systemd" / "system" / "svc.service.d"
    dropin_dir.mkdir()
    (dropin_dir / "50-alloclab.conf").symlink_to(victim)  # the backup step would read through it
    r = run_cli("fleet", "apply", str(plan.path), "--root", str(root), "--systemctl", "local")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "symbolic link" in r.stderr and len(r.stderr.strip().splitlines()) <= 2, r.stderr
    assert victim.read_text() == "precious\n" and _everything(outside) == {"shadow": b"precious\n"}


@pytest.mark.parametrize("linked", ["etc/systemd/system/svc.service.d", "var/lib/alloclab", "var/lib/alloclab/fleet"])
def test_a_linked_dropin_or_state_directory_is_refused_in_one_line(site, linked):
    root, plan, outside, victim = site
    link = root / linked
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside)
    r = run_cli("fleet", "apply", str(plan.path), "--root", str(root), "--systemctl", "local")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "symbolic link" in r.stderr and str(link) in r.stderr, r.stderr
    assert _everything(outside) == {"shadow": b"precious\n"}, "a file was written outside --root"


def test_rollback_through_a_linked_state_directory_is_refused(site):
    root, plan, outside, victim = site
    deploy.apply_plan(systemd.LocalUnits(root), plan, batch=1, dry_run=False, say=lambda s: None, timeout=10)
    state = root / "var" / "lib" / "alloclab"
    os.rename(state, outside / "moved")
    state.symlink_to(outside / "moved")
    before = _everything(outside)
    r = run_cli("fleet", "rollback", "--root", str(root), "--systemctl", "local")
    assert r.returncode == 2 and "symbolic link" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert _everything(outside) == before


def test_fleet_plan_refuses_a_template_unit(tmp_path):
    """`a@.service` is a template (systemd cannot start it); a plan naming it is refused, not written."""
    root = tmp_path / "root"
    (root / "etc" / "systemd" / "system").mkdir(parents=True)
    (root / "etc" / "systemd" / "system" / "a@.service").write_text("[Service]\nExecStart=/bin/sleep 30\n")
    (tmp_path / "groups.toml").write_text(
        'name = "g"\ncommand = ["/bin/true"]\n[[group]]\nname = "glibc"\nallocator = "glibc"\n'
    )
    r = run_cli(
        "fleet",
        "plan",
        "--units",
        "a@*",
        "--groups",
        str(tmp_path / "groups.toml"),
        "-o",
        str(tmp_path / "p.json"),
        "--root",
        str(root),
        "--systemctl",
        "local",
    )
    assert r.returncode == 2 and "a@.service" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "p.json").exists()
    assert systemd.validate_unit("a@b.service") == "a@b.service"
