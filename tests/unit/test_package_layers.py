"""The packages of alloclab sit in layers that follow the data flow (docs/reference/architecture.md):
a module imports only modules of its own package or of a lower layer; two packages in one layer
(the runner and the fleet) never import each other. Read from the same import graph as
test_import_graph.py (every import statement, function-local ones included).
"""

from __future__ import annotations

from tests.unit.test_import_graph import import_graph

# Lowest first. A package (or top-level module) in no layer fails the test: a new one must be placed.
LAYERS: list[set[str]] = [
    {"common"},  # errors, exit codes, settings, times, safe files
    {"stats", "native", "experiment_file", "store"},  # pure statistics, the C helpers, the experiment file, the store
    {"allocators", "tor", "torutils"},  # allocator libraries, the tor scenario, TorUtils CSV
    {"capture"},  # what a run sees: /proc and cgroups, one tick into the store
    {"process"},  # the processes a run starts, kept in hand
    {"analysis"},  # a pure function of the store
    {"serve"},  # live view and exposition over HTTP
    {"run", "fleet"},  # an experiment run; experiments and rollouts on live services
    {"reporters"},  # every output of an analysis
    {"interchange"},  # other ways into and out of a store
    {"studies"},  # bisect, sweep, gate: many runs
    {"commands"},  # one thin file per CLI verb
    {"cli"},  # the click declarations
    {"docsgen", "__main__"},  # the reference generated from cli; python -m alloclab
]


def package_of(module: str) -> str:
    return module.removeprefix("alloclab.").split(".")[0]


def layer_of(package: str) -> int | None:
    return next((i for i, layer in enumerate(LAYERS) if package in layer), None)


def violations(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for module, targets in sorted(graph.items()):
        if module == "alloclab":
            continue
        a = package_of(module)
        for target in sorted(targets):
            b = package_of(target)
            if target == "alloclab" or a == b:
                continue
            la, lb = layer_of(a), layer_of(b)
            if la is None or lb is None:
                out.append(f"{module} -> {target}: {a if la is None else b} is in no layer")
            elif lb >= la:
                out.append(f"{module} -> {target}: {b} is {'beside' if lb == la else 'above'} {a}")
    return out


def test_every_package_is_in_a_layer():
    packages = {package_of(m) for m in import_graph() if m != "alloclab"}
    placed = set().union(*LAYERS)
    assert packages <= placed, f"place these in LAYERS: {sorted(packages - placed)}"
    assert not placed - packages, f"LAYERS names what no longer exists: {sorted(placed - packages)}"


def test_imports_go_down_the_layers():
    found = violations(import_graph())
    assert not found, "imports against the layers:\n" + "\n".join(found)


def test_a_planted_upward_or_sideways_import_is_found():
    graph = {
        "alloclab.store": {"alloclab.analysis.load"},
        "alloclab.analysis.load": {"alloclab.store"},
        "alloclab.fleet.collector": {"alloclab.run.runner"},
        "alloclab.run.runner": {"alloclab.run.preflight"},
        "alloclab.run.preflight": set(),
        "alloclab.nowhere": {"alloclab.store"},
    }
    assert violations(graph) == [
        "alloclab.fleet.collector -> alloclab.run.runner: run is beside fleet",
        "alloclab.nowhere -> alloclab.store: nowhere is in no layer",
        "alloclab.store -> alloclab.analysis.load: analysis is above store",
    ]
