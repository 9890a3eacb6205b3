"""The demo's release in a child process: values and errors come back to the parent, the guard still refuses."""
from __future__ import annotations

import dataclasses
import os

import pytest

from conftest import make_toy_dataset
from privsynth.data import minari_io
from privsynth.demo import DemoConfig, _in_child, _timed_release
from privsynth.errors import PrivacyError, PrivsynthError


def test_child_returns_its_value_from_another_process():
    wait = _in_child(lambda: {"pid": os.getpid(), "rows": list(range(5))})
    value = wait()
    assert value["rows"] == [0, 1, 2, 3, 4] and value["pid"] != os.getpid()


def test_child_errors_are_raised_in_the_parent_with_their_type():
    def refuse():
        raise PrivacyError("refusing in the child")

    with pytest.raises(PrivacyError, match="refusing in the child"):
        _in_child(refuse)()


def test_a_child_that_dies_is_an_error_not_a_hang():
    with pytest.raises(PrivsynthError, match="exit code 3"):
        _in_child(lambda: os._exit(3))()


def test_release_in_the_child_is_guarded_and_writes_nothing_when_refused():
    """A dataset without a privacy card is refused by the guard inside the child; nothing reaches the store."""
    ds = make_toy_dataset()
    ds = dataclasses.replace(ds, info=dataclasses.replace(ds.info, name="privsynth/demo-refused-v0"))
    with pytest.raises(PrivacyError, match="no privacy card"):
        _in_child(lambda: _timed_release(ds, None, "privsynth/demo-refused-v0", DemoConfig()))()
    assert not minari_io.dataset_exists("privsynth/demo-refused-v0")


def test_without_fork_the_release_runs_in_process(monkeypatch):
    """Where the platform has no fork (Windows), the same call runs in this process; errors still surface at wait()."""
    import multiprocessing

    monkeypatch.setattr(multiprocessing, "get_all_start_methods", lambda: ["spawn"])
    assert _in_child(lambda: os.getpid())() == os.getpid()

    def refuse():
        raise PrivacyError("refused here")

    wait = _in_child(refuse)
    with pytest.raises(PrivacyError, match="refused here"):
        wait()


def test_demo_threads_follow_the_cores_free_now(monkeypatch):
    """The demo's thread count comes from busy time measured now (/proc/stat), the load average only as a fallback."""
    import privsynth.threads as demo  # the demo's thread count comes from privsynth.threads

    busy = demo.busy_cores(0.05)
    if busy is not None:  # Linux: a share of the machine's cpus
        assert 0.0 <= busy <= (os.cpu_count() or 1) + 1e-9
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(demo, "busy_cores", lambda window: 0.1)
    assert demo.idle_cores() == 2
    monkeypatch.setattr(demo, "busy_cores", lambda window: 1.6)
    assert demo.idle_cores() == 1
    monkeypatch.setattr(demo, "busy_cores", lambda window: None)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.2, 0.0, 0.0))
    assert demo.idle_cores() == 2
