"""A chatty replica's logs stay within their cap (logcap: 2 x 8 MiB per stream, plus one
interval's output), rotated copy-truncate, the newest output kept."""
from __future__ import annotations

from alloclab import logcap
from tests.conftest import run_cli


def test_a_chatty_replica_does_not_fill_the_disk(tmp_path):
    exp = tmp_path / "exp.toml"
    # yes(1) writes as fast as the disk takes it: hundreds of MB within the run's 2 s
    exp.write_text('name = "chatty"\ncommand = ["/usr/bin/yes", "0123456789abcdef"]\nreplicas = 1\ninterval = "0.2s"\n'
                   '[phases]\nload = "2s"\n[[group]]\nname = "a"\nallocator = "glibc"\n')
    r = run_cli("run", str(exp), "-o", str(tmp_path / "run"), "--no-report")
    assert r.returncode == 0, r.stderr
    logs = tmp_path / "run" / "replicas" / "a-1"
    sizes = {p.name: p.stat().st_size for p in logs.glob("stdout.log*")}
    assert "stdout.log.1" in sizes, f"never rotated: {sizes}"
    assert sizes["stdout.log.1"] == logcap.LOG_CAP_BYTES      # the newest 8 MiB of the rotated output
    # the live file: the cap plus what yes wrote in one interval (well under 200 MB even on a fast disk)
    assert sizes["stdout.log"] < logcap.LOG_CAP_BYTES + (200 << 20), sizes
    assert b"0123456789abcdef\n" in (logs / "stdout.log.1").read_bytes()[-40:]
