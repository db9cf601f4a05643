"""The trace chart (`alloclab trace info --chart`): live bytes over the recording and the
request sizes, from the replayer's --info figures (run/trace.py reads them).
"""

from __future__ import annotations

from pathlib import Path


def write_chart(data: dict, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curve = data["live_curve"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    a.plot([t / 1e9 for t, _ in curve], [v / 1048576 for _, v in curve], lw=1.2)
    a.set_xlabel("seconds since the recording started")
    a.set_ylabel("live requested MB")
    a.set_title("Live bytes over the recording")
    a.grid(alpha=0.3)
    hist = data["size_histogram_log2"]
    top = max((i for i, h in enumerate(hist) if h), default=0)
    b.bar(range(top + 1), hist[: top + 1])
    b.set_xticks(range(0, top + 1, 2), [f"{1 << i}" for i in range(0, top + 1, 2)], rotation=60, fontsize=7)
    b.set_xlabel("request size (bytes, log2 bucket)")
    b.set_ylabel("allocations")
    b.set_title("Request sizes")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
