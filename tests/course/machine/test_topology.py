"""The machine under a CPU timer: the topology read from psutil and /sys, and pinning that always gives the CPUs
back, even when the block raises; a system that cannot pin runs the block unpinned and says so."""
from __future__ import annotations

import os

import pytest

from gpulab import course
from gpulab.course.machine import topology


def test_the_topology_reads_the_machine(monkeypatch, tmp_path):
    t = course.cpu_topology()
    assert t.logical >= t.physical >= 1 and set(t.affinity) == os.sched_getaffinity(0)
    text = repr(t)
    assert "physical" in text and "this process may run on" in text and "<table" in t._repr_html_()
    (tmp_path / "smt").mkdir()
    (tmp_path / "smt" / "control").write_text("on\n")
    (tmp_path / "cpu0" / "cpufreq").mkdir(parents=True)
    (tmp_path / "cpu0" / "cpufreq" / "scaling_governor").write_text("powersave\n")
    monkeypatch.setattr(topology, "SYS_CPU", tmp_path)
    monkeypatch.setattr("psutil.cpu_count", lambda logical=True: 8 if logical else 4)
    t = course.cpu_topology()
    assert (t.smt, t.governor, t.physical, t.logical, t.siblings_per_core) == ("on", "powersave", 4, 8, 2.0)
    assert "2 logical CPUs per core (SMT on)" in repr(t) and "powersave" in repr(t)


def test_pinning_gives_the_cpus_back_even_when_the_block_raises():
    before = os.sched_getaffinity(0)
    last = sorted(before)[-1]
    with course.pinned(last) as cpu:
        assert cpu == last and os.sched_getaffinity(0) == {last}
    assert os.sched_getaffinity(0) == before
    with pytest.raises(KeyError):
        with course.pinned(last):
            raise KeyError("inside")
    assert os.sched_getaffinity(0) == before
    with pytest.raises(ValueError, match="is not one this process may run on"):
        with course.pinned(max(before) + 100):
            pass
    with pytest.raises(ValueError, match="cpu must be a whole number"):
        with course.pinned(-1):
            pass


def test_a_system_that_cannot_pin_runs_unpinned_and_says_so(monkeypatch, capsys):
    monkeypatch.delattr(os, "sched_setaffinity")
    monkeypatch.setattr(topology, "_said", set())
    with course.pinned(0) as cpu:
        assert cpu is None
    with course.pinned(0):
        pass
    assert capsys.readouterr().out.count("cannot pin a process") == 1
