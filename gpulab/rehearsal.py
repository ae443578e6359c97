"""A smaller GPU rehearsed on a bigger one: ``GPULAB_AS=t4`` makes this process take a T4's branches on any CUDA GPU.

A teacher with an A100 (or an H100) can run what a Colab T4 learner runs before the class. In a process started
with ``GPULAB_AS=t4`` (``python -m gpulab check --as t4`` sets it for every notebook and test), :func:`apply` -- called
by ``gl.setup()`` -- caps the caching allocator at what a T4's program can hold, switches TF32 off and limits
``scaled_dot_product_attention`` to the kernels sm_75 has (memory-efficient and math); :func:`compute_capability`
then answers 7.5, so the fp16 + GradScaler paths run instead of bf16. The speeds stay the big GPU's, and every
banner and report says so. ``GPULAB_GPU_MEMORY_CAP`` (bytes) caps the allocator the same way without the rest: what
a notebook gets when it shares one GPU with others.

Example:
    >>> from gpulab import rehearsal
    >>> rehearsal.active({"GPULAB_AS": "t4"}).name
    'T4'
    >>> rehearsal.active({}) is None
    True
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping

__all__ = ["ENV", "CAP_ENV", "Profile", "PROFILES", "active", "memory_cap_bytes", "compute_capability", "label",
           "apply", "applied"]

ENV = "GPULAB_AS"
CAP_ENV = "GPULAB_GPU_MEMORY_CAP"
_GIB = 1024 ** 3


@dataclass(frozen=True)
class Profile:
    """A GPU to rehearse: its name in ``gl.gpu_spec``, compute capability, the memory its programs' allocator can
    hold, and which of bf16, TF32 and the SDPA kernels it has."""

    key: str
    name: str
    compute_capability: tuple[int, int]
    memory_bytes: int
    bf16: bool
    tf32: bool
    sdpa: tuple[str, ...]
    memory_note: str


# A T4 reports 15,835,660,288 bytes to CUDA (14.75 GiB; nvidia-smi shows 15,360 MiB) and its CUDA context takes about
# 0.3-0.5 GiB of that outside the allocator: the allocator is capped at 14.75 GiB less 0.4 GiB.
PROFILES: dict[str, Profile] = {
    "t4": Profile("t4", "T4", (7, 5), 15_835_660_288 - int(0.4 * _GIB), False, False, ("efficient", "math"),
                  "14.75 GiB (what CUDA reports for a T4) less 0.4 GiB for the CUDA context"),
}


def active(env: Mapping[str, str] | None = None) -> Profile | None:
    """The profile ``GPULAB_AS`` names (``"t4"``), None when unset or ``"native"``; a name it does not know raises
    ``ValueError`` listing the ones it does."""
    value = (os.environ if env is None else env).get(ENV, "").strip().lower()
    if value in ("", "native"):
        return None
    if value not in PROFILES:
        raise ValueError(f"{ENV}={value!r} names no GPU to rehearse: use one of {', '.join(PROFILES)} "
                         f"(or 'native', or unset it)")
    return PROFILES[value]


def memory_cap_bytes(env: Mapping[str, str] | None = None) -> int | None:
    """The bytes this process's CUDA allocator may hold: the rehearsed GPU's, ``GPULAB_GPU_MEMORY_CAP``'s, the
    smaller of both, or None (uncapped)."""
    env = os.environ if env is None else env
    caps = []
    profile = active(env)
    if profile is not None:
        caps.append(profile.memory_bytes)
    raw = env.get(CAP_ENV, "").strip()
    if raw:
        try:
            cap = int(float(raw))
        except ValueError:
            cap = 0
        if cap <= 0:
            raise ValueError(f"{CAP_ENV}={raw!r} must be a number of bytes > 0, e.g. {20 * _GIB} for 20 GiB")
        caps.append(cap)
    return min(caps) if caps else None


def compute_capability(device: Any = None) -> tuple[int, int] | None:
    """The compute capability the code should plan for: the rehearsed GPU's under ``GPULAB_AS``, else the CUDA
    device's; None without CUDA."""
    profile = active()
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    if profile is not None:
        return profile.compute_capability
    return tuple(torch.cuda.get_device_capability(device))  # type: ignore[return-value]


def label(gpu_name: str, env: Mapping[str, str] | None = None) -> str | None:
    """What every figure of a rehearsal carries: ``"T4 rehearsal on NVIDIA H200: speeds are not a T4's"``."""
    profile = active(env)
    return None if profile is None else f"{profile.name} rehearsal on {gpu_name}: speeds are not a {profile.name}'s"


_applied: dict[str, Any] = {}


def applied() -> dict[str, Any]:
    """What :func:`apply` set in this process (empty before it ran)."""
    return dict(_applied)


def apply() -> tuple[str, ...]:
    """Set this process up as the rehearsed GPU (and cap its allocator): once per process; the notes to show.

    Without ``GPULAB_AS`` or ``GPULAB_GPU_MEMORY_CAP`` it does nothing. A rehearsal without a CUDA GPU raises
    ``RuntimeError``: there is nothing to rehearse on."""
    profile, cap = active(), memory_cap_bytes()
    if profile is None and cap is None:
        return ()
    if _applied:
        return tuple(_applied.get("notes", ()))
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(f"{ENV}={profile.key if profile else ''!s} / {CAP_ENV} need a CUDA GPU to rehearse on, "
                           f"and torch sees none here: unset them, or run on a GPU")
    dev = torch.device("cuda", torch.cuda.current_device())
    total = int(torch.cuda.get_device_properties(dev).total_memory)
    gpu = torch.cuda.get_device_name(dev)
    notes = []
    if cap is not None and cap < total:
        torch.cuda.set_per_process_memory_fraction(cap / total, dev)
        notes.append(f"the allocator is capped at {cap / _GIB:.2f} GiB of this GPU's {total / _GIB:.1f} GiB"
                     + (f" ({profile.memory_note})" if profile is not None and cap == profile.memory_bytes else ""))
    if profile is not None:
        if not profile.tf32:
            from ._tf32 import tf32_off

            tf32_off(torch)
        if "flash" not in profile.sdpa:
            torch.backends.cuda.enable_flash_sdp(False)
        if "cudnn" not in profile.sdpa and hasattr(torch.backends.cuda, "enable_cudnn_sdp"):
            torch.backends.cuda.enable_cudnn_sdp(False)
        notes.insert(0, f"{label(gpu)}; compute capability {'.'.join(map(str, profile.compute_capability))} "
                        f"planned for (no bf16, no TF32, SDPA kernels: {', '.join(profile.sdpa)})")
    _applied.update(profile=None if profile is None else profile.key, cap_bytes=cap, total_bytes=total,
                    fraction=None if cap is None or cap >= total else cap / total, notes=tuple(notes))
    return tuple(notes)
