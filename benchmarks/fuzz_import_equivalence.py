"""Differential fuzz of `import torutils` (issue 16 item 5): the mutations of fuzz_import.py applied
to the 1AEO datasets, an alloclab export and a generated co-unified file, each imported in-process
by the importer before streaming (commit b5a2729's src/alloclab/torutils.py, loaded from git by
make_import_golden.importer_at: no copy in the tree), the streaming importer and the streaming
importer without its fast path. Counts cases where they disagree: a
different first problem (message), or different store content (every table, rowid order, SQLite
types, read as the golden records' schema: test_import_equivalence.store_digest). Target: 0.

    PYTHONPATH=src .venv/bin/python benchmarks/fuzz_import_equivalence.py --mutations 500 --seed 1

Cases that hang are not guarded here (fuzz_import.py does that); the ones that disagree are kept
under --keep to reproduce. Not part of the default test run; figures in benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "src"), str(REPO), str(REPO / "benchmarks")]

from fuzz_import import make_bases, mutated_cases
from make_import_golden import importer_at


def outcome(run, folder: Path, out: Path) -> tuple[str, object]:
    from alloclab.common.errors import UserError
    from tests.integration.test_import_equivalence import store_digest

    try:
        run(folder, out)
    except UserError as exc:
        return "error", str(exc)
    except Exception as exc:  # a crash is an outcome to compare
        return "crash", f"{type(exc).__name__}: {exc}"[:300]
    # per table, as the golden records compare: the importer before writes that commit's schema (6),
    # without the columns added since; store_digest reads both stores as that schema
    return "store", store_digest(out / "run.db", folder)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mutations", type=int, default=500)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", type=Path, help="where disagreeing cases are kept (default: a temp dir)")
    args = ap.parse_args()
    from alloclab.torutils import importer
    from tests.integration.test_import_equivalence import _generate, make_export

    work = Path(tempfile.mkdtemp(prefix="alloclab-fuzz-equivalence-"))
    keep = args.keep or work / "disagreements"
    keep.mkdir(parents=True, exist_ok=True)
    bases = make_bases(work, ("co-guard-2025-09", "5way-2026-01", "co-unified-2025-12"))
    bases["generated"] = _generate(work / "base" / "generated", times=60)
    # the export as the importer before can read it: without the columns added since (schema 7)
    bases["alloclab-export"] = make_export(work / "base" / "export-as-golden")
    importers = {
        "before": importer_at().import_torutils,
        "streaming": importer.import_torutils,
        "row-by-row": lambda f, o: importer.import_torutils(f, o, fast=False),
    }
    rng = random.Random(args.seed)
    counts = {"cases": 0, "stores_equal": 0, "errors_equal": 0, "crashes_equal": 0, "fixed_crashes": 0, "disagree": 0}
    started = time.monotonic()
    for n, base_name, case, what in mutated_cases(bases, work, rng, args.mutations):
        if any(p.is_fifo() for p in (case / "in").rglob("*")):
            what += " (fifo)"
        results = {name: outcome(run, case / "in", case / name) for name, run in importers.items()}
        counts["cases"] += 1
        kinds = {r[0] for r in results.values()}
        if (
            results["before"][0] == "crash"
            and results["streaming"] == results["row-by-row"]
            and results["streaming"][0] != "crash"
        ):
            counts["fixed_crashes"] += 1  # the importer before crashed here (a traceback)
        elif len({json.dumps(r, default=str) for r in results.values()}) == 1:
            counts[{"store": "stores_equal", "error": "errors_equal", "crash": "crashes_equal"}[kinds.pop()]] += 1
        else:
            counts["disagree"] += 1
            dest = keep / f"{n:05d}"
            shutil.copytree(case / "in", dest / "in", symlinks=True, ignore_dangling_symlinks=True)
            shown = {
                k: (v[0], v[1] if v[0] != "store" else {t: d["rows"] for t, d in v[1].items()})
                for k, v in results.items()
            }
            (dest / "what.txt").write_text(
                f"base {base_name}\nmutation {what}\n{json.dumps(shown, indent=1, default=str)}\n"
            )
            print(f"case {n} ({base_name}: {what}): disagree {json.dumps(shown, default=str)[:600]}", file=sys.stderr)
        shutil.rmtree(case, ignore_errors=True)
        if (n + 1) % 100 == 0:
            print(f"{n + 1} cases, {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    summary = {
        **counts,
        "seed": args.seed,
        "seconds": round(time.monotonic() - started, 1),
        "disagreements_kept_in": str(keep),
    }
    print(json.dumps(summary, indent=1))
    shutil.rmtree(work / "base", ignore_errors=True)
    return 1 if counts["disagree"] else 0


if __name__ == "__main__":
    sys.exit(main())
