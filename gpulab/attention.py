"""Which kernel ``torch.nn.functional.scaled_dot_product_attention`` (SDPA) runs, and why the others do not.

SDPA picks one of several backends for each call: FlashAttention, memory-efficient attention (xFormers' kernel),
cuDNN's, or the plain math composition (softmax(QK^T)V in separate ops), and on a CPU its own flash kernel.
:func:`sdpa_backend` names the one a call ran, read from the operator torch dispatched to (``torch.profiler``,
host events only: the same on a CPU and a GPU). :func:`sdpa_backends` tries each backend alone
(``torch.nn.attention.sdpa_kernel``) and keeps torch's own words for why one cannot run these inputs (its
"... kernel not used because" warnings, or the error when it gives none). Which one SDPA picks when several can run
follows torch's priority order: on a GPU the one torch holds (cuDNN's first on sm_90 and sm_100 with a recent cuDNN,
flash first elsewhere), read from torch after a call; on a CPU, measured among the backends that run.

Example:
    >>> import torch
    >>> q = torch.randn(1, 2, 16, 8)
    >>> report = sdpa_backends(q, q, q, is_causal=True)
    >>> report.default in report.available, "math" in report.available
    (True, True)
"""
from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from typing import Any, Callable

from ._format import TableView

__all__ = ["SdpaReport", "sdpa_backend", "sdpa_backends", "own_reasons", "BACKENDS"]

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


_KWARGS = ("attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
_SHAPE = "(batch, heads, seq_len, head_dim), or (batch, seq_len, head_dim)"


def _check_inputs(q: Any, k: Any, v: Any, fn: Any, kwargs: dict[str, Any]) -> None:
    """SDPA's inputs checked before any call, each mistake named with what to pass: ``q``, ``k``, ``v`` floating-point
    tensors of one dtype on one device, of :data:`_SHAPE`, k's head_dim q's, as many values as keys, the leading
    dimensions broadcastable (heads grouped with ``enable_gqa``); SDPA's own keywords of the right kind."""
    import math

    import torch

    if fn is not None and not callable(fn):
        raise TypeError(f"fn must be a callable that calls scaled_dot_product_attention(q, k, v, ...), or None, got "
                        f"{type(fn).__name__} {fn!r:.60}")
    unknown = sorted(set(kwargs) - set(_KWARGS))
    if fn is None and unknown:
        raise TypeError(f"scaled_dot_product_attention takes no keyword(s) {unknown}: pass only {list(_KWARGS)}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch tensor of shape {_SHAPE}, got {type(t).__name__} {t!r:.60}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor (float32, float16 or bfloat16), got dtype {t.dtype}")
        if t.ndim < 3:
            raise ValueError(f"{name} must have shape {_SHAPE}, got shape {tuple(t.shape)}")
        if 0 in t.shape:
            raise ValueError(f"{name} is empty (shape {tuple(t.shape)}): pass at least one query, key and value")
    if not q.ndim == k.ndim == v.ndim:
        raise ValueError(f"q, k and v must have as many dimensions, got shapes {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    if not q.dtype == k.dtype == v.dtype:
        raise ValueError(f"q, k and v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}: pass k.to(q.dtype) "
                         "and v.to(q.dtype)")
    if not q.device == k.device == v.device:
        raise ValueError(f"q, k and v must be on one device, got {q.device}, {k.device}, {v.device}: pass "
                         "k.to(q.device) and v.to(q.device)")
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"k's head_dim (last dimension) must be q's, {q.shape[-1]}, got shape {tuple(k.shape)}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"v must hold one value per key: k has {k.shape[-2]} keys (dimension -2), v {v.shape[-2]}")
    gqa = _flag(kwargs, "enable_gqa")
    grouped = gqa and q.ndim >= 4
    lead = [tuple(t.shape[:-3] if grouped else t.shape[:-2]) for t in (q, k, v)]
    try:
        batch = tuple(torch.broadcast_shapes(*lead))
    except RuntimeError:
        raise ValueError(f"q, k and v's leading dimensions (batch{', heads' if not grouped else ''}) must match or be "
                         f"1, got shapes {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
                         + ("" if gqa else ": for fewer key/value heads than query heads pass enable_gqa=True")) from None
    if grouped and (k.shape[-3] != v.shape[-3] or q.shape[-3] % k.shape[-3]):
        raise ValueError(f"with enable_gqa=True, k and v must have as many heads, a divisor of q's {q.shape[-3]}, got "
                         f"{k.shape[-3]} and {v.shape[-3]}")
    causal, mask = _flag(kwargs, "is_causal"), kwargs.get("attn_mask")
    if mask is not None:
        want = (*batch, *((q.shape[-3],) if grouped else ()), q.shape[-2], k.shape[-2])
        if not isinstance(mask, torch.Tensor):
            raise TypeError(f"attn_mask must be a tensor that broadcasts to {want} (queries x keys), or None, got "
                            f"{type(mask).__name__} {mask!r:.60}")
        if mask.dtype not in (torch.bool, torch.float32, q.dtype):
            raise TypeError(f"attn_mask must be bool (True = attend) or float (added to the scores) in q's dtype, got "
                            f"{mask.dtype}")
        try:
            fits = tuple(torch.broadcast_shapes(tuple(mask.shape), want)) == want
        except RuntimeError:
            fits = False
        if not fits:
            raise ValueError(f"attn_mask of shape {tuple(mask.shape)} does not broadcast to {want} (queries x keys)")
        if mask.device != q.device:
            raise ValueError(f"attn_mask is on {mask.device} but q on {q.device}: pass attn_mask.to(q.device)")
        if causal:
            raise ValueError("attn_mask and is_causal=True are two masks: pass one (is_causal=True alone for a causal "
                             "mask)")
    p = kwargs.get("dropout_p", 0.0)
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p < 1:
        raise ValueError(f"dropout_p must be a probability in [0, 1), got {p!r}")
    scale = kwargs.get("scale")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale)):
        raise ValueError(f"scale must be a finite number (default None: 1/sqrt(head_dim)), got {scale!r}")


