"""Lesson 01's energy: the power of a busy device against an idle one, read from its energy counter
(:class:`PowerContrast`), and an exercise on an example recording (:func:`example_energy_trace`, made-up numbers
labelled as such) whose check computes the answer itself (:func:`check_energy_reading`).

Example:
    >>> ex = example_energy_trace()
    >>> round(ex.trace.phase_energy().joules("compute", "gpu0"))
    474
    >>> check_energy_reading(474.0, 0.0564, ex)
    [ok] joules per sample: 0.0564 is right
"""
from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

from ..._format import NA, fmt_number, text_table
from ..lesson.checks import Check, NotAnswered, check

__all__ = ["EnergyExample", "example_energy_trace", "check_energy_reading", "PowerContrast", "power_contrast"]

EXAMPLE_LABEL = "an example recording (made-up numbers for this exercise, not a measurement of your machine)"


@dataclass(frozen=True)
class EnergyExample:
    """:data:`EXAMPLE_LABEL`: a :class:`~gpulab.telemetry.trace.Trace` of one GPU (``gpu0``) with its energy counter
    (``energy_j``, joules since the driver loaded) and power readings, its marked phases, and how many ``samples``
    the ``phase`` trained on."""

    trace: Any
    samples: int
    phase: str = "compute"
    device: str = "gpu0"

    def counter(self) -> Any:
        """The device's rows: ``t_s`` as index, ``energy_j`` and ``power_w``."""
        return self.trace.device_frame(self.device)[["energy_j", "power_w"]]

    def _rows(self) -> list[list[str]]:
        return [[f"{t:.1f}", f"{r.energy_j:,.1f}", f"{r.power_w:.1f}"] for t, r in self.counter().iterrows()]

    def _marks(self) -> str:
        return "; ".join(f"{m.name} {m.start_s:.1f}-{m.end_s:.1f} s" for m in self.trace.marks)

    def _text(self, rows: int | None) -> str:
        shown = self._rows()[:rows]
        more = len(self._rows()) - len(shown)
        return (f"{EXAMPLE_LABEL[0].upper() + EXAMPLE_LABEL[1:]}\n{self.device}: {self.trace.devices_info[self.device]}"
                f"\nphases: {self._marks()}; the {self.phase} phase trained on {self.samples:,} samples\n"
                + text_table(("t_s", "energy_j (J since driver load)", "power_w (W)"), shown)
                + (f"\n... {more} more samples: .counter() has them all" if more else ""))

    def __repr__(self) -> str:
        return self._text(3)

    def _repr_html_(self) -> str:
        return f"<pre>{html.escape(self._text(None))}</pre>"


def example_energy_trace() -> EnergyExample:
    """:data:`EXAMPLE_LABEL`: 12 s of a 70 W-capped GPU sampled every 0.5 s, a data-bound phase near idle power and
    a compute phase at its power cap, the counter a smooth integral of the power (seeded, the same every call)."""
    import numpy as np
    import pandas as pd

    from ...telemetry.trace import Mark, Trace

    rng = np.random.default_rng(2024)
    t = np.arange(0.0, 12.01, 0.5)
    watts = np.where((t > 4.0) & (t <= 11.0), 68.0, 31.0) + rng.normal(0.0, 1.5, len(t))
    watts[0] = 30.0
    energy = 81_234.5 + np.concatenate([[0.0], np.cumsum(np.diff(t) * watts[1:])])
    gpu = pd.DataFrame({"t_s": t, "device": "gpu0", "source": "nvml", "energy_j": energy.round(3),
                        "power_w": watts.round(1)})
    marks = (Mark("data", 0.0, 4.0), Mark("compute", 4.0, 11.0), Mark("eval", 11.0, 12.0))
    trace = Trace(gpu, 0.5, marks=marks, duration_s=12.0, notes=(EXAMPLE_LABEL,),
                  devices_info={"gpu0": "a 70 W power-capped GPU (example)"})
    return EnergyExample(trace, samples=8_400)


