"""The live view's address rules: loopback by default, one clear refusal otherwise, and a loopback
server answers only to loopback host names (no DNS rebinding)."""

from __future__ import annotations

import pytest

from alloclab.common.errors import UserError
from alloclab.serve.httpguard import host_allowed as _host_allowed
from alloclab.serve.liveview import parse_address


def test_addresses():
    assert parse_address("8765") == ("127.0.0.1", 8765)
    assert parse_address("127.0.0.2:0") == ("127.0.0.2", 0)
    assert parse_address("[::1]:8080") == ("::1", 8080)
    assert parse_address("0.0.0.0:8080", public=True) == ("0.0.0.0", 8080)
    for bad, says in (
        ("0.0.0.0:8080", "not a loopback"),
        ("192.168.1.4:80", "not a loopback"),
        ("127.0.0.1:70000", "[ADDR:]PORT"),
        ("x:1", "not an IP"),
        ("", "[ADDR:]PORT"),
        ("1:2:3", "[ADDR:]PORT"),
    ):
        with pytest.raises(UserError, match=says.replace("[", r"\[").replace("]", r"\]")):
            parse_address(bad)


def test_host_header():
    assert _host_allowed("127.0.0.1:8765", "127.0.0.1") and _host_allowed("localhost:1", "127.0.0.1")
    assert _host_allowed("[::1]:8765", "::1") and _host_allowed("127.0.0.2:9", "127.0.0.2")
    assert not _host_allowed("attacker.example:8765", "127.0.0.1") and not _host_allowed(None, "127.0.0.1")


def test_run_clock_gives_phase_time_left_and_phase_lines():
    from alloclab.serve.liveview import run_clock

    phases = {"warmup": 10.0, "load": 60.0, "idle": 6.0}
    c = run_clock(phases, 1000.0, None, 1018.0)
    assert (c["phase"], c["elapsed_s"], c["planned_s"], c["left_s"], c["phase_left_s"]) == (
        "load",
        18.0,
        76.0,
        58.0,
        52.0,
    )
    assert c["phase_starts"] == [("load", 10.0), ("idle", 70.0)]
    assert run_clock(phases, 1000.0, None, 1005.0)["phase"] == "warmup"
    done = run_clock(phases, 1000.0, 1076.5, 2000.0)
    assert done["phase"] == "ended" and done["left_s"] is None and done["elapsed_s"] == 76.5
    assert run_clock({"warmup": 0, "load": None, "idle": 0}, 1000.0, None, 1100.0)["left_s"] is None


def test_too_short_waits_for_the_end_of_the_run(tmp_path):
    """Issue 27: no "run longer" warning 18 s into a 76 s run; at the end it is shown."""
    from alloclab.serve.liveview import LiveData
    from alloclab.store import Store
    from tests.unit.test_two_runs import make_run

    run = make_run(tmp_path / "r", {"a": [100, 101], "b": [60, 61]})
    st = Store.open(run)
    st.conn.execute("DELETE FROM meta WHERE key = 'ended_at'")
    st.conn.execute("DELETE FROM samples WHERE t > ?", (1_790_000_020.0,))  # 20 s in: every replica Too short so far
    st.close()
    data = LiveData(run / "run.db")
    w = data.analysed_warnings()
    kinds = {x["kind"] for x in w["warnings"]}
    assert w["computed_at"] and "too-short" not in kinds and "too-short" in w["note"]
    st = Store.open(run)
    st.set_meta(ended_at=1_790_000_300.0)
    st.close()
    data.analysed_at_sample, data.analysed_mono = None, -1e9
    assert "too-short" in {x["kind"] for x in data.analysed_warnings()["warnings"]}
