"""Interpretations that are true where they are read: Markdown chosen for the device the lesson ran on and
filled with the figures it measured, and no conclusion from a noisy measurement.

Example:
    >>> from gpulab import course
    >>> text = course.narrate(cpu="On a CPU the copy ran at {gbps:.1f} GB/s.",
    ...                       cuda="On a GPU the copy ran at {gbps:.1f} GB/s over PCIe.", kind="cpu", gbps=9.87)
    >>> str(text)
    'On a CPU the copy ran at 9.9 GB/s.'
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["narrate", "Narration", "NOISY_TEXT"]

NOISY_TEXT = ("The measurement above was noisy (other programs shared the machine), so no conclusion is drawn "
              "from it here: run the cell again, and read the table once it is not flagged.")


@dataclass(frozen=True)
class Narration:
    """A short Markdown paragraph for one device (shows as Markdown in Jupyter, as text in a terminal)."""

    text: str
    kind: str

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return self.text

    def _repr_markdown_(self) -> str:
        return self.text


def narrate(*, cpu: str, cuda: str, mps: str | None = None, kind: str | None = None, noisy: bool = False,
            **figures: Any) -> Narration:
    """The paragraph for the device lessons run on (``kind``, default :func:`gpulab.system.device_kind`):
    ``cpu``, ``cuda`` or ``mps`` (which defaults to the CPU text), formatted with ``figures``
    (``str.format`` fields such as ``{speedup:.1f}``). ``noisy=True`` replaces it with :data:`NOISY_TEXT`.

    Example:
        >>> narrate(cpu="x", cuda="y", kind="cuda").text
        'y'
    """
    for name, text in (("cpu", cpu), ("cuda", cuda), ("mps", mps)):
        if (text is not None or name != "mps") and not isinstance(text, str):
            raise TypeError(f"{name} must be a Markdown text, got {text!r}")
    if not isinstance(noisy, bool):
        raise TypeError(f"noisy must be True or False, got {noisy!r}")
    if kind is None:
        from ...system import device_kind

        kind = device_kind()
    if kind not in ("cpu", "cuda", "mps"):
        raise ValueError(f"kind must be 'cpu', 'cuda' or 'mps', got {kind!r}")
    if noisy:
        return Narration(NOISY_TEXT, kind)
    template = {"cpu": cpu, "cuda": cuda, "mps": mps if mps is not None else cpu}[kind]
    try:
        return Narration(template.format(**figures), kind)
    except (KeyError, IndexError) as e:
        raise ValueError(f"the {kind} text uses a field {e} that no figure gives: pass it as {e}=...") from None
