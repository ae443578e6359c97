"""The story of a profiling session told from the verdicts it computed, not from a chain written in advance.

The same fixes give different verdicts on different machines (a per-item loss loop is *launch-bound* on a GPU,
where every tiny operator is a kernel launch, and may be *compute-bound* on a CPU), so a lesson renders the
sequence it measured with :func:`verdict_story`.

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

from .narrate import Narration

__all__ = ["verdict_story", "VERDICT_MEANING"]

VERDICT_MEANING = {
    "input-bound": "the step waits for data (30% or more of its time in the data phase)",
    "launch-bound": "many tiny operations (or, on a GPU, tiny kernels with the device often idle) dominate",
    "host-syncs": "the host waits for the device at every .item()",
    "compute-bound": "no overhead stands out: the operators' own work takes the time",
    "gpu-idle": "the GPU was busy less than 70% of the step without one overhead above its threshold",
    "healthy": "the GPU was busy 70% or more of the step",
}


def _headline(summary: Any) -> str:
    v = summary.verdict
    for f in v.findings:
        if f.code == v.verdict:
            return f.message
    return VERDICT_MEANING.get(v.verdict, "")


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
    from .narrate import narrate

    summaries = list(summaries)
    if not summaries:
        raise ValueError(f"summaries must hold at least one profile, got {len(summaries)}")
    for s in summaries:
        if not hasattr(s, "label") or not hasattr(s, "verdict"):
            raise TypeError(f"each summary needs .label and .verdict (a ProfileSummary), got {type(s).__name__}")
    bullets = [f"- **{s.label}**: *{s.verdict.verdict}*: {_headline(s)}" for s in summaries]
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
        cpu="On a CPU the operators are the work, so once no overhead stands out the verdict is *compute-bound*; "
            "a GPU can give a different sequence for the same fixes, because there the host only queues kernels "
            "and the verdict weighs how busy the device was.",
        cuda="On a GPU the verdict weighs the kernels: how many per step, how short, and how much of the step the "
             "device was busy; a CPU can give a different sequence for the same fixes, because there every operator "
             "runs on the host.",
        kind=kind, noisy=noisy)
    return Narration(text + "\n\n" + closing.text, closing.kind)
