"""Guards of a canary rollout (`fleet deploy`): the rules that decide, after each batch, whether the
deployment goes on or rolls itself back. Pure functions over what the settle watch saw, so the
same rules are simulated for their false-trip rates (benchmarks/guard_calibration.py,
docs/method/index.md) and applied by fleet.apply_plan.

A batch trips when, during its settle time, any of its units
- stays above a memory bound for `persist` consecutive samples: the absolute `max_memory_kb`, or
  `max_increase` above the unit's level on the old allocator *at the same process age* (a new
  process's start-up is compared with the old process's start-up, not with its settled level):
  the old process's level at that age from the collector's store when it has one (`old_curve`),
  else its level just before the restart, compared only once the new process is `warmup` old;
- restarts `max_restarts` times or more (a crash loop), or is found not running;
- fails verification (its new main process does not map the allocator: checked before settling).
`persist` consecutive samples (not one) keeps a single noisy reading from rolling a fleet back.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..common.errors import UserError


@dataclass(frozen=True)
class Guards:
    max_memory_kb: int | None = None  # absolute bound on a unit's RSS (all its processes)
    max_increase: float | None = None  # share above the unit's old level, e.g. 0.25
    max_restarts: int = 3  # restarts within the settle time: a crash loop
    persist: int = 3  # consecutive samples above a memory bound before it trips
    warmup: float | None = None  # seconds of a new process not compared with the old level
    # (None: the old process's age at the restart, capped at half the settle)

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


def level_at(curve: list[tuple[float, float]], age: float) -> float:
    """The old process's level at `age` seconds (linear between its samples; its last level past its end)."""
    if age <= curve[0][0]:
        return curve[0][1]
    for (a0, v0), (a1, v1) in zip(curve, curve[1:]):
        if age <= a1:
            return v0 + (v1 - v0) * (age - a0) / (a1 - a0) if a1 > a0 else v1
    return curve[-1][1]


def effective_warmup(guards: Guards, old_age: float | None, settle: float) -> float:
    """--warmup as given, or (auto) the old process's age at the restart, capped at half the settle
    time so that the rest of the settle time is still watched."""
    if guards.warmup is not None:
        return guards.warmup
    return min(old_age or 0.0, settle / 2)


def increase_bounds(
    ages: list[float],
    old_kb: int | None,
    guards: Guards,
    warmup: float = 0.0,
    old_curve: list[tuple[float, float]] | None = None,
    tolerance: float = 1.0,
) -> list[tuple[float, str]]:
    """Per sample of the new process (at `ages`): the --max-increase bound, like with like, and what
    it compares with. Where the old process's curve covers that age (within `tolerance` s of its
    first sample), its level at the same age; else the old level, only from `warmup` on (inf
    before: not compared)."""
    out: list[tuple[float, str]] = []
    for age in ages:
        if guards.max_increase is None:
            out.append((math.inf, ""))
        elif old_curve and age + tolerance >= old_curve[0][0]:
            out.append(
                (
                    level_at(old_curve, age) * (1 + guards.max_increase),
                    f"{guards.max_increase:.0%} above the old process's level at the same age ({age:.0f} s)",
                )
            )
        elif old_kb and age >= warmup:
            out.append(
                (
                    old_kb * (1 + guards.max_increase),
                    f"{guards.max_increase:.0%} above its old level ({old_kb / 1024:.1f} MB)",
                )
            )
        else:
            out.append((math.inf, ""))
    return out


def memory_trip(
    values_kb: list[int],
    old_kb: int | None,
    guards: Guards,
    ages: list[float] | None = None,
    warmup: float = 0.0,
    old_curve: list[tuple[float, float]] | None = None,
) -> str | None:
    """Why this unit's memory trips its guard (None: it does not). `ages`: the new process's age
    at each sample (None: every sample compared with the old level, the rule before issue 25)."""
    absolute = guards.max_memory_kb if guards.max_memory_kb is not None else math.inf
    increase = increase_bounds(
        ages if ages is not None else [math.inf] * len(values_kb),
        old_kb,
        guards,
        warmup if ages is not None else 0.0,
        old_curve,
    )
    run = 0
    for v, (bound, which) in zip(values_kb, increase):
        if absolute <= bound:
            bound, which = absolute, "the bound"
        run = run + 1 if v > bound else 0
        if run >= guards.persist:
            return (
                f"memory {v / 1024:.1f} MB above {which} ({bound / 1024:.1f} MB) for {guards.persist} samples in a row"
            )
    return None


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
        raise UserError(
            f"--batch {spec!r} is not a batch size", "give a number of units (5) or a share (10%)"
        ) from None
    sizes = []
    left = n_units
    while left > 0:
        sizes.append(min(size, left))
        left -= sizes[-1]
    return sizes
