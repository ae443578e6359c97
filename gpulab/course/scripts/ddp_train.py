"""Data-parallel training with DistributedDataParallel (DDP): every rank runs this file, one process per device.

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m gpulab.course.scripts.ddp_train --steps 10

or, from a notebook, ``gl.launch("gpulab.course.scripts.ddp_train", "--steps", "10", nproc=2)``. Each rank

1. joins the job with :func:`gpulab.distributed.init_worker` (gloo on CPU, NCCL with one GPU per rank);
2. self-checks (``--checks``): after one DDP step its weights equal those of one process stepping on the whole
   batch; ``DistributedSampler`` gave it items no other rank has; accumulating micro-batches under
   ``no_sync()`` gives the same weights as all-reducing after every micro-batch, with 1/k of the all-reduces;
3. measures one process alone (``--baseline``): rank 0 trains a plain copy of the model while the others wait;
4. measures DDP (``--steps``): every rank trains on its own shard with :func:`course.train`, gradients
   all-reduced during backward;
5. times an all-reduce as large as the gradients (the communication each step pays), and with
   ``--allreduce-sweep`` all-reduces of 4 KiB to 16 MiB (the sizes an alpha-beta model is fitted to);
6. with NCCL and ``--profile-overlap``, profiles a few DDP steps with ``torch.profiler`` and reports how much of
   the NCCL all-reduce kernels' time ran while compute kernels ran (:func:`course.profile_comm_overlap`);

and hands its figures to the launcher with :func:`gpulab.distributed.report`.
"""
from __future__ import annotations

import argparse
import copy
import hashlib
import os
import socket
import statistics
import time
from typing import Any, Iterator, Sequence

import gpulab as gl
from gpulab import course
from gpulab.distributed import WorkerInfo, init_worker, report, shard_indices

__all__ = ["parse_args", "params_digest", "max_abs_diff", "self_checks", "wait_quietly", "baseline_alone",
           "ddp_throughput", "allreduce_timing", "allreduce_sweep", "overlap_profile", "main"]

