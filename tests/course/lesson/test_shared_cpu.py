"""In a notebook on a CPU that other programs keep busy, the lesson's setup cuts PyTorch's threads to the cores they
leave free and says so; on a quiet machine, in a script or on a GPU it changes nothing."""
from __future__ import annotations

import pytest
import torch

from gpulab.course.lesson import setup as lesson_setup


class _Load:
    def __init__(self, pct):
        self.others_pct = pct

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.fixture
def two_cores(monkeypatch):
    import gpulab.interleaved

    monkeypatch.setattr(lesson_setup.os, "cpu_count", lambda: 2)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield lambda pct: monkeypatch.setattr(gpulab.interleaved, "cpu_contention", lambda: _Load(pct))
    torch.set_num_threads(before)


@pytest.mark.parametrize("pct,threads", [(50.0, 1), (30.0, 1), (20.0, 2), (0.0, 2), (100.0, 1)])
def test_threads_follow_the_cores_other_programs_leave(two_cores, pct, threads):
    two_cores(pct)                            # others' share of both cores: 50% = one core held
    note = lesson_setup.shared_cpu_threads(sample_s=0.0)
    assert torch.get_num_threads() == threads
    if threads == 2:
        assert note is None
    else:
        assert f"kept {pct / 50:.1f} of this machine's 2 cores busy" in note and "runs on 1 thread instead of 2" in note
        assert "torch.set_num_threads(2) gives them back" in note


def test_unknown_load_changes_nothing(two_cores):
    two_cores(None)
    assert lesson_setup.shared_cpu_threads(sample_s=0.0) is None and torch.get_num_threads() == 2


def test_only_a_notebook_on_a_cpu_is_adapted(two_cores, monkeypatch):
    two_cores(50.0)
    assert not lesson_setup._in_kernel()                        # pytest: no IPython kernel
    session = lesson_setup.setup()
    assert torch.get_num_threads() == 2 and not any("PyTorch runs on" in n for n in session.notes)
    monkeypatch.setattr(lesson_setup, "_in_kernel", lambda: True)
    session = lesson_setup.setup(adapt_threads=False)                # appendix A1 measures the sharing itself
    assert torch.get_num_threads() == 2 and not any("PyTorch runs on" in n for n in session.notes)
    session = lesson_setup.setup()
    assert torch.get_num_threads() == 1 and any("PyTorch runs on 1 thread" in n for n in session.notes)
    assert "PyTorch runs on 1 thread" in repr(session)
    with pytest.raises(TypeError, match="adapt_threads must be True or False"):
        lesson_setup.setup(adapt_threads="no")
