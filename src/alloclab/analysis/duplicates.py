"""One process sampled under two names (a pgrep prefix match: 'knxw' also matching 'knxwledgej').

Detection: `identical_pairs` (stats.identical_series over the whole series, or a run of
RULES identical_min_points consecutive equal shared timestamps with 3+ distinct values).
Rule applied (docs/method/index.md, "Duplicated samples"): the samples the two series share
*with equal values* are the other process's, not this one's, and are dropped from ONE replica so
the process counts once: from the replica whose name is a prefix of the other's (the short name
that the prefix match confused), otherwise from the later name in sort order. Its other samples
stay. The drop happens before segmenting, so copied samples cannot cut or colour a segment.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from .. import stats
from ..stats.rules import RULES
from .load import Series


@dataclass(frozen=True)
class Duplicate:
    kept: str  # the replica keeping the shared samples
    dropped_from: str  # the replica losing them
    equal: int  # shared timestamps with equal values (the samples dropped)
    shared: int  # shared timestamps
    remaining: int  # samples dropped_from keeps
    rule: str


def identical_pairs(series: list[Series]) -> list[tuple[str, str, int, int]]:
    """Pairs sampled as one process: stats.identical_series over the whole series (equal at a
    large share of shared timestamps), or for part of the run: equal at RULES
    identical_min_points or more *consecutive* shared timestamps taking 3+ distinct values
    (a pgrep prefix match that started mid-run). Two processes coincide at scattered timestamps
    by chance, never along a moving run."""
    out = []
    k = int(RULES["identical_min_points"])
    candidates = [s for s in series if len(s.t) >= k]
    for a, b in _pairs_with_equal_samples(candidates, k):
        _, ia, ib = np.intersect1d(a.t, b.t, return_indices=True)
        if len(ia) < k:
            continue
        m = stats.identical_series(a.t, a.mb, b.t, b.mb)
        same = a.mb[ia] == b.mb[ib]
        hit = bool(m)
        if not hit and same.sum() >= k:
            run, best_vals = 0, 0
            for i, eq in enumerate(same):
                run = run + 1 if eq else 0
                if run >= k:
                    best_vals = max(best_vals, len(np.unique(a.mb[ia][i - run + 1 : i + 1])))
            hit = best_vals >= 3
        if hit:
            out.append((a.name, b.name, int(same.sum()), len(ia)))
    return out


# Above this many (pair, equal sample) incidences the pairs are simply all compared.
MAX_INCIDENCES = 5_000_000


def _pairs_with_equal_samples(series: list[Series], k: int) -> list[tuple[Series, Series]]:
    """The pairs, in itertools.combinations order, that can pass either rule of identical_pairs:
    both need at least min(k, the whole-series rule's least equal count) shared timestamps with
    equal values. Found in one sort of every (t, value) of every series rather than a timestamp
    intersection per pair (200 replicas: 19,900 pairs, 50 s on a million samples); pairs below
    the count cannot be identical, so the result is the same."""
    need = min(k, int(np.ceil(RULES["identical_min_share"] * RULES["identical_min_shared"])))
    n = len(series)
    if n < 2:
        return []
    t = np.concatenate([np.asarray(s.t, dtype=float) for s in series])
    y = np.concatenate([np.asarray(s.mb, dtype=float) for s in series])
    owner = np.concatenate([np.full(len(s.t), i, dtype=np.int64) for i, s in enumerate(series)])
    ok = ~np.isnan(y) & ~np.isnan(t)
    t, y, owner = t[ok] + 0.0, y[ok] + 0.0, owner[ok]  # + 0.0: -0.0 and 0.0 are equal, hash them alike
    # equal (t, value) pairs have equal keys; a key collision only adds a candidate (checked
    # exactly below), so the candidates stay a superset. An integer sort is twice a lexsort's speed.
    key = (t.view(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ (y.view(np.uint64) * np.uint64(0xBF58476D1CE4E5B9))
    order = np.argsort(key, kind="stable")
    key, owner = key[order], owner[order]
    same_as_prev = np.r_[False, key[1:] == key[:-1]]
    starts = np.flatnonzero(~same_as_prev)
    sizes = np.diff(np.r_[starts, len(t)])
    multi = np.flatnonzero(sizes > 1)
    if not len(multi):
        return []
    if int((sizes[multi] * (sizes[multi] - 1) // 2).sum()) > MAX_INCIDENCES:
        return list(itertools.combinations(series, 2))  # values shared everywhere: compare all
    two = multi[sizes[multi] == 2]  # the usual coincidence: two series
    x, z = owner[starts[two]], owner[starts[two] + 1]
    a, b = np.minimum(x, z), np.maximum(x, z)
    codes = [(a * n + b)[a != b]]
    for g in multi[sizes[multi] > 2]:
        members = np.unique(owner[starts[g] : starts[g] + sizes[g]])
        if len(members) > 1:
            i, j = np.triu_indices(len(members), 1)
            codes.append(members[i] * n + members[j])
    pair, count = np.unique(np.concatenate(codes), return_counts=True)
    return [(series[int(c) // n], series[int(c) % n]) for c in pair[count >= need]]


def _loser(a: str, b: str) -> tuple[str, str]:
    """(kept, dropped_from) under the rule in the module docstring."""
    if b.startswith(a) and a != b:
        return b, a
    if a.startswith(b) and a != b:
        return a, b
    return (a, b) if a < b else (b, a)


def _drop(s: Series, keep: np.ndarray) -> None:
    for f in ("t", "mb", "phase", "live_mb", "ops", "cpu_s", "lazyfree_mb"):
        setattr(s, f, getattr(s, f)[keep])


def drop_duplicates(series: list[Series]) -> list[Duplicate]:
    """Apply the rule to every identical pair, in place; returns what was dropped (for the
    warning and the report)."""
    by = {s.name: s for s in series}
    out = []
    for a, b, _equal, shared in identical_pairs(series):
        kept, lost = _loser(a, b)
        sk, sl = by[kept], by[lost]
        _, ik, il = np.intersect1d(sk.t, sl.t, return_indices=True)
        same = sk.mb[ik] == sl.mb[il]
        keep = np.ones(len(sl.t), bool)
        keep[il[same]] = False
        _drop(sl, keep)
        rule = (
            "its name is a prefix of the other's (a prefix match sampled the other process)"
            if kept.startswith(lost)
            else "the later name in sort order"
        )
        out.append(Duplicate(kept, lost, int(same.sum()), shared, int(keep.sum()), rule))
    return out
