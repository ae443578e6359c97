"""Which 16-bit format to train in on this hardware (or a named GPU), and why.

:func:`choose_precision` says bf16 or fp16 (and the matching Keras policy), with the reason: fp16 + GradScaler
on a T4 (no bf16 tensor cores), bf16 on Ampere and later and on CPUs.

Example:
    >>> import gpulab as gl
    >>> gl.choose_precision(gpu="Tesla T4").precision
    'fp16'
    >>> gl.choose_precision(gpu="A100 40GB SXM").keras_policy
    'mixed_bfloat16'"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Literal

from ._format import html_table, text_table

__all__ = ['PrecisionChoice', 'choose_precision', 'cpu_fp16_path']


# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PrecisionChoice:
    """Which 16-bit type to train with on one device, and why.

    ``precision`` is what :class:`course.TrainConfig` takes; ``keras_policy`` what
    ``keras.mixed_precision.set_global_policy`` takes; ``needs_scaler`` is True for fp16 (loss scaling);
    ``fast_hardware`` says whether matrix units for that type exist (tensor cores, AMX) - ``None``
    when it depends on the operation (e.g. a CPU with AVX512-BF16 instructions but no AMX).
    """

    device: str
    precision: Literal["bf16", "fp16"]
    keras_policy: str
    needs_scaler: bool
    hardware: str
    fast_hardware: bool | None
    reason: str

    @property
    def autocast_dtype(self) -> Any:
        """The torch dtype for ``torch.autocast``."""
        import torch

        return torch.bfloat16 if self.precision == "bf16" else torch.float16

    def _rows(self) -> list[tuple[str, str]]:
        fast = {True: "yes", False: "no", None: "depends on the operation"}[self.fast_hardware]
        return [("device", self.device), ("autocast dtype", self.precision),
                ("GradScaler", "yes (fp16 needs loss scaling)" if self.needs_scaler else "no (fp32's exponent range)"),
                ("Keras policy", repr(self.keras_policy)), ("16-bit hardware", self.hardware),
                ("fast 16-bit matrix units", fast), ("why", self.reason)]

    def __repr__(self) -> str:
        return f"PrecisionChoice: {self.precision} on {self.device}\n" + text_table(("", ""), self._rows())

    def _repr_html_(self) -> str:
        return html_table(("", ""), self._rows(), caption=f"Mixed precision on {self.device}: {self.precision}")


def _choice(device: str, precision: Literal["bf16", "fp16"], hardware: str, fast: bool | None,
            reason: str) -> PrecisionChoice:
    policy = "mixed_bfloat16" if precision == "bf16" else "mixed_float16"
    return PrecisionChoice(device, precision, policy, precision == "fp16", hardware, fast, reason)


def _cuda_choice(name: str, cc: tuple[int, int] | None) -> PrecisionChoice:
    if cc is not None and cc >= (8, 0):
        return _choice(f"cuda ({name})", "bf16", "tensor cores (fp16 and bf16)", True,
                       "Ampere or newer: bf16 tensor cores run as fast as fp16, and bf16 has fp32's range, "
                       "so no loss scaling is needed")
    if cc is not None and cc >= (7, 0):
        return _choice(f"cuda ({name})", "fp16", "tensor cores (fp16 only)", True,
                       "Volta/Turing (e.g. T4, V100): fp16 tensor cores but no bf16 ones; fp16 needs a GradScaler")
    return _choice(f"cuda ({name})", "fp16", "no tensor cores", False,
                   "a GPU older than Volta (or of unknown capability): fp16 halves memory traffic, "
                   "but there are no tensor cores to speed up the math")


def choose_precision(info: Any = None, *, gpu: str | None = None) -> PrecisionChoice:
    """Pick the mixed precision type for the device work runs on (or for ``gpu``, a GPU name such as
    ``"T4"`` or ``"NVIDIA A100-SXM4-40GB"``), with the matching Keras policy and the reason.

    Rules: a CUDA GPU with compute capability 8.0 or newer -> bf16; 7.x (T4, V100) -> fp16 with a
    GradScaler; CPU -> bf16 (fast with AMX-BF16 tiles, and with AVX512-BF16 for some operations; a CPU with
    AMX-FP16 tiles, Intel's Granite Rapids and later, has a fast fp16 path too, but bf16 keeps fp32's exponent range
    and needs no GradScaler, so it stays the choice: :func:`cpu_fp16_path` says what fp16 has on a CPU); Apple
    MPS -> fp16. ``info`` is a :class:`gpulab.system.SystemInfo` (default: this machine's).

    Example:
        >>> choose_precision(gpu="T4").needs_scaler
        True
        >>> choose_precision(gpu="H100 SXM").precision
        'bf16'
    """
    if gpu is not None:
        if not isinstance(gpu, str):
            raise TypeError(f"gpu must be a GPU name such as 'T4', got {type(gpu).__name__}")
        from .reference import gpu_spec

        spec = gpu_spec(gpu)
        return _cuda_choice(spec.name, spec.compute_capability)
    if info is None:
        from .system import system_info

        info = system_info(frameworks=("torch",))
    caps = getattr(info, "capabilities", None)
    if caps is None:
        raise TypeError(f"info must be a gpulab.system.SystemInfo (from gl.system_info()), got {type(info).__name__}")
    if caps.device == "cuda":
        seen = [g for g in info.gpus if getattr(g, "visible", True)]   # the GPUs CUDA processes see
        ccs = [g.compute_capability for g in seen if g.compute_capability]
        names = sorted({g.name for g in seen}) or ["GPU"]
        from .rehearsal import active

        profile = active()
        if profile is not None:      # GPULAB_AS: the rehearsed GPU's rule, on this one
            return _cuda_choice(f"{profile.name} rehearsed on {', '.join(names)}", profile.compute_capability)
        return _cuda_choice(", ".join(names), min(ccs) if ccs else None)
    if caps.device == "mps":
        return _choice("mps (Apple GPU)", "fp16", "Apple GPU", None,
                       "autocast on Apple GPUs uses fp16 (bf16 needs a recent macOS); measure before relying on it")
    flags = set(info.cpu_flags)
    fp16_fast, fp16_why = cpu_fp16_path(flags)
    fp16 = ("; fp16 would be fast too (" + fp16_why + "), but bf16 needs no GradScaler" if fp16_fast
            else "; fp16: " + fp16_why)
    if caps.amx:
        return _choice("cpu", "bf16", "AMX tiles (bf16)", True,
                       "this CPU has AMX: bf16 matrix math runs on tile units several times faster than fp32" + fp16)
    if "avx512_bf16" in flags:
        return _choice("cpu", "bf16", "AVX512-BF16 instructions, no AMX", None,
                       "no AMX: oneDNN's bf16 convolutions can beat fp32, but plain bf16 matmuls may be slower "
                       "than fp32 - measure" + fp16)
    return _choice("cpu", "bf16", "no bf16 instructions", False,
                   "bf16 autocast runs, but without bf16 hardware expect no speedup (only less memory)" + fp16)


def cpu_fp16_path(flags: Iterable[str] | None = None) -> tuple[bool | None, str]:
    """Whether a CPU with these ``flags`` (``gl.system_info().cpu_flags``; default: this machine's) has a fast fp16
    path, and why: True with AMX-FP16 tiles (Intel Granite Rapids, Xeon 6 with P-cores, and later: fp16 matrix math on
    the AMX units, which PyTorch's x86 fp16 support uses through oneDNN); None with AVX512-FP16 alone (Sapphire
    Rapids: fp16 arithmetic in vector registers, no tiles; whether fp16 beats fp32 depends on the operation and its
    kernel, so measure); False without either (fp16 autocast runs, but each operation converts to fp32 and back:
    expect it slower than fp32).

    Example:
        >>> cpu_fp16_path(("avx512f", "amx_tile", "amx_bf16", "amx_fp16"))[0]
        True
        >>> cpu_fp16_path(("avx2", "fma"))
        (False, 'no fp16 instructions (no AMX-FP16, no AVX512-FP16): fp16 autocast converts to fp32 and back, expect it slower than fp32')
    """
    if flags is None:
        from .system import system_info

        flags = system_info(frameworks=()).cpu_flags
    if isinstance(flags, (str, bytes)):
        raise TypeError(f"flags must be a list of CPU flags such as gl.system_info().cpu_flags, got {flags!r}")
    have = set(flags)
    if "amx_fp16" in have:
        return True, "AMX-FP16 tiles: fp16 matrix math on the AMX units, as fast as bf16 on AMX-BF16"
    if "avx512_fp16" in have:
        return None, ("AVX512-FP16 instructions but no AMX-FP16 tiles: fp16 arithmetic in vector registers, faster "
                      "or slower than fp32 depending on the operation and its kernel - measure")
    return False, ("no fp16 instructions (no AMX-FP16, no AVX512-FP16): fp16 autocast converts to fp32 and back, "
                   "expect it slower than fp32")
