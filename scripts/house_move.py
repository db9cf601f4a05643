"""Moves alloclab's flat modules into packages that show the subsystems (issue 28, items 1 and 5).

    .venv/bin/python scripts/house_move.py          # from the repository's top directory

What it does, on whatever tree it runs in (it is written to be re-run after other branches merge):
1. `git mv` each module of MOVES into its package (a short `__init__.py` docstring is created) and
   splits torutils.py into torutils/{layout,validation,export,importer}.py by the names of SPLIT;
2. rewrites every import of a moved module (read with `ast`, exact spans; absolute, relative,
   parenthesised, function-local) in src/, tests/, benchmarks/, scripts/; the relative imports of
   the moved modules themselves; module objects whose name changed (`allocators.X` -> `library.X`,
   or an `as` alias where the new name is taken); dotted references (`"alloclab.catalog.x"`,
   `-m alloclab.x`) in code, docs/*.md, README.md and benchmarks/README.md; file names in the docs;
3. fixes `__file__`-relative paths (alloclab/data, alloclab/native, sibling scripts) of moved modules;
4. replaces README's layout paragraph.
A second run changes nothing. An import of a moved module it cannot rewrite: one line, exit 1.
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

# old module (under alloclab) -> new module
MOVES = {
    "allocators": "allocators.library",
    "catalog": "allocators.catalog",
    "versions": "allocators.versions",
    "version_range": "allocators.version_range",
    "resolution": "allocators.resolution",
    "debpackage": "allocators.debpackage",
    "tunables": "allocators.tunables",
    "hardening": "allocators.hardening",
    "embedded": "allocators.embedded",
    "allocator_options": "allocators.options",
    "loaderenv": "allocators.loaderenv",
    "bisection": "experiments.bisection",
    "bisect_report": "experiments.bisect_report",
    "sweep": "experiments.sweep",
    "sweep_report": "experiments.sweep_report",
    "derive": "experiments.derive",
    "torutils_fast": "torutils.fastcsv",
    "tornet": "tor.network",
    "tor_dirload": "tor.dirload",
    "tor_routers": "tor.routers",
    "fleet": "fleet.lifecycle",
    "collector": "fleet.collector",
    "rollout": "fleet.rollout",
    "unitaccess": "fleet.unitaccess",
    "unitfile": "fleet.unitfile",
    "rootfs": "fleet.rootfs",
    "fleetread": "fleet.fleetread",
    "hardening_summary": "allocators.hardening_summary",
    "recorder": "tickwriter",
    "native": "nativebuild",
}

# torutils.py split by job: part -> (docstring, top-level names); every other name goes to DEFAULT_PART
SPLIT_MODULE = "torutils"
DEFAULT_PART = "importer"
SPLIT = {
    "layout": ("The TorUtils file layout both directions share: file and column names, and the `alloclab`\n"
               "section of an export's experiment.json.",
               {"MEMORY_COLUMNS", "EXTRA_COLUMNS", "EVENT_COLUMNS", "EVENT_EXTRA_COLUMNS", "DIAG_COLUMNS",
                "DIAG_EXTRA_COLUMNS", "MEMORY_FILES", "_GROUP_FILE", "EXPORT_FORMAT", "EXPORTED_META", "_GROUP_FIELDS",
                "_REPLICA_FIELDS", "_PROCESS_FIELDS", "SAMPLE_FIGURES", "SAMPLE_COLUMNS", "PHASES", "TIERS"}),
    "validation": ("Checks of TorUtils files that may be hostile: sizes, text, headers, numbers, times, names and\n"
                   "an export's `alloclab` section; every problem is one UserError naming the file, line and\n"
                   "column, and what to do about it.",
                   {"MAX_FILE_BYTES", "MAX_NAME_CHARS", "MAX_TEXT_CHARS", "EARLIEST", "LATEST", "LIMITS", "_NUMBER",
                    "_CONTROL", "_TIMES", "_show", "_where", "_check_file", "_read_text", "_csv_rows", "_parse_csv",
                    "_header_problem", "_check_header", "_check_memory_text", "_memory_structure", "_number",
                    "_timestamp", "_row_time", "_name", "_check_group_list_files", "_SECTION_FIELDS", "_FIELD_TYPES",
                    "_json_value_ok", "_check_section", "_check_meta", "MEMORY_FIX", "MEMORY_REQUIRED"}),
    "export": ("`alloclab export --csv`: a run written in the TorUtils layout (memory.csv, events.csv,\n"
               "diagnostics.csv, experiment.json).",
               {"_cell", "export_csv"}),
    "importer": ("`alloclab import torutils`: a TorUtils folder (or an `alloclab export`) read, checked in full,\n"
                 "and only then written as a new run.", set()),
}

PACKAGE_DOCS = {
    "allocators": "Allocator libraries: what one is and whether it may be preloaded (library), a group's allocator\n"
                  "string resolved to a verified build (resolution, catalog, versions, version_range, debpackage),\n"
                  "what a library knows and does (tunables, options, hardening, hardening_summary, embedded) and\n"
                  "the loader's environment (loaderenv). The entry point is resolution.resolve.",
    "experiments": "Experiments derived from a base one and driven over many runs: `alloclab bisect` (bisection,\n"
                   "bisect_report) and `alloclab sweep` (sweep, sweep_report), both built by derive.",
    "tor": "The tor-network scenario: a private Tor network on loopback (network), the directory load its\n"
           "relays serve (dirload) and the signed descriptors of the routers that fill its consensus (routers).",
    "fleet": "Fleet mode on live systemd services: the plan/deploy/rollback life cycle (lifecycle), the\n"
             "collector (with its native reader, fleetread), the rollout guards, and the unit-file, sandbox\n"
             "and root-file helpers they share.",
}

README_LAYOUT = """\
`src/alloclab/` — one module per concept, one package per subsystem: `cli` (the click declarations
only), `config` (experiment files), `preflight` (every check before a run, shared by `check` and
`run`), `runner`, `scenarios` (the protocol a built-in scenario such as `tor.network` implements
for the runner: the runner knows none by name), `stopping` (sequential early-stop checks), `sampler`,
`introspect` (the allocator's own account of a process), `tickwriter` (the per-tick store writer),
`store` (all SQL; typed writes, one `StoreError`), `stats` (calibrated statistics; one simulated
table cached on disk), `analysis` (loading and segments, windows, per-replica
figures, comparisons, warnings, verdict), `report` and `reporters` (one module per output behind one
interface); `allocators/` (what a library is and whether it may be preloaded: `library`; a group's
allocator string to a verified build: `resolution`, `catalog`, `versions`, `version_range`,
`debpackage`; what a library knows and does: `tunables`, `options`, `hardening`, `hardening_summary`, `embedded`;
`loaderenv`); `experiments/` (`bisection`, `sweep`, their reports, and `derive`); `torutils/` (CSV
interchange: `layout`, `validation`, `export`, `importer`, `fastcsv`); `tor/` (the tor-network
scenario: `network`, `dirload`, `routers`); `fleet/` (`lifecycle`: plan, deploy, rollback;
`collector` with its native reader `fleetread`, `rollout`, `unitfile`, `unitaccess`, `rootfs`); `promimport`, `merge`, `runcompare`,
`bundle`, `metrics`, `liveview`, `companion`; `workloads`, `trace`, `trace_codec`; `host`, `reaper`
and `watchdog` (nothing outlives a run), `logcap`, `decimate`, `settings` (every environment
variable read), `errors`, `timefmt` and `outputs`; `commands/` holds one thin file per CLI verb;
`nativebuild` builds `native/` (the C sources, one `native/Makefile`) on first use. `ansible/` holds
the `alloclab.fleet` Ansible collection (roles, playbooks) for many hosts. Tests: `tests/unit`,
`tests/integration`, `tests/e2e`. `benchmarks/` and `docs/`.
"""

ROOT = Path.cwd()
PKG = ROOT / "src" / "alloclab"
PY_DIRS = ("src", "tests", "benchmarks", "scripts")
MD_FILES = ("README.md", "docs", "benchmarks/README.md", "tests/data/README.md")
SELF = Path(__file__).resolve()


class Unrewritable(Exception):
    pass


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout


def path_of(module: str) -> Path:
    return PKG.joinpath(*module.split(".")).with_suffix(".py")


def exists_now(dotted: str) -> bool:
    """alloclab.a.b is a module or package in the tree as it is now."""
    parts = dotted.split(".")[1:]
    if not parts:
        return True
    p = PKG.joinpath(*parts)
    return p.with_suffix(".py").exists() or (p / "__init__.py").exists()


def is_package(dotted: str) -> bool:
    return (PKG.joinpath(*dotted.split(".")[1:]) / "__init__.py").exists()


class Plan:
    def __init__(self) -> None:
        self.moved_now: set[str] = set()     # old short names moved in this run
        self.split_now = False
        self.names: dict[str, str] = {}      # split module's top-level name -> part
        self.old_of: dict[Path, str] = {}    # file moved in this run -> its old dotted name
        self.log: list[str] = []

    # ---- what a dotted name means now -----------------------------------------------------------
    def stale(self, dotted: str) -> bool:
        """`alloclab.X` names an old module that has moved (and, when a package of the same name
        replaced it, that happened in this run)."""
        if not dotted.startswith("alloclab.") or dotted.count(".") != 1:
            return False
        short = dotted.split(".")[1]
        if short not in MOVES and short != SPLIT_MODULE:
            return False
        if not exists_now(dotted):
            return True
        return short in self.moved_now or (short == SPLIT_MODULE and self.split_now)

    def new_home(self, old: str, name: str | None) -> str:
        """Where `name` of the old module `old` (alloclab.X) lives now (the new module's dotted name)."""
        short = old.split(".")[1]
        if short == SPLIT_MODULE:
            if name is None or name not in self.names:
                raise Unrewritable(f"{old}.{name}: not a top-level name of the split module")
            return f"alloclab.{SPLIT_MODULE}.{self.names[name]}"
        return "alloclab." + MOVES[short]


# ---- 1. moves -------------------------------------------------------------------------------------
def ensure_package(plan: Plan, package: str) -> None:
    d = PKG / package
    init = d / "__init__.py"
    if not init.exists():
        d.mkdir(parents=True, exist_ok=True)
        doc = PACKAGE_DOCS.get(package)
        if doc is None and package == SPLIT_MODULE:
            doc = "TorUtils interchange."
        init.write_text(f'"""{doc}"""\n')
        git("add", str(init))
        plan.log.append(f"created {init.relative_to(ROOT)}")


def move_modules(plan: Plan) -> None:
    for old, new in MOVES.items():
        src, dst = PKG / f"{old}.py", path_of(new)
        if src.exists() and dst.exists():
            raise Unrewritable(f"both {src.relative_to(ROOT)} and {dst.relative_to(ROOT)} exist")
        if not src.exists():
            if not dst.exists():
                plan.log.append(f"skipped {old}: neither {src.relative_to(ROOT)} nor {dst.relative_to(ROOT)} exists")
            continue
        if "." in new:
            ensure_package(plan, new.split(".")[0])
        git("mv", str(src), str(dst))
        plan.moved_now.add(old)
        plan.old_of[dst] = f"alloclab.{old}"
        plan.log.append(f"moved alloclab/{old}.py -> alloclab/{new.replace('.', '/')}.py")


# ---- split of torutils.py -------------------------------------------------------------------------
def _defined(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _used(nodes: list[ast.stmt]) -> set[str]:
    return {n.id for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name)}


def split_module(plan: Plan) -> None:
    src = PKG / f"{SPLIT_MODULE}.py"
    if not src.exists():
        if (PKG / SPLIT_MODULE / f"{DEFAULT_PART}.py").exists():
            plan.names = split_names_from_parts()
        return
    text = src.read_text()
    lines = text.splitlines(keepends=True)
    tree = ast.parse(text)
    body = tree.body
    doc = ast.get_docstring(tree)
    head_imports = [n for n in body if isinstance(n, (ast.Import, ast.ImportFrom))]
    rest = [n for n in body if not isinstance(n, (ast.Import, ast.ImportFrom))
            and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str))]
    if any(i.lineno > rest[0].lineno for i in head_imports if rest):
        raise Unrewritable(f"{src.relative_to(ROOT)}: a module-level import after the first definition")
    owner = {}
    for part, (_, names) in SPLIT.items():
        for n in names:
            owner[n] = part
    # each statement's text: from the end of the one before (its leading comments) to its end
    chunks: dict[str, list[tuple[ast.stmt, str]]] = {p: [] for p in SPLIT}
    prev_end = max(i.end_lineno for i in head_imports)
    for node in rest:
        seg = "".join(lines[prev_end:node.end_lineno])
        prev_end = node.end_lineno
        names = _defined(node)
        parts = {owner.get(n, DEFAULT_PART) for n in names} or {DEFAULT_PART}
        if len(parts) != 1:
            raise Unrewritable(f"{src.relative_to(ROOT)}:{node.lineno}: one statement defines names of parts {sorted(parts)}")
        part = parts.pop()
        chunks[part].append((node, seg))
        for n in names:
            plan.names[n] = part
    defined_in = {n: p for n, p in plan.names.items()}
    needs: dict[str, dict[str, set[str]]] = {}
    for part, items in chunks.items():
        used = _used([n for n, _ in items])
        own = {n for n, p in defined_in.items() if p == part}
        needs[part] = {}
        for n in sorted(used - own):
            if n in defined_in:
                needs[part].setdefault(defined_in[n], set()).add(n)
    _check_acyclic(needs)
    ensure_package(plan, SPLIT_MODULE)
    init = PKG / SPLIT_MODULE / "__init__.py"
    init.write_text(f'"""{doc}\n\nParts: layout (file and column names), validation (checks of hostile files), export,\n'
                    f'importer, fastcsv (the columnar fast path of the memory CSV)."""\n')
    git("add", str(init))
    dst_default = PKG / SPLIT_MODULE / f"{DEFAULT_PART}.py"
    git("mv", str(src), str(dst_default))
    for part, items in chunks.items():
        out = [f'"""{SPLIT[part][0]}"""\n']
        used = _used([n for n, _ in items])
        for imp in head_imports:
            seg = ast.get_source_segment(text, imp)
            if isinstance(imp, ast.ImportFrom) and imp.module == "__future__":
                out.append(seg + "\n")
                continue
            keep = [a for a in imp.names if (a.asname or a.name.split(".")[0]) in used]
            if not keep:
                continue
            if len(keep) == len(imp.names):
                out.append(seg + "\n")
            else:
                names = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in keep)
                out.append(f"import {names}\n" if isinstance(imp, ast.Import) else
                           f"from {'.' * imp.level}{imp.module or ''} import {names}\n")
        for other, names in sorted(needs[part].items()):
            out.append(f"from .{other} import {', '.join(sorted(names))}\n")
        head = "".join(_group_imports(out))
        body = "".join(seg for _, seg in items).lstrip("\n")
        gap = "\n\n" if body.startswith(("def ", "class ", "@")) else "\n"
        path = PKG / SPLIT_MODULE / f"{part}.py"
        path.write_text(re.sub(r"\n{4,}", "\n\n\n", head + gap + body).rstrip("\n") + "\n")
        git("add", str(path))
        plan.old_of[path] = f"alloclab.{SPLIT_MODULE}"
        plan.log.append(f"split alloclab/{SPLIT_MODULE}.py -> {path.relative_to(ROOT)} ({len(items)} definitions)")
    plan.split_now = True


