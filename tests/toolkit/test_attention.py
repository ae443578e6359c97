"""gpulab.attention: the backend SDPA ran, read from the dispatched operator, and each backend tried alone with
torch's own reasons: on this CPU for real, and against stand-ins that behave as SDPA does on a GPU (a T4: flash and
cuDNN refused with the warnings torch's CUDA checks give, each backend explained in turn, memory-efficient chosen; an
H100 whose torch puts cuDNN first)."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from gpulab.attention import BACKENDS, own_reasons, sdpa_backend, sdpa_backends

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
    with pytest.raises(ValueError, match="fn ran no SDPA operator"):
        sdpa_backend(Q, Q, Q, fn=lambda q, k, v: q @ k.transpose(-2, -1) @ v)


# ---- stand-ins for SDPA on a GPU ------------------------------------------------------------------------------
# What select_sdp_backend (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp) does: try the backends in the order
# torch holds (torch._C._get_sdp_priority_order: flash, memory-efficient, math, cuDNN by default; CUDA's
# priority_order puts cuDNN first on its first call on sm_90/sm_100 with a recent cuDNN), return the first that is
# allowed and can run; if none, re-run every fused backend's checks with debug on, each after its header, and fail.
# Each TORCH_WARN reaches Python as a UserWarning ending in "(Triggered internally at <file>:<line>.)" (the line
# numbers here stand in for the build's).
_OPS = {"flash": "aten::_scaled_dot_product_flash_attention", "cudnn": "aten::_scaled_dot_product_cudnn_attention",
        "memory-efficient": "aten::_scaled_dot_product_efficient_attention"}
_CUDA_UTILS = "(Triggered internally at /pytorch/aten/src/ATen/native/transformers/cuda/sdp_utils.cpp:{}.)"
_CPP_UTILS = "(Triggered internally at /pytorch/aten/src/ATen/native/transformers/sdp_utils_cpp.h:{}.)"


def _allowed():
    return {"flash": torch.backends.cuda.flash_sdp_enabled(), "cudnn": torch.backends.cuda.cudnn_sdp_enabled(),
            "memory-efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
            "math": torch.backends.cuda.math_sdp_enabled()}


def _gpu_sdpa(sm: tuple[int, int]):
    """SDPA on a GPU of compute capability ``sm`` for 16-bit dense inputs without a mask: flash and cuDNN need
    sm80+ (check_flash_attention_hardware_support, check_cudnn_hardware_support), memory-efficient runs from sm50,
    math everywhere. The chosen fused backend is seen as its operator (a profiler range of its name); the math
    composition computes the result."""
    names = {1: "flash", 2: "memory-efficient", 0: "math", 3: "cudnn"}
    runs = {"flash": sm >= (8, 0), "memory-efficient": True, "cudnn": sm >= (8, 0), "math": True}

    def sdpa(q, k, v, **kw):
        allowed = _allowed()
        order = getattr(torch._C, "_get_sdp_priority_order", lambda: [1, 2, 0, 3])()   # torch < 2.6: fixed
        for b in (names[i] for i in order if i in names):
            if allowed[b] and runs[b]:
                if b == "math":
                    return torch.ops.aten._scaled_dot_product_attention_math(q, k, v, **kw)[0]
                with torch.profiler.record_function(_OPS[b]):
                    return torch.ops.aten._scaled_dot_product_attention_math(q, k, v, **kw)[0]
        arch = f"Attempting to run on a sm {sm[0]}.{sm[1]} gpu."
        warnings.warn("Memory efficient kernel not used because: " + _CUDA_UTILS.format(985))
        if not allowed["memory-efficient"]:
            warnings.warn("Memory Efficient attention has been runtime disabled. " + _CPP_UTILS.format(552))
        warnings.warn("Flash attention kernel not used because: " + _CUDA_UTILS.format(987))
        warnings.warn("Flash attention has been runtime disabled. " + _CPP_UTILS.format(540) if not allowed["flash"]
                      else "Flash attention only supports gpu architectures in the range [sm80, sm121]. " + arch + " "
                      + _CUDA_UTILS.format(331))
        warnings.warn("cuDNN attention kernel not used because: " + _CUDA_UTILS.format(989))
        warnings.warn("cuDNN attention has been runtime disabled. " + _CUDA_UTILS.format(706) if not allowed["cudnn"]
                      else "cuDNN MHA only supports gpu architectures in the range [sm80, sm121]. " + arch + " "
                      + _CUDA_UTILS.format(613))
        raise RuntimeError("No available kernel. Aborting execution.")
    return sdpa


t4_sdpa = _gpu_sdpa((7, 5))
H = Q.half()


def test_a_backend_tried_alone_keeps_only_its_own_reasons_as_a_t4_gives_them():
    # forcing flash alone, a T4 explains all three fused backends: memory-efficient's and cuDNN's "runtime disabled"
    # (sdpa_kernel disallowed them) are not reasons flash cannot run
    report = sdpa_backends(H, H, H, fn=t4_sdpa)
    assert report.reasons["flash"] == ("Flash attention kernel not used because: Flash attention only supports gpu "
                                       "architectures in the range [sm80, sm121]. Attempting to run on a sm 7.5 gpu.")
    assert report.reasons["cudnn"] == ("cuDNN attention kernel not used because: cuDNN MHA only supports gpu "
                                       "architectures in the range [sm80, sm121]. Attempting to run on a sm 7.5 gpu.")
    assert report.reasons["memory-efficient"] is None and report.reasons["math"] is None
    assert not any("runtime disabled" in (why or "") or "Memory efficient" in (why or "")
                   for why in report.reasons.values())
    assert set(BACKENDS) == set(report.reasons)
    assert report.default == "memory-efficient"


def test_own_reasons_reads_torchs_headers_whatever_their_case():
    older = ["Memory efficient kernel not used because:", "Memory Efficient attention has been runtime disabled.",
             "Flash attention kernel not used because:", "Flash attention has been runtime disabled.",
             "CuDNN attention kernel not used because:", "CuDNN attention has been runtime disabled."]
    assert own_reasons("cudnn", older) is None and own_reasons("flash", older) is None
    cpu = ["Flash attention kernel not used because:", "Both fused kernels do not support non-zero dropout."]
    assert own_reasons("flash", cpu) == ("Flash attention kernel not used because: Both fused kernels do not "
                                         "support non-zero dropout.")
    assert own_reasons("flash", ["Some check failed."]) == "Some check failed."


def _torchs_order_as_on_cuda(monkeypatch, order=(1, 2, 0, 3)):
    """Read torch's priority order as for a CUDA tensor (these are CPU tensors), set to ``order`` (by default
    torch's default: flash, memory-efficient, math, cuDNN)."""
    from gpulab import attention

    real = attention._torch_order
    monkeypatch.setattr(attention, "_torch_order", lambda device_type: real("cuda"))
    monkeypatch.setattr(torch._C, "_get_sdp_priority_order", lambda: list(order), raising=False)


