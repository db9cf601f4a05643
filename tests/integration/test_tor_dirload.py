"""The directory load generator: never addresses anything outside 127.0.0.0/8 (refused before a
socket exists), and against a real HTTP server on loopback it fetches, decodes and counts."""

from __future__ import annotations

import gzip
import hashlib
import json
import socket
import subprocess
import sys
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from alloclab.tor import dirload

OUTSIDE = [
    "10.0.0.1",
    "192.168.1.1",
    "8.8.8.8",
    "0.0.0.0",
    "128.0.0.1",
    "126.255.255.255",
    "255.255.255.255",
    "::1",
    "::ffff:127.0.0.1",
    "localhost",
    "127.0.0.1.example",
    "",
    "127.1",
]


@pytest.mark.parametrize("host", OUTSIDE)
def test_no_socket_is_made_for_an_address_outside_loopback(host, monkeypatch):
    made = []
    monkeypatch.setattr(dirload.socket, "socket", lambda *a, **k: made.append(a) or pytest.fail("socket made"))
    with pytest.raises(dirload.NotLoopback):
        dirload.connect_loopback(host, 80)
    with pytest.raises(dirload.NotLoopback):
        dirload.http_get(host, 80, "/tor/keys/all", {})
    assert made == []


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "127.255.255.254"])
def test_loopback_addresses_pass(host):
    assert dirload.check_loopback(host) == host


def test_the_script_refuses_another_host_with_exit_2(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            str(Path(dirload.__file__)),
            "--host",
            "10.1.2.3",
            "--port",
            "80",
            "--out",
            str(tmp_path / "c.json"),
            "--duration",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2 and "outside 127.0.0.0/8" in out.stderr
    assert not (tmp_path / "c.json").exists()


CONSENSUS = b"network-status-version 3\nvalid-after 2026-01-01 00:00:00\nm AAAA\nm BBBB\ndirectory-signature x\nsig\n"
DIFF = b"network-status-diff-version 1\nhash A B\n"


class _Dir(BaseHTTPRequestHandler):
    """A directory cache in miniature: consensus, diffs against the digest it published, compressed
    replies as asked."""

    seen: list[tuple[str, dict]] = []

    def do_GET(self):
        self.seen.append((self.path, dict(self.headers)))
        body = CONSENSUS
        diff_from = self.headers.get("X-Or-Diff-From-Consensus", "")
        if diff_from and hashlib.sha3_256(CONSENSUS).hexdigest() in diff_from:
            body = DIFF
        enc = self.headers.get("Accept-Encoding", "identity")
        if enc == "deflate" or self.path.endswith(".z"):
            body, enc = zlib.compress(body), "deflate"
        elif enc == "gzip":
            body = gzip.compress(body)
        else:
            enc = "identity"
        self.send_response(200)
        self.send_header("Content-Encoding", enc)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def test_fetches_and_counts_against_a_loopback_server(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Dir)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        out = tmp_path / "counts.json"
        counts = dirload.run(
            "127.0.0.1", server.server_address[1], str(out), max_requests=60, duration=30, rate=200, seed=3
        )
    finally:
        server.shutdown()
    saved = json.loads(out.read_text())
    assert saved["requests"] == counts.requests == 60 and saved["served"] == 60 and saved["errors"] == 0
    paths = {p for p, _ in _Dir.seen}
    assert {"/tor/status-vote/current/consensus", "/tor/status-vote/current/consensus-microdesc"} <= paths
    assert any(p.startswith("/tor/micro/d/") for p in paths) and saved["diffs_served"] > 0
    assert {"deflate", "identity"} <= set(saved["by_encoding"])


def test_a_refused_connection_is_counted_not_fatal(tmp_path):
    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    counts = dirload.run("127.0.0.1", port, str(tmp_path / "c.json"), max_requests=3, duration=10, rate=100, seed=1)
    assert counts.errors == 3 and counts.served == 0
