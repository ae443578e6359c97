"""gpulab: make machine learning fast on GPUs - correct timing, telemetry, comparison tables, diagnosis.

Importing gpulab is cheap and has no side effects: torch, TensorFlow, DALI and NVML are imported
only by the functions that need them, so ``import gpulab`` works on a machine with none of them.

# Install

```bash
pip install "gpulab @ git+https://github.com/gpulab-course/gpulab@main"
pip install torch torchvision    # for PyTorch; on Linux without an NVIDIA GPU add
                                 # --index-url https://download.pytorch.org/whl/cpu
```

# gpulab in your own notebook

The calls a practitioner needs, the same on a laptop CPU, a Colab T4 and an H100; every result
prints as text in a terminal and as a table in Jupyter:

```python
import gpulab as gl

session = gl.setup()           # the device; seeds; TensorFlow shares the GPU
gl.doctor()                    # the machine and stack, with fixes for what is wrong

# synchronised, warmed up: median, IQR, items/s
m = gl.benchmark(model, x, label="fp32", items=64)
# speedups, and each row's share of this machine's measured peak
gl.compare([m_fp32, m_bf16], baseline="fp32",
           peak_flops=gl.machine_limits().peak_flops())

with gl.Monitor(interval=0.1, live=True) as mon:   # NVML + host telemetry
    train()
mon.trace.plot(); mon.trace.diagnose()   # utilisation, memory, power; a verdict

gl.profile(step, steps=5).verdict        # where a step's time goes, and why
gl.peak_memory(step)                     # what a step holds at its peak
gl.find_max_batch_size(make_step)        # the largest batch that fits
gl.explain_oom(error, model=model, batch=batch)   # an OOM explained, fixes ranked
gl.measure_loader(loader, step)          # data wait vs compute per batch
gl.launch("train.py", nproc=2)           # torchrun from a notebook
```

Published figures stand beside yours with their source and hardware (``gl.published``,
``gl.gpu_spec``). ``python -m gpulab doctor | limits | monitor | devicequery`` are the same tools
in a terminal.

# What is where

The names above (``gpulab.__all__``) are the stable toolkit, grouped by topic in the sidebar.
Everything else lives one level down, by concern: ``gl.timing``, ``gl.limits`` (measured
ceilings), ``gl.roofline``, ``gl.work`` (a call's FLOPs and bytes per operator), ``gl.transformer`` (a GPT's
parameters, FLOPs per token, MFU and KV cache), ``gl.attention`` (which SDPA kernel runs, and why not the others), ``gl.reference``,
``gl.system``, ``gl.diagnosis``, ``gl.compiling`` (torch.compile reports, CUDA graphs, ONNX
Runtime), ``gl.kernels`` (your own Triton and Numba CUDA kernels: checks, timing, traffic,
roofline; C++/CUDA extensions), ``gl.streams`` (work on CUDA streams timed with events),
``gl.telemetry`` (Monitor, NVML, energy counters), ``gl.cost`` (hourly prices, published or yours,
and cost per million items), ``gl.profiling``, ``gl.memory`` (peak, breakdown,
out-of-memory, leaks, CUDA allocator), ``gl.data`` (loader measurement), ``gl.distributed``
(torchrun, scaling), ``gl.tracking`` (params, metrics and Monitor telemetry to MLflow and
TensorBoard), ``gl.transfer``, ``gl.errors``.

The course's own scaffolding (reference models, synthetic data, lesson demonstrations, exercise
checks) is ``from gpulab import course``, documented apart.
"""
from . import (attention, compiling, cost, data, diagnosis, distributed, errors, interleaved, kernels, limits, memory, plots,
               precision, profiling, reference, roofline, session, streams, system, tables, telemetry, timing, tracking,
               transfer, transformer, work)
from ._deprecated import deprecated_attribute, deprecated_names
from .data import compare_loaders, measure_loader
from .devicequery import device_query
from .diagnosis import doctor
from .distributed import launch, torchrun_command
from .interleaved import benchmark_interleaved
from .limits import MachineLimits, machine_limits
from .memory import GiB, MiB, breakdown, estimate, explain_oom, find_max_batch_size, free_memory, memory_budget, peak_memory
from .plots import plot_roofline
from .precision import choose_precision
from .profiling import compare_profiles, phase, profile
from .reference import gpu_spec, published
from .roofline import attainable_flops, count_flops, fit_amdahl
from .session import by_device, setup
from .system import device, system_info
from .tables import Comparison, compare
from .telemetry import Monitor, Trace
from .timing import Measurement, benchmark, timer

__version__ = "0.1.0"

__all__ = [
    "__version__",
    # set-up and diagnosis
    "setup", "by_device", "device", "system_info", "doctor", "device_query",
    # timing
    "benchmark", "benchmark_interleaved", "timer", "Measurement",
    # comparison and published figures
    "compare", "Comparison", "published", "gpu_spec",
    # limits and models of performance
    "machine_limits", "MachineLimits", "count_flops", "attainable_flops", "fit_amdahl", "plot_roofline",
    "choose_precision",
    # telemetry and profiling
    "Monitor", "Trace", "profile", "phase", "compare_profiles",
    # memory
    "peak_memory", "memory_budget", "breakdown", "estimate", "find_max_batch_size", "explain_oom", "free_memory",
    "MiB", "GiB",
    # data loading and launching
    "measure_loader", "compare_loaders", "launch", "torchrun_command",
]

# The toolkit's names by topic, as the API reference shows them (tests/project/test_house.py: every name of __all__ once).
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Set-up and diagnosis", ("setup", "by_device", "device", "system_info", "doctor", "device_query")),
    ("Timing", ("benchmark", "benchmark_interleaved", "timer", "Measurement")),
    ("Comparison and published figures", ("compare", "Comparison", "published", "gpu_spec")),
    ("Limits and performance models", ("machine_limits", "MachineLimits", "count_flops", "attainable_flops",
                                       "fit_amdahl", "plot_roofline", "choose_precision")),
    ("Telemetry and profiling", ("Monitor", "Trace", "profile", "phase", "compare_profiles")),
    ("Memory", ("peak_memory", "memory_budget", "breakdown", "estimate", "find_max_batch_size", "explain_oom",
                "free_memory", "MiB", "GiB")),
    ("Data loading and launching", ("measure_loader", "compare_loaders", "launch", "torchrun_command")),
)


def __getattr__(name: str) -> object:
    """Names that moved (to a module of the toolkit or to ``gpulab.course``) still resolve, with a warning."""
    return deprecated_attribute(name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(deprecated_names()))
