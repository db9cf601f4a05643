import os
import signal
import subprocess
import sys
import time

import pytest

from alloclab.capture import sampler
from tests.waiting import wait_for


def test_read_stat_of_self():
    st = sampler.read_stat(os.getpid())
    assert st.pid == os.getpid() and st.ppid == os.getppid()
    assert st.threads >= 1 and st.start_ticks > 0


def test_comm_with_spaces_and_parentheses(tmp_path):
    weird = tmp_path / "a b) c"
    os.symlink("/bin/sleep", weird)
    p = subprocess.Popen([str(weird), "5"])
    try:
        # Popen returns after the exec: comm is already the link's name once the stat is readable
        st = wait_for(lambda: sampler.read_stat(p.pid), what="the child's /proc/PID/stat")
        assert st.comm == "a b) c" and st.ppid == os.getpid()
    finally:
        p.kill()
        p.wait()


def test_gone_process_reads_none():
    p = subprocess.Popen(["/bin/true"])
    p.wait()
    assert sampler.read_stat(p.pid) is None
    assert sampler.read_statm(p.pid) is None
    assert sampler.read_smaps_rollup(p.pid) is None


def test_tree_follows_the_whole_tree_from_its_identity():
    # sh -> (sleep, sh -> sleep): four processes in one tree
    p = subprocess.Popen(["/bin/sh", "-c", "sleep 5 & /bin/sh -c 'sleep 5 & wait' & wait"], start_new_session=True)
    try:
        root = sampler.read_stat(p.pid).identity
        tree = wait_for(
            lambda: len(t := sampler.tree({root}, sampler.all_processes())) >= 4 and t,
            timeout=5,
            what="the shells to start their sleeps",
        )
        assert len(tree) == 4 and p.pid in tree
        assert sampler.tree({root}, {}) == []
        assert sampler.tree({(p.pid, root[1] + 1)}, sampler.all_processes()) == []  # another start: not this process
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def test_process_age_counts_from_the_start_time():
    p = subprocess.Popen(["sleep", "5"])
    try:
        start = sampler.read_stat(p.pid).start_ticks
        age = wait_for(lambda: (a := sampler.process_age(start)) >= 0.2 and a, 5, "the process to be 0.2 s old")
        assert age < 5
    finally:
        p.kill()
        p.wait()


def test_smaps_rollup_sees_memory_being_touched():
    code = "import time; b = bytearray(64 << 20); b[::4096] = b'x' * len(b[::4096]); print('ok', flush=True); time.sleep(5)"
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ok"
        full = sampler.read_smaps_rollup(p.pid)
        vms, rss = sampler.read_statm(p.pid)
        assert full["anon_kb"] >= 64 * 1024 and full["uss_kb"] >= 64 * 1024
        assert full["pss_kb"] <= full["rss_kb"] and abs(full["rss_kb"] - rss) < 4096 and vms >= rss
    finally:
        p.kill()
        p.wait()


def test_budget_limits_the_full_tier():
    budget = sampler.SmapsBudget(share=1e-6, grace=0.0)
    budget.spent = 1.0  # already over any budget
    readings = sampler.sample_processes([os.getpid()], budget)
    assert len(readings) == 1 and readings[0].full is None and readings[0].rss_kb > 0
    generous = sampler.SmapsBudget(share=1.0)
    readings = sampler.sample_processes([os.getpid()], generous)
    assert readings[0].full is not None and generous.spent > 0


def test_budget_takes_turns_stalest_first():
    b = sampler.SmapsBudget(share=1.0)
    b.last_full = {(1, 1): 5.0, (2, 2): 1.0}
    assert b.order([(1, 1), (2, 2), (3, 3)]) == [(3, 3), (2, 2), (1, 1)]


def test_the_full_tier_takes_turns_across_replicas_not_within_each():
    """A run's 12 tor relays: sampled replica by replica, each with its own full tier, the budget
    went to the replicas sampled first every tick, and two of them had no full reading for the
    last half of the run. One full tier over all replicas, stalest first, gives each its turn."""
    children = [subprocess.Popen(["sleep", "60"]) for _ in range(4)]
    try:
        wait_for(lambda: all(sampler.read_stat(c.pid) for c in children), what="the children's /proc/PID/stat")
        budget = sampler.SmapsBudget(share=1.0, per_tick=1e-9)  # one smaps_rollup read a tick
        fulls = {c.pid: 0 for c in children}
        for _ in range(8):
            budget.begin_tick()
            for readings in sampler.sample_replicas([([c.pid], None) for c in children], budget):
                assert len(readings) == 1
                fulls[readings[0].stat.pid] += readings[0].full is not None
        assert sorted(fulls.values()) == [2, 2, 2, 2], fulls  # per replica: [0, 0, 0, 8]
    finally:
        for c in children:
            c.kill()
            c.wait()


def test_a_per_tick_cap_keeps_a_tick_from_spending_what_skipped_slots_accrued():
    """Issue 25: under load the fleet collector's ticks fell behind, each one spending on the full
    tier the budget that slots skipped had accrued. With per_tick, one tick spends at most that."""
    accrued = sampler.SmapsBudget(share=0.02, started=time.monotonic() - 100.0)  # 2 s accrued
    capped = sampler.SmapsBudget(share=0.02, started=time.monotonic() - 100.0, per_tick=0.02)
    for b in (accrued, capped):
        b.begin_tick()
        b.spent += 0.5  # half a second of smaps_rollup in one tick
    assert accrued.allowed() and not capped.allowed()
    capped.begin_tick()  # the next tick: its own share again
    assert capped.allowed()


def test_the_stalest_first_record_keeps_only_processes_still_read():
    b = sampler.SmapsBudget(share=1.0)
    b.last_full = {(10_000_000 + i, 1): float(i) for i in range(5000)}  # processes long gone
    sampler.full_tier(sampler.sample_processes([os.getpid()], None), b)
    assert len(b.last_full) == 1 and next(iter(b.last_full))[0] == os.getpid()


def test_lazyfree_pages_are_counted_while_rss_still_holds_them(test_native_dir):
    # a real process maps 64 MB, touches it, frees 40 MB with MADV_FREE: the pages stay resident
    p = subprocess.Popen(
        [str(test_native_dir / "lazyfree"), "--mb", "64", "--free-mb", "40", "--seconds", "30"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdout.readline().strip() == "ready"
        full = sampler.read_smaps_rollup(p.pid)
        assert 39 * 1024 <= full["lazyfree_kb"] <= 41 * 1024, full
        assert full["rss_kb"] >= 64 * 1024 and full["anon_kb"] >= 64 * 1024
        # footprint = RSS - LazyFree: what the process would keep under memory pressure
        assert 23 * 1024 <= full["rss_kb"] - full["lazyfree_kb"] <= 30 * 1024
        readings = sampler.sample_processes([p.pid], sampler.SmapsBudget(share=1.0))
        assert readings[0].full["lazyfree_kb"] == pytest.approx(40 * 1024, abs=1024)
    finally:
        p.kill()
        p.wait()


def test_smaps_rollup_without_lazyfree_reads_zero(monkeypatch):
    # kernels before 4.12 have no LazyFree line: the figure is 0, not a crash
    text = b"00400000-7fff ---p 00000000 00:00 0 [rollup]\nRss: 100 kB\nPss: 50 kB\nAnonymous: 80 kB\n"
    monkeypatch.setattr(sampler, "_read", lambda path: text)
    full = sampler.read_smaps_rollup(1)
    assert full["lazyfree_kb"] == 0 and full["rss_kb"] == 100 and full["anon_kb"] == 80
