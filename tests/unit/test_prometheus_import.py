"""`import prometheus`: alloclab's own series imported with their meaning (both label layouts), and
hostile answers refused in one line before any run directory exists (issue 24 item 2, issue 30
item 5). The server is a loopback stand-in that answers as told (tests/prom_server.py); the real
Prometheus runs in tests/integration/test_prometheus.py and test_fleet_merge.py."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest

from alloclab.analysis import analyse
from alloclab.common.errors import UserError
from alloclab.interchange import prometheus_import
from alloclab.store import Store
from tests.conftest import run_cli
from tests.prom_server import PromServer, json_answer

T0, STEP, N = 1_000_000.0, 5.0, 61
TIMES = [T0 + i * STEP for i in range(N)]
HOST = "h1"
IDENT = {
    "u1": ("glibc", "glibc"),
    "u2": ("jemalloc-bg", "jemalloc"),
    "u3": ("jemalloc", "jemalloc"),
    "u4": ("glibc", "glibc"),
}


def sawtooth(i: int) -> float:  # a release cycle: 80 -> 20 MB every fourth step (falls of 75%)
    return (20 + 20 * (i % 4)) * 2**20


def memory(unit: str, i: int) -> float | None:
    if unit == "u2":
        return sawtooth(i)
    if unit == "u3":
        return (30 if i < 30 else 10 + i * 0.1) * 2**20  # restarted at step 30: memory starts over
    return 50 * 2**20


def figures(unit: str, i: int) -> dict[str, float]:
    return {
        "restarts": 1.0 if unit == "u3" and i >= 30 else 0.0,
        "start_time": T0 - 100 + (30 * STEP + 100 if unit == "u3" and i >= 30 else 0),
        "verified": 0.0 if unit == "u4" else 1.0,
        "up": 1.0,
    }


def matrix(series: list[tuple[dict, list[tuple[float, float]]]]) -> bytes:
    return json.dumps(
        {
            "status": "success",
            "data": {
                "resultType": "matrix",
                "result": [
                    {"metric": m, "values": [[t, repr(v) if not math.isfinite(v) else f"{v:g}"] for t, v in pts]}
                    for m, pts in series
                ],
            },
        }
    ).encode()


def contract_answer(query: str, labelled: bool = False):
    """alloclab's series as a collector exports them: the contract layout (identity only on
    alloclab_unit_info, u5 moving from glibc to jemalloc at step 30), or the older one (labelled)."""
    units = [*IDENT, "u5"]

    def ident(unit: str, i: int) -> tuple[str, str]:
        return IDENT.get(unit) or (("glibc", "glibc") if i < 30 else ("jemalloc", "jemalloc"))

    out = []
    if "unit_info" in query:
        if labelled:
            return json_answer(matrix([]))
        for u in units:
            spans: dict[tuple[str, str], list] = {}
            for i, t in enumerate(TIMES):
                spans.setdefault(ident(u, i), []).append((t, 1.0))
            for (g, a), pts in spans.items():
                out.append(
                    (
                        {
                            "host": HOST,
                            "unit": u,
                            "group": g,
                            "allocator": a,
                            "version": "5.3.0",
                            "library_sha256": "ab",
                        },
                        pts,
                    )
                )
        return json_answer(matrix(out))
    for u in units:
        by_labels: dict[tuple, list] = {}
        for i, t in enumerate(TIMES):
            if "unit_memory_bytes" in query:
                v = memory(u, i) if 'memtype="resident"' in query else None
            else:
                col = next((c for c, (m, _) in prometheus_import.OWN_SERIES.items() if m in query), None)
                v = figures(u, i).get(col)
            if v is None:
                continue
            g, a = ident(u, i)
            key = (g, a) if labelled else ()
            by_labels.setdefault(key, []).append((t, v))
        for key, pts in by_labels.items():
            m = {"host": HOST, "unit": u}
            if labelled:
                m.update(group=key[0], allocator=key[1], version="5.3.0")
            out.append((m, pts))
    return json_answer(matrix(out))


@pytest.mark.parametrize("labelled", [False, True], ids=["contract-layout", "labels-on-every-series"])
def test_own_series_keep_their_meaning(tmp_path, labelled):
    with PromServer(lambda q: contract_answer(q, labelled)) as srv:
        out = prometheus_import.import_prometheus(
            srv.url,
            tmp_path / "run",
            TIMES[0],
            TIMES[-1],
            STEP,
            prometheus_import.default_queries(None, "", STEP),
            say=lambda *a: None,
        )
    store = Store.open(out)
    meta = store.meta()
    assert meta["records"] == "alloclab"
    assert meta["prometheus_layout"] == ("labelled" if labelled else "info")
    reps = {r["name"]: r for r in store.replicas()}
    assert set(reps) == {"h1/u1", "h1/u2", "h1/u3", "h1/u4", "h1/u5#glibc", "h1/u5#jemalloc"}
    assert all(r["host"] == "h1" for r in reps.values())
    assert reps["h1/u4"]["verified"] == 0 and reps["h1/u1"]["verified"] == 1
    restarts = store.events(kinds=["process_restart"])
    # the counter and the start time say u3 restarted once; u2's falls are releases, not restarts
    assert [(e["replica_id"], e["t"]) for e in restarts] == [(reps["h1/u3"]["id"], TIMES[30])]
    assert len(store.processes(reps["h1/u3"]["id"])) == 2 and len(store.processes(reps["h1/u2"]["id"])) == 1
    assert {g["name"]: g["library_sha256"] for g in store.groups()}["jemalloc"] == (None if labelled else "ab")
    a = analyse(store)
    u2 = next(r for r in a.replicas if r.name == "h1/u2")
    cycle_mean = np.mean([sawtooth(i) for i in range(N)]) / 2**20
    # the level of a release-cycle series is its steady mean, not its last sample (80 MB here)
    assert abs(u2.steady_mean_mb - cycle_mean) / cycle_mean < 0.1, (u2.steady_mean_mb, cycle_mean)
    u3 = next(s for s in a.series if s.name == "h1/u3")
    assert len(u3.segments) == 2 and u3.segments[1].start == TIMES[30]
    assert next(r for r in a.replicas if r.name == "h1/u4").verified is False
    store.close()


def test_foreign_query_keeps_the_torutils_rules(tmp_path):
    def answer(q):
        return json_answer(
            matrix(
                [
                    (
                        {"group": "jemalloc-bg", "unit": "u2", "host": HOST},
                        [(t, sawtooth(i)) for i, t in enumerate(TIMES)],
                    ),
                    ({"group": "glibc", "unit": "u1", "host": HOST}, [(t, 50 * 2**20) for t in TIMES]),
                ]
            )
        )

    with PromServer(answer) as srv:
        out = prometheus_import.import_prometheus(
            srv.url,
            tmp_path / "run",
            TIMES[0],
            TIMES[-1],
            STEP,
            prometheus_import.default_queries("my_rss_bytes", ""),
            say=lambda *a: None,
        )
    store = Store.open(out)
    assert store.meta()["records"] == "none"
    a = analyse(store)
    u2 = next(s for s in a.series if s.name == "h1/u2")
    assert any("unrecorded restart" in seg.reason for seg in u2.segments)  # no record: falls read as restarts
    store.close()


def _body(text: bytes):
    return lambda q: json_answer(text)


HOSTILE = {
    "deep nesting": _body(
        b'{"status":"success","data":{"resultType":"matrix","result":' + b"[" * 200000 + b"]" * 200000 + b"}}"
    ),
    "only NaN and Inf values": _body(
        matrix(
            [
                ({"group": "g", "unit": "u"}, [(t, float("nan")) for t in TIMES[:5]]),
                ({"group": "h", "unit": "v"}, [(t, float("inf")) for t in TIMES[:5]]),
            ]
        )
    ),
    "NaN timestamp": _body(
        b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"group":"g","unit":"u"},'
        b'"values":[[NaN,"1"]]}]}}'
    ),
    "absurd timestamp": _body(matrix([({"group": "g", "unit": "u"}, [(1e300, 1.0)])])),
    "not JSON": lambda q: (500, {"Content-Type": "text/html"}, [b"<html>oops</html>"], 0.0),
    "result not a list": _body(b'{"status":"success","data":{"resultType":"matrix","result":{"a":1}}}'),
    "labels not strings": _body(
        b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"group":1},"values":[]}]}}'
    ),
    "point not a pair": _body(
        b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"group":"g","unit":"u"},'
        b'"values":[[1000000,"1",3]]}]}}'
    ),
    "declared 100 MB": lambda q: (200, {"Content-Length": str(100 << 20)}, [b"{" * 1024], 0.0),
    "streamed 100 MB": lambda q: (200, {}, (b" " * (1 << 16) for _ in range(1600)), 0.0),
    "a byte a second": lambda q: (200, {}, (b" " for _ in range(600)), 1.0),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_answer_is_one_line_and_no_run_directory(tmp_path, case):
    limits = prometheus_import.Limits(max_bytes=1 << 20, deadline_s=2.0)
    out = tmp_path / "run"
    with PromServer(HOSTILE[case]) as srv:
        began = time.monotonic()
        with pytest.raises(UserError) as err:
            prometheus_import.import_prometheus(
                srv.url,
                out,
                TIMES[0],
                TIMES[-1],
                STEP,
                prometheus_import.default_queries("q", ""),
                say=lambda *a: None,
                limits=limits,
            )
        took = time.monotonic() - began
        sent = srv.sent
    assert "\n" not in str(err.value)
    assert not out.exists()
    assert took < 4.0, took  # the deadline holds, whatever the server does
    if "100 MB" in case:
        assert sent < 16 << 20, sent  # refused early, not read to the end


def test_cli_hostile_answer_exit_2_without_traceback(tmp_path):
    with PromServer(HOSTILE["NaN timestamp"]) as srv:
        p = run_cli(
            "import",
            "prometheus",
            srv.url,
            "--from",
            f"{TIMES[0]:.0f}",
            "--to",
            f"{TIMES[-1]:.0f}",
            "--step",
            "5s",
            "--query",
            "q",
            "-o",
            str(tmp_path / "run"),
        )
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert "sample time" in p.stderr
    assert not (tmp_path / "run").exists()
