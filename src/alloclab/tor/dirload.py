"""Directory load for one relay of the tor-network scenario: what Tor clients and relays fetch
from a directory cache over its DirPort (HTTP/1.0), bounded in requests and time.

Run as a script by the runner in the load phase (stdlib only, so it needs no import path):
    python dirload.py --port DIRPORT --out FILE [--requests N] [--duration S] [--rate R]

It only ever connects to 127.0.0.0/8: every connect goes through `connect_loopback`, which
refuses any other address before a socket is made (tests/e2e/test_tor_network.py holds it).
The counts (requests sent, served with 200, bytes, by kind and by compression, diffs served) are
written to --out as JSON every few seconds and at the end (SIGTERM included).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import ipaddress
import json
import lzma
import os
import random
import signal
import socket
import sys
import time
import zlib
from collections.abc import Callable, Sequence

LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
MAX_RESPONSE = 64 << 20  # a consensus of ~7,000 routers is ~3 MB; 64 MiB bounds a broken reply
TIMEOUT = 10.0
# what tor offers (compress.c's names); one request per encoding exercises each compressor
ENCODINGS = ("identity", "deflate", "gzip", "x-zstd", "x-tor-lzma")
MICRODESC_BATCH = 64
FP_BATCH = 96  # descriptors by fingerprint per request (tor's own batch size)
LARGE_DIRECTORY = 500  # above this many routers, descriptors are fetched in batches, not all at once


class NotLoopback(ValueError):
    pass


def check_loopback(host: str) -> str:
    """The address itself (never a name: nothing is resolved), refused unless inside 127.0.0.0/8."""
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        raise NotLoopback(f"{host!r} is not an IPv4 address; the directory load only addresses 127.0.0.0/8") from None
    if addr.version != 4 or addr not in LOOPBACK:
        raise NotLoopback(f"{host} is outside 127.0.0.0/8; the directory load only addresses loopback")
    return str(addr)


def connect_loopback(host: str, port: int, timeout: float = TIMEOUT) -> socket.socket:
    """The only way this module opens a connection."""
    addr = check_loopback(host)
    assert ipaddress.ip_address(addr) in LOOPBACK
    if not 0 < port < 65536:
        raise ValueError(f"port {port} out of range")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect((addr, port))
    except OSError:
        sock.close()
        raise
    return sock


def http_get(host: str, port: int, path: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.0 GET (tor's directory protocol): status, headers (lower-cased), body."""
    sock = connect_loopback(host, port)
    try:
        lines = [f"GET {path} HTTP/1.0", f"Host: {host}"] + [f"{k}: {v}" for k, v in headers.items()]
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        chunks, size = [], 0
        while True:
            data = sock.recv(65536)
            if not data:
                break
            chunks.append(data)
            size += len(data)
            if size > MAX_RESPONSE:
                raise OSError("response larger than 64 MiB")
    finally:
        sock.close()
    raw = b"".join(chunks)
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    parts = status_line.split()
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    hdrs = {}
    for line in header_lines:
        k, _, v = line.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    return status, hdrs, body


def consensus_digests(text: bytes) -> list[str]:
    """SHA3-256 digests tor may index an earlier consensus by: the whole document, and its signed
    part (up to and including the first "directory-signature "). Both are offered in
    X-Or-Diff-From-Consensus, which takes a list."""
    out = [hashlib.sha3_256(text).hexdigest()]
    cut = text.find(b"\ndirectory-signature ")
    if cut >= 0:
        out.append(hashlib.sha3_256(text[: cut + len(b"\ndirectory-signature ")]).hexdigest())
    return out


def decoded(body: bytes, encoding: str) -> bytes | None:
    """The start of a reply in any compression the standard library reads (zstd it does not: None)."""
    try:
        if encoding in ("deflate", "gzip"):
            return zlib.decompressobj(47).decompress(body, 4096)  # 47: zlib or gzip header
        if encoding == "x-tor-lzma":
            return lzma.LZMADecompressor().decompress(body, 4096)
    except (zlib.error, lzma.LZMAError):
        return b""
    return body if encoding == "identity" else None


class Counts:
    def __init__(self) -> None:
        self.requests = self.served = self.bytes = self.errors = self.diffs = self.diffs_unread = 0
        self.by_kind: dict[str, int] = {}
        self.by_encoding: dict[str, int] = {}
        self.started = time.time()

    def add(self, kind: str, status: int, hdrs: dict[str, str], body: bytes) -> None:
        self.requests += 1
        if status != 200:
            self.by_kind[f"{kind}:{status}"] = self.by_kind.get(f"{kind}:{status}", 0) + 1
            return
        self.served += 1
        self.bytes += len(body)
        self.by_kind[kind] = self.by_kind.get(kind, 0) + 1
        enc = hdrs.get("content-encoding", "identity")
        self.by_encoding[enc] = self.by_encoding.get(enc, 0) + 1

    def as_dict(self) -> dict:
        return {
            "requests": self.requests,
            "served": self.served,
            "bytes": self.bytes,
            "errors": self.errors,
            "diffs_served": self.diffs,
            "diff_replies_zstd_unread": self.diffs_unread,
            "by_kind": self.by_kind,
            "by_encoding": self.by_encoding,
            "seconds": round(time.time() - self.started, 1),
        }

    def write(self, path: str) -> None:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.as_dict(), f, sort_keys=True)
        os.replace(tmp, path)


