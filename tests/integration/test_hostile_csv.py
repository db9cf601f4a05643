"""Hostile imports (issue 17, item 2): every malformed TorUtils folder gets one line naming the file,
line and column and the fix, and no output directory is created. In-process on copies of the real
datasets; a few cases through the real CLI for the exit code. The fuzz campaign is
benchmarks/fuzz_import.py (outside the default run)."""

from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path

import pytest

from alloclab.common.errors import UserError
from alloclab.store import Store
from alloclab.torutils.export import export_csv
from alloclab.torutils.importer import import_torutils
from tests.conftest import DATASETS, run_cli

GUARD = DATASETS / "co-guard-2025-09"  # group column, experiment.json, 72 relay rows
FIVE = DATASETS / "5way-2026-01"  # groups/ lists, events.csv, diagnostics.csv


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    """An alloclab export (with the experiment.json "alloclab" section) of the co-guard data."""
    tmp = tmp_path_factory.mktemp("exported")
    export_csv(import_torutils(GUARD, tmp / "run"), tmp / "csv")
    return tmp / "csv"


def _edit(name: str, fn):
    def mutate(folder: Path) -> None:
        p = folder / name
        p.write_bytes(fn(p.read_bytes()))

    return mutate


def _lines(name: str, fn):
    """Edit a CSV as a list of text lines (line 1 is the header)."""
    return _edit(name, lambda b: "\n".join(fn(b.decode().splitlines())).encode() + b"\n")


def _cell(name: str, line: int, column: str, value: str):
    """Set one cell (line numbers as the error messages count them)."""

    def fn(lines: list[str]) -> list[str]:
        header = lines[0].split(",")
        fields = lines[line - 1].split(",")
        fields[header.index(column)] = value
        lines[line - 1] = ",".join(fields)
        return lines

    return _lines(name, fn)


def _write(name: str, data: bytes | str):
    def mutate(folder: Path) -> None:
        (folder / name).write_bytes(data.encode() if isinstance(data, str) else data)

    return mutate


def _replace(name: str):
    def mutate(folder: Path) -> None:
        (folder / name).unlink()
        (folder / name).mkdir()

    return mutate


def _json(fn):
    def mutate(folder: Path) -> None:
        p = folder / "experiment.json"
        doc = json.loads(p.read_text())
        fn(doc)
        p.write_text(json.dumps(doc))

    return mutate


def _drop_column(name: str, column: str):
    def fn(lines):
        idx = lines[0].split(",").index(column)
        return [",".join(f for i, f in enumerate(ln.split(",")) if i != idx) for ln in lines]

    return _lines(name, fn)


M = "measurements.csv"  # co-guard's memory CSV; line 3 is its first relay row
G = "groups/group_E_glibc.txt"
EVENTS_HEADER = "timestamp,event_type,description,group\n"

BAD_NUMBERS = [
    "abc",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "-5",
    "1e30",
    "1_000",
    "0x10",
    "1.5.3",
    "１２",
    "+5",
    "5 kB",
    "1e999",
]
BAD_TIMES = [
    "yesterday",
    "",
    "2025-13-01T00:00:00",
    "2025-09-09T25:00:00",
    "1900-01-01T00:00:00",
    "0",
    "2025-09-09 00:00:00 UTC",
    "9999-12-31T23:59:59-14:00",
    "2300-01-01T00:00:00",
]

