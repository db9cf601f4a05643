"""A test module that needs something beyond Python and this checkout says so with a marker (issue 53),
so `-m 'not slow and not network'` (make test-fast) or `-m 'not slow and not root and not ssh'` selects
a part of the suite that can run here: importing a helper that starts the thing, or starting it
directly, without the matching marker (module `pytestmark`, or `@pytest.mark.NAME` on the tests that
need it) fails here. The rules below are a floor: a module may say more than they can see (the real
demo asks the registries through the command it runs)."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"

# (helper module, name imported from it) -> the markers a module importing it needs
HELPERS = {
    ("tests.browser", "Browser"): {"browser"},  # headless chromium
    ("tests.registries", "published_library"): {"network"},  # a registry when not cached
    ("tests.registries", "registry_or_skip"): {"network"},
    ("tests.prebuild", "embedded_rust"): {"network"},  # cargo fetches crates
    ("tests.systemd_user", "user_manager"): {"root"},  # systemd in a mount namespace
    ("tests.integration.systemd_host", "Host"): {"root"},  # namespaces, cgroups, systemd
    ("tests.integration", "systemd_host"): {"root"},
    ("tests.integration.ansible_fleet", "fleet"): {"ssh", "root", "tor"},  # sshd per namespace, tor units
    ("tests.integration.ansible_fleet", "write_inventory"): {"ssh", "root", "tor"},
    ("tests.integration.test_prometheus", "start_prometheus"): {"prometheus"},  # a real Prometheus server
    ("tests.integration.test_prometheus", "make_host"): {"prometheus"},
}
# starting the thing directly, in the module's own code
CALLS = {
    r'which\("chromium"\)': {"browser"},
    r'which\("(prometheus|promtool)"\)': {"prometheus"},
    r'which\("tor"\)': {"tor"},
    r'"unshare"|geteuid\(\) != 0|"mount", "-t"': {"root"},
}
NEEDS = ("network", "root", "browser", "tor", "prometheus", "ssh")


# modules whose marker waits for work in flight on them (the lead adds it): module -> the marker
PENDING: dict[str, str] = {}  # module -> marker it still lacks (an expected failure until added)


def _test_modules() -> list[Path]:
    return sorted(
        p
        for d in ("unit", "integration", "e2e")
        for p in (TESTS / d).glob("test_*.py")
        if p != Path(__file__).resolve()
    )


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts)


def _marks(node: ast.AST) -> set[str]:
    """pytest.mark.NAME (called or not) anywhere under node."""
    return {
        n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute)
        and isinstance(n.value, ast.Attribute)
        and n.value.attr == "mark"
        and isinstance(n.value.value, ast.Name)
        and n.value.value.id == "pytest"
    }


def declared(path: Path) -> set[str]:
    """The markers the module names: its pytestmark (or one it imports), its tests' decorators, a
    decorator of its own (pytest.mark.NAME anywhere in it)."""
    tree = ast.parse(path.read_text())
    found = _marks(tree)
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and any(a.name == "pytestmark" for a in node.names):
            found |= declared((REPO / Path(*node.module.split("."))).with_suffix(".py"))
    return found


def required(path: Path) -> dict[str, str]:
    """marker -> why, from the helpers the module imports and what it starts itself."""
    text = path.read_text()
    why: dict[str, str] = {}
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                for marker in HELPERS.get((node.module, alias.name), ()):
                    why.setdefault(marker, f"imports {alias.name} from {node.module}")
    for pattern, markers in CALLS.items():
        if m := re.search(pattern, text):
            for marker in markers:
                why.setdefault(marker, f"calls {m.group(0)}")
    return why


def test_the_markers_are_registered_with_pytest():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    registered = {m.split(":", 1)[0].strip() for m in config["markers"]}
    assert set(NEEDS) <= registered, set(NEEDS) - registered
    assert "--strict-markers" in config["addopts"]  # a misspelt marker is an error, not a silent no-op


@pytest.mark.parametrize("path", _test_modules(), ids=lambda p: str(p.relative_to(TESTS)))
def test_a_module_that_needs_something_is_marked(path):
    missing = {m: why for m, why in required(path).items() if m not in declared(path)}
    if missing and set(missing) == {PENDING.get(str(path.relative_to(TESTS)))}:
        pytest.xfail(f"marker pending: {missing}")
    assert not missing, (
        f"{path.relative_to(REPO)} needs pytestmark = [{', '.join(f'pytest.mark.{m}' for m in missing)}]: {missing}"
    )


def test_the_checker_sees_a_helper_and_a_direct_start(tmp_path):
    """The rules above can fail: a module using the browser helper and tor, marked only for one of them."""
    bad = tmp_path / "test_x.py"
    bad.write_text(
        "import pytest, shutil\nfrom tests.browser import Browser\n"
        'pytestmark = [pytest.mark.browser]\nTOR = shutil.which("tor")\n'
    )
    assert set(required(bad)) == {"browser", "tor"} and declared(bad) == {"browser"}