def _group_imports(lines: list[str]) -> list[str]:
    """Docstring, then __future__, stdlib/third-party, then relative imports, a blank line between."""
    doc, fut = lines[0], [ln for ln in lines[1:] if ln.startswith("from __future__")]
    rel = [ln for ln in lines[1:] if ln.startswith("from .")]
    other = [ln for ln in lines[1:] if ln not in fut and ln not in rel]
    std = [ln for ln in other if not ln.startswith(("import numpy", "from numpy"))]
    third = [ln for ln in other if ln not in std]
    out = [doc]
    for block in (fut, std, third, rel):
        if block:
            out += block + ["\n"]
    return out[:-1]


def _check_acyclic(needs: dict[str, dict[str, set[str]]]) -> None:
    state: dict[str, int] = {}

    def visit(p: str, path: list[str]) -> None:
        state[p] = 1
        for q in needs[p]:
            if state.get(q) == 1:
                raise Unrewritable(f"the parts of {SPLIT_MODULE} would import each other: {' -> '.join(path + [q])}")
            if q not in state:
                visit(q, path + [q])
        state[p] = 2

    for p in needs:
        if p not in state:
            visit(p, [p])


def split_names_from_parts() -> dict[str, str]:
    names = {}
    for part in SPLIT:
        path = PKG / SPLIT_MODULE / f"{part}.py"
        if path.exists():
            for node in ast.parse(path.read_text()).body:
                for n in _defined(node):
                    names[n] = part
    return names


