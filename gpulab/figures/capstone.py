"""Published figures the capstone cites: MFU and FLOP conventions, end-to-end recipes (lesson 12)."""
from __future__ import annotations

from .published import Published

FIGURES: tuple[Published, ...] = (
)
