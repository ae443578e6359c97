"""Profiles of the same step before and after fixes, side by side."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .._check import positive, rows_arg, table_rows
from .._format import fmt_seconds, html_table, text_table
from .summary import ProfileSummary

__all__ = ['ProfileComparison', 'compare_profiles']


# ----------------------------------------------------------------------------------------------
# before / after
@dataclass(frozen=True)
class ProfileComparison:
    """Profiles of the same step before and after fixes, side by side (per-step figures).

    ``timings`` (label -> seconds per step, measured without the profiler) replace the profiled step
    times in ``speedup``: a profiled step carries the profiler's overhead, more for many tiny operators,
    and a few profiled steps are easily disturbed by other programs.
    """

    summaries: tuple[ProfileSummary, ...]
    baseline: str
    timings: Mapping[str, float] | None = None

    def __post_init__(self) -> None:
        table_rows(self.summaries, ProfileSummary, "gl.profile", self.baseline, name="summaries")
        if self.timings is not None:
            missing = [s.label for s in self.summaries if s.label not in self.timings]
            if missing:
                raise ValueError(f"timings has no entry for {missing}: give one unprofiled time per profile "
                                 f"(labels {[s.label for s in self.summaries]})")
            for label, t in self.timings.items():
                positive(f"timings[{label!r}]", t, unit="seconds")

    def step_s(self, label: str) -> float:
        """Seconds per step of profile ``label``: the unprofiled time if ``timings`` were given."""
        return self.timings[label] if self.timings is not None else self.summary(label).step_s

    def summary(self, label: str) -> ProfileSummary:
        for s in self.summaries:
            if s.label == label:
                return s
        raise KeyError(f"no profile {label!r}; labels: {[s.label for s in self.summaries]}")

    def speedup(self, label: str) -> float:
        """Baseline step time (median; the mean on a GPU) / this profile's (>1 is faster)."""
        return self.step_s(self.baseline) / self.step_s(label)

    def to_dataframe(self) -> Any:
        import pandas as pd

        rows = []
        for s in self.summaries:
            r = {"profile": s.label, "step_ms": 1e3 * s.step_s}
            if self.timings is not None:
                r["unprofiled_step_ms"] = 1e3 * self.timings[s.label]
            r["speedup"] = self.speedup(s.label)
            r.update({f"{k}_share": s.share(k) for k in s.phases_s})
            r.update({"op_calls_per_step": s.op_calls_per_step, "syncs_per_step": s.syncs_per_step,
                      "device_busy_share": s.device_busy_share, "verdict": s.verdict.verdict,
                      "top_operator": s.ops[0].name if s.ops else None})
            rows.append(r)
        return pd.DataFrame(rows).set_index("profile")

    def _rows(self) -> list[list[str]]:
        out = []
        for s in self.summaries:
            times = [fmt_seconds(s.step_s)] + ([fmt_seconds(self.timings[s.label])] if self.timings is not None else [])
            out.append([s.label, *times, f"{self.speedup(s.label):.2f}x", f"{s.share('data'):.0%}",
                        f"{s.share('forward') + s.share('backward'):.0%}", f"{s.share('optimizer'):.0%}",
                        f"{s.op_calls_per_step:.0f}", s.verdict.verdict])
        return out

    def _header(self) -> tuple[str, ...]:
        times = ("profiled step", "step, no profiler") if self.timings is not None else ("step",)
        return ("profile", *times, "speedup", "data", "fwd+bwd", "optimizer", "op calls/step", "verdict")

    def _footer(self) -> str:
        speed = ("speedup from the steps timed without the profiler" if self.timings is not None
                 else "step and speedup: the profiled step (median; the mean on a GPU; profiler overhead included)")
        return f"{speed}; data, fwd+bwd, optimizer: shares of the profiled step time"

    def __repr__(self) -> str:
        return (f"Profiles vs {self.baseline!r}\n" + text_table(self._header(), self._rows()) + "\n" + self._footer())

    def _repr_html_(self) -> str:
        return html_table(self._header(), self._rows(), caption=f"Before and after, vs {self.baseline!r}",
                          footer=self._footer())

    def plot(self, ax: Any = None) -> Any:
        """Stacked bars: per-step milliseconds in each phase, one bar per profile."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(7, 3.2))
        names = list(self.summaries[0].phases_s)
        bottom = [0.0] * len(self.summaries)
        labels = [s.label for s in self.summaries]
        for ph in names:
            vals = [1e3 * s.phases_s.get(ph, 0.0) / s.steps for s in self.summaries]
            ax.barh(labels, vals, left=bottom, label=ph)
            bottom = [b + v for b, v in zip(bottom, vals)]
        for y, total in enumerate(bottom):
            ax.annotate(f" {total:.3g} ms", (total, y), va="center", fontsize=9)
        ax.set_xlim(0, 1.18 * max(bottom + [1e-9]))            # room for the totals
        ax.invert_yaxis()
        ax.set_xlabel("ms per step")
        ax.legend(ncol=len(names), fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.22), frameon=False)
        ax.set_title("Where each step's time goes")
        ax.figure.tight_layout()
        return ax.figure


def compare_profiles(summaries: Sequence[ProfileSummary], baseline: str | None = None,
                     timings: Mapping[str, Any] | None = None) -> ProfileComparison:
    """Put profiles side by side: step time, speedup, phase shares, operator calls, verdict.

    ``timings``: label -> the same step timed without the profiler, as seconds or as a
    :class:`~gpulab.Measurement` (e.g. the dict from :func:`gpulab.benchmark_interleaved`); the speedups
    then come from these, free of the profiler's overhead.

    Example:
        >>> import torch, gpulab as gl
        >>> a = gl.profile(lambda: torch.ones(256, 256) @ torch.ones(256, 256), steps=2, label="a", trace=False)
        >>> b = gl.profile(lambda: torch.ones(64, 64) @ torch.ones(64, 64), steps=2, label="b", trace=False)
        >>> gl.compare_profiles([a, b]).baseline
        'a'
    """
    summaries = rows_arg("summaries", summaries, ProfileSummary, "gl.profile")
    if timings is not None:
        if not isinstance(timings, Mapping):
            raise TypeError("timings must be a mapping label -> seconds or Measurement, e.g. the dict from "
                            "gl.benchmark_interleaved({label: step, ...})")
        timings = {k: getattr(v, "median_s", v) for k, v in timings.items()}
    return ProfileComparison(summaries, baseline or summaries[0].label, timings)
