"""The worker side: what a training script started by torchrun calls (init_worker, barrier, report, shard_indices)."""
from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._check import checked, whole
from .torchrun import BACKEND_ENV, RESULTS_ENV, TIMEOUT_ENV, default_backend

__all__ = ['WorkerInfo', 'init_worker', 'barrier', 'report', 'shard_indices']


@dataclass(frozen=True)
class WorkerInfo:
    """Where this process sits in the job (torchrun's environment variables) and what it computes on."""

    rank: int
    local_rank: int
    world_size: int
    node: int
    backend: str
    device: Any

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_worker(backend: str | None = None) -> WorkerInfo:
    """Join the job torchrun started: ``init_process_group`` with the launcher's backend (NCCL on this rank's own
    GPU, gloo on CPU otherwise), a timeout as long as the launch's, and a stack dump on ``SIGUSR1`` so a launcher
    can show where a hung rank is stuck. Call once at the top of a training script.

    Example (outside torchrun it is a one-process job):
        >>> import os, torch.distributed as dist
        >>> from gpulab.distributed import free_port
        >>> saved = dict(os.environ)
        >>> os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1")
        >>> info = init_worker("gloo")
        >>> info.rank, info.world_size, str(info.device)
        (0, 1, 'cpu')
        >>> dist.destroy_process_group(); os.environ.clear(); os.environ.update(saved)
    """
    import datetime
    import faulthandler

    import torch
    import torch.distributed as dist

    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    backend = backend or os.environ.get(BACKEND_ENV) or default_backend(int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    if backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    timeout = datetime.timedelta(seconds=float(os.environ.get(TIMEOUT_ENV, "600")))
    if not dist.is_initialized():
        # No device_id: it is a TypeError before torch 2.3 and makes NCCL hang at random on torch 2.6-2.7
        # (pytorch#153960). set_device above already binds this rank to its GPU; barrier() names it.
        dist.init_process_group(backend, timeout=timeout)
    info = WorkerInfo(rank, local_rank, world, int(os.environ.get("GROUP_RANK", "0")), backend, device)
    results = os.environ.get(RESULTS_ENV)
    if results:
        marker = {"rank": rank, "local_rank": local_rank, "pid": os.getpid(),
                  "node_index": int(os.environ.get("GPULAB_NODE_INDEX", "0")), "group_rank": info.node}
        _atomic_write(Path(results) / f"rank-{rank}.started", marker)
    return info


def barrier(info: WorkerInfo) -> None:
    """``dist.barrier()`` that names this rank's GPU on NCCL (``device_ids``), so NCCL never guesses the
    device from the global rank, which hangs when ranks and GPUs are not numbered alike.

    Example (a one-process gloo job):
        >>> import os, torch.distributed as dist
        >>> from gpulab.distributed import free_port
        >>> saved = dict(os.environ)
        >>> os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1")
        >>> barrier(init_worker("gloo"))
        >>> dist.destroy_process_group(); os.environ.clear(); os.environ.update(saved)
    """
    import torch.distributed as dist

    if info.backend == "nccl" and info.device.type == "cuda":
        dist.barrier(device_ids=[info.device.index])
    else:
        dist.barrier()


def _atomic_write(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, default=_jsonable))
    os.replace(tmp, path)


def _jsonable(v: Any) -> Any:
    if hasattr(v, "tolist"):
        return v.tolist()
    if hasattr(v, "item"):
        return v.item()
    raise TypeError(f"report() values must be numbers, strings, lists or dicts of them; got {type(v).__name__}")


_REPORTED: dict[str, Any] = {}    # this process's report, also kept when no launcher collects it


def report(**values: Any) -> dict[str, Any]:
    """Record values for the launcher: merged into this rank's ``rank-<N>.json`` (later calls add or replace
    keys). Returns everything this process reported so far. Values must be JSON-friendly (numbers, strings,
    lists, dicts; tensors and numpy values are converted).

    Example:
        >>> report(items_per_s=1234.5)["items_per_s"]
        1234.5
    """
    rank = int(os.environ.get("RANK", "0"))
    _REPORTED.setdefault("rank", rank)
    _REPORTED.update(json.loads(json.dumps(values, default=_jsonable)))
    target = os.environ.get(RESULTS_ENV)
    if target:
        _atomic_write(Path(target) / f"rank-{rank}.json", _REPORTED)
    return dict(_REPORTED)


# ------------------------------------------------------------------------------------- estimates and tables

@checked(seed="count0", epoch="count0", shuffle="flag", drop_last="flag")
def shard_indices(n_items: int, world_size: int, *, seed: int = 0, epoch: int = 0, shuffle: bool = True,
                  drop_last: bool = False) -> list[list[int]]:
    """The indices ``torch.utils.data.DistributedSampler`` gives each of ``world_size`` ranks for a dataset of
    ``n_items`` (computed here, no process group needed). Without ``drop_last`` an uneven dataset is padded by
    repeating its first indices, so some items are seen twice per epoch.

    Example:
        >>> shard_indices(6, 2, shuffle=False)
        [[0, 2, 4], [1, 3, 5]]
        >>> shard_indices(5, 2, shuffle=False)      # padded to 6 by repeating index 0
        [[0, 2, 4], [1, 3, 0]]
    """
    whole("n_items", n_items)
    whole("world_size", world_size)
    from torch.utils.data import DistributedSampler

    shards = []
    for rank in range(world_size):
        sampler = DistributedSampler(range(n_items), num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed,
                                     drop_last=drop_last)
        sampler.set_epoch(epoch)
        shards.append([int(i) for i in sampler])
    return shards