def request_plan(
    rng: random.Random, seen_digests: list[str], micro_digests: list[str], fingerprints: Sequence[str] = ()
):
    """The next request: (kind, path, headers). Consensus fetches dominate, as on a real cache. In a
    directory of more than LARGE_DIRECTORY routers, descriptors are asked for by fingerprint in
    batches (as relays fetch them) rather than all at once (tens of MB a reply)."""
    choice = rng.random()
    flavour = rng.choice(("consensus", "consensus-microdesc"))
    base = f"/tor/status-vote/current/{flavour}"
    if choice < 0.25:
        enc = rng.choice(ENCODINGS)
        return f"{flavour}", base, {"Accept-Encoding": enc}
    if choice < 0.35:
        return f"{flavour}.z", base + ".z", {}
    if choice < 0.55 and seen_digests:
        earlier = rng.sample(seen_digests, min(3, len(seen_digests)))
        return (
            f"{flavour}-diff",
            base,
            {"X-Or-Diff-From-Consensus": ", ".join(earlier), "Accept-Encoding": rng.choice(ENCODINGS)},
        )
    if choice < 0.75 and len(fingerprints) > LARGE_DIRECTORY:
        which = "server" if choice < 0.65 else "extra"
        batch = rng.sample(fingerprints, FP_BATCH)
        return f"{which}/fp", f"/tor/{which}/fp/" + "+".join(batch), {"Accept-Encoding": rng.choice(ENCODINGS)}
    if choice < 0.65:
        return "server/all", "/tor/server/all", {"Accept-Encoding": rng.choice(ENCODINGS)}
    if choice < 0.75:
        return "extra/all", "/tor/extra/all", {"Accept-Encoding": rng.choice(ENCODINGS)}
    if choice < 0.9 and micro_digests:
        batch = rng.sample(micro_digests, min(MICRODESC_BATCH, len(micro_digests)))
        return "micro/d", "/tor/micro/d/" + "-".join(batch), {"Accept-Encoding": rng.choice(ENCODINGS)}
    return "keys/all", "/tor/keys/all", {"Accept-Encoding": rng.choice(ENCODINGS)}


def run(host: str, port: int, out: str, max_requests: int, duration: float, rate: float, seed: int) -> Counts:
    check_loopback(host)  # refuse before anything is sent
    counts = Counts()
    rng = random.Random(seed)
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    seen: dict[str, list[str]] = {"consensus": [], "consensus-microdesc": []}
    last_plain: dict[str, bytes] = {}
    micro: list[str] = []
    fingerprints: list[str] = []
    deadline = time.monotonic() + duration
    next_write = 0.0
    while not stop["now"] and counts.requests < max_requests and time.monotonic() < deadline:
        t0 = time.monotonic()
        # an uncompressed fetch of each flavour now and then: the digests diffs are asked from
        flavour = rng.choice(tuple(seen))
        if not last_plain.get(flavour) or rng.random() < 0.1:
            kind, path, headers = flavour, f"/tor/status-vote/current/{flavour}", {}
        else:
            kind, path, headers = request_plan(
                rng, seen["consensus"] + seen["consensus-microdesc"], micro, fingerprints
            )
        try:
            status, hdrs, body = http_get(host, port, path, headers)
        except OSError:
            counts.errors += 1
            counts.requests += 1
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
            continue
        counts.add(kind, status, hdrs, body)
        if status == 200 and kind.endswith("-diff"):
            text = decoded(body, hdrs.get("content-encoding", "identity"))
            if text is None:
                counts.diffs_unread += 1
            elif text.startswith(b"network-status-diff-version"):
                counts.diffs += 1
        if status == 200 and kind == flavour and not headers and body.startswith(b"network-status-version"):
            last_plain[flavour] = body
            for d in consensus_digests(body):
                if d not in seen[flavour]:
                    seen[flavour].append(d)
            del seen[flavour][:-8]
            if flavour == "consensus-microdesc":
                micro = [line.split()[1].decode() for line in body.split(b"\n") if line.startswith(b"m ")]
            else:
                fingerprints = [
                    base64.b64decode(line.split()[2] + b"=").hex().upper()
                    for line in body.split(b"\n")
                    if line.startswith(b"r ")
                ]
        if time.monotonic() >= next_write:
            counts.write(out)
            next_write = time.monotonic() + 2.0
        time.sleep(max(0.0, 1.0 / rate - (time.monotonic() - t0)))
    counts.write(out)
    return counts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description="Directory load for one relay of a private Tor test network (loopback only)."
    )
    p.add_argument("--host", default="127.0.0.1", help="relay address: must be inside 127.0.0.0/8")
    p.add_argument("--port", type=int, required=True, help="the relay's DirPort")
    p.add_argument("--requests", type=int, default=100_000, help="at most this many requests")
    p.add_argument("--rate", type=float, default=4.0, help="requests per second at most")
    add_run_arguments(p)
    return loopback_main(
        "tor_dirload", p, argv, lambda a: run(a.host, a.port, a.out, a.requests, a.duration, max(a.rate, 0.01), a.seed)
    )


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """What every loopback load script (this one, traffic.py's client) takes: where its counts go,
    how long at most, its seed."""
    parser.add_argument("--out", required=True, help="JSON file for the counts")
    parser.add_argument("--duration", type=float, default=3600.0, help="at most this many seconds")
    parser.add_argument("--seed", type=int, default=0)


def loopback_main(
    program: str,
    parser: argparse.ArgumentParser,
    argv: list[str] | None,
    run_with: Callable[[argparse.Namespace], object],
) -> int:
    """A loopback-only script's command line (this one's, traffic.py's): the arguments parsed and
    handed to `run_with`; an address outside 127.0.0.0/8 is one line on stderr, exit 2."""
    args = parser.parse_args(argv)
    try:
        run_with(args)
    except NotLoopback as exc:
        print(f"{program}: refused: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
