"""The story of a profiling session told from the verdicts it computed, not from a chain written in advance.

The same fixes give different verdicts on different machines (a per-item loss loop is *overhead-bound* on a GPU,
where every tiny operator is a kernel launch, and may sit near a CPU's ceiling), so a lesson renders the
sequence it measured with :func:`verdict_story`, each verdict with its share of the machine's measured ceilings.

Example:
    >>> from types import SimpleNamespace as S
    >>> from gpulab import course
    >>> def summary(label, code, msg):
    ...     return S(label=label, verdict=S(verdict=code, findings=(S(code=code, message=msg),)))
    >>> story = course.verdict_story([summary("slow", "input-bound", "62% of step time in data loading"),
    ...                               summary("fixed", "compute-bound", "the operators' own work")], kind="cpu")
    >>> print(str(story).splitlines()[0])
    - **slow**: *input-bound*: 62% of step time in data loading
"""
from __future__ import annotations

from typing import Any, Sequence

from ...profiling.verdict import VERDICTS
from ..lesson.narrate import Narration

__all__ = ["verdict_story", "VERDICT_MEANING"]

VERDICT_MEANING = {
    **VERDICTS,
    "host-syncs": "the host reads device values (.item()) every step: free on a CPU, a stall on a GPU",
    "gpu-idle": "the GPU was busy less than 70% of the step (no ceilings to compare with)",
    "healthy": "the GPU was busy 70% or more of the step (no ceilings to compare with)",
}


def _headline(summary: Any) -> str:
    v = summary.verdict
    for f in v.findings:
        if f.code == v.verdict:
            return f.message
    return VERDICT_MEANING.get(v.verdict, "")


def _shares(summary: Any) -> str:
    """" (12% of the measured float32 compute ceiling, 3% of the memory ceiling)" from the profile's roofline."""
    r = getattr(summary, "roofline", None)
    if r is None:
        return ""
    return (f" ({r.compute_share:.0%} of the measured {r.dtype} compute ceiling, {r.memory_share:.0%} of the "
            "memory ceiling)")


def verdict_story(summaries: Sequence[Any], *, kind: str | None = None, noisy: bool = False) -> Narration:
    """Markdown: one bullet per profile (its label, verdict and the verdict's evidence, as computed), then what
    the sequence shows: which fixes changed the verdict and which left it as it was. ``summaries`` are
    :class:`gpulab.profiling.ProfileSummary` objects (anything with ``.label`` and ``.verdict``); ``kind``
    picks the device's closing sentence (default: this machine's); ``noisy=True`` draws no conclusion.

    Example:
        >>> verdict_story([], kind="cpu")
        Traceback (most recent call last):
        ...
        ValueError: summaries must hold at least one profile, got 0
    """
    from ..lesson.narrate import narrate

    summaries = list(summaries)
    if not summaries:
        raise ValueError(f"summaries must hold at least one profile, got {len(summaries)}")
    for s in summaries:
        if not hasattr(s, "label") or not hasattr(s, "verdict"):
            raise TypeError(f"each summary needs .label and .verdict (a ProfileSummary), got {type(s).__name__}")
    bullets = [f"- **{s.label}**: *{s.verdict.verdict}*: {_headline(s)}{_shares(s)}" for s in summaries]
    changes = []
    for prev, cur in zip(summaries, summaries[1:]):
        a, b = prev.verdict.verdict, cur.verdict.verdict
        changes.append(f"*{cur.label}* moved the verdict from *{a}* to *{b}*" if a != b else
                       f"*{cur.label}* left it at *{b}* (time may still have dropped: the step table above says "
                       f"by how much)")
    chain = " → ".join(f"*{s.verdict.verdict}*" for s in summaries)
    text = "\n".join(bullets)
    if changes:
        text += f"\n\nMeasured sequence on your machine: {chain}. " + "; ".join(changes) + "."
    closing = narrate(
        cpu="On a CPU each verdict compares the step with the machine's measured ceilings: *compute-bound* only near the "
            "matmul ceiling, *overhead-bound* far below it. The operators run on the host, so a host sync "
            "costs nothing; a GPU can give a different sequence for the same fixes, because there the host only "
            "queues kernels and every sync drains the queue.",
        cuda="On a GPU each verdict compares the step with the GPU's measured ceilings and weighs the kernels: how many per "
             "step, how short, and whether the device idled waiting for the host or after a sync; a CPU can give a "
             "different sequence for the same fixes, because there every operator runs on the host.",
        kind=kind, noisy=noisy)
    return Narration(text + "\n\n" + closing.text, closing.kind)