def _flag(kwargs: dict[str, Any], name: str) -> bool:
    value = kwargs.get(name, False)
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def sdpa_backend(q: Any, k: Any, v: Any, *, fn: Callable[..., Any] | None = None, **kwargs: Any) -> str:
    """The backend one ``scaled_dot_product_attention(q, k, v, **kwargs)`` call runs ("flash", "memory-efficient",
    "cudnn" or "math"), from the operator it dispatched to. ``fn`` replaces SDPA (a wrapper around it, say).
    ``q``, ``k``, ``v`` and SDPA's keywords are checked before the call: tensors of one floating dtype on one device,
    ``(batch, heads, seq_len, head_dim)`` (or without heads), a mask that broadcasts to queries x keys and no
    ``is_causal`` beside it; each mistake is a ``TypeError``/``ValueError`` naming it.

    Example:
        >>> import torch
        >>> q = torch.randn(1, 2, 16, 8)
        >>> sdpa_backend(q, q, q) in BACKENDS
        True
    """
    from torch.profiler import ProfilerActivity, profile

    _check_inputs(q, k, v, fn, kwargs)
    call = fn or _sdpa()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")            # the profiler's notes on a machine without CUDA
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            call(q, k, v, **kwargs)
    names = [e.name for e in prof.events() if e.name in _OPS]
    if not names:                  # a fn that does not call SDPA: the one mistake only the call itself shows
        raise ValueError("fn ran no SDPA operator: fn, when given, must call "
                         "torch.nn.functional.scaled_dot_product_attention(q, k, v, ...)")
    return _OPS[names[0]]


