"""Simulators of realistic memory series, for calibration (benchmarks/) and the unit tests: test
and benchmark tooling, kept out of the package.

All series are (n_series, n_samples) arrays in MB sampled at times t (seconds). Noise is AR(1)
(the discrete-time form of the slowly mean-reverting wander of real RSS) with a *marginal*
standard deviation given as a share of the level, so phi changes the autocorrelation and not the
amplitude. Replica effects are lognormal (a coefficient of variation between replicas).
"""

from __future__ import annotations

import numpy as np

from alloclab.stats.steps import ar1


def times(window_s: float, interval_s: float) -> np.ndarray:
    return np.arange(0.0, window_s + interval_s / 2, interval_s)


def flat(
    rng: np.random.Generator,
    n_series: int,
    t: np.ndarray,
    *,
    level: float = 100.0,
    sd_share: float = 0.02,
    phi: float = 0.95,
) -> np.ndarray:
    return level * (1 + ar1(rng, n_series, len(t), phi, sd_share))


def jittered(
    rng: np.random.Generator,
    n_series: int,
    t: np.ndarray,
    *,
    level: float = 100.0,
    sd_share: float = 0.02,
    phi: float = 0.995,
    white_share: float = 0.005,
) -> np.ndarray:
    """A slow AR(1) wander (marginal SD sd_share, φ per sample) plus white measurement noise
    (SD white_share): ARMA(1,1), whose lag-1 reads below the wander's φ."""
    return level * (1 + ar1(rng, n_series, len(t), phi, sd_share) + white_share * rng.normal(size=(n_series, len(t))))


def two_scale(
    rng: np.random.Generator,
    n_series: int,
    t: np.ndarray,
    *,
    fast_share: float = 0.02,
    fast_phi: float = 0.9,
    slow_share: float = 0.03,
    slow_tau_s: float = 1.7 * 86400,
    share: float = 0.0,
    level: float = 100.0,
) -> np.ndarray:
    """Noise on two time scales: a fast AR(1) (marginal SD fast_share, φ per sample) plus a slow
    wander (marginal SD slow_share, autocorrelation time slow_tau_s, i.e. φ = exp(−dt/τ)), and a
    true linear growth of `share` over the window."""
    dt = float(np.median(np.diff(t)))
    slow_phi = float(np.exp(-dt / slow_tau_s))
    ramp = share * (t - t[0]) / (t[-1] - t[0])
    return level * (
        1
        + ramp[None, :]
        + ar1(rng, n_series, len(t), fast_phi, fast_share)
        + ar1(rng, n_series, len(t), slow_phi, slow_share)
    )


def growing(
    rng: np.random.Generator,
    n_series: int,
    t: np.ndarray,
    *,
    share: float = 0.10,
    level: float = 100.0,
    sd_share: float = 0.02,
    phi: float = 0.95,
) -> np.ndarray:
    """A true linear growth of `share` of the level over the window, plus AR(1) noise."""
    ramp = share * (t - t[0]) / (t[-1] - t[0])
    return level * (1 + ramp[None, :] + ar1(rng, n_series, len(t), phi, sd_share))


def levelling_off(
    rng: np.random.Generator,
    n_series: int,
    t: np.ndarray,
    *,
    rise_share: float = 0.15,
    tau_share: float = 0.15,
    level: float = 100.0,
    sd_share: float = 0.01,
    phi: float = 0.9,
) -> np.ndarray:
    """A climb that levels off (a relay growing towards its ceiling): +rise_share of the level over the
    window along 1 − exp(−u/τ), τ = tau_share of the window, plus AR(1) noise. Smooth: not steps."""
    u = (t - t[0]) / (t[-1] - t[0])
    curve = rise_share * (1 - np.exp(-u / tau_share)) / (1 - np.exp(-1 / tau_share))
    return level * (1 + curve[None, :] + ar1(rng, n_series, len(t), phi, sd_share))


