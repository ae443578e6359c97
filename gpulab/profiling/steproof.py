"""One profiled step against the machine's measured ceilings: a roofline per step that knows the caches and the
threads.

The step's work (FLOPs and bytes per operator, counted in a warm-up call) at the ceilings of
:func:`gpulab.machine_limits` gives the time the step would need if every operator ran at its roof. Each operator's
bytes count at the bandwidth of the smallest cache its working set fits (:meth:`gpulab.MachineLimits.bandwidth_for`),
so a step of cache-sized operators is not called memory-bound against main memory's ceiling. A CPU step run on fewer
threads than the cores is also set against the whole machine's ceilings (:func:`thread_gain`).

Example:
    >>> from gpulab.profiling.steproof import StepRoofline
    >>> r = StepRoofline(0.01, "float32", 10**9, 10**8, 2e11, 2e10, 0.005, 0.002)
    >>> r.bound, f"{r.efficiency:.0%}"
    ('compute', '70%')
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._format import fmt_bytes, fmt_rate, fmt_seconds, html_table, text_table

__all__ = ["StepRoofline", "step_roofline", "thread_gain"]


@dataclass(frozen=True)
class StepRoofline:
    """One step against the ceilings: achieved FLOP/s and bandwidth, their shares (never above 100%: a
    ceiling a step beats is raised to the step's rate, and ``notes`` say so) and the time the step's
    operators need at the ceilings (``ideal_compute_s`` + ``ideal_memory_s``) against its time.

    The memory ceiling knows the caches: each operator's bytes count at the bandwidth of the smallest cache its
    working set fits (:meth:`gpulab.MachineLimits.bandwidth_for`), so ``bandwidth`` is the step's own ceiling (its
    bytes over their time at those ceilings), ``cached_share`` the share of its bytes in operators that fit a cache
    and ``dram_bandwidth`` the main-memory copy's."""

    step_s: float
    dtype: str
    flops: int
    bytes_moved: int
    flops_ceiling: float
    bandwidth: float
    ideal_compute_s: float
    ideal_memory_s: float
    notes: tuple[str, ...] = ()
    dram_bandwidth: float | None = None
    cached_share: float = 0.0
    count_unreliable: str | None = None   # why the byte count cannot be right (a rate above its ceiling), or None

    @property
    def achieved_flops_per_s(self) -> float:
        return self.flops / self.step_s

    @property
    def achieved_bytes_per_s(self) -> float:
        return self.bytes_moved / self.step_s

    @property
    def compute_share(self) -> float:
        return min(1.0, self.achieved_flops_per_s / self.flops_ceiling)

    @property
    def memory_share(self) -> float:
        return min(1.0, self.achieved_bytes_per_s / self.bandwidth)

    @property
    def efficiency(self) -> float:
        """Time at the ceilings / measured time (0..1): how close the step runs to the machine's limits."""
        return min(1.0, (self.ideal_compute_s + self.ideal_memory_s) / self.step_s)

    @property
    def bound(self) -> str:
        """"compute" or "memory": the roof that bounds most of the step's ideal time."""
        return "compute" if self.ideal_compute_s >= self.ideal_memory_s else "memory"

    @property
    def _memory_ceiling(self) -> str:
        if self.dram_bandwidth is None or self.cached_share <= 0:
            return f"the memory ceiling ({fmt_rate(self.bandwidth)})"
        return (f"the memory ceiling of its working sets ({fmt_rate(self.bandwidth)}: {self.cached_share:.0%} of its "
                f"bytes in operators that fit a cache; main memory {fmt_rate(self.dram_bandwidth)})")

    @property
    def memory_text(self) -> str:
        """The bandwidth the count gives and its share, or why the count cannot be used."""
        if self.count_unreliable:
            return f"{fmt_rate(self.achieved_bytes_per_s)} counted, above {self._memory_ceiling}: count unreliable"
        return f"{fmt_rate(self.achieved_bytes_per_s)} = {self.memory_share:.0%} of {self._memory_ceiling}"

    @property
    def evidence(self) -> str:
        return (f"{fmt_rate(self.achieved_flops_per_s, 'FLOP/s')} = {self.compute_share:.0%} of the measured "
                f"{self.dtype} ceiling ({fmt_rate(self.flops_ceiling, 'FLOP/s')}); {self.memory_text}; "
                f"the operators need {fmt_seconds(self.ideal_compute_s + self.ideal_memory_s)} at the ceilings, "
                f"the step took {fmt_seconds(self.step_s)} ({self.efficiency:.0%})")

    def _rows(self) -> list[tuple[str, str, str]]:
        cached = (f" ({self.cached_share:.0%} of the bytes in cache-sized operators; main memory "
                  f"{fmt_rate(self.dram_bandwidth)})" if self.dram_bandwidth is not None and self.cached_share > 0
                  else "")
        return [("compute", fmt_rate(self.achieved_flops_per_s, "FLOP/s"),
                 f"{self.compute_share:.0%} of {fmt_rate(self.flops_ceiling, 'FLOP/s')} ({self.dtype})"),
                ("memory", fmt_rate(self.achieved_bytes_per_s),
                 "count unreliable: above the ceiling" if self.count_unreliable else
                 f"{self.memory_share:.0%} of {fmt_rate(self.bandwidth)}{cached}"),
                ("time at the ceilings", fmt_seconds(self.ideal_compute_s + self.ideal_memory_s),
                 f"{self.efficiency:.0%} of the {fmt_seconds(self.step_s)} step")]

    def __repr__(self) -> str:
        return (f"Step roofline: {fmt_rate(self.flops, 'FLOP')}, {fmt_bytes(self.bytes_moved)} per step, "
                f"{self.bound}-bound side\n" + text_table(("", "achieved", "share of ceiling"), self._rows())
                + "".join(f"\n{n}" for n in self.notes))

    def _repr_html_(self) -> str:
        return html_table(("", "achieved", "share of ceiling"), self._rows(),
                          caption=f"Step roofline ({self.bound}-bound side)", footer="; ".join(self.notes) or None)