# ---- 2. imports -----------------------------------------------------------------------------------
def module_name(path: Path) -> str | None:
    try:
        rel = path.relative_to(PKG.parent)
    except ValueError:
        return None
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_of(path: Path, name: str) -> str:
    return name if path.name == "__init__.py" else name.rsplit(".", 1)[0]


def relative(from_package: str, target: str) -> str:
    a, b = from_package.split("."), target.split(".")
    common = 0
    while common < min(len(a), len(b)) and a[common] == b[common]:
        common += 1
    return "." * (len(a) - common + 1) + ".".join(b[common:])


def used_identifiers(tree: ast.AST) -> set[str]:
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.arg):
            out.add(n.arg)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
        elif isinstance(n, ast.alias):
            out.add(n.asname or n.name.split(".")[0])
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            out.update(n.names)
    return out


def rewrite_python(plan: Plan, path: Path, text: str) -> tuple[str, list[str]]:
    tree = ast.parse(text, str(path))
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for ln in lines:
        offsets.append(offsets[-1] + len(ln))

    def pos(line: int, col: int) -> int:
        return offsets[line - 1] + len(lines[line - 1].encode()[:col].decode()) if line <= len(lines) else offsets[-1]

    current = module_name(path)
    old = plan.old_of.get(path)
    base_name = old or current
    moved = old is not None and path in plan.old_of
    edits: list[tuple[int, int, str]] = []
    notes: list[str] = []
    renames: dict[str, str] = {}                 # binding -> new binding (module object whose name changed)
    split_bindings: set[str] = set()             # bindings of the split module as an object
    split_parts_needed: dict[str, dict[str, str]] = {}   # binding -> part -> binding of the part
    taken = used_identifiers(tree)
    import_nodes = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]

    for node in import_nodes:
        indent = " " * node.col_offset
        if isinstance(node, ast.Import):
            new_aliases, changed = [], False
            for a in node.names:
                if plan.stale(a.name) or (a.name.count(".") > 1 and plan.stale(".".join(a.name.split(".")[:2]))):
                    top = ".".join(a.name.split(".")[:2])
                    if top.split(".")[1] == SPLIT_MODULE:
                        raise Unrewritable(f"{path.relative_to(ROOT)}:{node.lineno}: `import {a.name}` of the split module")
                    new_aliases.append(plan.new_home(top, None) + a.name[len(top):] + (f" as {a.asname}" if a.asname else ""))
                    changed = True
                else:
                    new_aliases.append(a.name + (f" as {a.asname}" if a.asname else ""))
            if changed:
                edits.append((pos(node.lineno, node.col_offset), pos(node.end_lineno, node.end_col_offset),
                              "import " + ", ".join(new_aliases)))
            continue
        if node.module == "__future__":
            continue
        if node.level:
            if current is None:
                continue            # a relative import outside the package (tests' own helpers)
            pkg_parts = package_of(path, base_name).split(".")
            up = pkg_parts[:len(pkg_parts) - (node.level - 1)]
            M = ".".join(up + ([node.module] if node.module else []))
            if old == f"alloclab.{SPLIT_MODULE}" and node.level == 1 and node.module in SPLIT:
                M = f"alloclab.{SPLIT_MODULE}.{node.module}"      # a part of the split importing another
        else:
            M = node.module or ""
            if not (M == "alloclab" or M.startswith("alloclab.")):
                if moved and M in MOVES and "." in MOVES[M] and current and \
                        MOVES[M].rsplit(".", 1)[0] == current.rsplit(".", 1)[0].removeprefix("alloclab."):
                    # a script's sibling on sys.path (tor_routers imports tor_dirload)
                    seg_start = pos(node.lineno, node.col_offset)
                    seg = text[seg_start:pos(node.end_lineno, node.end_col_offset)]
                    edits.append((seg_start, seg_start + len(seg), seg.replace(f"from {M} ", f"from {MOVES[M].rsplit('.', 1)[1]} ", 1)))
                continue
        entries: list[tuple[str, str | None, str | None]] = []   # (from-module, name, asname)
        changed = False
        M_top = ".".join(M.split(".")[:2])
        from_stale = plan.stale(M_top) and (M_top == M or not exists_now(M))
        for a in node.names:
            if a.name == "*":
                if from_stale:
                    raise Unrewritable(f"{path.relative_to(ROOT)}:{node.lineno}: `import *` from a moved module")
                entries.append((M, "*", None))
                continue
            if from_stale:
                if M_top != M:
                    raise Unrewritable(f"{path.relative_to(ROOT)}:{node.lineno}: import from {M}, inside a moved module")
                entries.append((plan.new_home(M, a.name), a.name, a.asname))
                changed = True
                continue
            R = f"{M}.{a.name}"
            if plan.stale(R):
                binding = a.asname or a.name
                if a.name == SPLIT_MODULE:
                    split_bindings.add(binding)
                    split_parts_needed[binding] = {}
                    entries.append(("__split__", binding, None))
                    changed = True
                    continue
                new = plan.new_home(R, None)
                parent, base = new.rsplit(".", 1)
                asname = a.asname
                if asname is None and base != a.name:
                    if base in taken:
                        asname = a.name
                        notes.append(f"{path.relative_to(ROOT)}:{node.lineno}: {new} imported as {a.name} ({base} is taken)")
                    else:
                        renames[a.name] = base
                entries.append((parent, base, asname))
                changed = True
                continue
            entries.append((M, a.name, a.asname))
        if not changed and not (moved and node.level):
            continue
        edits.append((pos(node.lineno, node.col_offset), pos(node.end_lineno, node.end_col_offset),
                      ("__IMPORT__", node, entries, indent)))   # rendered once split parts are known

    # module objects whose binding changed: rewrite their uses
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and n.id in renames:
            edits.append((pos(n.lineno, n.col_offset), pos(n.end_lineno, n.end_col_offset), renames[n.id]))
    if split_bindings:
        handled: set[int] = set()
        for n in ast.walk(tree):
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in split_bindings:
                part = plan.names.get(n.attr)
                if part is None:
                    raise Unrewritable(f"{path.relative_to(ROOT)}:{n.lineno}: {n.value.id}.{n.attr} is no name of the split module")
                b = _part_binding(split_parts_needed[n.value.id], part, taken)
                edits.append((pos(n.value.lineno, n.value.col_offset), pos(n.value.end_lineno, n.value.end_col_offset), b))
                handled.add(id(n.value))
            elif isinstance(n, ast.Call) and len(n.args) >= 2 and isinstance(n.args[0], ast.Name) and \
                    n.args[0].id in split_bindings and isinstance(n.args[1], ast.Constant) and isinstance(n.args[1].value, str):
                part = plan.names.get(n.args[1].value)
                if part is None:
                    raise Unrewritable(f"{path.relative_to(ROOT)}:{n.lineno}: {n.args[1].value!r} is no name of the split module")
                b = _part_binding(split_parts_needed[n.args[0].id], part, taken)
                a0 = n.args[0]
                edits.append((pos(a0.lineno, a0.col_offset), pos(a0.end_lineno, a0.end_col_offset), b))
                handled.add(id(a0))
        for n in ast.walk(tree):
            if isinstance(n, ast.Name) and n.id in split_bindings and id(n) not in handled:
                raise Unrewritable(f"{path.relative_to(ROOT)}:{n.lineno}: the split module {n.id} used as a whole")

    # render import statements
    final = []
    for start, end, what in edits:
        if isinstance(what, tuple):
            _, node, entries, indent = what
            final.append((start, end, render_import(plan, path, node, entries, indent, split_parts_needed)))
        else:
            final.append((start, end, what))
    final.sort(key=lambda e: e[0])
    for (_s1, e1, _), (s2, _, _) in zip(final, final[1:]):
        if s2 < e1:
            raise Unrewritable(f"{path.relative_to(ROOT)}: overlapping rewrites near offset {s2}")
    out = text
    for start, end, new in reversed(final):
        out = out[:start] + new + out[end:]
    return out, notes


