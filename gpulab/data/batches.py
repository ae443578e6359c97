"""What a loader hands out, and how a measurement treats it: items in a batch, moving a batch to the device and
waiting for GPU batches, the CPU time of the process tree, and loaders that never end or end after one pass."""
from __future__ import annotations

import contextlib
import itertools
import operator
from collections.abc import Mapping
from typing import Any

from .._check import positive, whole

__all__: list[str] = []


def _tree_cpu_s() -> float | None:
    """CPU seconds of this process, its finished (reaped) children and its live children."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is a core dependency
        return None
    me = psutil.Process()
    t = me.cpu_times()
    total = t.user + t.system + t.children_user + t.children_system
    for child in me.children(recursive=True):
        try:
            c = child.cpu_times()
            total += c.user + c.system
        except psutil.Error:   # exited between listing and reading: counted once reaped
            pass
    return total


def _machine_busy_s() -> float | None:
    try:
        import psutil
    except ImportError:  # pragma: no cover
        return None
    t = psutil.cpu_times()
    return sum(getattr(t, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq", "steal"))


def _count(batch: Any) -> int:
    if isinstance(batch, list) and batch and all(isinstance(b, Mapping) for b in batch):
        # DALIGenericIterator's own output: one {output name: tensor} dict per pipeline (GPU)
        return sum(_count(next(iter(b.values()))) for b in batch if b)
    if isinstance(batch, Mapping):
        batch = next(iter(batch.values()))
    first = batch[0] if isinstance(batch, (tuple, list)) else batch
    shape = getattr(first, "shape", None)
    if shape is not None and len(shape):
        return int(shape[0])
    return len(first)


def _cuda_devices(batch: Any) -> list[Any]:
    """The CUDA devices holding tensors of ``batch`` (a tensor, or tuples / lists / dicts of them, as
    DataLoader, :class:`~gpulab.pipelines.DaliLoader` and ``DALIGenericIterator`` yield), in order of
    appearance. Plain attribute reads: no torch import, nearly free for CPU batches."""
    found: list[Any] = []
    todo = [batch]
    while todo:
        x = todo.pop()
        if isinstance(x, (tuple, list)):
            todo.extend(reversed(x))
        elif isinstance(x, Mapping):
            todo.extend(reversed(list(x.values())))
        elif getattr(x, "is_cuda", False) is True:
            dev = x.device
            if all(str(dev) != str(d) for d in found):
                found.append(dev)
    return found


def _wait_for_batch(batch: Any) -> None:
    """Block until a batch on a CUDA device is really there. A DALI GPU pipeline (and any loader that
    copies with ``non_blocking=True``) hands out tensors whose data is still being produced: DALI copies its
    outputs into the torch tensors on torch's current stream, ordered after its own GPU work, and returns
    at once (``nvidia.dali.plugin.pytorch``: ``feed_ndarray(..., cuda_stream=torch.cuda.current_stream())``;
    ``copy_to_external`` orders the copy after the buffer's producer). Without this wait the data clock
    stops early and DALI's decoding and augmentation are charged to the training step. The whole device is
    synchronised, through :func:`gpulab.timing.synchronize` (the one place that knows how): the batches
    DALI has already scheduled ahead count as data work too, not as the step's. CPU batches cost nothing."""
    devices = _cuda_devices(batch)
    if devices:
        from ..timing import synchronize

        for dev in devices:
            synchronize(dev)


def _to_device(batch: Any, device: Any, non_blocking: bool) -> Any:
    if device is None:
        return batch
    if isinstance(batch, (tuple, list)):
        return type(batch)(_to_device(b, device, non_blocking) for b in batch)
    to = getattr(batch, "to", None)
    return to(device, non_blocking=non_blocking) if callable(to) else batch


def _block(out: Any, device: Any) -> None:
    """Wait until the step's work is done: synchronise a torch device; read back a TensorFlow result."""
    if device is not None:
        from ..timing import synchronize

        synchronize(device)
    numpy = getattr(out, "numpy", None)
    if callable(numpy) and type(out).__module__.startswith("tensorflow"):
        numpy()


def _endless(loader: Any) -> str | None:
    """What makes ``loader`` known never to end (``None``: not known to be endless). Only cheap, certain
    signs: an itertools counter, cycle or unbounded repeat, a tf.data dataset of infinite cardinality."""
    if isinstance(loader, (itertools.count, itertools.cycle)):
        return f"itertools.{type(loader).__name__}"
    if isinstance(loader, itertools.repeat) and operator.length_hint(loader, -1) == -1:
        return "itertools.repeat without times="
    cardinality = getattr(loader, "cardinality", None)
    if callable(cardinality) and type(loader).__module__.startswith("tensorflow"):
        with contextlib.suppress(Exception):
            if int(cardinality()) == -1:   # tf.data.INFINITE_CARDINALITY: a .repeat() without a count
                return "a tf.data dataset with .repeat()"
    return None


def _one_shot(loader: Any) -> bool:
    """True for a generator or iterator (``iter(x) is x``): its second pass is empty. DALI's own iterator
    with ``auto_reset`` is the exception: it is its own iterator but starts a new epoch after each one."""
    if not callable(getattr(type(loader), "__next__", None)):   # lists, DataLoader, tf.data: a fresh pass each time
        return False
    if type(loader).__module__.startswith("nvidia.dali") and getattr(loader, "_auto_reset", "no") in ("yes", True):
        return False
    try:
        return iter(loader) is loader
    except TypeError:
        return False


def _check_limits(max_batches: Any, max_s: Any) -> tuple[int | None, float | None]:
    return (None if max_batches is None else whole("max_batches", max_batches),
            None if max_s is None else positive("max_s", max_s, unit="seconds"))
