"""tor_routers' descriptors are what tor accepts: stem (Tor's own document library) parses them with
validation on and checks their RSA signatures, the extra-info digest matches, the Ed25519 certificates
verify, and the ntor key's cross-certificate is signed by the key tor derives from the ntor key."""

from __future__ import annotations

import base64
import hashlib
import random
import time

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from stem.descriptor.extrainfo_descriptor import RelayExtraInfoDescriptor
from stem.descriptor.server_descriptor import RelayDescriptor

from alloclab.tor import routers as tor_routers


@pytest.fixture(scope="module")
def routers():
    rng = random.Random(26)
    keys = tor_routers.make_keys(11, rng)
    pool = [tor_routers.NtorKey(rng) for _ in range(3)]
    return keys, [tor_routers.Router(i, keys[i], keys[-1], pool, random.Random(i)) for i in range(10)]


def test_keys_are_distinct_1024_bit_rsa(routers):
    keys, _ = routers
    assert len({k.fingerprint for k in keys}) == len(keys)
    assert all(k.n.bit_length() == 1024 for k in keys)


def test_stem_validates_server_and_extra_info(routers):
    keys, rs = routers
    now = time.time()
    for r in rs:
        server, extra = r.descriptors(now, rotate=r.index % 2 == 0)
        d = RelayDescriptor(server.encode(), validate=True)  # raises on a bad RSA signature
        assert d.fingerprint == r.key.fingerprint and d.address == r.address
        e = RelayExtraInfoDescriptor(extra.encode(), validate=True)
        assert e.fingerprint == r.key.fingerprint
        signed = extra[: extra.index("router-signature\n") + len("router-signature\n")]
        assert d.extra_info_digest == hashlib.sha1(signed.encode()).hexdigest().upper()
        # identity-ed25519: the signing key certified by the master key, whose extension names it
        cert = d.certificate
        assert cert.signing_key() == r.master_pub and cert.key == r.signing_pub
        cert.validate(d)  # router-sig-ed25519 over the descriptor


def test_ntor_cross_certificate_is_signed_by_the_key_tor_derives(routers):
    _, rs = routers
    r = rs[0]
    server, _ = r.descriptors(time.time())
    ntor = r.ntor_pool[r.ntor]
    u = int.from_bytes(base64.b64decode(ntor.line + "="), "little")
    p = 2**255 - 19
    y = (u - 1) * pow(u + 1, p - 2, p) % p  # tor: ed25519 y from the curve25519 u
    derived = (y | (ntor.signbit << 255)).to_bytes(32, "little")
    assert derived == ntor.A
    raw = base64.b64decode("".join(server.split("ntor-onion-key-crosscert ")[1].split("\n")[2:5]))
    assert raw[1] == 10 and raw[7:39] == r.master_pub  # type 0x0a certifies the master key
    Ed25519PublicKey.from_public_bytes(derived).verify(raw[-64:], raw[:-64])


def test_a_tampered_descriptor_is_refused(routers):
    _, rs = routers
    server, _ = rs[1].descriptors(time.time())
    with pytest.raises(ValueError):
        RelayDescriptor(server.replace("uptime ", "uptime 1").encode(), validate=True)