def _part_binding(needed: dict[str, str], part: str, taken: set[str]) -> str:
    if part not in needed:
        needed[part] = part if part not in taken else f"{SPLIT_MODULE}_{part}"
    return needed[part]


def render_import(plan: Plan, path: Path, node: ast.ImportFrom, entries, indent: str, split_parts_needed) -> str:
    current = module_name(path)
    groups: list[tuple[str, list[str]]] = []
    for frm, name, asname in entries:
        if frm == "__split__":
            for part, binding in sorted(split_parts_needed.get(name, {}).items()):
                item = part + (f" as {binding}" if binding != part else "")
                _add(groups, f"alloclab.{SPLIT_MODULE}", item)
            continue
        _add(groups, frm, name + (f" as {asname}" if asname else ""))
    stmts = []
    for frm, names in groups:
        if node.level and current is not None:
            where = relative(package_of(path, current), frm)
        else:
            where = frm
        stmts.append(_wrap(f"from {where} import ", names, indent))
    return ("\n" + indent).join(stmts) if stmts else "pass"


def _add(groups: list[tuple[str, list[str]]], frm: str, item: str) -> None:
    for g in groups:
        if g[0] == frm:
            if item not in g[1]:
                g[1].append(item)
            return
    groups.append((frm, [item]))


