"""The course text's held-out part, and the floor a trained GPT must beat on it (lesson 13).

The last tenth of the text is never trained on. Guessing each held-out byte from how often it occurs in the training
text (a *unigram* model) already scores far better than a uniform guess over 256 bytes (ln 256 = 5.55 nats): that is
the floor a GPT's held-out loss and next-token accuracy must clear before any accuracy comparison between recipes
means anything.

Example:
    >>> from gpulab import course
    >>> u = course.unigram_baseline()
    >>> 0 < u.loss < 5.55 and 0 < u.accuracy < 1
    True
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..._format import html_table, text_table

__all__ = ["Unigram", "unigram_baseline"]

HELD_OUT = 0.1        # the text's last tenth is held out


def split_text(tokens: Any) -> tuple[Any, Any]:
    """Training text and held-out text: the last tenth of the corpus is never trained on."""
    cut = int(len(tokens) * (1 - HELD_OUT))
    return tokens[:cut], tokens[cut:]


@dataclass(frozen=True)
class Unigram:
    """The held-out text guessed byte by byte from the training text's byte frequencies (add-one smoothed):
    ``loss`` its cross-entropy in nats per token, ``accuracy`` the share of held-out bytes equal to the training
    text's most common byte (``top``), over ``tokens`` held-out bytes."""

    loss: float
    accuracy: float
    top: int
    tokens: int

    def beaten_by(self, accuracy: float, margin: float = 0.02) -> bool:
        """Whether a held-out ``accuracy`` clears this floor by ``margin`` (2 points by default)."""
        return accuracy >= self.accuracy + margin

    def _rows(self) -> list[tuple[str, str]]:
        shown = repr(chr(self.top)) if 32 <= self.top < 127 else f"byte {self.top}"
        return [("guess", f"every byte by its frequency in the training text (most common: {shown})"),
                ("held-out loss", f"{self.loss:.2f} nats per token (a uniform guess: ln 256 = {math.log(256):.2f})"),
                ("held-out next-token accuracy", f"{self.accuracy:.1%} (always guessing {shown})"),
                ("held-out tokens", f"{self.tokens:,}")]

    def __repr__(self) -> str:
        return "Unigram baseline\n" + text_table(["", "held-out text"], self._rows())

    def _repr_html_(self) -> str:
        return html_table(["", "held-out text"], self._rows(), caption="Unigram baseline")


def unigram_baseline() -> Unigram:
    """The unigram floor on the course text's held-out part (see :class:`Unigram`)."""
    import torch

    from .gpt import text_tokens

    train, held = split_text(text_tokens())
    counts = torch.bincount(train.long().flatten(), minlength=256).double() + 1.0
    logp = (counts / counts.sum()).log()
    held = held.long().flatten()
    top = int(counts.argmax())
    return Unigram(float(-logp[held].mean()), float((held == top).double().mean()), top, int(held.numel()))