def _bandwidth_of(limits: Any) -> Any:
    """The memory ceiling per operator working set (cache-aware when the limits measured the caches), each working
    set looked up once."""
    if not getattr(limits, "cache_copy", ()):
        bw = limits.bandwidth_bytes_per_s
        return lambda nbytes: bw
    seen: dict[int, float] = {}

    def bw_of(nbytes: int) -> float:
        if nbytes not in seen:
            seen[nbytes] = limits.bandwidth_for(nbytes)
        return seen[nbytes]
    return bw_of


def step_roofline(work: Any, limits: Any, step_s: float) -> StepRoofline | None:
    """The step's :class:`StepRoofline` from its :class:`~gpulab.work.Work` and :class:`~gpulab.MachineLimits`
    (None when either is missing or the step did nothing)."""
    from ..limits import ceiling_for

    if work is None or limits is None or step_s <= 0 or work.ops == 0:
        return None
    dtype = work.main_dtype or "float32"
    if not limits.has(dtype):
        dtype = "float32"
    notes = []
    peak, note = ceiling_for(limits.peak_flops(dtype), [("this step", work.flops / step_s)])
    if note:
        notes.append(note)
    dram = limits.bandwidth_bytes_per_s
    bw_of = _bandwidth_of(limits)
    moved = [(b, bw_of(b)) for _, _, b in work.per_op if b]
    at_bw = sum(b / bw for b, bw in moved)
    bw = sum(b for b, _ in moved) / at_bw if at_bw > 0 else dram
    cached = sum(b for b, r in moved if r > dram) / max(1, sum(b for b, _ in moved))
    unreliable = None
    if work.bytes_moved / step_s > bw:         # no step outruns the copies of its own working sets: the count is off
        unreliable = (f"the byte count gives {fmt_rate(work.bytes_moved / step_s)}, above the memory ceiling of the "
                      f"step's working sets ({fmt_rate(bw)}): some operator is counted as moving more than the "
                      "hardware moves, so no memory share is claimed and the verdict rests on the step's times")
        notes.append(unreliable)

    def peak_of(d: str) -> float | None:
        return max(limits.peak_flops(d), peak if d == dtype else 0.0) if limits.has(d) else None

    compute, memory = work.ideal_s(peak_of, bw_of)
    return StepRoofline(step_s, dtype, work.flops, work.bytes_moved, peak, bw, compute, memory, tuple(notes),
                        dram_bandwidth=dram if getattr(limits, "cache_copy", ()) else None, cached_share=cached,
                        count_unreliable=unreliable)


def thread_gain(s: Any, roof: StepRoofline | None, share: float) -> tuple[float, str] | None:
    """``(gain, evidence)`` when a CPU step ran on fewer threads than the machine has and the profile measured the
    whole machine's ceilings too (``summary.whole_machine``): the step's work at those ceilings against its own,
    applied to the ``share`` of the step that runs at the roof (Amdahl); None otherwise."""
    whole, used, cores = (getattr(s, "whole_machine", None), getattr(s, "threads", None), getattr(s, "cores", None))
    if roof is None or whole is None or not used or not cores or used >= cores or s.work is None:
        return None
    dtype = roof.dtype if whole.has(roof.dtype) else "float32"

    def peak_of(d: str) -> float | None:
        return whole.peak_flops(d) if whole.has(d) else None

    at_whole = sum(s.work.ideal_s(peak_of, _bandwidth_of(whole)))
    at_own = roof.ideal_compute_s + roof.ideal_memory_s
    if at_whole <= 0 or at_own <= 0:
        return None
    r = min(1.0, at_whole / at_own)
    gain = 1 / ((1 - share) + share * r)
    ev = (f"{used} of {cores} threads (torch.get_num_threads()); measured with {used}: {dtype} "
          f"{fmt_rate(s.limits.peak_flops(dtype), 'FLOP/s')}, copy {fmt_rate(s.limits.bandwidth_bytes_per_s)}; "
          f"with {whole.env.threads}: {fmt_rate(whole.peak_flops(dtype), 'FLOP/s')}, "
          f"{fmt_rate(whole.bandwidth_bytes_per_s)}; the step's work at the ceilings: {fmt_seconds(at_own)} on "
          f"{used}, {fmt_seconds(at_whole)} on {whole.env.threads}; {share:.0%} of the step runs at the roof")
    return gain, ev
