"""The top-level names of gpulab 0.1 that moved in the toolkit/course split, kept for one release.

``gpulab.<old name>`` still works: it returns the object from its new place and warns once per name with a
``DeprecationWarning`` that says where it lives now. Toolkit names moved one level down (``gl.memory.KiB``,
``gl.profiling.nsight_commands``); the lessons' scaffolding moved to ``gpulab.course``
(``from gpulab import course; course.train_step(...)``). This module is the only place in the toolkit that
may import ``gpulab.course``, and only when an old name is asked for.

Example:
    >>> import warnings, gpulab as gl
    >>> _warned.discard("cpu_contention")              # each name warns once per process
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     f = gl.cpu_contention
    >>> f is gl.interleaved.cpu_contention, "gpulab.interleaved.cpu_contention" in str(caught[0].message)
    (True, True)
"""
from __future__ import annotations

import importlib
import warnings

__all__ = ["MOVED", "new_place", "deprecated_attribute", "deprecated_names"]

# new module -> the old top-level names that now live there
_BY_MODULE: dict[str, tuple[str, ...]] = {
    "gpulab.course": ("accumulated_gradients", "batch_sweep", "BatchRun", "BatchSweep", "cached_loader", "CachedLoader", "check",
        "Check", "checkpointed", "compare_gradients", "compare_runs", "CorruptDataError", "dali_available",
        "dali_loader", "dali_plan", "dali_tf_available", "dali_tf_dataset", "DaliLoader", "DaliPlan", "data_dir",
        "evaluate", "float_formats", "gradient_underflow", "GradientCheck", "ImageSet", "keras_cnn", "keras_step_times",
        "matmul_sweep", "micro_batch_gradients", "models", "pattern_batch", "real_images", "RunComparison", "scale_lr",
        "synthetic_images", "tf_dataset", "torch_loader", "train", "train_at_batch_size", "train_interleaved",
        "train_step", "TrainConfig", "TrainResult", "UnderflowReport", "warmup_factor"),
    "gpulab.data": ("BatchCheck", "check_batches", "LoaderComparison", "LoaderRun", "measure_loaders"),
    "gpulab.diagnosis": ("diagnose", "Diagnosis", "Report"),
    "gpulab.distributed": ("allreduce_seconds", "default_backend", "DistributedError", "LaunchResult", "LaunchTimeout",
        "mirrored_strategy", "RankFailure", "scaling", "Scaling", "shard_indices"),
    "gpulab.errors": ("ErrorExplanation", "explain_error"),
    "gpulab.interleaved": ("Contention", "cpu_contention"),
    "gpulab.limits": ("measure_bandwidth", "measure_matmul"),
    "gpulab.memory": ("BatchSizeSearch", "capture_memory_history", "Card", "cuda_memory_state", "CudaMemoryState", "FixLadder",
        "graph_holders", "GraphHolder", "is_oom", "KiB", "memory_growth", "MemoryBreakdown", "MemoryEstimate",
        "MemoryGrowth", "MemoryReconciliation", "MemorySnapshot", "nvml_processes", "OOMMessage", "OOMReport",
        "parse_oom_message", "PeakMemory", "reconcile_memory", "recover_memory", "Recovery", "smaller_card", "try_fixes"),
    "gpulab.plots": ("plot_amdahl",),
    "gpulab.precision": ("PrecisionChoice",),
    "gpulab.profiling": ("nsight_commands", "NsightCommands", "nvtx_capture", "ProfileComparison", "ProfileSummary", "tf_profile",
        "TFProfile"),
    "gpulab.reference": ("gpu_specs", "GPUSpec", "Published", "references"),
    "gpulab.roofline": ("amdahl_speedup", "AmdahlFit"),
    "gpulab.session": ("Session",),
    "gpulab.system": ("Capabilities", "device_kind", "FrameworkInfo", "GPUInfo", "SystemInfo"),
    "gpulab.telemetry": ("Verdict",),
    "gpulab.timing": ("Env", "environment", "NoisyMeasurementWarning", "repeat_for", "Stopwatch", "synchronize"),
    "gpulab.transfer": ("find_host_syncs", "measure_transfer", "SyncPoint", "SyncReport"),
}
MOVED: dict[str, str] = {name: module for module, names in _BY_MODULE.items() for name in names}
_warned: set[str] = set()


def new_place(name: str) -> str:
    """Where an old top-level name lives now, e.g. ``new_place("KiB") == "gpulab.memory.KiB"``.

    Example:
        >>> new_place("train_step")
        'gpulab.course.train_step'
    """
    if name not in MOVED:
        raise KeyError(f"{name!r} is not a moved gpulab name (it is either still at gpulab.{name} or never existed)")
    return f"{MOVED[name]}.{name}"


def deprecated_attribute(name: str) -> object:
    """The object an old top-level name refers to, with a ``DeprecationWarning`` naming its new place."""
    if name not in MOVED:
        raise AttributeError(f"module 'gpulab' has no attribute {name!r}")
    module = importlib.import_module(MOVED[name])
    if name not in _warned:
        _warned.add(name)
        short = MOVED[name].replace("gpulab.course", "course").replace("gpulab.", "gl.")
        how = "from gpulab import course; " if short.startswith("course") else ""
        warnings.warn(f"gpulab.{name} moved to {MOVED[name]}.{name} ({how}{short}.{name}); the old name goes "
                      f"in the next release", DeprecationWarning, stacklevel=3)
    return getattr(module, name)


def deprecated_names() -> list[str]:
    """Every old name that still resolves (for ``dir(gpulab)`` and tab completion)."""
    return sorted(MOVED)
