"""The run's end stops every load client within one shared grace period, not one grace each."""

import subprocess
import sys
import time
from types import SimpleNamespace

from alloclab.run.runner import Runner

IGNORES_SIGTERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(120)"
)


def test_clients_that_ignore_sigterm_are_killed_after_one_shared_grace():
    grace = 1.5
    clients = [
        subprocess.Popen([sys.executable, "-c", IGNORES_SIGTERM], stdout=subprocess.PIPE, start_new_session=True)
        for _ in range(4)
    ]
    try:
        for c in clients:  # each has set its handler before the stop begins
            assert c.stdout.readline().strip() == b"ready"
        runner = SimpleNamespace(exp=SimpleNamespace(grace=grace))
        began = time.monotonic()
        Runner._stop_loads(runner, clients + [None])
        took = time.monotonic() - began
        assert all(c.poll() is not None for c in clients)
        assert all(c.returncode == -9 for c in clients)  # SIGTERM ignored, so SIGKILL ended them
        # one after another this took 4 graces (6 s); at once it is one grace and the reaping
        assert took < 3 * grace, took
    finally:
        for c in clients:
            if c.poll() is None:
                c.kill()
                c.wait()
