"""alloclab's own scripts run with src/alloclab first on sys.path (tor_dirload.py, the live view's
children ...): a module there named like a standard-library or installed package (bisect,
packaging) would be imported in its place and break them."""

import importlib.metadata
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "alloclab"


def _installed_top_levels() -> set[str]:
    names = set()
    for dist in importlib.metadata.distributions():
        top = dist.read_text("top_level.txt")
        names |= set(top.split()) if top else set()
    return names


def test_no_module_shadows_the_standard_library_or_an_installed_package():
    ours = {p.stem for p in SRC.glob("*.py")} | {p.name for p in SRC.iterdir() if (p / "__init__.py").exists()}
    # alloclab.run.trace predates this rule; the standard library's `trace` (a coverage tool) is imported by
    # nothing alloclab's scripts load, so it is the one name allowed
    clash = sorted(
        ours & (set(sys.stdlib_module_names) | _installed_top_levels() | {"packaging", "setuptools", "pip"}) - {"trace"}
    )
    assert not clash, f"rename these modules: {clash}"


def test_the_directory_load_script_runs_as_a_script():
    import subprocess

    out = subprocess.run(
        [sys.executable, str(SRC / "tor" / "dirload.py"), "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and "usage" in out.stdout.lower(), out.stderr[-500:]