def _wrap(head: str, names: list[str], indent: str) -> str:
    line = head + ", ".join(names)
    if len(indent) + len(line) <= 120:
        return line
    body, cur = [], indent + "    "
    for n in names:
        if len(cur) + len(n) + 2 > 120 and cur.strip():
            body.append(cur.rstrip())
            cur = indent + "    "
        cur += n + ", "
    body.append(cur.rstrip().rstrip(","))
    return head + "(\n" + "\n".join(body) + ",\n" + indent + ")"


# ---- dotted references and file names in text -----------------------------------------------------
DOTTED = re.compile(r"(?<![\w.])alloclab((?:\.[A-Za-z_]\w*)+)")


def rewrite_dotted(plan: Plan, text: str, python: bool, skip: list[tuple[int, int]]) -> tuple[str, int]:
    count = 0

    def repl(m: re.Match) -> str:
        nonlocal count
        if any(s <= m.start() < e for s, e in skip):
            return m.group(0)
        parts = m.group(1)[1:].split(".")
        short = parts[0]
        dotted = f"alloclab.{short}"
        if not plan.stale(dotted):
            return m.group(0)
        same_name = is_package(dotted)
        rest = parts[1:]
        quoted = python and m.start() > 0 and text[m.start() - 1] in "\"'" and text[m.end():m.end() + 1] == text[m.start() - 1]
        if short == SPLIT_MODULE:
            if rest and rest[0] in plan.names:
                new = f"alloclab.{SPLIT_MODULE}.{plan.names[rest[0]]}"
            else:
                return m.group(0)
        elif same_name:
            if rest and exists_now(f"{dotted}.{rest[0]}"):
                return m.group(0)
            if not quoted:           # "alloclab.fleet" in prose is the Ansible collection
                return m.group(0)
            new = plan.new_home(dotted, None)
        else:
            new = plan.new_home(dotted, None)
        count += 1
        return new + "".join("." + r for r in rest)

    return DOTTED.sub(repl, text), count


