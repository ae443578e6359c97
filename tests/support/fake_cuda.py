"""A fake of ``torch.cuda``'s memory calls (the caching allocator's counters, ``mem_get_info``, the memory
history and snapshot), for the memory tools' tests: 3 GiB allocated, 4 GiB reserved on a 16 GiB card by default."""
from __future__ import annotations

import types

GiB, MiB = 1 << 30, 1 << 20


def fake_cuda(allocated=3 * GiB, reserved=4 * GiB, total=16 * GiB, free=10 * GiB):
    calls = []

    def record(**kw):
        calls.append(("record", kw))

    def dump(filename):
        calls.append(("dump", filename))
        with open(filename, "wb") as f:
            f.write(b"snapshot")
    return types.SimpleNamespace(
        is_available=lambda: True, current_device=lambda: 0, mem_get_info=lambda device=None: (free, total),
        memory_allocated=lambda device=None: allocated, memory_reserved=lambda device=None: reserved,
        max_memory_allocated=lambda device=None: allocated + GiB,
        memory_stats=lambda device=None: {"inactive_split_bytes.all.current": 256 * MiB, "num_alloc_retries": 2,
                                     "num_ooms": 1},
        memory=types.SimpleNamespace(_record_memory_history=record, _dump_snapshot=dump), calls=calls)
