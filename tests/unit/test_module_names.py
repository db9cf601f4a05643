"""alloclab's scripts run by path (tor/dirload.py, tor/routers.py, tor/traffic.py) have their own
directory first on sys.path: a module there named like a standard-library or installed package
(bisect, packaging) would be imported in its place and break them. The same for the package's top
directory, where a script run by path would meet the packages' names."""

import importlib.metadata
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "alloclab"
SCRIPT_DIRS = (SRC, SRC / "tor")


def test_the_script_directories_hold_every_script_run_by_path():
    """A module with a `__main__` block run by path (not `-m`) lives in one of SCRIPT_DIRS."""
    scripts = {p.parent for p in SRC.rglob("*.py") if 'if __name__ == "__main__"' in p.read_text()}
    run_by_path = {
        d
        for d in scripts
        if any(f'with_name("{p.name}")' in q.read_text() for p in d.glob("*.py") for q in SRC.rglob("*.py"))
    }
    assert SRC / "tor" in run_by_path  # the tor scenario's helpers: the ones there are now
    assert run_by_path <= set(SCRIPT_DIRS), sorted(map(str, run_by_path - set(SCRIPT_DIRS)))


def _installed_top_levels() -> set[str]:
    names = set()
    for dist in importlib.metadata.distributions():
        top = dist.read_text("top_level.txt")
        names |= set(top.split()) if top else set()
    return names


def test_no_module_shadows_the_standard_library_or_an_installed_package():
    ours = set()
    for folder in SCRIPT_DIRS:
        ours |= {p.stem for p in folder.glob("*.py")} | {
            p.name for p in folder.iterdir() if (p / "__init__.py").exists()
        }
    clash = sorted(ours & (set(sys.stdlib_module_names) | _installed_top_levels() | {"packaging", "setuptools", "pip"}))
    assert not clash, f"rename these modules: {clash}"


def test_the_directory_load_script_runs_as_a_script():
    import subprocess

    out = subprocess.run(
        [sys.executable, str(SRC / "tor" / "dirload.py"), "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and "usage" in out.stdout.lower(), out.stderr[-500:]
