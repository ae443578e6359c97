"""The first call of every lesson: :func:`gpulab.setup` with the course's banner, which says what mode the lesson
runs in (sizes reduced on a CPU, GPU figures from published sources beside the learner's).

Example:
    >>> from gpulab import course
    >>> session = course.setup()
    >>> session.banner.split(":")[0] in ("CPU mode", "GPU mode")
    True
"""
from __future__ import annotations

import dataclasses

from ...session import Session, setup as toolkit_setup

__all__ = ["setup"]

_BANNERS = {
    "cuda": "GPU mode: {hardware}",
    "mps": "GPU mode: {hardware}; CUDA-only parts are explained, not run",
    "cpu": "CPU mode: sizes reduced; GPU figures shown from published sources",
}


def setup(seed: int | None = 0, quiet: bool = True) -> Session:
    """:func:`gpulab.setup` (device, seeds, quiet logs, TensorFlow sharing the GPU) with the lesson's banner."""
    session = toolkit_setup(seed, quiet)
    banner = _BANNERS.get(session.kind, _BANNERS["cpu"]).format(hardware=session.hardware)
    return dataclasses.replace(session, banner=banner)