CASES: list[tuple[str, Path | str, object, str]] = [
    # (id, base folder, mutation, a fragment the one-line message must hold)
    ("empty-memory", GUARD, _write(M, b""), "is empty"),
    ("blank-memory", GUARD, _write(M, b"\n\n  \n"), "is empty"),
    ("header-only", GUARD, _lines(M, lambda ls: ls[:1]), "no relay row"),
    (
        "aggregate-only",
        GUARD,
        _lines(M, lambda ls: [ls[0]] + [x for x in ls[1:] if ",aggregate," in x]),
        "no relay row",
    ),
    *[
        (f"missing-{c}", GUARD, _drop_column(M, c), f"lacks column {c}")
        for c in ("timestamp", "type", "nickname", "rss_kb")
    ],
    (
        "duplicate-column",
        GUARD,
        _lines(M, lambda ls: [ls[0].replace("vmsize_kb", "rss_kb")] + ls[1:]),
        "column rss_kb twice",
    ),
    ("empty-column-name", GUARD, _lines(M, lambda ls: [ls[0].replace("vmsize_kb", "")] + ls[1:]), "column name"),
    *[(f"rss-{i}", GUARD, _cell(M, 3, "rss_kb", v), "line 3, column rss_kb") for i, v in enumerate(BAD_NUMBERS)],
    *[
        (f"vmsize-{i}", GUARD, _cell(M, 3, "vmsize_kb", v), "line 3, column vmsize_kb")
        for i, v in enumerate(BAD_NUMBERS[:6])
    ],
    ("hwm-negative", GUARD, _cell(M, 5, "hwm_kb", "-1"), "line 5, column hwm_kb"),
    *[(f"time-{i}", GUARD, _cell(M, 3, "timestamp", v), "line 3, column timestamp") for i, v in enumerate(BAD_TIMES)],
    ("nul-byte", GUARD, _edit(M, lambda b: b[:400] + b"\0" + b[400:]), "NUL byte"),
    ("nul-only", GUARD, _write(M, b"\0" * 4096), "NUL byte"),
    ("latin1", GUARD, _edit(M, lambda b: b.replace(b"22gz", b"22g\xe9", 1)), "not UTF-8"),
    ("utf16", GUARD, _edit(M, lambda b: b.decode().encode("utf-16")), "NUL byte"),
    ("random-bytes", GUARD, _write(M, bytes(range(1, 256)) * 64), "UTF-8"),
    ("memory-is-directory", GUARD, _replace(M), "is a directory"),
    ("dangling-symlink", GUARD, lambda f: ((f / M).unlink(), os.symlink(f / "nowhere", f / M)), "cannot read"),
    ("fifo", GUARD, lambda f: ((f / M).unlink(), os.mkfifo(f / M)), "not a regular file"),
    ("huge-field", GUARD, _cell(M, 3, "fingerprint", "A" * 200_000), "not valid CSV"),
    ("huge-line-of-commas", GUARD, _lines(M, lambda ls: ls[:3] + ["," * 100_000] + ls[3:]), "line 4"),
    ("too-many-fields", GUARD, _lines(M, lambda ls: ls[:4] + [ls[4] + ",x"] + ls[5:]), "line 5: 16 fields"),
    ("too-few-fields", GUARD, _lines(M, lambda ls: ls[:4] + [ls[4].rsplit(",", 3)[0]] + ls[5:]), "line 5: 12 fields"),
    ("open-quote", GUARD, _cell(M, 3, "nickname", '"22gz'), "line"),
    ("unknown-type", GUARD, _cell(M, 3, "type", "server"), "line 3, column type"),
    ("empty-type", GUARD, _cell(M, 3, "type", ""), "line 3, column type"),
    ("empty-nickname", GUARD, _cell(M, 3, "nickname", ""), "without a nickname"),
    ("control-nickname", GUARD, _cell(M, 3, "nickname", "a\x1bb"), "line 3, column nickname"),
    ("long-nickname", GUARD, _cell(M, 3, "nickname", "n" * 300), "line 3, column nickname"),
    ("control-group", GUARD, _cell(M, 3, "group", "A\x07"), "line 3, column group"),
    ("duplicate-row", GUARD, _lines(M, lambda ls: ls[:5] + [ls[2]] + ls[5:]), "line 6: repeats line 3"),
    ("relay-changes-group", GUARD, _cell(M, 20, "group", "Q"), "in group 'Q' here"),
    ("bad-phase", GUARD, _lines(M, lambda ls: [ls[0] + ",phase"] + [x + ",bogus" for x in ls[1:]]), "column phase"),
    ("bad-tier", GUARD, _lines(M, lambda ls: [ls[0] + ",tier"] + [x + ",gold" for x in ls[1:]]), "column tier"),
    (
        "negative-lazyfree",
        GUARD,
        _lines(M, lambda ls: [ls[0] + ",lazyfree_kb"] + [x + ",-1" for x in ls[1:]]),
        "column lazyfree_kb",
    ),
    (
        "huge-live-bytes",
        GUARD,
        _lines(M, lambda ls: [ls[0] + ",live_bytes"] + [x + ",1e20" for x in ls[1:]]),
        "column live_bytes",
    ),
    ("nan-cpu", GUARD, _lines(M, lambda ls: [ls[0] + ",cpu_s"] + [x + ",nan" for x in ls[1:]]), "column cpu_s"),
    (
        "unix-time-disagrees",
        GUARD,
        _lines(M, lambda ls: [ls[0] + ",unix_time"] + [x + ",1000000000" for x in ls[1:]]),
        "column unix_time",
    ),
    # events.csv
    ("events-empty", FIVE, _write("events.csv", b""), "events.csv is empty"),
    ("events-no-timestamp", FIVE, _write("events.csv", "when,event_type\nx,y\n"), "lacks column timestamp"),
    (
        "events-bad-time",
        FIVE,
        _write("events.csv", EVENTS_HEADER + "soon,restart,x,all\n"),
        "events.csv line 2, column timestamp",
    ),
    (
        "events-nul",
        FIVE,
        _write("events.csv", EVENTS_HEADER + "2026-01-02T10:30:00,re\0start,x,all\n"),
        "events.csv line 2",
    ),
    (
        "events-latin1",
        FIVE,
        _write("events.csv", EVENTS_HEADER.encode() + b"2026-01-02T10:30:00,restart,caf\xe9,all\n"),
        "events.csv line 2",
    ),
    ("events-directory", FIVE, _replace("events.csv"), "is a directory"),
    (
        "events-long-description",
        FIVE,
        _write("events.csv", EVENTS_HEADER + "2026-01-02T10:30:00,x," + "d" * 5000 + ",all\n"),
        "column description",
    ),
    (
        "events-unknown-replica",
        FIVE,
        _write("events.csv", EVENTS_HEADER.strip() + ",replica\n2026-01-02T10:30:00,x,y,all,ghost\n"),
        "column replica",
    ),
    (
        "events-fields",
        FIVE,
        _write("events.csv", EVENTS_HEADER + "2026-01-02T10:30:00,x\n"),
        "events.csv line 2: 2 fields",
    ),
    # group lists
    ("group-list-directory", FIVE, _replace(G), "is a directory"),
    ("group-list-latin1", FIVE, _edit(G, lambda b: b + b"caf\xe9\n"), "groups/group_E_glibc.txt line"),
    ("group-list-nul", FIVE, _edit(G, lambda b: b"\0" + b), "groups/group_E_glibc.txt line 1: holds a NUL"),
    ("group-list-control", FIVE, _edit(G, lambda b: b + b"bad\x1bname\n"), "column nickname"),
    (
        "group-list-two-current",
        FIVE,
        _edit("groups/group_D_jemalloc.txt", lambda b: b + (FIVE / G).read_text().split()[0].encode() + b"\n"),
        "two current group lists",
    ),
    ("groups-is-a-file", FIVE, lambda f: (shutil.rmtree(f / "groups"), (f / "groups").write_text("x")), "groups"),
    # experiment.json
    ("json-invalid", GUARD, _write("experiment.json", "{not json"), "experiment.json is not valid JSON"),
    ("json-list", GUARD, _write("experiment.json", "[1, 2]"), "not a JSON object"),
    ("json-groups-list", GUARD, _write("experiment.json", '{"groups": [1]}'), '"groups" is not an object'),
    ("json-deep", GUARD, _write("experiment.json", "[" * 100_000 + "]" * 100_000), "experiment.json"),
    ("json-latin1", GUARD, _write("experiment.json", b'{"name": "caf\xe9"}'), "not UTF-8"),
    (
        "json-nan-version",
        GUARD,
        _write("experiment.json", '{"groups": {"A": {"config": {"version": {"x": 1}}}}}'),
        "not text",
    ),
    ("json-directory", GUARD, _replace("experiment.json"), "is a directory"),
    # the "alloclab" section of an export
    ("section-format", "exported", _json(lambda d: d["alloclab"].update(format=99)), "export format"),
    ("section-interval-nan", "exported", _json(lambda d: d["alloclab"]["meta"].update(interval="nan")), "interval"),
    ("section-interval-text", "exported", _json(lambda d: d["alloclab"]["meta"].update(interval="soon")), "interval"),
    ("section-phases", "exported", _json(lambda d: d["alloclab"]["meta"].update(phases='{"lunch": 5}')), "phases"),
    ("section-metric", "exported", _json(lambda d: d["alloclab"]["meta"].update(metric="vibes")), "metric"),
    ("section-meta-key", "exported", _json(lambda d: d["alloclab"]["meta"].update(evil="1")), "unknown key"),
    ("section-meta-type", "exported", _json(lambda d: d["alloclab"]["meta"].update(seed=5)), "text values"),
    (
        "section-verified-type",
        "exported",
        _json(lambda d: d["alloclab"]["replicas"][0].update(verified="yes")),
        "replicas[0].verified",
    ),
    (
        "section-time-nan",
        "exported",
        _json(lambda d: d["alloclab"]["replicas"][0].update(started_at=1e300)),
        "replicas[0].started_at",
    ),
    ("section-unknown-field", "exported", _json(lambda d: d["alloclab"]["groups"][0].update(x=1)), "unknown field"),
    (
        "section-field-of-another-part",
        "exported",
        _json(lambda d: d["alloclab"]["groups"][0].update(pid=1)),
        "groups[0] has an unknown field 'pid'",
    ),
    (
        "section-unknown-group",
        "exported",
        _json(lambda d: d["alloclab"]["replicas"][0].update(group="nope")),
        "does not list",
    ),
    (
        "section-duplicate-replica",
        "exported",
        _json(lambda d: d["alloclab"]["replicas"].append(dict(d["alloclab"]["replicas"][0]))),
        "given twice",
    ),
    (
        "section-missing-replica",
        "exported",
        _json(lambda d: d["alloclab"]["replicas"].pop(0)),
        "is not a replica of that group",
    ),
    ("section-replicas-not-list", "exported", _json(lambda d: d["alloclab"].update(replicas={})), "not a list"),
    (
        "section-bool-pid",
        "exported",
        _json(
            lambda d: d["alloclab"].update(processes=[{"replica": d["alloclab"]["replicas"][0]["name"], "pid": True}])
        ),
        "processes[0].pid",
    ),
    (
        "section-orphan-verification",
        "exported",
        _json(lambda d: d["alloclab"].update(verifications=[{"pid": 1, "t": 1.0}])),
        "unknown process",
    ),
    (
        "export-duplicate-time",
        "exported",
        _lines(
            "memory.csv", lambda ls: ls[:3] + [ls[2].replace(",relay,", ",relay,").rsplit(",", 1)[0] + ","] + ls[3:]
        ),
        "second row for the time",
    ),
    # diagnostics with alloclab's columns
    (
        "diagnostics-bad-figure",
        "exported",
        _write(
            "diagnostics.csv",
            "unix_time,mem_total_kb,mem_available_kb,swap_total_kb,"
            "swap_free_kb,load1,sampler_cpu_s\n1757376000.0,-5,1,1,1,1,1\n",
        ),
        "diagnostics.csv line 2, column mem_total_kb",
    ),
    (
        "diagnostics-bad-time",
        "exported",
        _write(
            "diagnostics.csv",
            "unix_time,mem_total_kb,mem_available_kb,swap_total_kb,swap_free_kb,load1,sampler_cpu_s\n,1,1,1,1,1,1\n",
        ),
        "diagnostics.csv line 2, column unix_time",
    ),
]


