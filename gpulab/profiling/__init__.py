"""Profiling: where a training step's time goes, by operator and by phase, with a bottleneck verdict.

:func:`profile` wraps ``torch.profiler`` with a schedule (warm-up steps are not recorded) and returns a
:class:`ProfileSummary`: the top operators by self time on the CPU and on the device, the share of each
step spent in data loading / forward / backward / optimizer (from ``record_function`` ranges such as
:func:`phase`, or PyTorch's own ``enumerate(DataLoader)`` and ``Optimizer.step`` ranges), memory by
operator when asked, the path of a Chrome/Perfetto trace, and whether device events were really
recorded (CUPTI can drop them silently). ``summary.attribution`` (an :class:`Attribution`) says where the
step's time goes by phase and by operator class, with the time outside every operator. ``summary.verdict``
turns it into the same kind of :class:`~gpulab.telemetry.diagnose.Verdict` as ``Monitor.trace.diagnose()``:
the part that dominates first (input- or optimizer-bound; on a CPU, overhead-bound when most of the step runs
outside the operators), then the machine's measured ceilings: the step's FLOPs and bytes (counted in a warm-up
call) against :func:`gpulab.machine_limits` say whether it is compute-, precision-, memory-, overhead- or
sync-bound (``summary.roofline`` has the shares).

:func:`phase` also emits an NVTX range on CUDA, so the same annotations show in Nsight Systems;
:func:`nsight_commands` gives the ``nsys`` / ``ncu`` command lines for a GPU machine and
:func:`nvtx_capture` marks the region they should record. :func:`trace_breakdown` runs Holistic Trace Analysis on
a GPU run's traces (one per rank): each rank's time computing, copying or communicating, and idle, and why it idled.
:func:`tf_profile` runs TensorFlow's profiler into a TensorBoard log directory.

Example:
    >>> import torch, gpulab as gl
    >>> w = torch.randn(64, 64, requires_grad=True)
    >>> def step():
    ...     with gl.phase("data"):
    ...         x = torch.randn(32, 64)
    ...     with gl.phase("forward"):
    ...         loss = (x @ w).square().mean()
    ...     with gl.phase("backward"):
    ...         loss.backward()
    >>> s = gl.profile(step, steps=3, warmup=1, trace=False)
    >>> sorted(s.phases_s) == ["backward", "data", "forward", "optimizer", "other"]
    True
    >>> s.steps, s.device.kernels is None
    (3, True)
"""
from __future__ import annotations
from .attribution import Attribution
from .compare import ProfileComparison, compare_profiles
from .events import MANY_OPS_PER_STEP, PHASES, TINY_OP_S, DeviceCheck, OpStat, check_device_events, phase
from .hta import RankTime, TraceBreakdown, trace_breakdown
from .nsight import NsightCommands, nsight_commands, nvtx_capture
from .run import profile
from .summary import ProfileSummary
from .verdict import VERDICTS, StepRoofline, diagnose_profile, step_roofline
from .tf import TFProfile, tf_profile

__all__ = ["phase", "profile", "ProfileSummary", "Attribution", "OpStat", "DeviceCheck", "check_device_events",
           "compare_profiles", "ProfileComparison", "diagnose_profile", "StepRoofline", "step_roofline", "VERDICTS", "nsight_commands", "NsightCommands",
           "nvtx_capture", "tf_profile", "TFProfile", "PHASES", "TINY_OP_S", "MANY_OPS_PER_STEP", "trace_breakdown",
           "TraceBreakdown", "RankTime"]
