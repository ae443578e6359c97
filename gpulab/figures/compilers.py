"""Published figures on compilers, CUDA graphs and kernels (lessons 10 and 11)."""
from __future__ import annotations

from .published import Published

FIGURES: tuple[Published, ...] = (
)