def _prepare(tmp_path: Path, base, exported: Path) -> Path:
    folder = tmp_path / "in"
    shutil.copytree(exported if base == "exported" else base, folder)
    return folder


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_malformed_import_is_one_clear_line_and_nothing_created(case, tmp_path, exported):
    _, base, mutate, fragment = case
    folder = _prepare(tmp_path, base, exported)
    mutate(folder)
    out = tmp_path / "deep" / "run"
    with pytest.raises(UserError) as err:
        import_torutils(folder, out)
    msg = str(err.value)
    assert "\n" not in msg and "\r" not in msg and len(msg) < 400, msg
    assert fragment in msg, msg
    assert err.value.fix, msg  # says what to do
    assert not (tmp_path / "deep").exists()


def _csv_relays(memory_csv: Path) -> dict[str, list[int]]:
    """Per nickname, [rows, sum of rss_kb] of the relay rows an import keeps: those in a group (a
    row with an empty group cell belongs to an unlisted relay; without a group column the groups/
    lists say, and these datasets list every relay)."""
    out: dict[str, list[int]] = {}
    with open(memory_csv, newline="", encoding="utf-8-sig") as f:
        for r in csv.DictReader(f):
            if r["type"] == "relay" and r.get("group") != "":
                row = out.setdefault(r["nickname"], [0, 0])
                row[0] += 1
                row[1] += int(r["rss_kb"])
    return out


