"""Store.series_arrays (the report's reading path) gives the same values as Store.series."""

import numpy as np
import pytest

from alloclab.store import Store


def _store(tmp_path) -> tuple[Store, int, int]:
    st = Store.create(tmp_path / "run.db")
    gid = st.add_group(
        name="a",
        allocator="glibc",
        kind="system",
        family="glibc",
        version=None,
        env_json="{}",
        command_json="[]",
        is_baseline=1,
    )
    r1 = st.add_replica(group_id=gid, idx=1, name="a-1", start_order=1)
    r2 = st.add_replica(group_id=gid, idx=2, name="a-2", start_order=2)
    rng = np.random.default_rng(5)
    rows = []
    for rid in (r1, r2):
        for k in range(500):
            t = 1_767_225_600.123456 + k * 5.000001
            rss = int(rng.integers(1, 1 << 40)) if k % 7 else None  # NULL metric: left out
            live = int(rng.integers(0, 1 << 52)) if k % 3 else None  # NULL -> NaN
            phase = ("warmup", "load", None)[k % 3]
            rows.append((t, rid, phase, rss, live, float(rng.random()) * 1e4))
    rng.shuffle(rows)  # stored out of time order (as a run interleaves)
    st.add_samples(("t", "replica_id", "phase", "rss_kb", "live_bytes", "cpu_s"), rows)
    st.commit()
    return st, r1, r2


@pytest.mark.parametrize("not_null", [None, "rss_kb"])
def test_series_arrays_match_series(tmp_path, not_null):
    st, r1, r2 = _store(tmp_path)
    cols = ["rss_kb", "phase", "live_bytes", "cpu_s", "ops"]
    for rid in (r1, r2):
        lists = st.series(rid, cols, not_null=not_null)
        arrays = st.series_arrays(rid, cols, not_null=not_null)
        assert list(arrays) == ["t", *cols]
        assert len(arrays["t"]) == (500 - 72 if not_null else 500)
        assert np.all(np.diff(arrays["t"]) > 0)
        for c in ["t", "rss_kb", "live_bytes", "cpu_s", "ops"]:
            assert arrays[c].dtype == np.float64 and arrays[c].flags.c_contiguous
            assert np.array_equal(arrays[c], np.array(lists[c], dtype=float), equal_nan=True), c
        assert arrays["phase"].dtype == object and list(arrays["phase"]) == lists["phase"]


def test_series_arrays_empty_and_bad_column(tmp_path):
    st, _, _ = _store(tmp_path)
    empty = st.series_arrays(999, ["rss_kb", "phase"])
    assert empty["t"].shape == (0,) and empty["rss_kb"].shape == (0,) and empty["phase"].shape == (0,)
    with pytest.raises(ValueError, match="not a samples column: nope"):
        st.series_arrays(1, ["nope"])
