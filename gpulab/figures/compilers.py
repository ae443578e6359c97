"""Published figures on compilers, CUDA graphs and kernels (lessons 10 and 11)."""
from __future__ import annotations

from .published import Published

FIGURES: tuple[Published, ...] = (
    Published("triton-supported-gpus", "Triton's README lists its supported hardware as NVIDIA GPUs of compute "
              "capability 8.0 and newer (Ampere on) and AMD GPUs with ROCm 5.2 and newer, on Linux; CPUs are under "
              "development. A T4 (compute capability 7.5) is outside that list.", 8.0, 8.0,
              " (lowest NVIDIA compute capability supported)", "NVIDIA and AMD GPUs",
              "Triton README, 'Compatibility'", "https://github.com/triton-lang/triton#compatibility", "2026-11",
              "Date: when checked."),
)
