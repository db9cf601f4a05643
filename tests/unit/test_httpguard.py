"""Issue 46, items 3-4: every HTTP endpoint (live view, `run --metrics`, `fleet collect --listen`)
runs on the one guarded server: a loopback server answers only loopback Host names, connections
are capped, a request is bounded in size, and an idle client is dropped."""

from __future__ import annotations

import http.client
import socket

import pytest

from alloclab.serve import httpguard, metrics
from alloclab.serve.httpguard import host_allowed
from tests.waiting import wait_for


def _get(port: int, host_header: str, path: str = "/metrics") -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.putrequest("GET", path, skip_host=True)
        conn.putheader("Host", host_header)
        conn.endheaders()
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def test_host_names():
    for ok in ("127.0.0.1:9464", "localhost", "LOCALHOST.:1", "[::1]:80", "127.0.0.2:9"):
        assert host_allowed(ok, "127.0.0.1"), ok
    for bad in ("evil.example", "evil.example:9464", "[evil]", "", None, "10.0.0.1:80", "localhost.evil.example"):
        assert not host_allowed(bad, "127.0.0.1"), bad
    assert host_allowed("evil.example", "0.0.0.0") and host_allowed("db.internal:9464", "10.1.2.3")


@pytest.fixture
def collector_server(monkeypatch):
    """`fleet collect --listen`'s server (metrics.serve), with short limits for the test."""
    monkeypatch.setattr(httpguard, "IDLE_TIMEOUT_S", 0.5)
    monkeypatch.setattr(httpguard, "MAX_CONNECTIONS", 4)
    exp = metrics.Exposition(metrics.CollectorHealth())
    server, port = metrics.serve(exp, "127.0.0.1:0")
    yield port
    server.shutdown()
    server.server_close()


def test_collector_exposition_checks_host(collector_server):
    status, body = _get(collector_server, "evil.example:80")
    assert status == 403 and b"alloclab_" not in body
    status, body = _get(collector_server, f"127.0.0.1:{collector_server}")
    assert status == 200 and b"alloclab_" in body


def test_connections_are_capped_and_idle_ones_dropped(collector_server):
    idle = [socket.create_connection(("127.0.0.1", collector_server)) for _ in range(4)]
    try:
        extra = socket.create_connection(("127.0.0.1", collector_server))
        extra.settimeout(5)
        assert extra.recv(100).startswith(b"HTTP/1.0 503")  # over the cap: refused at once
        extra.close()
        for s in idle:  # idle past the timeout: closed by the server
            s.settimeout(5)
            assert s.recv(100) == b""
        wait_for(lambda: _get(collector_server, "localhost")[0] == 200, 5, "a slot to free up")
    finally:
        for s in idle:
            s.close()


def test_request_size_is_bounded(collector_server):
    s = socket.create_connection(("127.0.0.1", collector_server))
    s.settimeout(5)
    try:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n" + b"X-Pad: " + b"a" * 1000 + b"\r\n")
        for _ in range(40):
            try:
                s.sendall(b"X-Pad: " + b"a" * 1000 + b"\r\n")
            except OSError:
                break
        assert s.recv(100).startswith(b"HTTP/1.0 431")
    finally:
        s.close()


def test_run_metrics_companion_checks_host(tmp_path):
    """`run --metrics`: the companion process serves the run's store on the guarded server."""
    from tests.unit.test_two_runs import make_run

    run = make_run(tmp_path / "run", {"g": [100, 101]})
    server = metrics.MetricsServer("127.0.0.1:0")
    port = server.port
    server.start(run / "run.db", tmp_path / "metrics.log", "h1")
    try:
        wait_for(lambda: _try(port), 20, "the metrics companion to answer")
        status, body = _get(port, "evil.example")
        assert status == 403 and b"g-1" not in body
        assert _get(port, f"localhost:{port}")[0] == 200
    finally:
        server.stop()
    assert server.popen.poll() is not None


def test_live_view_serves_no_report_through_a_link(tmp_path):
    from alloclab.serve.liveview import LiveData, make_handler
    from tests.unit.test_two_runs import make_run

    run = make_run(tmp_path / "run", {"g": [100, 101]})
    secret = tmp_path / "shadow"
    secret.write_text("root:secret-marker\n")
    (run / "report.html").symlink_to(secret)
    server = httpguard.serve_in_thread(("127.0.0.1", 0), make_handler(LiveData(run / "run.db")))
    try:
        port = server.server_address[1]
        status, body = _get(port, "localhost", "/report.html")
        assert status == 403 and b"secret-marker" not in body and b"symbolic link" in body
        (run / "report.html").unlink()
        (run / "report.html").write_text("<html>report</html>")
        assert _get(port, "localhost", "/report.html") == (200, b"<html>report</html>")
    finally:
        server.shutdown()
        server.server_close()


def _try(port: int) -> bool:
    try:
        return _get(port, "localhost")[0] == 200
    except OSError:
        return False
