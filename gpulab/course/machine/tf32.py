"""TF32: fp32 matmuls and convolutions on the tensor cores of Ampere and newer GPUs, switched on and off.

TF32 keeps fp32's 8-bit exponent but rounds the inputs of a multiplication to 10 mantissa bits (fp16's
precision); the products are summed in fp32. Only NVIDIA GPUs of compute capability 8.0 or newer have it;
on a CPU, a T4 or a V100 the switches below exist but change nothing. PyTorch's defaults: matmuls in full fp32
and cuDNN convolutions in TF32. From torch 2.9 the switches are ``torch.backends.cuda.matmul.fp32_precision``
(``"ieee"`` or ``"tf32"``) and ``torch.backends.cudnn.conv.fp32_precision``; older releases spell them
``torch.backends.cuda.matmul.allow_tf32`` (or ``torch.set_float32_matmul_precision("high")``) and
``torch.backends.cudnn.allow_tf32``, which torch 2.9 deprecates, and it raises when the two spellings are mixed.
:func:`gpulab.system.tf32_switched` uses the one the installed torch prefers. TensorFlow turns TF32 on for both by
default on Ampere+ (``tf.config.experimental.enable_tensor_float_32_execution``).

:func:`tf32` sets both PyTorch switches inside a ``with`` block and restores them on exit;
:func:`tf32_supported` says whether a device runs TF32; :func:`fp32_step_ceiling` picks the share-of-peak
denominator of an fp32 training step: on Ampere+ convolutions run in TF32 by default, so their ceiling is the
TF32 tensor-core peak, not the fp32 one.

Example:
    >>> from gpulab import course
    >>> with course.tf32(True) as flags:
    ...     flags["matmul"], flags["cudnn"]
    (True, True)
    >>> course.tf32_supported("cpu")
    False
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Mapping

from ..._check import checked
from ...system import tf32_state, tf32_switched

__all__ = ["tf32", "tf32_supported", "tf32_flags", "fp32_step_ceiling", "TF32_STATES", "under_tf32"]

#: The three TF32 states worth timing, as ``(matmuls may use TF32, cuDNN convolutions may use TF32)``:
#: everything in full fp32, PyTorch's default, and everything allowed.
TF32_STATES: dict[str, tuple[bool, bool]] = {
    "all off": (False, False),
    "default (matmul off, cuDNN on)": (False, True),
    "all on": (True, True),
}


def tf32_flags() -> dict[str, Any]:
    """PyTorch's TF32 switches as they are now (:func:`gpulab.system.tf32_state`): ``matmul`` and ``cudnn`` (may
    fp32 matmuls / cuDNN convolutions use TF32), ``matmul_precision`` (the matmul switch as the installed torch's
    API spells it: ``"tf32"``/``"ieee"``/``"none"`` from torch 2.9, ``"high"``/``"highest"`` before), ``api``
    (which switches: ``"fp32_precision"`` or ``"allow_tf32"``) and ``cudnn_benchmark``
    (``torch.backends.cudnn.benchmark``).

    Example:
        >>> sorted(tf32_flags())
        ['api', 'cudnn', 'cudnn_benchmark', 'matmul', 'matmul_precision']
    """
    import torch

    state = tf32_state()
    return {"matmul": state.matmul, "cudnn": state.cudnn, "matmul_precision": state.matmul_setting, "api": state.api,
            "cudnn_benchmark": bool(torch.backends.cudnn.benchmark)}


@contextlib.contextmanager
def tf32(enabled: bool, *, convolutions: bool | None = None) -> Iterator[dict[str, Any]]:
    """Inside the block, fp32 matmuls and cuDNN convolutions (``convolutions`` defaults to ``enabled``) may use
    TF32, set through the switches the installed torch prefers (:func:`gpulab.system.tf32_switched`); every
    switch is restored on exit, even after an error. Yields the switches as set (:func:`tf32_flags`).

    Example:
        >>> before = tf32_flags()
        >>> with tf32(False) as flags:
        ...     flags["matmul"], flags["cudnn"]
        (False, False)
        >>> tf32_flags() == before
        True
    """
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled must be True or False, got {enabled!r}")
    if convolutions is not None and not isinstance(convolutions, bool):
        raise TypeError(f"convolutions must be True, False or None (= enabled), got {convolutions!r}")
    with tf32_switched(matmul=enabled, cudnn=enabled if convolutions is None else convolutions):
        yield tf32_flags()


def under_tf32(state: str, fn: Callable[[], Any]) -> Callable[[], Any]:
    """A zero-argument callable that runs ``fn()`` in one of :data:`TF32_STATES` (switches restored after each
    call), for timing the states side by side with :func:`gpulab.benchmark_interleaved`.

    Example:
        >>> run = under_tf32("default (matmul off, cuDNN on)", lambda: (tf32_flags()["matmul"], tf32_flags()["cudnn"]))
        >>> run()
        (False, True)
    """
    if state not in TF32_STATES:
        raise ValueError(f"state must be one of {list(TF32_STATES)}, got {state!r}")
    if not callable(fn):
        raise TypeError(f"fn must be a callable without arguments, got {fn!r}")
    matmul, convolutions = TF32_STATES[state]

    def run() -> Any:
        with tf32(matmul, convolutions=convolutions):
            return fn()
    return run


@checked(device="devspec")
def tf32_supported(device: Any = None) -> bool:
    """True when ``device`` (default: the current CUDA device, if any) is an NVIDIA GPU of compute
    capability 8.0 or newer (Ampere, Ada, Hopper, ...): the ones with TF32 tensor cores.

    Example:
        >>> tf32_supported("cpu")
        False
    """
    import torch

    dev = torch.device(device) if device is not None else None
    if dev is not None and dev.type != "cuda":
        return False
    if not torch.cuda.is_available():
        return False
    from ...rehearsal import compute_capability

    return (compute_capability(dev) or (0, 0)) >= (8, 0)      # a rehearsed T4 (GPULAB_AS=t4) has no TF32


@checked(device="device")
def fp32_step_ceiling(measured_peaks: Mapping[str, float], *, device: Any = None, gpu: str | None = None,
                      convolutions_tf32: bool | None = None) -> float:
    """The FLOP/s ceiling an fp32 training step should be compared with.

    ``measured_peaks`` maps dtype names (``"float32"``, ``"bfloat16"``, ``"float16"``) to the measured matmul
    ceilings, and may hold ``"tf32"``: the fp32 matmul ceiling measured with TF32 allowed. Where TF32 does not
    exist (CPU, T4, V100) it is the measured fp32 ceiling. On Ampere+ with cuDNN's TF32 on
    (``convolutions_tf32``, default: as :func:`gpulab.system.tf32_state` reads it) the step's convolutions run
    on TF32 tensor cores, so the ceiling is the measured ``"tf32"`` one when given (then every ceiling of a
    comparison is a measured one); without it, the TF32 tensor peak of ``gpu`` from the datasheet
    (:func:`gpulab.gpu_spec`), or for a GPU not in that list the fastest measured ceiling (a 16-bit one: TF32
    is never faster than 16 bits). Each is at least the measured fp32 ceiling.

    Example:
        >>> fp32_step_ceiling({"float32": 1e11, "bfloat16": 5e10}, device="cpu")
        100000000000.0
    """
    if "float32" not in measured_peaks:
        raise ValueError(f"measured_peaks must include 'float32', got {sorted(measured_peaks)}")
    fp32 = float(measured_peaks["float32"])
    if not tf32_supported(device):
        return fp32
    on = tf32_state().cudnn if convolutions_tf32 is None else convolutions_tf32
    if not on:
        return fp32
    if "tf32" in measured_peaks:
        return max(fp32, float(measured_peaks["tf32"]))
    spec_peak = None
    if gpu is not None:
        from ...reference import gpu_spec

        try:
            spec_peak = gpu_spec(gpu).tf32_tensor_flops
        except KeyError:
            spec_peak = None
    if spec_peak is None:
        spec_peak = max(float(v) for v in measured_peaks.values())
    return max(fp32, float(spec_peak))
