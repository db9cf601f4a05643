"""The live view's address rules: loopback by default, one clear refusal otherwise, and a loopback
server answers only to loopback host names (no DNS rebinding)."""
from __future__ import annotations

import pytest

from alloclab.errors import UserError
from alloclab.liveview import _host_allowed, parse_address


def test_addresses():
    assert parse_address("8765") == ("127.0.0.1", 8765)
    assert parse_address("127.0.0.2:0") == ("127.0.0.2", 0)
    assert parse_address("[::1]:8080") == ("::1", 8080)
    assert parse_address("0.0.0.0:8080", public=True) == ("0.0.0.0", 8080)
    for bad, says in (("0.0.0.0:8080", "not a loopback"), ("192.168.1.4:80", "not a loopback"),
                      ("127.0.0.1:70000", "[ADDR:]PORT"), ("x:1", "not an IP"), ("", "[ADDR:]PORT"),
                      ("1:2:3", "[ADDR:]PORT")):
        with pytest.raises(UserError, match=says.replace("[", r"\[").replace("]", r"\]")):
            parse_address(bad)


def test_host_header():
    assert _host_allowed("127.0.0.1:8765", "127.0.0.1") and _host_allowed("localhost:1", "127.0.0.1")
    assert _host_allowed("[::1]:8765", "::1") and _host_allowed("127.0.0.2:9", "127.0.0.2")
    assert not _host_allowed("attacker.example:8765", "127.0.0.1") and not _host_allowed(None, "127.0.0.1")
