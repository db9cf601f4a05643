"""Issue 46, item 7: fleet facts are checked against their schema before a plan is made from them:
a unit listed twice, a number given as a string, a NaN uptime, a missing main_pid, a wrong sandbox
field or nesting 100,000 deep are each one line (UserError), never an internal error."""

from __future__ import annotations

import json

import pytest

from alloclab.common.errors import UserError
from alloclab.fleet.plan import load_facts


def _unit(i: int = 0, **over) -> dict:
    u = {
        "unit": f"tor@{i}.service",
        "memory_kb": 30_000,
        "uptime_s": 3600.0,
        "main_pid": 1234,
        "sandbox": {"user": "debian-tor", "protect_home": "no", "protect_system": "full", "private_tmp": True},
    }
    u.update(over)
    return {k: v for k, v in u.items() if v is not KeyError}


def _facts(units: list[dict], **over) -> dict:
    return {
        "version": 1,
        "kind": "alloclab-fleet-facts",
        "host": "h1",
        "pattern": "tor@*",
        "root": "/",
        "collected": 1.0,
        "units": units,
        **over,
    }


def _load(tmp_path, doc=None, text: str | None = None):
    p = tmp_path / "facts.json"
    p.write_text(text if text is not None else json.dumps(doc))
    return load_facts(p)


def test_good_facts_load(tmp_path):
    [f] = _load(tmp_path, _facts([_unit(0), _unit(1, main_pid=None)]))
    assert [u["unit"] for u in f["units"]] == ["tor@0.service", "tor@1.service"]


@pytest.mark.parametrize(
    "units, says",
    [
        ([_unit(0), _unit(0)], "tor@0.service is listed twice"),
        ([_unit(0, memory_kb="30000")], "memory_kb must be a whole number"),
        ([_unit(0, memory_kb=True)], "memory_kb must be a whole number"),
        ([_unit(0, memory_kb=-5)], "memory_kb must be a whole number"),
        ([_unit(0, uptime_s="1")], "uptime_s must be a finite number"),
        ([_unit(0, main_pid=KeyError)], "main_pid must be a process id"),
        ([_unit(0, main_pid=1.5)], "main_pid must be a process id"),
        ([_unit(0, sandbox={"private_tmp": "yes"})], "sandbox.private_tmp must be true or false"),
        ([_unit(0, sandbox={"inaccessible": [1]})], "sandbox.inaccessible must be a list of paths"),
        ([_unit(0, sandbox=[])], "sandbox must be an object"),
        ([_unit(0, unit="tor@0")], "a full service name"),
        (["tor@0.service"], "each unit must be an object"),
    ],
)
def test_bad_units_are_one_line(tmp_path, units, says):
    with pytest.raises(UserError, match=says.replace(".", r"\.")) as e:
        _load(tmp_path, _facts(units))
    assert "\n" not in str(e.value)


def test_nan_uptime_and_deep_nesting_are_refused(tmp_path):
    text = json.dumps(_facts([_unit(0)])).replace("3600.0", "NaN")
    with pytest.raises(UserError, match="NaN"):
        _load(tmp_path, text=text)
    with pytest.raises(UserError, match="nested more than"):
        _load(tmp_path, text="[" * 100_000 + "]" * 100_000)
    with pytest.raises(UserError, match="nested more than"):
        _load(tmp_path, _facts([_unit(0, sandbox={"user": "x", "extra": [[[[[["deep"]]]]]]})]))


@pytest.mark.parametrize(
    "over, says",
    [
        ({"version": 2}, "version must be 1"),
        ({"pattern": 3}, "pattern must be"),
        ({"root": None}, "root must be"),
        ({"host": 7}, "host must be"),
        ({"collected": "now"}, "collected must be"),
    ],
)
def test_bad_host_fields_are_one_line(tmp_path, over, says):
    with pytest.raises(UserError, match=says):
        _load(tmp_path, _facts([_unit(0)], **over))