CHECK_MODEL = "mlp"  # no BatchNorm: BatchNorm normalises each rank's shard by its own statistics (see lesson 05)
TIMED_MODELS = ("small_cnn", "resnet_small")   # 32x32 image models, trained on course.pattern_batch (a learnable task)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The script's options (``--help`` lists them)."""
    p = argparse.ArgumentParser(prog="ddp_train", description="DDP training with self-checks and timings.")
    p.add_argument("--model", default="small_cnn", choices=TIMED_MODELS, help="model to time")
    p.add_argument("--batch", type=int, default=32, help="items per rank per step")
    p.add_argument("--steps", type=int, default=10, help="timed steps after --warmup (0: no timing)")
    p.add_argument("--warmup", type=int, default=2, help="untimed first steps")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--accumulation", type=int, default=4, help="micro-batches in the no_sync check")
    p.add_argument("--checks", action=argparse.BooleanOptionalAction, default=True, help="run the self-checks")
    p.add_argument("--baseline", action=argparse.BooleanOptionalAction, default=True,
                   help="time rank 0 training alone first")
    p.add_argument("--allreduce-reps", type=int, default=5, help="timed all-reduces of the gradients' size")
    p.add_argument("--allreduce-sweep", action=argparse.BooleanOptionalAction, default=False,
                   help="time all-reduces of 4 KiB to 16 MiB (x4 each): the sizes an alpha-beta model is fitted to")
    p.add_argument("--profile-overlap", action=argparse.BooleanOptionalAction, default=False,
                   help="NCCL only: profile DDP steps and report the all-reduce time hidden behind compute")
    args = p.parse_args(argv)
    for name in ("batch", "accumulation", "allreduce_reps"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.steps < 0 or args.warmup < 1:
        p.error("--steps must be >= 0 and --warmup >= 1")
    return args


def params_digest(model: Any) -> str:
    """SHA-256 of every parameter's bytes: equal digests mean bit-identical replicas."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def max_abs_diff(a: Any, b: Any) -> float:
    """Largest absolute difference between the parameters of two models of the same shape."""
    return max(float((pa.detach().cpu() - pb.detach().cpu()).abs().max()) for pa, pb in zip(a.parameters(), b.parameters()))


def _ddp(model: Any, info: WorkerInfo) -> Any:
    from torch.nn.parallel import DistributedDataParallel

    model = model.to(info.device)
    return DistributedDataParallel(model, device_ids=[info.device.index] if info.device.type == "cuda" else None)


def _counting_hook(state, bucket):  # no annotations: DDP insists they be exactly GradBucket / Future
    """DDP communication hook: count the all-reduces and their bytes, then do the default all-reduce."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    buf = bucket.buffer()
    state["calls"] += 1
    state["bytes"] += buf.numel() * buf.element_size()
    return allreduce_hook(None, bucket)


def self_checks(info: WorkerInfo, args: argparse.Namespace) -> dict[str, Any]:
    """One DDP step vs one single-process step on the whole batch; the sampler's shards; no_sync vs syncing
    every micro-batch. Returns the figures to report (the launcher's side compares them across ranks)."""
    import torch

    dev, world = info.device, info.world_size
    n = args.batch * world                                   # one global batch, identical on every rank (seeded)
    x, y = course.models.example_batch(CHECK_MODEL, n, seed=args.seed)
    shards = shard_indices(n, world, seed=args.seed)
    mine = torch.tensor(shards[info.rank])
    x_mine, y_mine = x[mine].to(dev), y[mine].to(dev)
    torch.manual_seed(args.seed)
    base = course.models.mlp(hidden=128)
    cfg = course.TrainConfig(progress=False)

    model = _ddp(copy.deepcopy(base), info)                  # DDP: my shard, gradients averaged over ranks
    course.train_step(model, torch.optim.SGD(model.parameters(), lr=args.lr), (x_mine, y_mine), cfg)
    reference = copy.deepcopy(base).to(dev)                  # one process, the whole batch
    course.train_step(reference, torch.optim.SGD(reference.parameters(), lr=args.lr), (x.to(dev), y.to(dev)), cfg)

    accumulated = {}
    for label, no_sync in (("no_sync", True), ("sync_every", False)):
        m = _ddp(copy.deepcopy(base), info)
        count = {"calls": 0, "bytes": 0}
        m.register_comm_hook(count, _counting_hook)
        acc = course.TrainConfig(accumulation_steps=args.accumulation, ddp_no_sync=no_sync, progress=False)
        course.train_step(m, torch.optim.SGD(m.parameters(), lr=args.lr), (x_mine, y_mine), acc)
        accumulated[label] = (m.module, count)
    (quiet, quiet_count), (chatty, chatty_count) = accumulated["no_sync"], accumulated["sync_every"]
    return {
        "check_items": n, "shard": shards[info.rank],
        "param_max_abs_diff": max_abs_diff(model.module, reference),
        "param_max_abs": max(float(p.detach().abs().max()) for p in reference.parameters()),
        "param_digest": params_digest(model.module),
        "no_sync_max_abs_diff": max_abs_diff(quiet, chatty),
        "no_sync_vs_full_batch_max_abs_diff": max_abs_diff(quiet, reference),
        "allreduces_no_sync": quiet_count["calls"], "allreduce_bytes_no_sync": quiet_count["bytes"],
        "allreduces_sync_every": chatty_count["calls"], "allreduce_bytes_sync_every": chatty_count["bytes"],
        "accumulation": args.accumulation,
    }




POLL_S = (0.001, 0.05)    # wait_quietly's first and longest sleep between two looks at the barrier


def wait_quietly(info: WorkerInfo, poll_s: tuple[float, float] = POLL_S) -> None:
    """A barrier that sleeps while it waits, for waits as long as a training run: every rank joins an
    asynchronous ``dist.barrier`` and looks whether it completed, sleeping 1 ms, then twice as long each time up to
    50 ms, in between. NCCL's blocking barrier waits in ``cudaStreamSynchronize``, which spins a CPU core for the
    whole wait (CUDA's default scheduling spins while the host has cores to spare), a core taken from the rank that
    is being timed. The barrier's error (a timeout, a rank that died) is raised once it completed. Ranks leave up to
    one sleep apart: for the short barriers before a timed collective, use :func:`gpulab.distributed.barrier`.

    Example (a one-process gloo job):
        >>> import os, torch.distributed as dist
        >>> from gpulab.distributed import free_port, init_worker
        >>> saved = dict(os.environ)
        >>> os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1")
        >>> wait_quietly(init_worker("gloo"))
        >>> dist.destroy_process_group(); os.environ.clear(); os.environ.update(saved)
    """
    import torch.distributed as dist

    first, longest = poll_s
    if not 0 < first <= longest:
        raise ValueError(f"poll_s must be (first, longest) sleeps in seconds with 0 < first <= longest, got {poll_s!r}")
    nccl = info.backend == "nccl" and info.device.type == "cuda"
    work = dist.barrier(async_op=True, **({"device_ids": [info.device.index]} if nccl else {}))
    delay = first
    while not work.is_completed():
        time.sleep(delay)
        delay = min(longest, 2 * delay)
    work.wait()                # completed: returns at once, or raises the barrier's error


def baseline_alone(info: WorkerInfo, args: argparse.Namespace) -> dict[str, Any]:
    """Rank 0 trains a plain (non-DDP) copy of the model on batches of ``--batch`` while the other ranks wait,
    asleep (:func:`wait_quietly`: no core spinning beside it): the one-process throughput, measured in the same kind
    of process, with the same threads, as a DDP rank. On a CPU, rank 0 then repeats it with every core (``alone_all_cores_*``): one
    process using the whole machine, the real alternative to several processes sharing it."""
    import torch
    import torch.distributed as dist

    out: dict[str, Any] = {}
    if info.rank == 0:
        pool = [course.pattern_batch(args.batch, seed=args.seed + i) for i in range(4)]
        variants = [("alone", torch.get_num_threads())]
        if info.device.type == "cpu":
            variants.append(("alone_all_cores", len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                             else os.cpu_count() or 1))
        before = torch.get_num_threads()
        for name, threads in variants:
            torch.set_num_threads(threads)
            torch.manual_seed(args.seed)
            model = course.models.MODELS[args.model][0]().to(info.device)
            r = course.train(model, torch.optim.SGD(model.parameters(), lr=args.lr), lambda s: pool[s % len(pool)],
                         steps=args.warmup + max(args.steps, 1), warmup_steps=args.warmup,
                         config=course.TrainConfig(progress=False), label=name, track_memory=False)
            out.update({f"{name}_items_per_s": r.items_per_s, f"{name}_median_step_s": r.median_step_s,
                        f"{name}_threads": threads, f"{name}_step_times_s": list(r.step_times_s)})
        torch.set_num_threads(before)
    wait_quietly(info)
    return out


def ddp_throughput(info: WorkerInfo, args: argparse.Namespace) -> dict[str, Any]:
    """Train with DDP for ``--warmup + --steps`` steps, each rank on its own ``DistributedSampler`` shard.
    The job's throughput is set by its slowest rank: ``world_size x batch / slowest median step``."""
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    torch.manual_seed(args.seed)
    model = _ddp(course.models.MODELS[args.model][0](), info)
    x, y = course.pattern_batch(args.batch * info.world_size * 4, seed=args.seed)
    dataset = TensorDataset(x, y)
    sampler = DistributedSampler(dataset, seed=args.seed)    # rank and world size from the process group
    loader = DataLoader(dataset, batch_size=args.batch, sampler=sampler, drop_last=True)

    def epochs() -> Iterator[tuple[Any, Any]]:
        epoch = 0
        while True:
            sampler.set_epoch(epoch)                          # a new shuffle every epoch, the same on all ranks
            yield from loader
            epoch += 1

    stream = epochs()
    r = course.train(model, torch.optim.SGD(model.parameters(), lr=args.lr), lambda s: next(stream),
                 steps=args.warmup + args.steps, warmup_steps=args.warmup, config=course.TrainConfig(progress=False),
                 label="DDP", track_memory=False)
    slowest = torch.tensor([r.median_step_s], dtype=torch.float64, device=info.device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return {"ddp_items_per_s": info.world_size * args.batch / float(slowest), "ddp_median_step_s": r.median_step_s,
            "ddp_rank_items_per_s": r.items_per_s, "ddp_step_times_s": list(r.step_times_s),
            "ddp_losses": list(r.losses), "grad_bytes": grad_bytes, "model": args.model, "batch": args.batch,
            "params_digest_after_training": params_digest(model.module)}


def allreduce_timing(info: WorkerInfo, nbytes: int, reps: int = 5) -> dict[str, Any]:
    """Median time of ``all_reduce`` on a float32 buffer of ``nbytes``, and the bus bandwidth it implies
    (``2 (n-1)/n x bytes / time``, the figure nccl-tests reports; None for one rank)."""
    import torch
    import torch.distributed as dist

    buf = torch.ones(max(1, nbytes // 4), dtype=torch.float32, device=info.device)
    dist.all_reduce(buf)                                     # first call sets up connections and buffers
    times = []
    for _ in range(reps):
        gl.distributed.barrier(info)
        gl.timing.synchronize(info.device)
        t0 = time.perf_counter()
        dist.all_reduce(buf)
        gl.timing.synchronize(info.device)
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    n = info.world_size
    return {"allreduce_bytes": buf.numel() * 4, "allreduce_s": med,
            "allreduce_bus_bytes_per_s": (2 * (n - 1) / n * buf.numel() * 4 / med) if n > 1 else None}


SWEEP_BYTES = tuple(4096 * 4**i for i in range(7))       # 4 KiB to 16 MiB


def allreduce_sweep(info: WorkerInfo, reps: int = 5) -> dict[str, Any]:
    """:func:`allreduce_timing` at each of ``SWEEP_BYTES``: ``allreduce_sweep`` as ``[bytes, median s]`` pairs."""
    return {"allreduce_sweep": [[t["allreduce_bytes"], t["allreduce_s"]]
                                for t in (allreduce_timing(info, n, reps) for n in SWEEP_BYTES)]}


def overlap_profile(info: WorkerInfo, args: argparse.Namespace, steps: int = 3) -> dict[str, Any]:
    """Profile ``steps`` DDP steps (after ``--warmup`` untimed ones) on this rank's GPU and report the NCCL
    all-reduce time and the share of it that overlapped compute kernels. NCCL (GPU) only: with gloo the
    all-reduce runs on CPU threads, not as GPU kernels, and nothing is reported."""
    if info.backend != "nccl":
        return {}
    import torch

    torch.manual_seed(args.seed)
    model = _ddp(course.models.MODELS[args.model][0](), info)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    batch = tuple(t.to(info.device) for t in course.pattern_batch(args.batch, seed=args.seed + info.rank))
    step = lambda: course.train_step(model, opt, batch)
    for _ in range(args.warmup):
        step()
    o = course.profile_comm_overlap(step, steps=steps, device_index=info.device.index)
    return {"overlap_steps": steps, "overlap_comm_s": o.comm_s, "overlap_hidden_s": o.overlapped_s,
            "overlap_compute_s": o.compute_s, "overlap_hidden_share": o.hidden_share,
            "overlap_comm_kernels": o.comm_kernels}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the steps the module docstring lists on this rank and return everything it reported."""
    args = parse_args(argv)
    import torch
    import torch.distributed as dist

    info = init_worker()
    report(rank=info.rank, local_rank=info.local_rank, node=info.node, world_size=info.world_size,
           backend=info.backend, device=str(info.device), threads=torch.get_num_threads(), host=socket.gethostname(),
           pid=os.getpid())
    try:
        if args.checks:
            report(**self_checks(info, args))
        if args.baseline:
            report(**baseline_alone(info, args))
        if args.steps:
            figures = report(**ddp_throughput(info, args))
            report(**allreduce_timing(info, figures["grad_bytes"], args.allreduce_reps))
        if args.allreduce_sweep:
            report(**allreduce_sweep(info, args.allreduce_reps))
        if args.profile_overlap:
            try:                       # a profiler that cannot read the trace must not cost the run its figures
                report(**overlap_profile(info, args))
            except RuntimeError as e:
                report(overlap_error=f"{type(e).__name__}: {e}")
        gl.distributed.barrier(info)
    finally:
        dist.destroy_process_group()
    done = report()
    figures = [f"{k} {done[k]:,.0f} items/s" for k in ("alone_items_per_s", "ddp_items_per_s") if k in done]
    print(f"rank {info.rank}/{info.world_size} ({info.backend}, {info.device}) done" +
          (": " + ", ".join(figures) if figures else ""), flush=True)
    return done


if __name__ == "__main__":
    main()
