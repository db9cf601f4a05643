"""The relay traffic of the tor-network scenario (`[scenario] traffic`): its streams never address
anything outside 127.0.0.0/8 (refused before a socket exists), and the sink serves what a stream asks
for over a real socket. Through real tor: tests/e2e/test_tor_network.py::test_traffic_through_each_groups_relays (slow)."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from alloclab.tor import traffic
from tests.integration.test_tor_dirload import OUTSIDE


@pytest.mark.parametrize("host", OUTSIDE)
def test_no_socket_is_made_for_a_target_outside_loopback(host, monkeypatch):
    made = []
    monkeypatch.setattr(traffic.socket, "socket", lambda *a, **k: made.append(a) or pytest.fail("socket made"))
    with pytest.raises(traffic.NotLoopback):
        traffic.socks_connect(9050, host, 80, "circ0")
    assert made == []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_sink_serves_what_a_stream_asks_for(tmp_path):
    port, out, stop = _free_port(), tmp_path / "sink.json", threading.Event()
    t = threading.Thread(target=traffic.serve_sink, args=(port, str(out), stop), daemon=True)
    t.start()
    deadline = time.monotonic() + 10
    while True:
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            break
        except OSError:
            assert time.monotonic() < deadline, "the sink did not listen within 10 s"
            time.sleep(0.05)
    with sock:
        sock.sendall(struct.pack("!II", 5000, 300_000) + b"u" * 5000)
        got = 0
        while data := sock.recv(65536):
            got += len(data)
    stop.set()
    t.join(10)
    assert got == 300_000
    counts = json.loads(out.read_text())
    assert (counts["streams"], counts["bytes_up"], counts["bytes_down"], counts["failed"]) == (1, 5000, 300_000, 0)


def test_stream_sizes_are_bounded_and_seeded():
    import random

    assert traffic.stream_sizes(random.Random(3)) == traffic.stream_sizes(random.Random(3))
    rng = random.Random(1)
    sizes = [traffic.stream_sizes(rng) for _ in range(2000)]
    assert all(512 <= down <= traffic.MAX_BYTES and 200 <= up <= traffic.MAX_BYTES for up, down in sizes)
    downs = sorted(d for _, d in sizes)
    assert 0.7 * traffic.MEDIAN_BYTES < downs[1000] < 1.4 * traffic.MEDIAN_BYTES


def test_the_client_counts_failed_streams_and_ends_on_time(tmp_path):
    script = Path(traffic.__file__)
    out = subprocess.run(
        [
            sys.executable,
            str(script),
            "client",
            "--socks",
            "1",
            "--target",
            "1",
            "--rate",
            "1000",
            "--out",
            str(tmp_path / "c.json"),
            "--duration",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
    )
    # port 1 on loopback: nothing listens, so every stream fails and is counted; the run ends by --duration
    assert out.returncode == 0, out.stderr
    counts = json.loads((tmp_path / "c.json").read_text())
    assert counts["streams"] == 0 and counts["failed"] >= 1
