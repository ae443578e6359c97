"""gpulab: make machine learning fast on GPUs - correct timing, telemetry, comparison tables, diagnosis.

Importing gpulab is cheap and has no side effects: torch, TensorFlow, DALI and NVML are imported
only by the functions that need them, so ``import gpulab`` works on a machine with none of them.

# gpulab in your own notebook

The calls a practitioner needs, the same on a laptop CPU, a Colab T4 and an H100 (every result prints as
text in a terminal and as a table in Jupyter):

```python
import gpulab as gl

session = gl.setup()                                   # device banner; seeds; TensorFlow shares the GPU
gl.doctor()                                            # the machine and stack, with fixes for what is wrong
m = gl.benchmark(model, x, label="fp32", items=64)     # synchronised, warmed up: median, IQR, items/s
gl.compare([m_fp32, m_bf16], baseline="fp32",          # speedups, share of this machine's measured peak
           peak_flops=gl.machine_limits().peak_flops())
with gl.Monitor(interval=0.1, live=True) as mon:       # NVML + host telemetry in the background
    train()
mon.trace.plot(); mon.trace.diagnose()                 # utilisation, memory, power; a verdict with evidence
gl.profile(step, steps=5).verdict                      # torch.profiler: where a step's time goes, and why
gl.peak_memory(step); gl.find_max_batch_size(make_step)  # what a step holds; the largest batch that fits
gl.explain_oom(error, model=model, batch=batch)        # an out-of-memory error explained, fixes ranked
gl.measure_loader(loader, step)                        # data wait vs compute per batch
gl.launch("train.py", nproc=2)                         # torchrun from a notebook, every rank's result back
```

Published figures stand beside yours with their source and hardware (``gl.published``, ``gl.gpu_spec``).

Example:
    >>> import gpulab as gl
    >>> gl.__version__
    '0.1.0'
"""
from . import models
from . import distributed
from .distributed import (DistributedError, LaunchResult, LaunchTimeout, RankFailure, Scaling, allreduce_seconds,
                          default_backend, launch, mirrored_strategy, scaling, shard_indices, torchrun_command)
from .data import CorruptDataError, ImageSet, data_dir, real_images, synthetic_images
from .loading import (BatchCheck, LoaderComparison, LoaderRun, check_batches, compare_loaders, measure_loader,
                      measure_loaders)
from .pipelines import (CachedLoader, DaliLoader, DaliPlan, cached_loader, dali_available, dali_loader, dali_plan,
                        dali_tf_available, dali_tf_dataset, tf_dataset, torch_loader)
from .batching import BatchRun, BatchSweep, batch_sweep, scale_lr, train_at_batch_size, warmup_factor
from .interleaved import Contention, benchmark_interleaved, cpu_contention
from .limits import MachineLimits, machine_limits, measure_bandwidth, measure_matmul
from .memory import (GiB, KiB, MiB, BatchSizeSearch, MemoryBreakdown, MemoryEstimate, PeakMemory, breakdown, estimate,
                     find_max_batch_size, free_memory, is_oom, memory_budget, peak_memory)
from .notebook import Check, Session, by_device, check, setup
from .plots import plot_amdahl, plot_roofline
from .cuda_memory import (CudaMemoryState, MemoryReconciliation, MemorySnapshot, capture_memory_history,
                          cuda_memory_state, nvml_processes, reconcile_memory)
from .errors import ErrorExplanation, explain_error
from .leaks import GraphHolder, MemoryGrowth, Recovery, graph_holders, memory_growth, recover_memory
from .oom import Card, FixLadder, OOMMessage, OOMReport, explain_oom, parse_oom_message, smaller_card, try_fixes
from .profiling import (NsightCommands, ProfileComparison, ProfileSummary, TFProfile, compare_profiles,
                        nsight_commands, nvtx_capture, phase, profile, tf_profile)
from .accumulation import GradientCheck, checkpointed, compare_gradients, micro_batch_gradients
from .precision import (PrecisionChoice, UnderflowReport, choose_precision, float_formats, gradient_underflow, keras_cnn,
                        keras_step_times, matmul_sweep)
