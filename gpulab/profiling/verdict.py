"""A profile's bottleneck verdict: where the time goes first, then the machine's measured ceilings.

Input-bound comes first, from the data phase; then a part that dominates whatever any roofline says (the optimizer
step; on a CPU, the time outside every operator). Otherwise the step's roofline (:mod:`.steproof`: its work at the
measured ceilings, each operator's bytes at the bandwidth of the cache its working set fits) says whether the step
is near a ceiling (compute- or memory-bound, *precision-bound* at the fp32 ceiling where the measured 16-bit one is
well above, *thread-bound* near the ceilings of fewer threads than the machine has) or far from both (overhead:
small operators, Python between them; on a GPU, sync-bound when the device idles after host syncs). Each cause
comes with its fix and the gain the measured shares and ceilings give. The same verdict names hold on a CPU and a
GPU wherever the cause is the same.

Example:
    >>> from gpulab.profiling.verdict import VERDICTS
    >>> sorted(VERDICTS)[:3]
    ['compute-bound', 'input-bound', 'memory-bound']
"""
from __future__ import annotations

from typing import Any

from .._format import fmt_rate, fmt_seconds
from .._links import see
from .attribution import op_class
from .events import MANY_OPS_PER_STEP, TINY_KERNEL_S, TINY_OP_S
from .steproof import StepRoofline, step_roofline, thread_gain

__all__ = [
    "CAST_SHARE",
    "FASTER_16BIT",
    "IDLE_CORES_SHARE",
    "NEAR_CEILING",
    "OPTIMIZER_SHARE",
    "SYNC_IDLE_SHARE",
    "THREAD_GAIN",
    "VERDICTS",
    "StepRoofline",
    "diagnose_profile",
    "step_roofline",
    "thread_gain",
]

NEAR_CEILING = 0.5     # the step's work at the ceilings takes at least half its measured time: bound by a roof
FASTER_16BIT = 1.5     # a measured 16-bit ceiling this many times the fp32 one makes fp32 a choice worth naming
SYNC_IDLE_SHARE = 0.15  # the device idles after host syncs this share of the step: sync-bound
HOST_GAP_SHARE = 0.5   # on a CPU, this share of the step outside any operator: Python between operators
IN_OPS_SHARE = 0.5     # the step's (non-data) time inside long operators (busy device): they set the pace
OVERHEAD_SHARE = 0.2   # ... and this share outside them is overhead worth naming beside the main verdict
MIN_BOUND_SHARE = 0.1  # long operators below this share of their side's ceiling are never called bound by it
PRECISION_SHARE = 0.4  # ... and at this share of the fp32 ceiling or more, a faster 16-bit ceiling is the lever
OPTIMIZER_SHARE = 0.4  # the optimizer's range takes this share of the step and more than any other phase
OPTIMIZER_NOTE_SHARE = 0.2  # ... or this much beside another verdict: worth a finding of its own
THREAD_GAIN = 1.25     # the whole machine's ceilings would make a near-the-roof step this much faster: thread-bound
IDLE_CORES_SHARE = 0.5  # ... unless less than this share of the cores it leaves were idle during the profile
CAST_SHARE = 0.15      # copies and casts take this share of the step: named, with autocast's casts as the usual cause

VERDICTS = {
    "input-bound": "the step waits for data (30% or more of its time in the data phase)",
    "overhead-bound": "the step runs far below both ceilings: per-operator cost, Python between operators, "
                      "or operators too small (batch) to use the machine",
    "sync-bound": "the device idles after host syncs (.item(), printing a loss) while the host issues new work",
    "optimizer-bound": "the optimizer step takes the largest share of the step: per-parameter-tensor updates "
                       "(unfused, or thousands of small tensors)",
    "thread-bound": "the step runs near the ceilings of the threads it uses, on fewer threads than the machine has: "
                    "the measured ceilings of the whole machine are well above",
    "memory-bound": "the step is near the memory-bandwidth ceiling: elementwise work moving many bytes per FLOP",
    "compute-bound": "the step is near the compute ceiling of its precision",
    "precision-bound": "the step is near the fp32 compute ceiling while the measured 16-bit ceiling is well above",
}


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
        gain = f": busy {busy:.0%} of the step, up to {1 / busy:.1f}x if it never waited" if busy else ""
        return (f"the device waits for the host between kernels{gain} (CUDA graphs or torch.compile's "
                "reduce-overhead mode to launch the step at once; independent work on a second CUDA stream)"), ev
    from .overhead import overhead_parts

    parts = overhead_parts(s)           # against this machine's measured per-call floor, largest first
    if not parts:
        return "the operators run far below the ceilings", f"{n:.0f} operator calls per step, median {fmt_seconds(med)}"
    ev = "; ".join(f"{p.name}: {p.evidence}, {p.share:.0%} of the step (up to {p.gain:.1f}x if it cost nothing)"
                   for p in parts)
    return f"{parts[0].name} takes the largest share ({parts[0].share:.0%})", ev


