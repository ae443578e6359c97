"""Run data-parallel training from a notebook with the real engine: ``torchrun`` and ``torch.distributed``.

A notebook cannot host several training processes itself, so :func:`launch` starts ``torchrun`` (as
``python -m torch.distributed.run`` of the kernel's own interpreter, so the kernel's environment is used),
streams every rank's output with a ``[rank N]`` prefix, collects what each rank reported with
:func:`report` (JSON files, not scraped logs), and fails loudly: a rank that raises surfaces its traceback
in a :class:`DistributedError`; a launch that does not finish in ``timeout_s`` is stopped, every process it
started is killed, and :class:`LaunchTimeout` says which rank hung and where. The backend follows the
device: NCCL when every process can have its own CUDA GPU, gloo (CPU) otherwise.

A training script calls :func:`init_worker` (process group, device, stack dumps on request) and
:func:`report`; ``gpulab/course/scripts/ddp_train.py`` is the course's script. ``nnodes=2`` starts two torchrun
agents on this machine that meet through a c10d rendezvous, exactly as two machines would.

Example (starts two processes; about 10 s on a laptop CPU):
    >>> import gpulab as gl
    >>> from gpulab import course
    >>> run = gl.launch("gpulab.course.scripts.ddp_train", "--steps", "2", "--no-checks", "--no-baseline", nproc=2)
    >>> [r["rank"] for r in run.results], run.backend in ("gloo", "nccl")
    ([0, 1], True)
"""
from .torchrun import BACKEND_ENV, RESULTS_ENV, default_backend, free_port, launch, torchrun_command
from .results import DistributedError, LaunchResult, LaunchTimeout, RankFailure
from .scalability import PublishedScaling, Scaling, allreduce_seconds, mirrored_strategy, scaling
from .worker import WorkerInfo, barrier, init_worker, report, shard_indices

__all__ = ["launch", "LaunchResult", "DistributedError", "LaunchTimeout", "RankFailure", "torchrun_command",
           "default_backend", "free_port", "init_worker", "report", "WorkerInfo", "shard_indices", "allreduce_seconds",
           "scaling", "Scaling", "PublishedScaling", "mirrored_strategy", "RESULTS_ENV", "BACKEND_ENV", "barrier"]
