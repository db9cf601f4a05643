"""The programs the trace benchmarks record: name -> (native program, argv after its path).

One table for trace_overhead.py and trace_tick.py (RECORDED), replay_speed.py (REPLAYED: the same
programs, the loops shorter so that a pair of replays stays in seconds on a loaded machine, frag
lighter and also with 4 threads) and recorder_floor.py (`loop`).
"""

from __future__ import annotations


def loop(threads: int, rounds: int) -> tuple[str, list[str]]:
    """The bare malloc/free loop: rounds x 20,000 pairs per thread."""
    return "stressors", ["--pattern", "loop", "--threads", str(threads), "--rounds", str(rounds), "--slots", "20000"]


def frag(load: float, threads: int) -> tuple[str, list[str]]:
    return "frag", ["--load", str(load), "--mb", "32", "--threads", str(threads)]


WORKER_POOL = ("worker_pool", ["--builds", "4", "--modules", "1500", "--gap", "0", "--threads", "4"])
LARSON = ("stressors", ["--pattern", "larson", "--threads", "4", "--rounds", "8", "--slots", "20000"])
XMALLOC = ("stressors", ["--pattern", "xmalloc", "--threads", "4", "--rounds", "4", "--slots", "20000"])
SAWTOOTH = ("stressors", ["--pattern", "sawtooth", "--load", "3", "--period", "1", "--mb", "64"])
TOR_DIRCACHE = ("tor_dircache", ["--load", "4", "--hour", "0.5"])

RECORDED = {
    "loop-1thread (20M malloc/free)": loop(1, 1000),
    "loop-4threads (20M malloc/free)": loop(4, 250),
    "worker-pool (4 threads, mixed sizes)": WORKER_POOL,
    "larson (4 threads, random-order frees)": LARSON,
    "xmalloc (4 threads, cross-thread frees)": XMALLOC,
    "frag (2 threads, churn)": frag(3, 2),
    "sawtooth (retain/drain)": SAWTOOTH,
    "tor-dircache (main + 2 workers)": TOR_DIRCACHE,
}

# Paced programs run for a fixed time: their recording slowdown is not a wall-time ratio.
PACED = ("frag", "tor-dircache", "sawtooth")

REPLAYED = {
    "loop-1thread": loop(1, 400),
    "loop-4threads": loop(4, 100),
    "worker-pool": WORKER_POOL,
    "larson": LARSON,
    "xmalloc": XMALLOC,
    "sawtooth": SAWTOOTH,
    "frag-2threads": frag(0.5, 2),
    "frag-4threads": frag(0.5, 4),
    "tor-dircache": TOR_DIRCACHE,
}