def check_energy_reading(phase_joules: Any, joules_per_sample: Any, example: EnergyExample | None = None
                         ) -> Check | NotAnswered:
    """Check the joules of ``example.phase`` on ``example.device`` (from its energy counter) and the joules per
    sample (those joules over ``example.samples``), against what the course computes from the recording itself."""
    ex = example if example is not None else example_energy_trace()
    if not isinstance(ex, EnergyExample):
        raise TypeError(f"example must be course.example_energy_trace(), got {type(ex).__name__}")
    want = ex.trace.phase_energy().joules(ex.phase, ex.device)
    name = f"energy of the {ex.phase} phase"
    if phase_joules is None:
        return check(name, None, want)
    check(name, float(phase_joules), want, rtol=0.01,
          hint="a counter counts since the driver loaded: the phase's energy is its reading at the phase's end minus "
               "its reading at the phase's start (rows of t_s between start_s and end_s)")
    if joules_per_sample is None:
        return check("joules per sample", None, None)
    return check("joules per sample", float(joules_per_sample), want / ex.samples, rtol=0.01,
                 hint=f"the phase's joules divided by the {ex.samples:,} samples it trained on")


# ---- the busy loop against a sleep ------------------------------------------------------------------------------
@dataclass(frozen=True)
class PowerContrast:
    """Two timed blocks (``gl.timer`` stopwatches) side by side: seconds, joules, mean watts, joules per item of the
    busy one; ``ratio`` is busy / idle mean power (None where the counter could not be read)."""

    idle: Any
    busy: Any
    busy_items: int

    @property
    def ratio(self) -> float | None:
        wi, wb = self.idle.energy.watts, self.busy.energy.watts
        return None if wi is None or wb is None or wi <= 0 else wb / wi

    @property
    def joules_per_item(self) -> float | None:
        j = self.busy.energy.joules
        return None if j is None else j / self.busy_items

    def _rows(self) -> list[list[str]]:
        rows = []
        for sw, items in ((self.idle, None), (self.busy, self.busy_items)):
            e = sw.energy
            j = None if e.joules is None or not items else e.joules / items
            rows.append([sw.label, f"{sw.elapsed_s:.2f}", "not measurable" if e.joules is None else fmt_number(e.joules),
                         "not measurable" if e.watts is None else fmt_number(e.watts),
                         f"{items:,}" if items else "", NA if j is None else f"{j:.3g}"])
        return rows

    def summary(self) -> str:
        """What the numbers say, or why there are none."""
        e = self.busy.energy
        if self.ratio is None:
            why = e.reason or self.idle.energy.reason
            return f"energy not measurable here: {why}. The table still shows how long each block ran."
        above = e.joules - self.idle.energy.watts * self.busy.elapsed_s
        if above <= 0:
            return (f"the busy block drew {self.ratio:.2f}x the idle block's mean power ({e.source}): no more than "
                    "the device drew doing nothing, so the counter saw other work as well (every program on a CPU "
                    "package counts, every process on a GPU) or the device was already at full power")
        return (f"the busy block drew {self.ratio:.2f}x the idle block's mean power ({e.source}); "
                f"{fmt_number(above)} J of its {fmt_number(e.joules)} J is above what the device drew doing nothing "
                f"for as long, so each of its {self.busy_items:,} items cost {self.joules_per_item:.3g} J in all")

    def __repr__(self) -> str:
        header = ("block", "seconds", "joules", "mean W", "items", "J per item")
        return text_table(header, self._rows()) + "\n" + self.summary()

    def _repr_html_(self) -> str:
        return f"<pre>{html.escape(repr(self))}</pre>"


def power_contrast(idle: Any, busy: Any, busy_items: int) -> PowerContrast:
    """A :class:`PowerContrast` of two finished ``gl.timer`` blocks on the same device; ``busy_items`` is how many
    calls the busy block ran (``gl.timing.repeat_for`` returns it)."""
    for name, sw in (("idle", idle), ("busy", busy)):
        if getattr(sw, "energy", None) is None or getattr(sw, "elapsed_s", None) is None:
            raise TypeError(f"{name} must be a finished `with gl.timer(...) as {name}:` block, got {sw!r:.80}")
    if isinstance(busy_items, bool) or not isinstance(busy_items, int) or busy_items < 1:
        raise ValueError(f"busy_items must be the number of calls the busy block ran (>= 1), got {busy_items!r}")
    return PowerContrast(idle, busy, busy_items)
