"""The snapshot the bad-input sweep takes around every gpulab call (tests/support/globalstate.py) sees each kind of global
state a call could leave changed, and a loss of the user's data; a call that changes nothing passes."""
from __future__ import annotations

import logging
import os
import random
import subprocess
import sys
import threading
import warnings

import pytest

from support import badinput
from support import globalstate


def _leaks_of(change, undo=None, **kw):
    before = globalstate.snapshot()
    try:
        change()
        return globalstate.leaks(before, wait_s=0.3, **kw)
    finally:
        if undo is not None:
            undo()


def test_a_call_that_changes_nothing_passes():
    assert _leaks_of(lambda: sum(range(10))) == []


def test_an_environment_variable_set_or_removed_is_seen(monkeypatch):
    monkeypatch.delenv("GPULAB_STATE_PROBE", raising=False)
    found = _leaks_of(lambda: os.environ.__setitem__("GPULAB_STATE_PROBE", "1"),
                      lambda: os.environ.pop("GPULAB_STATE_PROBE", None))
    assert found == ["environment variable GPULAB_STATE_PROBE: None -> '1'"]
    assert _leaks_of(lambda: os.environ.__setitem__("GPULAB_STATE_PROBE", "1"),
                     lambda: os.environ.pop("GPULAB_STATE_PROBE", None), allow=("env",)) == []


def test_a_logger_level_and_a_warnings_filter_are_seen():
    logger = logging.getLogger("gpulab.state_probe")
    level = logger.level
    found = _leaks_of(lambda: logger.setLevel(logging.ERROR), lambda: logger.setLevel(level))
    assert len(found) == 1 and "gpulab.state_probe" in found[0]
    with warnings.catch_warnings():
        found = _leaks_of(lambda: warnings.filterwarnings("ignore", message="state probe"))
    assert len(found) == 1 and found[0].startswith("warnings filters changed")


@pytest.mark.parametrize("which", ["torch", "numpy", "random"])
def test_each_global_random_generator_is_watched(which):
    import numpy as np
    import torch

    draw = {"torch": lambda: torch.rand(1), "numpy": lambda: np.random.rand(), "random": random.random}[which]
    saved = (torch.get_rng_state(), np.random.get_state(), random.getstate())

    def restore():
        torch.set_rng_state(saved[0]), np.random.set_state(saved[1]), random.setstate(saved[2])

    found = _leaks_of(draw, restore)
    assert len(found) == 1 and "random number generator" in found[0]


def test_a_torch_switch_is_seen():
    import torch

    n = torch.get_num_threads()
    found = _leaks_of(lambda: torch.set_num_threads(max(1, n - 1) if n > 1 else 2), lambda: torch.set_num_threads(n))
    assert found == [f"torch threads: {n} -> {max(1, n - 1) if n > 1 else 2}"]


def test_a_thread_or_a_child_process_left_running_is_seen():
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="state-probe", daemon=True)
    try:
        found = _leaks_of(thread.start)
    finally:
        stop.set()
        thread.join(5)
    assert found == ["thread 'state-probe' (Thread) still running"]
    child = None

    def start():
        nonlocal child
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])

    try:
        found = _leaks_of(start)
    finally:
        child.kill()
        child.wait(10)
    assert found == [f"child processes still running: [{child.pid}]"]


def test_a_thread_that_ends_in_time_is_no_leak():
    assert _leaks_of(lambda: threading.Thread(target=lambda: None).start()) == []


def test_a_guarded_file_changed_or_removed_is_a_loss(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    before = globalstate.snapshot([tmp_path])
    assert globalstate.losses(before) == []
    notes.write_text("overwritten\n")
    assert globalstate.losses(before) == [f"{notes} was changed"]
    notes.unlink()
    assert globalstate.losses(before) == [f"{notes} was removed"]


def test_the_sweep_classifies_a_leaking_call_as_a_leak(monkeypatch):
    monkeypatch.delenv("GPULAB_STATE_PROBE", raising=False)

    def leaky(x):
        os.environ["GPULAB_STATE_PROBE"] = "left"
        raise TypeError(f"x must be a number, got {x!r}")

    case = badinput.Case("probe", leaky, {"x": 1}, {"x": ["one"]})
    try:
        got = badinput.attempt(case, "x", "one")
    finally:
        os.environ.pop("GPULAB_STATE_PROBE", None)
    assert got.outcome == "leak" and "GPULAB_STATE_PROBE" in got.detail