def _stored_relays(run: Path) -> dict[str, list[int]]:
    store = Store.open(run)
    try:
        return {
            rep["name"]: [len(s["t"]), int(sum(s["rss_kb"]))]
            for rep in store.replicas()
            for s in [store.series(rep["id"], ["rss_kb"])]
        }
    finally:
        store.close()


@pytest.mark.parametrize(
    "source,memory",
    [
        (GUARD, M),
        (FIVE, "memory.csv"),
        (DATASETS / "co-unified-2025-12", "memory_measurements.csv"),
        ("exported", "memory.csv"),
    ],
)
def test_the_real_datasets_import_every_row(tmp_path, exported, source, memory):
    """Every kept relay row lands once, with its figure: per relay, the stored samples' count and
    RSS sum equal the CSV's."""
    src = exported if source == "exported" else source
    run = import_torutils(src, tmp_path / "run")
    assert _stored_relays(run) == _csv_relays(src / memory)


def test_a_bom_and_crlf_are_accepted(tmp_path, exported):
    """A byte-order mark and CRLF line ends change nothing: the same relays, rows and figures as
    the file without them."""
    folder = _prepare(tmp_path, GUARD, exported)
    raw = (folder / M).read_bytes()
    (folder / M).write_bytes(b"\xef\xbb\xbf" + raw.replace(b"\n", b"\r\n"))
    stored = _stored_relays(import_torutils(folder, tmp_path / "run"))
    assert stored == _csv_relays(GUARD / M) and len(stored) > 10