def sinusoid(
    rng: np.random.Generator,
    n_series: int,
    t: np.ndarray,
    *,
    amplitude_share: float = 0.03,
    period_s: float = 3600.0,
    level: float = 100.0,
    sd_share: float = 0.002,
    phi: float = 0.5,
) -> np.ndarray:
    phase = rng.uniform(0, 2 * np.pi, size=(n_series, 1))
    wave = amplitude_share * np.sin(2 * np.pi * t[None, :] / period_s + phase)
    return level * (1 + wave + ar1(rng, n_series, len(t), phi, sd_share))


def staircase(
    rng: np.random.Generator,
    n_series: int,
    t: np.ndarray,
    *,
    climb_share: float = 0.08,
    steps: int = 6,
    level: float = 100.0,
    sd_share: float = 0.002,
    phi: float = 0.5,
) -> np.ndarray:
    """tor-dircache-like ratchet: the level jumps up at random times (uneven step sizes) and
    never comes down; small noise between the steps."""
    out = np.empty((n_series, len(t)))
    for i in range(n_series):
        at = np.sort(rng.uniform(t[0], t[-1] * 0.9, steps))
        size = rng.dirichlet(np.ones(steps)) * climb_share
        out[i] = np.sum(size[:, None] * (t[None, :] >= at[:, None]), axis=0)
    return level * (1 + out + ar1(rng, n_series, len(t), phi, sd_share))


def shared_staircase(
    rng: np.random.Generator,
    n_series: int,
    t: np.ndarray,
    *,
    climb_share: float = 0.08,
    steps: int = 5,
    level: float = 100.0,
    sd_share: float = 0.02,
    phi: float = 0.9,
) -> np.ndarray:
    """Staircases whose step TIMES a group shares (one draw for the n_series, as staircase draws
    them: the same load peak lifts every replica), each replica its own step sizes (a Dirichlet
    draw × climb_share) and its own AR(1) noise."""
    at = np.sort(rng.uniform(t[0], t[-1] * 0.9, steps))
    size = rng.dirichlet(np.ones(steps), size=n_series) * climb_share
    return level * (1 + size @ (t[None, :] >= at[:, None]) + ar1(rng, n_series, len(t), phi, sd_share))


def restarts(
    rng: np.random.Generator,
    n_series: int,
    t: np.ndarray,
    *,
    low_share: float = 0.4,
    regrow_s: float = 1800.0,
    level: float = 100.0,
    sd_share: float = 0.01,
    phi: float = 0.9,
) -> np.ndarray:
    """One restart at a random time: memory drops to low_share of the level, then regrows
    exponentially with time constant regrow_s."""
    at = rng.uniform(t[0] + 0.2 * (t[-1] - t[0]), t[-1] * 0.8, size=(n_series, 1))
    since = t[None, :] - at
    shape = np.where(since < 0, 1.0, 1 - (1 - low_share) * np.exp(-np.maximum(since, 0) / regrow_s))
    return level * (shape + ar1(rng, n_series, len(t), phi, sd_share))


def level_shift(
    rng: np.random.Generator,
    n_series: int,
    t: np.ndarray,
    *,
    shift_share: float = 0.3,
    level: float = 100.0,
    sd_share: float = 0.01,
    phi: float = 0.9,
) -> np.ndarray:
    at = rng.uniform(t[0] + 0.2 * (t[-1] - t[0]), t[-1] * 0.8, size=(n_series, 1))
    return level * (1 + shift_share * (t[None, :] >= at) + ar1(rng, n_series, len(t), phi, sd_share))


def replica_levels(
    rng: np.random.Generator,
    n_sims: int,
    n: int,
    ratio: float = 1.0,
    cv: float = 0.05,
    *,
    dist: str = "lognormal",
    level: float = 100.0,
) -> np.ndarray:
    """(n_sims, n) per-replica steady levels with geometric mean level × ratio: lognormal with
    log-sd ≈ cv, or 'heavy' (t with 4 degrees of freedom on the log scale, same scale)."""
    if dist == "lognormal":
        z = rng.normal(size=(n_sims, n))
    elif dist == "heavy":
        z = rng.standard_t(4, size=(n_sims, n)) / np.sqrt(2.0)
    else:
        raise ValueError(dist)
    return level * ratio * np.exp(cv * z)