@dataclass(frozen=True, repr=False)
class SdpaReport(TableView):
    """Per SDPA backend: whether it can run these inputs here and, if not, torch's reason; ``default`` is the one
    SDPA chose with every backend allowed. ``shape``/``dtype``/``device`` describe the inputs. ``priority`` is the
    order torch tries the backends in, and ``priority_basis`` where it comes from: "torch" (the order torch holds for
    this device, read after a call) or "measured" (among the backends that run, each chosen with those before it
    disallowed)."""

    default: str
    reasons: dict[str, str | None]           # backend -> None (it ran) or why not
    shape: tuple[int, ...]
    dtype: str
    device: str
    priority: tuple[str, ...] = ()
    priority_basis: str = "measured"
    disallowed: tuple[str, ...] = ()          # turned off for every call (torch.backends.cuda.enable_*_sdp(False))
    title: str = "Attention backends (scaled_dot_product_attention)"

    @property
    def available(self) -> tuple[str, ...]:
        return tuple(b for b, why in self.reasons.items() if why is None)

    @property
    def chosen_because(self) -> str:
        """Why SDPA chose :attr:`default`: its place in torch's priority order.

        Example:
            >>> r = SdpaReport("cudnn", {"flash": None, "memory-efficient": None, "cudnn": None, "math": None},
            ...                (1, 8, 1024, 64), "bfloat16", "cuda:0", ("cudnn", "flash", "memory-efficient", "math"),
            ...                "torch")
            >>> r.chosen_because
            "SDPA chose cudnn: first in torch's priority order on cuda:0 (cudnn > flash > memory-efficient > math)"
        """
        if not self.priority:
            return f"SDPA chose {self.default}"
        order = " > ".join(self.priority)
        if self.priority_basis == "torch":
            skipped = self.priority[:self.priority.index(self.default)] if self.default in self.priority else ()
            cannot = [b for b in skipped if self.reasons.get(b)]
            off = [b for b in skipped if b in self.disallowed and not self.reasons.get(b)]
            parts = ([f"{', '.join(cannot)} cannot"] if cannot else []) + ([f"{', '.join(off)} turned off"]
                                                                            if off else [])
            place = "first in" if not skipped else f"the first that runs these inputs ({'; '.join(parts)}) in"
            return f"SDPA chose {self.default}: {place} torch's priority order on {self.device} ({order})"
        if len(self.priority) == 1:
            return f"SDPA chose {self.default}, the only backend that runs these inputs here"
        return (f"SDPA chose {self.default}: torch's order among the backends that run here, measured by "
                f"disallowing each choice in turn: {order}")

    def _columns(self) -> tuple[list[str], list[list[str]], str]:
        rows = [[b, "yes" if why is None else "no", "default" if b == self.default else "", why or ""]
                for b, why in self.reasons.items()]
        note = (f"q of shape {list(self.shape)}, {self.dtype} on {self.device}; {self.chosen_because}; each backend "
                "tried alone (torch.nn.attention.sdpa_kernel); the reasons are torch's own")
        return ["backend", "runs here", "chosen", "why not"], rows, note


def _clean(message: str) -> str:
    """A check's warning from torch's sdp_utils without its "(Triggered internally at <file>:<line>.)" tail."""
    return message.split("(Triggered internally at")[0].strip()


# select_sdp_backend's header before each backend's reasons ("Memory efficient kernel not used because:", "Flash
# attention ...", "cuDNN attention ..." or "CuDNN attention ..." by torch's version), and the note each check of a
# disallowed backend gives ("Flash attention has been runtime disabled.")
_HEADER = re.compile(r"^(?P<who>.+?) kernel not used because:\s*(?P<rest>.*)$", re.S)
_DISABLED = "has been runtime disabled."


def _header_backend(who: str) -> str | None:
    low = who.lower()
    for fragment, backend in (("efficient", "memory-efficient"), ("flash", "flash"), ("cudnn", "cudnn"),
                              ("math", "math")):
        if fragment in low:
            return backend
    return None


def own_reasons(backend: str, messages: list[str]) -> str | None:
    """The part of torch's SDPA warnings that is about ``backend``: when one backend is tried alone and cannot run,
    torch explains every backend in turn, the disallowed ones with "... has been runtime disabled."; only the tried
    backend's header and reasons are kept. None when torch said nothing about it.

    Example:
        >>> own_reasons("flash", ["Memory efficient kernel not used because:",
        ...     "Memory Efficient attention has been runtime disabled.", "Flash attention kernel not used because:",
        ...     "Flash attention does not support non-null attn_mask.", "cuDNN attention kernel not used because:",
        ...     "cuDNN attention has been runtime disabled."])
        'Flash attention kernel not used because: Flash attention does not support non-null attn_mask.'
    """
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")
    if isinstance(messages, (str, bytes)) or not isinstance(messages, (list, tuple)) or not all(
            isinstance(m, str) for m in messages):
        raise TypeError(f"messages must be a list of torch's warning texts, got {messages!r:.60}")
    headers: dict[str | None, str] = {}
    sections: dict[str | None, list[str]] = {}
    current: str | None = None
    for message in messages:
        head = _HEADER.match(message)
        if head:
            current = _header_backend(head["who"])
            headers[current] = message[:head.start("rest")].strip()
            message = head["rest"].strip()
        if message and not message.endswith(_DISABLED):
            sections.setdefault(current, []).append(message)
    if sections.get(backend):
        return " ".join([headers[backend], *sections[backend]])
    if not headers and sections.get(None):          # no headers at all: every line is about the one tried
        return " ".join(sections[None])
    return None


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
        except RuntimeError:
            why = own_reasons(backend, [_clean(str(w.message)) for w in said if "sdp_utils" in str(w.message)])
            return why or f"torch has no {backend} kernel for these inputs on {q.device.type} (it gave no other reason)"


