"""A loopback HTTP server that answers Prometheus API requests as a test or benchmark tells it
(hostile answers included: trickled, oversized, deeply nested, NaN times). It stands in for a
*misbehaving* Prometheus only; the real Prometheus is exercised in tests/integration."""

from __future__ import annotations

import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# answer(query) -> (status, headers, body pieces, seconds to wait before each piece)
Answer = Callable[[str], "tuple[int, dict[str, str], Iterable[bytes], float]"]


class PromServer:
    def __init__(self, answer: Answer):
        self.answer = answer
        self.sent = 0  # bytes written to clients, all requests
        self.requests: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query).get("query", [""])[0]
                outer.requests.append(q)
                status, headers, pieces, pause = outer.answer(q)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                if "Content-Length" not in headers:
                    self.send_header("Connection", "close")
                self.end_headers()
                try:
                    for piece in pieces:
                        if pause:
                            time.sleep(pause)
                        self.wfile.write(piece)
                        self.wfile.flush()
                        outer.sent += len(piece)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                self.close_connection = True

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> PromServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def json_answer(body: bytes, status: int = 200) -> tuple[int, dict[str, str], list[bytes], float]:
    return status, {"Content-Type": "application/json", "Content-Length": str(len(body))}, [body], 0.0
