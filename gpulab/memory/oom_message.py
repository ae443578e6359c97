"""The text of an out-of-memory error, parsed: what was asked for, what the card has, what the cache holds."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = ['OOMMessage', 'parse_oom_message', 'OPTIMIZER_STATES_PER_PARAMETER']


_UNITS = {"B": 1, "bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "KB": 10**3, "MB": 10**6,
          "GB": 10**9}
_SIZE = r"([\d.]+)\s*(B|bytes|KiB|MiB|GiB|TiB|KB|MB|GB)"

# Tensors of optimizer state per parameter tensor, by optimizer class (for a step not taken yet).
OPTIMIZER_STATES_PER_PARAMETER = {"SGD": 0, "SGD+momentum": 1, "Adam": 2, "AdamW": 2, "Adam+amsgrad": 3,
                                  "RMSprop": 1, "Adagrad": 1, "Adamax": 2, "NAdam": 2, "RAdam": 2}


def _bytes(num: str, unit: str) -> int:
    return int(round(float(num) * _UNITS[unit]))


@dataclass(frozen=True)
class OOMMessage:
    """What an out-of-memory message says (fields missing from the message are None)."""

    text: str
    requested_bytes: int | None = None
    capacity_bytes: int | None = None
    free_bytes: int | None = None
    gpu_index: int | None = None
    process_bytes: int | None = None             # "Including non-PyTorch memory, this process has ..."
    other_processes: tuple[tuple[int, int], ...] = ()   # "Process 123 has ... memory in use"
    allocated_bytes: int | None = None           # "... is allocated by PyTorch"
    reserved_unallocated_bytes: int | None = None   # "... is reserved by PyTorch but unallocated"
    simulated: bool = False                      # raised by gl.memory_budget

    @property
    def reserved_bytes(self) -> int | None:
        if self.allocated_bytes is None or self.reserved_unallocated_bytes is None:
            return None
        return self.allocated_bytes + self.reserved_unallocated_bytes


def parse_oom_message(text: str) -> OOMMessage | None:
    """Parse PyTorch's CUDA out-of-memory message (current and pre-2.0 wording) or gpulab's simulated
    one; None when ``text`` is not an out-of-memory message.

    Example:
        >>> m = parse_oom_message("CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of "
        ...     "14.75 GiB of which 3.06 MiB is free. Process 42 has 1.00 GiB memory in use. Including non-PyTorch "
        ...     "memory, this process has 13.74 GiB memory in use. Of the allocated memory 13.40 GiB is allocated "
        ...     "by PyTorch, and 200.00 MiB is reserved by PyTorch but unallocated.")
        >>> m.requested_bytes == 20 * 2**20, m.other_processes, m.reserved_unallocated_bytes == 200 * 2**20
        (True, ((42, 1073741824),), True)
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_oom_message needs the error text, got {type(text).__name__}")
    if "out of memory" not in text.lower():
        return None
    get = lambda pat: re.search(pat, text, re.IGNORECASE)  # noqa: E731
    kw: dict[str, Any] = {"text": text, "simulated": "gpulab.memory_budget" in text}
    if m := get(r"Tried to allocate " + _SIZE):
        kw["requested_bytes"] = _bytes(*m.groups())
    elif m := get(r"Requested size: " + _SIZE):          # the per-process-memory-fraction wording
        kw["requested_bytes"] = _bytes(*m.groups())
    elif m := get(r"Requested size: (\d+)"):
        kw["requested_bytes"] = int(m.group(1))
    if m := get(r"(?:GPU (\d+) )?has a total capac\w* of " + _SIZE + r" of which " + _SIZE + r" is free"):
        kw["gpu_index"] = int(m.group(1)) if m.group(1) else None
        kw["capacity_bytes"] = _bytes(m.group(2), m.group(3))
        kw["free_bytes"] = _bytes(m.group(4), m.group(5))
    if m := get(r"this process has " + _SIZE + r" memory in use"):
        kw["process_bytes"] = _bytes(*m.groups())
    kw["other_processes"] = tuple((int(p), _bytes(n, u)) for p, n, u in
                                  re.findall(r"Process (\d+) has " + _SIZE + r" memory in use", text))
    if m := get(r"Of the allocated memory " + _SIZE + r" is allocated by PyTorch"):
        kw["allocated_bytes"] = _bytes(*m.groups())
    if m := get(r"and " + _SIZE + r" is reserved by PyTorch but unallocated"):
        kw["reserved_unallocated_bytes"] = _bytes(*m.groups())
    # PyTorch < 2.0: "(GPU 0; 7.93 GiB total capacity; 130.35 MiB already allocated; 47.06 MiB free;
    #                 188.00 MiB reserved in total by PyTorch)"
    if m := get(r"\(GPU (\d+); " + _SIZE + r" total capacity; " + _SIZE + r" already allocated; " + _SIZE
                + r" free; (?:" + _SIZE + r" allowed; )?" + _SIZE + r" reserved in total by PyTorch"):
        g = m.groups()
        kw.update(gpu_index=int(g[0]), capacity_bytes=_bytes(g[1], g[2]), allocated_bytes=_bytes(g[3], g[4]),
                  free_bytes=_bytes(g[5], g[6]))
        if g[7] is not None:           # a per-process memory fraction was set: that is the usable capacity
            kw["capacity_bytes"] = _bytes(g[7], g[8])
        kw["reserved_unallocated_bytes"] = _bytes(g[9], g[10]) - kw["allocated_bytes"]
    return OOMMessage(**kw)
