"""PyTorch hands the GPU memory it cached back to the driver before TensorFlow starts in the same process:
``find_max_batch_size`` empties the cache on return, and ``course.start_keras`` empties it before TensorFlow is
imported. Run against a fake caching allocator (reserved blocks stay until ``empty_cache``), as on a GPU."""
from __future__ import annotations

import pytest
import torch

import gpulab as gl
from gpulab.course.lesson import keras as course_keras


@pytest.fixture
def allocator(monkeypatch, pretend_gpus):
    """A caching allocator: a step raises ``reserved`` to what it needed; only ``empty_cache`` lowers it."""
    state = {"allocated": 0, "reserved": 0, "peak": 0, "events": []}

    def empty_cache():
        state["reserved"] = state["allocated"]
        state["events"].append("empty_cache")

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (1000 * gl.MiB, 1200 * gl.MiB))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda d=None: state["allocated"])
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda d=None: state["reserved"])
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda d=None: state["peak"])
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda d=None: state.update(peak=state["allocated"]))
    monkeypatch.setattr(torch.cuda, "empty_cache", empty_cache)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: None)
    return state


def _step(state, capacity=1000 * gl.MiB):
    def step(n):
        need = n * gl.MiB
        state["events"].append(f"step {n}")
        if need > capacity:
            raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {n} MiB")
        state["peak"] = max(state["peak"], state["allocated"] + need)
        state["reserved"] = max(state["reserved"], state["allocated"] + need)   # freed tensors stay cached
    return step


def test_find_max_batch_size_returns_the_cache_to_the_driver(allocator):
    search = gl.find_max_batch_size(_step(allocator), start=64, device="cuda:0", time_trials=False)
    assert search.max_batch_size >= 985
    assert allocator["events"][-1] == "empty_cache"          # after the last trial, before returning
    assert allocator["reserved"] == allocator["allocated"] == 0


def test_find_max_batch_size_returns_the_cache_when_even_the_first_batch_does_not_fit(allocator):
    with pytest.raises(MemoryError, match="does not fit"):
        gl.find_max_batch_size(_step(allocator, capacity=10 * gl.MiB), start=64, device="cuda:0", time_trials=False)
    assert allocator["events"][-1] == "empty_cache" and allocator["reserved"] == 0


def test_release_torch_cache_says_how_much_went_back(allocator):
    allocator.update(allocated=100 * gl.MiB, reserved=3 * gl.GiB)
    note = course_keras.release_torch_cache()
    assert allocator["reserved"] == 100 * gl.MiB
    assert note.startswith("PyTorch's CUDA cache returned to the driver") and "2.9 GiB" in note and "100 MiB" in note


def test_release_torch_cache_does_nothing_where_pytorch_never_used_the_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: pytest.fail("CUDA started by the release"))
    assert course_keras.release_torch_cache() is None


def test_start_keras_releases_the_cache_before_tensorflow_is_imported(allocator, monkeypatch):
    allocator.update(reserved=2 * gl.GiB)

    class Imported(Exception):
        pass

    def import_tensorflow():
        allocator["events"].append("import tensorflow")
        raise Imported

    monkeypatch.setattr(course_keras, "import_tensorflow", import_tensorflow)
    with pytest.raises(Imported):
        course_keras.start_keras(seed=None)
    assert allocator["events"][-2:] == ["empty_cache", "import tensorflow"] and allocator["reserved"] == 0
