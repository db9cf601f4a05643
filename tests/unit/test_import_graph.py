"""The imports of alloclab's own modules run one way (issue 17, "a one-way house").

Static: every `import` / `from` statement of every module under src/alloclab, function-local ones
included, read with `ast`; the graph of alloclab.* modules must have no cycle. Then the layering
the data flow asks for (experiment file -> runner -> sampler -> store -> analysis -> reporters):
nothing before the store reaches it, fleet does not reach the runner, and the analysis and the
reporters are a pure function of the store: they reach no module that reads the host (allocator
libraries, processes, the network: PURE_FORBIDDEN, issue 28). Dynamic: each checked module
imported alone in a fresh interpreter loads no module it must not.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from functools import cache
from pathlib import Path

import alloclab

PACKAGE = Path(alloclab.__file__).parent

# Modules that write to or read from a run's store: everything else comes before it in the flow.
STORE_USERS = {
    "store",
    "capture.recorder",
    "run.runner",
    "fleet.deploy",
    "fleet.collector",
    "process.watchdog",
    "reporters.report",
    "torutils.export",
    "torutils.importer",
    "interchange.prometheus_import",
    "interchange.merge",
    "cli",
    "__main__",
    "docsgen.reference",  # the generated CLI reference reads cli's declarations (as --help does)
    "analysis.two_runs",
    "serve.liveview",
    "interchange.bundle",
    "serve.metrics",  # compare, live view, bundle and run --metrics read runs
    "studies.bisection",
    "studies.sweep",  # bisect and sweep drive runs (runner) and read their results (analysis)
    "run.stopping",  # the runner's sequential stop checks analyse the store as it stands
    "capture.introspect",  # writes the allocator helper's alloc_stats rows (their held_* columns are the store's)
    "studies.gate",  # the CI gate drives one run (runner) and reads its result, as bisect does
    "fleet.decision",
    "fleet.tested",  # fleet status and deploy --from-run read a fleet run's store
    "fleet.canary",  # the peer-judged canary analyses its cohorts' samples (as fleet status does)
    "fleet.deployed",  # the pre-deploy level is read from the collector's own run store
    "docsgen.metrics",
}  # the generated metrics reference reads metrics' declarations (as reference does)
STORE_USER_PACKAGES = ("analysis", "commands", "reporters")
# What the analysis and the reporters may not reach: what they need from the host is recorded in
# the store at run time (docs/reference/architecture.md).
PURE_PACKAGES = ("analysis", "reporters")
PURE_FORBIDDEN = {
    "allocators.library",
    "allocators.tunables",
    "allocators.hardening",
    "allocators.catalog",
    "allocators.resolution",
    "allocators.versions",
    "allocators.debpackage",
    "allocators.embedded",
    "capture.introspect",
    "native.build",
    "tor.network",
    "tor.dirload",
    "tor.routers",
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _targets(name: str, path: Path, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The alloclab modules one import statement loads (its own ancestor packages left out)."""
    if isinstance(node, ast.Import):
        found = {a.name for a in node.names}
    else:
        if node.level:
            package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
            base = ".".join(package[: len(package) - (node.level - 1)] + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        submodules = {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES}
        found = submodules | ({base} if len(submodules) < len(node.names) else set())
    return {t for t in found if t in MODULES and t != name and not name.startswith(t + ".")}


@cache  # read once per session: every test below asks for the same graph
def import_graph() -> dict[str, set[str]]:
    graph = {}
    for name, path in MODULES.items():
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):  # function-local imports too
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges |= _targets(name, path, node)
        graph[name] = edges
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def _reach(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def _short(name: str) -> str:
    return name.removeprefix("alloclab.")


def _uses_store(name: str) -> bool:
    short = _short(name)
    return short in STORE_USERS or short.split(".")[0] in STORE_USER_PACKAGES


def test_the_graph_is_read_in_full():
    graph = import_graph()
    assert "alloclab.allocators.resolution" in graph[
        "alloclab.run.runner"
    ] or "alloclab.allocators.resolution" in _reach(graph, "alloclab.run.runner")
    assert "alloclab.allocators.catalog" in graph["alloclab.allocators.resolution"]
    # a function-local import counts: cli imports its verbs inside the click functions
    assert "alloclab.commands.run" in graph["alloclab.cli"]


def test_no_import_cycle():
    cycle = _cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(_short(m) for m in cycle)


def test_a_planted_cycle_is_found():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_catalog_is_above_allocators():
    graph = import_graph()
    assert "alloclab.allocators.catalog" not in _reach(graph, "alloclab.allocators.library")
    assert "alloclab.allocators.library" in graph["alloclab.allocators.catalog"]


def test_nothing_before_the_store_reaches_it():
    graph = import_graph()
    offenders = {
        _short(m): sorted(_short(x) for x in _reach(graph, m) if _uses_store(x))
        for m in graph
        if not _uses_store(m) and "alloclab.store" in _reach(graph, m)
    }
    assert not offenders, f"modules before the store in the flow that import it: {offenders}"


def _impure(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """Modules of PURE_PACKAGES that reach a PURE_FORBIDDEN module (directly or through others)."""
    forbidden = {f"alloclab.{m}" for m in PURE_FORBIDDEN}
    return {
        _short(m): sorted(_short(x) for x in _reach(graph, m) & forbidden)
        for m in graph
        if _short(m).split(".")[0] in PURE_PACKAGES and _reach(graph, m) & forbidden
    }


def test_analysis_and_reporters_do_not_reach_the_host():
    offenders = _impure(import_graph())
    assert not offenders, f"analysis/reporters modules that reach host-reading modules: {offenders}"


def test_a_planted_host_import_is_found():
    # the shape issue 28 found: a reporter importing hardening, the analysis reaching allocators through a helper
    graph = {
        "alloclab.reporters.markdown": {"alloclab.allocators.hardening"},
        "alloclab.allocators.hardening": {"alloclab.native.build"},
        "alloclab.native.build": set(),
        "alloclab.analysis.warnings": {"alloclab.common.timefmt"},
        "alloclab.common.timefmt": {"alloclab.allocators.library"},
        "alloclab.allocators.library": set(),
        "alloclab.reporters.csv_tables": {"alloclab.store"},
        "alloclab.store": set(),
    }
    assert _impure(graph) == {
        "reporters.markdown": ["allocators.hardening", "native.build"],
        "analysis.warnings": ["allocators.library"],
    }


def test_a_report_loads_no_host_reading_module():
    """Dynamic: every analysis and reporters module, and `report`, imported in one fresh interpreter."""
    pure = sorted(m for m in MODULES if _short(m).split(".")[0] in PURE_PACKAGES)
    script = (
        "import importlib, json, sys\nfor m in sys.argv[1:]: importlib.import_module(m)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('alloclab'))))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, "alloclab.reporters.report", *pure], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-500:]
    loaded = {_short(m) for m in json.loads(proc.stdout)}
    assert "analysis.decomposition" in loaded and "reporters.html" in loaded
    assert not loaded & PURE_FORBIDDEN, f"a report loads {sorted(loaded & PURE_FORBIDDEN)}"


def test_fleet_does_not_import_the_runner():
    assert "alloclab.run.runner" not in _reach(import_graph(), "alloclab.fleet.deploy")


def test_the_runner_does_not_reach_the_analysis():
    """Data flows runner -> ... -> analysis: what both need (signal names) lives below both."""
    graph = import_graph()
    reached = sorted(
        _short(m)
        for m in _reach(graph, "alloclab.run.runner")
        if _short(m).split(".")[0] in ("analysis", "stats", "reporters")
    )
    assert not reached, f"the runner reaches {reached}"
    assert (
        "alloclab.common.signalname" in graph["alloclab.run.runner"]
        and "alloclab.common.signalname" in graph["alloclab.analysis.warnings"]
    )


# One interpreter that has loaded the third-party libraries (none of them loads alloclab) forks a
# child per module: each child starts with no alloclab module loaded, as a fresh interpreter does,
# without paying numpy's and scipy's import again (~70 interpreters took minutes on a loaded machine).
FORKING_IMPORTER = """
import importlib, json, os, sys
for lib in ("numpy", "scipy.stats", "scipy.optimize", "click", "rich.console", "matplotlib", "plotly", "prometheus_client"):
    try:
        importlib.import_module(lib)
    except ImportError:
        pass
assert not [m for m in sys.modules if m.startswith("alloclab")]
for module in sys.argv[1:]:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            importlib.import_module(module)
            answer = {"loaded": sorted(m for m in sys.modules if m.startswith("alloclab"))}
        except BaseException as e:
            answer = {"error": f"{type(e).__name__}: {e}"}
        os.write(write, json.dumps(answer).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        text = f.read()
    os.waitpid(pid, 0)
    print(json.dumps({"module": module, **json.loads(text)}))
"""


def test_fresh_interpreters_load_only_what_the_layering_allows():
    lower = sorted(m for m in MODULES if not _uses_store(m) and m != "alloclab")
    proc = subprocess.run(
        [sys.executable, "-c", FORKING_IMPORTER, *lower, "alloclab.fleet.deploy"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr.strip().splitlines()[-1:]
    answers = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [a["module"] for a in answers] == lower + ["alloclab.fleet.deploy"]
    for answer in answers:
        module = answer["module"]
        assert "error" not in answer, f"{module} does not import on its own: {answer.get('error')}"
        loaded = set(answer["loaded"])
        assert module in loaded
        if module == "alloclab.fleet.deploy":
            assert "alloclab.run.runner" not in loaded
        else:
            assert "alloclab.store" not in loaded, f"{module} loads the store"
