"""Fleet experiments through the user path (issue 49): the parts of benchmarks/fleet_realism.py,
run as --part fleet-realism of benchmarks/calibration.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .common import ROWS


def fleet_realism(rng: np.random.Generator, n: int) -> None:
    """What a fleet experiment looks like (issue 49): fresh starts, group and fleet restarts, staggered
    samples, a group-specific daily swing and slow leaks, through the user path — the generators
    and parts of benchmarks/fleet_realism.py, each part on its own stream from `rng`, n datasets a row."""
    import shutil
    import tempfile

    import fleet_realism as fr

    work = Path(tempfile.mkdtemp(prefix="alloclab-calibration-fleet-"))
    try:
        for k, part in enumerate(fr.PARTS.values()):
            part(np.random.default_rng([int(rng.integers(2**31)), k]), work, n)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ROWS.extend(fr.ROWS)
