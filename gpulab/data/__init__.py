"""Is training waiting for data? Time a loader with a training step, split into data wait and compute.

:func:`measure_loader` runs whole epochs of any iterable of batches (a PyTorch ``DataLoader``, a
``tf.data.Dataset``, a DALI iterator) and, for every batch, times how long ``next()`` blocked (the *data
wait*: the step had nothing to work on) and how long the step took (*compute*, including the copy to the
device). With ``monitor=`` it marks both as phases on a :class:`gpulab.Monitor` trace, so
``trace.diagnose()`` can call the run input-bound. It also counts the CPU time of this process *and its
worker processes*, so a loader's CPU utilisation includes its DataLoader workers.

:func:`compare_loaders` puts runs in one table (images/s, speedup, data-wait share, CPU utilisation, share
of the compute-only limit, published figure); :func:`check_batches` checks that two loaders deliver the
same thing (shape, dtype, value range, labels).

Example:
    >>> import gpulab as gl
    >>> batches = [([0.0] * 8, [0] * 8) for _ in range(4)]          # any iterable of (inputs, labels)
    >>> run = gl.measure_loader(batches, lambda batch: sum(batch[0]), label="lists", warmup_batches=0)
    >>> run.items, run.batches, 0.0 <= run.data_wait_share <= 1.0
    (32, 4, True)
"""
from .compare import BatchCheck, LoaderComparison, check_batches, compare_loaders
from .measure import LoaderRun, measure_loader, measure_loaders

__all__ = ["LoaderRun", "measure_loader", "measure_loaders", "LoaderComparison", "compare_loaders", "BatchCheck",
           "check_batches"]