def test_an_h100_with_a_recent_cudnn_chooses_cudnn_and_the_report_says_it_is_torchs_first(monkeypatch):
    # CUDA's priority_order on sm_90 with a recent cuDNN: cudnn, flash, memory-efficient, math
    _torchs_order_as_on_cuda(monkeypatch, [3, 1, 2, 0])
    report = sdpa_backends(H, H, H, fn=_gpu_sdpa((9, 0)))
    assert report.default == "cudnn" and report.priority == ("cudnn", "flash", "memory-efficient", "math")
    assert report.priority_basis == "torch"
    assert "SDPA chose cudnn: first in torch's priority order" in repr(report)
    assert "cudnn &gt; flash &gt; memory-efficient &gt; math" in report._repr_html_()


def test_a_t4_chooses_the_first_backend_of_torchs_order_that_runs(monkeypatch):
    _torchs_order_as_on_cuda(monkeypatch)                       # torch's default order: flash first (sm_75)
    report = sdpa_backends(H, H, H, fn=t4_sdpa)
    assert report.priority[:2] == ("flash", "memory-efficient") and report.priority_basis == "torch"
    assert report.chosen_because.startswith("SDPA chose memory-efficient: the first that runs these inputs "
                                            "(flash cannot) in torch's priority order")


def test_an_order_that_disagrees_with_the_choice_is_not_claimed(monkeypatch):
    # torch's order read as cuDNN first, but the kernels chosen follow another: the order is measured instead
    _torchs_order_as_on_cuda(monkeypatch, [3, 1, 2, 0])
    standin = _gpu_sdpa((9, 0))

    def flash_first(q, k, v, **kw):
        with monkeypatch.context() as m:
            m.setattr(torch._C, "_get_sdp_priority_order", lambda: [1, 2, 0, 3], raising=False)
            return standin(q, k, v, **kw)

    report = sdpa_backends(H, H, H, fn=flash_first)
    assert report.default == "flash" and report.priority_basis == "measured"
    assert report.priority == ("flash", "memory-efficient", "math", "cudnn")
    assert "torch's priority order" not in report.chosen_because and "measured" in report.chosen_because