from .runs import RunComparison, compare_runs, pattern_batch, train_interleaved
from .reference import GPUSpec, Published, gpu_spec, gpu_specs, published, references
from .roofline import AmdahlFit, amdahl_speedup, attainable_flops, count_flops, fit_amdahl
from .system import (Capabilities, Diagnosis, FrameworkInfo, GPUInfo, Report, SystemInfo, device, device_kind,
                     diagnose, doctor, system_info)
from .tables import Comparison, compare
from .telemetry import Monitor, Trace, Verdict
from .train import TrainConfig, TrainResult, accumulated_gradients, evaluate, train, train_step
from .transfer import SyncPoint, SyncReport, find_host_syncs, measure_transfer
from .timing import (Env, Measurement, NoisyMeasurementWarning, Stopwatch, benchmark, environment, repeat_for,
                     synchronize, timer)

__version__ = "0.1.0"

__all__ = [
    "__version__",
    # system
    "device", "device_kind", "system_info", "doctor", "diagnose", "SystemInfo", "GPUInfo", "FrameworkInfo",
    "Capabilities", "Diagnosis", "Report",
    # timing
    "benchmark", "timer", "repeat_for", "synchronize", "environment", "Measurement", "Env", "Stopwatch",
    "NoisyMeasurementWarning",
    # tables and published figures
    "compare", "Comparison", "published", "references", "gpu_spec", "gpu_specs", "Published", "GPUSpec",
    # telemetry
    "Monitor", "Trace", "Verdict",
    # machine limits and models of performance
    "machine_limits", "measure_matmul", "measure_bandwidth", "MachineLimits",
    "attainable_flops", "count_flops", "amdahl_speedup", "fit_amdahl", "AmdahlFit",
    # moving data (lesson 02)
    "measure_transfer", "find_host_syncs", "SyncReport", "SyncPoint", "benchmark_interleaved", "cpu_contention",
    "Contention",
    # batching (lesson 03)
    "batch_sweep", "BatchSweep", "scale_lr", "warmup_factor", "train_at_batch_size", "BatchRun",
    # memory
    "peak_memory", "PeakMemory", "breakdown", "MemoryBreakdown", "estimate", "MemoryEstimate",
    "find_max_batch_size", "BatchSizeSearch", "memory_budget", "free_memory", "is_oom", "KiB", "MiB", "GiB",
    # models and training
    "models", "TrainConfig", "TrainResult", "train", "train_step", "accumulated_gradients", "evaluate",
    # precision and accumulation (lessons 04-05)
    "choose_precision", "PrecisionChoice", "float_formats", "gradient_underflow", "UnderflowReport", "keras_cnn",
    "keras_step_times", "matmul_sweep", "micro_batch_gradients", "compare_gradients", "GradientCheck", "checkpointed",
    "train_interleaved", "compare_runs", "RunComparison", "pattern_batch",
    # input pipelines (lesson 06)
    "synthetic_images", "real_images", "ImageSet", "CorruptDataError", "data_dir", "torch_loader", "cached_loader",
    "CachedLoader", "tf_dataset", "dali_loader", "DaliLoader", "dali_plan", "DaliPlan", "dali_tf_dataset",
    "dali_available", "dali_tf_available", "measure_loader", "measure_loaders", "LoaderRun", "compare_loaders",
    "LoaderComparison", "check_batches", "BatchCheck",
    # out-of-memory and troubleshooting (lesson 09)
    "explain_oom", "OOMReport", "parse_oom_message", "OOMMessage", "smaller_card", "Card", "try_fixes", "FixLadder",
    "memory_growth",
    "MemoryGrowth", "graph_holders", "GraphHolder", "recover_memory", "Recovery", "reconcile_memory",
    "MemoryReconciliation", "cuda_memory_state", "CudaMemoryState", "nvml_processes", "capture_memory_history",
    "MemorySnapshot", "explain_error", "ErrorExplanation",
    # profiling (lesson 08)
    "profile", "ProfileSummary", "phase", "compare_profiles", "ProfileComparison", "nsight_commands",
    "NsightCommands", "nvtx_capture", "tf_profile", "TFProfile",
    # multi-GPU (lesson 07)
    "distributed", "launch", "LaunchResult", "DistributedError", "LaunchTimeout", "RankFailure", "torchrun_command",
    "default_backend", "allreduce_seconds", "scaling", "Scaling", "mirrored_strategy", "shard_indices",
    # notebooks
    "setup", "by_device", "Session", "check", "Check", "plot_roofline", "plot_amdahl",
]
