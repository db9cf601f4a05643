#!/usr/bin/env bash
# A pull request's memory gate: build the baseline commit and this checkout, run both side by side
# under `alloclab gate` (two groups of one run, replicas interleaved, stopped once decided), and
# fail the job when the candidate is shown to use more than GATE_PCT% more memory.
# Called by examples/ci/github-actions.yml and examples/ci/gitlab-ci.yml; tested by
# tests/integration/test_ci_gate.py. Docs: docs/tutorials/ci-memory-gate.md.
#
# Settings (environment):
#   GATE_BASE_REF  the baseline commit or branch (required), e.g. origin/main
#   GATE_RUN       the program with a fixed input, as run from the top of each tree (required),
#                  e.g. "./build/app --input tests/fixed.dat"; it must keep running (holding its
#                  memory) until stopped, or use a recorded trace (GATE_ARGS, docs/tutorials/ci-memory-gate.md)
#   GATE_BUILD     the build command, run in each tree (default: make)
#   GATE_PCT       the allowed increase in percent (default: 5)
#   GATE_OUT       where the run and report.html go (default: memory-gate; must not exist yet)
#   GATE_ARGS      further `alloclab gate` options, e.g. "--replicas 6 --max-duration 10m"
#   ALLOCLAB       the alloclab command (default: alloclab)
#
# Exit codes are alloclab gate's: 0 shown within, 1 shown above (the build fails), 2 bad input,
# 3 a full disk, 4 undecided within the time limit (never a silent pass), 130 interrupted.
set -euo pipefail
: "${GATE_BASE_REF:?set GATE_BASE_REF to the baseline commit or branch, e.g. origin/main}"
: "${GATE_RUN:?set GATE_RUN to the program and its fixed input, e.g. ./build/app --input tests/fixed.dat}"
build=${GATE_BUILD:-make}
pct=${GATE_PCT:-5}
out=${GATE_OUT:-memory-gate}
alloclab=${ALLOCLAB:-alloclab}

here=$(pwd -P)
work=$(mktemp -d "${TMPDIR:-/tmp}/memory-gate.XXXXXX")
base="$work/base"
cleanup() { git -C "$here" worktree remove --force "$base" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT

echo "memory gate: baseline $GATE_BASE_REF ($(git rev-parse --short "$GATE_BASE_REF")) against this checkout ($(git rev-parse --short HEAD)$(git diff --quiet HEAD -- || echo ', with local changes'))"
git worktree add --detach "$base" "$GATE_BASE_REF" >/dev/null
echo "building the baseline: $build"
(cd "$base" && sh -c "$build")
echo "building the candidate: $build"
sh -c "$build"

mkdir -p "$out"
set +e
# env -C: each side runs from the top of its own tree (GATE_RUN's relative paths are the tree's)
# shellcheck disable=SC2086  # GATE_ARGS is a list of options
"$alloclab" gate --baseline "env -C $(printf %q "$base") $GATE_RUN" \
                 --candidate "env -C $(printf %q "$here") $GATE_RUN" \
                 --fail-on-increase "$pct" -o "$out/run" ${GATE_ARGS:-}
rc=$?
set -e
[ -f "$out/run/report.html" ] && cp "$out/run/report.html" "$out/report.html"
[ -f "$out/run/gate.json" ] && cp "$out/run/gate.json" "$out/gate.json"
exit "$rc"
