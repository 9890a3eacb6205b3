"""Stopping a parallel benchmark run: Ctrl-C cancels the queue and ends the workers at once (keeping what had
finished), and workers die with their parent even when it is SIGKILLed."""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from privsynth.evaluation.executors import LocalExecutor


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped) counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def test_ctrl_c_cancels_the_queue_and_ends_the_workers():
    results = LocalExecutor(2).map(time.sleep, [0.0, 0.0, 30.0, 30.0, 30.0, 30.0])
    assert next(results) is None  # a first result: the pool is up
    workers = [p.pid for p in mp.active_children()]
    assert workers
    time.sleep(1.0)  # the second 0 s task finishes meanwhile (measured: under 5 ms): it is handed over, not lost
    t0 = time.monotonic()
    kept = []
    with pytest.raises(KeyboardInterrupt):
        kept.append(results.throw(KeyboardInterrupt()))  # what Ctrl-C raises in the parent while it waits
        while True:
            kept.append(next(results))
    assert time.monotonic() - t0 < 3.0, "the queued 30 s tasks were waited for"
    assert kept == [None]
    assert not any(_alive(pid) for pid in workers)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_die_with_a_killed_parent(tmp_path):
    script = textwrap.dedent("""
        import multiprocessing as mp, sys, time
        from privsynth.evaluation.executors import LocalExecutor
        if __name__ == "__main__":
            results = LocalExecutor(2).map(time.sleep, [0.0, 60.0, 60.0, 60.0])
            next(results)
            print(" ".join(str(p.pid) for p in mp.active_children()), flush=True)
            next(results)
    """)
    path = tmp_path / "parent.py"
    path.write_text(script)
    proc = subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert pids
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        deadline = time.monotonic() + 5.0
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(p) for p in pids), "workers outlived their killed parent"
    finally:
        proc.kill()
        proc.wait()
