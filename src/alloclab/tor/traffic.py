"""Relay traffic for the tor-network scenario (`[scenario] traffic`): circuits through a group's
relays carrying data, as a public relay's clients make them — cells, buffers, circuit and stream churn.

Two roles, both stdlib-only scripts the scenario starts as supporting processes (run as a script,
so `dirload`'s loopback guard is imported from beside it):
    python traffic.py sink --port P --out FILE
        a TCP server on 127.0.0.1:P (the exit's destination): each connection sends an 8-byte
        request (upload bytes, download bytes), then the upload; the sink reads it and sends the download.
    python traffic.py client --socks S --target P --rate BYTES --out FILE [--concurrency C] ...
        streams through a tor client's SOCKS port (127.0.0.1:S) to 127.0.0.1:P, at most BYTES a
        second in all; a new SOCKS username every --circuit-streams streams, so tor (IsolateSOCKSAuth)
        builds a new circuit for them. Sizes are lognormal (median 48 KB, at most 4 MB), as web objects.

Only 127.0.0.0/8 is ever addressed: the SOCKS port and the target go through `check_loopback`
(the target is sent to tor as an IPv4 address, never a name). Counts go to --out as JSON every
few seconds and at the end (SIGTERM included).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import socket
import socketserver
import struct
import sys
import threading
import time

try:  # as the scenario runs it: a script beside dirload.py
    from dirload import NotLoopback, add_run_arguments, check_loopback, connect_loopback, loopback_main
except ImportError:  # imported as alloclab.tor.traffic (tests)
    from .dirload import NotLoopback, add_run_arguments, check_loopback, connect_loopback, loopback_main  # noqa: F401

MEDIAN_BYTES = 48 << 10
MAX_BYTES = 4 << 20
STREAM_TIMEOUT = 60.0
CHUNK = 64 << 10


class Counts:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.streams = self.failed = self.bytes_down = self.bytes_up = self.circuits = 0
        self.first_ok: float | None = None
        self.started = time.time()

    def add(self, **kw: int) -> None:
        with self.lock:
            for k, v in kw.items():
                setattr(self, k, getattr(self, k) + v)

    def write(self, path: str) -> None:
        with self.lock:
            d = {
                "streams": self.streams,
                "failed": self.failed,
                "bytes_down": self.bytes_down,
                "bytes_up": self.bytes_up,
                "circuits": self.circuits,
                "seconds": round(time.time() - self.started, 1),
                "first_stream_s": None if self.first_ok is None else round(self.first_ok - self.started, 1),
            }
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(d, f, sort_keys=True)
        os.replace(tmp, path)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        data = sock.recv(n - len(out))
        if not data:
            raise OSError("connection closed early")
        out += data
    return bytes(out)


# ---- the sink (the exit's destination) ----------------------------------------------------------


def serve_sink(port: int, out: str, stop: threading.Event) -> None:
    counts = Counts()
    payload = random.Random(0).randbytes(CHUNK)

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            self.request.settimeout(STREAM_TIMEOUT)
            try:
                up, down = struct.unpack("!II", _recv_exact(self.request, 8))
                got = 0
                while got < up:
                    data = self.request.recv(min(CHUNK, up - got))
                    if not data:
                        return
                    got += len(data)
                sent = 0
                while sent < down:
                    n = min(CHUNK, down - sent)
                    self.request.sendall(payload[:n])
                    sent += n
                counts.add(streams=1, bytes_up=got, bytes_down=sent)
            except OSError:
                counts.add(failed=1)

    socketserver.ThreadingTCPServer.allow_reuse_address = True
    server = socketserver.ThreadingTCPServer((check_loopback("127.0.0.1"), port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    while not stop.wait(2.0):
        counts.write(out)
    server.shutdown()
    counts.write(out)


# ---- the client (streams through tor's SOCKS port) ----------------------------------------------


def socks_connect(socks_port: int, target: str, port: int, username: str) -> socket.socket:
    """A SOCKS5 CONNECT through tor to an IPv4 address on loopback, with username/password
    authentication (tor isolates streams by it: a new username, a new circuit)."""
    addr = check_loopback(target)
    sock = connect_loopback("127.0.0.1", socks_port, STREAM_TIMEOUT)
    try:
        sock.sendall(b"\x05\x01\x02")
        if _recv_exact(sock, 2) != b"\x05\x02":
            raise OSError("SOCKS server refused username authentication")
        user = username.encode()
        sock.sendall(b"\x01" + bytes([len(user)]) + user + b"\x01x")
        if _recv_exact(sock, 2)[1] != 0:
            raise OSError("SOCKS authentication failed")
        sock.sendall(b"\x05\x01\x00\x01" + socket.inet_aton(addr) + struct.pack("!H", port))
        reply = _recv_exact(sock, 10)
        if reply[1] != 0:
            raise OSError(f"SOCKS connect failed (reply {reply[1]})")
    except OSError:
        sock.close()
        raise
    return sock


def stream_sizes(rng: random.Random) -> tuple[int, int]:
    """(upload, download) bytes of one stream: a small request, a lognormal reply (one in ten
    streams uploads like it downloads)."""
    down = min(MAX_BYTES, max(512, int(rng.lognormvariate(math.log(MEDIAN_BYTES), 1.2))))
    up = down if rng.random() < 0.1 else rng.randint(200, 2000)
    return up, down


class Bucket:
    """At most `rate` bytes a second across all streams (token bucket, one second deep)."""

    def __init__(self, rate: float) -> None:
        self.rate, self.level, self.at, self.lock = rate, rate, time.monotonic(), threading.Lock()

    def take(self, n: int, stop: threading.Event) -> None:
        while not stop.is_set():
            with self.lock:
                now = time.monotonic()
                self.level = min(self.rate, self.level + (now - self.at) * self.rate)
                self.at = now
                if self.level >= min(n, self.rate):
                    self.level -= n
                    return
                wait = (min(n, self.rate) - self.level) / self.rate
            stop.wait(wait)


def run_client(
    socks_port: int,
    target_port: int,
    rate: float,
    out: str,
    stop: threading.Event,
    concurrency: int = 16,
    circuit_streams: int = 4,
    seed: int = 0,
    duration: float = 3600.0,
) -> Counts:
    check_loopback("127.0.0.1")
    counts = Counts()
    bucket = Bucket(rate)
    serial = {"n": 0}
    lock = threading.Lock()
    deadline = time.monotonic() + duration

    def worker(k: int) -> None:
        rng = random.Random(seed * 1000 + k)
        while not stop.is_set() and time.monotonic() < deadline:
            with lock:
                n = serial["n"]
                serial["n"] += 1
            if n % circuit_streams == 0:
                counts.add(circuits=1)
            up, down = stream_sizes(rng)
            bucket.take(up + down, stop)
            try:
                sock = socks_connect(socks_port, "127.0.0.1", target_port, f"circ{n // circuit_streams}")
                try:
                    sock.sendall(struct.pack("!II", up, down))
                    sock.sendall(rng.randbytes(up))
                    got = 0
                    while got < down:
                        data = sock.recv(CHUNK)
                        if not data:
                            raise OSError("stream closed early")
                        got += len(data)
                finally:
                    sock.close()
            except OSError:
                counts.add(failed=1)
                stop.wait(1.0)  # tor still bootstrapping, or a circuit failed: try again shortly
                continue
            with counts.lock:
                counts.first_ok = counts.first_ok or time.time()
            counts.add(streams=1, bytes_up=up, bytes_down=down)

    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(concurrency)]
    for t in threads:
        t.start()
    while not stop.wait(2.0) and time.monotonic() < deadline:
        counts.write(out)
    stop.set()
    for t in threads:
        t.join(STREAM_TIMEOUT + 5)
    counts.write(out)
    return counts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Relay traffic on a private Tor test network (loopback only).")
    sub = p.add_subparsers(dest="role", required=True)
    s = sub.add_parser("sink", help="the destination the exits connect to")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--out", required=True, help="JSON file for the counts")
    c = sub.add_parser("client", help="streams through a tor client's SOCKS port")
    c.add_argument("--socks", type=int, required=True, help="the tor client's SocksPort on 127.0.0.1")
    c.add_argument("--target", type=int, required=True, help="the sink's port on 127.0.0.1")
    c.add_argument("--rate", type=float, required=True, help="bytes a second at most, all streams together")
    c.add_argument("--concurrency", type=int, default=16, help="streams at once")
    c.add_argument("--circuit-streams", type=int, default=4, help="streams per circuit before a new one")
    add_run_arguments(c)
    return loopback_main("tor traffic", p, argv, _run_role)


def _run_role(a: argparse.Namespace) -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if a.role == "sink":
        serve_sink(a.port, a.out, stop)
    else:
        run_client(
            a.socks,
            a.target,
            max(a.rate, 1.0),
            a.out,
            stop,
            max(1, a.concurrency),
            max(1, a.circuit_streams),
            a.seed,
            a.duration,
        )


if __name__ == "__main__":
    sys.exit(main())
