"""course.check_dali: the GPU ("mixed") pipeline is checked against torchvision with its own tolerance."""
import numpy as np
import pytest

from gpulab import course
from gpulab.course.data import dali as dali_mod


class _FakeImages:
    size, channels = 16, 3


def _fake_loader(log, offset):
    def dali_loader(images, batch_size, **kw):
        log.append((batch_size, kw))
        x = np.zeros((batch_size, 3, 16, 16), np.float32) + offset
        return iter([(x, np.arange(batch_size) % 2)])
    return dali_loader


@pytest.mark.parametrize("device, passes", [("cuda", True), ("cuda:1", True), ("cpu", False)])
def test_gpu_pipeline_gets_its_own_tolerance(monkeypatch, device, passes):
    log = []
    offset = (dali_mod.CPU_ATOL + dali_mod.GPU_ATOL) / 2          # nvJPEG-sized difference: GPU ok, CPU not
    monkeypatch.setattr(dali_mod, "dali_loader", _fake_loader(log, offset))
    reference = (np.zeros((4, 3, 16, 16), np.float32), np.arange(4) % 2)
    result = course.check_dali(reference, _FakeImages(), device=device, crop=16)
    assert result.ok is passes
    assert result.atol == (dali_mod.GPU_ATOL if device.startswith("cuda") else dali_mod.CPU_ATOL)
    (n, kw), = log
    assert n == 4 and kw["augment"] is False and kw["shuffle"] is False and kw["device"] == device
    assert ("GPU" in result.names[1]) is device.startswith("cuda")


def test_tolerances_are_ordered_and_typed():
    assert 0 < dali_mod.CPU_ATOL < dali_mod.GPU_ATOL < 0.1
    with pytest.raises(TypeError):
        course.dali_tolerance("cuda")


def test_gpu_difference_beyond_tolerance_fails(monkeypatch):
    monkeypatch.setattr(dali_mod, "dali_loader", _fake_loader([], 2 * dali_mod.GPU_ATOL))
    reference = (np.zeros((2, 3, 16, 16), np.float32), np.arange(2) % 2)
    assert not course.check_dali(reference, _FakeImages(), device="cuda", crop=16).ok