def test_a_backend_turned_off_for_every_call_is_named_as_such(monkeypatch):
    # an H100 rehearsing a T4: cuDNN turned off; torch's order still cuDNN first, flash chosen
    _torchs_order_as_on_cuda(monkeypatch, [3, 1, 2, 0])
    before = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(False)
    try:
        report = sdpa_backends(H, H, H, fn=_gpu_sdpa((9, 0)))
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)
    assert report.default == "flash" and report.priority_basis == "torch" and report.disallowed == ("cudnn",)
    assert report.reasons["cudnn"] is None                      # tried alone, it runs
    assert "the first that runs these inputs (cudnn turned off) in torch's priority order" in report.chosen_because


# ---- bad input: named before any backend runs ------------------------------------------------------------------------
def _t(*shape, **kw):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0), **kw)


@pytest.mark.parametrize("q,k,v,kw,kind,match", [
    ([1], Q, Q, {}, TypeError, "q must be a torch tensor of shape"),
    (Q.long(), Q, Q, {}, TypeError, "q must be a floating-point tensor"),
    (Q[0, 0], Q[0, 0], Q[0, 0], {}, ValueError, r"q must have shape \(batch, heads, seq_len, head_dim\)"),
    (Q[:, :, :0], Q, Q, {}, ValueError, "q is empty"),
    (Q, Q.double(), Q, {}, ValueError, "q, k and v must share one dtype"),
    (Q.to("meta"), Q, Q, {}, ValueError, "q, k and v must be on one device"),
    (Q, _t(1, 2, 32, 4), Q, {}, ValueError, "k's head_dim"),
    (Q, Q, _t(1, 2, 10, 16), {}, ValueError, "v must hold one value per key"),
    (Q, _t(1, 3, 32, 16), _t(1, 3, 32, 16), {}, ValueError, "leading dimensions.*enable_gqa=True"),
    (_t(1, 4, 16, 8), _t(1, 3, 16, 8), _t(1, 3, 16, 8), {"enable_gqa": True}, ValueError, "a divisor of q's 4"),
    (Q, Q, Q, {"attn_mask": torch.ones(3, 3, dtype=torch.bool)}, ValueError, r"attn_mask of shape \(3, 3\)"),
    (Q, Q, Q, {"attn_mask": torch.ones(32, 32, dtype=torch.long)}, TypeError, "attn_mask must be bool"),
    (Q, Q, Q, {"attn_mask": torch.ones(32, 32, dtype=torch.bool), "is_causal": True}, ValueError, "two masks"),
    (Q, Q, Q, {"is_causal": "yes"}, TypeError, "is_causal must be True or False"),
    (Q, Q, Q, {"dropout_p": 2.0}, ValueError, r"dropout_p must be a probability in \[0, 1\)"),
    (Q, Q, Q, {"scale": float("nan")}, ValueError, "scale must be a finite number"),
    (Q, Q, Q, {"nonsense": 1}, TypeError, r"takes no keyword\(s\) \['nonsense'\]"),
    (Q, Q, Q, {"fn": 3}, TypeError, "fn must be a callable")])
def test_bad_inputs_are_named_before_any_backend_runs(q, k, v, kw, kind, match):
    for report in (sdpa_backends, sdpa_backend):
        with pytest.raises(kind, match=match):
            report(q, k, v, **kw)


def test_inputs_sdpa_takes_are_still_reported():
    mask = torch.ones(32, 32, dtype=torch.bool).tril()
    assert sdpa_backends(Q, Q, Q, attn_mask=mask).default in BACKENDS
    assert sdpa_backends(Q, Q, Q, attn_mask=torch.zeros(1, 2, 32, 32)).default in BACKENDS
    assert sdpa_backends(_t(1, 4, 16, 8), _t(1, 2, 16, 8), _t(1, 2, 16, 8), enable_gqa=True).default in BACKENDS
    assert sdpa_backends(Q[0], Q[0], Q[0]).default in BACKENDS                           # (batch, seq_len, head_dim)
    assert sdpa_backends(Q, _t(1, 2, 20, 16), _t(1, 2, 20, 4)).default in BACKENDS         # keys other than queries
    with pytest.raises(ValueError, match="backend must be one of"):
        own_reasons("flash2", [])