def test_output_problems_are_caught_before_reading(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="exists and is not a directory"):
        import_torutils(GUARD, tmp_path / "file")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(UserError, match="not empty"):
        import_torutils(GUARD, tmp_path / "full")
    with pytest.raises(UserError, match="baseline 'Q' is not a group"):
        import_torutils(GUARD, tmp_path / "new", baseline="Q")
    assert not (tmp_path / "new").exists()
    with pytest.raises(UserError, match="is not a directory"):
        import_torutils(tmp_path / "file", tmp_path / "new")
    with pytest.raises(UserError, match="no memory CSV"):
        import_torutils(tmp_path / "full", tmp_path / "new")


def test_an_empty_output_directory_is_left_empty_on_failure(tmp_path):
    folder = tmp_path / "in"
    shutil.copytree(GUARD, folder)
    _cell(M, 3, "rss_kb", "x")(folder)
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError):
        import_torutils(folder, tmp_path / "empty")
    assert list((tmp_path / "empty").iterdir()) == []


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--naive-utc-offset", "nan"], "--naive-utc-offset nan"),
        (["--naive-utc-offset", "30"], "--naive-utc-offset 30"),
        (["--naive-utc-offset", "x"], "--naive-utc-offset"),
    ],
)
def test_cli_offsets(args, fragment, tmp_path):
    proc = run_cli("import", "torutils", str(GUARD), "-o", str(tmp_path / "run"), *args)
    assert proc.returncode == 2 and fragment in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists()


def test_cli_exit_code_and_one_line(tmp_path):
    folder = tmp_path / "in"
    shutil.copytree(GUARD, folder)
    _cell(M, 7, "rss_kb", "-12")(folder)
    proc = run_cli("import", "torutils", str(folder), "-o", str(tmp_path / "run"))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "measurements.csv line 7, column rss_kb" in proc.stderr
    assert not (tmp_path / "run").exists()
