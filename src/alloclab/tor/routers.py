"""Routers for the tor-network scenario's directory: thousands of relays that exist only as signed
descriptors, so the consensus the relays under test cache is the public network's size.

Run as a script by the runner (a supporting process, like the authorities):
    python routers.py --authority 127.0.0.1:PORT ... --routers N --interval S --churn F --out FILE

Each router has its own 1024-bit RSA identity key (tor refuses any other size), a server descriptor
(platform, proto, bandwidth, family-free reject-all policy, ntor and TAP onion keys) and an extra-info
descriptor (read/write histories and directory-request statistics of a public relay's size), both
signed the way tor verifies them (PKCS#1 v1.5 over the bare SHA-1 digest). They are POSTed to every
authority's DirPort (`/tor/`, the upload path real relays use); with `AssumeReachable 1` the
authorities vote them Running, so the consensus, the microdescriptor consensus, the descriptors and
the diffs between consensuses grow with N, as on the public network.

Churn, once the first upload is done: every `--interval` seconds a share `--churn` of the routers
publish a new descriptor (new observed bandwidth — past tor's "cosmetic change" threshold — and a new
ntor key, hence a new microdescriptor), which is what changes from one consensus to the next on the
public network (bandwidth weights, flags, relays' rotated keys). Routers carry no Ed25519 identity
(authorities accept RSA-only descriptors; their consensus entries read `id ed25519 none`).

Identity keys are products of pairs from a small pool of primes (`make_keys`: a second for 7,000
keys, where generating each costs ~20 ms). Only 127.0.0.0/8 is ever addressed (dirload's
`connect_loopback`). Status (routers made, uploads accepted/refused, seconds) goes to --out as JSON.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import random
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from dirload import check_loopback, connect_loopback  # stdlib-only sibling

PLATFORM = "Tor 0.4.9.11 on Linux"
PROTO = (
    "Conflux=1 Cons=1-2 Desc=1-2 DirCache=2 FlowCtrl=1-2 HSDir=2 HSIntro=4-5 HSRend=1-2 Link=1-5 "
    "LinkAuth=1,3 Microdesc=1-2 Padding=2 Relay=1-4"
)
BATCH = 100  # descriptors per upload POST
KEY_BITS = 1024
NTOR_POOL = 64  # ntor keys the routers share (each key's cross-certificate is per router)
ROTATE = 0.1  # share of a churn round's routers that move to another ntor key


# ---- keys ------------------------------------------------------------------------------------------


class Key:
    """An RSA key as tor uses it: the DER of the public key (PKCS#1), and raw signing with CRT."""

    def __init__(self, p: int, q: int, e: int = 65537) -> None:
        self.n, self.p, self.q = p * q, p, q
        d = pow(e, -1, (p - 1) * (q - 1))
        self.dp, self.dq, self.qinv = d % (p - 1), d % (q - 1), pow(q, -1, p)
        self.der = _der_seq(_der_int(self.n) + _der_int(e))  # RSAPublicKey (PKCS#1)
        self.fingerprint = hashlib.sha1(self.der).hexdigest().upper()

    def pem(self) -> str:
        return _armor("RSA PUBLIC KEY", self.der)

    def sign_digest(self, digest: bytes) -> bytes:
        """PKCS#1 v1.5 type-1 padding around the bare digest (no DigestInfo): what tor's
        crypto_pk_private_sign makes and check_signature_token compares."""
        k = KEY_BITS // 8
        m = int.from_bytes(b"\x00\x01" + b"\xff" * (k - 3 - len(digest)) + b"\x00" + digest, "big")
        s1, s2 = pow(m, self.dp, self.p), pow(m, self.dq, self.q)
        s = s2 + self.q * ((self.qinv * (s1 - s2)) % self.p)
        return s.to_bytes(k, "big")


def _der_len(n: int) -> bytes:
    return (
        bytes([n])
        if n < 128
        else bytes([0x80 | ((n.bit_length() + 7) // 8)]) + n.to_bytes((n.bit_length() + 7) // 8, "big")
    )


def _der_int(v: int) -> bytes:
    body = v.to_bytes(v.bit_length() // 8 + 1, "big")  # a leading 0 keeps it positive
    return b"\x02" + _der_len(len(body)) + body


def _der_seq(body: bytes) -> bytes:
    return b"\x30" + _der_len(len(body)) + body


def _armor(kind: str, data: bytes) -> str:
    b = base64.b64encode(data).decode()
    return "\n".join(
        [f"-----BEGIN {kind}-----", *[b[i : i + 64] for i in range(0, len(b), 64)], f"-----END {kind}-----"]
    )


_SMALL_PRIMES = [p for p in range(3, 2000) if all(p % d for d in range(2, int(p**0.5) + 1))]


def _is_prime(n: int, rng: random.Random) -> bool:
    if any(n % p == 0 for p in _SMALL_PRIMES):
        return False
    d, r = n - 1, 0
    while d % 2 == 0:
        d, r = d // 2, r + 1
    for _ in range(24):  # Miller-Rabin, error < 4^-24
        x = pow(rng.randrange(2, n - 1), d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def _prime(rng: random.Random, bits: int = KEY_BITS // 2) -> int:
    while True:  # top two bits set: any two multiply to exactly KEY_BITS
        n = rng.getrandbits(bits) | (3 << (bits - 2)) | 1
        if n % 65537 != 1 and _is_prime(n, rng):
            return n


def make_keys(count: int, rng: random.Random) -> list[Key]:
    """`count` distinct 1024-bit RSA keys, each the product of two primes from a pool of about
    sqrt(2 count): making 7,000 keys the usual way costs ~20 ms each (minutes of CPU a run), a pool
    of 120 primes about a second. Keys sharing a prime are factorable by each other's owner — of no
    matter for routers that exist only on this test network; tor checks size and signatures only."""
    primes: list[int] = []
    while len(primes) * (len(primes) - 1) // 2 < count:
        primes.append(_prime(rng))
    pairs = [(primes[i], primes[j]) for j in range(len(primes)) for i in range(j)]
    return [Key(p, q) for p, q in pairs[:count]]


# ---- Ed25519: identity certificates, and the ntor key's cross-certificate ---------------------------
# The ntor cross-certificate is signed with the Ed25519 key tor derives from the curve25519 ntor key
# (an expanded secret, which no library here signs with), so that one signature is made by the few
# lines of curve arithmetic below (RFC 8032); everything else uses `cryptography`.

_P = 2**255 - 19
_L = 2**252 + 27742317777372353535851937790883648493
_D = -121665 * pow(121666, _P - 2, _P) % _P
_BY = 4 * pow(5, _P - 2, _P) % _P
_BX = None


def _xrecover(y: int) -> int:
    xx = (y * y - 1) * pow(_D * y * y + 1, _P - 2, _P)
    x = pow(xx, (_P + 3) // 8, _P)
    if (x * x - xx) % _P:
        x = x * pow(2, (_P - 1) // 4, _P) % _P
    return _P - x if x & 1 else x


def _add(a, b):
    (x1, y1, z1, t1), (x2, y2, z2, t2) = a, b
    A, B = (y1 - x1) * (y2 - x2) % _P, (y1 + x1) * (y2 + x2) % _P
    C, Dd = t1 * 2 * _D * t2 % _P, z1 * 2 * z2 % _P
    E, F, G, H = B - A, Dd - C, Dd + C, B + A
    return E * F % _P, G * H % _P, F * G % _P, E * H % _P


def _mul(k: int, pt):
    q = (0, 1, 1, 0)
    while k:
        if k & 1:
            q = _add(q, pt)
        pt, k = _add(pt, pt), k >> 1
    return q


def _encode(pt) -> bytes:
    x, y, z, _ = pt
    zi = pow(z, _P - 2, _P)
    x, y = x * zi % _P, y * zi % _P
    return (y | ((x & 1) << 255)).to_bytes(32, "little")


_B = (_xrecover(_BY), _BY, 1, _xrecover(_BY) * _BY % _P)


class NtorKey:
    """A curve25519 ntor key as tor sees it, with the Ed25519 key tor derives from it: a clamped
    scalar a, A = aB, the sign bit of A, and u = (1 + y) / (1 - y) for the ntor-onion-key line. The
    signatures reuse one nonce (r) for speed: harmless for keys that exist only on this test network."""

    def __init__(self, rng: random.Random) -> None:
        a = int.from_bytes(rng.randbytes(32), "little")
        self.a = (a & ~7 & ((1 << 254) - 1)) | (1 << 254)
        self.A = _encode(_mul(self.a, _B))
        self.signbit = self.A[31] >> 7
        y = int.from_bytes(self.A, "little") & ((1 << 255) - 1)
        u = (1 + y) * pow(1 - y, _P - 2, _P) % _P
        self.line = base64.b64encode(u.to_bytes(32, "little")).decode().rstrip("=")
        self.r = int.from_bytes(rng.randbytes(32), "little") % _L
        self.R = _encode(_mul(self.r, _B))

    def sign(self, msg: bytes) -> bytes:
        h = int.from_bytes(hashlib.sha512(self.R + self.A + msg).digest(), "little") % _L
        return self.R + ((self.r + h * self.a) % _L).to_bytes(32, "little")


def ed_cert(cert_type: int, certified: bytes, expires: float, sign, signer_pub: bytes | None) -> bytes:
    """A tor Ed25519 certificate (cert-spec): version 1, type, expiry in hours, the certified key,
    the signing key as extension 4 when given, the signature over all of it."""
    ext = b"" if signer_pub is None else len(signer_pub).to_bytes(2, "big") + b"\x04\x00" + signer_pub
    body = (
        b"\x01"
        + bytes([cert_type])
        + int(expires // 3600).to_bytes(4, "big")
        + b"\x01"
        + certified
        + bytes([1 if ext else 0])
        + ext
    )
    return body + sign(body)


def _raw(pub) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode().rstrip("=")


# ---- descriptors ------------------------------------------------------------------------------------


def _time(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))


def _signed(body: str, key: Key) -> str:
    """Append router-signature over everything up to and including "router-signature\\n"."""
    body += "router-signature\n"
    sig = key.sign_digest(hashlib.sha1(body.encode()).digest())
    return body + _armor("SIGNATURE", sig) + "\n"


def _history(rng: random.Random, mean: int, n: int = 96) -> str:
    return ",".join(str(max(0, int(rng.gauss(mean, mean / 4)))) for _ in range(n))


class Router:
    """One router that exists only as descriptors."""

    def __init__(self, index: int, key: Key, onion: Key, ntor_pool: list[NtorKey], rng: random.Random) -> None:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        self.index, self.key, self.onion, self.ntor_pool, self.rng = index, key, onion, ntor_pool, rng
        self.master = Ed25519PrivateKey.from_private_bytes(rng.randbytes(32))
        self.signing = Ed25519PrivateKey.from_private_bytes(rng.randbytes(32))
        self.master_pub, self.signing_pub = _raw(self.master.public_key()), _raw(self.signing.public_key())
        self.ntor = rng.randrange(len(ntor_pool))
        self.ntor_certs: dict[int, str] = {}
        self.id_cert = ""
        self.nick = f"fake{index:05d}"
        n = index + 1  # 127.100.0.1 on: loopback, one per router
        self.address = f"127.{100 + (n >> 16)}.{(n >> 8) & 255}.{n & 255}"
        self.or_port = 9001
        self.capacity = int(rng.lognormvariate(15.5, 1.3))  # bytes/s: a public relay's spread
        self.version = 0

    def _ed_signed(self, body: str, key: Key) -> str:
        """router-sig-ed25519 (signing key, over the descriptor so far) then router-signature (RSA)."""
        body += "router-sig-ed25519 "
        digest = hashlib.sha256(b"Tor router descriptor signature v1" + body.encode()).digest()
        return _signed(body + _b64(self.signing.sign(digest)) + "\n", key)

    def descriptors(self, now: float, rotate: bool = False) -> tuple[str, str]:
        """(server descriptor, extra-info descriptor), freshly published and signed; `rotate`
        moves the router to another ntor key (a new microdescriptor), as relays rotate theirs."""
        rng = self.rng
        self.version += 1
        if rotate:
            self.ntor = (self.ntor + 1 + rng.randrange(len(self.ntor_pool) - 1)) % len(self.ntor_pool)
        if not self.id_cert:
            self.id_cert = _armor(
                "ED25519 CERT", ed_cert(4, self.signing_pub, now + 30 * 86400, self.master.sign, self.master_pub)
            )
            cc = self.onion.sign_digest(bytes.fromhex(self.key.fingerprint) + self.master_pub)
            self.onion_cc = _armor("CROSSCERT", cc)
        ntor = self.ntor_pool[self.ntor]
        if self.ntor not in self.ntor_certs:
            self.ntor_certs[self.ntor] = _armor(
                "ED25519 CERT", ed_cert(10, self.master_pub, now + 30 * 86400, ntor.sign, None)
            )
        published = _time(now)
        observed = max(20_000, int(self.capacity * rng.uniform(0.3, 1.0)))
        fp = self.key.fingerprint
        # extra-info of a public relay's shape: 24 h of 15-minute histories and directory statistics
        extra = self._ed_signed(
            "".join(
                line + "\n"
                for line in (
                    f"extra-info {self.nick} {fp}",
                    "identity-ed25519",
                    self.id_cert,
                    f"published {published}",
                    f"write-history {published} (900 s) {_history(rng, observed * 600)}",
                    f"read-history {published} (900 s) {_history(rng, observed * 600)}",
                    f"dirreq-write-history {published} (900 s) {_history(rng, observed * 20)}",
                    f"dirreq-read-history {published} (900 s) {_history(rng, observed)}",
                    f"geoip-db-digest {hashlib.sha1(b'geoip').hexdigest().upper()}",
                    f"geoip6-db-digest {hashlib.sha1(b'geoip6').hexdigest().upper()}",
                    f"dirreq-stats-end {published} (86400 s)",
                    "dirreq-v3-ips " + ",".join(f"{cc}={rng.randint(8, 900) // 8 * 8}" for cc in _COUNTRIES),
                    "dirreq-v3-reqs " + ",".join(f"{cc}={rng.randint(8, 2000) // 8 * 8}" for cc in _COUNTRIES),
                    f"dirreq-v3-resp ok={rng.randint(1000, 90000) // 8 * 8},not-enough-sigs=0,unavailable=0,not-found=0,"
                    "not-modified=0,busy=0",
                    "dirreq-v3-direct-dl complete=0,timeout=0,running=0",
                    f"dirreq-v3-tunneled-dl complete={rng.randint(1000, 90000) // 4 * 4},timeout=4,running=0",
                    f"hidserv-stats-end {published} (86400 s)",
                    f"hidserv-rend-relayed-cells {rng.randint(-5000, 90000)} delta_f=2048 epsilon=0.30 bin_size=1024",
                    f"hidserv-dir-onions-seen {rng.randint(-30, 90)} delta_f=8 epsilon=0.30 bin_size=8",
                    f"padding-counts {published} (86400 s) bin-size=10000 write-drop=0 write-pad=10000 write-total=10000 "
                    "read-drop=0 read-pad=10000 read-total=10000 enabled-read-pad=0 enabled-read-total=0 "
                    "enabled-write-pad=0 enabled-write-total=0 max-chanpad-timers=0",
                )
            ),
            self.key,
        )
        extra_digest = hashlib.sha1(extra[: extra.index("router-signature\n") + len("router-signature\n")].encode())
        extra_sha256 = _b64(hashlib.sha256(extra.encode()).digest())
        server = self._ed_signed(
            "".join(
                line + "\n"
                for line in (
                    f"router {self.nick} {self.address} {self.or_port} 0 0",
                    "identity-ed25519",
                    self.id_cert,
                    f"master-key-ed25519 {_b64(self.master_pub)}",
                    f"platform {PLATFORM}",
                    f"proto {PROTO}",
                    f"published {published}",
                    "fingerprint " + " ".join(fp[i : i + 4] for i in range(0, 40, 4)),
                    f"uptime {rng.randint(3600, 40 * 86400)}",
                    f"bandwidth {max(observed, self.capacity)} {max(observed, self.capacity) * 2} {observed}",
                    f"extra-info-digest {extra_digest.hexdigest().upper()} {extra_sha256}",
                    "onion-key",
                    self.onion.pem(),
                    "signing-key",
                    self.key.pem(),
                    "onion-key-crosscert",
                    self.onion_cc,
                    f"ntor-onion-key-crosscert {ntor.signbit}",
                    self.ntor_certs[self.ntor],
                    "hidden-service-dir",
                    f"contact fake router {self.index} <alloclab@test.invalid>",
                    # no tunnelled-dir-server: a router that cannot answer must not be voted V2Dir, or the relays
                    # (DirCache 0 ones above all) spend their bootstrap connecting to 7,000 closed ports for directory info
                    f"ntor-onion-key {ntor.line}",
                    "reject *:*",
                )
            ),
            self.key,
        )
        return server, extra


_COUNTRIES = (
    "us",
    "de",
    "ru",
    "fr",
    "gb",
    "nl",
    "ca",
    "in",
    "ir",
    "br",
    "ua",
    "pl",
    "it",
    "es",
    "jp",
    "cn",
    "se",
    "ch",
    "at",
    "fi",
    "au",
    "tr",
    "id",
    "mx",
    "kr",
    "ro",
    "cz",
    "by",
    "??",
)


# ---- upload -----------------------------------------------------------------------------------------


def post(host: str, port: int, body: bytes, timeout: float = 60.0) -> int:
    """POST /tor/ (a relay's descriptor upload) to an authority's DirPort; the HTTP status."""
    sock = connect_loopback(host, port, timeout)
    try:
        sock.sendall(f"POST /tor/ HTTP/1.0\r\nHost: {host}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        reply = b""
        while b"\r\n" not in reply:
            data = sock.recv(4096)
            if not data:
                break
            reply += data
    finally:
        sock.close()
    parts = reply.split(b"\r\n", 1)[0].split()
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


class Status:
    def __init__(self, path: str, routers: int) -> None:
        self.path, self.started = path, time.time()
        self.data = {
            "routers": routers,
            "keys": 0,
            "uploaded": 0,
            "accepted": 0,
            "refused": 0,
            "errors": 0,
            "rounds": 0,
            "first_upload_s": None,
            "last_refusal": "",
        }

    def write(self) -> None:
        self.data["seconds"] = round(time.time() - self.started, 1)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.data, f, sort_keys=True)
        os.replace(tmp, self.path)


def upload(
    authorities: list[tuple[str, int]], routers: list[Router], status: Status, stop: dict, rotate: float = 0.0
) -> None:
    now = time.time()
    for i in range(0, len(routers), BATCH):
        if stop["now"]:
            return
        body = "".join(
            s + e for s, e in (r.descriptors(now, r.rng.random() < rotate) for r in routers[i : i + BATCH])
        ).encode()
        for host, port in authorities:
            for _attempt in range(30):  # an authority still starting: its DirPort opens soon
                try:
                    code = post(host, port, body)
                    break
                except OSError as exc:
                    status.data["errors"] += 1
                    status.data["last_refusal"] = f"{host}:{port}: {exc}"
                    time.sleep(1.0)
            else:
                continue
            status.data["uploaded"] += len(routers[i : i + BATCH])
            if code == 200:
                status.data["accepted"] += len(routers[i : i + BATCH])
            else:
                status.data["refused"] += len(routers[i : i + BATCH])
                status.data["last_refusal"] = f"{host}:{port}: HTTP {code}"
        status.write()


def run(
    authorities: list[tuple[str, int]], count: int, interval: float, churn: float, out: str, seed: int, duration: float
) -> Status:
    for host, _ in authorities:
        check_loopback(host)
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    status = Status(out, count)
    status.write()

    rng = random.Random(seed)
    keys = make_keys(count + 1, rng)
    status.data["keys"] = len(keys)
    onion = keys[-1]  # one TAP onion key for all (only the ntor key must differ)
    ntor_pool = [NtorKey(rng) for _ in range(NTOR_POOL)]
    routers = [Router(i, keys[i], onion, ntor_pool, random.Random(rng.getrandbits(64))) for i in range(count)]
    end = time.monotonic() + duration
    upload(authorities, routers, status, stop)
    status.data["first_upload_s"] = round(time.time() - status.started, 1)
    status.data["rounds"] = 1
    status.write()
    next_round = time.monotonic() + interval
    while not stop["now"] and time.monotonic() < end:
        time.sleep(min(1.0, max(0.0, next_round - time.monotonic())))
        if time.monotonic() < next_round:
            continue
        next_round += interval
        upload(authorities, rng.sample(routers, max(1, round(churn * count))), status, stop, ROTATE)
        status.data["rounds"] += 1
        status.write()
    status.write()
    return status


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Descriptor-only routers for a private Tor test network (loopback only).")
    p.add_argument("--authority", action="append", required=True, help="an authority's DirPort as 127.x.y.z:PORT")
    p.add_argument("--routers", type=int, required=True, help="how many routers")
    p.add_argument("--interval", type=float, default=60.0, help="seconds between churn rounds")
    p.add_argument("--churn", type=float, default=0.2, help="share of the routers that publish anew each round")
    p.add_argument("--out", required=True, help="JSON status file")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--duration", type=float, default=86400.0, help="stop churning after this many seconds")
    a = p.parse_args(argv)
    auths = []
    for text in a.authority:
        host, _, port = text.rpartition(":")
        try:
            auths.append((check_loopback(host), int(port)))
        except ValueError as exc:
            print(f"tor_routers: refused: {exc}", file=sys.stderr)
            return 2
    run(auths, a.routers, a.interval, a.churn, a.out, a.seed, a.duration)
    return 0


if __name__ == "__main__":
    sys.exit(main())
