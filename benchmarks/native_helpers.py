"""The benchmark helpers in benchmarks/native (memhog, sampler_floor), built for one benchmark run.

They are benchmark tooling, not part of alloclab's product, so they live beside the benchmarks
with their own Makefile rather than in src/alloclab/native.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

SOURCE_DIR = Path(__file__).resolve().parent / "native"


def build_helpers() -> Path:
    out = Path(tempfile.mkdtemp(prefix="alloclab-bench-"))
    subprocess.run(["make", "-s", "-C", str(SOURCE_DIR), f"OUT={out}"], check=True)
    return out
