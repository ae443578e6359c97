"""Memory: what a step really holds, where it goes, whether it fits, the largest batch that does, and
out-of-memory errors explained.

On CUDA the numbers come from PyTorch's caching allocator (and NVML for what other processes and the
driver hold). On a CPU, a dispatch-mode tracker counts the bytes of every tensor storage created while the
code runs and frees them as they die, so the memory lessons are real on a laptop too; :func:`memory_budget`
turns that tracker into a simulated card whose overflow raises the same ``torch.OutOfMemoryError`` a GPU raises.

- ``peak``: :func:`peak_memory`, :func:`memory_budget`, :func:`free_memory`, :func:`is_oom`, the units
- ``accounting``: :func:`breakdown` (measured) and :func:`estimate` (from two small batches)
- ``search``: :func:`find_max_batch_size`
- ``oom`` / ``oom_message`` / ``fixes``: :func:`explain_oom`, :func:`parse_oom_message`, :func:`smaller_card`,
  :func:`try_fixes`
- ``cuda``: the CUDA allocator's and NVML's views reconciled, memory snapshots
- ``leaks``: growth across steps, what holds autograd graphs, recovering without a restart

Example:
    >>> import torch, gpulab as gl
    >>> gl.peak_memory(lambda: torch.ones(1024, 1024).sum()).peak_bytes >= 4 * gl.MiB
    True
"""
from .accounting import MemoryBreakdown, MemoryEstimate, breakdown, estimate
from .cuda import (MEMORY_VIZ_URL, CudaMemoryState, MemoryReconciliation, MemorySnapshot, capture_memory_history,
                   cuda_memory_state, nvml_processes, reconcile_memory)
from .fixes import Card, FixLadder, FixTrial, smaller_card, try_fixes
from .leaks import LEAK_BYTES_PER_STEP, GraphHolder, MemoryGrowth, Recovery, graph_holders, memory_growth, recover_memory
from .oom import Fix, OOMReport, explain_oom
from .oom_message import OPTIMIZER_STATES_PER_PARAMETER, OOMMessage, parse_oom_message
from .peak import (CUDA_CONTEXT_BYTES, GiB, KiB, MemoryTracker, MiB, PeakMemory, free_memory, is_oom, memory_budget,
                   peak_memory)
from .search import BatchSizeSearch, BatchTrial, find_max_batch_size

__all__ = [
    "KiB", "MiB", "GiB", "CUDA_CONTEXT_BYTES", "peak_memory", "PeakMemory", "memory_budget", "MemoryTracker",
    "free_memory", "is_oom", "breakdown", "MemoryBreakdown", "estimate", "MemoryEstimate", "find_max_batch_size",
    "BatchSizeSearch", "BatchTrial", "explain_oom", "OOMReport", "Fix", "parse_oom_message", "OOMMessage",
    "OPTIMIZER_STATES_PER_PARAMETER", "smaller_card", "Card", "try_fixes", "FixLadder", "FixTrial",
    "cuda_memory_state", "CudaMemoryState", "reconcile_memory", "MemoryReconciliation", "nvml_processes",
    "capture_memory_history", "MemorySnapshot", "MEMORY_VIZ_URL", "memory_growth", "MemoryGrowth", "graph_holders",
    "GraphHolder", "recover_memory", "Recovery", "LEAK_BYTES_PER_STEP",
]
