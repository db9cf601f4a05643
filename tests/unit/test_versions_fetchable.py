"""Issue 30 item 11: the version list offers a Debian source only while its files can be fetched.

The archive keeps a removed source in its Sources index for a while (mimalloc 3.5.3 in
trixie-backports answered 404 on build). The check itself is exercised against a real HTTP server
on loopback; the listing logic with apt's two answers (`apt-cache madison`, the .dsc's verdict)
replaced by fixed ones, since the archive's state cannot be chosen from here.
"""

from __future__ import annotations

import os
import threading
import time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest

from alloclab.allocators import versions
from alloclab.common.errors import UserError


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_uri_answers_says_there_gone_or_unknown(tmp_path):
    (tmp_path / "mimalloc_2.0.9+ds-2.dsc").write_text("Format: 3.0 (quilt)\n")
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(tmp_path)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        assert versions.uri_answers(f"{base}/mimalloc_2.0.9%2bds-2.dsc") is True
        assert versions.uri_answers(f"{base}/mimalloc_3.5.3%2bds-1.dsc") is False
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    # the port is closed now: no answer is not a verdict
    assert versions.uri_answers(f"{base}/mimalloc_2.0.9%2bds-2.dsc", timeout=2) is None
    assert versions.uri_answers((tmp_path / "mimalloc_2.0.9+ds-2.dsc").as_uri()) is True
    assert versions.uri_answers((tmp_path / "gone.dsc").as_uri()) is False


def _age_listing(seconds: float) -> None:
    listing = versions._dir() / "debian-mimalloc.json"
    t = time.time() - seconds
    os.utime(listing, (t, t))


def test_a_source_whose_files_are_gone_is_not_offered_and_says_why(archive):
    found = {v.version: v for v in versions.available_versions("mimalloc")}
    gone = found["3.5.3"]
    assert not gone.buildable and not gone.secure_sources and gone.ids == []
    assert gone.not_usable == (
        "debian trixie-backports source mimalloc 3.5.3+ds-1~bpo13+1: its files are no longer in the archive (404)",
    )
    assert sorted(archive["asked"]) == ["3.5.3+ds-1~bpo13+1", "3.6.1+ds-1~bpo13+1"]  # once per source
    with pytest.raises(UserError, match=r"no reachable source can build mimalloc@3\.5\.3 .*\(404\)"):
        versions.published_entry("mimalloc@3.5.3")
    # no answer about 3.6.1's files: it stays offered, not dropped as unfetchable
    assert found["3.6.1"].ids == ["mimalloc@3.6.1", "mimalloc@3.6.1+secure"]


def test_no_answer_is_asked_again_soon_a_verdict_is_kept_a_day(archive):
    versions.available_versions("mimalloc")
    asked = len(archive["asked"])
    versions.available_versions("mimalloc")
    assert len(archive["asked"]) == asked  # within RECHECK_AFTER: the listing is used
    archive["3.6.1+ds-1~bpo13+1"] = True
    _age_listing(versions.RECHECK_AFTER + 1)
    found = {v.version: v for v in versions.available_versions("mimalloc")}
    assert len(archive["asked"]) == asked + 2  # the unknown verdict was not kept
    assert found["3.6.1"].buildable and not found["3.5.3"].buildable
    asked = len(archive["asked"])
    _age_listing(versions.RECHECK_AFTER + 1)
    versions.available_versions("mimalloc")
    assert len(archive["asked"]) == asked  # every verdict known: kept for the day
    _age_listing(versions.LISTING_MAX_AGE + 1)
    versions.available_versions("mimalloc")
    assert len(archive["asked"]) == asked + 2


def test_a_listing_cached_before_the_check_is_checked_again(archive):
    """Listings written by earlier alloclab versions have no verdict: checked once they are 10 minutes old."""
    listing = versions._dir() / "debian-mimalloc.json"
    listing.write_text('[["trixie-backports", "mimalloc", "3.5.3+ds-1~bpo13+1", "Sources", null]]')
    old = {v.version: v for v in versions.available_versions("mimalloc")}
    assert old["3.5.3"].buildable  # read as offered while fresh
    assert archive["asked"] == []
    _age_listing(versions.RECHECK_AFTER + 1)
    found = {v.version: v for v in versions.available_versions("mimalloc")}
    assert not found["3.5.3"].buildable and "3.5.3+ds-1~bpo13+1" in archive["asked"]