def rewrite_doc_files(plan: Plan, text: str) -> tuple[str, int]:
    count = 0

    def new_path(short: str) -> str | None:
        if short == SPLIT_MODULE and plan.stale(f"alloclab.{short}"):
            return f"{SPLIT_MODULE}/"
        if short in MOVES and plan.stale(f"alloclab.{short}"):
            return MOVES[short].replace(".", "/") + ".py"
        return None

    def replacer(group: int, prefix):
        def repl(m: re.Match) -> str:
            nonlocal count
            new = new_path(m.group(group))
            if new is None:
                return m.group(0)
            count += 1
            return prefix(m) + new
        return repl

    repl_path = replacer(2, lambda m: f"{m.group(1) or ''}alloclab/")
    repl_tick = replacer(1, lambda m: "`")

    def repl_attr(m: re.Match) -> str:
        """`allocators.check_preload_safe` -> `allocators.library.check_preload_safe`: only where the
        module's own name changed (`catalog.build` still reads right)."""
        nonlocal count
        short, attr = m.group(1), m.group(2)
        if short not in MOVES or MOVES[short].rsplit(".", 1)[-1] == short or not plan.stale(f"alloclab.{short}") \
                or exists_now(f"alloclab.{short}.{attr}"):
            return m.group(0)
        count += 1
        return f"`{MOVES[short]}.{attr}"

    out = []
    for line in text.splitlines(keepends=True):
        if "commit" in line:             # a file as it was at a commit keeps its old path
            out.append(line)
            continue
        line = re.sub(r"(?<![\w/])(src/)?alloclab/(\w+)\.py", repl_path, line)
        line = re.sub(r"`(\w+)\.py(?=[`:\s])", repl_tick, line)
        line = re.sub(r"`(\w+)\.(\w+)(?=[`(])", repl_attr, line)
        out.append(line)
    return "".join(out), count


