"""gpulab.attention: the backend SDPA ran, read from the dispatched operator, and each backend tried alone with
torch's own reasons: on this CPU for real, and against a stand-in that behaves as SDPA does on a T4 (flash refused
with the architecture warning torch's CUDA checks give, memory-efficient chosen)."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from gpulab.attention import BACKENDS, sdpa_backend, sdpa_backends

Q = torch.randn(1, 2, 32, 16)


def test_the_cpu_runs_its_flash_kernel_and_the_math_composition():
    report = sdpa_backends(Q, Q, Q, is_causal=True)
    assert report.default == "flash" and set(report.available) == {"flash", "math"}
    assert "no memory-efficient kernel" in report.reasons["memory-efficient"]
    text = repr(report)
    assert "default" in text and "float32 on cpu" in text and "<table" in report._repr_html_()


def test_torchs_reason_is_kept_without_its_source_location():
    b = Q.bfloat16()
    report = sdpa_backends(b, b, b, dropout_p=0.1)
    assert report.default == "math"
    assert "dropout" in report.reasons["flash"] and "Triggered internally" not in report.reasons["flash"]


def test_the_backend_is_the_dispatched_operator():
    def math_only(q, k, v, **kw):             # what SDPA does when only the math path is allowed
        return torch.ops.aten._scaled_dot_product_attention_math(q, k, v, **kw)[0]

    assert sdpa_backend(Q, Q, Q, fn=math_only) == "math"
    with pytest.raises(RuntimeError, match="no SDPA operator ran"):
        sdpa_backend(Q, Q, Q, fn=lambda q, k, v: q @ k.transpose(-2, -1) @ v)


def t4_sdpa(q, k, v, **kw):
    """SDPA as a T4 (sm_75) answers: flash refused with the warnings torch's CUDA checks give (sdp_utils.cpp),
    cuDNN likewise; memory-efficient and math allowed (the math path stands in for both here)."""
    flags = {"flash": torch.backends.cuda.flash_sdp_enabled(), "cudnn": torch.backends.cuda.cudnn_sdp_enabled(),
             "memory-efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
             "math": torch.backends.cuda.math_sdp_enabled()}
    if not (flags["memory-efficient"] or flags["math"]):
        where = "(Triggered internally at /pytorch/aten/src/ATen/native/transformers/cuda/sdp_utils.cpp:{}.)"
        if flags["flash"]:
            warnings.warn("Flash attention kernel not used because: " + where.format(811))
            warnings.warn("Flash attention only supports gpu architectures in the range [sm80, sm90]. Attempting to "
                          "run on a sm 7.5 gpu. " + where.format(212))
        if flags["cudnn"]:
            warnings.warn("CuDNN attention kernel not used because: " + where.format(815))
        raise RuntimeError("No available kernel. Aborting execution.")
    return torch.ops.aten._scaled_dot_product_attention_math(q, k, v, **kw)[0]


def test_reasons_as_a_t4_gives_them():
    report = sdpa_backends(Q, Q, Q, fn=t4_sdpa)
    assert report.reasons["flash"] == ("Flash attention kernel not used because: Flash attention only supports gpu "
                                       "architectures in the range [sm80, sm90]. Attempting to run on a sm 7.5 gpu.")
    assert report.reasons["memory-efficient"] is None and report.reasons["math"] is None
    assert report.reasons["cudnn"].startswith("CuDNN attention kernel not used because")
    assert set(BACKENDS) == set(report.reasons)
