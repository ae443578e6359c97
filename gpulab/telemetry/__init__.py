"""GPU and host telemetry: ``Monitor`` samples in the background and gives a ``Trace``.

``nvml`` is the only module in gpulab that imports NVML (nvidia-ml-py); ``host`` reads psutil;
``trace`` holds the recorded samples and their views; ``diagnose`` turns a trace into a verdict; ``energy`` reads
a device's energy counter over a window (NVML for a GPU, ``rapl`` for the CPU packages) and ``trace_energy`` a
trace's joules per device and per marked phase.
"""
from .diagnose import Finding, Verdict
from .energy import Energy, EnergyMeter
from .sampler import Monitor
from .trace import DeviceSummary, Mark, Trace, TraceSummary

__all__ = ["Monitor", "Trace", "TraceSummary", "DeviceSummary", "Mark", "Verdict", "Finding", "Energy", "EnergyMeter"]