def rewrite_joined_paths(plan: Plan, text: str) -> tuple[str, int]:
    """`SRC / "tor_dirload.py"` in tests and benchmarks: the file's new place under alloclab."""
    count = 0

    def repl(m: re.Match) -> str:
        nonlocal count
        short = m.group(3)
        if short not in MOVES or not plan.stale(f"alloclab.{short}"):
            return m.group(0)
        count += 1
        parts = MOVES[short].split(".")
        return m.group(1) + " / ".join(f"{m.group(2)}{p}{m.group(2)}" for p in parts[:-1]) + \
            (" / " if len(parts) > 1 else "") + f"{m.group(2)}{parts[-1]}.py{m.group(2)}"

    return re.sub(r"""(/\s*)(["'])(\w+)\.py\2""", repl, text), count


def import_spans(text: str) -> list[tuple[int, int]]:
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for ln in lines:
        offsets.append(offsets[-1] + len(ln))
    return [(offsets[n.lineno - 1], offsets[n.end_lineno]) for n in ast.walk(ast.parse(text))
            if isinstance(n, (ast.Import, ast.ImportFrom))]


# ---- 3. paths relative to __file__ in moved modules -----------------------------------------------
def fix_file_paths(plan: Plan, path: Path, text: str) -> str:
    old = plan.old_of.get(path)
    if old is None:
        return text
    delta = (module_name(path) or "").count(".") - old.count(".")
    if delta > 0:
        text = re.sub(r'(Path\(__file__\)(?:\.resolve\(\))?\.parent)(?= / "(?:data|native)")', r"\1" + ".parent" * delta, text)
    package = (module_name(path) or "").rsplit(".", 1)[0].removeprefix("alloclab")
    for sib, new in MOVES.items():
        if "." in new and "." + new.rsplit(".", 1)[0] == package:
            text = text.replace(f'"{sib}.py"', f'"{new.rsplit(".", 1)[1]}.py"')
    return text


