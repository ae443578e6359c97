"""Which kernel ``torch.nn.functional.scaled_dot_product_attention`` (SDPA) runs, and why the others do not.

SDPA picks one of several backends for each call: FlashAttention, memory-efficient attention (xFormers' kernel),
cuDNN's, or the plain math composition (softmax(QK^T)V in separate ops), and on a CPU its own flash kernel.
:func:`sdpa_backend` names the one a call ran, read from the operator torch dispatched to (``torch.profiler``,
host events only: the same on a CPU and a GPU). :func:`sdpa_backends` tries each backend alone
(``torch.nn.attention.sdpa_kernel``) and keeps torch's own words for why one cannot run these inputs (its
"... kernel not used because" warnings, or the error when it gives none).

Example:
    >>> import torch
    >>> q = torch.randn(1, 2, 16, 8)
    >>> report = sdpa_backends(q, q, q, is_causal=True)
    >>> report.default in report.available, "math" in report.available
    (True, True)
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Callable

from ._format import TableView

__all__ = ["SdpaReport", "sdpa_backend", "sdpa_backends", "BACKENDS"]

# the operator SDPA dispatches to -> the backend's name in this module
_OPS = {
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash",
    "aten::_scaled_dot_product_efficient_attention": "memory-efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cudnn",
    "aten::_scaled_dot_product_attention_math": "math",
    "aten::_scaled_dot_product_attention_math_for_mps": "math",
}
# the backend's name -> torch.nn.attention.SDPBackend member
BACKENDS = {"flash": "FLASH_ATTENTION", "memory-efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION",
            "math": "MATH"}


def _sdpa() -> Callable[..., Any]:
    import torch.nn.functional as F

    return F.scaled_dot_product_attention


def sdpa_backend(q: Any, k: Any, v: Any, *, fn: Callable[..., Any] | None = None, **kwargs: Any) -> str:
    """The backend one ``scaled_dot_product_attention(q, k, v, **kwargs)`` call runs ("flash", "memory-efficient",
    "cudnn" or "math"), from the operator it dispatched to. ``fn`` replaces SDPA (a wrapper around it, say).

    Example:
        >>> import torch
        >>> q = torch.randn(1, 2, 16, 8)
        >>> sdpa_backend(q, q, q) in BACKENDS
        True
    """
    from torch.profiler import ProfilerActivity, profile

    call = fn or _sdpa()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")            # the profiler's notes on a machine without CUDA
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            call(q, k, v, **kwargs)
    names = [e.name for e in prof.events() if e.name in _OPS]
    if not names:
        raise RuntimeError("no SDPA operator ran: pass q, k, v for torch.nn.functional.scaled_dot_product_attention "
                           "(fn, when given, must call it)")
    return _OPS[names[0]]


@dataclass(frozen=True, repr=False)
class SdpaReport(TableView):
    """Per SDPA backend: whether it can run these inputs here and, if not, torch's reason; ``default`` is the one
    SDPA chose with every backend allowed. ``shape``/``dtype``/``device`` describe the inputs."""

    default: str
    reasons: dict[str, str | None]           # backend -> None (it ran) or why not
    shape: tuple[int, ...]
    dtype: str
    device: str
    title: str = "Attention backends (scaled_dot_product_attention)"

    @property
    def available(self) -> tuple[str, ...]:
        return tuple(b for b, why in self.reasons.items() if why is None)

    def _columns(self) -> tuple[list[str], list[list[str]], str]:
        rows = [[b, "yes" if why is None else "no", "default" if b == self.default else "", why or ""]
                for b, why in self.reasons.items()]
        note = (f"q of shape {list(self.shape)}, {self.dtype} on {self.device}; each backend tried alone "
                "(torch.nn.attention.sdpa_kernel); the reasons are torch's own")
        return ["backend", "runs here", "chosen", "why not"], rows, note


def _clean(message: str) -> str:
    """A check's warning from torch's sdp_utils without its "(Triggered internally at <file>:<line>.)" tail."""
    return message.split("(Triggered internally at")[0].strip()


def _why_not(backend: str, q: Any, k: Any, v: Any, call: Callable[..., Any], kwargs: dict[str, Any]) -> str | None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    member = getattr(SDPBackend, BACKENDS[backend], None)
    if member is None:
        return "this torch has no such backend"
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        try:
            with sdpa_kernel([member]):
                call(q, k, v, **kwargs)
            return None
        except RuntimeError as e:
            why = [_clean(str(w.message)) for w in said if "sdp_utils" in str(w.message)]
            if why:
                return " ".join(w for w in why if w)
            return f"torch has no {backend} kernel for these inputs on {q.device.type} (it gave no other reason)"


def sdpa_backends(q: Any, k: Any, v: Any, *, fn: Callable[..., Any] | None = None, **kwargs: Any) -> SdpaReport:
    """Try each SDPA backend alone on these inputs; an :class:`SdpaReport` of which run, which one SDPA picks by
    default, and torch's reason for each that cannot."""
    call = fn or _sdpa()
    reasons = {b: _why_not(b, q, k, v, call, kwargs) for b in BACKENDS}
    default = sdpa_backend(q, k, v, fn=call, **kwargs)
    return SdpaReport(default, reasons, tuple(q.shape), str(q.dtype).replace("torch.", ""), str(q.device))

