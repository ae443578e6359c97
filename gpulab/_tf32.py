"""TF32: the one place gpulab reads and sets PyTorch's switches (re-exported by :mod:`gpulab.system`).

Example:
    >>> from gpulab.system import tf32_state
    >>> tf32_state().api in ("fp32_precision", "allow_tf32")
    True
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator, Literal

from ._check import checked

__all__ = ["TF32State", "tf32_state", "tf32_switched", "tf32_off"]

@dataclass(frozen=True)
class TF32State:
    """May fp32 matmuls (``matmul``) and cuDNN convolutions (``cudnn``) use TF32 now? ``api``: the switches torch
    prefers, ``"fp32_precision"`` (torch 2.9+: ``torch.backends.cuda.matmul`` / ``cudnn.conv.fp32_precision``; there the
    others are deprecated) or ``"allow_tf32"``;
    ``matmul_setting``: as that API spells it."""
    matmul: bool
    cudnn: bool
    api: Literal["fp32_precision", "allow_tf32"]
    matmul_setting: str


def _tf32_switches(torch_module: Any) -> tuple[Any, dict[str, tuple[Any, ...]] | None]:
    """torch, and its ``fp32_precision`` switches (matmul; cuDNN conv and rnn) or None where it has only allow_tf32."""
    if torch_module is None:
        import torch as torch_module
    conv, rnn = (getattr(torch_module.backends.cudnn, op, None) for op in ("conv", "rnn"))
    if conv is None or rnn is None or not hasattr(torch_module.backends.cuda.matmul, "fp32_precision"):
        return torch_module, None
    return torch_module, {"matmul": (torch_module.backends.cuda.matmul,), "cudnn": (conv, rnn)}


@checked("torch")
def tf32_state(torch_module: Any = None) -> TF32State:
    """PyTorch's TF32 switches now, read through the API the installed torch prefers.

    >>> tf32_state().api in ("fp32_precision", "allow_tf32")
    True
    """
    torch, new = _tf32_switches(torch_module)
    if new is not None:
        mm, conv = new["matmul"][0].fp32_precision, new["cudnn"][0].fp32_precision
        return TF32State(mm == "tf32", conv == "tf32", "fp32_precision", str(mm))
    setting = torch.get_float32_matmul_precision()
    return TF32State(setting != "highest", bool(torch.backends.cudnn.allow_tf32), "allow_tf32", setting)


@checked("torch", matmul="flag?", cudnn="flag?")
@contextlib.contextmanager
def tf32_switched(matmul: bool | None = None, cudnn: bool | None = None, *,
                  torch_module: Any = None) -> Iterator[TF32State]:
    """Inside the block fp32 matmuls (``matmul``) and cuDNN convolutions and RNNs (``cudnn``) may use TF32 (True)
    or not (False); None leaves a switch as it is. Set through the API the installed torch prefers and restored
    on exit, even after an error. Yields the :class:`TF32State` as set.

    >>> with tf32_switched(matmul=True, cudnn=False) as s:
    ...     s.matmul, s.cudnn
    (True, False)
    """
    torch, new = _tf32_switches(torch_module)
    saved = ([(s, s.fp32_precision) for group in new.values() for s in group] if new is not None
             else (torch.get_float32_matmul_precision(), bool(torch.backends.cudnn.allow_tf32)))
    try:
        if matmul is not None and new is not None:
            new["matmul"][0].fp32_precision = "tf32" if matmul else "ieee"
        elif matmul is not None:
            torch.backends.cuda.matmul.allow_tf32 = matmul
        if cudnn is not None:
            torch.backends.cudnn.allow_tf32 = cudnn          # see _restore_cudnn: the one setter torch can read back
        yield tf32_state(torch)
    finally:
        if new is not None:
            (mm, mm_setting), *cudnn_saved = saved
            mm.fp32_precision = mm_setting
            _restore_cudnn(torch, cudnn_saved)
        else:
            torch.set_float32_matmul_precision(saved[0])
            torch.backends.cudnn.allow_tf32 = saved[1]


def tf32_off(torch_module: Any = None) -> TF32State:
    """Switch TF32 off for fp32 matmuls and cuDNN for the rest of the process (a GPU without TF32 rehearsed on one
    with it), through the API the installed torch prefers; the state as set.

    >>> with tf32_switched():          # restored after the block
    ...     tf32_off().cudnn
    False
    """
    torch, new = _tf32_switches(torch_module)
    if new is not None:
        new["matmul"][0].fp32_precision = "ieee"
    else:
        torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return tf32_state(torch)


def _restore_cudnn(torch: Any, saved: list[tuple[Any, str]]) -> None:
    """Put cuDNN's conv and rnn settings back. cuDNN's switches are set through ``torch.backends.cudnn.allow_tf32``
    even where torch prefers ``fp32_precision``: once ``cudnn.conv``/``cudnn.rnn.fp32_precision`` is set, torch's
    own reads of the old flag (``torch.export``, Dynamo's state guards) raise "different TF32 flags" (torch 2.9 to
    2.14 at least), and the old setter leaves both readable. A state the old flag cannot say (conv and rnn
    different) was the caller's own, set through the new switches: it goes back the same way."""
    settings = {setting for _, setting in saved}
    if settings <= {"tf32"} or settings <= {"none"}:
        torch.backends.cudnn.allow_tf32 = settings == {"tf32"}
    else:
        for s, setting in saved:
            s.fp32_precision = setting
