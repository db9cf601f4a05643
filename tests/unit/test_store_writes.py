"""The store's typed writes on a real SQLite file: SQLite's failures arrive as StoreError, a
sampling tick keeps what it wrote when it fails (a transaction drops it), misspelt columns fail."""

import sqlite3

import pytest

from alloclab.common.errors import StoreError, UserError
from alloclab.store import Store


def test_sqlite_failures_arrive_as_one_store_error(tmp_path):
    st = Store.create(tmp_path / "run.db")
    with st.transaction():
        st.add_group(name="a", allocator="glibc")
    with pytest.raises(StoreError) as err:
        st.add_group(name="a", allocator="glibc")  # UNIQUE(name)
    assert not isinstance(err.value, sqlite3.Error) and "UNIQUE" in str(err.value) and not err.value.disk_full
    st.close()
    with pytest.raises(StoreError):
        st.meta()  # a closed store: sqlite3.ProgrammingError underneath


def test_a_failed_tick_keeps_its_rows_a_failed_transaction_drops_them(tmp_path):
    st = Store.create(tmp_path / "run.db")
    with st.transaction():
        gid = st.add_group(name="a", allocator="glibc", is_baseline=1)
        rid = st.add_replica(group_id=gid, name="a-1", idx=1)
    with pytest.raises(RuntimeError), st.tick():
        st.add_event(1.0, "phase", "kept", rid, "a")
        raise RuntimeError("a tick failed half-way")
    with pytest.raises(RuntimeError), st.transaction():
        st.add_event(2.0, "phase", "dropped")
        raise RuntimeError("a set-up failed half-way")
    assert [e["description"] for e in st.events()] == ["kept"]
    assert st.groups()[0]["is_baseline"] == 1 and st.replicas()[0]["group"] == "a"


def test_a_misspelt_column_is_refused_before_any_sql(tmp_path):
    st = Store.create(tmp_path / "run.db")
    with pytest.raises(ValueError, match="not a replicas column: endkind"):
        st.update_replica(1, endkind="stopped")
    with pytest.raises(ValueError, match="not a samples column: rss"):
        st.add_samples(("t", "replica_id", "rss"), [])


def test_a_failed_new_run_leaves_nothing_behind(tmp_path):
    """new_run_directory (import torutils, import prometheus, merge): what it made goes again."""
    from alloclab.store import new_run_directory

    def fail_in(out):
        with pytest.raises(RuntimeError), new_run_directory(out):
            Store.create(out / "run.db").close()
            (out / "run.db-wal").write_bytes(b"")
            raise RuntimeError("a full disk, say")

    fail_in(tmp_path / "new" / "deeper" / "run")
    assert list(tmp_path.iterdir()) == []  # the parents it made, too
    (tmp_path / "given").mkdir()  # an empty directory the user gave: kept, emptied
    fail_in(tmp_path / "given")
    assert [p.name for p in tmp_path.iterdir()] == ["given"] and list((tmp_path / "given").iterdir()) == []
    (tmp_path / "file").write_text("")
    with pytest.raises(UserError, match="cannot create"), new_run_directory(tmp_path / "file" / "run"):
        pass


def test_processes_seen_sets_last_seen_of_the_given_processes_only(tmp_path):
    st = Store.create(tmp_path / "run.db")
    with st.transaction():
        rid = st.add_replica(group_id=st.add_group(name="a", allocator="glibc"), name="a-1", idx=1)
        ids = [
            st.add_process(replica_id=rid, pid=p, start_ticks=p, first_seen=1.0, last_seen=1.0) for p in (10, 11, 12)
        ]
        st.processes_seen(5.0, [ids[0], ids[2], ids[2]])
        st.processes_seen(6.0, [])
    assert [p["last_seen"] for p in st.processes()] == [5.0, 1.0, 5.0]
