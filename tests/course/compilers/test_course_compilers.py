"""Lesson 10's max-autotune scope: PyTorch's own threshold, decided from fake device properties as on a GPU."""
from __future__ import annotations

import inspect
import re
import types

import pytest
import torch

from gpulab import course
from gpulab.course.compilers.modes import MAX_AUTOTUNE_MIN_SMS


def _props(name, sms, major=7):
    # the fields of torch.cuda.get_device_properties() the decision reads
    return types.SimpleNamespace(name=name, multi_processor_count=sms, major=major, minor=5, total_memory=15 * 2**30)


def test_the_threshold_is_the_installed_torchs():
    from torch._inductor import utils

    source = inspect.getsource(utils.is_big_gpu)
    assert "multi_processor_count" in source
    # torch 2.14: min_sms = 16 if xpu else 68; the floor (2.5): min_sms = 68
    assert re.search(rf'(else|min_sms\s*=)\s+{MAX_AUTOTUNE_MIN_SMS}\b', source), source


@pytest.mark.parametrize("name, sms, tunes", [("Tesla T4", 40, False), ("NVIDIA L4", 58, False),
                                              ("NVIDIA GeForce RTX 3080", 68, True),
                                              ("NVIDIA A100-SXM4-40GB", 108, True), ("NVIDIA H100 80GB HBM3", 132, True)])
def test_scope_from_the_devices_sm_count(monkeypatch, pretend_gpus, name, sms, tunes):
    asked = []
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: asked.append(d) or _props(name, sms))
    scope = course.max_autotune_scope("cuda")
    assert asked == ["cuda"] and (scope.sms, scope.tunes_gemms, scope.device_name) == (sms, tunes, name)
    text = repr(scope)
    assert "\n" not in text and f"{sms} SMs" in text
    assert ("tunes no matmuls here" in text) == (not tunes)
    assert course.max_autotune_scope().sms == sms                                   # default: the current GPU


def test_scope_without_a_gpu_gives_the_rule_and_published_counts(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    scope = course.max_autotune_scope()
    assert scope.tunes_gemms is None and scope.sms is None
    assert dict(scope.published)["T4"] == 40 and "at least 68 SMs" in repr(scope)
    assert course.max_autotune_scope("cpu").tunes_gemms is None


def test_rocm_follows_the_architecture(monkeypatch):
    monkeypatch.setattr(torch.version, "hip", "6.2", raising=False)
    assert course.max_autotune_scope(properties=_props("AMD Instinct MI300X", 304, major=9)).tunes_gemms
    assert not course.max_autotune_scope(properties=_props("AMD Radeon", 96, major=10)).tunes_gemms


def test_bad_input():
    with pytest.raises(TypeError, match="properties"):
        course.max_autotune_scope(properties=object())
    with pytest.raises(TypeError, match="device"):
        course.max_autotune_scope(3.5)
