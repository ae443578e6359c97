"""Published figures, as data: one module per topic, each a ``FIGURES`` tuple of
:class:`~gpulab.figures.published.Published`. :mod:`gpulab.reference` gathers them by key."""
from __future__ import annotations

from . import capstone, compilers, energy, hardware, multigpu, pipelines, training, transformers
from .published import Published

ALL: tuple[Published, ...] = (*training.FIGURES, *hardware.FIGURES, *pipelines.FIGURES, *multigpu.FIGURES,
                               *compilers.FIGURES, *capstone.FIGURES, *energy.FIGURES,
                               *transformers.FIGURES)

__all__ = ["ALL", "Published"]