# ---- the import-graph test's short names ------------------------------------------------------------
def fix_graph_test(plan: Plan, text: str) -> str:
    def repl(m: re.Match) -> str:
        short = m.group(2)
        if short == SPLIT_MODULE and plan.split_now:
            users = [p for p in SPLIT if "store import" in (PKG / SPLIT_MODULE / f"{p}.py").read_text()]
            return ", ".join(f"{m.group(1)}{SPLIT_MODULE}.{p}{m.group(1)}" for p in users)
        if short in plan.moved_now:
            return f"{m.group(1)}{MOVES[short]}{m.group(1)}"
        return m.group(0)
    return re.sub(r"([\"'])(\w+)\1", repl, text)


def replace_readme_layout(text: str) -> str:
    m = re.search(r"(## Layout\n\n)(.*?)(\n(?=Libraries:|## ))", text, re.S)
    if not m or m.group(2) == README_LAYOUT:
        return text
    return text[:m.start(2)] + README_LAYOUT + text[m.end(2):]


def tracked(*roots: str) -> list[Path]:
    out = git("ls-files", "-z", "--", *roots).split("\0")
    extra = git("ls-files", "-z", "--others", "--exclude-standard", "--", *roots).split("\0")
    return sorted({ROOT / p for p in out + extra if p and (ROOT / p).exists()})


def main() -> int:
    if not (PKG / "__init__.py").exists():
        print(f"house_move: run it from the repository's top directory (no {PKG.relative_to(ROOT)})", file=sys.stderr)
        return 2
    plan = Plan()
    try:
        move_modules(plan)
        split_module(plan)
        if not plan.names:
            plan.names = split_names_from_parts()
        rewritten, dotted_total, notes = [], 0, []
        for path in tracked(*PY_DIRS):
            if path.suffix != ".py" or path == SELF:
                continue
            text = path.read_text()
            new, n = rewrite_python(plan, path, text)
            notes += n
            new = fix_file_paths(plan, path, new)
            new, d = rewrite_dotted(plan, new, True, import_spans(new))
            dotted_total += d
            if path.is_relative_to(PKG):
                new, d = rewrite_doc_files(plan, new)
            else:
                new, d = rewrite_joined_paths(plan, new)
            dotted_total += d
            if path.name == "test_import_graph.py":
                new = fix_graph_test(plan, new)
            if new != text:
                ast.parse(new, str(path))
                path.write_text(new)
                rewritten.append(path)
        for path in tracked(*MD_FILES) + [ROOT / "pyproject.toml"]:
            if path.suffix not in (".md", ".toml") or not path.exists():
                continue
            text = path.read_text()
            new, d = rewrite_dotted(plan, text, False, [])
            new, f = rewrite_doc_files(plan, new) if path.suffix == ".md" else (new, 0)
            if path == ROOT / "README.md":
                new = replace_readme_layout(new)
            dotted_total += d + f
            if new != text:
                path.write_text(new)
                rewritten.append(path)
    except Unrewritable as exc:
        print(f"house_move: cannot rewrite: {exc}", file=sys.stderr)
        return 1
    for line in plan.log:
        print(line)
    for line in notes:
        print("alias:", line)
    print(f"rewrote {len(rewritten)} files ({dotted_total} dotted names or file names in text)")
    for p in rewritten:
        print("  ", p.relative_to(ROOT))
    if not plan.log and not rewritten:
        print("nothing to do: the tree is already moved")
    return 0


if __name__ == "__main__":
    sys.exit(main())