def _overhead_fix(s: Any) -> str:
    """The overhead-bound advice, the fix of the largest part first (CPU steps); the generic advice on a GPU."""
    if s.device.kernels:
        return _FIX["overhead-bound"]
    from .overhead import overhead_parts

    fixes = list(dict.fromkeys(p.fix for p in overhead_parts(s)))
    return "; then ".join(fixes) if fixes else _FIX["overhead-bound"]


_FIX = {
    "overhead-bound": "larger batches (more work per operator), vectorise Python loops over items into tensor "
                      f"operations, then torch.compile or CUDA graphs to cut the per-operator cost ({see('compile')})",
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
    (``optimizer-bound``) or, on a CPU, Python between the operators (``overhead-bound``); None when no part does."""
    from ..telemetry.diagnose import Finding
    from .attribution import DEVICE_IDLE, OUTSIDE

    if not s.op_classes_s:
        return None
    att = s.attribution
    at_roof = f"; {roof.evidence}" if roof is not None else ""
    opt = _optimizer_share(s)
    top_phase = max((sh for p, sh in att.phases if p not in ("optimizer", DEVICE_IDLE)), default=0.0) / att.total_s \
        if att.total_s else 0
    if decide and opt >= OPTIMIZER_SHARE and opt >= top_phase:
        where = (f"optimizer updates {att.share('optimizer updates'):.0%} of the device's time; the host's optimizer "
                 f"range {s.share('optimizer'):.0%} of the step (launching its kernels)" if att.basis == "device time"
                 else f"optimizer updates {att.share('optimizer updates'):.0%} in operators, the rest Python looping "
                 "over the parameter tensors")
        f.append(Finding("warning", "optimizer-bound", f"the optimizer step takes {opt:.0%} of the step, more than any "
                         f"other phase; without it the step would be up to {1 / max(1 - opt, 1e-9):.1f}x faster",
                         f"{att.summary()}; {where}{at_roof}", _optimizer_fix(s)))
        return "optimizer-bound"
    outside = att.share(OUTSIDE)
    if decide and not gpu and outside >= HOST_GAP_SHARE:
        what, ev = _overhead_cause(s, None)
        f.append(Finding("warning", "overhead-bound", f"{outside:.0%} of the step runs outside any operator: Python "
                         "between the operators (per-step logic, logging, the autograd engine's own work)",
                         f"{ev}; {att.summary()}{at_roof}", _overhead_fix(s)))
        return "overhead-bound"
    return None


def _shared_cpu(s: Any) -> Any:
    """A finding when other work held cores during a CPU profile, so that the step was judged against the ceilings
    of fewer threads than it ran with; None otherwise."""
    from ..telemetry.diagnose import Finding

    others, threads = getattr(s, "other_cores", None), getattr(s, "threads", None)
    ran_on = getattr(getattr(s.limits, "env", None), "threads", None)
    if others is None or not threads or ran_on is None or ran_on >= threads:
        return None
    return Finding("warning", "shared-cpu", f"other work used {others:.1f} of the {s.cores} cores during the profiled "
                   f"steps: the step, on {threads} threads, had about {ran_on}, and is judged against the measured "
                   f"ceilings of {ran_on}", f"{s.idle_cores or 0:.1f} core(s) idle, {others:.1f} used by other "
                   "programs or this process's children (DataLoader workers) while the steps ran",
                   f"profile on an idle machine, or torch.set_num_threads({ran_on}) while the other work runs: a "
                   "thread whose core another program holds stalls every multi-threaded operator (appendix A1)")


def _optimizer_share(s: Any) -> float:
    """The optimizer's share of the step: of the host's time on a CPU; on a GPU the larger of the device's time in its
    kernels and the host's range (an unfused optimizer that keeps the host launching while the device idles is as
    much the optimizer's cost)."""
    opt = s.attribution.phase_share("optimizer")
    if s.device.kernels and "optimizer" in s.phases_s:
        opt = max(opt, s.share("optimizer"))
    return opt


def _optimizer_note(s: Any) -> Any:
    """A finding when the optimizer takes ``OPTIMIZER_NOTE_SHARE`` of the step or more beside another verdict."""
    from ..telemetry.diagnose import Finding

    opt = _optimizer_share(s) if s.op_classes_s else 0.0
    if opt < OPTIMIZER_NOTE_SHARE:
        return None
    return Finding("info", "optimizer", f"the optimizer step takes {opt:.0%} of the step; without it the step would "
                   f"be up to {1 / max(1 - opt, 1e-9):.1f}x faster", s.attribution.summary(), _optimizer_fix(s))


_CAST_OPS = ("aten::_to_copy", "aten::to", "aten::copy_")


def _casts_finding(s: Any) -> Any:
    """Copies and casts taking ``CAST_SHARE`` of the step or more, with what usually makes them (autocast's casts
    of fp32 weights in every forward) and the gain if they cost nothing; None below the share."""
    from ..telemetry.diagnose import Finding

    if not s.op_classes_s:
        return None
    share = s.attribution.share("copies/casts")
    if share < CAST_SHARE:
        return None
    calls = sum(o.calls for o in s.ops if o.name in _CAST_OPS) / max(s.steps, 1)
    return Finding("warning", "casts", f"copies and casts take {share:.0%} of the step; without them it would be up to "
                   f"{1 / max(1 - share, 1e-9):.1f}x faster", f"{calls:.0f} aten::_to_copy / to / copy_ calls per "
                   f"step; {s.attribution.summary()}",
                   "under autocast every fp32 weight is cast to 16 bits again in every forward (and the casts' "
                   "gradients run in backward): keep the model in 16 bits where accuracy allows, make the batch larger "
                   "so each cast serves more samples, or torch.compile, which fuses the casts into the operators that "
                   "use them; casts outside autocast: create tensors in the dtype and on the device they are used")


def _memory_cause(s: Any) -> tuple[str, str]:
    """(what, advice) of a memory-bound step from its attribution: the operator class that moves its bytes, with the
    gain the measured share bounds; the generic advice without an attribution."""
    if not s.op_classes_s:
        return "", _FIX["memory-bound"]
    att = s.attribution
    kinds = {c: att.share(c) for c in ("elementwise", "copies/casts", "optimizer updates", "reductions/norms")}
    top, share = max(kinds.items(), key=lambda kv: kv[1])
    gain = f"up to {1 / max(1 - share, 1e-9):.1f}x if they cost nothing"
    if top == "optimizer updates":
        return f"; the optimizer's updates take {share:.0%} of the step ({gain})", _optimizer_fix(s)
    if top == "copies/casts":
        return f"; copies and casts take {share:.0%} of the step ({gain})", (
            "fewer casts: under autocast keep weights in 16 bits or use torch.compile, which fuses casts into their "
            "users; create tensors in their final dtype and device")
    n = sum(o.calls for o in s.ops if o.name.startswith("aten::") and op_class(o.name) == top) / max(s.steps, 1)
    if top == "elementwise":
        return (f"; {n:.0f} elementwise operator calls take {share:.0%} of the step, each a pass over memory "
                f"({gain})", "torch.compile fuses a chain of elementwise operators into one pass over memory "
                f"({see('compile')}); 16-bit activations halve the bytes; channels_last for convolutions")
    return (f"; reductions and norms take {share:.0%} of the step ({gain})",
            "torch.compile fuses a norm with the elementwise work around it; 16-bit activations halve the bytes")


def diagnose_profile(summary: Any) -> Any:
    """The verdict of a :class:`~gpulab.profiling.ProfileSummary` (a :class:`~gpulab.telemetry.diagnose.Verdict`).

    In order: ``input-bound`` (data phases >= 30% of the step); the part that dominates before any roofline
    (``optimizer-bound``: the optimizer's range >= 40% of the step and the largest phase; on a CPU
    ``overhead-bound`` when >= 50% of the step runs outside any operator); then, with the step's work and the
    ceilings (cache-aware: each operator's bytes at the ceiling of the cache its working set fits), a step whose
    operators need >= 50% of its time at the ceilings is ``compute-bound`` / ``precision-bound`` / ``memory-bound``
    by the roof that bounds it; so is a step whose non-data time is >= 50% inside long operators (>= 50 us; on a
    GPU: the device busy with kernels that are not tiny) at >= 10% of the ceiling of the side that bounds it
    (precision-bound from 40%), unless the step makes hundreds of tiny operator calls (>= 200 per step,
    median < 20 us: overhead whatever else runs); a CPU step near a roof on fewer threads than the cores, whose work
    the whole machine's measured ceilings would run >= 1.25x faster, is ``thread-bound``; otherwise ``sync-bound``
    (GPU idle >= 15% of the step after host syncs) or ``overhead-bound`` with its cause. Findings add where the time
    goes (right after the verdict's own), host syncs (free on a CPU, a stall on a GPU), the precision hint, the
    optimizer's share, copies and casts (autocast), a graph kept from step to step (a leak), and on a GPU the idle
    split (waiting for the host vs between kernels). Without work or ceilings (``warmup=0``, ``limits=False``) the
    thresholds alone decide.
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
                         f"with prefetching ({see('data-loading')}), cached decoded data, or decoding on the GPU "
                         f"(NVIDIA DALI: {see('dali')})"))
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
        side_share = roof.memory_share if roof.bound == "memory" else roof.compute_share
        slow_ops = (roof.efficiency < NEAR_CEILING and in_ops >= IN_OPS_SHARE and not many_tiny
                    and side_share >= MIN_BOUND_SHARE)
        near = (roof.efficiency >= NEAR_CEILING or slow_ops) and not roof.count_unreliable
        if roof.count_unreliable:
            f.append(Finding("info", "count", "the work count does not fit this machine's ceilings: judged by the "
                             "step's times instead", roof.count_unreliable, ""))
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
                f"(channels_last), threads; then mixed precision ({see('amp')})")
            if code == "precision-bound":
                c = roof.ideal_compute_s / (roof.ideal_compute_s + roof.ideal_memory_s)
                gain = 1 / ((1 - c) + c / ratio)
                msg += f"; this machine's measured {half} ceiling is {ratio:.1f}x its float32 one"
                adv = (f"mixed precision ({half} autocast; {see('amp')}): the matmuls' share of the work ({c:.0%}) at "
                       f"the {ratio:.1f}x ceiling gives up to ~{gain:.1f}x on this step")
            f.append(Finding("ok" if code == "compute-bound" else "warning", code, msg, roof.evidence, adv))
        elif near:
            code = "memory-bound"
            msg = (f"near the memory ceiling: {roof.memory_share:.0%} of the measured bandwidth, "
                   f"{roof.flops / max(roof.bytes_moved, 1):.2g} FLOP per byte moved" if not slow_ops else
                   f"memory traffic sets the pace: long operators take {in_ops:.0%} of the step at "
                   f"{roof.flops / max(roof.bytes_moved, 1):.2g} FLOP per byte, reaching {roof.memory_share:.0%} "
                   "of its memory ceiling")
            what, adv = _memory_cause(s)
            msg += what
            adv += ("" if not slow_ops or gpu else
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
                             f"needs at them): {what}", f"{ev}; {roof.evidence}", _overhead_fix(s)))
        roof_code = code
        threads = None if gpu else thread_gain(s, roof, max(roof.efficiency, in_ops) if near else roof.efficiency)
        if threads is not None:
            gain, ev = threads
            used, cores = s.threads, s.cores
            advice = (f"torch.set_num_threads({cores}) (or leave OMP_NUM_THREADS / MKL_NUM_THREADS unset), unless the "
                      "other cores are kept for other work on purpose (DataLoader workers, another process)")
            idle = getattr(s, "idle_cores", None)
            busy = idle is not None and idle < IDLE_CORES_SHARE * (cores - used)
            if busy:
                ev += (f"; during the profile only {idle:.1f} of the other {cores - used} core(s) were idle: other "
                       "work (DataLoader workers, other programs) uses them")
            if near and code != "sync-bound" and gain >= THREAD_GAIN and not busy:
                f.insert(len(f) - 1, Finding("warning", "thread-bound", f"the step uses {used} of {cores} threads and "
                                             f"runs near their ceilings; with all {cores} this machine's measured "
                                             f"ceilings give ~{gain:.1f}x on this step", ev, advice))
                code = "thread-bound"
            else:
                f.append(Finding("info", "threads", f"the step uses {used} of {cores} threads: the whole machine's "
                                 f"measured ceilings give ~{gain:.1f}x on the part of the step at the roof"
                                 + (", if the other cores were free" if busy else ""), ev, advice))
        verdict = verdict or code
        if code != "overhead-bound" and near and 1 - in_ops >= OVERHEAD_SHARE:
            what, ev = _overhead_cause(s, roof)
            f.append(Finding("warning", "overhead", f"{1 - in_ops:.0%} of the step is outside its long operators: "
                             f"{what}", ev, _FIX["overhead-bound"]))
        if half and ratio >= FASTER_16BIT and roof_code != "precision-bound" and roof.flops:
            f.append(Finding("info", "precision", f"the matmuls run in float32; this machine's measured {half} "
                             f"ceiling is {ratio:.1f}x the float32 one",
                             f"{fmt_rate(s.limits.peak_flops(half), 'FLOP/s')} vs "
                             f"{fmt_rate(roof.flops_ceiling, 'FLOP/s')}",
                             f"once the overheads above are gone, mixed precision ({see('amp')})"))
    else:
        verdict = _thresholds(s, f, verdict)
    for extra in (_optimizer_note(s) if verdict != "optimizer-bound" else None, _casts_finding(s), _shared_cpu(s)):
        if extra is not None:
            f.append(extra)
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
