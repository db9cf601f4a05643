"""The information floor of a trace: the memoryless entropy of what a recorded program chose, per
event, against which a format's bytes per event can be judged (benchmarks/README.md, Format 3).

    python benchmarks/trace_entropy.py TRACE [--size-range 16 16384]

Printed in bytes per event: operations (order-1 entropy, given the previous operation), time
deltas (empirical entropy given the operation, at the recorded tick), free choice (log2 of the
live objects at each free, as if one were chosen uniformly: a random-order free), and sizes (the
empirical entropy, or with --size-range the exact entropy of a log-uniform draw in that range, as
the stressors draw them: a few hundred thousand samples understate an entropy of ~12 bits).
Addresses are not estimated. Reads the trace with tests.trace_codec (pure Python: ~1 M events
a minute).
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.trace_codec: the format in Python
from tests.trace_codec import ALLOCATING, FREE, REALLOC, decode_events, parse


def entropy(counts: collections.Counter) -> float:
    total = sum(counts.values())
    return -sum(v * math.log2(v / total) for v in counts.values())  # bits, all samples


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--size-range", type=int, nargs=2, metavar=("LO", "HI"))
    args = ap.parse_args()
    events = decode_events(parse(args.trace.read_bytes()))
    n = len(events)
    ops = [e[0] for _, e in events]
    op_bits = entropy(collections.Counter(zip(ops, ops[1:]))) - entropy(collections.Counter(ops[:-1]))
    last: dict[int, int] = {}
    deltas: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    for thread, e in events:
        deltas[e[0]][e[1] - last.get(thread, e[1])] += 1
        last[thread] = e[1]
    time_bits = sum(entropy(c) for c in deltas.values())
    sizes = [e[2] for _, e in events if e[0] in ALLOCATING]
    if args.size_range:
        lo, hi = args.size_range
        span = math.log(hi / lo)
        per = -sum(p * math.log2(p) for s in range(lo, hi + 1) for p in [math.log((s + 1) / s) / span])
        size_bits = per * len(sizes)
    else:
        size_bits = entropy(collections.Counter(sizes))
    live, free_bits = 0, 0.0
    for _, e in events:
        if e[0] == FREE:
            free_bits += math.log2(max(live, 1))
            live -= 1
        elif e[0] in ALLOCATING and e[0] != REALLOC:
            live += 1
    per_event = {"ops": op_bits, "times": time_bits, "free_choice": free_bits, "sizes": size_bits}
    out = {k: round(v / 8 / n, 3) for k, v in per_event.items()}
    out["total_without_addresses"] = round(sum(per_event.values()) / 8 / n, 3)
    print(json.dumps({"events": n, **out}))


if __name__ == "__main__":
    main()
