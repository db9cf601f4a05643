"""Writes tests/data/import_golden.json, the golden records tests/integration/test_import_equivalence.py
holds the streaming importer to: for every case of that test (its inputs are built by the test's own
build_case, deterministically), the store the importer BEFORE streaming made of it (commit b5a2729's
src/alloclab/torutils.py and the store.py it wrote through, loaded from git at generation time, no
copy in the tree) as a row count and sha256 per table (rowid order, each value with its SQLite
type), or the one-line message it gave.

    PYTHONPATH=src .venv/bin/python benchmarks/make_import_golden.py            # rewrites the file
    PYTHONPATH=src .venv/bin/python benchmarks/make_import_golden.py --out /tmp/g.json   # e.g. to compare two runs

One case is recorded from the CURRENT importer on purpose: "export-without-processes" (an export
whose "alloclab" section lacks "processes"), where the importer before crashed with a KeyError
traceback and the streaming one imports; see INTENDED below. Needs a git checkout of alloclab.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COMMIT = "b5a2729"  # the last commit with the importer before streaming (issue 16 item 5)
# Cases whose golden record is the current importer's, because the importer before was wrong there.
INTENDED = {
    "export-without-processes": "the importer before raised KeyError 'processes' (a traceback); "
    "a part left out of the section is now an empty list"
}


def _module_at(commit: str, name: str):
    """src/alloclab/NAME.py as it was at `commit` (read with `git show`), as the module
    alloclab.NAME_COMMIT of today's package: its relative imports resolve there."""
    module_name = f"alloclab.{name}_{commit}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    text = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{commit}:src/alloclab/{name}.py"], capture_output=True, text=True, check=True
    ).stdout
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(module_name, loader=None))
    module.__package__ = "alloclab"
    sys.modules[module_name] = module
    exec(compile(text, f"{commit}:src/alloclab/{name}.py", "exec"), module.__dict__)
    return module


def importer_at(commit: str = COMMIT):
    """alloclab.torutils as it was at `commit`, with the store it wrote through: that commit's
    store.py too (its insert/begin/commit calls predate the typed store API), put in place of
    alloclab.store only while the importer's own imports run. Its other relative imports (errors,
    outputs, timefmt) resolve in today's package. A module with that commit's import_torutils."""
    import alloclab.store  # noqa: F401 - today's, put back below

    today = sys.modules["alloclab.store"]
    sys.modules["alloclab.store"] = _module_at(commit, "store")
    try:
        return _module_at(commit, "torutils")
    finally:
        sys.modules["alloclab.store"] = today


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "data" / "import_golden.json")
    ap.add_argument(
        "--commit", default=COMMIT, help="the commit whose importer makes the records (default %(default)s)"
    )
    args = ap.parse_args()
    sys.path[:0] = [str(REPO / "src"), str(REPO)]
    from alloclab.common.errors import UserError  # noqa: F401 - outcome() catches it
    from alloclab.torutils import importer
    from tests.integration.test_import_equivalence import CASE_IDS, build_case, input_digest, make_export, outcome

    before = importer_at(args.commit)
    full = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", args.commit], capture_output=True, text=True, check=True
    ).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="alloclab-import-golden-"))
    try:
        exported = make_export(work / "exported")
        cases = {}
        for n, case_id in enumerate(CASE_IDS):
            tmp = work / f"case{n}"
            folder = build_case(case_id, tmp / "case", exported)
            run = importer.import_torutils if case_id in INTENDED else before.import_torutils
            record = {"input": input_digest(folder), **outcome(run, folder, tmp / "out")}
            if case_id in INTENDED:
                record["note"] = "recorded from the current importer: " + INTENDED[case_id]
            cases[case_id] = record
            shutil.rmtree(tmp, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    doc = {
        "about": f"made by benchmarks/make_import_golden.py from the importer of commit {full} "
        "(src/alloclab/torutils.py there); see that script",
        "commit": full,
        "cases": cases,
    }
    args.out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"{len(cases)} cases ({sum(c['error'] is None for c in cases.values())} stores) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
