"""Guards of a canary rollout (`fleet deploy`): the rules that decide, after each batch, whether the
deployment goes on or rolls itself back. Pure functions over what the settle watch saw, so the
same rules are simulated for their false-trip rates (benchmarks/guard_calibration.py,
docs/analysis.md) and applied by fleet.apply_plan.

A batch trips when, during its settle time, any of its units
- stays above a memory bound for `persist` consecutive samples: the absolute `max_memory_kb`, or
  `max_increase` above the unit's level on the old allocator (its RSS just before the restart);
- restarts `max_restarts` times or more (a crash loop), or is found not running;
- fails verification (its new main process does not map the allocator: checked before settling).
`persist` consecutive samples (not one) keeps a single noisy reading from rolling a fleet back.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .errors import UserError


@dataclass(frozen=True)
class Guards:
    max_memory_kb: int | None = None     # absolute bound on a unit's RSS (all its processes)
    max_increase: float | None = None    # share above the unit's old level, e.g. 0.25
    max_restarts: int = 3                # restarts within the settle time: a crash loop
    persist: int = 3                     # consecutive samples above a memory bound before it trips

    def memory_bound_kb(self, old_kb: int | None) -> float:
        """The lowest bound that applies to a unit whose old level was `old_kb` (inf: none)."""
        bounds = [math.inf]
        if self.max_memory_kb is not None:
            bounds.append(self.max_memory_kb)
        if self.max_increase is not None and old_kb:
            bounds.append(old_kb * (1 + self.max_increase))
        return min(bounds)


def first_persistent_excess(values: list[float], bound: float, persist: int) -> int | None:
    """Index of the sample at which `persist` consecutive values have been above `bound`, or None."""
    run = 0
    for i, v in enumerate(values):
        run = run + 1 if v > bound else 0
        if run >= persist:
            return i
    return None


def memory_trip(values_kb: list[int], old_kb: int | None, guards: Guards) -> str | None:
    """Why this unit's memory trips its guard (None: it does not)."""
    bound = guards.memory_bound_kb(old_kb)
    if bound == math.inf:
        return None
    at = first_persistent_excess(values_kb, bound, guards.persist)
    if at is None:
        return None
    which = "the bound" if guards.max_memory_kb is not None and bound == guards.max_memory_kb else \
        f"{guards.max_increase:.0%} above its old level ({old_kb / 1024:.1f} MB)"
    return (f"memory {values_kb[at] / 1024:.1f} MB above {which} ({bound / 1024:.1f} MB) "
            f"for {guards.persist} samples in a row")


def restart_trip(restarts: int, guards: Guards) -> str | None:
    if restarts >= guards.max_restarts:
        return f"restarted {restarts} times while settling (crash loop: {guards.max_restarts} or more)"
    return None


SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$", re.I)


def parse_size_kb(text: str, what: str) -> int:
    """'512M', '2G', '300MB', '1.5GiB' or a number of bytes -> kB."""
    m = SIZE.match(text or "")
    if not m:
        raise UserError(f"{what} {text!r} is not a size", "give e.g. 512M, 2G or a number of bytes")
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m.group(2).upper()]
    kb = int(float(m.group(1)) * scale) // 1024
    if kb <= 0:
        raise UserError(f"{what} {text!r} is not above zero", "give a positive size")
    return kb


def parse_share(text: str, what: str) -> float:
    """'25%' or '0.25' -> 0.25 (above 0)."""
    try:
        value = float(text[:-1]) / 100 if text.strip().endswith("%") else float(text)
    except ValueError:
        raise UserError(f"{what} {text!r} is not a share", "give e.g. 25% or 0.25") from None
    if not (0 < value < 100) or math.isnan(value):
        raise UserError(f"{what} {text!r} is out of range", "give a share above 0, e.g. 25%")
    return value


def batch_sizes(spec: str | int, n_units: int) -> list[int]:
    """'N' units per batch, or 'P%' of the units (at least one); the first batch is the canary."""
    text = str(spec).strip()
    try:
        if text.endswith("%"):
            share = float(text[:-1]) / 100
            if not 0 < share <= 1:
                raise ValueError
            size = max(1, math.floor(n_units * share))
        else:
            size = int(text)
            if size < 1:
                raise ValueError
    except ValueError:
        raise UserError(f"--batch {spec!r} is not a batch size", "give a number of units (5) or a share (10%)") from None
    sizes = []
    left = n_units
    while left > 0:
        sizes.append(min(size, left))
        left -= sizes[-1]
    return sizes