def _torch_order(device_type: str) -> tuple[str, ...]:
    """The priority order torch holds for SDPA on CUDA devices (``torch._C._get_sdp_priority_order``; CUDA's
    ``priority_order`` sets it on the first call, cuDNN first where torch prefers it); () elsewhere (a CPU's order
    is fixed in its own dispatch) or where this torch keeps none."""
    import torch
    from torch.nn.attention import SDPBackend

    read = getattr(torch._C, "_get_sdp_priority_order", None)
    if device_type != "cuda" or read is None:
        return ()
    names = {int(getattr(SDPBackend, member)): name for name, member in BACKENDS.items() if hasattr(SDPBackend, member)}
    return tuple(names[int(i)] for i in read() if int(i) in names)


def _allowed() -> set[str]:
    """The backends SDPA may choose now (``torch.backends.cuda.enable_flash_sdp(False)`` and its kin turn one off
    for every call, on a CPU too)."""
    import torch

    flags = {"flash": "flash_sdp_enabled", "memory-efficient": "mem_efficient_sdp_enabled",
             "cudnn": "cudnn_sdp_enabled", "math": "math_sdp_enabled"}
    return {b for b, flag in flags.items() if getattr(torch.backends.cuda, flag, lambda: False)()}


def _priority(q: Any, k: Any, v: Any, call: Callable[..., Any], kwargs: dict[str, Any], default: str,
              available: list[str]) -> tuple[tuple[str, ...], str]:
    """torch's order for q's device when it agrees with the choice SDPA made (the first of it that runs and is
    allowed is the default), else the order measured among the allowed backends that run: each chosen with those
    before it disallowed."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    order = _torch_order(q.device.type)
    available = [b for b in available if b in _allowed()]
    if order and next((b for b in order if b in available), None) == default:
        return order, "torch"
    measured, left = [default], [b for b in available if b != default]
    while len(left) > 1:
        with sdpa_kernel([getattr(SDPBackend, BACKENDS[b]) for b in left]):
            chosen = sdpa_backend(q, k, v, fn=call, **kwargs)
        if chosen not in left:              # a wrapper that ignores the allowed backends: no order to measure
            return tuple(measured), "measured"
        measured.append(chosen)
        left.remove(chosen)
    return tuple(measured + left), "measured"


def sdpa_backends(q: Any, k: Any, v: Any, *, fn: Callable[..., Any] | None = None, **kwargs: Any) -> SdpaReport:
    """Try each SDPA backend alone on these inputs; an :class:`SdpaReport` of which run, which one SDPA picks by
    default, and torch's reason for each that cannot. The inputs are checked first (:func:`sdpa_backend`'s checks):
    a mistake in them is one ``TypeError``/``ValueError`` naming it, not a failure of every backend."""
    _check_inputs(q, k, v, fn, kwargs)
    call = fn or _sdpa()
    reasons = {b: _why_not(b, q, k, v, call, kwargs) for b in BACKENDS}
    default = sdpa_backend(q, k, v, fn=call, **kwargs)
    priority, basis = _priority(q, k, v, call, kwargs, default, [b for b, why in reasons.items() if why is None])
    return SdpaReport(default, reasons, tuple(q.shape), str(q.dtype).replace("torch.", ""), str(q.device),
                      priority, basis, tuple(b for b in BACKENDS if b not in _allowed()))

