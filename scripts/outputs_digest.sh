#!/usr/bin/env bash
# A digest of everything alloclab writes for a few stores and the operators' datasets, for a change
# that must not change any output (a move, a split, a rename, a formatter): run it before and after,
# then compare the two files.
#
#   bash scripts/outputs_digest.sh before.sha RUN_DIR...    # RUN_DIR: a run directory with run.db
#   ... change ...
#   bash scripts/outputs_digest.sh after.sha RUN_DIR... && diff before.sha after.sha
#
# Per store: `report -o`, `report --json` and the report's stdout. Per TorUtils dataset in
# tests/data/1aeo-torutils: `import torutils`, its report and `export`. Every file's sha256, a SQL
# dump instead of each run.db (page layout may differ where the content does not). It works in one
# fixed scratch directory, because paths appear in the outputs.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: bash scripts/outputs_digest.sh OUT.sha [RUN_DIR...]" >&2; exit 2; }
repo="$(cd "$(dirname "$0")/.." && pwd)"
out="$(realpath -m "$1")"; shift
alloclab="$repo/.venv/bin/alloclab"
work=/tmp/alloclab-outputs-digest
rm -rf "$work"; mkdir -p "$work"
n=0
for run in "$@"; do
  n=$((n + 1)); d="$work/store$n"; mkdir -p "$d"
  [ -f "$run/run.db" ] || { echo "outputs_digest: no run.db in $run" >&2; exit 2; }
  sqlite3 "$run/run.db" ".backup $d/run.db"
  "$alloclab" report "$d" -o "$d/report" > "$d/stdout.txt" 2>&1 || echo "exit $?" >> "$d/stdout.txt"
  "$alloclab" report "$d" --json > "$d/json.txt" 2>&1 || echo "exit $?" >> "$d/json.txt"
done
for ds in "$repo"/tests/data/1aeo-torutils/*/; do
  name=$(basename "$ds"); d="$work/torutils-$name"
  "$alloclab" import torutils "$ds" -o "$d/run" > "$d.import.txt" 2>&1 || echo "exit $?" >> "$d.import.txt"
  "$alloclab" report "$d/run" -o "$d/report" > "$d.report.txt" 2>&1 || echo "exit $?" >> "$d.report.txt"
  "$alloclab" export "$d/run" -o "$d/export" > "$d.export.txt" 2>&1 || echo "exit $?" >> "$d.export.txt"
done
cd "$work"
find . -name run.db | while read -r db; do sqlite3 "$db" .dump > "$db.sql"; done
find . -type f ! -name '*.db' ! -name '*.db-*' | sort | xargs sha256sum > "$out"
echo "outputs_digest: $(wc -l < "$out") files -> $out"
