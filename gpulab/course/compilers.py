"""Lesson 10's compile modes: what ``torch.compile(mode="max-autotune")`` tunes on the GPU at hand.

``max-autotune`` turns on three things (``torch._inductor.list_mode_options("max-autotune")``): autotuned GEMM
templates (Triton kernels for matmuls, benchmarked against cuBLAS), coordinate-descent tuning of the kernels
Inductor generates (the fused elementwise and reduction ones), and CUDA graphs. The GEMM templates are used only
on a "big" GPU: PyTorch's ``torch._inductor.utils.is_big_gpu`` requires at least 68 streaming multiprocessors
(SMs, ``torch.cuda.get_device_properties(i).multi_processor_count``) on a CUDA GPU, and logs "Not enough SMs to
use max_autotune_gemm mode" below that; on ROCm it requires an architecture of major version 9 (not 10). A GPU
below the threshold keeps every matmul in cuBLAS, and ``max-autotune`` then differs from ``reduce-overhead`` only
by the tuning of the generated kernels.

Example:
    >>> import types
    >>> t4 = types.SimpleNamespace(name="Tesla T4", multi_processor_count=40, major=7, minor=5)
    >>> max_autotune_scope(properties=t4).tunes_gemms
    False
"""
from __future__ import annotations

import html
import sys
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_AUTOTUNE_MIN_SMS", "AutotuneScope", "max_autotune_scope"]

# torch/_inductor/utils.py, is_big_gpu(): a CUDA GPU with fewer SMs gets no autotuned GEMM templates
MAX_AUTOTUNE_MIN_SMS = 68
_PUBLISHED = ("T4", "A100 40GB SXM", "H100 SXM")        # the course's three GPUs, SMs from gpulab.devicequery


@dataclass(frozen=True, repr=False)
class AutotuneScope:
    """Whether ``max-autotune`` tunes matmuls on a GPU (``tunes_gemms``; None without a CUDA GPU), from its SM
    count (``sms``) against PyTorch's threshold (``min_sms``); ``published`` gives the course's GPUs' SM counts."""

    device_name: str | None
    sms: int | None
    min_sms: int
    tunes_gemms: bool | None
    rocm: bool = False
    published: tuple[tuple[str, int], ...] = ()

    @property
    def sentence(self) -> str:
        others = ", ".join(f"{name} {sms}" for name, sms in self.published)
        rule = (f'mode="max-autotune" tunes matmuls (Triton GEMM templates) only on GPUs with at least '
                f"{self.min_sms} SMs (PyTorch's is_big_gpu)" + (f"; published SM counts: {others}" if others else ""))
        if self.tunes_gemms is None:
            return f"No CUDA GPU here: {rule}."
        if self.rocm:
            verdict = "tunes" if self.tunes_gemms else "does not tune"
            return f"{self.device_name} (ROCm): max-autotune {verdict} matmuls here (on ROCm the rule is the architecture)."
        if self.tunes_gemms:
            return (f"{self.device_name}: {self.sms} SMs, at least {self.min_sms}: max-autotune benchmarks Triton GEMM "
                    "templates against cuBLAS for the matmuls, tunes the generated kernels, and adds CUDA graphs.")
        return (f"{self.device_name}: {self.sms} SMs, fewer than {self.min_sms}: max-autotune tunes no matmuls here "
                "(they stay in cuBLAS); it tunes only the generated (fused elementwise and reduction) kernels and adds "
                "CUDA graphs, so it differs from reduce-overhead by that tuning alone.")

    def __repr__(self) -> str:
        return self.sentence

    def _repr_html_(self) -> str:
        return f"<div>{html.escape(self.sentence)}</div>"


def max_autotune_scope(device: Any = None, *, properties: Any = None) -> AutotuneScope:
    """What ``torch.compile(mode="max-autotune")`` tunes on ``device`` (a CUDA device; default: the current one
    when there is a GPU), decided as PyTorch decides it: ``multi_processor_count`` of the device's properties
    against :data:`MAX_AUTOTUNE_MIN_SMS`. ``properties`` (anything with ``name``, ``multi_processor_count`` and
    ``major``, as ``torch.cuda.get_device_properties`` returns) replaces the query. Without a CUDA GPU,
    ``tunes_gemms`` is None and the sentence gives the rule with the course's GPUs' published SM counts.

    Example:
        >>> import types
        >>> h100 = types.SimpleNamespace(name="NVIDIA H100 80GB HBM3", multi_processor_count=132, major=9, minor=0)
        >>> s = max_autotune_scope(properties=h100)
        >>> s.tunes_gemms, s.sms
        (True, 132)
        >>> max_autotune_scope("cpu").tunes_gemms is None
        True
    """
    from ..devicequery import published_device

    published = tuple((name, int(published_device(name).sms)) for name in _PUBLISHED)
    torch = sys.modules.get("torch")
    rocm = bool(getattr(getattr(torch, "version", None), "hip", None))
    if properties is None:
        if device is not None and not isinstance(device, (str, int)) and type(device).__name__ != "device":
            raise TypeError(f"device must be a CUDA device such as 'cuda:0', an index or None, got {device!r}")
        if device is not None and not str(device).startswith("cuda") and not isinstance(device, int):
            return AutotuneScope(None, None, MAX_AUTOTUNE_MIN_SMS, None, published=published)
        if torch is None or not torch.cuda.is_available():
            return AutotuneScope(None, None, MAX_AUTOTUNE_MIN_SMS, None, published=published)
        properties = torch.cuda.get_device_properties(device if device is not None else torch.cuda.current_device())
    for attr in ("name", "multi_processor_count", "major"):
        if not hasattr(properties, attr):
            raise TypeError(f"properties must be a torch.cuda.get_device_properties() result (with {attr}), "
                            f"got {properties!r}")
    sms = int(properties.multi_processor_count)
    if rocm:
        tunes = properties.major is not None and properties.major >= 9 and properties.major != 10
    else:
        tunes = sms >= MAX_AUTOTUNE_MIN_SMS
    return AutotuneScope(str(properties.name), sms, MAX_AUTOTUNE_MIN_SMS, tunes, rocm, published)
