"""A profile's bottleneck verdict, grounded in the machine's measured ceilings (a roofline per step).

The step's work (FLOPs and bytes per operator, counted in a warm-up call) at the ceilings of
:func:`gpulab.machine_limits` gives the time the step would need if every operator ran at its roof; the
measured step time against that says whether the step is near a ceiling (compute- or memory-bound, or
*precision-bound*: at the fp32 ceiling where the measured 16-bit one is well above) or far from both
(overhead: small operators, Python between them; on a GPU, sync-bound when the device idles after host
syncs). Input-bound comes first, from the data phase. The same verdict names hold on a CPU and a GPU
wherever the cause is the same.

Example:
    >>> from gpulab.profiling.verdict import VERDICTS
    >>> sorted(VERDICTS)[:3]
    ['compute-bound', 'input-bound', 'memory-bound']
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._format import fmt_bytes, fmt_rate, fmt_seconds, html_table, text_table
from .events import MANY_OPS_PER_STEP, TINY_KERNEL_S, TINY_OP_S

__all__ = [
    "FASTER_16BIT",
    "NEAR_CEILING",
    "OPTIMIZER_SHARE",
    "SYNC_IDLE_SHARE",
    "VERDICTS",
    "StepRoofline",
    "diagnose_profile",
    "step_roofline",
]

NEAR_CEILING = 0.5     # the step's work at the ceilings takes at least half its measured time: bound by a roof
FASTER_16BIT = 1.5     # a measured 16-bit ceiling this many times the fp32 one makes fp32 a choice worth naming
SYNC_IDLE_SHARE = 0.15  # the device idles after host syncs this share of the step: sync-bound
HOST_GAP_SHARE = 0.5   # on a CPU, this share of the step outside any operator: Python between operators
IN_OPS_SHARE = 0.5     # the step's (non-data) time inside long operators (busy device): they set the pace
OVERHEAD_SHARE = 0.2   # ... and this share outside them is overhead worth naming beside the main verdict
SLOW_COMPUTE_SHARE = 0.25  # long operators on the compute side this far below the ceiling: too small to fill it
PRECISION_SHARE = 0.4  # ... and at this share of the fp32 ceiling or more, a faster 16-bit ceiling is the lever
OPTIMIZER_SHARE = 0.4  # the optimizer's range takes this share of the step and more than any other phase
OPTIMIZER_NOTE_SHARE = 0.2  # ... or this much beside another verdict: worth a finding of its own

VERDICTS = {
    "input-bound": "the step waits for data (30% or more of its time in the data phase)",
    "overhead-bound": "the step runs far below both ceilings: per-operator cost, Python between operators, "
                      "or operators too small (batch) to use the machine",
    "sync-bound": "the device idles after host syncs (.item(), printing a loss) while the host issues new work",
    "optimizer-bound": "the optimizer step takes the largest share of the step: per-parameter-tensor updates "
                       "(unfused, or thousands of small tensors)",
    "memory-bound": "the step is near the memory-bandwidth ceiling: elementwise work moving many bytes per FLOP",
    "compute-bound": "the step is near the compute ceiling of its precision",
    "precision-bound": "the step is near the fp32 compute ceiling while the measured 16-bit ceiling is well above",
}


@dataclass(frozen=True)
class StepRoofline:
    """One step against the ceilings: achieved FLOP/s and bandwidth, their shares (never above 100%: a
    ceiling a step beats is raised to the step's rate, and ``notes`` say so) and the time the step's
    operators need at the ceilings (``ideal_compute_s`` + ``ideal_memory_s``) against its time."""

    step_s: float
    dtype: str
    flops: int
    bytes_moved: int
    flops_ceiling: float
    bandwidth: float
    ideal_compute_s: float
    ideal_memory_s: float
    notes: tuple[str, ...] = ()

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
    def evidence(self) -> str:
        return (f"{fmt_rate(self.achieved_flops_per_s, 'FLOP/s')} = {self.compute_share:.0%} of the measured "
                f"{self.dtype} ceiling ({fmt_rate(self.flops_ceiling, 'FLOP/s')}); "
                f"{fmt_rate(self.achieved_bytes_per_s)} = {self.memory_share:.0%} of the memory ceiling "
                f"({fmt_rate(self.bandwidth)}); the operators need "
                f"{fmt_seconds(self.ideal_compute_s + self.ideal_memory_s)} at the ceilings, the step took "
                f"{fmt_seconds(self.step_s)} ({self.efficiency:.0%})")

    def _rows(self) -> list[tuple[str, str, str]]:
        return [("compute", fmt_rate(self.achieved_flops_per_s, "FLOP/s"),
                 f"{self.compute_share:.0%} of {fmt_rate(self.flops_ceiling, 'FLOP/s')} ({self.dtype})"),
                ("memory", fmt_rate(self.achieved_bytes_per_s),
                 f"{self.memory_share:.0%} of {fmt_rate(self.bandwidth)}"),
                ("time at the ceilings", fmt_seconds(self.ideal_compute_s + self.ideal_memory_s),
                 f"{self.efficiency:.0%} of the {fmt_seconds(self.step_s)} step")]

    def __repr__(self) -> str:
        return (f"Step roofline: {fmt_rate(self.flops, 'FLOP')}, {fmt_bytes(self.bytes_moved)} per step, "
                f"{self.bound}-bound side\n" + text_table(("", "achieved", "share of ceiling"), self._rows())
                + "".join(f"\n{n}" for n in self.notes))

    def _repr_html_(self) -> str:
        return html_table(("", "achieved", "share of ceiling"), self._rows(),
                          caption=f"Step roofline ({self.bound}-bound side)", footer="; ".join(self.notes) or None)


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
    bw = limits.bandwidth_bytes_per_s
    if work.bytes_moved / step_s > bw:
        notes.append(f"the step moved {fmt_rate(work.bytes_moved / step_s)}, above the memory ceiling "
                     f"({fmt_rate(bw)}, a copy beyond the caches): part of its data stayed in the caches")

    def peak_of(d: str) -> float | None:
        return max(limits.peak_flops(d), peak if d == dtype else 0.0) if limits.has(d) else None

    compute, memory = work.ideal_s(peak_of, bw)
    return StepRoofline(step_s, dtype, work.flops, work.bytes_moved, peak, bw, compute, memory, tuple(notes))


def _in_operators(s: Any) -> float:
    """Share of the step's non-data time inside operators doing real work: on a CPU the calls of
    ``LONG_OP_S`` or longer, on a GPU the device busy (when its kernels are not tiny)."""
    if s.device.kernels:
        tiny = s.device.median_kernel_s is not None and s.device.median_kernel_s < TINY_KERNEL_S
        return 0.0 if tiny else (s.device_busy_share or 0.0)
    rest = s.total_s - s.phases_s.get("data", 0.0)
    return min(1.0, s.long_op_time_s / rest) if rest > 0 else 0.0


def _overhead_cause(s: Any, roof: StepRoofline | None) -> tuple[str, str]:
    """(what, evidence) of an overhead-bound step."""
    n = s.op_calls_per_step
    med = s.median_op_s
    if s.device.kernels:
        k = s.device.kernels / s.steps
        busy = s.device_busy_share
        ev = (f"{k:.0f} kernels per step, median {fmt_seconds(s.device.median_kernel_s)}, device busy "
              f"{busy:.0%}" if busy is not None else f"{k:.0f} kernels per step")
        if s.device.idle_host_s is not None:
            ev += (f"; idle {fmt_seconds(s.device.idle_host_s / s.steps)} per step waiting for the host, "
                   f"{fmt_seconds(s.device.idle_between_kernels_s / s.steps)} between kernels")
        small = s.device.median_kernel_s is not None and s.device.median_kernel_s < TINY_KERNEL_S
        if small:
            return "many tiny kernels: each does little work for its launch cost", ev
        if busy is not None and busy >= 0.7:
            return "the device is busy, but its kernels are too small to fill it (batch too small)", ev
        return "the device waits for the host between kernels", ev
    gap = max(0.0, 1 - (s.op_time_s + s.phases_s.get("data", 0.0)) / s.total_s) if s.total_s > 0 else 0.0
    ev = (f"{n:.0f} operator calls per step, median {fmt_seconds(med)}; {gap:.0%} of the step outside any operator "
          "and the data phase")
    if gap >= HOST_GAP_SHARE:
        return "Python between the operators (per-step logic, logging, a loop over items) takes most of the step", ev
    if med is not None and med < TINY_OP_S and n >= MANY_OPS_PER_STEP / 10:
        return "the operators are too small: each one's fixed cost outweighs its work (batch too small)", ev
    return "the operators run far below the ceilings", ev


_FIX = {
    "overhead-bound": "larger batches (more work per operator), vectorise Python loops over items into tensor "
                      "operations, then torch.compile or CUDA graphs to cut the per-operator cost (lesson 10)",
    "sync-bound": "keep losses and metrics on the device and read them every N steps (one .item() per log line, "
                  "not per step); no printing of tensors inside the loop",
    "memory-bound": "fewer bytes per FLOP: fuse elementwise operators (torch.compile), 16-bit activations, "
                    "channels_last for convolutions",
    "compute-bound": "this is the end state at this precision: speed now comes from less or cheaper math",
}


def _optimizer_fix(s: Any) -> str:
    """What to change in an optimizer that takes much of the step, from the operators it ran."""
    names = {o.name for o in s.ops}
    if any(n.startswith("aten::_fused_") for n in names):
        how = ("it already runs fused: fewer, larger parameter tensors (e.g. one weight per layer, not per head), "
               "or a larger batch so each update serves more samples")
    elif any(n.startswith("aten::_foreach_") for n in names):
        how = ("fused=True (Adam, AdamW, SGD: one kernel for every parameter instead of a few per tensor group), "
               "fewer parameter tensors, or a larger batch")
    else:
        how = ("foreach=True or fused=True in the optimizer (torch.optim.Adam(params, fused=True)): a few "
               "multi-tensor operations instead of several per parameter tensor; fewer parameter tensors; a larger "
               "batch so each update serves more samples")
    return how


def _attribution_finding(s: Any) -> Any:
    """Where the time goes (the largest operator class, the phases), as a finding; None without the record."""
    from ..telemetry.diagnose import Finding

    if not s.op_classes_s:
        return None
    att = s.attribution
    name, share = att.largest
    return Finding("info", "attribution", f"where the time goes: {name} {share:.0%} of the step", att.summary(),
                   "gl.profile(...).attribution shows the whole table")


def _dominant_part(s: Any, f: list[Any], gpu: bool, decide: bool, roof: StepRoofline | None) -> str | None:
    """The verdict when a part outside any roofline dominates (``decide``): the optimizer step
    (``optimizer-bound``) or, on a CPU, Python between the operators (``overhead-bound``); otherwise a note when the
    optimizer takes a large share."""
    from ..telemetry.diagnose import Finding
    from .attribution import OUTSIDE

    if not s.op_classes_s:
        return None
    att = s.attribution
    at_roof = f"; {roof.evidence}" if roof is not None else ""
    opt = att.phase_share("optimizer")
    top_phase = max((sh for p, sh in att.phases if p != "optimizer"), default=0.0) / att.total_s if att.total_s else 0
    if decide and opt >= OPTIMIZER_SHARE and opt >= top_phase:
        f.append(Finding("warning", "optimizer-bound", f"the optimizer step takes {opt:.0%} of the step, more than any "
                         f"other phase; without it the step would be up to {1 / max(1 - opt, 1e-9):.1f}x faster",
                         f"{att.summary()}; optimizer updates {att.share('optimizer updates'):.0%} in operators, "
                         f"the rest Python looping over the parameter tensors{at_roof}", _optimizer_fix(s)))
        return "optimizer-bound"
    outside = att.share(OUTSIDE)
    if decide and not gpu and outside >= HOST_GAP_SHARE:
        what, ev = _overhead_cause(s, None)
        f.append(Finding("warning", "overhead-bound", f"{outside:.0%} of the step runs outside any operator: Python "
                         "between the operators (per-step logic, logging, the autograd engine's own work)",
                         f"{ev}; {att.summary()}{at_roof}", _FIX["overhead-bound"]))
        return "overhead-bound"
    if opt >= OPTIMIZER_NOTE_SHARE:
        f.append(Finding("info", "optimizer", f"the optimizer step takes {opt:.0%} of the step",
                         att.summary(), _optimizer_fix(s)))
    return None


def diagnose_profile(summary: Any) -> Any:
    """The verdict of a :class:`~gpulab.profiling.ProfileSummary` (a :class:`~gpulab.telemetry.diagnose.Verdict`).

    In order: ``input-bound`` (data phases >= 30% of the step); with the step's work and the ceilings, a
    step whose operators need >= 50% of its time at the ceilings is ``compute-bound`` /
    ``precision-bound`` / ``memory-bound`` by the roof that bounds it; so is a step whose non-data time is
    >= 50% inside long operators (>= 50 us; on a GPU: the device busy with kernels that are not tiny) on the
    memory side, or on the compute side at >= 25% of the ceiling (precision-bound from 40%), unless the step
    makes hundreds of tiny operator calls (>= 200 per step, median < 20 us: overhead whatever else runs); otherwise
    ``sync-bound`` (GPU idle >= 15% of the step after host syncs) or ``overhead-bound`` with its cause.
    Findings add host syncs (free on a CPU, a stall on a GPU), the precision hint, a graph kept from step to
    step (a leak), and on a GPU the idle split (waiting for the host vs between kernels). Without work or ceilings
    (``warmup=0``, ``limits=False``) the thresholds alone decide.
    """
    from ..telemetry.diagnose import DATA_SHARE, Finding, Verdict

    s = summary
    f: list[Finding] = []
    verdict = None
    data = s.share("data")
    detail = ", ".join(f"{k} {s.share(k):.0%}" for k in s.phases_s)
    if data >= DATA_SHARE:
        f.append(Finding("warning", "input-bound", f"{data:.0%} of step time in data loading", detail,
                         "prepare data off the critical path: batched/vectorised transforms, DataLoader workers "
                         "with prefetching, cached decoded data, or decoding on the GPU (DALI, lesson 06)"))
        verdict = "input-bound"
    roof = step_roofline(s.work, s.limits, s.step_s)
    gpu = bool(s.device.kernels)
    after_sync = (s.device.idle_after_sync_s / s.total_s
                  if gpu and s.device.idle_after_sync_s is not None and s.total_s > 0 else 0.0)
    first = _dominant_part(s, f, gpu, decide=verdict is None, roof=roof)
    verdict = verdict or first
    if first is not None:
        pass                                      # the part that dominates is named; the roofline is beside the point
    elif roof is not None:
        in_ops = _in_operators(s)
        # hundreds of tiny operator calls per step are overhead whatever a few long ones do
        many_tiny = (not gpu and s.op_calls_per_step >= MANY_OPS_PER_STEP and s.median_op_s is not None
                     and s.median_op_s < TINY_OP_S)
        slow_ops = roof.efficiency < NEAR_CEILING and in_ops >= IN_OPS_SHARE and not many_tiny and (
            roof.bound == "memory" or roof.compute_share >= SLOW_COMPUTE_SHARE)
        near = roof.efficiency >= NEAR_CEILING or slow_ops
        half = roof.dtype == "float32" and s.limits.fastest_16bit()
        ratio = s.limits.peak_flops(half) / roof.flops_ceiling if half else 1.0
        if near and roof.bound == "compute":
            lever = ratio >= FASTER_16BIT and (not slow_ops or roof.compute_share >= PRECISION_SHARE)
            code = "precision-bound" if lever else "compute-bound"
            msg = (f"near the {roof.dtype} compute ceiling ({roof.efficiency:.0%} of the time the work needs at "
                   "the ceilings)" if not slow_ops else
                   f"the compute side sets the pace: long operators take {in_ops:.0%} of the step, at "
                   f"{roof.compute_share:.0%} of the {roof.dtype} ceiling")
            adv = _FIX["compute-bound"] if not slow_ops else (
                "the kernels run slower than the matmul benchmark: shapes (multiples of 8/64), memory layout "
                "(channels_last), threads; then mixed precision (lesson 04)")
            if code == "precision-bound":
                c = roof.ideal_compute_s / (roof.ideal_compute_s + roof.ideal_memory_s)
                gain = 1 / ((1 - c) + c / ratio)
                msg += f"; this machine's measured {half} ceiling is {ratio:.1f}x its float32 one"
                adv = (f"mixed precision ({half} autocast, lesson 04): the matmuls' share of the work ({c:.0%}) at "
                       f"the {ratio:.1f}x ceiling gives up to ~{gain:.1f}x on this step")
            f.append(Finding("ok" if code == "compute-bound" else "warning", code, msg, roof.evidence, adv))
        elif near:
            code = "memory-bound"
            msg = (f"near the memory ceiling: {roof.memory_share:.0%} of the measured bandwidth, "
                   f"{roof.flops / max(roof.bytes_moved, 1):.2g} FLOP per byte moved" if not slow_ops else
                   f"memory traffic sets the pace: long operators take {in_ops:.0%} of the step at "
                   f"{roof.flops / max(roof.bytes_moved, 1):.2g} FLOP per byte, reaching {roof.memory_share:.0%} "
                   "of the copy ceiling")
            adv = _FIX[code] + ("" if not slow_ops or gpu else
                                "; on a CPU each new output is fresh memory the OS maps page by page, which keeps "
                                "eager operators well below the copy ceiling")
            f.append(Finding("warning", code, msg, roof.evidence, adv))
        elif after_sync >= SYNC_IDLE_SHARE:
            code = "sync-bound"
            f.append(Finding("warning", code, f"the device idles {after_sync:.0%} of the step after host syncs",
                             f"{s.syncs_per_step:.0f} sync calls per step; " + roof.evidence, _FIX[code]))
        else:
            code = "overhead-bound"
            what, ev = _overhead_cause(s, roof)
            f.append(Finding("warning", code, f"far below the ceilings ({roof.efficiency:.0%} of the time the work "
                             f"needs at them): {what}", f"{ev}; {roof.evidence}", _FIX[code]))
        verdict = verdict or code
        if code != "overhead-bound" and near and 1 - in_ops >= OVERHEAD_SHARE:
            what, ev = _overhead_cause(s, roof)
            f.append(Finding("warning", "overhead", f"{1 - in_ops:.0%} of the step is outside its long operators: "
                             f"{what}", ev, _FIX["overhead-bound"]))
        if half and ratio >= FASTER_16BIT and code != "precision-bound" and roof.flops:
            f.append(Finding("info", "precision", f"the matmuls run in float32; this machine's measured {half} "
                             f"ceiling is {ratio:.1f}x the float32 one",
                             f"{fmt_rate(s.limits.peak_flops(half), 'FLOP/s')} vs "
                             f"{fmt_rate(roof.flops_ceiling, 'FLOP/s')}",
                             "once the overheads above are gone, mixed precision (lesson 04)"))
    else:
        verdict = _thresholds(s, f, verdict)
    if s.syncs_per_step >= 1:
        if gpu:
            msg = (f"{s.syncs_per_step:.0f} host syncs per step; the device idled "
                   f"{fmt_seconds((s.device.idle_after_sync_s or 0) / s.steps)} per step after them")
            level = "warning" if after_sync >= SYNC_IDLE_SHARE else "info"
        else:
            msg = (f"{s.syncs_per_step:.0f} host syncs per step (.item(), printing a tensor): free on a CPU, "
                   "where nothing is queued; on a GPU each one drains the queue and the device idles")
            level = "info"
        f.append(Finding(level, "host-syncs", msg, f"{fmt_seconds(s.sync_s / s.steps)} per step inside "
                         "aten::item / aten::_local_scalar_dense outside data loading and the optimizer",
                         _FIX["sync-bound"]))
    if s.kept_graph and s.kept_graph[0]:
        n, b = s.kept_graph
        f.append(Finding("warning", "memory-leak", f"a step's autograd graph outlives it: {n} tensor(s) made in a "
                         f"warm-up step still hold their graph {s.steps} steps later (and with it every activation "
                         "the graph saved for backward): memory grows every step",
                         "tensors with a grad_fn still referenced after the step (e.g. losses.append(loss))",
                         "store loss.item() or loss.detach(), never the loss itself; gl.memory.graph_holders "
                         "finds what holds it"))
    if gpu and s.device.idle_host_s is not None:
        f.append(Finding("info", "device-idle", f"device idle {fmt_seconds(s.device.idle_host_s / s.steps)} per "
                         f"step waiting for the host, {fmt_seconds(s.device.idle_between_kernels_s / s.steps)} "
                         "between kernels", f"{s.device.kernels / s.steps:.0f} kernels per step, median "
                         f"{fmt_seconds(s.device.median_kernel_s)}, device busy {s.device_busy_share:.0%}; "
                         f"{s.device.note}"))
    where = _attribution_finding(s)
    if where is not None:                         # right after the verdict's own finding
        f.insert(1 if f else 0, where)
    return Verdict(verdict or "unknown", tuple(f), "torch.profiler + measured ceilings" if roof else "torch.profiler")


def _thresholds(s: Any, f: list[Any], verdict: str | None) -> str:
    """The verdict without work or ceilings: many tiny operators/kernels -> overhead-bound; a busy GPU ->
    healthy; else compute-bound on a CPU (unverified: no ceilings to compare with)."""
    from ..telemetry.diagnose import HEALTHY_UTIL_PCT, Finding

    busy = s.device_busy_share
    tiny_ops = (not s.device.profiled and s.op_calls_per_step >= MANY_OPS_PER_STEP
                and s.median_op_s is not None and s.median_op_s < TINY_OP_S)
    tiny_kernels = (s.device.kernels is not None and s.device.kernels / s.steps >= MANY_OPS_PER_STEP
                    and s.device.median_kernel_s is not None and s.device.median_kernel_s < TINY_KERNEL_S
                    and busy is not None and busy < HEALTHY_UTIL_PCT / 100)
    if tiny_ops or tiny_kernels:
        what, ev = _overhead_cause(s, None)
        f.append(Finding("warning", "overhead-bound", f"many tiny operations: {what}", ev, _FIX["overhead-bound"]))
        return verdict or "overhead-bound"
    if busy is not None:
        if busy >= HEALTHY_UTIL_PCT / 100:
            f.append(Finding("ok", "healthy", f"the GPU is busy {busy:.0%} of the step", s.device.note,
                             "next: more work per kernel (mixed precision, larger batch)"))
            return verdict or "healthy"
        f.append(Finding("warning", "gpu-idle", f"the GPU is busy only {busy:.0%} of the step", s.device.note,
                         "the host does not feed it fast enough: see the findings above"))
        return verdict or "gpu-idle"
    if s.device.profiled and not s.device.ok:
        f.append(Finding("warning", "no-device-events", "no GPU events were recorded", s.device.note,
                         "check CUPTI (pip's torch ships it), close other profilers, then profile again"))
    top = ", ".join(f"{o.name} {o.self_cpu_s / max(s.total_s, 1e-12):.0%}" for o in s.ops[:3])
    f.append(Finding("info", "compute-bound", "no overhead stands out; without the step's work and the "
                     "machine's ceilings this is not checked against a roofline",
                     f"top operators by self CPU time: {top}", "profile with warm-up steps and ceilings "
                     "(the defaults) for a verdict grounded in the measured limits"))
    return verdict or "compute-bound"
