"""The one HTTP server every alloclab endpoint runs on: the live view (`run --serve`), the
Prometheus exposition (`run --metrics`) and the fleet collector (`fleet collect --listen`).

What it adds to http.server, the same for all (docs/reference/security.md, "Run directories,
bundles and servers"):
- Host check: a server bound to a loopback address answers only requests whose Host header names
  loopback (localhost, 127.x, ::1) or the bound address, so a web page whose name rebinds to
  127.0.0.1 cannot read the figures through a browser on this machine (403 otherwise). A server
  bound elsewhere was put there explicitly (scraped from other hosts) and answers any Host.
- At most MAX_CONNECTIONS connections at once: one more is answered 503 and closed at once.
- A request (line and headers) of at most MAX_REQUEST_BYTES (431 past it), read within
  REQUEST_DEADLINE_S in all, and no read or write waits more than IDLE_TIMEOUT_S: an idle client,
  one trickling a byte at a time, or one not reading its answer is dropped and frees its thread.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_CONNECTIONS = 32
MAX_REQUEST_BYTES = 16 << 10
IDLE_TIMEOUT_S = 10.0
REQUEST_DEADLINE_S = 20.0
LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


def is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.strip("[]").split("%", 1)[0]).is_loopback
    except ValueError:
        return address.lower() in LOOPBACK_NAMES


def host_allowed(header: str | None, bound: str) -> bool:
    """A request to a server bound to `bound` may be answered: bound elsewhere than loopback
    (explicitly), or Host names loopback or the bound address itself."""
    if not is_loopback(bound):
        return True
    if not header:
        return False
    host = header.strip()
    if host.startswith("["):  # [V6]:PORT
        host = host[1 : host.find("]")] if "]" in host else ""
    elif host.count(":") == 1:  # NAME:PORT, V4:PORT
        host = host.rsplit(":", 1)[0]
    host = host.rstrip(".").lower()
    return bool(host) and (host == bound or is_loopback(host))


class RequestTooLarge(Exception):
    pass


class _BoundedReader:
    """The request stream, read within a byte budget and a deadline (headers only: these servers
    take no request bodies)."""

    def __init__(self, raw, sock: socket.socket):
        self.raw, self.sock = raw, sock
        self.next_request()

    def next_request(self) -> None:
        """A new budget for the next request on a kept-alive connection."""
        self.left = MAX_REQUEST_BYTES
        self.deadline = time.monotonic() + REQUEST_DEADLINE_S

    def _budget(self, n: int) -> int:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("request not received in time")
        self.sock.settimeout(min(IDLE_TIMEOUT_S, remaining))
        if self.left <= 0:
            raise RequestTooLarge
        return self.left if n is None or n < 0 else min(n, self.left)

    def readline(self, limit: int = -1) -> bytes:
        line = self.raw.readline(self._budget(limit))
        self.left -= len(line)
        if self.left <= 0 and not line.endswith(b"\n"):
            raise RequestTooLarge
        return line

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(self._budget(n))
        self.left -= len(data)
        return data

    def __getattr__(self, name):
        return getattr(self.raw, name)


def guarded(handler: type[BaseHTTPRequestHandler], check_host: bool = True) -> type[BaseHTTPRequestHandler]:
    """`handler` with the Host check (unless `check_host` is False: `run --serve-public`), the
    request budget and the idle timeout."""

    class Guarded(handler):
        timeout = IDLE_TIMEOUT_S

        def handle_one_request(self) -> None:
            self.rfile.next_request()
            super().handle_one_request()

        def setup(self) -> None:
            super().setup()
            self.rfile = _BoundedReader(self.rfile, self.connection)

        def handle(self) -> None:
            try:
                super().handle()
            except RequestTooLarge:
                self._refuse_raw(431, "Request Header Fields Too Large")
            except (TimeoutError, OSError):
                pass  # idle, too slow, gone: the connection is simply closed

        def _refuse_raw(self, code: int, reason: str) -> None:
            try:
                self.wfile.write(f"HTTP/1.0 {code} {reason}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n".encode())
            except OSError:
                pass
            self.close_connection = True

        def parse_request(self) -> bool:
            if not super().parse_request():
                return False
            if check_host and not host_allowed(self.headers.get("Host"), self.server.server_address[0]):
                body = b"this server answers only to a loopback host name\n"
                self.send_response(403)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(body)
                self.close_connection = True
                return False
            return True

        def log_message(self, fmt, *args) -> None:  # quiet: a server's log is for its errors
            pass

    Guarded.__name__ = Guarded.__qualname__ = f"Guarded{handler.__name__}"
    return Guarded


class GuardedServer(ThreadingHTTPServer):
    """ThreadingHTTPServer with at most MAX_CONNECTIONS connections served at once."""

    daemon_threads = True
    block_on_close = False  # a stuck client never holds up the end of a run
    request_queue_size = 64

    def __init__(
        self,
        address,
        handler,
        bind_and_activate: bool = True,
        max_connections: int | None = None,
        check_host: bool = True,
    ):
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.slots = threading.BoundedSemaphore(max_connections or MAX_CONNECTIONS)
        super().__init__(address, guarded(handler, check_host), bind_and_activate)

    def process_request(self, request, client_address) -> None:
        if not self.slots.acquire(blocking=False):
            try:
                request.sendall(b"HTTP/1.0 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request, client_address) -> None:
        pass  # a client's misbehaviour is not alloclab's error to print


def server_on_socket(sock: socket.socket, handler, check_host: bool = True) -> GuardedServer:
    """A GuardedServer on an already bound and listening socket (a companion's inherited one)."""
    server = GuardedServer(sock.getsockname()[:2], handler, bind_and_activate=False, check_host=check_host)
    server.socket.close()
    server.socket = sock
    return server


def serve_in_thread(address: tuple[str, int], handler) -> GuardedServer:
    """Bind ADDRESS and serve in a daemon thread; OSError when the address is refused."""
    server = GuardedServer(address, handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.5}, daemon=True).start()
    return server


def serve_on_fd(fd: int, handler, check_host: bool = True) -> None:
    """Serve `handler` (an http.server request handler class) on the inherited listening socket
    until the process is told to end, on the guarded server every endpoint shares (httpguard)."""
    server = server_on_socket(socket.socket(fileno=fd), handler, check_host)
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
